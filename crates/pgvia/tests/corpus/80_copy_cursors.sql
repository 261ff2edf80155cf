-- COPY (query) TO STDOUT from PostgreSQL's COPY reference page, and cursors from DECLARE,
-- FETCH, MOVE and CLOSE: the rows, and their order where the query's ORDER BY fixes it.

## COPY TO STDOUT
COPY customers TO STDOUT
COPY orders TO STDOUT
COPY (SELECT customer_id, name FROM customers ORDER BY customer_id) TO STDOUT -- ordered
COPY (SELECT order_id, total FROM orders ORDER BY total DESC, order_id LIMIT 10) TO STDOUT -- ordered
COPY (SELECT tier, count(*) FROM customers GROUP BY tier ORDER BY tier) TO STDOUT -- ordered
COPY (SELECT email FROM accounts WHERE plan = 'pro' ORDER BY email) TO STDOUT (FORMAT csv) -- ordered
COPY (SELECT id, kind FROM events ORDER BY id) TO STDOUT WITH (FORMAT csv, HEADER) -- ordered
COPY (SELECT * FROM products ORDER BY product_id) TO STDOUT -- ordered
COPY (SELECT customer_id FROM orders WHERE customer_id = 3 ORDER BY order_id) TO STDOUT -- ordered
COPY (SELECT DISTINCT status FROM orders ORDER BY 1) TO STDOUT -- ordered
COPY (SELECT c.customer_id, o.order_id FROM customers c JOIN orders o ON o.customer_id = c.customer_id ORDER BY 2) TO STDOUT -- ordered

## cursors
BEGIN
DECLARE c1 CURSOR FOR SELECT customer_id, name FROM customers ORDER BY customer_id
FETCH 5 FROM c1 -- ordered
FETCH NEXT FROM c1 -- ordered
MOVE 3 IN c1
FETCH 4 FROM c1 -- ordered
FETCH ALL FROM c1 -- ordered
CLOSE c1
DECLARE c2 CURSOR FOR SELECT order_id, total FROM orders ORDER BY total DESC, order_id
FETCH 3 FROM c2 -- ordered
FETCH FORWARD 2 FROM c2 -- ordered
CLOSE c2
DECLARE c3 CURSOR FOR SELECT tier, count(*) FROM customers GROUP BY tier ORDER BY tier
FETCH ALL FROM c3 -- ordered
CLOSE c3
DECLARE c4 SCROLL CURSOR FOR SELECT email FROM accounts ORDER BY email
FETCH 2 FROM c4 -- ordered
FETCH PRIOR FROM c4 -- ordered
FETCH ABSOLUTE 10 FROM c4 -- ordered
CLOSE c4
DECLARE c5 CURSOR FOR SELECT order_id FROM orders WHERE customer_id = 3 ORDER BY order_id
FETCH ALL FROM c5 -- ordered
CLOSE c5
COMMIT
BEGIN
DECLARE c6 CURSOR WITH HOLD FOR SELECT product_id, sku FROM products ORDER BY product_id
COMMIT
FETCH 4 FROM c6 -- ordered
CLOSE c6
