-- take.lua: the first half of moving units from one bucket of a hot voucher
-- to another (see pkg/rdb keys.go): take up to ARGV[3] units from this
-- bucket's stock and record the move as owed to its destination. give.lua
-- is the second half, on the destination's slot; a crash between the two
-- leaves the move recorded here, and whoever finds it gives it (once: the
-- destination remembers the moves it was given).
--
-- KEYS[1] -> the source bucket's hash (stock, and moved: the units moved out of it
--             net of those moved in, so that stock + moved falls by its admissions alone)
-- KEYS[2] -> the source bucket's moves:out hash  move id -> "to units"
--
-- ARGV[1] -> move id (unique): "MS.RANDOM", MS when the mover made it
-- ARGV[2] -> the destination bucket's number
-- ARGV[3] -> units wanted (>= 1)
-- ARGV[4] -> MS, the id's time (unix ms)
--
-- Returns the units taken (0 when the bucket has none, or is closed, or
-- the id's time is at or before the bucket's mt: the sweep forgets the
-- moves given up to that time, forgetmoves.lua, and has given every one
-- taken by then).

local h = redis.call('HMGET', KEYS[1], 'stock', 'closed', 'mt')
local stock, mt = tonumber(h[1]), tonumber(h[3])
if not stock or stock <= 0 or h[2] == '1' or (mt and tonumber(ARGV[4]) <= mt) then
  return 0
end
local n = math.min(stock, tonumber(ARGV[3]))
redis.call('HINCRBY', KEYS[1], 'stock', -n)
redis.call('HINCRBY', KEYS[1], 'moved', n)
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. ' ' .. n)
local expire_s = tonumber(redis.call('HGET', KEYS[1], 'expire_s')) or 0
if expire_s > 0 then
  redis.call('EXPIREAT', KEYS[2], expire_s)
end
return n
