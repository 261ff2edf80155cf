-- Subqueries from PostgreSQL's "Subquery Expressions" (EXISTS, IN, NOT IN, ANY/SOME, ALL,
-- row constructors), "Scalar Subqueries", "Subqueries" in FROM, LATERAL, and "WITH Queries".

## subquery: scalar, uncorrelated
SELECT customer_id, (SELECT count(*) FROM products) FROM customers
SELECT (SELECT max(total) FROM orders)
SELECT (SELECT count(*) FROM customers) AS n
SELECT order_id FROM orders WHERE total = (SELECT max(total) FROM orders)
SELECT order_id FROM orders WHERE total > (SELECT avg(total) FROM orders)
SELECT customer_id FROM customers WHERE balance > (SELECT avg(balance) FROM customers)
SELECT email FROM accounts WHERE credits > (SELECT avg(credits) FROM accounts)
SELECT id FROM events WHERE amount = (SELECT max(amount) FROM events)
SELECT product_id FROM products WHERE price > (SELECT avg(price) FROM products)
SELECT customer_id FROM customers WHERE tier = (SELECT tier FROM customers WHERE customer_id = 5)
SELECT customer_id FROM customers WHERE tier = (SELECT tier FROM customers WHERE customer_id < 5)
SELECT customer_id FROM customers WHERE tier = (SELECT tier FROM customers WHERE customer_id = 424242)
SELECT order_id FROM orders WHERE customer_id = (SELECT customer_id FROM accounts WHERE email = 'user1@example.com')
SELECT customer_id FROM customers WHERE customer_id = (SELECT max(customer_id) FROM orders)
SELECT id FROM events WHERE customer_id = (SELECT min(customer_id) FROM customers)
SELECT customer_id, (SELECT max(price) FROM products p WHERE p.product_id = customers.tier) FROM customers
SELECT (SELECT sum(qty) FROM order_items) - (SELECT count(*) FROM orders)
SELECT order_id FROM orders WHERE total > (SELECT avg(total) FROM orders WHERE status = 'paid') AND customer_id = 3
SELECT customer_id FROM customers WHERE (SELECT count(*) FROM orders) > 100

## subquery: scalar, correlated
SELECT c.customer_id, (SELECT count(*) FROM orders o WHERE o.customer_id = c.customer_id) FROM customers c
SELECT c.customer_id, (SELECT sum(o.total) FROM orders o WHERE o.customer_id = c.customer_id) FROM customers c ORDER BY 1 -- ordered
SELECT o.order_id, (SELECT count(*) FROM order_items i WHERE i.customer_id = o.customer_id AND i.order_id = o.order_id) FROM orders o
SELECT c.customer_id FROM customers c WHERE (SELECT count(*) FROM orders o WHERE o.customer_id = c.customer_id) > 5
SELECT c.customer_id, (SELECT count(*) FROM events e WHERE e.customer_id = c.customer_id) FROM customers c
SELECT c.customer_id, (SELECT count(*) FROM accounts a WHERE a.customer_id = c.customer_id) FROM customers c
SELECT a.email, (SELECT c.name FROM customers c WHERE c.customer_id = a.customer_id) FROM accounts a
SELECT o.order_id, (SELECT max(i.price) FROM order_items i WHERE i.order_id = o.order_id) FROM orders o
SELECT c.customer_id, (SELECT count(*) FROM orders o WHERE o.customer_id = c.customer_id) FROM customers c WHERE c.customer_id = 3
SELECT i.order_id, (SELECT p.sku FROM products p WHERE p.product_id = i.product_id) FROM order_items i

## subquery: IN and NOT IN
SELECT customer_id FROM customers WHERE customer_id IN (SELECT customer_id FROM orders)
SELECT customer_id FROM customers WHERE customer_id NOT IN (SELECT customer_id FROM orders)
SELECT customer_id FROM customers WHERE customer_id IN (SELECT customer_id FROM orders WHERE status = 'cancelled')
SELECT order_id FROM orders WHERE customer_id IN (SELECT customer_id FROM customers WHERE vip)
SELECT order_id FROM orders WHERE customer_id NOT IN (SELECT customer_id FROM customers)
SELECT customer_id FROM customers WHERE customer_id IN (SELECT customer_id FROM events)
SELECT customer_id FROM customers WHERE customer_id NOT IN (SELECT customer_id FROM events)
SELECT customer_id FROM customers WHERE customer_id NOT IN (SELECT customer_id FROM events WHERE customer_id IS NOT NULL)
SELECT email FROM accounts WHERE customer_id IN (SELECT customer_id FROM customers WHERE tier = 0)
SELECT id FROM events WHERE customer_id IN (SELECT customer_id FROM accounts WHERE plan = 'pro')
SELECT customer_id FROM customers WHERE tier IN (SELECT product_id FROM products WHERE price > 60)
SELECT order_id FROM order_items WHERE product_id IN (SELECT product_id FROM products WHERE category = 'tools')
SELECT customer_id FROM customers WHERE customer_id IN (SELECT customer_id FROM orders WHERE total > 1000)
SELECT customer_id FROM customers WHERE customer_id = 3 AND customer_id IN (SELECT customer_id FROM orders)
SELECT customer_id FROM customers WHERE (customer_id, tier) IN (SELECT customer_id, 1 FROM orders)
SELECT customer_id FROM customers c WHERE c.customer_id IN (SELECT o.customer_id FROM orders o WHERE o.customer_id = c.customer_id AND o.total > 400)
SELECT count(*) FROM orders WHERE order_id IN (SELECT order_id FROM order_items WHERE qty = 5)
SELECT count(*) FROM customers WHERE city IN (SELECT city FROM customers WHERE tier = 2)

## subquery: EXISTS
SELECT c.customer_id FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.customer_id)
SELECT c.customer_id FROM customers c WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.customer_id)
SELECT c.customer_id FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.customer_id AND o.status = 'paid')
SELECT o.order_id FROM orders o WHERE EXISTS (SELECT 1 FROM order_items i WHERE i.customer_id = o.customer_id AND i.order_id = o.order_id AND i.qty > 4)
SELECT o.order_id FROM orders o WHERE NOT EXISTS (SELECT 1 FROM customers c WHERE c.customer_id = o.customer_id)
SELECT c.customer_id FROM customers c WHERE EXISTS (SELECT 1 FROM events e WHERE e.customer_id = c.customer_id)
SELECT c.customer_id FROM customers c WHERE NOT EXISTS (SELECT 1 FROM accounts a WHERE a.customer_id = c.customer_id)
SELECT a.email FROM accounts a WHERE EXISTS (SELECT 1 FROM customers c WHERE c.customer_id = a.customer_id AND c.vip)
SELECT e.id FROM events e WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = e.customer_id)
SELECT c.customer_id FROM customers c WHERE EXISTS (SELECT 1 FROM products p WHERE p.product_id = c.tier)
SELECT c.customer_id FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.order_id = c.customer_id)
SELECT c.customer_id FROM customers c WHERE EXISTS (SELECT 1 FROM orders)
SELECT c.customer_id FROM customers c WHERE EXISTS (SELECT 1 FROM orders WHERE total > 10000)
SELECT count(*) FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.customer_id)
SELECT c.customer_id FROM customers c WHERE c.customer_id = 3 AND EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.customer_id)

## subquery: ANY, SOME, ALL
SELECT customer_id FROM customers WHERE customer_id = ANY (SELECT customer_id FROM orders)
SELECT customer_id FROM customers WHERE customer_id <> ALL (SELECT customer_id FROM orders)
SELECT order_id FROM orders WHERE total > ALL (SELECT total FROM orders WHERE status = 'new')
SELECT order_id FROM orders WHERE total >= SOME (SELECT price * 5 FROM products)
SELECT customer_id FROM customers WHERE tier = ANY (SELECT stock FROM products)
SELECT c.customer_id FROM customers c WHERE c.balance > ALL (SELECT o.total FROM orders o WHERE o.customer_id = c.customer_id)

## derived tables (subqueries in FROM)
SELECT * FROM (SELECT customer_id, name FROM customers) s
SELECT s.customer_id FROM (SELECT customer_id FROM customers WHERE tier = 1) s
SELECT s.customer_id, s.n FROM (SELECT customer_id, count(*) AS n FROM orders GROUP BY customer_id) s ORDER BY 1 -- ordered
SELECT max(n) FROM (SELECT customer_id, count(*) AS n FROM orders GROUP BY customer_id) s
SELECT avg(t) FROM (SELECT customer_id, sum(total) AS t FROM orders GROUP BY customer_id) s
SELECT count(*) FROM (SELECT DISTINCT tier FROM customers) s
SELECT s.tier, s.n FROM (SELECT tier, count(*) AS n FROM customers GROUP BY tier) s WHERE s.n > 10
SELECT c.customer_id, s.n FROM customers c JOIN (SELECT customer_id, count(*) AS n FROM orders GROUP BY customer_id) s ON s.customer_id = c.customer_id
SELECT c.customer_id, s.n FROM customers c LEFT JOIN (SELECT customer_id, count(*) AS n FROM events GROUP BY customer_id) s ON s.customer_id = c.customer_id
SELECT * FROM (SELECT order_id FROM orders ORDER BY order_id LIMIT 5) s
SELECT * FROM (SELECT email, credits FROM accounts WHERE credits > 100) s WHERE s.email LIKE 'user1%'
SELECT s.k, count(*) FROM (SELECT kind AS k FROM events) s GROUP BY s.k
SELECT p.sku, s.q FROM products p JOIN (SELECT product_id, sum(qty) AS q FROM order_items GROUP BY product_id) s ON s.product_id = p.product_id
SELECT * FROM (SELECT customer_id, row_number() OVER (PARTITION BY customer_id ORDER BY order_id) AS r FROM orders) s WHERE s.r = 1
SELECT * FROM (SELECT customer_id, rank() OVER (ORDER BY total DESC) AS r FROM orders) s WHERE s.r <= 3

## LATERAL
SELECT c.customer_id, l.order_id FROM customers c CROSS JOIN LATERAL (SELECT o.order_id FROM orders o WHERE o.customer_id = c.customer_id ORDER BY o.order_id LIMIT 1) l
SELECT c.customer_id, l.n FROM customers c, LATERAL (SELECT count(*) AS n FROM orders o WHERE o.customer_id = c.customer_id) l
SELECT c.customer_id, l.id FROM customers c LEFT JOIN LATERAL (SELECT e.id FROM events e WHERE e.customer_id = c.customer_id ORDER BY e.id LIMIT 1) l ON true
SELECT c.customer_id, g FROM customers c, LATERAL generate_series(1, c.tier) g
SELECT c.customer_id, t FROM customers c, LATERAL unnest(c.tags) t

## WITH queries (CTEs)
WITH s AS (SELECT customer_id, count(*) AS n FROM orders GROUP BY customer_id) SELECT * FROM s
WITH s AS (SELECT customer_id, count(*) AS n FROM orders GROUP BY customer_id) SELECT max(n) FROM s
WITH s AS (SELECT tier, count(*) AS n FROM customers GROUP BY tier) SELECT * FROM s ORDER BY tier -- ordered
WITH s AS (SELECT customer_id, sum(total) AS t FROM orders GROUP BY customer_id) SELECT c.name, s.t FROM customers c JOIN s ON s.customer_id = c.customer_id
WITH big AS (SELECT order_id FROM orders WHERE total > 400) SELECT count(*) FROM big
WITH top AS (SELECT order_id, total FROM orders ORDER BY total DESC, order_id LIMIT 5) SELECT * FROM top ORDER BY order_id -- ordered
WITH p AS (SELECT product_id FROM products WHERE category = 'tools') SELECT count(*) FROM order_items WHERE product_id IN (SELECT product_id FROM p)
WITH a AS (SELECT customer_id FROM accounts WHERE plan = 'pro') SELECT c.customer_id FROM customers c JOIN a ON a.customer_id = c.customer_id
WITH e AS (SELECT customer_id, count(*) AS n FROM events GROUP BY customer_id) SELECT c.customer_id, e.n FROM customers c JOIN e ON e.customer_id = c.customer_id
WITH x AS (SELECT 1 AS one) SELECT * FROM x
WITH x(a, b) AS (VALUES (1, 'a'), (2, 'b')) SELECT * FROM x ORDER BY a -- ordered
WITH s AS (SELECT * FROM customers WHERE customer_id = 5) SELECT * FROM s
WITH s AS MATERIALIZED (SELECT tier FROM customers) SELECT count(*) FROM s
WITH s AS NOT MATERIALIZED (SELECT tier FROM customers) SELECT count(*) FROM s
WITH s AS (SELECT tier, count(*) AS n FROM customers GROUP BY tier), t AS (SELECT max(n) AS m FROM s) SELECT s.tier FROM s, t WHERE s.n = t.m
WITH s AS (SELECT customer_id FROM orders GROUP BY customer_id HAVING count(*) > 6) SELECT count(*) FROM s
WITH s AS (SELECT avg(total) AS a FROM orders) SELECT order_id FROM orders, s WHERE orders.total > s.a
WITH s AS (SELECT customer_id, name FROM customers) SELECT a.customer_id FROM s a JOIN s b ON a.name = b.name AND a.customer_id < b.customer_id
WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5) SELECT * FROM r
WITH RECURSIVE r(n) AS (SELECT min(customer_id) FROM customers UNION SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r
WITH RECURSIVE r(id) AS (SELECT product_id FROM products WHERE product_id = 1 UNION SELECT product_id FROM products, r WHERE product_id = r.id + 1) SELECT count(*) FROM r
WITH s AS (SELECT product_id, price FROM products) SELECT i.order_id, s.price FROM order_items i JOIN s ON s.product_id = i.product_id
