-- 0008_stock_buckets: a hot voucher's stock may be spread over several
-- Redis buckets (1..64), each in its own hash slot, so its admissions run
-- on several Redis Cluster masters (pkg/rdb keys.go). MySQL keeps the one
-- stock; the number is fixed when the voucher is created.
ALTER TABLE vouchers ADD COLUMN IF NOT EXISTS stock_buckets TINYINT UNSIGNED NOT NULL DEFAULT 1 AFTER stock_total;
