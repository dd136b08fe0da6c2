-- delconsumer.lua: remove a consumer from the group, but only while it has
-- no pending entries. XGROUP DELCONSUMER drops a consumer's pending entries
-- with it; checking and deleting in one script means no entry delivered in
-- between can be lost that way.
--
-- KEYS[1] -> flashsale:{pP}:orders   the partition's order stream
--
-- ARGV[1] -> consumer group
-- ARGV[2] -> consumer name
--
-- Returns 1 when the consumer was removed, 0 when it has pending entries
-- (or does not exist).

local pending = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if #pending > 0 then
  return 0
end
return redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2]) >= 0 and 1 or 0
