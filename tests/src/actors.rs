//! The processes a scenario runs: the `actor` binary (a stand-in for
//! kubelet, containerd, dockerd or a user, making exactly the calls the
//! scenario needs under the name it is given), the FUSE server, a guard
//! that collects a helper's lines and kills it on drop, and what /proc
//! says of a task.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::harness::beside_the_tests;
use crate::wait::{poll_until, poll_until_else, within};

/// One of this package's binaries (`actor`, `fuse_server`): cargo builds
/// them for its integration tests.
fn helper_binary(name: &str) -> PathBuf {
    beside_the_tests(name).unwrap_or_else(|| {
        panic!("{name} not found beside the test binaries: build them with `cargo test -p podstuck-tests`")
    })
}

/// `actor`, to run with its arguments (see src/bin/actor.rs).
pub fn actor() -> Command {
    Command::new(helper_binary("actor"))
}

/// The `actor` binary's path, for a harness that is handed its helpers'
/// paths (the soak, which `cargo xtask soak` runs with release builds).
pub fn actor_binary() -> PathBuf {
    helper_binary("actor")
}

/// `actor ARGS...` started, its lines collected (see [`Process`]).
pub fn start_actor<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> Process {
    Process::spawn(actor().args(args))
}

/// The FUSE test filesystem's server (see src/bin/fuse_server.rs and
/// [`FuseMount`](crate::node::FuseMount)).
pub fn fuse_server() -> PathBuf {
    helper_binary("fuse_server")
}

/// A helper process (the actor, the FUSE server) whose stdout is collected
/// line by line; killed and reaped on drop.
pub struct Process {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
    what: String,
}

impl Process {
    pub fn spawn(command: &mut Command) -> Process {
        let what = format!("{command:?}");
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let out = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Process { child, lines, reader: Some(reader), what }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it printed so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits until it has printed at least `n` lines; returns them all.
    pub fn wait_for_lines(&self, n: usize, timeout: Duration) -> Vec<String> {
        poll_until_else(&format!("{} to print {n} lines", self.what), timeout, || {
            let lines = self.lines();
            match lines.len() >= n {
                true => Ok(lines),
                false => Err(format!("it printed: {lines:?}")),
            }
        })
    }

    /// Waits until it prints `want`; false if it has not within `timeout`.
    pub fn wait_for_line(&self, want: &str, timeout: Duration) -> bool {
        within(timeout, || self.lines().iter().any(|l| l == want).then_some(())).is_some()
    }

    /// Waits for "ready": the helper's hold is in place.
    pub fn wait_ready(&self, timeout: Duration) {
        poll_until_else(&format!("{} to be ready", self.what), timeout, || {
            let lines = self.lines();
            match lines.iter().any(|l| l == "ready") {
                true => Ok(()),
                false => Err(format!("it printed: {lines:?}")),
            }
        });
    }

    /// Waits for it to exit by itself; returns its status and every line.
    pub fn finish(mut self, timeout: Duration) -> (ExitStatus, Vec<String>) {
        let what = format!("{} to finish", self.what);
        let status = poll_until(&what, timeout, || self.child.try_wait().expect("wait"));
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        (status, self.lines())
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own, not yet reaped, child.
        unsafe { libc::kill(self.pid() as i32, signal) };
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // Already reaped (finish): its pid may belong to someone else now.
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        // SIGKILL ends a stopped process too; SIGCONT is for the helpers
        // that catch nothing and should not stay stopped if the kill is lost.
        self.signal(libc::SIGCONT);
        let _ = self.child.kill();
        // A task stuck in an uninterruptible wait ignores SIGKILL: give up
        // after a while rather than hang the whole test run. The FUSE guard
        // (or whatever held it) releases it later, and init reaps it.
        if within(Duration::from_secs(10), || (!matches!(self.child.try_wait(), Ok(None))).then_some(())).is_some() {
            return;
        }
        eprintln!("warning: {} did not die within 10 s of SIGKILL; leaving it", self.what);
    }
}

/// A task's state letter from /proc/PID/stat (R, S, D, T, Z...).
pub fn task_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: the state
    // follows the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The kernel function a task sleeps in (/proc/PID/wchan), if any.
pub fn wchan(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default()
}

/// Whether a task is alive: a zombie is dead for our purposes (its parent
/// reaps it), a pid gone from /proc too.
pub fn alive(pid: u32) -> bool {
    task_state(pid).is_some_and(|s| s != 'Z')
}
