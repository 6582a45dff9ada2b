//! The soak's faults (`cargo xtask soak --faults`): what weeks on a node
//! do to an always-on podstuck, injected in turn beside the pod churn,
//! one every [`FaultPlan::every`]:
//!
//! - **a FUSE volume that stalls and recovers**: a pod's FUSE volume
//!   (the tests' `fuse_server`) whose directory kubelet keeps failing to
//!   remove (ENOTEMPTY); its server is stopped for [`STALL`] (podstuck's
//!   reads of it time out) and continued; the dir-not-empty finding must
//!   be confirmed again within seconds, as before the stall;
//! - **podstuck stopped**: SIGSTOP for [`STOPPED`] while a fork-and-kill
//!   storm and the churn go on, so the rings overflow, then SIGCONT; the
//!   loss must be counted (`podstuck_events_lost_total` grows), and a pod
//!   that got stuck while podstuck was stopped must be named within
//!   seconds;
//! - **an overflow storm**: a fork-and-kill storm and a removal storm
//!   while podstuck runs; a pod stuck meanwhile must be named within
//!   seconds, and whatever was lost counted;
//! - **a pid reused under a held finding**: a process holds a pod's
//!   volume (its working directory) while kubelet fails to unmount it
//!   (EBUSY); once podstuck names it, it is killed and its pid given to an
//!   innocent process (`ns_last_pid`); the fix podstuck printed is then run
//!   as a user would paste it, and the innocent must live; no finding may
//!   name it, and the volume's finding must end within seconds.
//!
//! Each outcome says how long after the fault ended the findings were
//! right again; the soak's verdicts hold them to [`RIGHT_AGAIN_WITHIN`].
//! The samples of the churn (memory flat, fds, series) are taken as in
//! the plain soak, never while podstuck is stopped (`Gate`).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::StuckPod;
use crate::actors::{alive, Process};
use crate::findings::start_of;
use crate::kubelet::KubeletRoot;
use crate::node::{FuseMount, TmpfsMount};
use crate::scrape::try_get;
use crate::wait::within;

/// How long the FUSE server stalls: a network filesystem's hiccup.
pub const STALL: Duration = Duration::from_secs(12);
/// How long podstuck is stopped.
pub const STOPPED: Duration = Duration::from_secs(5);
/// How soon after a fault ends the findings must be right again.
pub const RIGHT_AGAIN_WITHIN: Duration = Duration::from_secs(15);
/// Forks (each one exec'd, SIGKILLed and reaped) in a storm: the
/// lifecycle ring (256 KiB) holds a few thousand records.
const FORKS: u64 = 20_000;
/// Forks while podstuck is stopped: a few seconds of them fill the ring.
const STOPPED_FORKS: u64 = 5_000;
/// unlinkat calls of the overflow storm.
const STORM_CALLS: u64 = 300_000;

/// Which faults, how often.
#[derive(Clone, Debug)]
pub struct FaultPlan {
    /// A fault starts this long after the last one ended.
    pub every: Duration,
    /// The tests' FUSE server (src/bin/fuse_server.rs), release-built by
    /// `cargo xtask soak`.
    pub fuse_server: PathBuf,
}

/// The four faults, in the order they come round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    FuseStall,
    Stopped,
    OverflowStorm,
    PidReused,
}

impl Fault {
    pub const ALL: [Fault; 4] = [Fault::FuseStall, Fault::Stopped, Fault::OverflowStorm, Fault::PidReused];

    pub fn words(self) -> &'static str {
        match self {
            Fault::FuseStall => "a FUSE volume stalled 12 s, then answered",
            Fault::Stopped => "podstuck stopped 5 s (SIGSTOP) under a fork storm",
            Fault::OverflowStorm => "a fork storm and a removal storm",
            Fault::PidReused => "a mount holder's pid reused by an innocent",
        }
    }
}

/// What one fault did, and how podstuck came through it.
#[derive(Clone, Debug)]
pub struct FaultOutcome {
    pub fault: Fault,
    /// When it began, since the churn began.
    pub at: Duration,
    /// `podstuck_events_lost_total` before the fault and once right again.
    pub lost_before: Option<u64>,
    pub lost_after: Option<u64>,
    /// From the fault's end until the findings were right again; None
    /// when they were not within [`RIGHT_AGAIN_WITHIN`].
    pub right_again: Option<Duration>,
    /// A wrong answer seen, in words (a finding or fix on a reused pid).
    pub wrong: Option<String>,
    /// What happened, for the report.
    pub detail: String,
}

impl FaultOutcome {
    /// Whether the fault's losses were counted: a stopped podstuck's rings
    /// overflow, so its count must grow; for the others it never shrinks.
    pub fn loss_counted(&self) -> bool {
        match (self.lost_before, self.lost_after) {
            (Some(before), Some(after)) if self.fault == Fault::Stopped => after > before,
            (Some(before), Some(after)) => after >= before,
            _ => false,
        }
    }
}

/// Held while podstuck is stopped: the soak's sampler takes it around a
/// sample, so it never scrapes a stopped server (which would not answer).
#[derive(Clone, Default)]
pub struct Gate(Arc<Mutex<()>>);

impl Gate {
    pub fn hold(&self) -> std::sync::MutexGuard<'_, ()> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// What the faults act on: podstuck, its endpoint, the kubelet root and
/// the helper binaries.
pub struct Target {
    pub podstuck: u32,
    pub listen: SocketAddr,
    pub root: PathBuf,
    pub actor: PathBuf,
    /// Where the churn began, for [`FaultOutcome::at`].
    pub churn_began: Instant,
}

/// The faults' thread.
pub struct Injector {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<FaultOutcome>>,
}

impl Injector {
    /// Starts injecting: the first fault after one `plan.every`.
    pub fn start(plan: FaultPlan, target: Target, gate: Gate) -> Injector {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut outcomes = Vec::new();
            let fuse = FuseVolume::start(&plan, &target);
            for fault in Fault::ALL.into_iter().cycle() {
                if !pause(&stopping, plan.every) {
                    break;
                }
                let at = target.churn_began.elapsed();
                let lost_before = events_lost(target.listen);
                let mut outcome = match fault {
                    Fault::FuseStall => fuse.stall(&target),
                    Fault::Stopped => stopped(&target, &gate),
                    Fault::OverflowStorm => overflow_storm(&target),
                    Fault::PidReused => pid_reused(&target),
                };
                outcome.at = at;
                outcome.lost_before = lost_before;
                outcome.lost_after = events_lost(target.listen);
                eprintln!("soak fault: {}", outcome_line(&outcome));
                outcomes.push(outcome);
            }
            drop(fuse);
            outcomes
        });
        Injector { stop, thread }
    }

    /// Stops after the fault under way (if any) and returns every outcome.
    pub fn finish(self) -> Vec<FaultOutcome> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_else(|_| {
            vec![FaultOutcome {
                fault: Fault::FuseStall,
                at: Duration::ZERO,
                lost_before: None,
                lost_after: None,
                right_again: None,
                wrong: Some("the faults' thread panicked".into()),
                detail: String::new(),
            }]
        })
    }
}

/// One outcome in a line: the fault, when, how soon right again, losses.
pub fn outcome_line(o: &FaultOutcome) -> String {
    let mut line = format!("{:>6.0} s  {}: ", o.at.as_secs_f64(), o.fault.words());
    match o.right_again {
        Some(d) => {
            let _ = write!(line, "right again {:.1} s after", d.as_secs_f64());
        }
        None => line.push_str("NOT right again in time"),
    }
    let lost = |n: Option<u64>| n.map_or("?".to_string(), |n| n.to_string());
    let _ = write!(line, "; events lost {} -> {}", lost(o.lost_before), lost(o.lost_after));
    if let Some(wrong) = &o.wrong {
        let _ = write!(line, "; WRONG: {wrong}");
    }
    if !o.detail.is_empty() {
        let _ = write!(line, "; {}", o.detail);
    }
    line
}

/// Waits `pause`, looking at `stop`: false when told to stop.
fn pause(stop: &AtomicBool, pause: Duration) -> bool {
    let until = Instant::now() + pause;
    while Instant::now() < until {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    !stop.load(Ordering::Relaxed)
}

fn outcome(fault: Fault) -> FaultOutcome {
    FaultOutcome {
        fault,
        at: Duration::ZERO,
        lost_before: None,
        lost_after: None,
        right_again: None,
        wrong: None,
        detail: String::new(),
    }
}

/// `podstuck_events_lost_total` now.
fn events_lost(listen: SocketAddr) -> Option<u64> {
    let body = try_get(listen, "/metrics").ok()?.body;
    body.lines().find_map(|l| l.strip_prefix("podstuck_events_lost_total ")).and_then(|v| v.trim().parse().ok())
}

/// The findings on `/findings` now (empty when it does not answer).
fn findings(listen: SocketAddr) -> Vec<Value> {
    try_get(listen, "/findings")
        .ok()
        .and_then(|a| serde_json::from_str::<Value>(&a.body).ok())
        .and_then(|page| page["findings"].as_array().cloned())
        .unwrap_or_default()
}

/// The findings still happening: `/findings` lists a resolved one too
/// (with `"status":"resolved"`) until it is forgotten.
fn active(listen: SocketAddr) -> Vec<Value> {
    findings(listen).into_iter().filter(is_active).collect()
}

fn is_active(f: &Value) -> bool {
    f["status"] == "active"
}

fn actor(target: &Target) -> Command {
    Command::new(&target.actor)
}

/// The pod whose FUSE volume stalls: kubelet fails to remove its `full`
/// directory (ENOTEMPTY) once a second from start to end.
struct FuseVolume {
    full: PathBuf,
    // Fields drop in order: kubelet stops before the server and mount go.
    _kubelet: Option<Process>,
    server: Option<FuseMount>,
}

impl FuseVolume {
    fn start(plan: &FaultPlan, target: &Target) -> FuseVolume {
        let pod = KubeletRoot::new(&target.root).new_pod();
        let mount = pod.create_csi_volume("pvc-fuse-faults").join("mount");
        let server = FuseMount::start_with(&plan.fuse_server, &mount);
        let full = mount.join("full");
        let kubelet = Process::spawn(
            actor(target).args(["--comm", "kubelet", "--repeat", "0", "--every-ms", "1000", "rmdir"]).arg(&full),
        );
        FuseVolume { full, _kubelet: Some(kubelet), server: Some(server) }
    }

    /// The dir-not-empty finding of `full`, and its confidence, if listed.
    fn confidence(&self, listen: SocketAddr) -> Option<String> {
        let full = self.full.to_string_lossy();
        active(listen)
            .into_iter()
            .find(|f| f["kind"] == "dir-not-empty" && f["paths"][0] == full.as_ref())
            .map(|f| f["confidence"].as_str().unwrap_or("").to_string())
    }

    fn stall(&self, target: &Target) -> FaultOutcome {
        let mut o = outcome(Fault::FuseStall);
        let Some(server) = &self.server else { return o };
        let before = self.confidence(target.listen);
        server.stop_server();
        let stalled = Instant::now();
        let mut during = Vec::new();
        while stalled.elapsed() < STALL {
            if let Some(c) = self.confidence(target.listen) {
                if during.last() != Some(&c) {
                    during.push(c);
                }
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        server.continue_server();
        let answered = Instant::now();
        o.right_again = within(RIGHT_AGAIN_WITHIN, || {
            (self.confidence(target.listen).as_deref() == Some("confirmed")).then(|| answered.elapsed())
        });
        o.detail = format!(
            "dir-not-empty was {} before, {} during the stall",
            before.unwrap_or_else(|| "not listed".into()),
            if during.is_empty() { "not listed".to_string() } else { during.join(" then ") }
        );
        o
    }
}

impl Drop for FuseVolume {
    fn drop(&mut self) {
        drop(self._kubelet.take());
        drop(self.server.take());
    }
}

/// Waits until `/findings` names `stuck`'s volume; how long after `since`.
fn named_after(target: &Target, stuck: &StuckPod, since: Instant) -> Option<Duration> {
    let mount = stuck.mount.to_string_lossy().into_owned();
    within(RIGHT_AGAIN_WITHIN, || {
        active(target.listen)
            .iter()
            .any(|f| {
                f["kind"] == "volume-still-mounted"
                    && f["pod_uid"] == stuck.pod.uid()
                    && f["paths"][0] == mount.as_str()
            })
            .then(|| since.elapsed())
    })
}

/// SIGSTOP podstuck for [`STOPPED`] under a fork storm, a pod getting
/// stuck meanwhile; SIGCONT. The storm runs to its end (a storm cut short
/// would leave the child it had just forked).
fn stopped(target: &Target, gate: &Gate) -> FaultOutcome {
    let mut o = outcome(Fault::Stopped);
    let (storm, stuck) = {
        let _held = gate.hold();
        // SAFETY: kill(2) of the podstuck this soak started.
        unsafe { libc::kill(target.podstuck as i32, libc::SIGSTOP) };
        let storm = Process::spawn(actor(target).args(["fork-kill", &STOPPED_FORKS.to_string()]));
        let stuck = StuckPod::start(&KubeletRoot::new(&target.root), &target.actor);
        std::thread::sleep(STOPPED);
        // SAFETY: as above.
        unsafe { libc::kill(target.podstuck as i32, libc::SIGCONT) };
        (storm, stuck)
    };
    let continued = Instant::now();
    o.right_again = named_after(target, &stuck, continued);
    let (_, said) = storm.finish(Duration::from_secs(300));
    o.detail = format!("pod {} got stuck while podstuck was stopped; the storm: {}", stuck.pod.uid(), said.join(" "));
    o
}

/// A fork storm and a removal storm while podstuck runs, a pod getting
/// stuck meanwhile.
fn overflow_storm(target: &Target) -> FaultOutcome {
    let mut o = outcome(Fault::OverflowStorm);
    let dir = target.root.join(format!("storm-{}", std::process::id()));
    let _tmpfs = TmpfsMount::new(&dir, "size=1m");
    let forks = Process::spawn(actor(target).args(["fork-kill", &FORKS.to_string()]));
    let removals = Process::spawn(actor(target).arg("churn-unlink").arg(&dir).arg(STORM_CALLS.to_string()));
    let stuck = StuckPod::start(&KubeletRoot::new(&target.root), &target.actor);
    let (_, said_forks) = forks.finish(Duration::from_secs(300));
    let (_, said_removals) = removals.finish(Duration::from_secs(300));
    let ended = Instant::now();
    o.right_again = named_after(target, &stuck, ended);
    o.detail = format!("storms said: {} / {}", said_forks.join(" "), said_removals.join(" "));
    o
}


/// A process given pid `pid`, just freed: `ns_last_pid` set to the pid
/// before it, then a fork; tried a few times (the churn forks too).
fn reuse_pid(target: &Target, pid: u32) -> Option<Process> {
    for _ in 0..50 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).ok()?;
        let innocent = Process::spawn(actor(target).args(["--comm", "innocent", "sleep"]));
        if innocent.pid() == pid {
            innocent.wait_ready(Duration::from_secs(10));
            return Some(innocent);
        }
    }
    None
}

/// A holder's pid reused under its mount-held finding.
fn pid_reused(target: &Target) -> FaultOutcome {
    let mut o = outcome(Fault::PidReused);
    let pod = KubeletRoot::new(&target.root).new_pod();
    let mount = pod.create_csi_volume("pvc-held").join("mount");
    let volume = TmpfsMount::new(&mount, "size=1m");
    let holder = Process::spawn(actor(target).args(["--comm", "backup", "hold-cwd"]).arg(&mount));
    holder.wait_ready(Duration::from_secs(10));
    let pid = holder.pid();
    let Some(started) = start_of(pid) else {
        o.detail = "the holder was gone before it was read".into();
        return o;
    };
    let kubelet = Process::spawn(
        actor(target).args(["--comm", "kubelet", "--repeat", "0", "--every-ms", "500", "umount"]).arg(&mount),
    );
    let path = mount.to_string_lossy().into_owned();
    // The holder's finding: once the holder is gone kubelet's unmount
    // succeeds, and its next ones fail with EINVAL (not mounted), which is
    // another finding on the same path and no answer about the holder.
    let of_the_volume = |f: &Value| f["kind"] == "mount-held" && f["paths"][0] == path.as_str();
    // The finding that names the holder, and its fix.
    let named = within(Duration::from_secs(60), || {
        active(target.listen).into_iter().find(|f| {
            of_the_volume(f) && f["fix"].as_str().is_some_and(|fix| fix.contains(&format!("kill -TERM {pid}")))
        })
    });
    let Some(finding) = named else {
        o.detail = format!("no finding named holder pid {pid} within 60 s");
        o.wrong = Some(format!("the holder, pid {pid}, was never named"));
        return o;
    };
    let fix = finding["fix"].as_str().unwrap_or("").to_string();
    holder.signal(libc::SIGKILL);
    let _ = holder.finish(Duration::from_secs(10));
    let killed = Instant::now();
    let Some(innocent) = reuse_pid(target, pid) else {
        o.detail = format!("pid {pid} could not be given to another process (the churn took it)");
        o.right_again =
            within(RIGHT_AGAIN_WITHIN, || (!active(target.listen).iter().any(of_the_volume)).then(|| killed.elapsed()));
        return o;
    };
    let innocent_start = start_of(pid);
    // The fix, pasted as a user would, after the pid went to another.
    let ran = Command::new("sh").arg("-c").arg(&fix).status();
    let survived = alive(pid) && start_of(pid) == innocent_start;
    let mut wrong = Vec::new();
    if !survived {
        wrong.push(format!("pasting the printed fix ({fix}) killed the innocent process that got pid {pid}"));
    }
    // Until the volume's finding ends: none may name the innocent.
    let guard = format!("= {started} ]");
    o.right_again = within(RIGHT_AGAIN_WITHIN, || {
        // One page a poll: what is checked and what ends the wait are the same moment's.
        let page = findings(target.listen);
        for f in &page {
            let text = f.to_string();
            let kills = f["fix"].as_str().is_some_and(|fix| fix.contains(&format!("kill -TERM {pid}")));
            if text.contains("innocent") || (kills && !text.contains(&guard)) {
                let said = format!("a finding named the innocent pid {pid}: {}", f["summary"]);
                if !wrong.contains(&said) {
                    wrong.push(said);
                }
            }
        }
        (!page.iter().any(|f| is_active(f) && of_the_volume(f))).then(|| killed.elapsed())
    });
    o.wrong = (!wrong.is_empty()).then(|| wrong.join("; "));
    o.detail = format!(
        "holder pid {pid} (start {started}) killed, pid given to an innocent (start {}); its fix pasted after: {}, the innocent {}",
        innocent_start.map_or("?".to_string(), |s| s.to_string()),
        ran.map_or_else(|e| e.to_string(), |s| s.to_string()),
        if survived { "lived" } else { "was killed" }
    );
    drop(innocent);
    drop(kubelet);
    drop(volume);
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_podstucks_loss_must_be_counted_and_no_count_may_shrink() {
        let of = |fault, before, after| FaultOutcome { lost_before: before, lost_after: after, ..outcome(fault) };
        assert!(of(Fault::Stopped, Some(3), Some(900)).loss_counted());
        assert!(!of(Fault::Stopped, Some(3), Some(3)).loss_counted());
        assert!(of(Fault::OverflowStorm, Some(3), Some(3)).loss_counted());
        assert!(!of(Fault::PidReused, Some(3), Some(2)).loss_counted());
        assert!(!of(Fault::FuseStall, None, Some(2)).loss_counted());
    }

    #[test]
    fn a_start_is_read_past_a_name_with_spaces_and_parentheses() {
        let me = std::process::id();
        assert!(start_of(me).is_some_and(|s| s > 0));
        assert_eq!(start_of(u32::MAX), None);
    }
}
