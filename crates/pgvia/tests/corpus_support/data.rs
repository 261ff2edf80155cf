//! The corpus's rows, the same on every run (a fixed seed): NULLs, ties, negative numbers,
//! numerics, text differing only in case, timestamps, booleans, arrays and jsonb; orders whose
//! customer does not exist and customers without orders, so outer joins have both sides.

/// A small deterministic generator (xorshift64*), also the generated corpus's.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[usize::try_from(self.below(xs.len() as u64)).unwrap_or(0)]
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The uuid of event `i`.
pub fn event_uuid(i: u64) -> String {
    let h = Rng::new(i + 7).next();
    format!("{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}", h >> 32, (h >> 16) & 0xffff, i % 4096, h % 4096, i)
}

fn or_null(v: String, null: bool) -> String {
    if null {
        "NULL".into()
    } else {
        v
    }
}

/// The customer ids: 1..=60 and a few negative and large ones.
pub fn customer_ids() -> Vec<i64> {
    let mut ids: Vec<i64> = (1..=60).collect();
    ids.extend([-3, -7, 1_000_000_000_001]);
    ids
}

/// One multi-row INSERT per table, loaded through pgvia and on the reference alike.
pub fn inserts() -> Vec<String> {
    let mut rng = Rng::new(34);
    let names =
        ["Alice", "alice", "ALICE", "Bob", "bob", "Carol", "Dave", "Eve", "Émile", "Zoë", "mallory", "Trent"];
    let cities = ["Oslo", "oslo", "Lima", "Paris", "Zagreb", "Austin"];
    let mut out = Vec::new();
    let ids = customer_ids();
    let rows: Vec<String> = ids
        .iter()
        .map(|&id| {
            let name = format!("'{}'", rng.pick(&names));
            let city = or_null(format!("'{}'", rng.pick(&cities)), rng.chance(15));
            let tier = rng.below(4);
            let balance =
                or_null(format!("{}.{:02}", rng.below(2000) as i64 - 500, rng.below(100)), rng.chance(10));
            let signup = format!("'2023-{:02}-{:02}'", 1 + rng.below(12), 1 + rng.below(28));
            let vip = rng.pick(&["true", "false", "NULL"]).to_string();
            let tags = rng
                .pick(&["NULL", "'{}'", "'{new}'", "'{gold,eu}'", "'{eu}'", "'{gold,us,new}'"])
                .to_string();
            format!("({id}, {name}, {city}, {tier}, {balance}, {signup}, {vip}, {tags})")
        })
        .collect();
    out.push(format!(
        "INSERT INTO customers (customer_id, name, city, tier, balance, signup, vip, tags) VALUES {}",
        rows.join(", ")
    ));
    let statuses = ["new", "paid", "shipped", "cancelled", "Paid"];
    let mut orders = Vec::new();
    let mut items = Vec::new();
    for order_id in 1..=200u64 {
        // Customers 41..=60 have no orders; customer 99 does not exist.
        let customer = if order_id % 37 == 0 { 99 } else { *rng.pick(&ids[..40]) };
        let status = rng.pick(&statuses);
        let total = format!("{}.{:02}", rng.below(500), rng.below(100));
        let at = format!(
            "'2024-{:02}-{:02} {:02}:{:02}:00+00'",
            1 + rng.below(12),
            1 + rng.below(28),
            rng.below(24),
            rng.below(4) * 15
        );
        let note = or_null(format!("'{}'", rng.pick(&["gift", "Gift", "rush", "fragile"])), rng.chance(70));
        orders.push(format!("({order_id}, {customer}, '{status}', {total}, {at}, {note})"));
        for line in 1..=1 + rng.below(4) {
            let product = 1 + rng.below(26);
            let qty = rng.below(6);
            let price = format!("{}.{:02}", rng.below(90), rng.below(100));
            items.push(format!("({customer}, {order_id}, {line}, {product}, {qty}, {price})"));
        }
    }
    out.push(format!(
        "INSERT INTO orders (order_id, customer_id, status, total, placed_at, note) VALUES {}",
        orders.join(", ")
    ));
    out.push(format!(
        "INSERT INTO order_items (customer_id, order_id, line, product_id, qty, price) VALUES {}",
        items.join(", ")
    ));
    let plans = ["free", "pro", "team", "Pro"];
    let accounts: Vec<String> = (1..=45u64)
        .map(|i| {
            let email =
                if i % 9 == 0 { format!("User{i}@Example.com") } else { format!("user{i}@example.com") };
            let customer = or_null(rng.pick(&ids).to_string(), rng.chance(20));
            let plan = rng.pick(&plans);
            let credits = or_null((rng.below(300) as i64 - 50).to_string(), rng.chance(15));
            let meta = or_null(
                format!("'{{\"level\": {}, \"flags\": [\"a{}\"]}}'", rng.below(5), rng.below(3)),
                rng.chance(20),
            );
            format!("('{email}', {customer}, '{plan}', {credits}, {meta})")
        })
        .collect();
    out.push(format!(
        "INSERT INTO accounts (email, customer_id, plan, credits, meta) VALUES {}",
        accounts.join(", ")
    ));
    let kinds = ["click", "view", "buy", "Click"];
    let events: Vec<String> = (1..=150u64)
        .map(|i| {
            let customer = or_null(rng.pick(&ids).to_string(), rng.chance(15));
            let kind = rng.pick(&kinds);
            let at = format!(
                "'2024-{:02}-{:02} {:02}:00:00'",
                1 + rng.below(12),
                1 + rng.below(28),
                rng.below(24)
            );
            let amount = or_null((rng.below(200) as i64 - 40).to_string(), rng.chance(25));
            let payload = or_null(format!("'{{\"n\": {}}}'", rng.below(10)), rng.chance(30));
            format!("('{}', {customer}, '{kind}', {at}, {amount}, {payload})", event_uuid(i))
        })
        .collect();
    out.push(format!(
        "INSERT INTO events (id, customer_id, kind, at, amount, payload) VALUES {}",
        events.join(", ")
    ));
    let categories = ["'tools'", "'toys'", "'Tools'", "'food'", "NULL"];
    let products: Vec<String> = (1..=25u64)
        .map(|i| {
            let category = rng.pick(&categories);
            let price = format!("{}.{:02}", rng.below(120), rng.below(100));
            format!(
                "({i}, 'SKU-{i:03}', 'Product {}', {category}, {price}, {})",
                rng.below(10),
                rng.below(50)
            )
        })
        .collect();
    out.push(format!(
        "INSERT INTO products (product_id, sku, title, category, price, stock) VALUES {}",
        products.join(", ")
    ));
    out
}
