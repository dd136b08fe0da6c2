-- 0013_waiting_room: a voucher's waiting room (pkg/room), as
-- room.Config.Encode writes it: "N:PRE_MS:PASS_MS" (admissions per
-- second, pre-queue and pass in ms); '' none. Idempotent like every
-- migration.
ALTER TABLE vouchers ADD COLUMN IF NOT EXISTS waiting_room VARCHAR(64) NOT NULL DEFAULT '' AFTER pow_max_number;
-- A change of the room (PATCH waiting_room) goes MySQL → Redis like the
-- others: the new room, '0' off, NULL unchanged.
ALTER TABLE voucher_changes ADD COLUMN IF NOT EXISTS room VARCHAR(64) NULL AFTER pow;
