-- delconsumer.lua: remove a consumer from the group, but only while it has
-- no pending entries. XGROUP DELCONSUMER drops a consumer's pending entries
-- with it; checking and deleting in one script means no entry delivered in
-- between can be lost that way.
--
-- A consumer whose liveness key exists is alive, whatever its idle time
-- says (Redis 7.0 does not reset it on a read that returns nothing):
-- it is never removed.
--
-- KEYS[1] -> flashsale:{pP}:orders   the partition's order stream
-- KEYS[2] -> flashsale:{pP}:alive:C  the consumer's liveness key (rdb.AliveKey)
--
-- ARGV[1] -> consumer group
-- ARGV[2] -> consumer name
--
-- Returns 1 when the consumer was removed, 0 when it has pending entries,
-- is alive (or does not exist).

if redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if #pending > 0 then
  return 0
end
return redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2]) >= 0 and 1 or 0
