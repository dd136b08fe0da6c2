-- 0016_event_sinks: where each sink of the order events stands
-- (docs/EVENTS.md, "Sinks"). A sink is Kafka or one webhook endpoint; its
-- row holds the sequence it has delivered up to, the reaper that holds
-- its lease (so each event goes out once per sink while reapers live)
-- and, while the event after that fails, since when and how often. An
-- event a webhook endpoint did not take within
-- FLASHSALE_EVENTS_WEBHOOK_RETRY_FOR is recorded in event_failures.
-- Idempotent like every migration.

CREATE TABLE IF NOT EXISTS event_sinks (
  name           VARCHAR(255)    NOT NULL,
  -- delivered_upto: every event up to this sequence was delivered (or
  -- recorded failed); the relay goes on after it.
  delivered_upto BIGINT UNSIGNED NOT NULL,
  -- owner, lease_until: the reaper relaying this sink, until when.
  owner          VARCHAR(255)    NULL,
  lease_until    DATETIME(3)     NULL,
  -- The event after delivered_upto: failing since, attempts, last error.
  failing_since  DATETIME(3)     NULL,
  attempts       INT             NOT NULL DEFAULT 0,
  last_error     VARCHAR(255)    NOT NULL DEFAULT '',
  -- disabled: the endpoint answered 410 Gone; nothing goes to it until
  -- "reaper events redeliver" starts it again.
  disabled       VARCHAR(255)    NOT NULL DEFAULT '',
  -- seen_at: when a reaper last relayed it (a sink no reaper has relayed
  -- for the retention does not hold back the deletion of old events).
  seen_at        DATETIME(3)     NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS event_failures (
  sink      VARCHAR(255)    NOT NULL,
  sequence  BIGINT UNSIGNED NOT NULL,
  failed_at DATETIME(3)     NOT NULL,
  attempts  INT             NOT NULL,
  error     VARCHAR(255)    NOT NULL,
  -- redeliver: 1 once "reaper events redeliver --failed" asked for it.
  redeliver TINYINT         NOT NULL DEFAULT 0,
  PRIMARY KEY (sink, sequence)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
