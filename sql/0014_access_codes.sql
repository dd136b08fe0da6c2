-- 0014_access_codes: a voucher's access codes (pkg/access): 0, claims need
-- none; -1, every claim and room join needs one for the whole sale; else
-- they need one until this unix millisecond (a presale), anyone after.
-- Idempotent like every migration.
ALTER TABLE vouchers ADD COLUMN IF NOT EXISTS access BIGINT NOT NULL DEFAULT 0 AFTER waiting_room;
-- A change of the codes (PATCH access) goes MySQL → Redis like the others:
-- the new value as above, NULL unchanged.
ALTER TABLE voucher_changes ADD COLUMN IF NOT EXISTS access BIGINT NULL AFTER room;
