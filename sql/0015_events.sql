-- 0015_events: the outbox of order events (docs/EVENTS.md). Every
-- transaction that takes orders to a status writes their events here, in
-- the same transaction: one row of up to 1,000 events (a worker's batch
-- is one row, not a row per order), each a snapshot of its order as the
-- change left it, from which its body is made the same way every time it
-- is sent. The reaper gives committed rows their sequences (the k-th
-- event of a row has sequence + k; 1, 2, 3, ... with no gap, under
-- event_sequence's row lock) in the order it publishes them, and deletes
-- them after FLASHSALE_EVENTS_RETENTION. Idempotent like every migration.

CREATE TABLE IF NOT EXISTS events (
  -- id: in the order written; an event's id is "id.k".
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  -- sequence: the row's first event's; NULL until the reaper sequences it.
  sequence    BIGINT UNSIGNED NULL,
  -- n: the row's events; events: their snapshots, a JSON array.
  n           INT             NOT NULL,
  events      MEDIUMBLOB      NOT NULL,
  -- occurred_at: when the change was written, by MySQL's clock.
  occurred_at DATETIME(3)     NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY events_sequence (sequence)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The last sequence given: one row, locked by the reaper that sequences.
CREATE TABLE IF NOT EXISTS event_sequence (
  id   TINYINT UNSIGNED NOT NULL,
  last BIGINT UNSIGNED  NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB;
INSERT IGNORE INTO event_sequence (id, last) VALUES (1, 0);
