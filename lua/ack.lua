-- ack.lua: acknowledge entries and delete them from the stream in one step, so
-- the stream holds exactly the entries not yet persisted (its length is the
-- backlog) and never grows without bound. Called only after the MySQL commit.
--
-- KEYS[1] -> flashsale:{pP}:orders   the partition's order stream
--
-- ARGV[1] -> consumer group
-- ARGV[2..n] -> entry ids (the caller sends at most one batch: bounded)
--
-- Returns the number of entries acknowledged.

local acked = redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 2))
redis.call('XDEL', KEYS[1], unpack(ARGV, 2))
return acked
