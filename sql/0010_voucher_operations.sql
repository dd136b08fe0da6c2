-- 0010_voucher_operations: every write that goes MySQL → Redis for a
-- voucher is one row of voucher_changes (pkg/settle): its creation, a
-- pause or a resume, as well as a top-up or a new end. creates: the row
-- that puts the voucher in Redis; paused: 1 pause, 0 resume, NULL neither.
-- Vouchers created before this migration have no creation row: they are
-- in Redis already. Idempotent like every migration.
ALTER TABLE voucher_changes ADD COLUMN IF NOT EXISTS creates TINYINT NOT NULL DEFAULT 0 AFTER voucher_id;
ALTER TABLE voucher_changes ADD COLUMN IF NOT EXISTS paused TINYINT NULL AFTER ends_at;
