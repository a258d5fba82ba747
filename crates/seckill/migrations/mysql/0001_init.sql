-- The flash-sale schema (MySQL, MariaDB). Times are Unix epoch milliseconds (UTC).
CREATE TABLE users (
    id BIGINT PRIMARY KEY,
    phone VARCHAR(16) NOT NULL UNIQUE,
    created_at BIGINT NOT NULL
);

CREATE TABLE seckill_voucher (
    id BIGINT PRIMARY KEY,
    title VARCHAR(200) NOT NULL,
    stock BIGINT NOT NULL CHECK (stock >= 0),
    begin_time BIGINT NOT NULL,
    end_time BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE voucher_order (
    id BIGINT PRIMARY KEY,
    user_id BIGINT NOT NULL,
    voucher_id BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);

-- Defence in depth behind lock:order:{userId}; the lab drops it to show the lock alone.
CREATE UNIQUE INDEX voucher_order_user_voucher ON voucher_order (user_id, voucher_id);
CREATE INDEX voucher_order_voucher ON voucher_order (voucher_id);

-- The oversell lab's db-optimistic variant: one row, `stock > 0` decrement.
CREATE TABLE lab_stock (
    id BIGINT PRIMARY KEY,
    stock BIGINT NOT NULL,
    sold BIGINT NOT NULL
);
