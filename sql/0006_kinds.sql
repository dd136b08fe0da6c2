-- 0006_kinds: kinds of sale (pkg/sale). A voucher is `units` (N identical
-- units, the default and every voucher made before this migration),
-- `envelope` (a total amount split in advance into envelopes) or `codes`
-- (a pool of distinct codes). Idempotent like every migration.

ALTER TABLE vouchers ADD COLUMN IF NOT EXISTS kind VARCHAR(16) NOT NULL DEFAULT 'units' AFTER name;
-- total_amount: an envelope voucher's amount in minor units (0 for other
-- kinds); min_amount: the floor of one envelope.
ALTER TABLE vouchers ADD COLUMN IF NOT EXISTS total_amount BIGINT NOT NULL DEFAULT 0 AFTER stock_total;
ALTER TABLE vouchers ADD COLUMN IF NOT EXISTS min_amount BIGINT NOT NULL DEFAULT 0 AFTER total_amount;
-- refunded_amount: what nobody grabbed, given back to the sender once, when
-- the sale is over and nothing of it is in flight (refunded_at set then).
ALTER TABLE vouchers ADD COLUMN IF NOT EXISTS refunded_amount BIGINT NOT NULL DEFAULT 0 AFTER min_amount;
ALTER TABLE vouchers ADD COLUMN IF NOT EXISTS refunded_at DATETIME(3) NULL AFTER refunded_amount;

-- items: every envelope or code of a pooled voucher, written when the
-- voucher is created. order_id is NULL until an order holds the item (the
-- owner is empty until grabbed, as in seed 002); the unique key makes it
-- impossible for two orders to hold one item. refunded: an envelope nobody
-- grabbed, counted in vouchers.refunded_amount.
CREATE TABLE IF NOT EXISTS items (
  voucher_id BIGINT UNSIGNED NOT NULL,
  item       INT             NOT NULL,
  amount     BIGINT          NOT NULL DEFAULT 0,
  code       VARCHAR(64)     NOT NULL DEFAULT '',
  order_id   BIGINT UNSIGNED NULL,
  user_id    VARCHAR(64)     NULL,
  refunded   TINYINT         NOT NULL DEFAULT 0,
  PRIMARY KEY (voucher_id, item),
  UNIQUE KEY items_order (order_id),
  CONSTRAINT items_amount_nonnegative CHECK (amount >= 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- An order of a pooled voucher names its item, with the item's amount or
-- code copied (the API shows them); a release names the item it gives back
-- to the pool (0: none).
ALTER TABLE orders ADD COLUMN IF NOT EXISTS item INT NOT NULL DEFAULT 0 AFTER quantity;
ALTER TABLE orders ADD COLUMN IF NOT EXISTS amount BIGINT NOT NULL DEFAULT 0 AFTER item;
ALTER TABLE orders ADD COLUMN IF NOT EXISTS code VARCHAR(64) NOT NULL DEFAULT '' AFTER amount;
ALTER TABLE releases ADD COLUMN IF NOT EXISTS item INT NOT NULL DEFAULT 0 AFTER quantity;
ALTER TABLE releases ADD COLUMN IF NOT EXISTS amount BIGINT NOT NULL DEFAULT 0 AFTER item;
ALTER TABLE releases ADD COLUMN IF NOT EXISTS code VARCHAR(64) NOT NULL DEFAULT '' AFTER amount;

-- completed: an order that needs no payment (an envelope grab), final once
-- persisted. Dropped and added again, so a run cut short repeats cleanly.
ALTER TABLE orders DROP CONSTRAINT IF EXISTS orders_status_known;
ALTER TABLE orders ADD CONSTRAINT orders_status_known CHECK (status IN ('created', 'paid', 'completed', 'cancelled', 'failed'));
