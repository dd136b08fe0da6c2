-- pending.lua: users' orders of one voucher bucket still in the stream
-- (admitted, not yet persisted), found by the user's index instead of by
-- scanning the stream: the cost is bounded by the users' own admissions.
--
-- KEYS[1] -> flashsale:{pP}:v:V(:bB)   the bucket's voucher hash, whose o:USER field admit.lua
--                                      appends each admission's position to
-- KEYS[2] -> flashsale:{pP}:orders     the bucket's stream
--
-- ARGV[1..n] -> user ids: a listing names one; the reaper's trimmer names
--               the users whose indexes it found after the sale (HSCAN), a
--               few hundred a call
--
-- A position "ms-P" names order K = P mod 32 (field oK) of stream entry
-- "ms-S", S = floor(P / 32) (admit.lua).
--
-- Returns the users' orders still in the stream, each user's oldest first, each as XRANGE
-- returns an entry holding only it: {entry_id, {'voucher_id', V, 'oK',
-- ORDER}}. Positions no longer in the stream (persisted and acknowledged,
-- or dead-lettered) are dropped from the index, so it holds only the
-- user's pending orders, plus those admitted since the last call.

local out = {}

-- The stream's oldest entry: an id before it has left the stream (the
-- stream's ids only grow, and an entry leaves it acknowledged or
-- dead-lettered), so a position before it is dropped without reading
-- its entry. A sale's buyers' past orders are mostly there: the sweep
-- (pkg/rdb SweepIndexes) then reads one entry a call, not one a position.
local first_ms, first_seq = math.huge, math.huge
local head = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)
if head[1] then
  local ms, seq = string.match(head[1][1], '^(%d+)-(%d+)$')
  first_ms, first_seq = tonumber(ms), tonumber(seq)
end

-- list appends user's orders still in the stream to out and prunes the
-- user's index to them.
local function list(user)
  local field = 'o:' .. user
  local positions = redis.call('HGET', KEYS[1], field)
  if not positions then
    return
  end
  local keep, seen = {}, 0
  for pos in string.gmatch(positions, '%S+') do
    seen = seen + 1
    local ms, p = string.match(pos, '^(%d+)-(%d+)$')
    p = tonumber(p)
    local seq = math.floor(p / 32)
    local id = ms .. '-' .. string.format('%d', seq)
    local o = 'o' .. string.format('%d', p % 32)
    local f = {} -- the entry's fields; none when it left the stream
    ms = tonumber(ms)
    if ms > first_ms or (ms == first_ms and seq >= first_seq) then
      local e = redis.call('XRANGE', KEYS[2], id, id)
      f = e[1] and e[1][2] or {}
    end
    local voucher, value
    for i = 1, #f, 2 do
      if f[i] == 'voucher_id' then
        voucher = f[i + 1]
      elseif f[i] == o then
        value = f[i + 1]
      end
    end
    if voucher and value then
      keep[#keep + 1] = pos
      out[#out + 1] = {id, {'voucher_id', voucher, o, value}}
    end
  end
  if #keep == 0 then
    redis.call('HDEL', KEYS[1], field)
  elseif #keep < seen then
    redis.call('HSET', KEYS[1], field, table.concat(keep, ' '))
  end
end

for _, user in ipairs(ARGV) do
  list(user)
end
return out
