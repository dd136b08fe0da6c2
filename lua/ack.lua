-- ack.lua: acknowledge stream entries and remove them from the stream in
-- one step, and take their orders off the partition's backlog count, so
-- the stream holds exactly the entries not yet persisted, the count their
-- orders, and the stream never grows without bound. Called only after the
-- MySQL commit of every order of the entries.
--
-- KEYS[1] -> flashsale:{pP}:orders   the partition's order stream
-- KEYS[2] -> flashsale:{pP}:backlog  the partition's orders not yet acknowledged (admit.lua adds them)
--
-- ARGV[1] -> consumer group
-- ARGV[2k], ARGV[2k+1] -> an entry id and the number of orders it carries
--                          (the caller sends at most one batch: bounded)
--
-- Returns the number of entries acknowledged.
--
-- Each entry is acknowledged alone, so that only the orders of entries
-- this call acknowledged (not one acknowledged before, e.g. by a worker
-- and then by the reaper) leave the count. An empty stream holds no order:
-- the count is then dropped, whatever it says, so an entry deleted
-- unacknowledged (an operator's XDEL or DEL) leaves it wrong only until
-- the workers catch up.
--
-- XDEL finds each id by walking its listpack node from the node's first
-- entry: 4-5 µs an entry in nodes of 100 (docs/BENCHMARKS.md). XTRIM MINID
-- drops whole nodes below an id and walks at most one. Workers acknowledge
-- batches mostly in the order they read them, so after the XACK every
-- entry below the oldest one still pending is acknowledged (the group is
-- the stream's only reader, reads it from 0, and a consumer is deleted only
-- once nothing is pending for it: the entries below were all delivered,
-- and none is pending): trimming to that entry removes them. Only ids at or
-- above it (acknowledged while an older batch is still in a worker's
-- hands) are deleted one by one. With nothing pending, every entry up to
-- the last one delivered is acknowledged.

local key, group = KEYS[1], ARGV[1]

-- forget drops the count of an empty stream (see above).
local function forget()
  if redis.call('XLEN', key) == 0 and redis.call('GET', KEYS[2]) then
    redis.call('DEL', KEYS[2])
  end
end
local ids, acked, orders = {}, 0, 0
for i = 2, #ARGV, 2 do
  ids[#ids + 1] = ARGV[i]
  if redis.call('XACK', key, group, ARGV[i]) == 1 then
    acked = acked + 1
    orders = orders + tonumber(ARGV[i + 1])
  end
end
if orders > 0 then
  redis.call('DECRBY', KEYS[2], orders)
end

local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq), ms
end

-- A few ids (a quiet stream, where batches are small) are deleted one by
-- one: cheaper than finding the trim point. So are ids whose stream or
-- group is gone (XPENDING's error; XACK then acknowledged nothing).
if #ids <= 4 then
  redis.call('XDEL', key, unpack(ids))
  forget()
  return acked
end
local first = redis.pcall('XPENDING', key, group, '-', '+', 1)
if first.err then
  redis.call('XDEL', key, unpack(ids))
  forget()
  return acked
end

local floor -- every entry below it is acknowledged
if #first > 0 then
  floor = first[1][1]
else
  local last
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', key)) do
    local name, delivered
    for i = 1, #g, 2 do
      if g[i] == 'name' then
        name = g[i + 1]
      elseif g[i] == 'last-delivered-id' then
        delivered = g[i + 1]
      end
    end
    if name == group then
      last = delivered
    end
  end
  local _, seq, ms = parse(last)
  floor = ms .. '-' .. string.format('%d', seq + 1)
end
redis.call('XTRIM', key, 'MINID', floor)

local fms, fseq = parse(floor)
local rest = {}
for _, id in ipairs(ids) do
  local ms, seq = parse(id)
  if ms > fms or (ms == fms and seq >= fseq) then
    rest[#rest + 1] = id
  end
end
if #rest > 0 then
  redis.call('XDEL', key, unpack(rest))
end
forget()
return acked
