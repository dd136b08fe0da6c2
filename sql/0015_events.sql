-- 0015_events: the outbox of order events (docs/EVENTS.md). Every
-- transaction that takes an order to a status writes its event here, in
-- the same transaction: a snapshot of the order as the change left it,
-- from which the event's body is made the same way every time it is sent.
-- The reaper gives committed events their sequence (1, 2, 3, ... with no
-- gap, under event_sequence's row lock) in the order it publishes them,
-- and deletes them after FLASHSALE_EVENTS_RETENTION. Idempotent like every
-- migration.

CREATE TABLE IF NOT EXISTS events (
  -- id: the event's id, stable across redeliveries; insertion order.
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  -- sequence: NULL until the reaper sequences it.
  sequence    BIGINT UNSIGNED NULL,
  order_id    BIGINT UNSIGNED NOT NULL,
  voucher_id  BIGINT UNSIGNED NOT NULL,
  user_id     VARCHAR(64)     NOT NULL,
  -- the status the order reached (the event's type is order.STATUS), and
  -- why, for a cancellation or a failure.
  status      VARCHAR(16)     NOT NULL,
  reason      VARCHAR(64)     NOT NULL DEFAULT '',
  quantity    INT             NOT NULL,
  amount      BIGINT          NOT NULL DEFAULT 0,
  code        VARCHAR(64)     NOT NULL DEFAULT '',
  drawn       TINYINT         NOT NULL DEFAULT 0,
  created_at  DATETIME(3)     NOT NULL,
  expires_at  DATETIME(3)     NOT NULL,
  paid_at     DATETIME(3)     NULL,
  -- occurred_at: when the change was written, by MySQL's clock.
  occurred_at DATETIME(3)     NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY events_sequence (sequence),
  KEY events_order (order_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The last sequence given: one row, locked by the reaper that sequences.
CREATE TABLE IF NOT EXISTS event_sequence (
  id   TINYINT UNSIGNED NOT NULL,
  last BIGINT UNSIGNED  NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB;
INSERT IGNORE INTO event_sequence (id, last) VALUES (1, 0);
