//! Writes the seed corpora under `fuzz/seeds/<target>/` (run from the repository root:
//! `cargo run -p fuzz-targets --bin fuzz-seeds`). Seeds are real messages, built with the
//! same builders pgvia and its tests use, a few dozen per target, so the fuzzer starts from
//! inputs that reach deep and the corpora stay small enough to commit.

fn main() -> std::io::Result<()> {
    let root = std::path::Path::new("fuzz/seeds");
    let mut total = 0;
    for (target, seeds) in fuzz_targets::seeds::all() {
        let dir = root.join(target);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)?;
        for (i, seed) in seeds.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:03}")), seed)?;
        }
        println!("{target}: {} seeds", seeds.len());
        total += seeds.len();
    }
    println!("{total} seeds written under {}", root.display());
    Ok(())
}
