//! Test-only helpers shared by the unit tests of several modules.

use std::path::PathBuf;

pub use podstuck_tests::prerequisite::{missing, this_test};

/// Whether this test runs as root, which the tests of the live node need:
/// without it the test fails, unless skips are allowed (then false).
pub fn is_root() -> bool {
    podstuck_tests::prerequisite::root(&this_test(), "to read the live node's state")
}

/// A fresh directory under the system temp dir, removed when dropped (also
/// when a test fails).
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("podstuck-test-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
