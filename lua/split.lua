-- split.lua: one step of splitting a voucher's buckets from N to M (a
-- multiple of N) while its sale runs, on one bucket (pkg/rdb split.go
-- runs the steps, in order, and resumes them after a crash: each step is
-- a no-op when done already).
--
-- A bucket's buckets field says where it is: "N" (its voucher has N
-- buckets), "N>M" (an old bucket, splitting: admit.lua answers 21, splitting,
-- to the users whose bucket of M is another, and keeps deciding the
-- others), "M>0" (a new bucket, not yet open: every claim is answered 21,
-- and it takes copies of its users' records), "M" once open or switched.
--
-- KEYS[1] -> the bucket's hash, flashsale:{pP}:v:V(:bB)
-- KEYS[2] -> (copy) the key written: the new bucket's hash, a day hash,
--            its released or changes set; or KEYS[2..], idempotency records
--            and proofs' single uses: all of the new bucket's slot
--
-- ARGV[1] -> the step:
--   freeze  an old bucket: "N" -> "N>M"
--   create  a new bucket, when it does not exist: its hash from ARGV[4..]
--           (field, value pairs: the voucher's settings, as bucket 0 holds
--           them), stock 0, buckets "M>0", expiring at its expire_s
--   copy    into a new bucket not yet open ("M>0"), else nothing:
--           ARGV[4] the kind of KEYS[2]: hash (HSET the pairs ARGV[6..]),
--           set (SADD ARGV[6..]), most (HSET each pair's field to its value
--           when it is larger: rf), string (SET each of KEYS[2..] to its
--           pair of ARGV[6..]: value, PX ms); ARGV[5] the expiry of a hash
--           or set: unix s (0: none; a day hash's is ARGV[5] ms from now,
--           as "+MS")
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

if step == 'freeze' or step == 'switch' then
  local from, to = n, splitting
  if step == 'switch' then
    from, to = splitting, m
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
  local expire_s = tonumber(redis.call('HGET', KEYS[1], 'expire_s')) or 0
  if expire_s > 0 then
    redis.call('EXPIREAT', KEYS[1], expire_s)
  end
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
elseif kind == 'hash' then
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
