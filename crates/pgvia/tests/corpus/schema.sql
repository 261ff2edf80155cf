CREATE TABLE customers (customer_id bigint PRIMARY KEY, name text NOT NULL, city text, tier int NOT NULL, balance numeric(12,2), signup date NOT NULL, vip boolean, tags text[]);
CREATE TABLE orders (order_id bigint NOT NULL, customer_id bigint NOT NULL, status text NOT NULL, total numeric(12,2) NOT NULL, placed_at timestamptz NOT NULL, note text, PRIMARY KEY (customer_id, order_id));
CREATE TABLE order_items (customer_id bigint NOT NULL, order_id bigint NOT NULL, line int NOT NULL, product_id int NOT NULL, qty int NOT NULL, price numeric(10,2) NOT NULL, PRIMARY KEY (customer_id, order_id, line));
CREATE TABLE accounts (email text PRIMARY KEY, customer_id bigint, plan text NOT NULL, credits int, meta jsonb);
CREATE TABLE events (id uuid PRIMARY KEY, customer_id bigint, kind text NOT NULL, at timestamp NOT NULL, amount int, payload jsonb);
CREATE TABLE products (product_id int PRIMARY KEY, sku text NOT NULL, title text NOT NULL, category text, price numeric(10,2) NOT NULL, stock int NOT NULL);
