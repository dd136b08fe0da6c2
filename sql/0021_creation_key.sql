-- 0021_creation_key: the Idempotency-Key a voucher was created under
-- (POST /admin/v1/vouchers, the console's New sale form), unique, so a
-- creation sent twice (a double submit, a retry after a lost answer)
-- makes one voucher; NULL: created without one. Idempotent like every
-- migration.
ALTER TABLE vouchers ADD COLUMN IF NOT EXISTS creation_key VARCHAR(64) NULL AFTER split_at;
CREATE UNIQUE INDEX IF NOT EXISTS vouchers_creation_key ON vouchers (creation_key);
