-- change.lua: apply an operator's change of a voucher (more stock, a new
-- end of sale, a pause or a resume, a proof-of-work gate put on or taken
-- off, a waiting room put on, changed or taken away, access codes asked
-- for or not) to Redis, exactly once. MySQL recorded
-- the change first (voucher_changes, pkg/settle); the set of applied
-- changes makes a second call for the same change a no-op, so a caller may
-- retry until it gets an answer.
--
-- KEYS[1] -> flashsale:{pP}:v:V            voucher hash (stock, end_ms, expire_s, end_change, paused, pause_change,
--                                          pow, pow_change, room, room_pre_ms, room_pass_ms, room_change,
--                                          access, access_change)
-- KEYS[2] -> flashsale:{pP}:v:V:changes    set of change ids applied
-- KEYS[3] -> flashsale:{pP}:v:V:released   the released set (its expiry follows the voucher's)
-- KEYS[4] -> flashsale:{pP}:v:V:pool       the pool (likewise)
-- KEYS[5] -> flashsale:{pP}:rooms          the partition's index of waiting rooms (rdb.RoomsKey)
--
-- ARGV[1] -> change id
-- ARGV[2] -> units to add to stock (0: none)
-- ARGV[3] -> new end of sale, unix ms (0: unchanged)
-- ARGV[4] -> new expiry of the voucher's keys, unix s (with ARGV[3])
-- ARGV[5] -> 1 pause, 0 resume, -1 neither
-- ARGV[6] -> the proof-of-work gate's new difficulty (0: off), -1 unchanged
-- ARGV[7] -> the waiting room's new settings "N:PRE_MS:PASS_MS" (pkg/room), "0" off, "" unchanged
-- ARGV[8] -> the access codes' new setting (admit.lua's access field: 0 none, -1 the whole sale, else
--            until unix ms), "" unchanged
-- ARGV[9] -> the voucher's id, its field in KEYS[5], on bucket 0 ("" on the others: the index is bucket 0's)
--
-- Returns 1 when applied now, 0 when it had been already, -1 when Redis
-- does not hold the voucher (nothing is written: its creation is still
-- owed, or Redis lost it and reconcile rebuilds it whole, changes
-- included), -2 when the voucher is splitting into more buckets and the
-- change must wait (nothing is written: applied again once the split is
-- done, to every bucket).
--
-- While a bucket pre-copies ("N~M", split.lua) a change is applied as at
-- any time: the split copies bucket 0's settings and changes applied into
-- the new buckets again once the old ones are frozen (pkg/rdb/split,
-- open). A new end waits (the new buckets' records are copied with the
-- keys' expiry as it was), and so does a waiting room (never put on a
-- voucher splitting); any change waits while a bucket is frozen ("N>M":
-- past the new buckets' last copy) or new ("M>0").

local at = redis.call('HGET', KEYS[1], 'buckets')
if not at then
  return -1
end
if not tonumber(at) and not (string.find(at, '~', 1, true) and tonumber(ARGV[3]) == 0 and ARGV[7] == '') then
  return -2
end
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then
  return 0
end
local add = tonumber(ARGV[2])
if add > 0 then
  redis.call('HINCRBY', KEYS[1], 'stock', add)
end
local end_ms = tonumber(ARGV[3])
-- A new end is taken only from a change newer than the one that set the
-- current end, so changes applied out of order leave the latest.
local id = tonumber(ARGV[1])
if end_ms > 0 and id > (tonumber(redis.call('HGET', KEYS[1], 'end_change')) or 0) then
  local expire_s = tonumber(ARGV[4])
  redis.call('HSET', KEYS[1], 'end_ms', end_ms, 'expire_s', expire_s, 'end_change', id)
  for i = 1, 4 do
    if i ~= 2 and redis.call('EXISTS', KEYS[i]) == 1 then
      redis.call('EXPIREAT', KEYS[i], expire_s)
    end
  end
end
-- Likewise a pause or a resume: the latest change wins, whatever the order.
local paused = tonumber(ARGV[5])
if paused >= 0 and id > (tonumber(redis.call('HGET', KEYS[1], 'pause_change')) or 0) then
  redis.call('HSET', KEYS[1], 'paused', paused, 'pause_change', id)
end
-- And a new gate.
local pow = tonumber(ARGV[6])
if pow >= 0 and id > (tonumber(redis.call('HGET', KEYS[1], 'pow_change')) or 0) then
  redis.call('HSET', KEYS[1], 'pow', pow, 'pow_change', id)
end
-- And a new waiting room.
if ARGV[7] ~= '' and id > (tonumber(redis.call('HGET', KEYS[1], 'room_change')) or 0) then
  local rate, pre_ms, pass_ms = string.match(ARGV[7], '^(%d+):(%d+):(%d+)$')
  redis.call('HSET', KEYS[1], 'room', rate or 0, 'room_pre_ms', pre_ms or 0, 'room_pass_ms', pass_ms or 0,
    'room_change', id)
  if ARGV[9] ~= '' then
    local has = (tonumber(rate) or 0) > 0 and '1' or '0'
    if redis.call('HGET', KEYS[5], ARGV[9]) ~= has then
      redis.call('HSET', KEYS[5], ARGV[9], has)
      redis.call('HINCRBY', KEYS[5], '~v', 1) -- the index's version: gateways read what changed
    end
  end
end
-- And new access codes.
if ARGV[8] ~= '' and id > (tonumber(redis.call('HGET', KEYS[1], 'access_change')) or 0) then
  redis.call('HSET', KEYS[1], 'access', ARGV[8], 'access_change', id)
end
local expire_s = tonumber(redis.call('HGET', KEYS[1], 'expire_s')) or 0
if expire_s > 0 then
  redis.call('EXPIREAT', KEYS[2], expire_s)
end
return 1
