-- ORM-shaped queries (Rails ActiveRecord, Django): quoted identifiers, joins, IN lists of
-- 1, 10 and 100 elements (parameters and literals), RETURNING, EXISTS-style probes.

SELECT "users".* FROM "users" WHERE "users"."id" = $1 LIMIT $2

SELECT 1 AS one FROM "users" WHERE "users"."email" = $1 LIMIT $2

SELECT "posts".* FROM "posts" INNER JOIN "users" ON "users"."id" = "posts"."user_id" WHERE "users"."account_id" = $1 AND "posts"."published" = $2 ORDER BY "posts"."created_at" DESC LIMIT $3 OFFSET $4

INSERT INTO "users" ("name", "email", "account_id", "created_at", "updated_at") VALUES ($1, $2, $3, $4, $5) RETURNING "id"

UPDATE "users" SET "name" = $1, "updated_at" = $2 WHERE "users"."id" = $3

DELETE FROM "sessions" WHERE "sessions"."id" = $1

SELECT "comments".* FROM "comments" WHERE "comments"."post_id" IN ($1)

SELECT "comments".* FROM "comments" WHERE "comments"."post_id" IN ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)

SELECT "comments".* FROM "comments" WHERE "comments"."post_id" IN ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33, $34, $35, $36, $37, $38, $39, $40, $41, $42, $43, $44, $45, $46, $47, $48, $49, $50, $51, $52, $53, $54, $55, $56, $57, $58, $59, $60, $61, $62, $63, $64, $65, $66, $67, $68, $69, $70, $71, $72, $73, $74, $75, $76, $77, $78, $79, $80, $81, $82, $83, $84, $85, $86, $87, $88, $89, $90, $91, $92, $93, $94, $95, $96, $97, $98, $99, $100)

SELECT "tags".* FROM "tags" INNER JOIN "taggings" ON "tags"."id" = "taggings"."tag_id" WHERE "taggings"."taggable_type" = 'Post' AND "taggings"."taggable_id" IN (1000, 1007, 1014, 1021, 1028, 1035, 1042, 1049, 1056, 1063)

SELECT "tags".* FROM "tags" WHERE "tags"."id" IN (1000, 1007, 1014, 1021, 1028, 1035, 1042, 1049, 1056, 1063, 1070, 1077, 1084, 1091, 1098, 1105, 1112, 1119, 1126, 1133, 1140, 1147, 1154, 1161, 1168, 1175, 1182, 1189, 1196, 1203, 1210, 1217, 1224, 1231, 1238, 1245, 1252, 1259, 1266, 1273, 1280, 1287, 1294, 1301, 1308, 1315, 1322, 1329, 1336, 1343, 1350, 1357, 1364, 1371, 1378, 1385, 1392, 1399, 1406, 1413, 1420, 1427, 1434, 1441, 1448, 1455, 1462, 1469, 1476, 1483, 1490, 1497, 1504, 1511, 1518, 1525, 1532, 1539, 1546, 1553, 1560, 1567, 1574, 1581, 1588, 1595, 1602, 1609, 1616, 1623, 1630, 1637, 1644, 1651, 1658, 1665, 1672, 1679, 1686, 1693)

SELECT "blog_entry"."id", "blog_entry"."blog_id", "blog_entry"."headline", "blog_entry"."body_text", "blog_entry"."pub_date", "blog_entry"."mod_date", "blog_entry"."rating" FROM "blog_entry" INNER JOIN "blog_blog" ON ("blog_entry"."blog_id" = "blog_blog"."id") WHERE ("blog_blog"."name" = $1 AND "blog_entry"."pub_date" >= $2) ORDER BY "blog_entry"."pub_date" DESC

SELECT COUNT(*) AS "__count" FROM "blog_entry" WHERE "blog_entry"."id" IN (SELECT U0."entry_id" FROM "blog_entry_authors" U0 INNER JOIN "blog_author" U1 ON (U0."author_id" = U1."id") WHERE U1."name" = $1)

INSERT INTO "blog_entry" ("blog_id", "headline", "body_text", "pub_date", "mod_date", "rating") VALUES ($1, $2, $3, $4, $5, $6) RETURNING "blog_entry"."id"

UPDATE "blog_entry" SET "rating" = ("blog_entry"."rating" + $1) WHERE "blog_entry"."id" = $2

SELECT "auth_user"."id", "auth_user"."password", "auth_user"."last_login", "auth_user"."is_superuser", "auth_user"."username" FROM "auth_user" WHERE "auth_user"."username" = $1 LIMIT 21

SELECT "orders"."id", "orders"."total", "customers"."name", "addresses"."city" FROM "orders" LEFT OUTER JOIN "customers" ON "customers"."id" = "orders"."customer_id" LEFT OUTER JOIN "addresses" ON "addresses"."id" = "customers"."address_id" WHERE "orders"."tenant_id" = $1 AND "orders"."status" IN ($2, $3, $4) AND "orders"."created_at" BETWEEN $5 AND $6 ORDER BY "orders"."created_at" DESC LIMIT 50
