-- split.lua: one step of splitting a voucher's buckets from N to M (a
-- multiple of N) while its sale runs, on one bucket (pkg/rdb/split
-- runs the steps, in order, and resumes them after a crash: each step is
-- a no-op when done already).
--
-- A bucket's buckets field says where it is: "N" (its voucher has N
-- buckets), "N~M" (an old bucket, pre-copying: admit.lua decides every
-- claim as before and names the records it writes of the users whose
-- bucket of M is another, the moving users, in the bucket's dirty list),
-- "N>M" (an old bucket, frozen: admit.lua answers 21, splitting, to the
-- moving users, and keeps deciding the others), "M>0" (a new bucket, not
-- yet open: every claim is answered 21, and it takes copies of its users'
-- records), "M" once open or switched.
--
-- KEYS[1] -> the bucket's hash, flashsale:{pP}:v:V(:bB)
-- KEYS[2] -> (precopy) its dirty list, flashsale:{pP}:v:V(:bB):dirty, and
--            KEYS[3] its partition's stream;
--            (copy) the key written: the new bucket's hash, a day hash,
--            its released or changes set; or KEYS[2..], idempotency records
--            and proofs' single uses: all of the new bucket's slot
--
-- ARGV[1] -> the step:
--   precopy an old bucket: "N" -> "N~M"; its dirty list begins, expiring
--           at the bucket's expire_s, with "since MS": every order admitted
--           before has a position's ms at most MS (the clock now, or the
--           stream's last id when ahead), every one after a larger or equal
--   read    (no write) the values and expiries (ms) of KEYS[2..], an old
--           bucket's idempotency records and proofs, as {key, value, ms,
--           ...}, leaving out those gone and the records of admissions
--           after ARGV[4] ms (its dirty list's since: they are named there)
--   freeze  an old bucket: "N~M" (or "N") -> "N>M"
--   create  a new bucket, when it does not exist: its hash from ARGV[4..]
--           (field, value pairs: the voucher's settings, as bucket 0 holds
--           them), stock 0, buckets "M>0", expiring at its expire_s
--   copy    into a new bucket not yet open ("M>0"), else nothing:
--           ARGV[4] the kind of KEYS[2]: set (SADD ARGV[6..]), most (a
--           hash of counts: HSET each pair's field of ARGV[6..] to its
--           value when it is larger: u:USER, a day's, rf), string (SET each
--           of KEYS[2..] to its pair of ARGV[6..]: value, PX ms), fields
--           (HSET ARGV[6..]'s pairs: the voucher's settings); ARGV[5]
--           the expiry of a hash or set: unix s (0: none; a day hash's is
--           ARGV[5] ms from now, as "+MS")
--   open    a new bucket: "M>0" -> "M"
--   switch  an old bucket: "N>M" -> "M"; with ARGV[4] 1 (bucket 0) it also
--           records N among the counts it had (was, space-separated: orders
--           admitted before stay indexed in the buckets of those counts)
-- ARGV[2] -> N
-- ARGV[3] -> M
--
-- Returns 1 when the step changed the bucket, 0 when it had been done (or,
-- for copy, the new bucket is open: its records are its own now); an
-- error when the bucket is in no state the step follows.

local step, n, m = ARGV[1], ARGV[2], ARGV[3]
local splitting, closed = n .. '>' .. m, m .. '>0'
local at = redis.call('HGET', KEYS[1], 'buckets')

local pre = n .. '~' .. m

-- expire_with_bucket makes key expire when the bucket's keys do (its
-- expire_s; 0: never).
local function expire_with_bucket(key)
  local expire_s = tonumber(redis.call('HGET', KEYS[1], 'expire_s')) or 0
  if expire_s > 0 then
    redis.call('EXPIREAT', key, expire_s)
  end
end
if step == 'read' then
  local since, out = tonumber(ARGV[4]), {}
  for k = 2, #KEYS do
    local val = redis.call('GET', KEYS[k])
    if val and not (string.find(KEYS[k], ':idem:', 1, true) and (tonumber(string.match(val, '^(%d+)%-')) or 0) > since) then
      out[#out + 1] = KEYS[k]
      out[#out + 1] = val
      out[#out + 1] = redis.call('PTTL', KEYS[k])
    end
  end
  return out
end

if step == 'precopy' then
  if at == n then
    -- since: no admission before this call has an order later than this
    -- ms (the clock's, or the stream's last id's if ahead of it)
    local t = redis.call('TIME')
    local since = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local info = redis.pcall('XINFO', 'STREAM', KEYS[3])
    if type(info) == 'table' and not info.err then
      for k = 1, #info, 2 do
        if info[k] == 'last-generated-id' then
          since = math.max(since, tonumber(string.match(info[k + 1], '^(%d+)')))
        end
      end
    end
    redis.call('HSET', KEYS[1], 'buckets', pre)
    redis.call('RPUSH', KEYS[2], 'since ' .. since)
    expire_with_bucket(KEYS[2])
    return 1
  end
  if at == pre or at == splitting or at == m then
    return 0
  end
  return redis.error_reply('ERR split.lua: precopy ' .. n .. '>' .. m .. ' of a bucket at ' .. tostring(at))
end

if step == 'freeze' or step == 'switch' then
  local from, to = n, splitting
  if step == 'switch' then
    from, to = splitting, m
  elseif at == pre then
    from = pre
  end
  if at == from then
    redis.call('HSET', KEYS[1], 'buckets', to)
    if step == 'switch' and ARGV[4] == '1' then
      local was = redis.call('HGET', KEYS[1], 'was')
      redis.call('HSET', KEYS[1], 'was', was and (was .. ' ' .. n) or n)
    end
    return 1
  end
  if at == to or at == m then
    return 0
  end
  return redis.error_reply('ERR split.lua: ' .. step .. ' ' .. n .. '>' .. m .. ' of a bucket at ' .. tostring(at))
end

if step == 'create' then
  if at then
    return 0
  end
  local w = {}
  for k = 4, #ARGV do
    w[#w + 1] = ARGV[k]
  end
  redis.call('HSET', KEYS[1], 'stock', 0, 'buckets', closed, unpack(w))
  expire_with_bucket(KEYS[1])
  return 1
end

if step == 'open' then
  if at == closed then
    redis.call('HSET', KEYS[1], 'buckets', m)
    return 1
  end
  if at == m then
    return 0
  end
  return redis.error_reply('ERR split.lua: open ' .. m .. ' of a bucket at ' .. tostring(at))
end

if step ~= 'copy' then
  return redis.error_reply('ERR split.lua: no step ' .. tostring(step))
end
if at ~= closed then
  return 0
end
local kind, expire = ARGV[4], ARGV[5]
local args = {}
for k = 6, #ARGV do
  args[#args + 1] = ARGV[k]
end
if kind == 'string' then -- KEYS[2..]: each its value and PX ms, in ARGV[6..]
  for k = 2, #KEYS do
    redis.call('SET', KEYS[k], args[2 * k - 3], 'PX', args[2 * k - 2])
  end
  return 1
end
if kind == 'set' then
  redis.call('SADD', KEYS[2], unpack(args))
elseif kind == 'fields' then
  redis.call('HSET', KEYS[2], unpack(args))
elseif kind == 'most' then
  for k = 1, #args, 2 do
    local had = tonumber(redis.call('HGET', KEYS[2], args[k])) or 0
    if tonumber(args[k + 1]) > had then
      redis.call('HSET', KEYS[2], args[k], args[k + 1])
    end
  end
else
  return redis.error_reply('ERR split.lua: no kind ' .. tostring(kind))
end
local plus = string.match(expire, '^%+(%d+)$')
if plus then
  redis.call('PEXPIRE', KEYS[2], plus)
elseif tonumber(expire) > 0 then
  redis.call('EXPIREAT', KEYS[2], expire)
end
return 1
