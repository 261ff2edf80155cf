-- Aggregates from PostgreSQL's "Aggregate Functions" section and the "GROUP BY and HAVING"
-- and "DISTINCT" sections of the Queries chapter.

## aggregate: count
SELECT count(*) FROM customers
SELECT count(*) FROM orders
SELECT count(*) FROM order_items
SELECT count(*) FROM accounts
SELECT count(*) FROM events
SELECT count(*) FROM products
SELECT count(city) FROM customers
SELECT count(balance), count(vip), count(tags) FROM customers
SELECT count(DISTINCT city) FROM customers
SELECT count(DISTINCT tier) FROM customers
SELECT count(DISTINCT customer_id) FROM orders
SELECT count(*) FROM customers WHERE customer_id = 5
SELECT count(*) FROM customers WHERE customer_id = 424242
SELECT count(*) FROM orders WHERE status = 'nothing'
SELECT count(*) FILTER (WHERE vip) FROM customers
SELECT count(*), count(*) FILTER (WHERE tier > 1) FROM customers
SELECT count(1) FROM events
SELECT count(DISTINCT kind) FROM events
SELECT count(meta) FROM accounts

## aggregate: sum and avg
SELECT sum(total) FROM orders
SELECT sum(qty) FROM order_items
SELECT sum(qty * price) FROM order_items
SELECT sum(balance) FROM customers
SELECT sum(tier) FROM customers
SELECT sum(customer_id) FROM customers
SELECT sum(amount) FROM events
SELECT sum(credits) FROM accounts
SELECT sum(stock) FROM products
SELECT avg(total) FROM orders
SELECT avg(qty) FROM order_items
SELECT avg(balance) FROM customers
SELECT avg(tier) FROM customers
SELECT avg(amount) FROM events
SELECT avg(credits) FROM accounts
SELECT sum(total), avg(total), count(total) FROM orders WHERE status = 'paid'
SELECT sum(total) FROM orders WHERE customer_id = 424242
SELECT avg(amount) FROM events WHERE amount IS NULL
SELECT sum(DISTINCT tier) FROM customers
SELECT avg(DISTINCT qty) FROM order_items
SELECT sum(total) FILTER (WHERE status = 'new') FROM orders
SELECT sum(total::float8) > 0 FROM orders

## aggregate: min and max
SELECT min(total), max(total) FROM orders
SELECT min(balance), max(balance) FROM customers
SELECT min(name), max(name) FROM customers
SELECT min(city), max(city) FROM customers
SELECT min(signup), max(signup) FROM customers
SELECT min(placed_at), max(placed_at) FROM orders
SELECT min(at), max(at) FROM events
SELECT min(email), max(email) FROM accounts
SELECT min(customer_id), max(customer_id) FROM customers
SELECT min(id), max(id) FROM events
SELECT min(amount), max(amount) FROM events WHERE amount IS NULL
SELECT max(qty), min(price) FROM order_items
SELECT max(total) FROM orders WHERE customer_id = 3

## aggregate: boolean, statistics, lists
SELECT bool_and(vip), bool_or(vip), every(vip) FROM customers
SELECT bool_and(tier >= 0), bool_or(tier > 2) FROM customers
SELECT stddev(qty), variance(qty) FROM order_items
SELECT stddev_pop(total), stddev_samp(total), var_pop(total), var_samp(total) FROM orders
SELECT stddev(tier) FROM customers
SELECT string_agg(name, ',' ORDER BY customer_id) FROM customers
SELECT string_agg(DISTINCT city, ';' ORDER BY city) FROM customers
SELECT string_agg(sku, '|' ORDER BY sku DESC) FROM products
SELECT array_agg(customer_id ORDER BY customer_id) FROM customers
SELECT array_agg(tier ORDER BY customer_id DESC) FROM customers
SELECT array_agg(email ORDER BY email) FROM accounts
SELECT jsonb_agg(order_id ORDER BY order_id) FROM orders WHERE customer_id = 3
SELECT json_agg(kind ORDER BY id) FROM events WHERE customer_id = 5
SELECT jsonb_object_agg(email, credits) FROM accounts WHERE email = 'user1@example.com'
SELECT bit_and(tier), bit_or(tier) FROM customers
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY total) FROM orders
SELECT mode() WITHIN GROUP (ORDER BY status) FROM orders
SELECT corr(qty, price) FROM order_items
SELECT regr_count(qty, price) FROM order_items
SELECT count(*) / 2 FROM customers
SELECT round(avg(total), 2) FROM orders
SELECT sum(total) / count(*) FROM orders
SELECT max(total) - min(total) FROM orders
SELECT count(*) + 0 FROM products
SELECT sum(price), avg(price), min(price), max(price), count(*) FROM products

## GROUP BY
SELECT tier, count(*) FROM customers GROUP BY tier
SELECT tier, count(*) FROM customers GROUP BY tier ORDER BY tier -- ordered
SELECT city, count(*) FROM customers GROUP BY city ORDER BY city NULLS FIRST -- ordered
SELECT city, count(*), sum(balance) FROM customers GROUP BY city
SELECT vip, count(*), avg(balance) FROM customers GROUP BY vip
SELECT tier, vip, count(*) FROM customers GROUP BY tier, vip ORDER BY tier, vip -- ordered
SELECT status, count(*), sum(total), avg(total), min(total), max(total) FROM orders GROUP BY status ORDER BY status -- ordered
SELECT customer_id, count(*), sum(total) FROM orders GROUP BY customer_id ORDER BY customer_id -- ordered
SELECT customer_id, count(*) FROM order_items GROUP BY customer_id
SELECT order_id, sum(qty * price) FROM order_items GROUP BY order_id ORDER BY order_id -- ordered
SELECT product_id, sum(qty) FROM order_items GROUP BY product_id ORDER BY product_id -- ordered
SELECT plan, count(*), sum(credits) FROM accounts GROUP BY plan ORDER BY plan -- ordered
SELECT kind, count(*), sum(amount), max(at) FROM events GROUP BY kind ORDER BY kind -- ordered
SELECT customer_id, count(*) FROM events GROUP BY customer_id ORDER BY customer_id NULLS LAST -- ordered
SELECT category, count(*), sum(stock) FROM products GROUP BY category ORDER BY category -- ordered
SELECT tier AS t, count(*) FROM customers GROUP BY t ORDER BY t -- ordered
SELECT tier, count(*) FROM customers GROUP BY 1 ORDER BY 1 -- ordered
SELECT tier % 2, count(*) FROM customers GROUP BY tier % 2 ORDER BY 1 -- ordered
SELECT date_trunc('month', placed_at) AS m, count(*) FROM orders GROUP BY m ORDER BY m -- ordered
SELECT extract(month FROM at) AS m, count(*) FROM events GROUP BY 1 ORDER BY 1 -- ordered
SELECT upper(status), count(*) FROM orders GROUP BY upper(status) ORDER BY 1 -- ordered
SELECT lower(name), count(*) FROM customers GROUP BY lower(name) ORDER BY 1 -- ordered
SELECT name, count(*) FROM customers GROUP BY name ORDER BY name -- ordered
SELECT count(*) FROM customers GROUP BY tier ORDER BY count(*), 1 -- ordered
SELECT tier, count(*) FROM customers WHERE customer_id = 5 GROUP BY tier
SELECT status, count(*) FROM orders WHERE customer_id = 3 GROUP BY status ORDER BY status -- ordered
SELECT tier, string_agg(name, ',' ORDER BY customer_id) FROM customers GROUP BY tier ORDER BY tier -- ordered
SELECT tier, array_agg(customer_id ORDER BY customer_id) FROM customers GROUP BY tier ORDER BY tier -- ordered
SELECT tier, bool_or(vip), bool_and(vip) FROM customers GROUP BY tier ORDER BY tier -- ordered
SELECT tier, count(DISTINCT city) FROM customers GROUP BY tier ORDER BY tier -- ordered
SELECT tier, count(*) FILTER (WHERE vip) FROM customers GROUP BY tier ORDER BY tier -- ordered
SELECT status, stddev(total) FROM orders GROUP BY status ORDER BY status -- ordered
SELECT tier, count(*) FROM customers GROUP BY tier ORDER BY count(*) DESC, tier -- ordered
SELECT customer_id, sum(total) FROM orders GROUP BY customer_id ORDER BY sum(total) DESC, customer_id LIMIT 5 -- ordered
SELECT city FROM customers GROUP BY city
SELECT tier, vip FROM customers GROUP BY tier, vip
SELECT tier, count(*) FROM customers GROUP BY ROLLUP (tier)
SELECT tier, vip, count(*) FROM customers GROUP BY CUBE (tier, vip)
SELECT tier, vip, count(*) FROM customers GROUP BY GROUPING SETS ((tier), (vip))
SELECT * FROM customers GROUP BY customer_id
SELECT tier, sum(balance) / count(*) FROM customers GROUP BY tier

## HAVING
SELECT tier, count(*) FROM customers GROUP BY tier HAVING count(*) > 10 ORDER BY tier -- ordered
SELECT tier, count(*) FROM customers GROUP BY tier HAVING count(*) > 1000
SELECT customer_id, count(*) FROM orders GROUP BY customer_id HAVING count(*) >= 7 ORDER BY customer_id -- ordered
SELECT customer_id, sum(total) FROM orders GROUP BY customer_id HAVING sum(total) > 1500 ORDER BY 1 -- ordered
SELECT status, avg(total) FROM orders GROUP BY status HAVING avg(total) < 250 ORDER BY 1 -- ordered
SELECT city, count(*) FROM customers GROUP BY city HAVING city IS NOT NULL ORDER BY 1 -- ordered
SELECT tier, max(balance) FROM customers GROUP BY tier HAVING max(balance) > 900 OR tier = 0 ORDER BY 1 -- ordered
SELECT kind, count(*) FROM events GROUP BY kind HAVING NOT count(*) < 5 ORDER BY 1 -- ordered
SELECT plan FROM accounts GROUP BY plan HAVING bool_or(credits > 200) ORDER BY 1 -- ordered
SELECT product_id, sum(qty) FROM order_items GROUP BY product_id HAVING sum(qty) > 40 AND count(*) > 10 ORDER BY 1 -- ordered
SELECT count(*) FROM customers HAVING count(*) > 0
SELECT count(*) FROM customers HAVING count(*) > 1000
SELECT tier, count(*) FROM customers GROUP BY tier HAVING sum(balance) + 1 > 2

## DISTINCT
SELECT DISTINCT tier FROM customers
SELECT DISTINCT tier FROM customers ORDER BY tier -- ordered
SELECT DISTINCT city FROM customers ORDER BY city DESC NULLS LAST -- ordered
SELECT DISTINCT tier, vip FROM customers
SELECT DISTINCT status FROM orders ORDER BY 1 -- ordered
SELECT DISTINCT customer_id FROM orders ORDER BY customer_id -- ordered
SELECT DISTINCT plan FROM accounts
SELECT DISTINCT kind FROM events ORDER BY kind -- ordered
SELECT DISTINCT category FROM products
SELECT DISTINCT upper(city) FROM customers
SELECT DISTINCT tags FROM customers
SELECT DISTINCT ON (tier) tier, customer_id, name FROM customers ORDER BY tier, customer_id -- ordered
SELECT DISTINCT ON (tier) tier, balance FROM customers ORDER BY tier, balance DESC NULLS LAST, customer_id -- ordered
SELECT DISTINCT ON (customer_id) customer_id, order_id, total FROM orders ORDER BY customer_id, total DESC, order_id -- ordered
SELECT DISTINCT ON (status) status, order_id FROM orders ORDER BY status, order_id -- ordered
SELECT DISTINCT ON (kind) kind, at, id FROM events ORDER BY kind, at, id -- ordered
SELECT DISTINCT ON (plan) plan, email FROM accounts ORDER BY plan, email -- ordered
SELECT DISTINCT tier FROM customers WHERE customer_id IN (1, 2, 3, 4, 5)
SELECT DISTINCT tier FROM customers ORDER BY tier LIMIT 2 -- ordered
SELECT count(*) FROM (SELECT DISTINCT tier FROM customers) d
