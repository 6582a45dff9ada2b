//! Helpers for podstuck's end-to-end tests: run the real `podstuck` binary
//! against the real kernel, make the real node state a pathology needs
//! (mounts, immutable files), and undo all of it even when a test fails.
//!
//! Every piece of node state is owned by a guard whose `Drop` removes it, so
//! a panicking assertion still unmounts, clears flags and deletes.

use std::ffi::CString;
use std::io::{BufRead, BufReader};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub mod attacks;
pub mod findings;
pub mod fixtures;
pub mod runtimes;
pub mod terminal;

pub use findings::{latest_findings, shell_word, Expect};
pub use fixtures::{BindMount, FuseMount, OverlayMount, Process};
pub use runtimes::{Containerd, Dockerd, EventLog, Propagation, RbindView};

/// True when the kernel-facing tests can run (root). Outside CI, without
/// root, they skip loudly; under CI (`CI=true`) they never skip.
pub fn can_touch_the_kernel(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: the end-to-end tests need root and must not skip under CI");
    }
    eprintln!("\n*** SKIPPED {test}: needs root to load eBPF programs and mount filesystems ***\n");
    false
}

/// The podstuck binary under test: `$PODSTUCK_BIN` (set by `cargo xtask
/// test`), else the one beside this test binary's target directory.
pub fn podstuck_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("PODSTUCK_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/deps/<test> -> target/<profile>/podstuck
    let candidate = exe.parent().and_then(Path::parent).map(|p| p.join("podstuck"));
    match candidate {
        Some(bin) if bin.is_file() => bin,
        _ => panic!("podstuck binary not found: run `cargo xtask test`, or build it (cargo build -p podstuck-user) and set PODSTUCK_BIN"),
    }
}

/// A running `podstuck watch --json`, its stdout collected line by line.
pub struct Watch {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<String>>,
    pub start: Value,
}

/// What a stopped podstuck printed.
pub struct Finished {
    pub status: ExitStatus,
    pub start: Value,
    pub events: Vec<Value>,
    pub end: Option<Value>,
    pub stderr: String,
    /// Every finding line (`finding`, `finding-update`), in order.
    pub finding_lines: Vec<Value>,
    /// The latest revision of each finding.
    pub findings: Vec<Value>,
}

/// The exact bytes of a path field of an event (`path`, `abs_path`): its
/// `<field>_hex` twin when the bytes are not UTF-8, else the text.
fn exact_bytes(event: &Value, field: &str) -> Vec<u8> {
    if let Some(hex) = event[format!("{field}_hex")].as_str() {
        return (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
    }
    event[field].as_str().unwrap_or_default().as_bytes().to_vec()
}

/// The exact bytes of an event's path argument.
pub fn path_bytes(event: &Value) -> Vec<u8> {
    exact_bytes(event, "path")
}

/// The exact bytes of an event's absolute path.
pub fn abs_path_bytes(event: &Value) -> Vec<u8> {
    exact_bytes(event, "abs_path")
}

impl Watch {
    /// Starts `podstuck watch --json <extra>` and waits until it is attached.
    /// `--concurrent`: the tests run side by side, each with its own podstuck.
    pub fn start(extra: &[&str]) -> Watch {
        let mut child = Command::new(podstuck_binary())
            .arg("watch")
            .arg("--json")
            .arg("--concurrent")
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn podstuck");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let out = child.stdout.take().unwrap();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                match line {
                    Ok(line) => sink.lock().unwrap().push(line),
                    Err(_) => break,
                }
            }
        });
        let err = child.stderr.take().unwrap();
        let err_sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut s = err_sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let first = lines.lock().unwrap().first().cloned();
            if let Some(first) = first {
                let start: Value = serde_json::from_str(&first).expect("first line is JSON");
                assert_eq!(start["type"], "start", "first line: {first}");
                return Watch { child, lines, stderr, start };
            }
            if let Ok(Some(status)) = child.try_wait() {
                std::thread::sleep(Duration::from_millis(200));
                panic!("podstuck exited before attaching ({status}): {}", stderr.lock().unwrap());
            }
            assert!(Instant::now() < deadline, "podstuck did not attach within 60 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Events printed so far.
    pub fn events_so_far(&self) -> Vec<Value> {
        parse_events(&self.lines.lock().unwrap())
    }

    /// Every JSON line printed so far, whatever its type.
    pub fn json_so_far(&self) -> Vec<Value> {
        parse_json(&self.lines.lock().unwrap())
    }

    /// The latest revision of each finding printed so far.
    pub fn findings_so_far(&self) -> Vec<Value> {
        latest_findings(&self.json_so_far())
    }

    /// Waits until a finding that `select` picks meets every expectation of
    /// `check` (findings are revised as evidence accrues, so the first
    /// emission may not say everything yet), and returns that revision.
    /// Panics after `timeout` with what was still unmet, every finding seen
    /// and podstuck's stderr; or at once if podstuck exited.
    pub fn await_finding(
        &mut self,
        timeout: Duration,
        select: impl Fn(&Value) -> bool,
        check: impl Fn(&mut Expect),
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let findings = self.findings_so_far();
            let mut unmet = Vec::new();
            for finding in findings.iter().filter(|f| select(f)) {
                let mut expect = Expect::new(finding);
                expect.shape();
                check(&mut expect);
                if expect.failures().is_empty() {
                    return finding.clone();
                }
                unmet.push(format!("{finding}\n  unmet: {}", expect.failures().join("\n         ")));
            }
            let exited = self.child.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() >= deadline {
                std::thread::sleep(Duration::from_millis(200));
                let all: Vec<String> = findings.iter().map(Value::to_string).collect();
                panic!(
                    "no finding as expected within {timeout:?}{}\ncandidates:\n{}\nall findings:\n{}\npodstuck stderr:\n{}",
                    exited.map(|s| format!(" (podstuck exited: {s})")).unwrap_or_default(),
                    if unmet.is_empty() { "(none selected)".to_string() } else { unmet.join("\n") },
                    if all.is_empty() { "(none)".to_string() } else { all.join("\n") },
                    self.stderr.lock().unwrap()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends `signal` and collects everything printed until exit.
    pub fn stop(mut self, signal: i32) -> Finished {
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(self.pid(), signal) };
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            assert!(Instant::now() < deadline, "podstuck did not exit within 60 s of signal {signal}");
            std::thread::sleep(Duration::from_millis(20));
        };
        // Let the reader threads reach end of file.
        std::thread::sleep(Duration::from_millis(300));
        let lines = self.lines.lock().unwrap().clone();
        let end = lines.last().and_then(|l| serde_json::from_str::<Value>(l).ok()).filter(|v| v["type"] == "end");
        let json = parse_json(&lines);
        Finished {
            status,
            start: self.start.clone(),
            events: parse_events(&lines),
            end,
            stderr: self.stderr.lock().unwrap().clone(),
            finding_lines: json.iter().filter(|l| findings::is_finding(l)).cloned().collect(),
            findings: latest_findings(&json),
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // A test that panicked before stop() must not leave a tracer behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn parse_events(lines: &[String]) -> Vec<Value> {
    parse_json(lines).into_iter().filter(|v| v["type"] == "event").collect()
}

fn parse_json(lines: &[String]) -> Vec<Value> {
    lines.iter().filter_map(|l| serde_json::from_str::<Value>(l).ok()).collect()
}

/// Stops `watch` once events matching `wanted` have all arrived (or 20 s
/// passed), so a test never races the ring buffer.
pub fn stop_when(watch: Watch, wanted: impl Fn(&[Value]) -> bool) -> Finished {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !wanted(&watch.events_so_far()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    watch.stop(libc::SIGINT)
}

/// A directory of the test's own on the root filesystem (ext4 here, so
/// `chattr +i` works), removed with everything below it on drop.
pub struct ScratchDir(pub PathBuf);

impl ScratchDir {
    pub fn new(test: &str) -> ScratchDir {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        let path = PathBuf::from(format!("/var/tmp/podstuck-test-{test}-{}-{nanos}", std::process::id()));
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

/// A tmpfs mounted at a fresh directory; lazily unmounted on drop.
pub struct TmpfsMount(pub PathBuf);

impl TmpfsMount {
    pub fn new(at: &Path, options: &str) -> TmpfsMount {
        std::fs::create_dir_all(at).expect("create mountpoint");
        nix::mount::mount(Some("podstuck-test"), at, Some("tmpfs"), nix::mount::MsFlags::empty(), Some(options))
            .unwrap_or_else(|e| panic!("mount tmpfs at {}: {e}", at.display()));
        TmpfsMount(at.to_path_buf())
    }
}

impl Drop for TmpfsMount {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Whether `path` is a mountpoint in this process's mount namespace.
pub fn is_mountpoint(path: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let wanted = path.to_string_lossy();
    mounts.lines().any(|l| l.split(' ').nth(4) == Some(wanted.as_ref()))
}

/// `chattr +i` on a file, undone on drop.
pub struct Immutable(pub PathBuf);

impl Immutable {
    pub fn set(path: &Path) -> Immutable {
        let status = Command::new("chattr").arg("+i").arg(path).status().expect("run chattr");
        assert!(status.success(), "chattr +i {}", path.display());
        Immutable(path.to_path_buf())
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        // A test may have cleared the flag and removed the file itself.
        if self.0.symlink_metadata().is_err() {
            return;
        }
        let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

pub fn cstring(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

/// Raw syscalls, so each test knows exactly which call it made (libc may
/// route unlink() through unlinkat()). Returns the errno, or 0.
pub fn sys_unlinkat(dirfd: i32, path: &CString, flags: i32) -> i32 {
    // SAFETY: valid C string; the kernel checks the rest.
    errno_of(unsafe { libc::syscall(libc::SYS_unlinkat, dirfd, path.as_ptr(), flags) })
}

// The kernel, not this process, reads the pointer: a bad one is the point
// of some tests and yields EFAULT, never a crash.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn sys_unlink(path: *const libc::c_char) -> i32 {
    // SAFETY: the kernel validates the pointer (tests pass bad ones on purpose).
    errno_of(unsafe { libc::syscall(libc::SYS_unlink, path) })
}

pub fn sys_rmdir(path: &CString) -> i32 {
    // SAFETY: valid C string.
    errno_of(unsafe { libc::syscall(libc::SYS_rmdir, path.as_ptr()) })
}

pub fn sys_umount2(path: &CString, flags: i32) -> i32 {
    // SAFETY: valid C string.
    errno_of(unsafe { libc::syscall(libc::SYS_umount2, path.as_ptr(), flags) })
}

fn errno_of(ret: libc::c_long) -> i32 {
    if ret < 0 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    } else {
        0
    }
}

/// This thread's kernel id and command name, as podstuck should report them.
pub fn this_thread() -> (i32, String) {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let comm = std::fs::read_to_string("/proc/thread-self/comm").unwrap().trim_end().to_string();
    (tid, comm)
}

/// Whether a BPF program with this id is still loaded in the kernel.
pub fn program_loaded(id: u32) -> bool {
    const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
    // union bpf_attr for BPF_*_GET_FD_BY_ID: { __u32 id; __u32 next_id; __u32 open_flags; }
    let mut attr = [0u32; 4];
    attr[0] = id;
    // SAFETY: attr is a valid, sized bpf_attr prefix.
    let fd = unsafe {
        libc::syscall(libc::SYS_bpf, BPF_PROG_GET_FD_BY_ID, attr.as_mut_ptr(), std::mem::size_of_val(&attr))
    };
    if fd >= 0 {
        // SAFETY: fd was just returned to us.
        unsafe { libc::close(fd as i32) };
        true
    } else {
        false
    }
}

/// A fresh pod UID, unique to this test run.
pub fn new_pod_uid() -> String {
    static SEQUENCE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = SEQUENCE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{nanos:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}", std::process::id() & 0xffff, n & 0xfff, n >> 12, 0xfeed_0000_0000u64 + n as u64)
}

/// Directories made under a root that may already exist (the real
/// /var/lib/kubelet on a node): removes, on drop, exactly what it created.
pub struct CreatedDirs {
    /// The top-most directory this guard created, removed with its content.
    top: Option<PathBuf>,
}

impl CreatedDirs {
    pub fn create(path: &Path) -> CreatedDirs {
        let mut top = None;
        for ancestor in path.ancestors().collect::<Vec<_>>().into_iter().rev() {
            if !ancestor.exists() {
                std::fs::create_dir(ancestor).unwrap_or_else(|e| panic!("mkdir {}: {e}", ancestor.display()));
                top.get_or_insert_with(|| ancestor.to_path_buf());
            }
        }
        CreatedDirs { top }
    }
}

impl Drop for CreatedDirs {
    fn drop(&mut self) {
        if let Some(top) = &self.top {
            let _ = std::fs::remove_dir_all(top);
        }
    }
}

/// Where cgroup v2 is mounted on this machine (from mountinfo).
pub fn cgroup2_root() -> PathBuf {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    mountinfo
        .lines()
        .find(|l| l.contains(" - cgroup2 "))
        .and_then(|l| l.split(' ').nth(4))
        .map(PathBuf::from)
        .expect("cgroup v2 is mounted")
}

/// Nested cgroups created for a test, removed deepest first on drop (after
/// the tasks in them are gone; an emptied cgroup can take a moment).
pub struct CgroupDirs(Vec<PathBuf>);

impl CgroupDirs {
    pub fn create(path: &Path) -> CgroupDirs {
        let mut made = Vec::new();
        for ancestor in path.ancestors().collect::<Vec<_>>().into_iter().rev() {
            if !ancestor.exists() {
                std::fs::create_dir(ancestor).unwrap_or_else(|e| panic!("mkdir cgroup {}: {e}", ancestor.display()));
                made.push(ancestor.to_path_buf());
            }
        }
        CgroupDirs(made)
    }
}

impl Drop for CgroupDirs {
    fn drop(&mut self) {
        for dir in self.0.iter().rev() {
            let deadline = Instant::now() + Duration::from_secs(5);
            while std::fs::remove_dir(dir).is_err() && dir.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}
