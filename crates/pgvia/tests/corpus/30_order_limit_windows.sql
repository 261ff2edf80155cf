-- Sorting and limits from PostgreSQL's "Sorting Rows (ORDER BY)" and "LIMIT and OFFSET"
-- sections; window functions from "Window Functions" and "Window Function Calls".

## ORDER BY
SELECT customer_id, name FROM customers ORDER BY customer_id -- ordered
SELECT customer_id, name FROM customers ORDER BY customer_id DESC -- ordered
SELECT customer_id, name FROM customers ORDER BY name, customer_id -- ordered
SELECT customer_id, name FROM customers ORDER BY name DESC, customer_id DESC -- ordered
SELECT customer_id, city FROM customers ORDER BY city, customer_id -- ordered
SELECT customer_id, city FROM customers ORDER BY city NULLS FIRST, customer_id -- ordered
SELECT customer_id, city FROM customers ORDER BY city DESC, customer_id -- ordered
SELECT customer_id, city FROM customers ORDER BY city DESC NULLS LAST, customer_id -- ordered
SELECT customer_id, balance FROM customers ORDER BY balance, customer_id -- ordered
SELECT customer_id, balance FROM customers ORDER BY balance DESC NULLS LAST, customer_id -- ordered
SELECT customer_id, balance FROM customers ORDER BY balance NULLS FIRST, customer_id DESC -- ordered
SELECT customer_id, vip FROM customers ORDER BY vip, customer_id -- ordered
SELECT customer_id, signup FROM customers ORDER BY signup DESC, customer_id -- ordered
SELECT customer_id, tags FROM customers ORDER BY customer_id -- ordered
SELECT order_id, total FROM orders ORDER BY total DESC, order_id -- ordered
SELECT order_id, placed_at FROM orders ORDER BY placed_at, order_id -- ordered
SELECT order_id, note FROM orders ORDER BY note NULLS FIRST, order_id -- ordered
SELECT customer_id, order_id, line FROM order_items ORDER BY customer_id, order_id, line -- ordered
SELECT order_id, line, qty FROM order_items ORDER BY qty DESC, order_id, line -- ordered
SELECT email FROM accounts ORDER BY email -- ordered
SELECT email, credits FROM accounts ORDER BY credits DESC NULLS FIRST, email -- ordered
SELECT email, plan FROM accounts ORDER BY plan, email DESC -- ordered
SELECT id FROM events ORDER BY id -- ordered
SELECT id, at FROM events ORDER BY at DESC, id -- ordered
SELECT id, amount FROM events ORDER BY amount NULLS FIRST, id -- ordered
SELECT product_id, title FROM products ORDER BY title, product_id -- ordered
SELECT product_id, price FROM products ORDER BY price DESC, product_id -- ordered
SELECT customer_id, name FROM customers ORDER BY 2, 1 -- ordered
SELECT customer_id AS k, name FROM customers ORDER BY k DESC -- ordered
SELECT customer_id, tier FROM customers ORDER BY tier * -1, customer_id -- ordered
SELECT customer_id, name FROM customers ORDER BY lower(name), customer_id -- ordered
SELECT customer_id, name FROM customers ORDER BY length(name) DESC, customer_id -- ordered
SELECT customer_id FROM customers ORDER BY name, customer_id -- ordered
SELECT order_id, total FROM orders ORDER BY total::int, order_id -- ordered
SELECT order_id FROM orders ORDER BY customer_id, order_id -- ordered
SELECT order_id, total FROM orders WHERE customer_id = 3 ORDER BY order_id -- ordered
SELECT email FROM accounts WHERE email IN ('user2@example.com', 'user3@example.com') ORDER BY email DESC -- ordered
SELECT customer_id, name FROM customers ORDER BY name COLLATE "C", customer_id -- ordered
SELECT order_id, total FROM orders ORDER BY total USING >
SELECT customer_id, balance FROM customers ORDER BY coalesce(balance, 0), customer_id -- ordered
SELECT customer_id, tier FROM customers ORDER BY CASE WHEN vip THEN 0 ELSE 1 END, customer_id -- ordered

## LIMIT and OFFSET
SELECT customer_id, name FROM customers ORDER BY customer_id LIMIT 5 -- ordered
SELECT customer_id, name FROM customers ORDER BY customer_id LIMIT 5 OFFSET 5 -- ordered
SELECT customer_id, name FROM customers ORDER BY customer_id OFFSET 60 -- ordered
SELECT customer_id, name FROM customers ORDER BY customer_id LIMIT 0 -- ordered
SELECT customer_id, name FROM customers ORDER BY customer_id LIMIT ALL -- ordered
SELECT customer_id, name FROM customers ORDER BY customer_id LIMIT NULL -- ordered
SELECT customer_id FROM customers ORDER BY customer_id DESC LIMIT 3 -- ordered
SELECT customer_id FROM customers ORDER BY customer_id OFFSET 1000 -- ordered
SELECT customer_id, balance FROM customers ORDER BY balance DESC NULLS LAST, customer_id LIMIT 10 -- ordered
SELECT order_id, total FROM orders ORDER BY total DESC, order_id LIMIT 10 -- ordered
SELECT order_id, total FROM orders ORDER BY total, order_id LIMIT 10 OFFSET 20 -- ordered
SELECT id, at FROM events ORDER BY at, id LIMIT 7 -- ordered
SELECT email FROM accounts ORDER BY email LIMIT 4 OFFSET 2 -- ordered
SELECT product_id FROM products ORDER BY product_id LIMIT 3 -- ordered
SELECT customer_id FROM customers ORDER BY customer_id FETCH FIRST 3 ROWS ONLY -- ordered
SELECT customer_id FROM customers ORDER BY customer_id OFFSET 2 ROWS FETCH NEXT 2 ROWS ONLY -- ordered
SELECT tier, customer_id FROM customers ORDER BY tier FETCH FIRST 2 ROWS WITH TIES
SELECT customer_id FROM customers ORDER BY customer_id LIMIT 2.6 -- ordered
SELECT customer_id FROM customers ORDER BY customer_id LIMIT '3' -- ordered
SELECT customer_id FROM customers ORDER BY customer_id LIMIT 2 + 1 -- ordered
SELECT customer_id FROM customers ORDER BY customer_id LIMIT -1
SELECT customer_id FROM customers ORDER BY customer_id OFFSET -1
SELECT count(*) FROM (SELECT customer_id FROM customers ORDER BY customer_id LIMIT 10) s
SELECT tier, count(*) FROM customers GROUP BY tier ORDER BY tier LIMIT 2 OFFSET 1 -- ordered
SELECT DISTINCT city FROM customers ORDER BY city LIMIT 3 -- ordered
SELECT order_id FROM orders WHERE customer_id = 3 ORDER BY order_id LIMIT 2 -- ordered
SELECT email FROM accounts WHERE email = 'user1@example.com' LIMIT 1

## window functions
SELECT customer_id, order_id, row_number() OVER (PARTITION BY customer_id ORDER BY order_id) FROM orders
SELECT customer_id, order_id, total, sum(total) OVER (PARTITION BY customer_id) FROM orders
SELECT customer_id, order_id, rank() OVER (PARTITION BY customer_id ORDER BY total DESC) FROM orders
SELECT customer_id, order_id, dense_rank() OVER (PARTITION BY customer_id ORDER BY status) FROM orders
SELECT customer_id, order_id, count(*) OVER (PARTITION BY customer_id) FROM orders
SELECT customer_id, order_id, lag(total) OVER (PARTITION BY customer_id ORDER BY order_id) FROM orders
SELECT customer_id, order_id, lead(total, 1, 0) OVER (PARTITION BY customer_id ORDER BY order_id) FROM orders
SELECT customer_id, order_id, first_value(order_id) OVER (PARTITION BY customer_id ORDER BY order_id) FROM orders
SELECT customer_id, order_id, sum(total) OVER (PARTITION BY customer_id ORDER BY order_id ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) FROM orders
SELECT customer_id, order_id, avg(total) OVER w FROM orders WINDOW w AS (PARTITION BY customer_id)
SELECT customer_id, order_id, line, sum(qty) OVER (PARTITION BY customer_id, order_id) FROM order_items
SELECT customer_id, order_id, row_number() OVER (PARTITION BY customer_id ORDER BY order_id) AS r FROM orders ORDER BY customer_id, r -- ordered
SELECT customer_id, order_id, percent_rank() OVER (PARTITION BY customer_id ORDER BY order_id) FROM orders
SELECT customer_id, order_id, ntile(2) OVER (PARTITION BY customer_id ORDER BY order_id) FROM orders
SELECT customer_id, row_number() OVER () FROM customers WHERE customer_id = 4
SELECT customer_id, order_id, rank() OVER (ORDER BY total) FROM orders WHERE customer_id = 3
SELECT customer_id, rank() OVER (ORDER BY customer_id) FROM customers
SELECT customer_id, sum(balance) OVER () FROM customers
SELECT customer_id, row_number() OVER (ORDER BY customer_id) FROM customers
SELECT order_id, count(*) OVER (PARTITION BY status) FROM orders
SELECT email, row_number() OVER (PARTITION BY email) FROM accounts
SELECT id, rank() OVER (PARTITION BY id ORDER BY at) FROM events
SELECT id, count(*) OVER (PARTITION BY kind) FROM events
SELECT product_id, rank() OVER (ORDER BY price DESC) FROM products
SELECT customer_id, order_id, max(total) OVER (PARTITION BY customer_id) - total FROM orders
SELECT customer_id, count(*), rank() OVER (ORDER BY count(*)) FROM orders GROUP BY customer_id
SELECT customer_id, order_id, cume_dist() OVER (PARTITION BY customer_id ORDER BY total) FROM orders
SELECT customer_id, order_id, last_value(order_id) OVER (PARTITION BY customer_id ORDER BY order_id ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) FROM orders
SELECT customer_id, order_id, nth_value(order_id, 2) OVER (PARTITION BY customer_id ORDER BY order_id) FROM orders
