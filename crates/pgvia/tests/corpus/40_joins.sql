-- Joins from PostgreSQL's "Table Expressions" (joined tables: CROSS, INNER, LEFT/RIGHT/FULL
-- OUTER, ON, USING, NATURAL) and "Joins Between Tables" in the tutorial.

## join: co-located on the key (customers, orders, order_items)
SELECT c.customer_id, c.name, o.order_id FROM customers c JOIN orders o ON o.customer_id = c.customer_id
SELECT c.customer_id, o.order_id, o.total FROM customers c JOIN orders o ON o.customer_id = c.customer_id ORDER BY o.order_id -- ordered
SELECT c.name, count(*) FROM customers c JOIN orders o ON o.customer_id = c.customer_id GROUP BY c.name ORDER BY c.name -- ordered
SELECT c.customer_id, sum(o.total) FROM customers c JOIN orders o ON o.customer_id = c.customer_id GROUP BY c.customer_id ORDER BY c.customer_id -- ordered
SELECT c.customer_id, o.order_id FROM customers c LEFT JOIN orders o ON o.customer_id = c.customer_id
SELECT c.customer_id, count(o.order_id) FROM customers c LEFT JOIN orders o ON o.customer_id = c.customer_id GROUP BY c.customer_id ORDER BY 1 -- ordered
SELECT c.customer_id, o.order_id FROM customers c RIGHT JOIN orders o ON o.customer_id = c.customer_id
SELECT c.customer_id, o.order_id FROM customers c FULL JOIN orders o ON o.customer_id = c.customer_id
SELECT c.customer_id, o.customer_id FROM customers c FULL OUTER JOIN orders o ON o.customer_id = c.customer_id WHERE c.customer_id IS NULL OR o.customer_id IS NULL
SELECT customer_id, name, order_id FROM customers JOIN orders USING (customer_id)
SELECT customer_id, count(*) FROM customers LEFT JOIN orders USING (customer_id) GROUP BY customer_id ORDER BY customer_id -- ordered
SELECT * FROM customers JOIN orders USING (customer_id) WHERE customer_id = 3
SELECT customer_id FROM customers FULL JOIN orders USING (customer_id)
SELECT c.customer_id, o.order_id FROM customers c, orders o WHERE o.customer_id = c.customer_id
SELECT c.customer_id, o.order_id FROM customers c INNER JOIN orders o ON c.customer_id = o.customer_id AND o.status = 'paid'
SELECT c.customer_id, o.order_id FROM customers c LEFT JOIN orders o ON c.customer_id = o.customer_id AND o.total > 300
SELECT c.customer_id, o.order_id FROM customers c JOIN orders o ON o.customer_id = c.customer_id WHERE c.customer_id = 5
SELECT c.customer_id, o.order_id FROM customers c JOIN orders o ON o.customer_id = c.customer_id WHERE c.customer_id IN (5, 6, 7)
SELECT o.order_id, i.line, i.qty FROM orders o JOIN order_items i ON i.customer_id = o.customer_id AND i.order_id = o.order_id
SELECT o.order_id, sum(i.qty * i.price) FROM orders o JOIN order_items i ON i.customer_id = o.customer_id AND i.order_id = o.order_id GROUP BY o.order_id ORDER BY o.order_id -- ordered
SELECT o.order_id, count(i.line) FROM orders o LEFT JOIN order_items i ON i.customer_id = o.customer_id AND i.order_id = o.order_id GROUP BY o.order_id ORDER BY 1 -- ordered
SELECT c.name, o.order_id, i.line FROM customers c JOIN orders o ON o.customer_id = c.customer_id JOIN order_items i ON i.customer_id = o.customer_id AND i.order_id = o.order_id
SELECT c.customer_id, count(DISTINCT o.order_id), sum(i.qty) FROM customers c JOIN orders o ON o.customer_id = c.customer_id JOIN order_items i ON i.customer_id = c.customer_id AND i.order_id = o.order_id GROUP BY c.customer_id ORDER BY 1 -- ordered
SELECT c.customer_id, i.product_id FROM customers c JOIN order_items i ON i.customer_id = c.customer_id WHERE i.qty = 0
SELECT * FROM orders JOIN order_items USING (customer_id, order_id) WHERE customer_id = 7
SELECT customer_id, order_id, line FROM orders NATURAL JOIN order_items
SELECT c.customer_id, o.order_id FROM customers c JOIN orders o ON o.customer_id = c.customer_id ORDER BY o.total DESC, o.order_id LIMIT 5 -- ordered
SELECT DISTINCT c.city FROM customers c JOIN orders o ON o.customer_id = c.customer_id
SELECT c1.customer_id, c2.customer_id FROM customers c1 JOIN customers c2 ON c2.customer_id = c1.customer_id
SELECT o1.order_id, o2.order_id FROM orders o1 JOIN orders o2 ON o2.customer_id = o1.customer_id AND o2.order_id < o1.order_id
SELECT c.customer_id, o.order_id, row_number() OVER (PARTITION BY c.customer_id ORDER BY o.order_id) FROM customers c JOIN orders o ON o.customer_id = c.customer_id

## join: co-located tables off the key
SELECT c.customer_id, o.order_id FROM customers c JOIN orders o ON o.order_id = c.customer_id
SELECT c.customer_id, o.order_id FROM customers c JOIN orders o ON o.total > c.balance AND o.customer_id = c.customer_id
SELECT c.customer_id, o.order_id FROM customers c JOIN orders o ON o.total > c.balance
SELECT o.order_id, i.line FROM orders o JOIN order_items i ON i.order_id = o.order_id
SELECT o.order_id, count(*) FROM orders o JOIN order_items i ON i.order_id = o.order_id GROUP BY o.order_id
SELECT c.tier, count(*) FROM customers c JOIN orders o ON o.order_id % 4 = c.tier GROUP BY c.tier ORDER BY 1 -- ordered
SELECT c.customer_id, o.order_id FROM customers c LEFT JOIN orders o ON o.order_id = c.customer_id
SELECT c.customer_id, o.order_id FROM customers c FULL JOIN orders o ON o.order_id = c.customer_id
SELECT c1.customer_id, c2.customer_id FROM customers c1 JOIN customers c2 ON c2.tier = c1.tier AND c2.customer_id <> c1.customer_id
SELECT o.order_id, i.order_id FROM orders o JOIN order_items i ON i.customer_id = o.customer_id
SELECT c.name, o.status FROM customers c JOIN orders o ON c.name = o.status
SELECT c.customer_id, o.order_id FROM customers c, orders o WHERE o.order_id = c.customer_id AND c.customer_id = 5

## join: across key types (not co-located)
SELECT c.customer_id, e.id FROM customers c JOIN events e ON e.customer_id = c.customer_id
SELECT c.customer_id, count(e.id) FROM customers c LEFT JOIN events e ON e.customer_id = c.customer_id GROUP BY c.customer_id ORDER BY 1 -- ordered
SELECT c.customer_id, e.kind FROM customers c JOIN events e ON e.customer_id = c.customer_id WHERE c.customer_id = 5
SELECT e.id, c.name FROM events e LEFT JOIN customers c ON c.customer_id = e.customer_id
SELECT e.kind, count(*) FROM events e JOIN customers c ON c.customer_id = e.customer_id GROUP BY e.kind ORDER BY 1 -- ordered
SELECT c.customer_id, a.email FROM customers c JOIN accounts a ON a.customer_id = c.customer_id
SELECT a.email, c.name FROM accounts a LEFT JOIN customers c ON c.customer_id = a.customer_id
SELECT a.email, c.name FROM accounts a FULL JOIN customers c ON c.customer_id = a.customer_id
SELECT a.plan, count(*) FROM accounts a JOIN customers c ON c.customer_id = a.customer_id GROUP BY a.plan ORDER BY 1 -- ordered
SELECT a.email, e.id FROM accounts a JOIN events e ON e.customer_id = a.customer_id
SELECT o.order_id, e.id FROM orders o JOIN events e ON e.customer_id = o.customer_id
SELECT a.email FROM accounts a JOIN customers c ON c.customer_id = a.customer_id WHERE a.email = 'user1@example.com'
SELECT e.id FROM events e JOIN customers c ON c.customer_id = e.customer_id WHERE e.id = 'fadde7ab-5b97-4001-827e-000000000001'
SELECT c.customer_id, e.id FROM customers c JOIN events e ON e.customer_id = c.customer_id WHERE c.customer_id = 5 AND e.id = 'fadde7ab-5b97-4001-827e-000000000001'
SELECT customer_id, email FROM customers JOIN accounts USING (customer_id)
SELECT customer_id, kind FROM customers JOIN events USING (customer_id)
SELECT customer_id FROM accounts NATURAL JOIN events
SELECT c.customer_id, a.email, e.kind FROM customers c JOIN accounts a ON a.customer_id = c.customer_id JOIN events e ON e.customer_id = c.customer_id
SELECT count(*) FROM customers c JOIN events e ON e.customer_id = c.customer_id
SELECT count(*) FROM accounts a JOIN events e ON e.customer_id = a.customer_id

## join: with the table on every shard
SELECT i.order_id, i.line, p.sku FROM order_items i JOIN products p ON p.product_id = i.product_id
SELECT p.sku, sum(i.qty) FROM order_items i JOIN products p ON p.product_id = i.product_id GROUP BY p.sku ORDER BY p.sku -- ordered
SELECT i.order_id, p.sku FROM order_items i LEFT JOIN products p ON p.product_id = i.product_id
SELECT p.product_id, i.order_id FROM products p LEFT JOIN order_items i ON i.product_id = p.product_id
SELECT p.product_id, count(i.line) FROM products p LEFT JOIN order_items i ON i.product_id = p.product_id GROUP BY p.product_id ORDER BY 1 -- ordered
SELECT p.product_id, i.order_id FROM products p RIGHT JOIN order_items i ON i.product_id = p.product_id
SELECT p.product_id, i.order_id FROM products p FULL JOIN order_items i ON i.product_id = p.product_id
SELECT c.customer_id, p.sku FROM customers c JOIN order_items i ON i.customer_id = c.customer_id JOIN products p ON p.product_id = i.product_id WHERE c.customer_id = 3
SELECT product_id, sku, qty FROM order_items JOIN products USING (product_id) WHERE qty > 4
SELECT p.category, sum(i.qty * i.price) FROM order_items i JOIN products p USING (product_id) GROUP BY p.category ORDER BY 1 -- ordered
SELECT e.id, p.sku FROM events e JOIN products p ON p.product_id = e.amount
SELECT a.email, p.sku FROM accounts a JOIN products p ON p.stock = a.credits
SELECT p1.product_id, p2.product_id FROM products p1 JOIN products p2 ON p2.category = p1.category AND p2.product_id > p1.product_id
SELECT p.product_id FROM products p LEFT JOIN products q ON q.product_id = p.product_id + 100 WHERE q.product_id IS NULL

## join: CROSS JOIN
SELECT c.customer_id, p.product_id FROM customers c CROSS JOIN products p WHERE p.product_id < 3
SELECT count(*) FROM customers CROSS JOIN products
SELECT count(*) FROM customers c CROSS JOIN orders o
SELECT c.customer_id, o.order_id FROM customers c CROSS JOIN orders o WHERE c.customer_id = 1 AND o.order_id < 5
SELECT a.email, e.kind FROM accounts a CROSS JOIN events e WHERE a.email = 'user1@example.com' AND e.amount > 150
SELECT c.customer_id, g FROM customers c CROSS JOIN generate_series(1, 2) g
SELECT p.sku, g FROM products p CROSS JOIN generate_series(1, 3) g
SELECT count(*) FROM products p1, products p2
SELECT c.customer_id, v.x FROM customers c CROSS JOIN (VALUES (1), (2)) v(x) WHERE c.tier = 0
SELECT count(*) FROM accounts, customers WHERE accounts.credits > customers.tier * 100
