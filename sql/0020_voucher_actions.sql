-- 0020_voucher_actions: the record of what was done to each voucher and
-- by whom, one row per action (docs/OPERATIONS.md, "Who did what"): its
-- creation, a pause, a resume, units added, a new end, a gate, a room or
-- access codes put on or off, a split asked. Written in the transaction
-- that makes the change, so a row exists exactly when its change does.
-- actor: "admin" (the admin API, the console), "cli:USER" (the reaper's
-- commands, USER the operating system's), "reaper" (the hot-voucher
-- detector). before_value, after_value: the fields the action changed, as
-- the API names them. Idempotent like every migration.
CREATE TABLE IF NOT EXISTS voucher_actions (
  id           BIGINT       NOT NULL AUTO_INCREMENT,
  voucher_id   BIGINT       NOT NULL,
  at           DATETIME(3)  NOT NULL,
  actor        VARCHAR(128) NOT NULL,
  action       VARCHAR(64)  NOT NULL,
  before_value VARCHAR(255) NOT NULL DEFAULT '',
  after_value  VARCHAR(255) NOT NULL DEFAULT '',
  PRIMARY KEY (id),
  KEY voucher_actions_voucher (voucher_id, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
