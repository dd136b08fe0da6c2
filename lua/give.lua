-- give.lua: the second half of a move between buckets (take.lua): add the
-- units to the destination bucket's stock, exactly once per move id.
--
-- KEYS[1] -> the destination bucket's hash (stock, moved: take.lua's)
-- KEYS[2] -> the destination bucket's moves:in set of move ids given
--
-- ARGV[1] -> move id
-- ARGV[2] -> units
-- ARGV[3] -> the id's time (unix ms, take.lua's MS; '' for an id made
--            before ids had one)
--
-- Returns 1 when given now, 0 when it had been already (or the bucket is
-- gone: its sale long over, or Redis lost it and reconcile rebuilds it).
-- A move whose time is at or before the bucket's mg was given: the sweep
-- gave every move taken up to mg before it raised mg and forgot their
-- ids (forgetmoves.lua), so a caller still holding one is not obeyed.

local mg = redis.call('HGET', KEYS[1], 'mg')
if mg and ARGV[3] ~= '' and tonumber(ARGV[3]) <= tonumber(mg) then
  return 0
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then
  return 0
end
redis.call('HINCRBY', KEYS[1], 'stock', tonumber(ARGV[2]))
redis.call('HINCRBY', KEYS[1], 'moved', -tonumber(ARGV[2]))
local expire_s = tonumber(redis.call('HGET', KEYS[1], 'expire_s')) or 0
if expire_s > 0 then
  redis.call('EXPIREAT', KEYS[2], expire_s)
end
return 1
