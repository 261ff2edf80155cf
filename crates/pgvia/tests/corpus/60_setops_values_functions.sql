-- Set operations from PostgreSQL's "Combining Queries (UNION, INTERSECT, EXCEPT)", VALUES
-- lists, type casts ("Type Conversion"), and functions without and with tables.

## set operations
SELECT customer_id FROM customers UNION SELECT customer_id FROM orders
SELECT customer_id FROM customers UNION ALL SELECT customer_id FROM orders
SELECT customer_id FROM customers INTERSECT SELECT customer_id FROM orders
SELECT customer_id FROM customers EXCEPT SELECT customer_id FROM orders
SELECT customer_id FROM orders EXCEPT SELECT customer_id FROM customers
SELECT customer_id FROM orders INTERSECT ALL SELECT customer_id FROM order_items
SELECT customer_id FROM orders EXCEPT ALL SELECT customer_id FROM customers
SELECT customer_id FROM customers UNION SELECT customer_id FROM events
SELECT customer_id FROM accounts INTERSECT SELECT customer_id FROM events
SELECT customer_id FROM customers UNION SELECT customer_id FROM orders ORDER BY 1 -- ordered
SELECT customer_id FROM customers UNION SELECT customer_id FROM orders ORDER BY 1 DESC LIMIT 5 -- ordered
SELECT city FROM customers UNION SELECT status FROM orders
SELECT tier FROM customers UNION SELECT product_id FROM products
SELECT product_id FROM products EXCEPT SELECT product_id FROM order_items
SELECT product_id FROM order_items EXCEPT SELECT product_id FROM products
SELECT customer_id FROM customers WHERE customer_id = 3 UNION SELECT customer_id FROM orders WHERE customer_id = 3
SELECT customer_id FROM customers WHERE customer_id = 3 UNION ALL SELECT customer_id FROM orders WHERE customer_id = 4
SELECT 1 UNION SELECT 2
SELECT 1 UNION ALL SELECT 1
SELECT sku FROM products UNION SELECT sku FROM products
SELECT email FROM accounts UNION SELECT name FROM customers
(SELECT customer_id FROM customers ORDER BY customer_id LIMIT 3) UNION ALL (SELECT customer_id FROM orders ORDER BY customer_id DESC LIMIT 3)
SELECT customer_id, 'c' FROM customers UNION SELECT customer_id, 'o' FROM orders
SELECT count(*) FROM (SELECT customer_id FROM customers UNION SELECT customer_id FROM orders) u
SELECT customer_id FROM customers UNION SELECT customer_id FROM orders INTERSECT SELECT customer_id FROM events
SELECT customer_id FROM customers UNION SELECT name FROM customers

## VALUES
VALUES (1, 'one'), (2, 'two'), (3, NULL)
VALUES (1), (2) ORDER BY 1 DESC -- ordered
SELECT * FROM (VALUES (1, 'a'), (2, 'b')) AS v(n, s)
SELECT v.n, c.name FROM (VALUES (1::bigint), (2), (3)) v(n) JOIN customers c ON c.customer_id = v.n
SELECT v.n, c.name FROM (VALUES (1::bigint), (424242)) v(n) LEFT JOIN customers c ON c.customer_id = v.n
SELECT v.e, a.plan FROM (VALUES ('user1@example.com'), ('user2@example.com')) v(e) JOIN accounts a ON a.email = v.e
SELECT v.p, p.sku FROM (VALUES (1), (2)) v(p) JOIN products p ON p.product_id = v.p
SELECT count(*) FROM customers WHERE customer_id IN (VALUES (1::bigint), (2), (3))
VALUES (1, 2.5, 'x', true, NULL::int)
VALUES ('2024-01-01'::date, '12:00'::time, '{1,2}'::int[])

## casts
SELECT customer_id::text FROM customers
SELECT customer_id::int FROM customers WHERE customer_id < 100
SELECT customer_id::int FROM customers
SELECT CAST(total AS int) FROM orders
SELECT total::float8 FROM orders WHERE customer_id = 3
SELECT total::text FROM orders
SELECT signup::timestamp FROM customers
SELECT placed_at::date FROM orders
SELECT tier::bool FROM customers
SELECT vip::int FROM customers WHERE vip IS NOT NULL
SELECT id::text FROM events
SELECT payload::text FROM events
SELECT meta::json FROM accounts
SELECT tags::text FROM customers
SELECT '42'::int + 1
SELECT 'abc'::int
SELECT '2024-13-01'::date
SELECT 1::numeric(3,1) / 3
SELECT 12345.678::numeric(5,2)
SELECT balance::numeric(20,5) FROM customers
SELECT name::varchar(3) FROM customers
SELECT name::char(10) FROM customers
SELECT at::timestamptz FROM events WHERE amount > 100
SELECT price::money FROM products
SELECT '1 day'::interval * tier FROM customers
SELECT total::bigint % 7 FROM orders

## functions without tables
SELECT 1
SELECT 1 + 1, 'a' || 'b', 2.5 * 4
SELECT now() IS NOT NULL
SELECT current_date >= '2020-01-01'
SELECT version() LIKE 'PostgreSQL%'
SELECT current_user
SELECT current_database()
SELECT generate_series(1, 5)
SELECT * FROM generate_series(1, 10, 3)
SELECT * FROM unnest(ARRAY[3, 1, 2]) WITH ORDINALITY
SELECT array[1, 2] || 3
SELECT '{"a": 1}'::jsonb || '{"b": 2}'
SELECT jsonb_build_object('x', 1, 'y', ARRAY[1, 2])
SELECT 1 / 0
SELECT sqrt(-1)
SELECT 'x' + 1
SELECT * FROM nonexistent_table
SELECT nonexistent_column FROM customers
SELECT customer_id FROM customers WHERE customer_id = 'abc'
SELECT unknown_function(1)
SELEC 1
SELECT 2147483647::int + 1
SELECT gen_random_uuid() IS NOT NULL
SELECT lower('ÉMILE'), upper('zoë')
SELECT repeat('ab', 3), reverse('abc'), split_part('a,b,c', ',', 2)
SELECT date_part('year', date '2024-05-05'), age(date '2024-01-01', date '2023-01-01')
SELECT round(2.5), round(-2.5), trunc(2.7), ceil(2.1), floor(-2.1)
SELECT 10 % 3, -10 % 3, 2 ^ 10, |/ 16.0
SELECT format('%s-%s', 'a', 1)

## functions over tables
SELECT customer_id, upper(city) FROM customers WHERE customer_id = 5
SELECT count(*) FROM customers WHERE length(name) > 4
SELECT order_id, to_char(placed_at, 'YYYY-MM-DD') FROM orders
SELECT email, split_part(email, '@', 2) FROM accounts
SELECT email, position('@' IN email) FROM accounts
SELECT id, jsonb_typeof(payload) FROM events
SELECT customer_id, array_to_string(tags, '/') FROM customers
SELECT customer_id, tags || '{x}'::text[] FROM customers
SELECT email, jsonb_array_length(meta->'flags') FROM accounts
SELECT order_id, total, width_bucket(total, 0, 500, 5) FROM orders
SELECT customer_id, name, regexp_replace(name, '[aeiou]', '_', 'g') FROM customers
SELECT customer_id, random() < 2 FROM customers
SELECT customer_id, 100 / tier FROM customers
SELECT customer_id, 100 / tier FROM customers WHERE customer_id = 1
