-- 0001_init: vouchers on sale and the orders they produced.
-- Every statement is idempotent (IF NOT EXISTS), so a migration interrupted
-- half-way simply runs again.

CREATE TABLE IF NOT EXISTS vouchers (
  id                      BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  name                    VARCHAR(128)    NOT NULL,
  -- stock: units not yet taken by a persisted order (created or paid).
  stock                   INT             NOT NULL,
  stock_total             INT             NOT NULL,
  per_user_limit          INT             NOT NULL,
  -- 0 = no daily limit
  per_user_daily_limit    INT             NOT NULL DEFAULT 0,
  starts_at               DATETIME(3)     NULL,
  ends_at                 DATETIME(3)     NULL,
  payment_timeout_seconds INT             NOT NULL,
  created_at              DATETIME(3)     NOT NULL,
  PRIMARY KEY (id),
  CONSTRAINT vouchers_stock_nonnegative CHECK (stock >= 0 AND stock <= stock_total)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS orders (
  -- id is the order id the gateway answered with; a re-delivered stream entry
  -- carries the same id, so the primary key makes duplicate delivery harmless.
  id          BIGINT UNSIGNED NOT NULL,
  voucher_id  BIGINT UNSIGNED NOT NULL,
  user_id     VARCHAR(64)     NOT NULL,
  -- created | paid | cancelled | failed: the word the API returns.
  status      VARCHAR(16)     NOT NULL,
  -- why an order failed (e.g. out_of_stock), empty otherwise.
  reason      VARCHAR(64)     NOT NULL DEFAULT '',
  created_at  DATETIME(3)     NOT NULL,
  expires_at  DATETIME(3)     NOT NULL,
  paid_at     DATETIME(3)     NULL,
  updated_at  DATETIME(3)     NOT NULL,
  PRIMARY KEY (id),
  KEY orders_voucher_status (voucher_id, status),
  KEY orders_voucher_user (voucher_id, user_id),
  KEY orders_status_expires (status, expires_at),
  CONSTRAINT orders_status_known CHECK (status IN ('created', 'paid', 'cancelled', 'failed'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
