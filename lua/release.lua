-- release.lua: give back the reservation of one admitted order, exactly once.
-- Used when MySQL could not accept an order Redis admitted (and, later, for
-- cancellations). The per-voucher set of released orders makes a second call
-- for the same order a no-op, so a caller may retry until it gets an answer.
--
-- KEYS[1] -> flashsale:{pP}:v:V            voucher hash (stock)
-- KEYS[2] -> flashsale:{pP}:v:V:users      hash user -> orders held
-- KEYS[3] -> flashsale:{pP}:v:V:day:D      hash user -> orders taken on day D
-- KEYS[4] -> flashsale:{pP}:v:V:released   set of order ids already released
--
-- ARGV[1] -> order id
-- ARGV[2] -> user id
-- ARGV[3] -> quantity: the order's units, given back together
--
-- Returns 1 when the reservation was given back now, 0 when it had been already
-- (or the voucher is no longer in Redis, its sale long over: nothing to give).

if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if redis.call('SADD', KEYS[4], ARGV[1]) == 0 then
  return 0
end
-- The released set goes when the voucher's keys go (expire_s; 0 = never).
local expire_s = tonumber(redis.call('HGET', KEYS[1], 'expire_s')) or 0
if expire_s > 0 then
  redis.call('EXPIREAT', KEYS[4], expire_s, 'NX')
end
local qty = tonumber(ARGV[3])
redis.call('HINCRBY', KEYS[1], 'stock', qty)
-- The counts never go below zero (a count rebuilt by reconcile may already
-- leave the order out).
local held = tonumber(redis.call('HGET', KEYS[2], ARGV[2])) or 0
if held > 0 then
  redis.call('HINCRBY', KEYS[2], ARGV[2], -math.min(held, qty))
end
local today = tonumber(redis.call('HGET', KEYS[3], ARGV[2])) or 0
if today > 0 then
  redis.call('HINCRBY', KEYS[3], ARGV[2], -math.min(today, qty))
end
return 1
