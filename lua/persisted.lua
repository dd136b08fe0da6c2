-- persisted.lua: drop the indexes of pending admissions (o:USER, which
-- admit.lua appends to and pending.lua reads) of users none of whose
-- indexed orders is still pending, in one bucket's voucher hash: the
-- hash then keeps a field for a buyer only while they have an order on
-- its way to MySQL, not one for every buyer a sale ever had. Run after
-- the stream entries of persisted orders are acknowledged (and deleted);
-- an index with an order still pending is left whole, for pending.lua to
-- read and prune (it may rewrite a field; this only deletes one).
--
-- KEYS[1] -> flashsale:{pP}:v:V(:bB)   the bucket's voucher hash
-- KEYS[2] -> flashsale:{pP}:orders     the bucket's stream
--
-- ARGV[1..n] -> user ids whose orders were just persisted
--
-- A position "ms-P" is in stream entry "ms-S", S = floor(P / 32)
-- (admit.lua); an entry is deleted once every order of it is persisted,
-- so an order is pending while its entry is in the stream.
--
-- Returns the number of indexes dropped.

local dropped = 0
for i = 1, #ARGV do
  local field = 'o:' .. ARGV[i]
  local positions = redis.call('HGET', KEYS[1], field)
  if positions then
    local pending = false
    for pos in string.gmatch(positions, '%S+') do
      local ms, p = string.match(pos, '^(%d+)-(%d+)$')
      if not ms then
        pending = true -- not a position this script knows: leave it to pending.lua
        break
      end
      local id = ms .. '-' .. string.format('%d', math.floor(tonumber(p) / 32))
      if #redis.call('XRANGE', KEYS[2], id, id) > 0 then
        pending = true
        break
      end
    end
    if not pending then
      redis.call('HDEL', KEYS[1], field)
      dropped = dropped + 1
    end
  end
end
return dropped
