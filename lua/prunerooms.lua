-- prunerooms.lua: drop from a partition's rooms' index (rdb.RoomsKey) the
-- vouchers whose hash Redis no longer holds (expired after their sale),
-- and count the change in the index's version, in one step: a voucher is
-- written with its field in one transaction or script, so no field is
-- dropped of a voucher that exists. The reaper's trimmer calls it on
-- batches of the index's fields (HSCAN), off the claims' path.
--
-- Every key carries the partition's hash tag {pP}: one slot, so the
-- script runs unchanged on Redis Cluster.
--
-- KEYS[1] -> flashsale:{pP}:rooms        the partition's index: voucher id -> 1 or 0, * (complete), ~v (version)
-- KEYS[2..n] -> flashsale:{pP}:v:V       the vouchers' hashes (bucket 0's), in the order of ARGV
-- ARGV[1..n-1] -> the vouchers' ids (their fields in KEYS[1])
--
-- Returns the number of fields dropped; the version (~v) is raised by one
-- when any was.

local gone = {}
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    gone[#gone + 1] = ARGV[i - 1]
  end
end
if #gone == 0 then
  return 0
end
redis.call('HDEL', KEYS[1], unpack(gone))
redis.call('HINCRBY', KEYS[1], '~v', 1)
return #gone
