-- outcome.lua: a claim's recorded outcome, and the time by the clock of
-- the Redis that holds it, read in one step.
--
-- KEYS[1] -> flashsale:{pP}:v:V:claim:USER:MS[:SERIAL][:KEY]   the claim's outcome record (pkg/rdb outcome.go)
--
-- Returns {record, seconds, microseconds}: the record's value, or false
-- when there is none, and TIME's two fields. Admissions after this call
-- carry stream ids of this clock or later (admit.lua's horizon), so a
-- claim whose horizon is before this time can no longer be admitted.
local rec = redis.call('GET', KEYS[1])
local t = redis.call('TIME')
return {rec, t[1], t[2]}
