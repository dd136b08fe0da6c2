-- admit.lua: the whole admission decision for one claim, atomically.
--
-- Partitioning: a voucher V lives in partition P = V mod FLASHSALE_STREAM_PARTITIONS.
-- Every key below carries the hash tag {pP}, so the script touches one slot and
-- runs unchanged on Redis Cluster. The stream of partition P carries the same tag.
--
-- KEYS[1] -> flashsale:{pP}:v:V            voucher hash: stock, limit, daily, start_ms, end_ms, expire_s, pool, paused,
--                                          buckets, u:USER -> units user USER holds (all time), and
--                                          o:USER -> the stream entry ids of USER's admissions, space-separated
--                                          (the index pending.lua reads a user's pending orders by)
-- KEYS[2] -> flashsale:{pP}:v:V:day:D      hash user -> units taken on day D
-- KEYS[3] -> flashsale:{pP}:v:V:idem:U:K   idempotency record (ignored when ARGV[4] == 0)
-- KEYS[4] -> flashsale:{pP}:orders         the partition's order stream
-- KEYS[5] -> flashsale:{pP}:v:V:pool       list of the items left (pooled kinds: envelopes, codes)
--
-- Cost: every redis.call is a few microseconds of Redis's one thread, so
-- the common claim (units, no daily limit, no idempotency key) makes three:
-- one HMGET reads the voucher and the user's count together (the counts
-- are fields of the voucher hash for that reason), one XADD, one HSET
-- writes the new stock and count, and appends the entry id to the user's
-- index (o:USER) in the same call.
--
-- ARGV[1] -> user id
-- ARGV[2] -> now, unix milliseconds (the caller's clock, so tests can move it)
-- ARGV[3] -> day D as yyyymmdd in the sale's time zone (written into the entry)
-- ARGV[4] -> idempotency TTL in seconds; 0 = the request carries no key
-- ARGV[5] -> TTL in seconds of the day hash
-- ARGV[6] -> voucher id (written into the entry)
-- ARGV[7] -> quantity: units taken, all or nothing (1..1000; written into the entry)
-- ARGV[8] -> the voucher's number of buckets the caller routed the claim by
--
-- A hot voucher's stock may be spread over buckets (stock_buckets, see
-- pkg/rdb keys.go): the KEYS are then those of the user's bucket, and
-- every limit and count here is the bucket's. A caller that routed by the
-- wrong number of buckets (it had not seen the voucher yet) is told the
-- right one, and nothing is changed.
--
-- Two shapes of sale (pkg/sale): a count of identical units (pool = 0), or a
-- pool of distinct items (pool = 1: envelopes, codes), where an admission
-- pops one item, "no|amount|code", from KEYS[6] and is always of one unit;
-- stock then counts the items left.
--
-- Returns {0, entry_id, replayed, item} when admitted, entry_id being the
-- stream entry "ms-seq" from which the caller derives the order id, replayed
-- 1 when an earlier admission under the same idempotency key is returned
-- again, item the item taken ('' for units).
-- Returns {code} when rejected: 1 voucher not found, 2 not started, 3 ended,
-- 4 sold out (fewer than quantity units left), 5 user limit, 6 daily limit
-- (limits count units), 7 stream sequence overflow (retry), 8 quantity above
-- the voucher's per-user limit, or above 1 for a pool (a bad request: it can
-- never be admitted), 9 paused by an operator, {10, n}: the voucher has n
-- buckets, not ARGV[8] (route again).
-- Only admissions are remembered under the idempotency key: a rejection
-- changed nothing, so its retry is simply decided again.

local user = ARGV[1]
local now = tonumber(ARGV[2])
local idem_ttl = tonumber(ARGV[4])
local qty = tonumber(ARGV[7])

if idem_ttl > 0 then
  local prev = redis.call('GET', KEYS[3])
  if prev then
    -- "entry_id item" (item '' for units)
    local id, item = string.match(prev, '^(%S+) ?(.*)$')
    return {0, id, 1, item}
  end
end

local ufield = 'u:' .. user
local ofield = 'o:' .. user
local v = redis.call('HMGET', KEYS[1], 'stock', 'limit', 'daily', 'start_ms', 'end_ms', 'expire_s', 'pool', 'paused', 'buckets', ufield, ofield)
if not v[1] then
  return {1}
end
local buckets = tonumber(v[9]) or 1
if buckets ~= tonumber(ARGV[8]) then
  return {10, buckets}
end
if v[8] == '1' then
  return {9}
end
local start_ms = tonumber(v[4])
local end_ms = tonumber(v[5])
if start_ms > 0 and now < start_ms then
  return {2}
end
if end_ms > 0 and now >= end_ms then
  return {3}
end
local limit = tonumber(v[2])
local pooled = v[7] == '1'
if qty > limit or (pooled and qty ~= 1) then
  return {8}
end
local stock = tonumber(v[1])
if stock < qty then
  return {4}
end
local held = tonumber(v[10]) or 0
if held + qty > limit then
  return {5}
end
local daily = tonumber(v[3])
if daily > 0 and (tonumber(redis.call('HGET', KEYS[2], user)) or 0) + qty > daily then
  return {6}
end

local item = ''
if pooled then
  item = redis.call('LPOP', KEYS[5])
  if not item then
    return {4}
  end
end

local id = redis.call('XADD', KEYS[4], '*', 'voucher_id', ARGV[6], 'user_id', user,
  'created_ms', ARGV[2], 'day', ARGV[3], 'quantity', ARGV[7], 'item', item)
-- The order id keeps 12 bits of the entry's per-millisecond sequence. More than
-- 4096 entries in one millisecond in one partition cannot be numbered: undo.
local seq = tonumber(string.match(id, '-(%d+)$'))
if seq >= 4096 then
  redis.call('XDEL', KEYS[4], id)
  if pooled then
    redis.call('LPUSH', KEYS[5], item)
  end
  return {7}
end

-- Read above in this same script: nothing changed them since. The user's
-- index keeps the ids pending.lua has not yet found persisted.
local ids = id
if v[11] then
  ids = v[11] .. ' ' .. id
end
redis.call('HSET', KEYS[1], 'stock', stock - qty, ufield, held + qty, ofield, ids)
if daily > 0 then
  redis.call('HINCRBY', KEYS[2], user, qty)
  redis.call('EXPIRE', KEYS[2], tonumber(ARGV[5]))
end
if idem_ttl > 0 then
  redis.call('SET', KEYS[3], id .. ' ' .. item, 'EX', idem_ttl)
end
return {0, id, 0, item}
