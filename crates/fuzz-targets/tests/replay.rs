//! Replays every committed seed (`fuzz/seeds/<target>/`) and every saved crash
//! (`fuzz/regressions/<target>/`) through its target on the stable toolchain, so an input that
//! once crashed a target stays a test after the bug is fixed.

use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// Runs every file under `fuzz/<kind>/<target>/`; returns how many ran. A folder named after
/// no target is an error, so a renamed target cannot silently drop its regressions.
fn replay(kind: &str) -> usize {
    let root = fuzz_dir().join(kind);
    let Ok(dirs) = std::fs::read_dir(&root) else { return 0 };
    let mut ran = 0;
    for dir in dirs {
        let dir = dir.expect("readable folder").path();
        if !dir.is_dir() {
            continue;
        }
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        let target =
            fuzz_targets::target(&name).unwrap_or_else(|| panic!("{} names no fuzz target", dir.display()));
        let mut files: Vec<_> =
            std::fs::read_dir(&dir).expect("readable folder").map(|e| e.expect("entry").path()).collect();
        files.sort();
        for file in files.iter().filter(|f| f.is_file() && !is_note(f)) {
            let data = std::fs::read(file).expect("readable input");
            if let Err(panic) = std::panic::catch_unwind(|| target(&data)) {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
                panic!("{} crashes {name}: {}", file.display(), msg.unwrap_or_default());
            }
            ran += 1;
        }
    }
    ran
}

/// A README or note next to the inputs is not an input.
fn is_note(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "md" || e == "txt")
}

#[test]
fn seeds_pass_every_target() {
    let ran = replay("seeds");
    // Every target has seeds; an empty run means the folder moved.
    assert!(ran >= fuzz_targets::TARGETS.len() * 10, "only {ran} seeds found under fuzz/seeds");
}

#[test]
fn saved_crashes_stay_fixed() {
    replay("regressions");
}
