-- room.lua: a voucher's waiting room (pkg/room), atomically: first its
-- clock (the pre-queue closes at the start, unused passes lapse, waiters
-- are admitted at the room's rate, never past what the stock can still
-- sell), then the caller's operation: tick (nothing more), join, or get
-- (the caller's place); or peek: the state as the last tick left it, the
-- clock not run and nothing written (a claim's read: a write is a tick's
-- job, never a claim's).
--
-- Every key carries the voucher's hash tag {pP}: one slot, so the script
-- runs unchanged on Redis Cluster.
--
-- KEYS[1] -> flashsale:{pP}:v:V            voucher hash, read: stock, limit, start_ms, end_ms, paused, pow, access,
--                                          expire_s, room (admissions per second; 0 or absent: no room),
--                                          room_pre_ms, room_pass_ms, and ru:EXP -> passes of the segment ending
--                                          at EXP that bought (admit.lua counts them; deleted here when it lapses)
-- KEYS[2] -> flashsale:{pP}:v:V:room       the room's state hash: seed, pre (pre-queue joins), frozen (1 once
--                                          the pre-queue is closed and placed), tail (places given), front (places
--                                          admitted), last_ms (the rate's clock), segs (the unlapsed admissions,
--                                          "upto:exp_ms:passes ...", oldest first: the places after the previous
--                                          segment's up to upto hold a pass until exp_ms, passes of them), gone
--                                          (places up to it lapsed, the last lapsed segment's upto), and the
--                                          room's story, for the sale's report: j:SEC -> tail after the joins of
--                                          unix second SEC, a:SEC -> front after its admissions (two fields a
--                                          second of a room's life at the most); stall_ms (a tick's clock that
--                                          found the room stalled: paused, or its passes at their cap; 0: not
--                                          stalled), open_ms (a stalled room that can admit again admits from
--                                          then on, ARGV[12] after the tick that found it so)
-- KEYS[3] -> flashsale:{pP}:v:V:room:w     waiters: user -> place, "pK" for the K-th join of the pre-queue (its
--                                          place is pkg/room's shuffle of K among pre, once frozen), else "T"
-- KEYS[4] -> flashsale:{pP}:v:V:proof:S    a join's proof of work (set NX for its TTL), or any key of the slot
-- KEYS[5] -> flashsale:{pP}:loaded         the partition's loaded mark (read only when the voucher is missing)
-- KEYS[6] -> flashsale:{pP}:v:V:room:told  the places told how the sale ended, for the report: bit 2T set once
--                                          ticket T heard sold_out, bit 2T+1 once it heard closed
--
-- ARGV[1] -> now, unix ms (the caller's clock)
-- ARGV[2] -> "tick", "join", "get" or "peek"
-- ARGV[3] -> user (join, get)
-- ARGV[4] -> a seed for a room that has none yet (pkg/room NewSeed: "2-" and 16 hex digits; a room seeded before keeps 16 hex digits)
-- ARGV[5] -> the join's verified proof of work's difficulty; 0: none
-- ARGV[6] -> seconds the proof's challenge has left
-- ARGV[7] -> the pass factor: passes outstanding never exceed stock x factor
-- ARGV[8] -> the most places the room gives (FLASHSALE_ROOM_MAX_WAITERS): a join past them is refused
-- ARGV[9] -> seconds a room of a voucher without an expiry (no ends_at) is kept after its last change:
--            its keys then expire, as a voucher's with ends_at do at its expire_s
-- ARGV[10] -> the join's access code (pkg/access), as the gateway verified it: 1 the user's for the
--             voucher, 2 one that is not (refused only where the voucher needs a code now), 0 none
-- ARGV[11] -> tick: bits of KEYS[6] to set, space-separated (the answers the gateway gave since its last
--             tick); '' none
-- ARGV[12] -> ms a stalled room waits, once it can admit again, before it does (room.OpenDelay)
--
-- Why a stalled room waits: a gateway refuses from memory the claim of a
-- place its last state of a stalled room does not admit (no Redis call),
-- trusting that state for half of ARGV[12] after the tick that confirmed
-- the stall (stall_ms, refreshed every 200 ms while it lasts): no place is
-- admitted, so nobody is told "admitted", before ARGV[12] after a tick
-- later than that one.
--
-- Returns {code, place, front, tail, pre, frozen, stock, live, segs, seed,
-- start_ms, end_ms, paused, rate, pass_ms, limit, gone, stall_ms, open_ms}; code 0, or one of
-- the codes every script shares (pkg/rdb codes.go: a code means one thing
-- in every script): 1 (voucher not found), 18 (no room): it has no
-- waiting room (then only the code), 2 (not started): a join before the
-- queue opens (start - room_pre_ms), 3 (ended): a join after the sale
-- ended, 12 (proof required): the voucher wants a proof of work to join
-- and there is none, 13 (proof invalid): the proof is too easy or used
-- before, 19 (not in queue): get, the user never joined, 20 (room full):
-- join, the room has given ARGV[8] places, 15 (not loaded): no such
-- voucher in a partition the reaper has not marked loaded (Redis lost its
-- data: an outage, not an unknown voucher), 16 (access required): join,
-- the voucher needs an access code now and there is none,
-- 17 (access invalid): join, it needs one now and the join's is not the
-- user's.
-- place is '' unless the user has one.
--
-- Passes outstanding (admitted, not lapsed, not used to buy) are the
-- unlapsed segments' passes less their ru: counts.
--
-- Cost: a tick is three HMGETs, and an HSET and two EXPIREs when it
-- changed anything (plus an HDEL per lapsing segment, and an HSET of the
-- second's a: field when it admitted, and a SETBIT per waiter told the
-- sale's end since the gateway's last tick); a join adds an HGET, two
-- HSETs, two EXPIREs (and a SET of the proof). Ticks come from each
-- gateway a few times a second per room it serves, not per waiter: a
-- waiter's poll is answered by the gateway from the last tick's state. A
-- peek is three HMGETs and an HGET at most: it never writes.

local now, op, user = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local peek = op == 'peek'
local v = redis.call('HMGET', KEYS[1], 'stock', 'start_ms', 'end_ms', 'paused', 'room', 'room_pre_ms', 'room_pass_ms',
  'pow', 'expire_s', 'limit', 'access')
if not v[1] then
  if redis.call('EXISTS', KEYS[5]) == 0 then
    return {15}
  end
  return {1}
end
local rate = tonumber(v[5]) or 0
if rate <= 0 then
  return {18}
end
local stock, start_ms, end_ms = tonumber(v[1]), tonumber(v[2]) or 0, tonumber(v[3]) or 0
local paused, pre_ms, pass_ms = v[4] == '1', tonumber(v[6]) or 0, tonumber(v[7]) or 120000
local pow, expire_s, limit = tonumber(v[8]) or 0, tonumber(v[9]) or 0, tonumber(v[10]) or 1
local access = tonumber(v[11]) or 0

local s = redis.call('HMGET', KEYS[2], 'seed', 'pre', 'frozen', 'tail', 'front', 'last_ms', 'segs', 'gone',
  'stall_ms', 'open_ms')
local seed = s[1] or ARGV[4]
local pre, frozen, tail = tonumber(s[2]) or 0, tonumber(s[3]) or 0, tonumber(s[4]) or 0
local front, last_ms, gone = tonumber(s[5]) or 0, tonumber(s[6]) or 0, tonumber(s[8]) or 0
local stall_ms, open_ms = tonumber(s[9]) or 0, tonumber(s[10]) or 0

-- dirty: the state changed and is written back (a room nobody is
-- admitted from, before its start say, is only read). A peek writes
-- nothing.
local dirty = not s[1] and not peek
local sec = math.floor(now / 1000)
local admitted_now = false

-- Passes lapse: a segment past its end is gone, with its unused passes.
local segs, used = {}, {}
for upto, exp, n in string.gmatch(s[7] or '', '(%d+):(%d+):(%d+)') do
  upto, exp, n = tonumber(upto), tonumber(exp), tonumber(n)
  if exp <= now and not peek then
    redis.call('HDEL', KEYS[1], 'ru:' .. exp)
    gone, dirty = upto, true
  else
    segs[#segs + 1] = {upto, exp, n}
    used[#used + 1] = 'ru:' .. exp
  end
end
local live = 0
if #segs > 0 then
  local u = redis.call('HMGET', KEYS[1], unpack(used))
  for i, g in ipairs(segs) do
    live = live + math.max(g[3] - (tonumber(u[i]) or 0), 0)
  end
end

-- The pre-queue closes at the start: its joins hold places 1..pre.
if not peek and frozen == 0 and now >= start_ms then
  frozen, tail, dirty = 1, pre, true
end

-- Admission at the room's rate, at most one second's worth at once (a
-- room idle, or paused, banks no more), while the sale is open and the
-- stock can sell more passes; a stalled room (paused, or its passes at
-- their cap) admits again ARGV[12] after a tick finds it can.
local cap = math.max(math.floor(stock * tonumber(ARGV[7])) - live, 0)
if not peek and frozen == 1 and (end_ms == 0 or now < end_ms) then
  if paused or cap <= 0 then
    if stall_ms == 0 or now - stall_ms >= 200 then
      stall_ms, open_ms, dirty = now, 0, true
    end
  elseif stall_ms > 0 then
    stall_ms, open_ms, dirty = 0, now + tonumber(ARGV[12]), true
  end
end
if not peek and frozen == 1 and stall_ms == 0 and now >= open_ms and (end_ms == 0 or now < end_ms) then
  if last_ms == 0 or now - last_ms > 1000 then
    last_ms = now - 1000
  end
  local credit = math.floor((now - last_ms) * rate / 1000)
  if credit >= 1 then
    dirty = true
    local k = math.min(credit, tail - front, cap)
    if k < credit then
      last_ms = now -- nobody to admit, or no stock: no credit is banked
    else
      last_ms = last_ms + math.floor(credit * 1000 / rate)
    end
    if k > 0 then
      front, live, admitted_now = front + k, live + k, true
      -- Admissions less than a hundredth of a pass apart share a segment
      -- (and its end: the earlier), so a room holds at most ~100.
      local exp, last = now + pass_ms, segs[#segs]
      if last and exp - last[2] < math.max(pass_ms / 100, 1000) then
        last[1], last[3] = front, last[3] + k
      else
        segs[#segs + 1] = {front, exp, k}
      end
    end
  end
end

local segstr = s[7] or ''
if dirty then
  local parts = {}
  for i, g in ipairs(segs) do
    parts[i] = g[1] .. ':' .. g[2] .. ':' .. g[3]
  end
  segstr = table.concat(parts, ' ')
  redis.call('HSET', KEYS[2], 'seed', seed, 'pre', pre, 'frozen', frozen, 'tail', tail, 'front', front,
    'last_ms', last_ms, 'segs', segstr, 'gone', gone, 'stall_ms', stall_ms, 'open_ms', open_ms)
  if admitted_now then
    redis.call('HSET', KEYS[2], 'a:' .. sec, front)
  end
end

-- The room's keys go with the voucher's (expire_s); a room of a voucher
-- that never expires is kept ARGV[9] seconds after its last change.
local function keep(key)
  if expire_s > 0 then
    redis.call('EXPIREAT', key, expire_s)
  else
    redis.call('EXPIRE', key, ARGV[9])
  end
end
if dirty then
  keep(KEYS[2])
  keep(KEYS[3])
end
if not peek and ARGV[11] and ARGV[11] ~= '' then
  for bit in string.gmatch(ARGV[11], '%d+') do
    redis.call('SETBIT', KEYS[6], bit, 1)
  end
  keep(KEYS[6])
end

local code, place = 0, ''
if op == 'join' or op == 'get' then
  place = redis.call('HGET', KEYS[3], user)
  if not place then
    place = ''
    if op == 'get' then
      code = 19
    elseif end_ms > 0 and now >= end_ms then
      code = 3
    elseif now < start_ms - pre_ms then
      code = 2
    elseif access ~= 0 and (access < 0 or now < access) and ARGV[10] ~= '1' then
      code = ARGV[10] == '2' and 17 or 16
    elseif (frozen == 1 and tail or pre) >= tonumber(ARGV[8]) then
      code = 20
    elseif pow > 0 and tonumber(ARGV[5]) == 0 then
      code = 12
    elseif pow > 0 and (tonumber(ARGV[5]) < pow or
        not redis.call('SET', KEYS[4], '1', 'NX', 'EX', ARGV[6])) then
      code = 13
    else
      if frozen == 0 then
        pre = pre + 1
        place = 'p' .. pre
        redis.call('HSET', KEYS[2], 'pre', pre)
      else
        tail = tail + 1
        place = tostring(tail)
        redis.call('HSET', KEYS[2], 'tail', tail, 'j:' .. sec, tail)
      end
      redis.call('HSET', KEYS[3], user, place)
      keep(KEYS[2])
      keep(KEYS[3])
    end
  end
end
return {code, place, front, tail, pre, frozen, stock, live, segstr, seed, start_ms, end_ms, paused and 1 or 0, rate,
  pass_ms, limit, gone, stall_ms, open_ms}
