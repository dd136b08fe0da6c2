-- 0018_split: a live split of a voucher's Redis buckets (pkg/rdb split.go).
-- split_to: the number of buckets asked for (by PATCH stock_buckets, or the
-- reaper's detector for a hot voucher), more than stock_buckets while the
-- reaper's splitter has not done it; 0: none asked. split_at: when the last
-- split was done (stock_buckets then took split_to). Idempotent like every
-- migration.
ALTER TABLE vouchers ADD COLUMN IF NOT EXISTS split_to INT NOT NULL DEFAULT 0 AFTER hot_since;
ALTER TABLE vouchers ADD COLUMN IF NOT EXISTS split_at DATETIME(3) NULL AFTER split_to;
