//! The one home of the rule for tests on upstream data kept beside the repository (`../shared`, e.g.
//! `../shared/upstream/trainer`): present, the test uses it; absent, the test fails when the env var `CI` is
//! set (CI always has the data, so a missing copy there is a failure, not a vacuous pass) and otherwise skips
//! with a message saying what it did not check.
//!
//! Included by path, not a crate, so it adds no build step:
//! `#[path = "../../../../tests/support/shared_data.rs"] mod shared_data;` in a test binary's
//! `crates/<crate>/tests/<suite>/main.rs` (its modules then `use crate::shared_data;`), one `../` less from
//! `crates/<crate>/src/`.

use std::path::{Path, PathBuf};

/// `../shared/<relative>` beside the repository when it is a directory; `None` (after printing why the
/// caller skips) when it is not and `CI` is unset.
///
/// # Panics
/// When the directory is missing and the env var `CI` is set.
pub fn shared_dir(relative: &str) -> Option<PathBuf> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The repository root holds Cargo.lock; `shared` lies beside the repository.
    let root = manifest
        .ancestors()
        .find(|d| d.join("Cargo.lock").is_file())
        .unwrap_or(manifest);
    let path = root.join("..").join("shared").join(relative);
    if path.is_dir() {
        return Some(path);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set but {} is missing: CI must check out the shared upstream data beside the repository",
        path.display()
    );
    eprintln!(
        "skipping: {} not found (upstream data lives beside the repository; CI fails instead of skipping)",
        path.display()
    );
    None
}
