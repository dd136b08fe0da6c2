-- forgetmoves.lua: forget the ids of moves given to a bucket up to a
-- time (take.lua, give.lua), so that a sale without an end keeps the ids
-- of its recent moves only. The sweep (pkg/rdb Store.ForgetMoves) first
-- raised mt to that time on every bucket of the voucher ("mt": takes of
-- ids made at or before it are refused) and then gave every move still
-- owed; so every move up to the time is given, and give.lua answers one
-- whose time is at or before mg "given" without reading the set.
--
-- KEYS[1] -> the bucket's hash (mt, mg)
-- KEYS[2] -> its moves:in set
--
-- ARGV[1] -> the step: "takes" (raise mt to ARGV[2]) or "given" (raise
--            mg to ARGV[2], then SREM the ids of ARGV[3..] made at or
--            before mg)
-- ARGV[2] -> the time, unix ms
--
-- Returns the ids removed (0 for takes, and for a bucket Redis does not
-- hold: nothing is written).

if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local field = ARGV[1] == 'takes' and 'mt' or 'mg'
local at = math.max(tonumber(ARGV[2]), tonumber(redis.call('HGET', KEYS[1], field)) or 0)
redis.call('HSET', KEYS[1], field, at)
if field == 'mt' then
  return 0
end
local gone = {}
for k = 3, #ARGV do
  local ms = tonumber(string.match(ARGV[k], '^(%d+)%.'))
  if ms and ms <= at then
    gone[#gone + 1] = ARGV[k]
  end
end
if #gone == 0 then
  return 0
end
return redis.call('SREM', KEYS[2], unpack(gone))
