-- 0007_operations: running a sale. A voucher can be paused (claims answer
-- 409 paused until it is resumed); a paid order records the payment
-- provider's payment id; a payment that arrives for an order already
-- cancelled is recorded for refund, never resold. Idempotent like every
-- migration.
ALTER TABLE vouchers ADD COLUMN IF NOT EXISTS paused TINYINT NOT NULL DEFAULT 0 AFTER payment_timeout_seconds;
ALTER TABLE orders ADD COLUMN IF NOT EXISTS payment_id VARCHAR(64) NULL AFTER paid_at;

CREATE TABLE IF NOT EXISTS late_payments (
  payment_id  VARCHAR(64)     NOT NULL,
  order_id    BIGINT UNSIGNED NOT NULL,
  received_at DATETIME(3)     NOT NULL,
  PRIMARY KEY (payment_id),
  KEY late_payments_order (order_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- voucher_changes: an operator's change of a voucher on sale (more stock,
-- a new end), written in the same transaction that changes vouchers;
-- redis_applied_at is set once Redis has it too. A row with
-- redis_applied_at NULL is a change still owed to Redis (pkg/settle), so a
-- crash between the two stores loses nothing and applies nothing twice.
CREATE TABLE IF NOT EXISTS voucher_changes (
  id               BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  voucher_id       BIGINT UNSIGNED NOT NULL,
  add_stock        INT             NOT NULL DEFAULT 0,
  ends_at          DATETIME(3)     NULL,
  created_at       DATETIME(3)     NOT NULL,
  redis_applied_at DATETIME(3)     NULL,
  PRIMARY KEY (id),
  KEY voucher_changes_owed (redis_applied_at, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
