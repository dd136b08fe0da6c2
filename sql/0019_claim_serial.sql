-- 0019_claim_serial: the serial of the claim that made an order (pkg/rdb
-- Claim.Serial), so that a buyer asking about one claim by its id finds
-- that claim's order, not another one of the same buyer made in the same
-- millisecond. 0 for orders made before serials. Idempotent like every
-- migration; MariaDB and MySQL 8 add a last column in place, without
-- copying the table.
ALTER TABLE orders ADD COLUMN IF NOT EXISTS claim_serial BIGINT UNSIGNED NOT NULL DEFAULT 0;
