//! The podstuck under test: where its binary is, a `podstuck watch
//! --json` run by a test ([`Watch`]) and what it printed once stopped, the
//! exact bytes of an event's paths, a podstuck that must refuse to start,
//! and what it leaves loaded in the kernel.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::findings::{self, latest_findings, Expect};
use crate::harness::beside_the_tests;

/// The podstuck binary under test: `$PODSTUCK_BIN` (set by `cargo xtask
/// test`), else the one beside this test binary's target directory.
pub fn podstuck_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("PODSTUCK_BIN") {
        return PathBuf::from(bin);
    }
    beside_the_tests("podstuck").unwrap_or_else(|| {
        panic!("podstuck binary not found: run `cargo xtask test`, or build it (cargo build -p podstuck-user) and set PODSTUCK_BIN")
    })
}

/// A podstuck child whose stdout lines and stderr text are collected as
/// they come; killed and reaped on drop, so that a test that panicked
/// before stopping it leaves no tracer behind.
pub(crate) struct Running {
    pub(crate) child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<String>>,
}

/// What a stopped podstuck printed, as it printed it.
pub(crate) struct Exited {
    pub(crate) status: ExitStatus,
    pub(crate) lines: Vec<String>,
    pub(crate) stderr: String,
}

impl Running {
    /// Spawns `command` (its stdin as the caller set it) with stdout and
    /// stderr piped and read.
    pub(crate) fn spawn(command: &mut Command) -> Running {
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn podstuck");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let (out, sink) = (child.stdout.take().unwrap(), lines.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let (err, sink) = (child.stderr.take().unwrap(), stderr.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        Running { child, lines, stderr }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The lines printed on stdout so far.
    pub(crate) fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// What it said on stderr so far.
    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Its exit status, if it has exited.
    pub(crate) fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits for its first line, the `start` line that says it is attached;
    /// panics if it exits first or is not attached within 60 s.
    pub(crate) fn await_start(&mut self) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let first = self.lines.lock().unwrap().first().cloned();
            if let Some(first) = first {
                let start: Value = serde_json::from_str(&first).expect("the first line is JSON");
                assert_eq!(start["type"], "start", "first line: {first}");
                return start;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                std::thread::sleep(Duration::from_millis(200));
                panic!("podstuck exited before attaching ({status}): {}", self.stderr());
            }
            assert!(Instant::now() < deadline, "podstuck did not attach within 60 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `signal`, waits for the exit (60 s at most) and returns
    /// everything it printed.
    pub(crate) fn stop(&mut self, signal: i32) -> Exited {
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(self.pid() as i32, signal) };
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
        Exited { status, lines: self.lines(), stderr: self.stderr() }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running `podstuck watch --json`, its stdout collected line by line.
pub struct Watch {
    podstuck: Running,
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

impl Watch {
    /// Starts `podstuck watch --json <extra>` and waits until it is attached.
    /// `--concurrent`: the tests run side by side, each with its own podstuck.
    pub fn start(extra: &[&str]) -> Watch {
        Watch::spawn(Command::new(podstuck_binary()).arg("watch").arg("--json").arg("--concurrent").args(extra))
    }

    /// Starts `command`, a `podstuck watch --json` however it is run (in a
    /// container: `docker run ... IMAGE watch --json ...`), and waits until
    /// it is attached. Its pid is the command's (the docker CLI's, which
    /// passes signals on to the container).
    pub fn spawn(command: &mut Command) -> Watch {
        let mut podstuck = Running::spawn(command);
        let start = podstuck.await_start();
        Watch { podstuck, start }
    }

    /// Starts `podstuck watch --json <extra>` through `wrapper` (a command
    /// that runs the program and arguments it is given last, e.g. in a
    /// namespace of its own) and waits until it is attached.
    pub fn start_wrapped<S: AsRef<OsStr>>(wrapper: &[S], extra: &[&str]) -> Watch {
        let (program, wrapper_args) = wrapper.split_first().expect("a wrapper command");
        let mut command = Command::new(program);
        command.args(wrapper_args).arg(podstuck_binary()).arg("watch").arg("--json").arg("--concurrent").args(extra);
        Watch::spawn(&mut command)
    }

    pub fn pid(&self) -> i32 {
        self.podstuck.pid() as i32
    }

    /// What it said on stderr so far.
    pub fn stderr_so_far(&self) -> String {
        self.podstuck.stderr()
    }

    /// Events printed so far.
    pub fn events_so_far(&self) -> Vec<Value> {
        parse_events(&self.podstuck.lines())
    }

    /// Every JSON line printed so far, whatever its type.
    pub fn json_so_far(&self) -> Vec<Value> {
        parse_json(&self.podstuck.lines())
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
            let exited = self.podstuck.try_wait();
            if exited.is_some() || Instant::now() >= deadline {
                std::thread::sleep(Duration::from_millis(200));
                let all: Vec<String> = findings.iter().map(Value::to_string).collect();
                panic!(
                    "no finding as expected within {timeout:?}{}\ncandidates:\n{}\nall findings:\n{}\npodstuck stderr:\n{}",
                    exited.map(|s| format!(" (podstuck exited: {s})")).unwrap_or_default(),
                    if unmet.is_empty() { "(none selected)".to_string() } else { unmet.join("\n") },
                    if all.is_empty() { "(none)".to_string() } else { all.join("\n") },
                    self.podstuck.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends `signal` and collects everything printed until exit.
    pub fn stop(mut self, signal: i32) -> Finished {
        let Exited { status, lines, stderr } = self.podstuck.stop(signal);
        let end = lines.last().and_then(|l| serde_json::from_str::<Value>(l).ok()).filter(|v| v["type"] == "end");
        let json = parse_json(&lines);
        Finished {
            status,
            start: self.start.clone(),
            events: parse_events(&lines),
            end,
            stderr,
            finding_lines: json.iter().filter(|l| findings::is_finding(l)).cloned().collect(),
            findings: latest_findings(&json),
        }
    }
}

fn parse_events(lines: &[String]) -> Vec<Value> {
    parse_json(lines).into_iter().filter(|v| v["type"] == "event").collect()
}

pub(crate) fn parse_json(lines: &[String]) -> Vec<Value> {
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

/// The exact bytes of a path field of an event (`path`, `abs_path`): its
/// `<field>_hex` twin when the bytes are not UTF-8, else the text.
fn exact_bytes(event: &Value, field: &str) -> Vec<u8> {
    if let Some(hex) = event[format!("{field}_hex")].as_str() {
        return (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
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

/// `podstuck <args>` that must refuse to start: its stderr.
pub fn podstuck_refuses<S: AsRef<OsStr>>(args: &[S]) -> String {
    let started = Instant::now();
    let out = Command::new(podstuck_binary())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .expect("run podstuck");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "podstuck started: {stderr}");
    assert!(started.elapsed() < Duration::from_secs(30), "refused only after {:?}", started.elapsed());
    stderr
}

/// A memory figure of process `pid` from /proc/PID/status, in KiB:
/// `field` is its name there ("VmRSS", "VmHWM").
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Whether a BPF program with this id is still loaded in the kernel.
pub fn program_loaded(id: u32) -> bool {
    const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
    // union bpf_attr for BPF_*_GET_FD_BY_ID: { __u32 id; __u32 next_id; __u32 open_flags; }
    let mut attr = [0u32; 4];
    attr[0] = id;
    // SAFETY: attr is a valid, sized bpf_attr prefix.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, BPF_PROG_GET_FD_BY_ID, attr.as_mut_ptr(), size_of_val(&attr)) };
    if fd >= 0 {
        // SAFETY: fd was just returned to us.
        unsafe { libc::close(fd as i32) };
        true
    } else {
        false
    }
}
