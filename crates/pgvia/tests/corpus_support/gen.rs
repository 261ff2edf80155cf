//! The generated corpus: random statements over the corpus schema from a small grammar
//! (filters, joins on key and non-key columns, aggregates, ORDER BY/LIMIT, subqueries, set
//! operations, DML with RETURNING). A statement whose row order matters (LIMIT) orders by
//! every output column, so its order is fixed up to identical rows and is compared in order.

use super::data::{customer_ids, event_uuid, Rng};
use super::items::Item;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Ty {
    Int,
    Num,
    Text,
    Bool,
    Ts,
    Uuid,
}

struct Table {
    name: &'static str,
    alias: &'static str,
    cols: &'static [(&'static str, Ty)],
}

const CUSTOMERS: Table = Table {
    name: "customers",
    alias: "c",
    cols: &[
        ("customer_id", Ty::Int),
        ("name", Ty::Text),
        ("city", Ty::Text),
        ("tier", Ty::Int),
        ("balance", Ty::Num),
        ("vip", Ty::Bool),
    ],
};
const ORDERS: Table = Table {
    name: "orders",
    alias: "o",
    cols: &[
        ("order_id", Ty::Int),
        ("customer_id", Ty::Int),
        ("status", Ty::Text),
        ("total", Ty::Num),
        ("placed_at", Ty::Ts),
        ("note", Ty::Text),
    ],
};
const ITEMS: Table = Table {
    name: "order_items",
    alias: "i",
    cols: &[
        ("customer_id", Ty::Int),
        ("order_id", Ty::Int),
        ("line", Ty::Int),
        ("product_id", Ty::Int),
        ("qty", Ty::Int),
        ("price", Ty::Num),
    ],
};
const ACCOUNTS: Table = Table {
    name: "accounts",
    alias: "a",
    cols: &[("email", Ty::Text), ("customer_id", Ty::Int), ("plan", Ty::Text), ("credits", Ty::Int)],
};
const EVENTS: Table = Table {
    name: "events",
    alias: "e",
    cols: &[
        ("id", Ty::Uuid),
        ("customer_id", Ty::Int),
        ("kind", Ty::Text),
        ("at", Ty::Ts),
        ("amount", Ty::Int),
    ],
};
const PRODUCTS: Table = Table {
    name: "products",
    alias: "p",
    cols: &[
        ("product_id", Ty::Int),
        ("sku", Ty::Text),
        ("category", Ty::Text),
        ("price", Ty::Num),
        ("stock", Ty::Int),
    ],
};
const ALL: [&Table; 6] = [&CUSTOMERS, &ORDERS, &ITEMS, &ACCOUNTS, &EVENTS, &PRODUCTS];

/// Join pairs and their conditions: on the key (co-located), off it, across key types, with
/// the table on every shard.
const JOINS: [(&Table, &Table, &str, &str); 7] = [
    (&CUSTOMERS, &ORDERS, "o.customer_id = c.customer_id", "co-located key"),
    (&ORDERS, &ITEMS, "i.customer_id = o.customer_id AND i.order_id = o.order_id", "co-located key"),
    (&ORDERS, &ITEMS, "i.order_id = o.order_id", "non-key column"),
    (&CUSTOMERS, &EVENTS, "e.customer_id = c.customer_id", "non-co-located"),
    (&CUSTOMERS, &ACCOUNTS, "a.customer_id = c.customer_id", "non-co-located"),
    (&ITEMS, &PRODUCTS, "p.product_id = i.product_id", "omnisharded"),
    (&ORDERS, &CUSTOMERS, "c.tier = o.order_id % 4", "non-key column"),
];

pub struct Generator {
    rng: Rng,
    next_id: i64,
}

impl Generator {
    pub fn new(seed: u64) -> Generator {
        Generator { rng: Rng::new(seed), next_id: 10_000 + i64::try_from(seed % 1000).unwrap_or(0) * 1000 }
    }

    pub fn next_item(&mut self, n: u64) -> Item {
        let (construct, sql, ordered) = match self.rng.below(100) {
            0..=19 => self.single(),
            20..=34 => self.aggregate(),
            35..=54 => self.join(),
            55..=69 => self.subquery(),
            70..=79 => self.set_op(),
            _ => self.dml(),
        };
        Item {
            construct: format!("generated: {construct}"),
            sql,
            ordered,
            simple_only: false,
            place: format!("generated #{n}"),
        }
    }

    fn lit(&mut self, table: &Table, col: &str, ty: Ty) -> String {
        let r = &mut self.rng;
        match ty {
            Ty::Int if col == "customer_id" => r.pick(&customer_ids()).to_string(),
            Ty::Int if col == "order_id" => (1 + r.below(200)).to_string(),
            Ty::Int if col == "product_id" => (1 + r.below(26)).to_string(),
            Ty::Int => (r.below(60) as i64 - 10).to_string(),
            Ty::Num => format!("{}.{}", r.below(400) as i64 - 50, r.below(10)),
            Ty::Text => match (table.name, col) {
                (_, "status") => format!("'{}'", r.pick(&["new", "paid", "shipped", "Paid"])),
                (_, "kind") => format!("'{}'", r.pick(&["click", "view", "buy", "Click"])),
                (_, "plan") => format!("'{}'", r.pick(&["free", "pro", "team"])),
                (_, "email") => format!("'user{}@example.com'", 1 + r.below(45)),
                (_, "category") => format!("'{}'", r.pick(&["tools", "toys", "food"])),
                _ => format!("'{}'", r.pick(&["Alice", "alice", "Bob", "Oslo", "Lima", "gift", "M"])),
            },
            Ty::Bool => r.pick(&["true", "false"]).to_string(),
            Ty::Ts => format!("'2024-{:02}-15'", 1 + r.below(12)),
            Ty::Uuid => format!("'{}'", event_uuid(1 + r.below(150))),
        }
    }

    fn col<'t>(&mut self, t: &'t Table) -> (&'t str, Ty) {
        *self.rng.pick(t.cols)
    }

    fn predicate(&mut self, t: &Table) -> String {
        let (c, ty) = self.col(t);
        let a = t.alias;
        match self.rng.below(7) {
            0 => format!("{a}.{c} IS NULL"),
            1 => format!("{a}.{c} IS NOT NULL"),
            2 => {
                let (x, y) = (self.lit(t, c, ty), self.lit(t, c, ty));
                format!("{a}.{c} IN ({x}, {y})")
            }
            3 if matches!(ty, Ty::Int | Ty::Num) => {
                let x = self.lit(t, c, ty);
                format!("{a}.{c} BETWEEN {x} AND {x} + 20")
            }
            4 if ty != Ty::Bool => format!("{a}.{c} < {}", self.lit(t, c, ty)),
            5 => format!("NOT ({a}.{c} = {})", self.lit(t, c, ty)),
            _ => format!("{a}.{c} = {}", self.lit(t, c, ty)),
        }
    }

    fn filter(&mut self, t: &Table) -> String {
        match self.rng.below(4) {
            0 => String::new(),
            1 | 2 => format!(" WHERE {}", self.predicate(t)),
            _ => {
                let (x, y) = (self.predicate(t), self.predicate(t));
                format!(" WHERE {x} {} {y}", self.rng.pick(&["AND", "OR"]))
            }
        }
    }

    fn projection(&mut self, t: &Table, n: u64) -> Vec<String> {
        let mut cols: Vec<String> = Vec::new();
        for _ in 0..1 + self.rng.below(n) {
            let c = format!("{}.{}", t.alias, self.col(t).0);
            if !cols.contains(&c) {
                cols.push(c);
            }
        }
        cols
    }

    /// ORDER BY every output column and a LIMIT/OFFSET, or nothing.
    fn order_limit(&mut self, width: usize) -> (String, bool) {
        if self.rng.chance(50) {
            return (String::new(), false);
        }
        let dirs: Vec<String> = (1..=width)
            .map(|i| format!("{i}{}", self.rng.pick(&["", " DESC", " NULLS FIRST", " DESC NULLS LAST"])))
            .collect();
        let offset =
            if self.rng.chance(30) { format!(" OFFSET {}", self.rng.below(10)) } else { String::new() };
        (format!(" ORDER BY {} LIMIT {}{offset}", dirs.join(", "), 1 + self.rng.below(15)), true)
    }

    fn single(&mut self) -> (String, String, bool) {
        let t = *self.rng.pick(&ALL);
        let cols = self.projection(t, 4);
        let distinct = if self.rng.chance(15) { "DISTINCT " } else { "" };
        let filter = self.filter(t);
        let (ol, ordered) = self.order_limit(cols.len());
        let sql = format!("SELECT {distinct}{} FROM {} {}{filter}{ol}", cols.join(", "), t.name, t.alias);
        ("single table".into(), sql, ordered)
    }

    fn aggregate(&mut self) -> (String, String, bool) {
        let t = *self.rng.pick(&ALL);
        let (g, _) = self.col(t);
        let a = t.alias;
        let nums: Vec<&str> =
            t.cols.iter().filter(|c| matches!(c.1, Ty::Int | Ty::Num)).map(|c| c.0).collect();
        let mut aggs = vec!["count(*)".to_owned()];
        for _ in 0..1 + self.rng.below(3) {
            let n = self.rng.pick(&nums);
            let f = self.rng.pick(&["sum", "min", "max", "avg", "count"]);
            aggs.push(format!("{f}({a}.{n})"));
        }
        let filter = self.filter(t);
        let having = if self.rng.chance(30) {
            format!(" HAVING count(*) > {}", self.rng.below(4))
        } else {
            String::new()
        };
        if self.rng.chance(25) {
            let sql = format!("SELECT {} FROM {} {a}{filter}", aggs.join(", "), t.name);
            return ("aggregate".into(), sql, false);
        }
        let sql = format!(
            "SELECT {a}.{g}, {} FROM {} {a}{filter} GROUP BY {a}.{g}{having} ORDER BY 1",
            aggs.join(", "),
            t.name
        );
        ("aggregate with GROUP BY".into(), sql, true)
    }

    fn join(&mut self) -> (String, String, bool) {
        let (l, r, on, what) = *self.rng.pick(&JOINS);
        let how = *self.rng.pick(&["JOIN", "JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"]);
        let mut cols = self.projection(l, 2);
        cols.extend(self.projection(r, 2));
        let side = if self.rng.chance(50) { l } else { r };
        let filter =
            if self.rng.chance(50) { format!(" WHERE {}", self.predicate(side)) } else { String::new() };
        let from = format!("{} {} {how} {} {} ON {on}", l.name, l.alias, r.name, r.alias);
        if self.rng.chance(30) {
            let g = &cols[0];
            let sql = format!("SELECT {g}, count(*) FROM {from}{filter} GROUP BY {g} ORDER BY 1");
            return (format!("{how} on {what}, grouped"), sql, true);
        }
        let (ol, ordered) = self.order_limit(cols.len());
        let sql = format!("SELECT {} FROM {from}{filter}{ol}", cols.join(", "));
        (format!("{how} on {what}"), sql, ordered)
    }

    fn subquery(&mut self) -> (String, String, bool) {
        let outer = *self.rng.pick(&[&CUSTOMERS, &ORDERS, &EVENTS, &ACCOUNTS]);
        let inner = *self.rng.pick(&[&ORDERS, &ITEMS, &EVENTS, &ACCOUNTS, &CUSTOMERS, &PRODUCTS]);
        let o = outer.alias;
        let cols = self.projection(outer, 3);
        let ia = "s";
        let inner_filter = self.predicate(inner).replacen(&format!("{}.", inner.alias), &format!("{ia}."), 2);
        let has_customer = |t: &Table| t.cols.iter().any(|c| c.0 == "customer_id");
        let (what, cond) = match self.rng.below(4) {
            0 if has_customer(inner) => (
                "IN (SELECT)",
                format!("{o}.customer_id {} (SELECT {ia}.customer_id FROM {} {ia} WHERE {inner_filter})", self.rng.pick(&["IN", "NOT IN"]), inner.name),
            ),
            1 if has_customer(inner) => (
                "correlated EXISTS",
                format!("{}EXISTS (SELECT 1 FROM {} {ia} WHERE {ia}.customer_id = {o}.customer_id AND {inner_filter})", self.rng.pick(&["", "NOT "]), inner.name),
            ),
            2 => {
                let nums: Vec<&str> = inner.cols.iter().filter(|c| matches!(c.1, Ty::Int | Ty::Num)).map(|c| c.0).collect();
                let n = self.rng.pick(&nums);
                ("scalar subquery", format!("{o}.customer_id > (SELECT min({ia}.{n}) FROM {} {ia} WHERE {inner_filter})", inner.name))
            }
            _ => (
                "correlated scalar count",
                format!("{o}.customer_id IS NOT NULL AND 1 < (SELECT count(*) FROM {} {ia} WHERE {ia}.{} = {o}.customer_id)", inner.name, if has_customer(inner) { "customer_id" } else { "product_id" }),
            ),
        };
        let (ol, ordered) = self.order_limit(cols.len());
        let sql = format!("SELECT {} FROM {} {o} WHERE {cond}{ol}", cols.join(", "), outer.name);
        (what.into(), sql, ordered)
    }

    fn set_op(&mut self) -> (String, String, bool) {
        let tables = [&CUSTOMERS, &ORDERS, &ITEMS, &ACCOUNTS, &EVENTS];
        let (l, r) = (*self.rng.pick(&tables), *self.rng.pick(&tables));
        let op =
            *self.rng.pick(&["UNION", "UNION ALL", "INTERSECT", "EXCEPT", "INTERSECT ALL", "EXCEPT ALL"]);
        let (fl, fr) = (self.filter(l), self.filter(r));
        let ordered = self.rng.chance(40);
        let tail =
            if ordered { format!(" ORDER BY 1 LIMIT {}", 1 + self.rng.below(20)) } else { String::new() };
        let sql = format!(
            "SELECT {la}.customer_id FROM {} {la}{fl} {op} SELECT {ra}.customer_id FROM {} {ra}{fr}{tail}",
            l.name,
            r.name,
            la = l.alias,
            ra = r.alias
        );
        (op.into(), sql, ordered)
    }

    fn dml(&mut self) -> (String, String, bool) {
        self.next_id += 1;
        let id = self.next_id;
        let t = *self.rng.pick(&[&CUSTOMERS, &ORDERS, &ITEMS, &ACCOUNTS, &EVENTS, &PRODUCTS]);
        let a = t.alias;
        let returning = if self.rng.chance(60) { " RETURNING *" } else { "" };
        match self.rng.below(3) {
            0 => {
                let customer = self.rng.pick(&customer_ids()).to_string();
                let values = match t.name {
                    "customers" => format!(
                        "({id}, 'Gen{id}', NULL, {}, {}.5, '2024-02-02', NULL, '{{gen}}')",
                        id % 4,
                        id % 100
                    ),
                    "orders" => {
                        format!("({id}, {customer}, 'new', {}.25, '2024-03-03 10:00:00+00', NULL)", id % 300)
                    }
                    "order_items" => format!("({customer}, {id}, 1, {}, 2, 9.99)", 1 + id % 25),
                    "accounts" => format!("('gen{id}@example.com', {customer}, 'free', {}, NULL)", id % 50),
                    "events" => format!(
                        "('{}', {customer}, 'view', '2024-05-05 05:00:00', {}, NULL)",
                        event_uuid(u64::try_from(id).unwrap_or(0)),
                        id % 90
                    ),
                    _ => format!("({id}, 'SKU-G{id}', 'Generated', NULL, 1.00, 5)"),
                };
                let columns: Vec<&str> = match t.name {
                    "customers" => vec!["customer_id, name, city, tier, balance, signup, vip, tags"],
                    "orders" => vec!["order_id, customer_id, status, total, placed_at, note"],
                    "order_items" => vec!["customer_id, order_id, line, product_id, qty, price"],
                    "accounts" => vec!["email, customer_id, plan, credits, meta"],
                    "events" => vec!["id, customer_id, kind, at, amount, payload"],
                    _ => vec!["product_id, sku, title, category, price, stock"],
                };
                let sql = format!("INSERT INTO {} ({}) VALUES {values}{returning}", t.name, columns[0]);
                ("INSERT".into(), sql, false)
            }
            1 => {
                // Not a primary key column other than the shard key: `line = line + 1`
                // collides with the next line or not depending on the order PostgreSQL
                // visits the rows, which differs between the reference and the shards.
                let settable: Vec<(&str, Ty)> = t.cols[1..]
                    .iter()
                    .copied()
                    .filter(|c| t.name != "order_items" || !matches!(c.0, "order_id" | "line"))
                    .collect();
                let (c, ty) = *self.rng.pick(&settable);
                let set = match ty {
                    Ty::Int => format!("{c} = {c} + 1"),
                    Ty::Num => format!("{c} = {c} * 2"),
                    Ty::Text => format!("{c} = upper({c})"),
                    Ty::Bool => format!("{c} = NOT {c}"),
                    Ty::Ts => format!("{c} = {c} + interval '1 hour'"),
                    Ty::Uuid => format!("{c} = {c}"),
                };
                let filter = format!(" WHERE {}", self.predicate(t));
                let sql = format!("UPDATE {} {a} SET {set}{filter}{returning}", t.name);
                ("UPDATE".into(), sql, false)
            }
            _ => {
                // By the first column (a key), sometimes with a filter too: the tables must
                // not drain over a long run.
                let (c, ty) = t.cols[0];
                let (x, y) = (self.lit(t, c, ty), self.lit(t, c, ty));
                let more =
                    if self.rng.chance(40) { format!(" AND {}", self.predicate(t)) } else { String::new() };
                let sql = format!("DELETE FROM {} {a} WHERE {a}.{c} IN ({x}, {y}){more}{returning}", t.name);
                ("DELETE".into(), sql, false)
            }
        }
    }
}
