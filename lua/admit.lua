-- admit.lua: the whole admission decision for a batch of claims of one
-- voucher bucket, atomically, in order: each claim is decided with the same
-- rules as if it were alone, after the claims before it in the batch.
--
-- Every key is in the slot of the bucket's partition P (hash tag {pP}):
-- the KEYS are one bucket's, and every count and limit is the bucket's.
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
-- KEYS[6] -> flashsale:{pP}:v:V:dirty      while the bucket pre-copies (below), the records its
--                                          admissions wrote of the users who move, for the splitter
-- and then, nd being #ARGV - 6, the number of days the call's claims fall on (nearly always 1):
-- KEYS[6+j] -> flashsale:{pP}:v:V:day:D   hash user -> units taken on day D, the call's j-th day
-- KEYS[6+nd+k] -> the call's k-th named key: an idempotency record, flashsale:{pP}:v:V:idem:U:K, or a
--                                          proof of work's single use, flashsale:{pP}:v:V:proof:S (S its
--                                          challenge's signature), each named by the claim that has one
--
-- ARGV[1] -> voucher id (written into the entries)
-- ARGV[2] -> the voucher's number of buckets the caller routed the batch by
-- ARGV[3] -> TTL in seconds of the day hashes
-- ARGV[4] -> the call's time, unix milliseconds (the caller's clock, so tests can move it)
-- ARGV[5] -> the claims, one line each, in order (below)
-- ARGV[6] -> the call's horizon, unix milliseconds by Redis's clock, or 0 for none: an
--            admission whose stream entry's id (Redis's clock) is later is undone, and
--            its claim answered 22 (past its horizon), nothing taken
-- ARGV[6+j] -> the call's j-th day D as yyyymmdd in the sale's time zone (written into the orders)
--
-- A claim is one line of ARGV[5], its fields separated by one space, ended by a newline; the
-- fields after the last one that differs from its default are left out, so a common claim is
-- its user alone (pkg/rdb admit.go writes them; a test holds this line to its list):
-- claim line: USER SERIAL DT QTY DAY ACCESS PASS IDEM IDEM_TTL PROOF PROOF_MAX PROOF_TTL
--   USER      user id: never empty, no space or control character (pkg/rdb refuses such a claim)
--   SERIAL    the claim's serial, hex, written into its order; 0 (default): none
--   DT        its time minus ARGV[4], in milliseconds (default 0)
--   QTY       quantity: units taken, all or nothing (1..1000; written into the order; default 1)
--   DAY       j: its day is the call's j-th (default 1)
--   ACCESS    its access code, as the gateway verified it: 1 the user's for the voucher, 2 one that
--             is not (refused only where the voucher needs a code now), 0 none (default)
--   PASS      its waiting-room pass, "PLACE:EXP_MS" (the gateway verified it is the user's, admitted
--             and not lapsed at EXP_MS), or 0: none (default)
--   IDEM      k: its idempotency record is the k-th named key; 0 (default): the claim has no key
--   IDEM_TTL  the record's TTL in seconds
--   PROOF     k: the single use of its verified proof of work is the k-th named key; 0 (default): none
--   PROOF_MAX the proof's difficulty (max number)
--   PROOF_TTL seconds the proof's challenge has left (how long its single use is kept)
--
-- Effects. Each claim is answered by the first of these that applies: an
-- earlier admission under its idempotency key (answered again, FLAGS 1);
-- the voucher missing (15 where KEYS[4] is unset, else 1); the wrong
-- route ({10, n}: ARGV[2] is not the bucket's count); a pause (9); a
-- split moving its user (21); then, in order, the sale window (2, 3), an
-- access code where the voucher needs one now (16, 17), a waiting-room
-- pass (14), a proof of work, spent once (12, 13), the quantity (8), the
-- stock (4), the limits (5, 6). A draw (draw = 1) takes one entry of one
-- unit a user (8, 11), and touches neither stock nor pool. An admission
-- takes its units from stock (a pooled voucher, pool = 1, pops one item
-- "no|amount|code" from KEYS[3]: none left is 4), counts them in u:USER and the
-- day's hash, appends its position to o:USER, writes its idempotency
-- record, and its order into the call's stream entry: up to 32
-- (order.MaxPerEntry) orders an entry, in the order they were decided,
--   voucher_id V  o0 ORDER  o1 ORDER ...
-- each ORDER "user_id created_ms day quantity[ item][ cSERIAL]", item the
-- pooled item, or "entry" for a draw's, absent for units; SERIAL the
-- claim's, absent for none. An order's
-- position is "ms-P", ms and seq those of its entry's id and
-- P = seq * 32 + its index: the order id is made from it (pkg/order), so
-- an entry's sequence must stay below 128 (order.MaxEntrySeq). KEYS[5]
-- grows by the orders the entry carries. While the bucket pre-copies a
-- split ("N~M" in its buckets field) each admission of a user whose
-- bucket of M is another names the records it wrote in KEYS[6].
-- A call whose entry cannot be numbered (sequence 128 or more), or whose
-- entry's id is past the horizon, changes nothing from the claim that
-- began that entry's orders on, and those claims are answered 7 (22 past
-- the horizon), but for a replay, whose answer stands. A refusal changes
-- nothing, and is not remembered under the idempotency key.
--
-- Returns one reply per claim, in order: "POSITION FLAGS[ ITEM]" when
-- admitted (FLAGS 1 a replay under its idempotency key, plus 2 a draw's
-- entry; ITEM the item taken), else the refusal's code (pkg/rdb codes.go,
-- one meaning in every script): 1 (voucher not found), 2 (not started),
-- 3 (ended), 4 (sold out), 5 (user limit), 6 (daily limit),
-- 7 (overloaded): retry, 8 (quantity above the limit), 9 (paused),
-- 10 (route again) as {10, n}: route by n buckets, 11 (already entered),
-- 12 (proof required), 13 (proof invalid), 14 (not admitted) by the
-- room, 15 (not loaded), 16 (access required), 17 (access invalid),
-- 21 (splitting): retry shortly, 22 (past horizon).
--
-- Why the script is shaped so, and what a call costs Redis: pkg/rdb/admission's
-- package doc, "The admission script".

-- The claims, field by field: users[i] is claim i's USER, and so on; a
-- field left out of the line is its default. idems and proofs hold only
-- the claims that have one. Each line is read whole, from its start to
-- its newline: a line that is not USER and numeric fields fails the
-- call before anything is changed (a malformed field is never read as
-- another claim from the middle of its line).
local nd = #ARGV - 6
local base = tonumber(ARGV[4])
local horizon = tonumber(ARGV[6])
local n = 0
local users, serials, nows, qtys, day_keys, day_args, codes = {}, {}, {}, {}, {}, {}, {}
local pass_places, pass_exps = {}, {} -- a pass "PLACE:EXP_MS", read once
local idems, idem_ttls, proofs, proof_maxes, proof_ttls = {}, {}, {}, {}, {}
local keyed, idem_keys = {}, {}
local CLAIM_LINE = '^(%S+) ?(%x*) ?(%-?%d*) ?(%d*) ?(%d*) ?(%d*) ?([%d:%-]*) ?(%d*) ?(%d*) ?(%d*) ?(%d*) ?(%d*)\n'
local lines, at = ARGV[5], 1
while at <= #lines do
  local _, stop, user, serial, dt, qty, day, code, pass, idem, idem_ttl, proof, proof_max, proof_ttl =
      string.find(lines, CLAIM_LINE, at)
  local d = tonumber(day) or 1
  if not stop or (tonumber(qty) or 1) < 1 or d < 1 or d > nd then -- a quantity of 1 or more, a day the call names
    return redis.error_reply('ERR admit.lua: claim line ' .. (n + 1) .. ' is not a claim line')
  end
  at = stop + 1
  n = n + 1
  users[n] = user
  if serial ~= '' and serial ~= '0' then
    serials[n] = serial
  end
  nows[n] = base + (tonumber(dt) or 0)
  qtys[n] = tonumber(qty) or 1
  day_keys[n], day_args[n] = KEYS[6 + d], ARGV[6 + d]
  codes[n] = code
  if pass ~= '' and pass ~= '0' then
    pass_places[n], pass_exps[n] = string.match(pass, '^(%d+):(%-?%d+)$')
  end
  idem = tonumber(idem) or 0
  if idem > 0 then
    idems[n], idem_ttls[n] = KEYS[6 + nd + idem], idem_ttl
    keyed[#keyed + 1] = n
    idem_keys[#idem_keys + 1] = idems[n]
  end
  proof = tonumber(proof) or 0
  if proof > 0 then
    proofs[n], proof_maxes[n], proof_ttls[n] = KEYS[6 + nd + proof], tonumber(proof_max), proof_ttl
  end
end
local out = {}

-- fnv is FNV-1a of s, 32 bits (rdb.UserBucket's), in doubles: h * 16777619
-- mod 2^32 is h * 403 + (h mod 2^8) * 2^24 mod 2^32, below 2^53. Only a
-- splitting bucket computes it.
local function fnv(s)
  local h = 2166136261
  for k = 1, #s do
    h = bit.bxor(h, string.byte(s, k)) % 4294967296
    h = (h * 403 + (h % 256) * 16777216) % 4294967296
  end
  return h
end

-- The fields of an entry's orders, o0 to o31.
local ORDER_FIELDS = {'o0', 'o1', 'o2', 'o3', 'o4', 'o5', 'o6', 'o7', 'o8', 'o9', 'o10', 'o11', 'o12', 'o13', 'o14', 'o15',
  'o16', 'o17', 'o18', 'o19', 'o20', 'o21', 'o22', 'o23', 'o24', 'o25', 'o26', 'o27', 'o28', 'o29', 'o30', 'o31'}

-- answer is an admission's reply.
local function answer(pos, flags, item)
  if item == '' then
    return pos .. ' ' .. flags
  end
  return pos .. ' ' .. flags .. ' ' .. item
end

-- Replays of earlier admissions under the same key: one MGET.
local replayed = {} -- claim i -> true: answered by its key's earlier admission
if #keyed > 0 then
  local prev = redis.call('MGET', unpack(idem_keys))
  for j, i in ipairs(keyed) do
    if prev[j] then
      -- "position item" (item '' for units)
      local pos, item = string.match(prev[j], '^(%S+) ?(.*)$')
      out[i] = answer(pos, 1, item)
      replayed[i] = true
    end
  end
end

-- The voucher and every user's count and index: one HMGET.
local fields = {'stock', 'limit', 'daily', 'start_ms', 'end_ms', 'pool', 'paused', 'buckets', 'draw', 'pow', 'room',
  'access'}
local slot = {} -- user -> position of its u: field (its o: field follows)
for i = 1, n do
  local user = users[i]
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
    return all(15)
  end
  return all(1)
end
local buckets, split, pre = tonumber(v[8] or 1), nil, nil
if not buckets then -- 1 when absent; "N~M" or "N>M" while splitting (pkg/rdb/split)
  local from, state, to = string.match(v[8], '^(%d+)([~>])(%d*)$')
  buckets = tonumber(from)
  if state == '~' then
    pre = tonumber(to)
  else
    split = tonumber(to)
  end
end
if buckets ~= tonumber(ARGV[2]) then
  return all({10, buckets})
end
-- Pre-copy (pre, the buckets the voucher splits into): the records this
-- call writes of users whose bucket of pre is another, with their values,
-- for the splitter to copy without reading them here (KEYS[6],
-- split.lua): "u:USER COUNT", "day:D USER COUNT", and the keys
-- "idem:USER:K VALUE EXP_MS", "proof:S 1 EXP_MS". Made only then: a
-- call of a bucket not splitting makes none of it.
local dirty_log, mover, log_key
if pre then
  local movers = {}
  dirty_log = {}
  mover = function(user)
    if movers[user] == nil then
      local h = fnv(user)
      movers[user] = h % pre ~= h % buckets
    end
    return movers[user]
  end
  log_key = function(key, value, exp_ms)
    dirty_log[#dirty_log + 1] = string.sub(key, #KEYS[1] + 2) .. ' ' .. value .. ' ' .. exp_ms
  end
end
if v[7] == '1' then
  return all(9)
end
if split then
  -- Splitting to split buckets (0: a new bucket, not yet open): the users
  -- whose bucket of split is another are answered 21 (splitting) until it
  -- opens; this bucket keeps deciding the others.
  for i = 1, n do
    if not out[i] then
      local h = split > 0 and fnv(users[i])
      if not h or h % split ~= h % buckets then
        out[i] = 21
      end
    end
  end
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
      local pos, item = string.match(out[i], '^(%S+) %d ?(.*)$')
      out[i] = answer(pos, 3, item)
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
local spent = {} -- claim i -> true: its proof of work was spent by this call

-- spend spends claim i's proof of work, once: false when it was spent
-- before.
local function spend(i)
  if redis.call('SET', proofs[i], '1', 'NX', 'EX', proof_ttls[i]) then
    spent[i] = true
    return true
  end
  return false
end

-- admit counts an admission of claim i and queues its order for the next
-- stream entry.
local function admit(i, qty, item)
  local user, day_key = users[i], day_keys[i]
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
  local tail = '' -- the item, if any; one concatenation makes the value
  if draw then
    tail = ' entry'
  elseif item ~= '' then
    tail = ' ' .. item
  end
  -- The time and quantity as strings: ARGV[4] and '1' for the common
  -- claim (a number made a string at each admission was a formatting).
  local stamp = nows[i] == base and ARGV[4] or string.format('%d', nows[i])
  local units = qty == 1 and '1' or string.format('%d', qty)
  local value
  if serials[i] then
    value = user .. ' ' .. stamp .. ' ' .. day_args[i] .. ' ' .. units .. tail .. ' c' .. serials[i]
  else
    value = user .. ' ' .. stamp .. ' ' .. day_args[i] .. ' ' .. units .. tail
  end
  local a = {i = i, user = user, qty = qty, item = item, day_key = day_key, value = value}
  pending[#pending + 1] = a
  if idems[i] then
    replay[idems[i]] = a
  end
end

-- flush writes the queued orders as one stream entry and answers their
-- claims. An entry that cannot be numbered, or whose id (Redis's clock)
-- is past the call's horizon, undoes them: every claim from the first one
-- decided after the previous entry is answered 7, or 22 past the horizon.
local function flush()
  if #pending == 0 then
    return
  end
  local w = {'voucher_id', ARGV[1]}
  for k, a in ipairs(pending) do
    w[2 * k + 1] = ORDER_FIELDS[k]
    w[2 * k + 2] = a.value
  end
  local id = redis.call('XADD', KEYS[2], '*', unpack(w))
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  seq = tonumber(seq)
  local past = horizon > 0 and tonumber(ms) > horizon
  if seq >= 128 or past then
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
    local unspend = {}
    for i = pending_from, n do
      if not replayed[i] then
        out[i] = past and 22 or 7
      end
      if spent[i] then
        unspend[#unspend + 1] = proofs[i]
        spent[i] = nil
      end
    end
    if #unspend > 0 then
      redis.call('DEL', unpack(unspend))
    end
    pending, overflow = {}, true
    return
  end
  redis.call('INCRBY', KEYS[5], #pending)
  for k, a in ipairs(pending) do
    local pos = ms .. '-' .. (seq * 32 + k - 1)
    a.pos = pos
    out[a.i] = answer(pos, draw and 2 or 0, a.item)
    if a.replays then
      for _, r in ipairs(a.replays) do
        out[r] = answer(pos, draw and 3 or 1, a.item)
      end
    end
    ids[a.user] = ids[a.user] and (ids[a.user] .. ' ' .. pos) or pos
    if room > 0 and redis.call('HSETNX', KEYS[1], 'rx:' .. pass_places[a.i], 1) == 1 then
      -- The pass bought: no longer outstanding (room.lua).
      redis.call('HINCRBY', KEYS[1], 'ru:' .. pass_exps[a.i], 1)
    end
    if idems[a.i] then
      redis.call('SET', idems[a.i], pos .. ' ' .. a.item, 'EX', idem_ttls[a.i])
      if pre and mover(a.user) then
        log_key(idems[a.i], pos, base + idem_ttls[a.i] * 1000)
      end
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
    local user, now, qty, idem = users[i], nows[i], qtys[i], idems[i]
    local pass_exp = room > 0 and tonumber(pass_exps[i])
    if idem and replay[idem] then
      local a = replay[idem]
      if a.pos then
        out[i] = answer(a.pos, draw and 3 or 1, a.item)
      else
        a.replays = a.replays or {}
        a.replays[#a.replays + 1] = i
        out[i] = true -- answered when a's entry is written
      end
    elseif start_ms > 0 and now < start_ms then
      out[i] = 2
    elseif end_ms > 0 and now >= end_ms then
      out[i] = 3
    elseif access ~= 0 and (access < 0 or now < access) and codes[i] ~= '1' then
      out[i] = codes[i] == '2' and 17 or 16
    elseif room > 0 and not (pass_exp and now < pass_exp) then
      out[i] = 14
    elseif room == 0 and pow > 0 and (not proofs[i] or proof_maxes[i] == 0) then
      out[i] = 12
    elseif room == 0 and pow > 0 and (proof_maxes[i] < pow or not spend(i)) then
      out[i] = 13
    elseif draw then
      if qty ~= 1 then
        out[i] = 8
      elseif held[user] >= 1 then
        out[i] = 11
      else
        out[i] = true
        admit(i, 1, '')
      end
    elseif qty > limit or (pooled and qty ~= 1) then
      out[i] = 8
    elseif stock < qty then
      out[i] = 4
    elseif held[user] + qty > limit then
      out[i] = 5
    elseif daily > 0 and day_count(day_keys[i], user) + qty > daily then
      out[i] = 6
    else
      local item = ''
      if pooled then
        item = redis.call('LPOP', KEYS[3])
      end
      if not item then
        out[i] = 4
      else
        out[i] = true
        admit(i, qty, item)
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
    local k = slot[user]
    w[#w + 1] = fields[k] -- u:USER
    w[#w + 1] = held[user]
    if ids[user] then
      w[#w + 1] = fields[k + 1] -- o:USER
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
if pre then
  for user in pairs(dirty) do
    if mover(user) then
      dirty_log[#dirty_log + 1] = 'u:' .. user .. ' ' .. held[user]
    end
  end
  for key, users in pairs(day_dirty) do
    for user in pairs(users) do
      if mover(user) then
        dirty_log[#dirty_log + 1] = string.sub(key, #KEYS[1] + 2) .. ' ' .. user .. ' ' .. days[key][user]
      end
    end
  end
  for i in pairs(spent) do
    if mover(users[i]) then
      log_key(proofs[i], 1, base + proof_ttls[i] * 1000)
    end
  end
  if #dirty_log > 0 then
    redis.call('RPUSH', KEYS[6], unpack(dirty_log))
  end
end
return out
