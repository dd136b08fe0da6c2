-- 0017_hot: when a voucher became hot: one of its Redis buckets admitted
-- at least FLASHSALE_HOT_SPLIT_AT units a second for FLASHSALE_HOT_SPLIT_FOR
-- (the reaper's detector writes it, and clears it once the voucher has
-- been below that as long). NULL: not hot. Idempotent like every migration.
ALTER TABLE vouchers ADD COLUMN IF NOT EXISTS hot_since DATETIME(3) NULL AFTER access;
