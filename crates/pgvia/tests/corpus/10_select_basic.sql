-- Projections and filters, from PostgreSQL's "Queries" chapter (select lists, WHERE) and
-- "Functions and Operators" (comparison, pattern matching, arrays, JSON).

## projection: whole table
SELECT * FROM customers
SELECT * FROM orders
SELECT * FROM order_items
SELECT * FROM accounts
SELECT * FROM events
SELECT * FROM products
SELECT customers.* FROM customers
SELECT c.* FROM customers AS c
SELECT customer_id, name FROM customers
SELECT name, customer_id, name FROM customers
SELECT order_id AS id, total AS "Total Amount" FROM orders
SELECT email, plan FROM accounts
SELECT id, kind FROM events
SELECT sku, price FROM products

## projection: expressions
SELECT customer_id * 2 AS dbl, customer_id + tier FROM customers
SELECT order_id, total * 1.1 AS with_tax FROM orders
SELECT order_id, total::int FROM orders
SELECT order_id, round(total) FROM orders
SELECT order_id, -total AS neg FROM orders
SELECT name || ' in ' || coalesce(city, '?') FROM customers
SELECT upper(name), lower(name), length(name) FROM customers
SELECT customer_id, coalesce(balance, 0) FROM customers
SELECT customer_id, nullif(tier, 0) FROM customers
SELECT customer_id, CASE WHEN tier > 1 THEN 'high' ELSE 'low' END FROM customers
SELECT customer_id, CASE tier WHEN 0 THEN 'zero' WHEN 1 THEN 'one' END FROM customers
SELECT email, credits IS NULL AS no_credits FROM accounts
SELECT id, amount, abs(amount) FROM events
SELECT id, date_trunc('month', at) FROM events
SELECT id, extract(year FROM at), extract(dow FROM at) FROM events
SELECT order_id, placed_at AT TIME ZONE 'UTC' FROM orders
SELECT customer_id, signup + 30 FROM customers
SELECT customer_id, signup - date '2023-01-01' AS days FROM customers
SELECT qty * price AS amount FROM order_items
SELECT product_id, greatest(price, 10), least(stock, 5) FROM products
SELECT substring(sku FROM 5), left(title, 3) FROM products
SELECT customer_id, vip, NOT vip FROM customers
SELECT 1 AS one, customer_id FROM customers
SELECT id::text, payload FROM events
SELECT email, meta->'level', meta->>'flags' FROM accounts
SELECT email, meta#>'{flags,0}' FROM accounts
SELECT customer_id, tags, array_length(tags, 1), cardinality(tags) FROM customers
SELECT customer_id, tags[1] FROM customers
SELECT customer_id, to_char(signup, 'YYYY-MM') FROM customers
SELECT md5(name) FROM customers

## filter: on the bigint key
SELECT * FROM customers WHERE customer_id = 5
SELECT * FROM customers WHERE customer_id = -3
SELECT * FROM customers WHERE customer_id = 1000000000001
SELECT * FROM customers WHERE customer_id = 424242
SELECT name FROM customers WHERE customer_id = 7 OR customer_id = 8
SELECT name FROM customers WHERE customer_id IN (1, 2, 3, 50)
SELECT name FROM customers WHERE customer_id = ANY ('{4,5,6}')
SELECT name FROM customers WHERE customer_id = ANY (ARRAY[9, 10]::bigint[])
SELECT * FROM orders WHERE customer_id = 12
SELECT * FROM orders WHERE customer_id = 12 AND status = 'paid'
SELECT * FROM order_items WHERE customer_id = 3
SELECT * FROM order_items WHERE customer_id IN (3, 4) AND qty > 2
SELECT * FROM customers WHERE customer_id = 5 AND tier = 99
SELECT * FROM customers WHERE customer_id BETWEEN 10 AND 15
SELECT * FROM customers WHERE customer_id > 55
SELECT * FROM customers WHERE customer_id < 0
SELECT * FROM customers WHERE customer_id <> 5
SELECT * FROM customers WHERE NOT customer_id IN (1, 2, 3)
SELECT * FROM customers WHERE customer_id = 5::int
SELECT * FROM customers WHERE customer_id = '6'
SELECT * FROM customers WHERE customer_id IS NULL
SELECT * FROM orders WHERE customer_id = 99
SELECT * FROM customers WHERE (customer_id = 1 OR customer_id = 2) AND vip

## filter: on the text key
SELECT * FROM accounts WHERE email = 'user1@example.com'
SELECT * FROM accounts WHERE email = 'User9@Example.com'
SELECT * FROM accounts WHERE email = 'user9@example.com'
SELECT * FROM accounts WHERE email IN ('user2@example.com', 'user3@example.com', 'nobody@example.com')
SELECT * FROM accounts WHERE email = ANY ('{user4@example.com,user5@example.com}')
SELECT * FROM accounts WHERE email LIKE 'user1%'
SELECT * FROM accounts WHERE email ILIKE 'USER1%'
SELECT * FROM accounts WHERE email > 'user3'
SELECT * FROM accounts WHERE lower(email) = 'user18@example.com'
SELECT plan FROM accounts WHERE email = 'user7@example.com' OR email = 'user8@example.com'

## filter: on the uuid key
SELECT * FROM events WHERE id = 'fadde7ab-5b97-4001-827e-000000000001'
SELECT * FROM events WHERE id = 'FADDE7AB-5B97-4001-827E-000000000001'
SELECT * FROM events WHERE id = 'edddd684f29840028536000000000002'
SELECT * FROM events WHERE id IN ('c2a3e5f6-7f12-4003-81c4-000000000003', 'cd446e53-3555-400a-8ce7-00000000000a')
SELECT * FROM events WHERE id = ANY ('{61051b19-1bf8-4032-8044-000000000032,744204fd-14fa-404d-801c-00000000004d}')
SELECT * FROM events WHERE id = '00000000-0000-0000-0000-000000000000'
SELECT * FROM events WHERE id = 'not-a-uuid'
SELECT kind FROM events WHERE id = '9ab8f717-91e8-4096-87d3-000000000096'::uuid
SELECT * FROM events WHERE id::text LIKE 'f%'

## filter: on other columns
SELECT * FROM customers WHERE tier = 2
SELECT * FROM customers WHERE tier <> 2 AND vip
SELECT * FROM customers WHERE city = 'Oslo'
SELECT * FROM customers WHERE city = 'oslo'
SELECT * FROM customers WHERE city ILIKE 'oslo'
SELECT * FROM customers WHERE city LIKE '%a%'
SELECT * FROM customers WHERE city NOT LIKE 'O%'
SELECT * FROM customers WHERE city SIMILAR TO '(Lima|Paris)'
SELECT * FROM customers WHERE city ~ '^[A-Z]'
SELECT * FROM customers WHERE city ~* '^o'
SELECT * FROM customers WHERE name = 'Émile'
SELECT * FROM customers WHERE balance > 100
SELECT * FROM customers WHERE balance < 0
SELECT * FROM customers WHERE balance BETWEEN -100 AND 100
SELECT * FROM customers WHERE balance NOT BETWEEN -100 AND 100
SELECT * FROM customers WHERE balance BETWEEN SYMMETRIC 100 AND -100
SELECT * FROM customers WHERE signup >= '2023-06-01'
SELECT * FROM customers WHERE signup BETWEEN '2023-03-01' AND '2023-04-30'
SELECT * FROM customers WHERE vip
SELECT * FROM customers WHERE NOT vip
SELECT * FROM customers WHERE vip IS TRUE
SELECT * FROM customers WHERE vip IS NOT TRUE
SELECT * FROM customers WHERE vip IS UNKNOWN
SELECT * FROM customers WHERE vip IS DISTINCT FROM true
SELECT * FROM customers WHERE city IS NULL
SELECT * FROM customers WHERE city IS NOT NULL
SELECT * FROM customers WHERE balance IS NULL OR city IS NULL
SELECT * FROM customers WHERE tier IN (0, 3)
SELECT * FROM customers WHERE tier NOT IN (0, 3)
SELECT * FROM customers WHERE tier NOT IN (0, NULL)
SELECT * FROM customers WHERE 'gold' = ANY (tags)
SELECT * FROM customers WHERE tags @> '{eu}'
SELECT * FROM customers WHERE tags && '{us,new}'
SELECT * FROM customers WHERE tags = '{}'
SELECT * FROM customers WHERE tier = ALL ('{1}')
SELECT * FROM orders WHERE status = 'paid'
SELECT * FROM orders WHERE status IN ('paid', 'Paid')
SELECT * FROM orders WHERE total > 400
SELECT * FROM orders WHERE total = 0
SELECT * FROM orders WHERE placed_at < '2024-02-01'
SELECT * FROM orders WHERE placed_at >= timestamptz '2024-11-01 00:00:00+00'
SELECT * FROM orders WHERE note IS NOT NULL AND note <> 'gift'
SELECT * FROM orders WHERE order_id = 17
SELECT * FROM orders WHERE order_id IN (1, 2, 3)
SELECT * FROM order_items WHERE qty = 0
SELECT * FROM order_items WHERE product_id = 26
SELECT * FROM order_items WHERE price * qty > 200
SELECT * FROM accounts WHERE plan = 'pro'
SELECT * FROM accounts WHERE credits < 0
SELECT * FROM accounts WHERE credits IS NULL
SELECT * FROM accounts WHERE customer_id IS NULL
SELECT * FROM accounts WHERE meta @> '{"level": 2}'
SELECT * FROM accounts WHERE meta ? 'flags'
SELECT * FROM accounts WHERE (meta->>'level')::int > 2
SELECT * FROM events WHERE kind = 'click'
SELECT * FROM events WHERE kind = 'Click'
SELECT * FROM events WHERE amount < 0
SELECT * FROM events WHERE amount IS NULL
SELECT * FROM events WHERE at BETWEEN '2024-03-01' AND '2024-05-01'
SELECT * FROM events WHERE customer_id = 5
SELECT * FROM events WHERE customer_id IS NULL
SELECT * FROM events WHERE payload->>'n' = '3'
SELECT * FROM products WHERE category = 'tools'
SELECT * FROM products WHERE category IS NULL
SELECT * FROM products WHERE price > 50
SELECT * FROM products WHERE product_id = 3
SELECT * FROM customers WHERE false
SELECT * FROM customers WHERE true
SELECT * FROM customers WHERE tier = 1 AND (city = 'Oslo' OR city IS NULL)
SELECT * FROM customers WHERE NOT (tier = 1 OR vip)
