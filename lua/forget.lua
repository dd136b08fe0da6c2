-- forget.lua: drop from a bucket's set of released orders the ids of
-- releases MySQL recorded done before a cutoff, and first raise the
-- bucket's rf to that cutoff (never lower it), in one step: release.lua
-- then refuses a caller that knew a release owed before rf (it may hold a
-- release done and forgotten since) instead of giving its units twice.
-- The reaper's trimmer calls it for releases recorded done long enough ago
-- (pkg/settle ForgetAfter) that no caller should still hold one.
--
-- KEYS[1] -> flashsale:{pP}:v:V(:bB)            the bucket's hash (rf)
-- KEYS[2] -> flashsale:{pP}:v:V(:bB):released   its set of released orders
--
-- ARGV[1] -> the cutoff, unix ms
-- ARGV[2..n] -> order ids
--
-- Returns the ids dropped; 0 when the bucket is gone (its sale long over:
-- nothing is written, so no key outlives its expiry).

if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local cutoff = tonumber(ARGV[1])
if cutoff > (tonumber(redis.call('HGET', KEYS[1], 'rf')) or 0) then
  redis.call('HSET', KEYS[1], 'rf', cutoff)
end
if #ARGV < 2 then
  return 0
end
return redis.call('SREM', KEYS[2], unpack(ARGV, 2))
