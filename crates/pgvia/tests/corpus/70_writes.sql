-- Writes from PostgreSQL's INSERT, UPDATE, DELETE reference pages (RETURNING, ON CONFLICT,
-- FROM/USING, subqueries, multi-row VALUES, DEFAULT) and "Transactions". Every row inserted
-- here is deleted further down, so each protocol's pass starts from the same tables; after
-- every write (or at COMMIT/ROLLBACK) the tables it names are compared shard by shard.

## INSERT: single row
INSERT INTO customers (customer_id, name, city, tier, balance, signup, vip, tags) VALUES (7001, 'Wendy', 'Oslo', 1, 10.50, '2024-01-01', true, '{w}')
INSERT INTO customers (customer_id, name, tier, signup) VALUES (7002, 'Xavier', 2, '2024-01-02')
INSERT INTO customers (customer_id, name, tier, signup) VALUES (-7003, 'Negative', 0, '2024-01-03')
INSERT INTO orders (order_id, customer_id, status, total, placed_at) VALUES (9001, 7001, 'new', 12.00, '2024-06-01 10:00:00+00')
INSERT INTO order_items (customer_id, order_id, line, product_id, qty, price) VALUES (7001, 9001, 1, 3, 2, 6.00)
INSERT INTO accounts (email, customer_id, plan, credits) VALUES ('w1@example.com', 7001, 'free', 5)
INSERT INTO accounts (email, customer_id, plan, credits, meta) VALUES ('W2@Example.com', NULL, 'pro', NULL, '{"level": 9}')
INSERT INTO events (id, customer_id, kind, at, amount) VALUES ('aaaaaaaa-0000-4000-8000-000000000001', 7001, 'view', '2024-06-01 10:00:00', 3)
INSERT INTO events (id, customer_id, kind, at) VALUES ('AAAAAAAA-0000-4000-8000-000000000002', NULL, 'buy', '2024-06-02 10:00:00')
INSERT INTO customers (customer_id, name, tier, signup) VALUES (7001, 'Duplicate', 0, '2024-01-01')
INSERT INTO customers (customer_id, name, tier, signup) VALUES (NULL, 'No key', 0, '2024-01-01')
INSERT INTO customers (customer_id, name, tier, signup) VALUES (7009, NULL, 0, '2024-01-01')
INSERT INTO customers (customer_id, name, tier, signup) VALUES ('7010', 'Quoted key', 0, '2024-01-01')
INSERT INTO customers (name, tier, signup, customer_id) VALUES ('Reordered', 3, '2024-01-04', 7011)
INSERT INTO customers VALUES (7012, 'No column list', NULL, 0, NULL, '2024-01-05', NULL, NULL)
INSERT INTO events (id, customer_id, kind, at) VALUES ('not-a-uuid', 1, 'x', '2024-01-01')

## INSERT: multi-row
INSERT INTO customers (customer_id, name, tier, signup) VALUES (7020, 'M1', 0, '2024-02-01'), (7021, 'M2', 1, '2024-02-02'), (7022, 'M3', 2, '2024-02-03'), (7023, 'M4', 3, '2024-02-04')
INSERT INTO orders (order_id, customer_id, status, total, placed_at) VALUES (9020, 7020, 'new', 1.00, '2024-06-01'), (9021, 7021, 'paid', 2.00, '2024-06-02'), (9022, 7020, 'new', 3.00, '2024-06-03')
INSERT INTO accounts (email, plan) VALUES ('m1@example.com', 'free'), ('m2@example.com', 'pro'), ('m3@example.com', 'team')
INSERT INTO events (id, kind, at) VALUES ('aaaaaaaa-0000-4000-8000-000000000020', 'view', '2024-01-01'), ('aaaaaaaa-0000-4000-8000-000000000021', 'buy', '2024-01-02')
INSERT INTO customers (customer_id, name, tier, signup) VALUES (7024, 'D1', 0, '2024-02-01'), (7025, 'D2', DEFAULT, '2024-02-02')
INSERT INTO customers (customer_id, name, tier, signup) VALUES (7026, 'E1', 0, '2024-02-01'), (7020, 'dup of M1', 0, '2024-02-02')
INSERT INTO products (product_id, sku, title, price, stock) VALUES (901, 'SKU-901', 'New A', 1.00, 1), (902, 'SKU-902', 'New B', 2.00, 2)

## INSERT: RETURNING
INSERT INTO customers (customer_id, name, tier, signup) VALUES (7030, 'Ret', 1, '2024-03-01') RETURNING *
INSERT INTO customers (customer_id, name, tier, signup) VALUES (7031, 'Ret2', 1, '2024-03-01') RETURNING customer_id, upper(name) AS n
INSERT INTO orders (order_id, customer_id, status, total, placed_at) VALUES (9030, 7030, 'new', 9.99, '2024-06-01') RETURNING order_id, total * 2
INSERT INTO accounts (email, plan, credits) VALUES ('r1@example.com', 'free', 1) RETURNING email, credits
INSERT INTO events (id, kind, at, amount) VALUES ('aaaaaaaa-0000-4000-8000-000000000030', 'view', '2024-01-01', 7) RETURNING id, amount
INSERT INTO customers (customer_id, name, tier, signup) VALUES (7032, 'R3', 0, '2024-03-01'), (7033, 'R4', 0, '2024-03-01') RETURNING customer_id
INSERT INTO products (product_id, sku, title, price, stock) VALUES (903, 'SKU-903', 'Ret', 3.00, 3) RETURNING *
INSERT INTO products (product_id, sku, title, price, stock) VALUES (904, 'SKU-904', 'Ret', 4.00, 4) RETURNING product_id

## INSERT: ON CONFLICT
INSERT INTO customers (customer_id, name, tier, signup) VALUES (7001, 'Conflict', 0, '2024-01-01') ON CONFLICT DO NOTHING
INSERT INTO customers (customer_id, name, tier, signup) VALUES (7001, 'Conflict', 0, '2024-01-01') ON CONFLICT (customer_id) DO NOTHING
INSERT INTO customers (customer_id, name, tier, signup) VALUES (7001, 'Upserted', 0, '2024-01-01') ON CONFLICT (customer_id) DO UPDATE SET name = EXCLUDED.name
INSERT INTO customers (customer_id, name, tier, signup) VALUES (7001, 'Upserted2', 0, '2024-01-01') ON CONFLICT (customer_id) DO UPDATE SET name = EXCLUDED.name, tier = customers.tier + 1 RETURNING customer_id, name, tier
INSERT INTO customers (customer_id, name, tier, signup) VALUES (7040, 'Fresh', 0, '2024-01-01') ON CONFLICT (customer_id) DO UPDATE SET name = 'never' RETURNING name
INSERT INTO customers (customer_id, name, tier, signup) VALUES (7001, 'W', 0, '2024-01-01') ON CONFLICT (customer_id) DO UPDATE SET tier = 3 WHERE customers.tier < 0
INSERT INTO accounts (email, plan, credits) VALUES ('w1@example.com', 'team', 50) ON CONFLICT (email) DO UPDATE SET credits = accounts.credits + EXCLUDED.credits RETURNING email, credits
INSERT INTO events (id, kind, at) VALUES ('aaaaaaaa-0000-4000-8000-000000000001', 'view', '2024-01-01') ON CONFLICT (id) DO UPDATE SET kind = 'upserted'
INSERT INTO orders (order_id, customer_id, status, total, placed_at) VALUES (9001, 7001, 'dup', 0, '2024-01-01') ON CONFLICT (customer_id, order_id) DO UPDATE SET status = EXCLUDED.status
INSERT INTO products (product_id, sku, title, price, stock) VALUES (901, 'SKU-901', 'Again', 1.00, 1) ON CONFLICT (product_id) DO UPDATE SET stock = products.stock + 10
INSERT INTO products (product_id, sku, title, price, stock) VALUES (901, 'SKU-901', 'Again', 1.00, 1) ON CONFLICT DO NOTHING
INSERT INTO customers (customer_id, name, tier, signup) VALUES (7001, 'K', 0, '2024-01-01') ON CONFLICT (customer_id) DO UPDATE SET customer_id = 7041

## INSERT: from SELECT
INSERT INTO customers (customer_id, name, tier, signup) SELECT 7050, 'From select', 1, '2024-04-01'
INSERT INTO customers (customer_id, name, tier, signup) SELECT customer_id + 8000, name, tier, signup FROM customers WHERE customer_id BETWEEN 1 AND 3
INSERT INTO products (product_id, sku, title, price, stock) SELECT product_id + 950, sku || '-copy', title, price, 0 FROM products WHERE product_id < 3
INSERT INTO accounts (email, plan) SELECT 'sel' || customer_id || '@example.com', 'free' FROM customers WHERE customer_id IN (1, 2)

## UPDATE: by key
UPDATE customers SET tier = tier + 1 WHERE customer_id = 7001
UPDATE customers SET balance = balance * 2 WHERE customer_id = 5
UPDATE customers SET balance = balance / 2 WHERE customer_id = 5
UPDATE customers SET city = NULL WHERE customer_id IN (7001, 7002)
UPDATE customers SET name = 'Renamed' WHERE customer_id = 424242
UPDATE orders SET status = 'shipped' WHERE customer_id = 7001 AND order_id = 9001
UPDATE accounts SET credits = coalesce(credits, 0) + 1 WHERE email = 'w1@example.com'
UPDATE events SET amount = 99 WHERE id = 'aaaaaaaa-0000-4000-8000-000000000001'
UPDATE customers SET tags = array_append(tags, 'upd') WHERE customer_id = 7001 RETURNING customer_id, tags
UPDATE accounts SET meta = '{"level": 1}' WHERE email = 'W2@Example.com' RETURNING *
UPDATE events SET kind = upper(kind) WHERE id = 'AAAAAAAA-0000-4000-8000-000000000002' RETURNING id, kind
UPDATE customers SET tier = tier WHERE customer_id = 7002 RETURNING *

## UPDATE: not by key
UPDATE customers SET vip = NOT vip WHERE tier = 3
UPDATE customers SET vip = NOT vip WHERE tier = 3 RETURNING customer_id, vip
UPDATE orders SET note = 'bulk' WHERE status = 'cancelled' AND note IS NULL
UPDATE orders SET note = NULL WHERE note = 'bulk'
UPDATE order_items SET qty = qty + 1 WHERE product_id = 26
UPDATE order_items SET qty = qty - 1 WHERE product_id = 26 RETURNING customer_id, order_id, line, qty
UPDATE accounts SET credits = credits + 10 WHERE plan = 'team'
UPDATE accounts SET credits = credits - 10 WHERE plan = 'team' RETURNING email
UPDATE events SET amount = amount + 1 WHERE kind = 'buy'
UPDATE events SET amount = amount - 1 WHERE kind = 'buy' RETURNING id
UPDATE customers SET balance = balance + 0 WHERE false
UPDATE customers SET tier = 1 / 0 WHERE tier = 2
UPDATE customers SET name = 'x' WHERE nonexistent = 1

## UPDATE: with subqueries and FROM
UPDATE orders SET note = 'vip' WHERE customer_id IN (SELECT customer_id FROM customers WHERE vip AND customer_id < 5)
UPDATE orders SET note = NULL WHERE note = 'vip'
UPDATE orders o SET total = total + 1 WHERE EXISTS (SELECT 1 FROM order_items i WHERE i.customer_id = o.customer_id AND i.order_id = o.order_id AND i.qty = 5)
UPDATE orders o SET total = total - 1 WHERE EXISTS (SELECT 1 FROM order_items i WHERE i.customer_id = o.customer_id AND i.order_id = o.order_id AND i.qty = 5)
UPDATE customers SET balance = (SELECT max(total) FROM orders) WHERE customer_id = 7002
UPDATE customers c SET balance = (SELECT sum(o.total) FROM orders o WHERE o.customer_id = c.customer_id) WHERE c.customer_id = 7001
UPDATE customers SET tier = 0 WHERE customer_id IN (SELECT customer_id FROM events WHERE kind = 'nothing')
UPDATE orders o SET status = c.city FROM customers c WHERE c.customer_id = o.customer_id AND o.customer_id = 7001
UPDATE orders o SET note = c.name FROM customers c WHERE c.customer_id = o.customer_id AND c.customer_id = 7020
UPDATE orders o SET note = c.name FROM customers c WHERE c.customer_id = o.customer_id AND o.order_id = 9022
UPDATE order_items i SET price = p.price FROM products p WHERE p.product_id = i.product_id AND i.customer_id = 7001
UPDATE order_items i SET price = p.price FROM products p WHERE p.product_id = i.product_id AND i.order_id = 9001
UPDATE events e SET amount = c.tier FROM customers c WHERE c.customer_id = e.customer_id AND e.id = 'aaaaaaaa-0000-4000-8000-000000000001'
UPDATE accounts a SET credits = c.tier FROM customers c WHERE c.customer_id = a.customer_id AND c.customer_id = 7001
UPDATE products p SET stock = p.stock + 1 WHERE p.product_id IN (SELECT product_id FROM order_items WHERE customer_id = 7001)
UPDATE products p SET stock = p.stock + 1 FROM order_items i WHERE i.product_id = p.product_id AND i.order_id = 9001

## UPDATE: of the key
UPDATE customers SET customer_id = 7060 WHERE customer_id = 7050
UPDATE customers SET customer_id = 7050 WHERE customer_id = 7060 RETURNING *
UPDATE customers SET customer_id = customer_id + 1 WHERE customer_id = 7011
UPDATE customers SET customer_id = 7011 WHERE customer_id = 7012 AND name = 'Reordered'
UPDATE accounts SET email = 'moved@example.com' WHERE email = 'r1@example.com'
UPDATE accounts SET email = 'r1@example.com' WHERE email = 'moved@example.com' RETURNING email
UPDATE events SET id = 'aaaaaaaa-0000-4000-8000-000000000031' WHERE id = 'aaaaaaaa-0000-4000-8000-000000000030'
UPDATE customers SET customer_id = 7002 WHERE customer_id = 7001
UPDATE customers SET customer_id = customer_id + 100000 WHERE tier = 9

## UPDATE and DELETE: the table on every shard
UPDATE products SET stock = stock + 1 WHERE product_id = 901
UPDATE products SET stock = stock - 1 WHERE product_id = 901 RETURNING product_id, stock
UPDATE products SET title = upper(title) WHERE category IS NULL AND product_id > 900
UPDATE products SET price = price * 2 WHERE product_id > 900 RETURNING *
DELETE FROM products WHERE product_id = 904 RETURNING *
DELETE FROM products WHERE product_id IN (951, 952)
DELETE FROM products WHERE product_id > 900 RETURNING product_id

## DELETE: by key and not
DELETE FROM customers WHERE customer_id = 7009
DELETE FROM customers WHERE customer_id = 7010 RETURNING *
DELETE FROM customers WHERE customer_id IN (7020, 7021) RETURNING customer_id
DELETE FROM customers WHERE customer_id = 424242
DELETE FROM customers WHERE name = 'M3'
DELETE FROM customers WHERE name LIKE 'D_' RETURNING customer_id
DELETE FROM orders WHERE order_id = 9020
DELETE FROM orders WHERE customer_id = 7021 RETURNING order_id
DELETE FROM accounts WHERE email = 'm1@example.com'
DELETE FROM accounts WHERE email LIKE 'm%@example.com' RETURNING email
DELETE FROM events WHERE id = 'aaaaaaaa-0000-4000-8000-000000000020'
DELETE FROM events WHERE kind = 'buy' AND at = '2024-01-02' RETURNING id
DELETE FROM customers WHERE customer_id IN (SELECT customer_id + 8000 FROM customers WHERE customer_id < 4)
DELETE FROM customers WHERE customer_id > 8000 AND customer_id < 8010 RETURNING customer_id
DELETE FROM accounts WHERE email IN (SELECT 'sel' || customer_id || '@example.com' FROM customers WHERE customer_id IN (1, 2))
DELETE FROM accounts WHERE email LIKE 'sel%'
DELETE FROM orders o USING customers c WHERE c.customer_id = o.customer_id AND c.customer_id = 7022
DELETE FROM orders o USING customers c WHERE c.customer_id = o.customer_id AND c.name = 'M1'
DELETE FROM order_items i USING orders o WHERE o.customer_id = i.customer_id AND o.order_id = i.order_id AND o.customer_id = 7001
DELETE FROM events e USING customers c WHERE c.customer_id = e.customer_id AND c.customer_id = 7001 RETURNING e.id
DELETE FROM orders WHERE total = 1 / 0

## transactions: COMMIT
BEGIN
INSERT INTO customers (customer_id, name, tier, signup) VALUES (7100, 'Tx', 0, '2024-05-01')
INSERT INTO orders (order_id, customer_id, status, total, placed_at) VALUES (9100, 7100, 'new', 5.00, '2024-06-01')
UPDATE customers SET tier = 2 WHERE customer_id = 7100
SELECT customer_id, tier FROM customers WHERE customer_id = 7100
SELECT count(*) FROM orders WHERE customer_id = 7100
COMMIT
BEGIN
INSERT INTO accounts (email, customer_id, plan) VALUES ('tx@example.com', 7100, 'free')
INSERT INTO events (id, customer_id, kind, at) VALUES ('aaaaaaaa-0000-4000-8000-000000000100', 7100, 'view', '2024-01-01')
INSERT INTO products (product_id, sku, title, price, stock) VALUES (910, 'SKU-910', 'Tx', 1.00, 1)
UPDATE customers SET balance = 1 WHERE tier = 2
UPDATE customers SET balance = NULL WHERE customer_id = 7100
COMMIT
BEGIN
DELETE FROM customers WHERE customer_id = 7100
DELETE FROM orders WHERE customer_id = 7100
DELETE FROM accounts WHERE email = 'tx@example.com'
DELETE FROM events WHERE id = 'aaaaaaaa-0000-4000-8000-000000000100'
DELETE FROM products WHERE product_id = 910
END

## transactions: ROLLBACK and errors
BEGIN
INSERT INTO customers (customer_id, name, tier, signup) VALUES (7110, 'Rolled back', 0, '2024-05-01')
UPDATE orders SET total = 0 WHERE status = 'new'
DELETE FROM products WHERE product_id = 1
SELECT count(*) FROM customers WHERE customer_id = 7110
ROLLBACK
BEGIN
INSERT INTO customers (customer_id, name, tier, signup) VALUES (7111, 'Fails', 0, '2024-05-01')
INSERT INTO customers (customer_id, name, tier, signup) VALUES (7111, 'Fails again', 0, '2024-05-01')
SELECT 1
COMMIT
BEGIN
UPDATE customers SET tier = tier + 1 WHERE customer_id = 1
SAVEPOINT s1
UPDATE customers SET tier = tier + 1 WHERE customer_id = 2
ROLLBACK TO SAVEPOINT s1
RELEASE SAVEPOINT s1
UPDATE customers SET tier = tier - 1 WHERE customer_id = 1
COMMIT
BEGIN
SELECT 1 / 0
SELECT 1
ROLLBACK
BEGIN ISOLATION LEVEL REPEATABLE READ
SELECT count(*) FROM orders
UPDATE orders SET note = note WHERE order_id = 1
COMMIT
START TRANSACTION
UPDATE accounts SET plan = plan WHERE customer_id IS NULL
ABORT
INSERT INTO customers (customer_id, name, tier, signup) VALUES (7120, 'Multi', 0, '2024-05-01'); UPDATE customers SET tier = 1 WHERE customer_id = 7120; DELETE FROM customers WHERE customer_id = 7120 -- simple
INSERT INTO customers (customer_id, name, tier, signup) VALUES (7121, 'Multi', 0, '2024-05-01'); INSERT INTO customers (customer_id, name, tier, signup) VALUES (7121, 'Dup', 0, '2024-05-01') -- simple
BEGIN; INSERT INTO accounts (email, plan) VALUES ('multi@example.com', 'free'); DELETE FROM accounts WHERE email = 'multi@example.com'; COMMIT -- simple

## cleanup: everything inserted above
DELETE FROM order_items WHERE customer_id > 7000 AND customer_id < 7200
DELETE FROM orders WHERE customer_id > 7000 AND customer_id < 7200
DELETE FROM orders WHERE order_id > 9000
DELETE FROM accounts WHERE customer_id > 7000 AND customer_id < 7200
DELETE FROM accounts WHERE email IN ('w1@example.com', 'W2@Example.com', 'r1@example.com', 'm2@example.com', 'm3@example.com', 'moved@example.com')
DELETE FROM events WHERE id::text LIKE 'aaaaaaaa-%'
DELETE FROM customers WHERE customer_id > 7000 AND customer_id < 9000
DELETE FROM customers WHERE customer_id IN (-7003, 7040, 7041, 7050, 7060, 107060)
DELETE FROM products WHERE product_id > 900
SELECT count(*) FROM customers
SELECT count(*) FROM orders
SELECT count(*) FROM accounts
SELECT count(*) FROM events
SELECT count(*) FROM products
