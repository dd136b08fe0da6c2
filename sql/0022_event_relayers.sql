-- 0022_event_relayers: the reapers relaying each sink (docs/EVENTS.md,
-- "Relaying in parts"). A sink relayed in parts (FLASHSALE_EVENTS_RELAY_PARTS
-- above 1) has a row in event_sinks a part, named "SINK#i/N"; the live
-- reapers here share the parts evenly, so adding a reaper adds a relay.
-- Idempotent like every migration.

CREATE TABLE IF NOT EXISTS event_relayers (
  sink       VARCHAR(255) NOT NULL,
  -- owner: a reaper's lease token; parts: its FLASHSALE_EVENTS_RELAY_PARTS.
  owner      VARCHAR(255) NOT NULL,
  parts      INT          NOT NULL,
  -- seen_until: live until then (renewed with its leases).
  seen_until DATETIME(3)  NOT NULL,
  PRIMARY KEY (sink, owner)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
