-- The highest fencing token of lock:order:{userId} that has written an order of this
-- user. An order written under the lock carries the lock's token and first runs
-- UPDATE users SET order_fence = token WHERE id = user AND order_fence <= token:
-- a holder whose lock expired while a newer holder wrote finds no row and is refused.
ALTER TABLE users ADD COLUMN order_fence BIGINT NOT NULL DEFAULT 0;
