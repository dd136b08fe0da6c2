-- pending.lua: one user's orders of one voucher bucket still in the stream
-- (admitted, not yet persisted), found by the user's index instead of by
-- scanning the stream: the cost is bounded by the user's own admissions.
--
-- KEYS[1] -> flashsale:{pP}:v:V(:bB)   the bucket's voucher hash, whose o:USER field admit.lua
--                                      appends each admission's entry id to
-- KEYS[2] -> flashsale:{pP}:orders     the bucket's stream
--
-- ARGV[1] -> user id
--
-- Returns the entries still in the stream, oldest first, as XRANGE returns
-- them ({id, {field, value, ...}}). Ids no longer in the stream (persisted
-- and acknowledged, or dead-lettered) are dropped from the index, so it
-- holds only the user's pending orders, plus those admitted since the last
-- call.

local field = 'o:' .. ARGV[1]
local ids = redis.call('HGET', KEYS[1], field)
if not ids then
  return {}
end
local keep, out, seen = {}, {}, 0
for id in string.gmatch(ids, '%S+') do
  seen = seen + 1
  local e = redis.call('XRANGE', KEYS[2], id, id)
  if #e > 0 then
    keep[#keep + 1] = id
    out[#out + 1] = e[1]
  end
end
if #keep == 0 then
  redis.call('HDEL', KEYS[1], field)
elseif #keep < seen then
  redis.call('HSET', KEYS[1], field, table.concat(keep, ' '))
end
return out
