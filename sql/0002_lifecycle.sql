-- 0002_lifecycle: what cancelling unpaid orders and releasing their stock
-- needs. Idempotent like every migration.

-- day: the sale-time-zone day (yyyymmdd) the order counted against, so a
-- release can give back the right per-day count.
ALTER TABLE orders ADD COLUMN IF NOT EXISTS day CHAR(8) NOT NULL DEFAULT '' AFTER user_id;

-- releases: one row per order whose unit went back to stock (cancelled,
-- failed, dead-lettered). It is written in the same transaction that
-- changes the order and MySQL's stock; redis_released_at is set once
-- Redis got the unit and the user's counts back. A row with
-- redis_released_at NULL is a release still owed to Redis.
CREATE TABLE IF NOT EXISTS releases (
  order_id          BIGINT UNSIGNED NOT NULL,
  voucher_id        BIGINT UNSIGNED NOT NULL,
  user_id           VARCHAR(64)     NOT NULL,
  day               CHAR(8)         NOT NULL,
  reason            VARCHAR(32)     NOT NULL,
  created_at        DATETIME(3)     NOT NULL,
  redis_released_at DATETIME(3)     NULL,
  PRIMARY KEY (order_id),
  KEY releases_owed (redis_released_at, order_id),
  KEY releases_voucher (voucher_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
