-- admit.lua: the whole admission decision for a batch of claims of one
-- voucher bucket, atomically, in order: each claim is decided with the same
-- rules as if it were alone, after the claims before it in the batch.
--
-- Partitioning: a voucher V lives in partition P = V mod FLASHSALE_STREAM_PARTITIONS.
-- Every key below carries the hash tag {pP}, so the script touches one slot and
-- runs unchanged on Redis Cluster. The stream of partition P carries the same tag.
--
-- KEYS[1] -> flashsale:{pP}:v:V            voucher hash, whose fields it reads: stock, limit, daily, start_ms, end_ms, pool, paused,
--                                          buckets, draw, pow, room, access, u:USER -> units user USER holds (all time), and
--                                          o:USER -> the positions of USER's admissions, space-separated
--                                          (the index pending.lua reads a user's pending orders by); with a
--                                          waiting room it writes rx:PLACE (PLACE's pass bought) and ru:EXP (the
--                                          passes of room.lua's segment ending at EXP that bought)
-- KEYS[2] -> flashsale:{pP}:orders         the partition's order stream
-- KEYS[3] -> flashsale:{pP}:v:V:pool       list of the items left (pooled kinds: envelopes, codes)
-- KEYS[4] -> flashsale:{pP}:loaded         set once the reaper found every voucher MySQL has on sale
--                                          in the partition (read only when the voucher is missing)
-- KEYS[5] -> flashsale:{pP}:backlog        the partition's orders in stream entries not yet
--                                          acknowledged (ack.lua takes them off)
-- and for claim i (1-based):
-- KEYS[3+3i] -> flashsale:{pP}:v:V:day:D   hash user -> units taken on day D of claim i
-- KEYS[4+3i] -> flashsale:{pP}:v:V:idem:U:K  claim i's idempotency record (ignored when its TTL is 0)
-- KEYS[5+3i] -> flashsale:{pP}:v:V:proof:S  claim i's proof of work, S its challenge's signature (set
--                                          once, for its TTL; ignored when the voucher has no gate)
--
-- ARGV[1] -> voucher id (written into the entries)
-- ARGV[2] -> the voucher's number of buckets the caller routed the batch by
-- ARGV[3] -> TTL in seconds of the day hashes
-- and for claim i, from b = 4 + 9(i-1):
-- ARGV[b]   -> user id
-- ARGV[b+1] -> now, unix milliseconds (the caller's clock, so tests can move it)
-- ARGV[b+2] -> day D as yyyymmdd in the sale's time zone (written into the order)
-- ARGV[b+3] -> idempotency TTL in seconds; 0 = the claim carries no key
-- ARGV[b+4] -> quantity: units taken, all or nothing (1..1000; written into the order)
-- ARGV[b+5] -> the difficulty (max number) of the claim's verified proof of work; 0 = none
-- ARGV[b+6] -> seconds the proof's challenge has left (how long its single use is kept)
-- ARGV[b+7] -> the claim's waiting-room pass, "PLACE:EXP_MS" (the gateway verified it is the user's,
--              admitted and not lapsed at EXP_MS), or "0": none
-- ARGV[b+8] -> the claim's access code, as the gateway verified it: 1 the user's for the voucher, 2 one
--              that is not (refused only where the voucher needs a code now), 0 none
--
-- The stream: the admissions of a call travel in one stream entry, up to
-- 32 (order.MaxPerEntry) an entry, in the order they were decided:
--   voucher_id V  o0 ORDER  o1 ORDER ...
-- each ORDER "user_id created_ms day quantity[ item]", item being the
-- pooled item "no|amount|code", or "entry" for an entry of a draw sale,
-- and absent for units. An order's position is "ms-P", ms and seq those
-- of its entry's id and P = seq * 32 + its index (k in oK): the order id is
-- made from it (pkg/order), so an entry's sequence must stay below 128
-- (order.MaxEntrySeq).
--
-- Cost: every redis.call is a few microseconds of Redis's one thread, and
-- so is the script call itself; a batch shares them. The common batch
-- (units, no daily limit, no idempotency keys) makes one HMGET of the
-- voucher and every user's count and index, one XADD and one INCRBY per 32
-- admissions, and one HSET of the new stock, counts and indexes. A daily limit adds one
-- HMGET and one HSET (and EXPIRE) per day; keys add one MGET and a SET per
-- keyed admission; a pool adds an LPOP per admission; a proof-of-work
-- gate a SET per claim; a waiting room an HSETNX per admission (and an
-- HINCRBY the first time a pass buys).
--
-- A hot voucher's stock may be spread over buckets (stock_buckets, see
-- pkg/rdb keys.go): the KEYS are then those of one bucket, and every limit
-- and count here is the bucket's; a batch holds the claims of one bucket. A
-- caller that routed by the wrong number of buckets (it had not seen the
-- voucher yet) is told the right one, and nothing is changed.
--
-- Two shapes of sale (pkg/sale): a count of identical units (pool = 0), or a
-- pool of distinct items (pool = 1: envelopes, codes), where an admission
-- pops one item, "no|amount|code", from KEYS[3] and is always of one unit;
-- stock then counts the items left.
--
-- A voucher with a proof-of-work gate (pow = its difficulty, > 0) takes a
-- claim only with a proof (the gateway verified its signature, user and
-- expiry) of at least that difficulty, once: KEYS[5+3i] is set NX.
--
-- A voucher with access codes (access: -1 for the whole sale, else until
-- that unix ms; pkg/access) takes a claim only with its user's code while
-- they hold; any other time a code is not looked at, right or wrong.
--
-- A voucher with a waiting room (room > 0, pkg/room) takes a claim only
-- with a pass that has not lapsed; the proof of work, if any, was asked
-- at the room's door instead.
--
-- A draw sale (draw = 1, pkg/draw) takes entries instead: an admission is
-- an entry, of one unit's claim, one per user (u:USER counts entries); it
-- touches neither stock nor pool, and its order in the stream is marked entry.
--
-- Returns one reply per claim, in order:
-- {0, position, replayed, item} when admitted ({0, position, replayed, '', 1}
-- for an entry of a draw sale), position being the order's "ms-P" (above)
-- from which the caller derives the order id, replayed 1 when
-- an earlier admission under the same idempotency key is returned again
-- (also one earlier in this batch), item the item taken ('' for units).
-- {code} when rejected: 1 voucher not found, 2 not started, 3 ended, 4 sold
-- out (fewer than quantity units left), 5 user limit, 6 daily limit (limits
-- count units), 7 stream sequence overflow (retry), 8 quantity above the
-- voucher's per-user limit, or above 1 for a pool (a bad request: it can
-- never be admitted), 9 paused by an operator, {10, n}: the voucher has n
-- buckets, not ARGV[2] (route again); a call whose entry cannot be
-- numbered (sequence 128 or more) changes nothing from the claim that
-- began that entry's orders on, and those claims are all answered 7, 11 the user entered this draw already,
-- 12 the voucher needs a proof of work and the claim has none, 13 its proof
-- is too easy or was used before, 14 the voucher has a waiting room and
-- the claim no pass that holds, 15 the voucher is missing from a
-- partition the reaper has not marked loaded: Redis lost its data (it
-- restarted empty) or was never loaded, an outage until the reaper
-- rebuilds it from MySQL, not an unknown voucher, 16 the voucher needs
-- an access code now and the claim has none, 17 it needs one now and the
-- claim's is not the user's.
-- Only admissions are remembered under the idempotency key: a rejection
-- changed nothing, so its retry is simply decided again.

local n = (#ARGV - 3) / 9
local out = {}
local function arg(i, k) return ARGV[4 + 9 * (i - 1) + k] end

-- Replays of earlier admissions under the same key: one MGET.
local keyed, idem_keys = {}, {}
for i = 1, n do
  if tonumber(arg(i, 3)) > 0 then
    keyed[#keyed + 1] = i
    idem_keys[#idem_keys + 1] = KEYS[4 + 3 * i]
  end
end
if #keyed > 0 then
  local prev = redis.call('MGET', unpack(idem_keys))
  for j, i in ipairs(keyed) do
    if prev[j] then
      -- "position item" (item '' for units)
      local pos, item = string.match(prev[j], '^(%S+) ?(.*)$')
      out[i] = {0, pos, 1, item}
    end
  end
end

-- The voucher and every user's count and index: one HMGET.
local fields = {'stock', 'limit', 'daily', 'start_ms', 'end_ms', 'pool', 'paused', 'buckets', 'draw', 'pow', 'room',
  'access'}
local slot = {} -- user -> position of its u: field (its o: field follows)
for i = 1, n do
  local user = arg(i, 0)
  if not out[i] and not slot[user] then
    slot[user] = #fields + 1
    fields[#fields + 1] = 'u:' .. user
    fields[#fields + 1] = 'o:' .. user
  end
end
local v = redis.call('HMGET', KEYS[1], unpack(fields))
local function all(reply)
  for i = 1, n do
    if not out[i] then
      out[i] = reply
    end
  end
  return out
end
if not v[1] then
  if redis.call('EXISTS', KEYS[4]) == 0 then
    return all({15})
  end
  return all({1})
end
local buckets = tonumber(v[8]) or 1
if buckets ~= tonumber(ARGV[2]) then
  return all({10, buckets})
end
if v[7] == '1' then
  return all({9})
end

local stock = tonumber(v[1])
local limit = tonumber(v[2])
local daily = tonumber(v[3])
local start_ms = tonumber(v[4])
local end_ms = tonumber(v[5])
local pooled = v[6] == '1'
local draw = v[9] == '1'
local pow = tonumber(v[10]) or 0
local room = tonumber(v[11]) or 0
local access = tonumber(v[12]) or 0
if draw then
  for i = 1, n do
    if out[i] then -- a replayed entry
      out[i][5] = 1
    end
  end
end
local held, ids, dirty = {}, {}, {}
for user, k in pairs(slot) do
  held[user] = tonumber(v[k]) or 0
  ids[user] = v[k + 1]
end
-- Day counts, read once per day key (one HMGET of the batch's users).
local days, day_dirty = {}, {}
local function day_count(key, user)
  if not days[key] then
    local users = {}
    for u in pairs(slot) do
      users[#users + 1] = u
    end
    local counts = redis.call('HMGET', key, unpack(users))
    days[key] = {}
    for j, u in ipairs(users) do
      days[key][u] = tonumber(counts[j]) or 0
    end
  end
  return days[key][user]
end

-- The admissions decided since the last stream entry was written, and the
-- first claim decided after that entry.
local pending, pending_from = {}, 1
local replay = {} -- idempotency key -> the admission made under it in this batch
local overflow = false

-- admit counts an admission of claim i and queues its order for the next
-- stream entry.
local function admit(i, user, qty, item, day_key, idem, idem_ttl, pass, pass_exp)
  held[user] = held[user] + qty
  dirty[user] = true
  if not draw then
    stock = stock - qty
    if daily > 0 then
      days[day_key][user] = days[day_key][user] + qty
      day_dirty[day_key] = day_dirty[day_key] or {}
      day_dirty[day_key][user] = true
    end
  end
  local a = {i = i, user = user, qty = qty, item = item, day_key = day_key, idem = idem, idem_ttl = idem_ttl,
    pass = pass, pass_exp = pass_exp, replays = {}}
  local value = user .. ' ' .. arg(i, 1) .. ' ' .. arg(i, 2) .. ' ' .. qty
  if draw then
    value = value .. ' entry'
  elseif item ~= '' then
    value = value .. ' ' .. item
  end
  a.value = value
  pending[#pending + 1] = a
  if idem_ttl > 0 then
    replay[idem] = a
  end
end

-- flush writes the queued orders as one stream entry and answers their
-- claims. An entry that cannot be numbered undoes them: every claim from
-- the first one decided after the previous entry is answered 7.
local function flush()
  if #pending == 0 then
    return
  end
  local w = {'voucher_id', ARGV[1]}
  for k, a in ipairs(pending) do
    w[#w + 1] = 'o' .. (k - 1)
    w[#w + 1] = a.value
  end
  local id = redis.call('XADD', KEYS[2], '*', unpack(w))
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  seq = tonumber(seq)
  if seq >= 128 then
    redis.call('XDEL', KEYS[2], id)
    local items = {}
    for k = #pending, 1, -1 do
      local a = pending[k]
      held[a.user] = held[a.user] - a.qty
      if not draw then
        stock = stock + a.qty
        if daily > 0 then
          days[a.day_key][a.user] = days[a.day_key][a.user] - a.qty
        end
      end
      if a.item ~= '' then
        items[#items + 1] = a.item
      end
    end
    if #items > 0 then
      redis.call('LPUSH', KEYS[3], unpack(items))
    end
    for i = pending_from, n do
      out[i] = {7}
    end
    pending, overflow = {}, true
    return
  end
  redis.call('INCRBY', KEYS[5], #pending)
  for k, a in ipairs(pending) do
    local pos = ms .. '-' .. string.format('%d', seq * 32 + k - 1)
    a.pos = pos
    if draw then
      out[a.i] = {0, pos, 0, '', 1}
    else
      out[a.i] = {0, pos, 0, a.item}
    end
    for _, r in ipairs(a.replays) do
      out[r] = {0, pos, 1, a.item, out[a.i][5]}
    end
    ids[a.user] = ids[a.user] and (ids[a.user] .. ' ' .. pos) or pos
    if room > 0 and redis.call('HSETNX', KEYS[1], 'rx:' .. string.match(a.pass, '^(%d+)'), 1) == 1 then
      -- The pass bought: no longer outstanding (room.lua).
      redis.call('HINCRBY', KEYS[1], 'ru:' .. a.pass_exp, 1)
    end
    if a.idem_ttl > 0 then
      redis.call('SET', a.idem, pos .. ' ' .. a.item, 'EX', a.idem_ttl)
    end
  end
  pending = {}
end

for i = 1, n do
  if overflow then
    break
  end
  if #pending == 0 then
    pending_from = i
  end
  if not out[i] then
    local user, now, qty, idem_ttl = arg(i, 0), tonumber(arg(i, 1)), tonumber(arg(i, 4)), tonumber(arg(i, 3))
    local idem, day_key, pass = KEYS[4 + 3 * i], KEYS[3 + 3 * i], arg(i, 7)
    local pass_exp = room > 0 and tonumber(string.match(pass, ':(%d+)$'))
    if idem_ttl > 0 and replay[idem] then
      local a = replay[idem]
      if a.pos then
        out[i] = {0, a.pos, 1, a.item, draw and 1 or nil}
      else
        a.replays[#a.replays + 1] = i
        out[i] = {} -- answered when a's entry is written
      end
    elseif start_ms > 0 and now < start_ms then
      out[i] = {2}
    elseif end_ms > 0 and now >= end_ms then
      out[i] = {3}
    elseif access ~= 0 and (access < 0 or now < access) and arg(i, 8) ~= '1' then
      out[i] = {arg(i, 8) == '2' and 17 or 16}
    elseif room > 0 and not (pass_exp and now < pass_exp) then
      out[i] = {14}
    elseif room == 0 and pow > 0 and tonumber(arg(i, 5)) == 0 then
      out[i] = {12}
    elseif room == 0 and pow > 0 and (tonumber(arg(i, 5)) < pow or
        not redis.call('SET', KEYS[5 + 3 * i], '1', 'NX', 'EX', arg(i, 6))) then
      out[i] = {13}
    elseif draw then
      if qty ~= 1 then
        out[i] = {8}
      elseif held[user] >= 1 then
        out[i] = {11}
      else
        out[i] = {}
        admit(i, user, 1, '', day_key, idem, idem_ttl, pass, pass_exp)
      end
    elseif qty > limit or (pooled and qty ~= 1) then
      out[i] = {8}
    elseif stock < qty then
      out[i] = {4}
    elseif held[user] + qty > limit then
      out[i] = {5}
    elseif daily > 0 and day_count(day_key, user) + qty > daily then
      out[i] = {6}
    else
      local item = ''
      if pooled then
        item = redis.call('LPOP', KEYS[3])
      end
      if not item then
        out[i] = {4}
      else
        out[i] = {}
        admit(i, user, qty, item, day_key, idem, idem_ttl, pass, pass_exp)
      end
    end
  end
  if #pending == 32 then
    flush()
  end
end
flush()

-- Read above in this same script: nothing changed them since. One HSET
-- writes the stock, the counts and the users' indexes (the positions
-- pending.lua has not yet found persisted).
if next(dirty) then
  local w = {'stock', stock}
  for user in pairs(dirty) do
    w[#w + 1] = 'u:' .. user
    w[#w + 1] = held[user]
    if ids[user] then
      w[#w + 1] = 'o:' .. user
      w[#w + 1] = ids[user]
    end
  end
  redis.call('HSET', KEYS[1], unpack(w))
end
for key, users in pairs(day_dirty) do
  local w = {}
  for user in pairs(users) do
    w[#w + 1] = user
    w[#w + 1] = days[key][user]
  end
  redis.call('HSET', key, unpack(w))
  redis.call('EXPIRE', key, tonumber(ARGV[3]))
end
return out
