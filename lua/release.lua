-- release.lua: give back the reservation of one admitted order, exactly once:
-- an order MySQL could not accept, a cancelled one (by its buyer, or unpaid
-- in time) or a dead-lettered one (pkg/settle). The per-voucher set of released orders makes a second call
-- for the same order a no-op, so a caller may retry until it gets an answer.
--
-- KEYS[1] -> flashsale:{pP}:v:V            voucher hash (stock, u:USER -> units held, expire_s, closed, draw,
--                                          rf: forget.lua's cutoff, unix ms)
-- KEYS[2] -> flashsale:{pP}:v:V:day:D      hash user -> units taken on day D
-- KEYS[3] -> flashsale:{pP}:v:V:released   set of order ids already released
-- KEYS[4] -> flashsale:{pP}:v:V:pool       list of the items left (pooled kinds)
--
-- ARGV[1] -> order id
-- ARGV[2] -> user id
-- ARGV[3] -> quantity: the order's units, given back together
-- ARGV[4] -> the item given back to the pool, "no|amount|code"; '' for units
--            (and for an order that never held its item)
-- ARGV[5] -> when the caller knew the release owed (unix ms, read before it
--            read MySQL's row, or made it): the ids of releases recorded done
--            in MySQL before the bucket's rf were dropped from the set
--            (forget.lua), so a caller that knew a release owed before rf may
--            hold one done since: it is refused, and reads MySQL again
-- ARGV[6] -> the voucher's number of buckets the caller routed the order
--            by (its user's bucket): a release is made where the user's
--            count lives now
-- ARGV[7] -> the user's hash (FNV-1a, 32 bits: rdb.UserBucket's), to
--            tell while the voucher splits whether the user's records
--            move (to a bucket of the new number that is another)
--
-- Returns 1 when the reservation was given back now, 0 when it had been already
-- (or the voucher is no longer in Redis, its sale long over: nothing to give),
-- -1 when the caller's knowledge is older than the bucket's rf: nothing changed,
-- -2 when the voucher is splitting into more buckets (split.lua) and the
-- user's records are moving: nothing changed, release it again once the
-- split is done, {10, n} when the voucher has n buckets, not ARGV[6]:
-- nothing changed, route it again. A user whose records stay in this
-- bucket through the split is released here as at any time: nothing of
-- theirs is copied, and the units given back are this bucket's stock,
-- which a split moves, never copies.

if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local h = redis.call('HMGET', KEYS[1], 'expire_s', 'closed', 'draw', 'rf', 'buckets')
local buckets = tonumber(h[5] or 1)
if not buckets then -- "N~M" or "N>M": splitting (split.lua), "M>0": a new bucket not open
  local from, to = string.match(h[5], '^(%d+)[~>](%d*)$')
  local user_hash, m = tonumber(ARGV[7]), tonumber(to)
  buckets = tonumber(from)
  if not buckets then
    return -2
  end
  if buckets == tonumber(ARGV[6]) and (not user_hash or not m or m == 0 or user_hash % m ~= user_hash % buckets) then
    return -2
  end
end
if buckets ~= tonumber(ARGV[6]) then
  return {10, buckets}
end
if tonumber(ARGV[5]) < (tonumber(h[4]) or 0) then
  return -1
end
if redis.call('SADD', KEYS[3], ARGV[1]) == 0 then
  return 0
end
-- The released set goes when the voucher's keys go (expire_s; 0 = never);
-- an id goes sooner once MySQL has recorded its release done (forget.lua).
local expire_s = tonumber(h[1]) or 0
if expire_s > 0 then
  redis.call('EXPIREAT', KEYS[3], expire_s, 'NX')
end
local qty = tonumber(ARGV[3])
-- A closed voucher (an envelope sale over and refunded, see rdb.ClosePool)
-- takes no stock back: what was not grabbed went to the sender. Nor does a
-- draw sale, whose entries never took any: a released entry gives back
-- only the user's entry (u:USER), who may enter again.
local closed = h[2] == '1' or h[3] == '1'
if not closed then
  redis.call('HINCRBY', KEYS[1], 'stock', qty)
end
if ARGV[4] ~= '' and not closed then
  -- At the head: the next claim sells it again. A pool emptied by its last
  -- admission is gone, expiry and all: the push makes it anew.
  redis.call('LPUSH', KEYS[4], ARGV[4])
  if expire_s > 0 then
    redis.call('EXPIREAT', KEYS[4], expire_s, 'NX')
  end
end
-- The counts never go below zero (a count rebuilt by reconcile may already
-- leave the order out).
local ufield = 'u:' .. ARGV[2]
local held = tonumber(redis.call('HGET', KEYS[1], ufield)) or 0
if held > 0 then
  redis.call('HINCRBY', KEYS[1], ufield, -math.min(held, qty))
end
local today = tonumber(redis.call('HGET', KEYS[2], ARGV[2])) or 0
if today > 0 then
  redis.call('HINCRBY', KEYS[2], ARGV[2], -math.min(today, qty))
end
return 1
