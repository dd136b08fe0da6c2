-- lease.lua: renew a consumer's hold on entries it is still working on, so
-- the reaper (XAUTOCLAIM with a min-idle time) does not take them from a
-- live worker that is only waiting, e.g. retrying through a MySQL outage.
-- XCLAIM ... JUSTID resets an entry's idle time without counting a
-- delivery. Only entries this consumer still owns are renewed: a worker
-- that was stopped and lost them to the reaper does not take them back.
--
-- KEYS[1] -> flashsale:{pP}:orders   the partition's order stream
--
-- ARGV[1] -> consumer group
-- ARGV[2] -> consumer name
-- ARGV[3..n] -> entry ids (one batch: bounded)
--
-- Returns the number of entries renewed.

local renewed = 0
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if p[1] and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
    renewed = renewed + 1
  end
end
return renewed
