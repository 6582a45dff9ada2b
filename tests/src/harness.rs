//! How an end-to-end test is written: [`kernel_test!`](crate::kernel_test)
//! defines the `#[test]` and hands its body a [`KernelTest`] named after
//! the function, which requires root (see [`crate::prerequisite`]: without
//! it the test fails, unless skips are allowed) and makes the test's
//! scratch directory. A test names nothing by hand: its messages and its
//! directory follow its function's name.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The documents of deploy/FILE, as JSON values (a test compares them
/// with what podstuck asks of the API and with each other).
pub fn deploy_manifest(file: &str) -> Vec<Value> {
    use serde::Deserialize as _;
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy").join(file);
    let text = std::fs::read_to_string(&manifest).unwrap_or_else(|e| panic!("reading {}: {e}", manifest.display()));
    yaml_serde::Deserializer::from_str(&text)
        .map(|document| Value::deserialize(document).unwrap_or_else(|e| panic!("deploy/{file} is not valid YAML: {e}")))
        // A `---` with nothing after it is no object.
        .filter(|document| !document.is_null())
        .collect()
}

/// True when the kernel-facing tests can run: as root. Without root the
/// test fails, unless skips are allowed (then false, said loudly).
pub fn can_touch_the_kernel(test: &str) -> bool {
    crate::prerequisite::root(test, "to load eBPF programs and mount filesystems")
}

/// A running test that touches the kernel, named after its function.
pub struct KernelTest {
    name: &'static str,
}

impl KernelTest {
    /// The test `name`, if it may run here (see [`can_touch_the_kernel`]).
    pub fn begin(name: &'static str) -> Option<KernelTest> {
        can_touch_the_kernel(name).then_some(KernelTest { name })
    }

    /// The test function's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// A scratch directory of the test's own, named after it.
    pub fn scratch(&self) -> ScratchDir {
        ScratchDir::new(self.name)
    }
}

/// A test that touches the kernel:
///
/// ```no_run
/// use podstuck_tests::kernel_test;
///
/// kernel_test! {
///     /// What it shows.
///     fn unlinking_an_immutable_file_gives_eperm(test) {
///         let scratch = test.scratch();
///         // ...
///     }
/// }
/// ```
///
/// defines `#[test] fn unlinking_an_immutable_file_gives_eperm()`, which
/// fails without root (returns at once where skips are allowed), and runs the body
/// with `test`, a [`KernelTest`] of that name. `fn name() { ... }` for a
/// body that needs neither the name nor a scratch directory.
#[macro_export]
macro_rules! kernel_test {
    ($(#[$attr:meta])* fn $name:ident($test:ident) $body:block) => {
        $(#[$attr])*
        #[test]
        fn $name() {
            let Some($test) = $crate::harness::KernelTest::begin(stringify!($name)) else {
                return;
            };
            $body
        }
    };
    ($(#[$attr:meta])* fn $name:ident() $body:block) => {
        $crate::kernel_test! { $(#[$attr])* fn $name(_test) $body }
    };
}

/// A directory of the test's own on the root filesystem (ext4 here, so
/// `chattr +i` works), removed with everything below it on drop.
pub struct ScratchDir(pub PathBuf);

/// How much of a test's name its scratch directory carries: the paths made
/// in it must stay short enough for a unix socket (under 108 bytes: a tmux
/// server's is there) and for the live view's 200 columns to show a
/// volume's whole path. The pid and the time keep names apart.
const NAME_IN_SCRATCH: usize = 32;

impl ScratchDir {
    /// `/var/tmp/podstuck-test-<test>-<pid>-<nanos>`, the test's name cut
    /// short and its `_` made `-`: a fix podstuck prints for a path with
    /// only `[A-Za-z0-9/._~:@%+=,-]` in it is left unquoted, as the tests
    /// that read it on a screen expect.
    pub fn new(test: &str) -> ScratchDir {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        let name: String = test.chars().take(NAME_IN_SCRATCH).map(|c| if c == '_' { '-' } else { c }).collect();
        let path = PathBuf::from(format!("/var/tmp/podstuck-test-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path).expect("create scratch dir");
        ScratchDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A path of the test's own as text, for an argument or an expected
/// output: the tests make only UTF-8 paths.
pub fn text(path: &Path) -> &str {
    path.to_str().expect("UTF-8 scratch paths")
}

/// A binary built beside the test binaries, if it is there: cargo runs
/// them from `target/<profile>/deps/` and builds this package's own
/// binaries (and the workspace's, when asked) into `target/<profile>/`.
pub(crate) fn beside_the_tests(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().expect("current exe");
    let candidate = exe.parent()?.parent()?.join(name);
    candidate.is_file().then_some(candidate)
}
