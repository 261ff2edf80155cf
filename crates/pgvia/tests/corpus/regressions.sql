-- Regression items: wrong answers found by the generated corpus (appended by
-- tests/sharding_corpus.rs, one per construct and way of failing) or by hand; the fixed
-- corpus replays them first.

## regression: generated: LEFT JOIN on non-co-located, grouped
-- generated: LEFT JOIN on non-co-located, grouped: rows differ (in order); found by PGVIA_CORPUS_SEED=3 (generated #3)
SELECT c.tier, count(*) FROM customers c LEFT JOIN accounts a ON a.customer_id = c.customer_id GROUP BY c.tier ORDER BY 1 -- ordered

## regression: generated: LEFT JOIN on non-co-located
-- generated: LEFT JOIN on non-co-located: command tags differ; found by PGVIA_CORPUS_SEED=3 (generated #6)
SELECT c.customer_id, c.balance, e.kind FROM customers c LEFT JOIN events e ON e.customer_id = c.customer_id

## regression: generated: LEFT JOIN on non-co-located
-- generated: LEFT JOIN on non-co-located: rows differ (in order); found by PGVIA_CORPUS_SEED=3 (generated #10)
SELECT c.name, e.at, e.id FROM customers c LEFT JOIN events e ON e.customer_id = c.customer_id WHERE c.tier BETWEEN 0 AND 0 + 20 ORDER BY 1 NULLS FIRST, 2 NULLS FIRST, 3 NULLS FIRST LIMIT 11 -- ordered

## regression: generated: JOIN on non-co-located, grouped
-- generated: JOIN on non-co-located, grouped: rows differ (in order); found by PGVIA_CORPUS_SEED=3 (generated #14)
SELECT c.vip, count(*) FROM customers c JOIN events e ON e.customer_id = c.customer_id WHERE c.city IS NOT NULL GROUP BY c.vip ORDER BY 1 -- ordered

## regression: generated: RIGHT JOIN on non-key column
-- generated: RIGHT JOIN on non-key column: command tags differ; found by PGVIA_CORPUS_SEED=3 (generated #17)
SELECT o.total, c.tier, c.name FROM orders o RIGHT JOIN customers c ON c.tier = o.order_id % 4

## regression: generated: FULL JOIN on non-co-located, grouped
-- generated: FULL JOIN on non-co-located, grouped: rows differ (in order); found by PGVIA_CORPUS_SEED=3 (generated #31)
SELECT c.vip, count(*) FROM customers c FULL JOIN accounts a ON a.customer_id = c.customer_id GROUP BY c.vip ORDER BY 1 -- ordered

## regression: generated: FULL JOIN on non-co-located, grouped
-- generated: FULL JOIN on non-co-located, grouped: command tags differ; found by PGVIA_CORPUS_SEED=3 (generated #65)
SELECT c.vip, count(*) FROM customers c FULL JOIN events e ON e.customer_id = c.customer_id WHERE e.id < '2937dd65-75f9-408c-8274-00000000008c' GROUP BY c.vip ORDER BY 1 -- ordered

## regression: generated: DELETE
-- generated: DELETE: rows differ (as multisets); found by PGVIA_CORPUS_SEED=3 (generated #67)
DELETE FROM products p WHERE p.product_id IN (11, 2) AND p.category = 'food' RETURNING *

## regression: generated: RIGHT JOIN on non-co-located
-- generated: RIGHT JOIN on non-co-located: rows differ (as multisets); found by PGVIA_CORPUS_SEED=3 (generated #74)
SELECT c.vip, c.tier, e.amount FROM customers c RIGHT JOIN events e ON e.customer_id = c.customer_id WHERE e.at < '2024-02-15'

## regression: generated: JOIN on non-co-located
-- generated: JOIN on non-co-located: rows differ (in order); found by PGVIA_CORPUS_SEED=3 (generated #88)
SELECT c.balance, e.kind FROM customers c JOIN events e ON e.customer_id = c.customer_id WHERE e.customer_id IS NOT NULL ORDER BY 1 NULLS FIRST, 2 NULLS FIRST LIMIT 14 -- ordered

## regression: generated: INSERT
-- generated: INSERT: rows differ (as multisets); found by PGVIA_CORPUS_SEED=3 (generated #89)
INSERT INTO products (product_id, sku, title, category, price, stock) VALUES (13013, 'SKU-G13013', 'Generated', NULL, 1.00, 5) RETURNING *

## regression: generated: LEFT JOIN on non-key column
-- generated: LEFT JOIN on non-key column: command tags differ; found by PGVIA_CORPUS_SEED=3 (generated #143)
SELECT o.placed_at, o.order_id, i.product_id FROM orders o LEFT JOIN order_items i ON i.order_id = o.order_id

## regression: generated: LEFT JOIN on non-key column, grouped
-- generated: LEFT JOIN on non-key column, grouped: rows differ (in order); found by PGVIA_CORPUS_SEED=3 (generated #153)
SELECT o.total, count(*) FROM orders o LEFT JOIN customers c ON c.tier = o.order_id % 4 GROUP BY o.total ORDER BY 1 -- ordered

## regression: generated: RIGHT JOIN on non-key column
-- generated: RIGHT JOIN on non-key column: rows differ (in order); found by PGVIA_CORPUS_SEED=3 (generated #156)
SELECT o.order_id, c.balance FROM orders o RIGHT JOIN customers c ON c.tier = o.order_id % 4 WHERE c.vip = true ORDER BY 1 DESC, 2 DESC NULLS LAST LIMIT 12 OFFSET 7 -- ordered

## regression: generated: FULL JOIN on non-key column, grouped
-- generated: FULL JOIN on non-key column, grouped: rows differ (in order); found by PGVIA_CORPUS_SEED=3 (generated #164)
SELECT o.order_id, count(*) FROM orders o FULL JOIN customers c ON c.tier = o.order_id % 4 GROUP BY o.order_id ORDER BY 1 -- ordered

## regression: generated: FULL JOIN on non-key column
-- generated: FULL JOIN on non-key column: rows differ (in order); found by PGVIA_CORPUS_SEED=3 (generated #170)
SELECT o.note, c.customer_id FROM orders o FULL JOIN customers c ON c.tier = o.order_id % 4 ORDER BY 1, 2 LIMIT 2 OFFSET 4 -- ordered

## regression: generated: FULL JOIN on non-co-located
-- generated: FULL JOIN on non-co-located: rows differ (in order); found by PGVIA_CORPUS_SEED=3 (generated #181)
SELECT c.tier, a.credits FROM customers c FULL JOIN accounts a ON a.customer_id = c.customer_id ORDER BY 1, 2 DESC NULLS LAST LIMIT 12 -- ordered

## regression: generated: RIGHT JOIN on non-key column, grouped
-- generated: RIGHT JOIN on non-key column, grouped: rows differ (in order); found by PGVIA_CORPUS_SEED=3 (generated #189)
SELECT o.customer_id, count(*) FROM orders o RIGHT JOIN customers c ON c.tier = o.order_id % 4 GROUP BY o.customer_id ORDER BY 1 -- ordered

## regression: generated: JOIN on non-co-located
-- generated: JOIN on non-co-located: command tags differ; found by PGVIA_CORPUS_SEED=3 (generated #220)
SELECT c.name, e.kind FROM customers c JOIN events e ON e.customer_id = c.customer_id WHERE e.at IS NOT NULL

## regression: generated: UPDATE
-- generated: UPDATE: rows differ (as multisets); found by PGVIA_CORPUS_SEED=3 (generated #233)
UPDATE products p SET stock = stock + 1 WHERE p.product_id = 10 RETURNING *

## regression: generated: FULL JOIN on non-key column
-- generated: FULL JOIN on non-key column: command tags differ; found by PGVIA_CORPUS_SEED=3 (generated #285)
SELECT o.order_id, i.price FROM orders o FULL JOIN order_items i ON i.order_id = o.order_id

## regression: generated: JOIN on non-key column, grouped
-- generated: JOIN on non-key column, grouped: command tags differ; found by PGVIA_CORPUS_SEED=3 (generated #287)
SELECT o.order_id, count(*) FROM orders o JOIN order_items i ON i.order_id = o.order_id GROUP BY o.order_id ORDER BY 1 -- ordered

## regression: generated: FULL JOIN on omnisharded, grouped
-- generated: FULL JOIN on omnisharded, grouped: rows differ (in order); found by PGVIA_CORPUS_SEED=3 (generated #311)
SELECT i.qty, count(*) FROM order_items i FULL JOIN products p ON p.product_id = i.product_id GROUP BY i.qty ORDER BY 1 -- ordered

## regression: generated: LEFT JOIN on non-key column
-- generated: LEFT JOIN on non-key column: rows differ (in order); found by PGVIA_CORPUS_SEED=3 (generated #380)
SELECT o.total, c.city FROM orders o LEFT JOIN customers c ON c.tier = o.order_id % 4 WHERE NOT (o.status = 'new') ORDER BY 1 NULLS FIRST, 2 DESC NULLS LAST LIMIT 13 -- ordered

## regression: generated: JOIN on non-key column
-- generated: JOIN on non-key column: rows differ (in order); found by PGVIA_CORPUS_SEED=3 (generated #434)
SELECT o.placed_at, c.vip FROM orders o JOIN customers c ON c.tier = o.order_id % 4 WHERE o.note < 'M' ORDER BY 1 DESC, 2 DESC NULLS LAST LIMIT 1 OFFSET 6 -- ordered

## regression: generated: RIGHT JOIN on non-co-located
-- generated: RIGHT JOIN on non-co-located: rows differ (in order); found by PGVIA_CORPUS_SEED=3 (generated #448)
SELECT c.city, c.customer_id, e.at, e.amount FROM customers c RIGHT JOIN events e ON e.customer_id = c.customer_id ORDER BY 1 DESC NULLS LAST, 2 DESC NULLS LAST, 3 NULLS FIRST, 4 DESC NULLS LAST LIMIT 15 -- ordered

## regression: generated: RIGHT JOIN on omnisharded, grouped
-- generated: RIGHT JOIN on omnisharded, grouped: rows differ (in order); found by PGVIA_CORPUS_SEED=3 (generated #461)
SELECT i.customer_id, count(*) FROM order_items i RIGHT JOIN products p ON p.product_id = i.product_id GROUP BY i.customer_id ORDER BY 1 -- ordered

## regression: generated: RIGHT JOIN on non-key column, grouped
-- generated: RIGHT JOIN on non-key column, grouped: command tags differ; found by PGVIA_CORPUS_SEED=3 (generated #479)
SELECT o.placed_at, count(*) FROM orders o RIGHT JOIN customers c ON c.tier = o.order_id % 4 GROUP BY o.placed_at ORDER BY 1 -- ordered

## regression: generated: JOIN on non-key column
-- generated: JOIN on non-key column: command tags differ; found by PGVIA_CORPUS_SEED=3 (generated #541)
SELECT o.note, o.status, c.name FROM orders o JOIN customers c ON c.tier = o.order_id % 4 WHERE NOT (c.tier = 20)

## regression: generated: FULL JOIN on omnisharded
-- generated: FULL JOIN on omnisharded: command tags differ; found by PGVIA_CORPUS_SEED=3 (generated #591)
SELECT i.product_id, i.line, p.category FROM order_items i FULL JOIN products p ON p.product_id = i.product_id

## regression: generated: JOIN on non-co-located, grouped
-- generated: JOIN on non-co-located, grouped: command tags differ; found by PGVIA_CORPUS_SEED=3 (generated #673)
SELECT c.city, count(*) FROM customers c JOIN accounts a ON a.customer_id = c.customer_id WHERE c.vip IN (true, false) GROUP BY c.city ORDER BY 1 -- ordered

## regression: generated: RIGHT JOIN on non-key column
-- generated: RIGHT JOIN on non-key column: rows differ (as multisets); found by PGVIA_CORPUS_SEED=3 (generated #676)
SELECT o.note, o.placed_at, i.customer_id, i.order_id FROM orders o RIGHT JOIN order_items i ON i.order_id = o.order_id WHERE NOT (i.order_id = 185)

## regression: generated: RIGHT JOIN on non-co-located, grouped
-- generated: RIGHT JOIN on non-co-located, grouped: rows differ (in order); found by PGVIA_CORPUS_SEED=3 (generated #813)
SELECT c.city, count(*) FROM customers c RIGHT JOIN events e ON e.customer_id = c.customer_id GROUP BY c.city ORDER BY 1 -- ordered

## regression: generated: JOIN on non-key column, grouped
-- generated: JOIN on non-key column, grouped: rows differ (in order); found by PGVIA_CORPUS_SEED=3 (generated #846)
SELECT o.status, count(*) FROM orders o JOIN order_items i ON i.order_id = o.order_id GROUP BY o.status ORDER BY 1 -- ordered

## regression: generated: FULL JOIN on non-co-located
-- generated: FULL JOIN on non-co-located: command tags differ; found by PGVIA_CORPUS_SEED=3 (generated #1043)
SELECT c.city, a.customer_id, a.email FROM customers c FULL JOIN accounts a ON a.customer_id = c.customer_id

## regression: generated: FULL JOIN on omnisharded
-- generated: FULL JOIN on omnisharded: rows differ (in order); found by PGVIA_CORPUS_SEED=3 (generated #1065)
SELECT i.price, p.category FROM order_items i FULL JOIN products p ON p.product_id = i.product_id ORDER BY 1 DESC, 2 DESC NULLS LAST LIMIT 8 -- ordered

## regression: generated: RIGHT JOIN on omnisharded
-- generated: RIGHT JOIN on omnisharded: command tags differ; found by PGVIA_CORPUS_SEED=3 (generated #1123)
SELECT i.line, i.qty, p.product_id, p.price FROM order_items i RIGHT JOIN products p ON p.product_id = i.product_id WHERE NOT (p.price = 33.7)

## regression: generated: RIGHT JOIN on non-co-located, grouped
-- generated: RIGHT JOIN on non-co-located, grouped: command tags differ; found by PGVIA_CORPUS_SEED=34 (generated #18)
SELECT c.name, count(*) FROM customers c RIGHT JOIN accounts a ON a.customer_id = c.customer_id GROUP BY c.name ORDER BY 1 -- ordered

## regression: generated: FULL JOIN on non-co-located
-- generated: FULL JOIN on non-co-located: rows differ (as multisets); found by PGVIA_CORPUS_SEED=34 (generated #324)
SELECT c.customer_id, e.at, e.customer_id FROM customers c FULL JOIN events e ON e.customer_id = c.customer_id WHERE NOT (e.id = '95ff58a1-3081-4051-8b60-000000000051')

## regression: generated: FULL JOIN on non-key column, grouped
-- generated: FULL JOIN on non-key column, grouped: command tags differ; found by PGVIA_CORPUS_SEED=34 (generated #805)
SELECT o.total, count(*) FROM orders o FULL JOIN order_items i ON i.order_id = o.order_id WHERE NOT (i.line = 24) GROUP BY o.total ORDER BY 1 -- ordered

## regression: generated: RIGHT JOIN on omnisharded
-- generated: RIGHT JOIN on omnisharded: rows differ (in order); found by PGVIA_CORPUS_SEED=34 (generated #916)
SELECT i.qty, p.stock, p.price FROM order_items i RIGHT JOIN products p ON p.product_id = i.product_id ORDER BY 1 NULLS FIRST, 2, 3 NULLS FIRST LIMIT 8 -- ordered

## regression: generated: RIGHT JOIN on non-co-located
-- generated: RIGHT JOIN on non-co-located: command tags differ; found by PGVIA_CORPUS_SEED=7 (generated #35)
SELECT c.customer_id, c.name, e.customer_id, e.id FROM customers c RIGHT JOIN events e ON e.customer_id = c.customer_id WHERE NOT (c.city = 'M')

## regression: generated: LEFT JOIN on non-co-located, grouped
-- generated: LEFT JOIN on non-co-located, grouped: command tags differ; found by PGVIA_CORPUS_SEED=3434 (generated #425)
SELECT c.tier, count(*) FROM customers c LEFT JOIN events e ON e.customer_id = c.customer_id WHERE e.id IN ('2f78861f-0cc5-4086-890c-000000000086', '413e0b7e-543c-4080-8b55-000000000080') GROUP BY c.tier ORDER BY 1 -- ordered

## regression: generated: FULL JOIN on non-key column
-- generated: FULL JOIN on non-key column: rows differ (as multisets); found by PGVIA_CORPUS_SEED=3434 (generated #1207)
SELECT o.customer_id, o.order_id, i.customer_id FROM orders o FULL JOIN order_items i ON i.order_id = o.order_id WHERE NOT (i.price = 56.1)

## regression: generated: LEFT JOIN on non-key column, grouped
-- generated: LEFT JOIN on non-key column, grouped: command tags differ; found by PGVIA_CORPUS_SEED=3434 (generated #7031)
SELECT o.customer_id, count(*) FROM orders o LEFT JOIN order_items i ON i.order_id = o.order_id WHERE NOT (i.product_id = 19) GROUP BY o.customer_id ORDER BY 1 -- ordered

## regression: generated: LEFT JOIN on non-co-located
-- generated: LEFT JOIN on non-co-located: rows differ (as multisets); found by PGVIA_CORPUS_SEED=3434 (generated #11287)
SELECT c.customer_id, c.tier, e.customer_id FROM customers c LEFT JOIN events e ON e.customer_id = c.customer_id WHERE c.name < 'Lima'

## regression: generated: LEFT JOIN on non-key column
-- generated: LEFT JOIN on non-key column: rows differ (as multisets); found by PGVIA_CORPUS_SEED=3434 (generated #17437)
SELECT o.status, i.line, i.qty FROM orders o LEFT JOIN order_items i ON i.order_id = o.order_id
