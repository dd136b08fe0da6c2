-- 0005_quantity: an order may take several units at once, all or nothing.
-- Stock updates and per-user limits count units (SUM(quantity)), and a
-- release gives all of an order's units back. Orders and releases written
-- before this migration took one unit each: the default.
ALTER TABLE orders ADD COLUMN IF NOT EXISTS quantity INT NOT NULL DEFAULT 1 AFTER day;
ALTER TABLE releases ADD COLUMN IF NOT EXISTS quantity INT NOT NULL DEFAULT 1 AFTER day;
