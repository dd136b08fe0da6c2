-- 0003_covering_index: one index serves the per-user counts the batch
-- transaction takes under the voucher's row lock and the per-status counts
-- of the admin API; each index costs every insert, and inserts are the
-- workers' main cost.
ALTER TABLE orders ADD INDEX IF NOT EXISTS orders_voucher_user_status (voucher_id, user_id, status);
ALTER TABLE orders DROP INDEX IF EXISTS orders_voucher_status;
ALTER TABLE orders DROP INDEX IF EXISTS orders_voucher_user;
