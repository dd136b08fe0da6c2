-- 0004_store_probes: one row per process that asked whether MySQL accepts
-- writes (db.Store.Writable). A worker whose batch keeps failing writes here
-- before it blames the batch: if this write fails too, the store is out
-- (read-only after a failover, disk full, privileges) and nothing is failed.
CREATE TABLE IF NOT EXISTS store_probes (
  who VARCHAR(128) NOT NULL,
  at  DATETIME(3)  NOT NULL,
  PRIMARY KEY (who)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
