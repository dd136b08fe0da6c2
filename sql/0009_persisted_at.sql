-- 0009_persisted_at: when an order reached MySQL, so a sale's report can
-- say how long persistence lagged behind admission and how many orders
-- waited at once. The server's clock fills it on insert (the column is
-- not in the workers' INSERT, which costs them nothing); sessions run in
-- UTC (pkg/db Open). Added NULL first, so orders written before this
-- migration stay NULL (the report counts them as unknown), then given its
-- default.
ALTER TABLE orders ADD COLUMN IF NOT EXISTS persisted_at DATETIME(3) NULL DEFAULT NULL AFTER updated_at;
ALTER TABLE orders MODIFY COLUMN persisted_at DATETIME(3) NULL DEFAULT CURRENT_TIMESTAMP(3);
