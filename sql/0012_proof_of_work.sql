-- 0012_proof_of_work: a voucher's proof-of-work gate (pkg/proof). 0: no
-- gate; otherwise the least difficulty (ALTCHA's max number) a claim's
-- proof must have. Idempotent like every migration.
ALTER TABLE vouchers ADD COLUMN IF NOT EXISTS pow_max_number INT NOT NULL DEFAULT 0 AFTER draw_winners;
-- A change of the gate (PATCH proof_of_work) goes MySQL → Redis like the
-- others (voucher_changes, pkg/settle): its new difficulty, NULL unchanged.
ALTER TABLE voucher_changes ADD COLUMN IF NOT EXISTS pow INT NULL AFTER paused;
