-- 0011_draw: draw sales (pkg/draw). A voucher's allocation is first_come
-- (the default, and every voucher made before this migration) or draw:
-- users enter during the window, and when it is over the reaper draws the
-- winners from a seed committed to at creation. Idempotent like every
-- migration.

ALTER TABLE vouchers ADD COLUMN IF NOT EXISTS allocation VARCHAR(16) NOT NULL DEFAULT 'first_come' AFTER kind;
-- draw_seed: the hex of the secret 32-byte seed, shown by the API only once
-- draw_state is drawn; seed_commitment: the hex SHA-256 of the seed, shown
-- from the start. draw_state: '' (not a draw), open, drawing, drawn.
-- draw_winners: how many entries won at the draw (min(stock, entries)).
ALTER TABLE vouchers ADD COLUMN IF NOT EXISTS seed_commitment CHAR(64) NOT NULL DEFAULT '' AFTER refunded_at;
ALTER TABLE vouchers ADD COLUMN IF NOT EXISTS draw_seed CHAR(64) NOT NULL DEFAULT '' AFTER seed_commitment;
ALTER TABLE vouchers ADD COLUMN IF NOT EXISTS draw_state VARCHAR(8) NOT NULL DEFAULT '' AFTER draw_seed;
ALTER TABLE vouchers ADD COLUMN IF NOT EXISTS drawn_at DATETIME(3) NULL AFTER draw_state;
ALTER TABLE vouchers ADD COLUMN IF NOT EXISTS draw_winners INT NOT NULL DEFAULT 0 AFTER drawn_at;

-- An entry of a draw sale is a row of orders (its id is the entry id):
-- entered until the draw, then created (it won: an order awaiting
-- payment) or lost. draw_rank: the entry's place in the draw order
-- (pkg/draw), written by the draw for the winners and the head of the
-- waitlist only, and for more of the waitlist when it gets there: so the
-- draw writes a few rows per unit, not one per entry. drawn: 1 won at the
-- draw, 2 given a unit from the waitlist, 0 neither.
ALTER TABLE orders ADD COLUMN IF NOT EXISTS draw_rank INT NULL AFTER code;
ALTER TABLE orders ADD COLUMN IF NOT EXISTS drawn TINYINT NOT NULL DEFAULT 0 AFTER draw_rank;
CREATE INDEX IF NOT EXISTS orders_draw_rank ON orders (voucher_id, draw_rank);

ALTER TABLE orders DROP CONSTRAINT IF EXISTS orders_status_known;
ALTER TABLE orders ADD CONSTRAINT orders_status_known CHECK (status IN ('created', 'paid', 'completed', 'cancelled', 'failed', 'entered', 'lost'));
