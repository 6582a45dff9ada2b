//! The podstuck under test: where its binary is, a `podstuck watch
//! --json` run by a test ([`Watch`]) and what it printed once stopped, the
//! exact bytes of an event's paths, a podstuck that must refuse to start,
//! and what it leaves loaded in the kernel.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::findings::{self, latest_findings, Expect};
use crate::harness::beside_the_tests;
use crate::wait::{poll_until, poll_until_else, within};

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

/// How long podstuck may take to attach: loading and attaching its
/// programs is quick on an idle machine, slow on a loaded one.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(60);

/// How its banner on stderr ends, in the modes that print no JSON `start`
/// line (call lines, finding lines): printed once its programs are
/// attached, before anything it traced.
const BANNER_END: &str = "; Ctrl-C to stop";

/// What a reader thread has collected of one of podstuck's outputs: the
/// exact bytes, the lines (as text, a byte that is not UTF-8 replaced),
/// and whether the pipe is at its end.
#[derive(Default)]
struct Collected {
    bytes: Vec<u8>,
    lines: Vec<String>,
    ended: bool,
}

/// Reads `from` line by line on a thread of its own into what it returns.
fn collect(from: impl std::io::Read + Send + 'static) -> Arc<Mutex<Collected>> {
    let collected = Arc::new(Mutex::new(Collected::default()));
    let sink = collected.clone();
    std::thread::spawn(move || {
        let mut from = BufReader::new(from);
        let mut line = Vec::new();
        while from.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
            let mut sink = sink.lock().unwrap();
            sink.bytes.extend_from_slice(&line);
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            sink.lines.push(String::from_utf8_lossy(text).into_owned());
            line.clear();
        }
        sink.lock().unwrap().ended = true;
    });
    collected
}

/// A podstuck child whose stdout lines and stderr text are collected as
/// they come; killed and reaped on drop, so that a test that panicked
/// before stopping it leaves no tracer behind.
pub(crate) struct Running {
    pub(crate) child: Child,
    stdout: Arc<Mutex<Collected>>,
    stderr: Arc<Mutex<Collected>>,
}

/// What a stopped podstuck printed, as it printed it.
pub(crate) struct Exited {
    pub(crate) status: ExitStatus,
    pub(crate) lines: Vec<String>,
    pub(crate) stderr: String,
    /// The exact bytes of stdout and stderr.
    pub(crate) bytes: (Vec<u8>, Vec<u8>),
}

impl Running {
    /// Spawns `command` (its stdin as the caller set it) with stdout and
    /// stderr piped and read.
    pub(crate) fn spawn(command: &mut Command) -> Running {
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn podstuck");
        let stdout = collect(child.stdout.take().unwrap());
        let stderr = collect(child.stderr.take().unwrap());
        Running { child, stdout, stderr }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The lines printed on stdout so far.
    pub(crate) fn lines(&self) -> Vec<String> {
        self.stdout.lock().unwrap().lines.clone()
    }

    /// What it said on stderr so far.
    pub(crate) fn stderr(&self) -> String {
        text_of(&self.stderr)
    }

    /// Its exit status, if it has exited.
    pub(crate) fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits until it says it is attached: its `start` line (returned) in
    /// JSON, else its banner on stderr (`None`). Panics if it exits first
    /// or is not attached within [`ATTACH_TIMEOUT`].
    pub(crate) fn await_attached(&mut self) -> Option<Value> {
        let (stdout, stderr) = (&self.stdout, &self.stderr);
        let said = poll_until_else("podstuck to attach (its start line, or its banner)", ATTACH_TIMEOUT, || {
            let first = stdout.lock().unwrap().lines.first().cloned();
            if let Some(start) = first.and_then(|l| serde_json::from_str::<Value>(&l).ok()) {
                assert_eq!(start["type"], "start", "first line: {start}");
                return Ok(Ok(Some(start)));
            }
            let said = text_of(stderr);
            if said.contains(BANNER_END) {
                return Ok(Ok(None));
            }
            match self.child.try_wait().expect("wait") {
                Some(status) => Ok(Err(status)),
                None => Err(format!("podstuck's stderr so far:\n{said}")),
            }
        });
        match said {
            Ok(start) => start,
            Err(status) => {
                self.await_end_of_output();
                panic!("podstuck exited before attaching ({status}): {}", self.stderr())
            }
        }
    }

    /// Waits for its first line, the JSON `start` line that says it is
    /// attached (see [`Running::await_attached`]).
    pub(crate) fn await_start(&mut self) -> Value {
        self.await_attached()
            .unwrap_or_else(|| panic!("podstuck printed a banner, not a JSON start line: {}", self.stderr()))
    }

    /// Waits, once it has exited, for the reader threads to reach the end
    /// of its output (a few seconds at most: a child of its own could
    /// hold the pipes open).
    fn await_end_of_output(&self) {
        within(Duration::from_secs(5), || {
            (self.stdout.lock().unwrap().ended && self.stderr.lock().unwrap().ended).then_some(())
        });
    }

    /// Waits for it to exit by itself (`timeout` at most) and returns
    /// everything it printed.
    pub(crate) fn finish(&mut self, timeout: Duration) -> Exited {
        let status = poll_until_else("it to exit by itself", timeout, || match self.child.try_wait().expect("wait") {
            Some(status) => Ok(status),
            None => Err(format!("stdout so far:\n{}stderr so far:\n{}", text_of(&self.stdout), text_of(&self.stderr))),
        });
        self.exited(status)
    }

    /// Sends `signal`, waits for the exit (60 s at most) and returns
    /// everything it printed.
    pub(crate) fn stop(&mut self, signal: i32) -> Exited {
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(self.pid() as i32, signal) };
        let status = poll_until(&format!("podstuck to exit after signal {signal}"), Duration::from_secs(60), || {
            self.child.try_wait().expect("wait")
        });
        self.exited(status)
    }

    fn exited(&mut self, status: ExitStatus) -> Exited {
        self.await_end_of_output();
        let bytes = (self.stdout.lock().unwrap().bytes.clone(), self.stderr.lock().unwrap().bytes.clone());
        Exited { status, lines: self.lines(), stderr: self.stderr(), bytes }
    }
}

/// The text of what a reader collected, a line ending each line.
fn text_of(collected: &Mutex<Collected>) -> String {
    collected.lock().unwrap().lines.iter().map(|l| format!("{l}\n")).collect()
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
        self.await_finding_shaped(timeout, |e| e.shape(), select, check)
    }

    /// [`Watch::await_finding`] with the `shape` every finding it returns
    /// has: [`Expect::shape_of_no_call`] for a cause that fails no call (a
    /// process's lifecycle), whose finding has no syscall and may have no
    /// actor, paths or count.
    pub fn await_finding_shaped(
        &mut self,
        timeout: Duration,
        shape: impl Fn(&mut Expect),
        select: impl Fn(&Value) -> bool,
        check: impl Fn(&mut Expect),
    ) -> Value {
        let (mut findings, mut unmet) = (Vec::new(), Vec::new());
        let found = within(timeout, || {
            findings = self.findings_so_far();
            unmet.clear();
            for finding in findings.iter().filter(|f| select(f)) {
                let mut expect = Expect::new(finding);
                shape(&mut expect);
                check(&mut expect);
                if expect.failures().is_empty() {
                    return Some(Ok(finding.clone()));
                }
                unmet.push(format!("{finding}\n  unmet: {}", expect.failures().join("\n         ")));
            }
            self.podstuck.try_wait().map(Err)
        });
        let exited = match found {
            Some(Ok(finding)) => return finding,
            Some(Err(status)) => Some(status),
            None => None,
        };
        self.podstuck.await_end_of_output();
        let all: Vec<String> = findings.iter().map(Value::to_string).collect();
        panic!(
            "no finding as expected within {timeout:?}{}\ncandidates:\n{}\nall findings:\n{}\npodstuck stderr:\n{}",
            exited.map(|s| format!(" (podstuck exited: {s})")).unwrap_or_default(),
            if unmet.is_empty() { "(none selected)".to_string() } else { unmet.join("\n") },
            if all.is_empty() { "(none)".to_string() } else { all.join("\n") },
            self.podstuck.stderr()
        );
    }

    /// Sends `signal` and collects everything printed until exit.
    pub fn stop(mut self, signal: i32) -> Finished {
        let exited = self.podstuck.stop(signal);
        self.finished(exited)
    }

    /// Waits for it to end by itself (`--duration`), `timeout` at most,
    /// and collects everything it printed.
    pub fn finish(mut self, timeout: Duration) -> Finished {
        let exited = self.podstuck.finish(timeout);
        self.finished(exited)
    }

    fn finished(&self, exited: Exited) -> Finished {
        let Exited { status, lines, stderr, .. } = exited;
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

/// A podstuck run however a test needs it (`watch` printing text,
/// `record`...), started and waited for until it says it is attached: its
/// JSON `start` line, or in the modes without one its banner on stderr.
/// Then left to end by itself (`--duration`); killed on drop.
pub struct Attached {
    podstuck: Running,
}

impl Attached {
    /// Spawns `command` (stdout and stderr piped) and waits until it is
    /// attached; panics if it exits first.
    pub fn spawn(command: &mut Command) -> Attached {
        let mut podstuck = Running::spawn(command);
        podstuck.await_attached();
        Attached { podstuck }
    }

    pub fn pid(&self) -> i32 {
        self.podstuck.pid() as i32
    }

    /// Waits for it to exit by itself, `timeout` at most: its status and
    /// the exact bytes of its stdout and stderr.
    pub fn finish(mut self, timeout: Duration) -> Output {
        let Exited { status, bytes: (stdout, stderr), .. } = self.podstuck.finish(timeout);
        Output { status, stdout, stderr }
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
    within(Duration::from_secs(20), || wanted(&watch.events_so_far()).then_some(()));
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

/// The programs a watch attaches where its calls' programs are on `attach`
/// (`"fentry"` or `"tracepoint"`, as its start line says): the four
/// syscalls' entry and exit, the lifecycle's three (exec, exit, signal),
/// and kubelet's connects (one fexit on `unix_stream_connect`, or the
/// connect syscall's tracepoint pair).
pub fn programs_attached(attach: &str) -> usize {
    let connects = if attach == "fentry" { 1 } else { 2 };
    4 * 2 + 3 + connects
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

/// The `summary.json` of a `--histograms` directory, while it is whole JSON.
pub fn summary_json(dir: &std::path::Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).ok()?).ok()
}

/// The count of one series in a `--histograms` directory's summary.json, 0
/// while there is none.
pub fn series_count(dir: &std::path::Path, tag: &str) -> u64 {
    let Some(summary) = summary_json(dir) else { return 0 };
    summary["series"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["tag"] == tag)
        .map(|s| s["count"].as_u64().unwrap_or(0))
        .sum()
}
