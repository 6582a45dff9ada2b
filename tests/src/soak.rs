//! The soak: podstuck's always-on mode, the DaemonSet's `podstuck watch
//! --listen ADDR --concurrent` (its output a pipe, not a terminal), through
//! a long pod churn on a kubelet root of its own, sampled as it goes: its
//! resident memory, open fds and CPU, and what one scrape of `/metrics`
//! holds. After the churn a pod is stuck for real, and podstuck must
//! still name it, in `/findings` and in `podstuck_findings`.
//!
//! What it shows: a node's podstuck stays bounded however many pods come
//! and go. `cargo xtask soak` runs it for minutes against the release
//! build and writes BENCHMARKS.md's Soak section; tests/tests/soak.rs runs
//! it for a minute and a half and asserts what does not depend on timing.
//!
//! Every pod is torn down the way kubelet tears one down, by processes
//! named `kubelet` (the `actor` binary) where podstuck tells callers apart:
//! rmdir of a volume still mounted (EBUSY) and of an emptyDir still full
//! (ENOTEMPTY), the unmount of its memory-backed emptyDir, its container's
//! process stopped by SIGTERM (the lifecycle podstuck follows), the real
//! `/bin/rm -rf` of its files from inside the pod's cgroups (a container
//! cleaning up), the pod's cgroups removed, then its directory, as Go's
//! RemoveAll removes it. Whatever the churn made (mounts, cgroups,
//! directories) is undone on drop, also when the run fails half-way.

use std::collections::VecDeque;
use std::ffi::CString;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use serde_json::Value;

use crate::actors::Process;
use crate::calls::cstring;
use crate::kubelet::{KubeletRoot, Pod};
use crate::node::{cgroup2_root, v1_hierarchy, CgroupDirs, TmpfsMount, POD_V1_CONTROLLERS};
use crate::podstuck::{status_kib, Running};
use crate::scrape::{free_port, try_get};
use crate::wait::within;

pub mod faults;
use faults::{FaultOutcome, FaultPlan, Gate, Injector, Target};

/// Series one scrape of `/metrics` may hold, at most: what a cluster's
/// Prometheus keeps from every node for weeks.
pub const MAX_SERIES: usize = 500;
/// Bytes one scrape of `/metrics` may be, at most (100 KiB).
pub const MAX_SCRAPE_BYTES: usize = 100 * 1024;
/// Resident memory a release podstuck may reach through the churn (the
/// issue's "done when": under 60 MB, and flat).
pub const MAX_RSS_MB: f64 = 60.0;
/// What the redesign aims at, steady: under 40 MB.
pub const AIM_RSS_MB: f64 = 40.0;
/// Open fds at the end may exceed the first sample's by this many: a
/// connection being served, a file being read at that moment.
pub const FD_MARGIN: usize = 4;
/// RSS is flat when, over the churn's second half, it grew by at most
/// this many MB or [`RSS_FLAT_SHARE`] of itself, whichever is more: the
/// allocator keeps freed pages a while, a leak grows on.
pub const RSS_FLAT_MB: f64 = 2.0;
pub const RSS_FLAT_SHARE: f64 = 0.05;

/// How many churned pods exist at once: each lives this many ticks before
/// it is torn down, so podstuck sees pods come and go side by side, as
/// on a node, not one at a time.
pub const PODS_ALIVE: usize = 8;
/// How long the stuck pod may take to be named in both places.
const STUCK_TIMEOUT: Duration = Duration::from_secs(90);
/// The node's name on podstuck's findings and metrics.
pub const NODE: &str = "soak-node";

/// What a soak does.
#[derive(Clone, Debug)]
pub struct SoakOptions {
    /// The podstuck binary under test.
    pub podstuck: PathBuf,
    /// The `actor` binary (src/bin/actor.rs), kubelet's stand-in.
    pub actor: PathBuf,
    /// Where the kubelet root and the pods go; the caller removes it.
    pub scratch: PathBuf,
    /// How long pods are churned.
    pub churn_for: Duration,
    /// How often podstuck is sampled.
    pub sample_every: Duration,
    /// A new pod this often (the rate reached is measured and reported).
    pub pod_every: Duration,
    /// Files in each pod's emptyDir, removed by `rm -rf`.
    pub files_per_pod: usize,
    /// Where podstuck serves (a free port of loopback), known before the
    /// run so that a Prometheus can be told to scrape it.
    pub listen: SocketAddr,
    /// A pod stuck from before the churn to its end, as on a node where
    /// one stays stuck for weeks while others come and go: what podstuck
    /// keeps of it must not grow with the churn, and it must still be
    /// named at the end.
    pub stuck_through_churn: bool,
    /// Faults injected beside the churn (`cargo xtask soak --faults`).
    pub faults: Option<FaultPlan>,
}

impl SoakOptions {
    /// A churn of `churn_for`, a pod every 0.1 s with 20 files, sampled
    /// every 15 s.
    pub fn new(podstuck: PathBuf, actor: PathBuf, scratch: PathBuf, churn_for: Duration) -> SoakOptions {
        SoakOptions {
            podstuck,
            actor,
            scratch,
            churn_for,
            sample_every: Duration::from_secs(15),
            pod_every: Duration::from_millis(100),
            files_per_pod: 20,
            listen: SocketAddr::from(([127, 0, 0, 1], free_port())),
            stuck_through_churn: true,
            faults: None,
        }
    }

    /// podstuck's arguments: the DaemonSet's (deploy/base/podstuck-daemonset.yaml)
    /// on a port of loopback, with this run's kubelet root and a node name.
    pub fn podstuck_args(&self, listen: SocketAddr, root: &KubeletRoot) -> Vec<String> {
        ["watch", "--listen", &listen.to_string(), "--concurrent", "--kubelet-root", root.arg(), "--node-name", NODE]
            .map(str::to_string)
            .to_vec()
    }
}

/// When a sample was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// podstuck attached, no pod churned yet.
    Start,
    Churn,
    /// After the churn, with the stuck pod named.
    Stuck,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Start => "start",
            Phase::Churn => "churn",
            Phase::Stuck => "stuck pod",
        }
    }
}

/// podstuck at one moment.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Since the churn started (the start sample: 0).
    pub at: Duration,
    pub phase: Phase,
    /// Pods churned so far: made and torn down.
    pub pods: u64,
    /// VmRSS, in KiB.
    pub rss_kib: u64,
    /// Entries of /proc/<pid>/fd.
    pub fds: usize,
    /// utime + stime, in seconds.
    pub cpu_s: f64,
    /// Sample lines in one scrape of `/metrics` (neither comments nor empty).
    pub series: usize,
    /// That scrape's body, in bytes.
    pub bytes: usize,
    /// `podstuck_events_lost_total` in that scrape, if it says.
    pub events_lost: Option<f64>,
}

impl Sample {
    pub fn rss_mb(&self) -> f64 {
        self.rss_kib as f64 * 1024.0 / 1e6
    }

    /// Its figures as the table and the running lines show them, in their
    /// order: time, phase, pods churned, RSS (MB), open fds, CPU (s),
    /// series, scrape bytes, events lost ("?" where unread).
    fn cells(&self) -> [String; 9] {
        [
            minutes(self.at),
            self.phase.as_str().to_string(),
            self.pods.to_string(),
            format!("{:.1}", self.rss_mb()),
            self.fds.to_string(),
            format!("{:.1}", self.cpu_s),
            self.series.to_string(),
            self.bytes.to_string(),
            self.events_lost.map(|n| n.to_string()).unwrap_or_else(|| "?".into()),
        ]
    }
}

/// A soak's figures, and how they stand against the targets.
#[derive(Clone, Debug)]
pub struct SoakReport {
    pub samples: Vec<Sample>,
    /// Pods churned, and over how long.
    pub pods: u64,
    pub churned_for: Duration,
    /// As the options asked.
    pub files_per_pod: usize,
    pub sample_every: Duration,
    /// Where the pods' cgroups were made, in words.
    pub cgroups: String,
    /// podstuck's command line.
    pub command: String,
    /// The pod stuck after the churn.
    pub stuck_pod: String,
    /// How long after kubelet started failing to remove its volume it was
    /// listed on `/findings` and in `podstuck_findings` (None: not within
    /// 90 s).
    pub stuck_in_findings: Option<Duration>,
    pub stuck_in_metrics: Option<Duration>,
    /// With [`SoakOptions::stuck_through_churn`]: whether that pod was
    /// still named on /findings and in podstuck_findings at the end.
    pub stuck_through_churn_named: Option<bool>,
    /// `GET /healthz`'s status at the end (0: no answer).
    pub healthz: u16,
    /// How podstuck ended on SIGTERM, and what it said on stderr.
    pub exit: String,
    pub exited_cleanly: bool,
    pub stderr: String,
    /// What it printed on stdout: a line per finding, told and resolved
    /// (the churn should make none: each pod's failed calls are followed
    /// by successes), then its closing line of what it counted.
    pub stdout: Vec<String>,
    /// The faults injected beside the churn, in order (none without
    /// [`SoakOptions::faults`]).
    pub faults: Vec<FaultOutcome>,
}

/// One target, met or not, with what was measured.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub target: String,
    pub met: bool,
    pub measured: String,
    /// An aim of the design rather than a target the run must meet.
    pub aim: bool,
}

impl SoakReport {
    /// The finding lines podstuck printed: its stdout but for its own
    /// `podstuck: ` lines.
    pub fn finding_lines(&self) -> Vec<&str> {
        self.stdout.iter().map(String::as_str).filter(|l| !l.starts_with("podstuck: ")).collect()
    }

    /// Pods churned a second.
    pub fn pods_per_s(&self) -> f64 {
        self.pods as f64 / self.churned_for.as_secs_f64().max(1e-9)
    }

    pub fn first(&self) -> &Sample {
        &self.samples[0]
    }

    pub fn last(&self) -> &Sample {
        self.samples.last().expect("a soak has samples")
    }

    pub fn max_rss_mb(&self) -> f64 {
        self.samples.iter().map(Sample::rss_mb).fold(0.0, f64::max)
    }

    pub fn max_series(&self) -> usize {
        self.samples.iter().map(|s| s.series).max().unwrap_or(0)
    }

    pub fn max_bytes(&self) -> usize {
        self.samples.iter().map(|s| s.bytes).max().unwrap_or(0)
    }

    pub fn max_fds(&self) -> usize {
        self.samples.iter().map(|s| s.fds).max().unwrap_or(0)
    }

    /// The churn's samples.
    fn churn(&self) -> Vec<&Sample> {
        self.samples.iter().filter(|s| s.phase == Phase::Churn).collect()
    }

    /// RSS at the churn's middle sample and at its last, in MB: a leak
    /// shows as growth between them, past the warm-up.
    pub fn rss_second_half_mb(&self) -> Option<(f64, f64)> {
        let churn = self.churn();
        let (middle, last) = (churn.get(churn.len() / 2)?, churn.last()?);
        Some((middle.rss_mb(), last.rss_mb()))
    }

    /// Whether RSS stayed flat over the churn's second half (see [`RSS_FLAT_MB`]).
    pub fn rss_flat(&self) -> bool {
        self.rss_second_half_mb()
            .is_some_and(|(middle, last)| last - middle <= RSS_FLAT_MB.max(middle * RSS_FLAT_SHARE))
    }

    /// Whether the open fds at the end are within [`FD_MARGIN`] of the first sample's.
    pub fn fds_flat(&self) -> bool {
        self.last().fds <= self.first().fds + FD_MARGIN
    }

    /// CPU seconds podstuck spent over the churn, per pod churned, in ms.
    pub fn cpu_ms_per_pod(&self) -> f64 {
        let churn = self.churn();
        match churn.last() {
            Some(last) if self.pods > 0 => (last.cpu_s - self.first().cpu_s) * 1000.0 / self.pods as f64,
            _ => 0.0,
        }
    }

    /// The targets of the always-on mode, each met or not.
    pub fn verdicts(&self) -> Vec<Verdict> {
        let (middle, last) = self.rss_second_half_mb().unwrap_or((f64::NAN, f64::NAN));
        let named = |at: Option<Duration>| {
            at.map(|d| format!("after {:.1} s", d.as_secs_f64()))
                .unwrap_or_else(|| format!("not within {} s", STUCK_TIMEOUT.as_secs()))
        };
        let mut verdicts = vec![
            Verdict {
                target: format!(
                    "RSS flat (second half of the churn grows ≤ {RSS_FLAT_MB} MB or {:.0} %)",
                    RSS_FLAT_SHARE * 100.0
                ),
                met: self.rss_flat(),
                measured: format!("{middle:.1} MB at mid-churn, {last:.1} MB at its end"),
                aim: false,
            },
            Verdict {
                target: format!("RSS < {MAX_RSS_MB} MB"),
                met: self.max_rss_mb() < MAX_RSS_MB,
                measured: format!("at most {:.1} MB", self.max_rss_mb()),
                aim: false,
            },
            Verdict {
                target: format!("RSS < {AIM_RSS_MB} MB steady (the design's aim)"),
                met: last < AIM_RSS_MB,
                measured: format!("{last:.1} MB at the churn's end"),
                aim: true,
            },
            Verdict {
                target: format!("≤ {MAX_SERIES} series per scrape"),
                met: self.max_series() <= MAX_SERIES,
                measured: format!("at most {}", self.max_series()),
                aim: false,
            },
            Verdict {
                target: format!("≤ {MAX_SCRAPE_BYTES} bytes (100 KiB) per scrape"),
                met: self.max_bytes() <= MAX_SCRAPE_BYTES,
                measured: format!("at most {} bytes", self.max_bytes()),
                aim: false,
            },
            Verdict {
                target: format!("fds flat (the end ≤ the start + {FD_MARGIN})"),
                met: self.fds_flat(),
                measured: format!(
                    "{} at the start, {} at the end, {} at most",
                    self.first().fds,
                    self.last().fds,
                    self.max_fds()
                ),
                aim: false,
            },
            Verdict {
                target: "the stuck pod named in /findings and podstuck_findings".into(),
                met: self.stuck_in_findings.is_some() && self.stuck_in_metrics.is_some(),
                measured: format!(
                    "/findings {}, podstuck_findings {}",
                    named(self.stuck_in_findings),
                    named(self.stuck_in_metrics)
                ),
                aim: false,
            },
            Verdict {
                target: "a pod stuck through the churn still named at its end".into(),
                met: self.stuck_through_churn_named != Some(false),
                measured: match self.stuck_through_churn_named {
                    Some(true) => "named".into(),
                    Some(false) => "not named".into(),
                    None => "no such pod in this run".into(),
                },
                aim: false,
            },
            Verdict {
                target: "GET /healthz 200 at the end".into(),
                met: self.healthz == 200,
                measured: format!("{}", self.healthz),
                aim: false,
            },
        ];
        verdicts.extend(self.fault_verdicts());
        verdicts
    }

    /// With faults: the findings right again within seconds of each, every
    /// loss counted, no answer on a reused pid, every kind of fault made.
    fn fault_verdicts(&self) -> Vec<Verdict> {
        if self.faults.is_empty() {
            return Vec::new();
        }
        let late: Vec<String> = self
            .faults
            .iter()
            .filter(|o| o.right_again.is_none())
            .map(|o| format!("{} at {:.0} s", o.fault.words(), o.at.as_secs_f64()))
            .collect();
        let slowest = self.faults.iter().filter_map(|o| o.right_again).max().unwrap_or_default();
        let uncounted: Vec<String> = self
            .faults
            .iter()
            .filter(|o| !o.loss_counted())
            .map(|o| {
                format!(
                    "{} at {:.0} s ({:?} -> {:?})",
                    o.fault.words(),
                    o.at.as_secs_f64(),
                    o.lost_before,
                    o.lost_after
                )
            })
            .collect();
        let wrong: Vec<&str> = self.faults.iter().filter_map(|o| o.wrong.as_deref()).collect();
        let missing: Vec<&str> = faults::Fault::ALL
            .iter()
            .filter(|f| !self.faults.iter().any(|o| o.fault == **f))
            .map(|f| f.words())
            .collect();
        vec![
            Verdict {
                target: format!(
                    "after every fault, the findings right again within {} s",
                    faults::RIGHT_AGAIN_WITHIN.as_secs()
                ),
                met: late.is_empty(),
                measured: if late.is_empty() {
                    format!(
                        "{} faults, the slowest right again after {:.1} s",
                        self.faults.len(),
                        slowest.as_secs_f64()
                    )
                } else {
                    format!("not after {}", late.join("; "))
                },
                aim: false,
            },
            Verdict {
                target: "every loss counted (a stopped podstuck's overflow in podstuck_events_lost_total)".into(),
                met: uncounted.is_empty(),
                measured: if uncounted.is_empty() {
                    format!(
                        "{} events lost, all counted",
                        self.faults.iter().filter_map(|o| o.lost_after).max().unwrap_or(0)
                    )
                } else {
                    format!("not counted: {}", uncounted.join("; "))
                },
                aim: false,
            },
            Verdict {
                target: "no finding or fix on a reused pid".into(),
                met: wrong.is_empty(),
                measured: if wrong.is_empty() { "none".into() } else { wrong.join("; ") },
                aim: false,
            },
            Verdict {
                target: "every kind of fault injected".into(),
                met: missing.is_empty(),
                measured: if missing.is_empty() { "all four".into() } else { format!("not: {}", missing.join("; ")) },
                aim: false,
            },
        ]
    }

    /// The samples as a Markdown table.
    pub fn markdown_table(&self) -> String {
        let mut out = String::new();
        out.push_str("| time | phase | pods churned | RSS | open fds | CPU | CPU over the interval | series | scrape bytes | events lost |\n");
        out.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
        let mut before: Option<&Sample> = None;
        for s in &self.samples {
            let share = match before {
                Some(b) if s.at > b.at => format!("{:.0} %", (s.cpu_s - b.cpu_s) / (s.at - b.at).as_secs_f64() * 100.0),
                _ => String::new(),
            };
            let [at, phase, pods, rss, fds, cpu, series, bytes, lost] = s.cells();
            let _ = writeln!(
                out,
                "| {at} | {phase} | {pods} | {rss} MB | {fds} | {cpu} s | {share} | {series} | {bytes} | {lost} |"
            );
            before = Some(s);
        }
        out
    }
}

/// `m:ss`.
pub fn minutes(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}:{:02}", s / 60, s % 60)
}

/// A sample as one line, for a run that prints them as they come.
pub fn sample_line(s: &Sample) -> String {
    let [at, phase, pods, rss, fds, cpu, series, bytes, lost] = s.cells();
    format!(
        "{at} {phase:<9} pods {pods:>6}  RSS {rss:>6} MB  fds {fds:>3}  CPU {cpu:>6} s  series {series:>6}  scrape {bytes:>8} bytes  lost {lost}"
    )
}

/// Runs the soak: starts podstuck as the DaemonSet runs it, churns pods,
/// samples it every `sample_every` (each sample handed to `on_sample` as
/// it is taken), sticks a pod, stops podstuck with SIGTERM, and reports.
/// Err where podstuck exits early or the churn cannot do what it should
/// (with what podstuck said on stderr).
///
/// `while_stuck` runs once the stuck pod is named, podstuck still up, with
/// that pod's UID: a test's last checks (a Prometheus's alerts).
pub fn run(
    options: &SoakOptions,
    on_sample: impl FnMut(&Sample),
    while_stuck: impl FnOnce(&str) -> Result<()>,
) -> Result<SoakReport> {
    let root = KubeletRoot::empty(options.scratch.join("kubelet"));
    let cgroups = PodCgroups::of_this_node(&format!("podstuck-soak-{}", std::process::id()))?;
    let listen = options.listen;
    let args = options.podstuck_args(listen, &root);
    let mut podstuck = Running::spawn(Command::new(&options.podstuck).args(&args).stdin(Stdio::null()));
    await_serving(&mut podstuck, listen)?;
    let soaked = churn_then_stick(options, &root, &cgroups, listen, &mut podstuck, on_sample, while_stuck);
    let soaked = soaked.with_context(|| {
        let state = match podstuck.try_wait() {
            Some(status) => format!("exited ({status})"),
            None => "still running".to_string(),
        };
        format!("podstuck {state}, its stderr:\n{}", podstuck.stderr())
    })?;
    let ended = podstuck.stop(libc::SIGTERM);
    Ok(SoakReport {
        samples: soaked.samples,
        pods: soaked.pods,
        churned_for: soaked.churned_for,
        files_per_pod: options.files_per_pod,
        sample_every: options.sample_every,
        cgroups: cgroups.words(),
        command: format!("podstuck {}", args.join(" ")),
        stuck_pod: soaked.stuck_pod,
        stuck_in_findings: soaked.in_findings,
        stuck_in_metrics: soaked.in_metrics,
        stuck_through_churn_named: soaked.through_churn_named,
        healthz: soaked.healthz,
        exit: ended.status.to_string(),
        exited_cleanly: ended.status.success(),
        stderr: ended.stderr,
        stdout: ended.lines,
        faults: soaked.faults,
    })
}

/// What the churn and the stuck pod gave, podstuck still running.
struct Soaked {
    samples: Vec<Sample>,
    pods: u64,
    churned_for: Duration,
    stuck_pod: String,
    in_findings: Option<Duration>,
    in_metrics: Option<Duration>,
    through_churn_named: Option<bool>,
    healthz: u16,
    faults: Vec<FaultOutcome>,
}

/// The churn, sampled, then the stuck pod, sampled once named.
fn churn_then_stick(
    options: &SoakOptions,
    root: &KubeletRoot,
    cgroups: &PodCgroups,
    listen: SocketAddr,
    podstuck: &mut Running,
    mut on_sample: impl FnMut(&Sample),
    while_stuck: impl FnOnce(&str) -> Result<()>,
) -> Result<Soaked> {
    let pid = podstuck.pid();
    let mut samples = Vec::new();
    // Never taken while a fault has podstuck stopped: it would not answer.
    let gate = Gate::default();
    let mut take = |phase: Phase, at: Duration, pods: u64| -> Result<()> {
        let held = gate.hold();
        let sample = sample(pid, listen, phase, at, pods)?;
        drop(held);
        on_sample(&sample);
        samples.push(sample);
        Ok(())
    };
    take(Phase::Start, Duration::ZERO, 0)?;
    let stuck_through_churn = options.stuck_through_churn.then(|| StuckPod::start(root, &options.actor));

    // The churn: a pod made every tick, the one made PODS_ALIVE ticks ago
    // torn down. Ticks are kept to the clock; when a tick runs late the
    // next starts at once, never two at once (the rate is what it is).
    let started = Instant::now();
    let injector = options.faults.clone().map(|plan| {
        let target = Target {
            podstuck: pid,
            listen,
            root: root.path().to_path_buf(),
            actor: options.actor.clone(),
            churn_began: started,
        };
        Injector::start(plan, target, gate.clone())
    });
    let (mut next_pod, mut next_sample) = (started, started + options.sample_every);
    let mut alive: VecDeque<ChurnedPod> = VecDeque::new();
    let mut pods = 0u64;
    while started.elapsed() < options.churn_for {
        alive.push_back(ChurnedPod::create(root, cgroups, options.files_per_pod)?);
        if alive.len() > PODS_ALIVE {
            alive.pop_front().expect("alive").tear_down(&options.actor)?;
            pods += 1;
        }
        if let Some(status) = podstuck.try_wait() {
            bail!("podstuck exited during the churn ({status}) after {pods} pods");
        }
        // Not in the churn's last second: its end is sampled anyway.
        let now = Instant::now();
        if now >= next_sample && now + Duration::from_secs(1) < started + options.churn_for {
            take(Phase::Churn, started.elapsed(), pods)?;
            next_sample += options.sample_every;
        }
        next_pod += options.pod_every;
        match next_pod.checked_duration_since(Instant::now()) {
            Some(wait) => std::thread::sleep(wait),
            None => next_pod = Instant::now(),
        }
    }
    let faults = injector.map(Injector::finish).unwrap_or_default();
    while let Some(pod) = alive.pop_front() {
        pod.tear_down(&options.actor)?;
        pods += 1;
    }
    let churned_for = started.elapsed();
    take(Phase::Churn, churned_for, pods)?;

    let stuck = StuckPod::start(root, &options.actor);
    let (in_findings, in_metrics) = stuck.await_named(listen, podstuck);
    take(Phase::Stuck, started.elapsed(), pods)?;
    let through_churn_named = stuck_through_churn.map(|early| {
        let (in_findings, in_metrics) = early.await_named(listen, podstuck);
        in_findings.is_some() && in_metrics.is_some()
    });
    while_stuck(stuck.pod.uid())?;
    let healthz = try_get(listen, "/healthz").map(|a| a.status).unwrap_or(0);
    Ok(Soaked {
        samples,
        pods,
        churned_for,
        stuck_pod: stuck.pod.uid().to_string(),
        in_findings,
        in_metrics,
        through_churn_named,
        healthz,
        faults,
    })
}

/// Waits until podstuck says it serves (it does once every program is
/// attached); Err if it exits first or takes over 60 s.
fn await_serving(podstuck: &mut Running, listen: SocketAddr) -> Result<()> {
    let said = format!("serving http://{listen}/metrics");
    let serving = within(Duration::from_secs(60), || {
        if podstuck.stderr().contains(&said) {
            return Some(Ok(()));
        }
        podstuck.try_wait().map(Err)
    });
    match serving {
        Some(Ok(())) => Ok(()),
        Some(Err(status)) => {
            // What it said last is on its way through the pipe.
            let stderr = podstuck.finish(Duration::from_secs(5)).stderr;
            bail!("podstuck exited before serving ({status}): {stderr}")
        }
        None => bail!("podstuck did not serve {listen} within 60 s: {}", podstuck.stderr()),
    }
}

/// podstuck `pid` now, and a scrape of its `/metrics`.
fn sample(pid: u32, listen: SocketAddr, phase: Phase, at: Duration, pods: u64) -> Result<Sample> {
    let metrics = try_get(listen, "/metrics").context("scraping /metrics")?;
    if metrics.status != 200 {
        bail!("GET /metrics: {} {}", metrics.status, metrics.body);
    }
    let lines: Vec<&str> = metrics.body.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    let events_lost =
        lines.iter().find_map(|l| l.strip_prefix("podstuck_events_lost_total ")).and_then(|v| v.trim().parse().ok());
    Ok(Sample {
        at,
        phase,
        pods,
        rss_kib: status_kib(pid, "VmRSS").context("podstuck's VmRSS")?,
        fds: std::fs::read_dir(format!("/proc/{pid}/fd")).context("podstuck's fds")?.count(),
        cpu_s: cpu_seconds(pid).context("podstuck's CPU time")?,
        series: lines.len(),
        bytes: metrics.body.len(),
        events_lost,
    })
}

/// utime + stime of `pid`, in seconds.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields follow the last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    Some(ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64)
}

/// Where kubelet makes a pod's cgroups on this node, with the cgroupfs
/// driver and `--cgroup-root` set to a parent of the run's own (so that
/// nothing of a real kubelet's is touched): on a cgroup v1 or hybrid node
/// `<hierarchy>/<parent>/kubepods/besteffort/pod<uid>` in each hierarchy
/// of [`POD_V1_CONTROLLERS`] mounted here (cgroup2, where it is mounted
/// beside them, has no controller and kubelet makes nothing there); on a
/// cgroup v2 node, the same below the cgroup2 root. The parents are made
/// now and removed on drop.
struct PodCgroups {
    /// `<hierarchy>/<parent>/kubepods/besteffort` of each.
    qos: Vec<PathBuf>,
    _made: Vec<CgroupDirs>,
}

impl PodCgroups {
    fn of_this_node(parent: &str) -> Result<PodCgroups> {
        let mut hierarchies: Vec<PathBuf> = POD_V1_CONTROLLERS.iter().filter_map(|c| v1_hierarchy(c)).collect();
        hierarchies.dedup();
        if hierarchies.is_empty() {
            hierarchies.push(cgroup2_root());
        }
        let qos: Vec<PathBuf> = hierarchies.iter().map(|h| h.join(parent).join("kubepods/besteffort")).collect();
        let made = qos.iter().map(|q| CgroupDirs::create(q)).collect();
        Ok(PodCgroups { qos, _made: made })
    }

    /// A pod's cgroup directory in each hierarchy.
    fn of(&self, uid: &str) -> Vec<PathBuf> {
        self.qos.iter().map(|q| q.join(format!("pod{uid}"))).collect()
    }

    /// `/sys/fs/cgroup/{memory,pids}/<parent>/kubepods/besteffort/pod<uid>`.
    fn words(&self) -> String {
        let hierarchies: Vec<&Path> = self.qos.iter().filter_map(|q| q.ancestors().nth(3)).collect();
        let below = self.qos[0].strip_prefix(hierarchies[0]).unwrap_or(&self.qos[0]);
        let parents: Vec<Option<&Path>> = hierarchies.iter().map(|h| h.parent()).collect();
        let names: Vec<String> =
            hierarchies.iter().filter_map(|h| h.file_name()).map(|n| n.to_string_lossy().into_owned()).collect();
        match parents[0] {
            Some(parent) if hierarchies.len() > 1 && parents.iter().all(|p| *p == Some(parent)) => {
                format!("{}/{{{}}}/{}/pod<uid>", parent.display(), names.join(","), below.display())
            }
            _ => self.qos.iter().map(|q| format!("{}/pod<uid>", q.display())).collect::<Vec<_>>().join(", "),
        }
    }
}

/// One churned pod's node state: its directory with an emptyDir of files
/// (`data`) and a memory-backed emptyDir (`cache`, a tmpfs), and its
/// cgroups. On drop, what the teardown did not get to is undone (a failed
/// run): nothing twice, since each call that failed here would be one more
/// call podstuck traces and counts.
struct ChurnedPod {
    pod: Pod,
    data: PathBuf,
    cache: PathBuf,
    cgroups: Vec<PathBuf>,
    mounted: bool,
    cgroups_made: usize,
    dir_left: bool,
}

impl ChurnedPod {
    /// Lays the pod out as kubelet does before its containers start.
    fn create(root: &KubeletRoot, cgroups: &PodCgroups, files: usize) -> Result<ChurnedPod> {
        let pod = root.new_pod();
        let mut made = ChurnedPod {
            data: pod.empty_dir("data"),
            cache: pod.empty_dir("cache"),
            cgroups: cgroups.of(pod.uid()),
            pod,
            mounted: false,
            cgroups_made: 0,
            dir_left: true,
        };
        std::fs::create_dir_all(&made.data).with_context(|| format!("mkdir {}", made.data.display()))?;
        for i in 0..files {
            std::fs::write(made.data.join(format!("file-{i:02}")), b"scratch\n")?;
        }
        std::fs::create_dir_all(&made.cache)?;
        mount(Some("podstuck-soak"), &made.cache, Some("tmpfs"), MsFlags::empty(), Some("size=1m"))
            .with_context(|| format!("mount tmpfs at {}", made.cache.display()))?;
        made.mounted = true;
        for dir in made.cgroups.clone() {
            std::fs::create_dir(&dir).with_context(|| format!("mkdir cgroup {}", dir.display()))?;
            made.cgroups_made += 1;
        }
        Ok(made)
    }

    /// `command`'s process starts in the pod's cgroups (every hierarchy's).
    fn in_pod_cgroups(&self, command: &mut Command) {
        let procs: Vec<CString> = self.cgroups.iter().map(|c| cstring(&c.join("cgroup.procs"))).collect();
        // SAFETY: only open, write and close between fork and exec, on
        // strings made before the fork.
        unsafe {
            command.pre_exec(move || {
                for procs in &procs {
                    let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                    // "0": the writing process itself, in v1 as in v2.
                    let wrote = fd >= 0 && libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
                    let err = std::io::Error::last_os_error();
                    if fd >= 0 {
                        libc::close(fd);
                    }
                    if !wrote {
                        return Err(err);
                    }
                }
                Ok(())
            });
        }
    }

    /// Tears the pod down as kubelet does once its containers are gone,
    /// and checks each step did what it should.
    fn tear_down(mut self, actor: &Path) -> Result<()> {
        // kubelet, ahead of the unmount: the memory-backed emptyDir is
        // still mounted, the other still full.
        expect(
            kubelet(actor, "rmdirs", &[&self.cache, &self.data])?,
            &format!("rmdirs errno {}, errno {}", libc::EBUSY, libc::ENOTEMPTY),
        )?;
        expect(kubelet(actor, "umount", &[&self.cache])?, "umount ok")?;
        self.mounted = false;
        // The container's process, stopped as its runtime stops it:
        // SIGTERM, and it exits. podstuck follows that lifecycle for every
        // pod (signal, exit) and keeps nothing of it once it is over.
        let mut container = Command::new("sleep");
        container.arg("60");
        self.in_pod_cgroups(&mut container);
        let mut container = container.spawn().context("starting the pod's container process")?;
        // SAFETY: kill(2) of our own child, not yet reaped.
        unsafe { libc::kill(container.id() as i32, libc::SIGTERM) };
        let stopped = container.wait().context("waiting for the pod's container process")?;
        if std::os::unix::process::ExitStatusExt::signal(&stopped) != Some(libc::SIGTERM) {
            bail!("the pod's container process ended {stopped}, not by SIGTERM");
        }
        // The emptyDir's files, by the real rm, from inside the pod's
        // cgroups: podstuck finds a caller's pod by its cgroup too.
        let mut rm = Command::new("/bin/rm");
        rm.arg("-rf").arg(&self.data);
        self.in_pod_cgroups(&mut rm);
        let out = rm.output().context("running /bin/rm")?;
        if !out.status.success() {
            bail!("rm -rf {}: {} {}", self.data.display(), out.status, String::from_utf8_lossy(&out.stderr));
        }
        let cgroups: Vec<&Path> = self.cgroups.iter().map(PathBuf::as_path).collect();
        expect(kubelet(actor, "rmdirs", &cgroups)?, &format!("rmdirs {}", vec!["ok"; cgroups.len()].join(", ")))?;
        self.cgroups_made = 0;
        expect(kubelet(actor, "remove-all", &[self.pod.dir()])?, "remove-all done")?;
        self.dir_left = false;
        Ok(())
    }
}

impl Drop for ChurnedPod {
    fn drop(&mut self) {
        if self.mounted {
            let _ = umount2(&self.cache, MntFlags::MNT_DETACH);
        }
        for dir in self.cgroups[..self.cgroups_made].iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
        if self.dir_left {
            let _ = std::fs::remove_dir_all(self.pod.dir());
        }
    }
}

/// `actor --comm kubelet OP PATHS...`: what it printed.
fn kubelet(actor: &Path, op: &str, paths: &[&Path]) -> Result<String> {
    let out = Command::new(actor)
        .args(["--comm", "kubelet", op])
        .args(paths)
        .stdin(Stdio::null())
        .output()
        .context("running the actor")?;
    if !out.status.success() {
        bail!("actor {op} {paths:?}: {} {}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn expect(said: String, wanted: &str) -> Result<()> {
    if said != wanted {
        bail!("the churn's kubelet said {said:?}, not {wanted:?}");
    }
    Ok(())
}

/// The pod stuck after the churn (tests/tests/listen.rs's P1): its CSI
/// volume left mounted, and kubelet failing to remove the volume's
/// directory on its volume backoff. Unmounted and stopped on drop.
struct StuckPod {
    pod: Pod,
    mount: PathBuf,
    started: Instant,
    // Fields drop in order: kubelet stops before the volume is unmounted.
    _kubelet: Process,
    _volume: TmpfsMount,
}

impl StuckPod {
    fn start(root: &KubeletRoot, actor: &Path) -> StuckPod {
        let pod = root.new_pod();
        let pv = pod.create_csi_volume("pvc-soak");
        let mount = pv.join("mount");
        let volume = TmpfsMount::new(&mount, "size=1m");
        let kubelet = Process::spawn(
            Command::new(actor)
                .args(["--comm", "kubelet", "--backoff-ms", "500", "--repeat", "0", "rmdir-at"])
                .arg(&pv)
                .arg("mount"),
        );
        StuckPod { pod, mount, started: Instant::now(), _kubelet: kubelet, _volume: volume }
    }

    /// Waits until `/findings` lists a volume-still-mounted finding of the
    /// pod and `/metrics` a `podstuck_findings` series of it: when each
    /// was first seen, None for what was not within [`STUCK_TIMEOUT`] (or
    /// before podstuck exited).
    fn await_named(&self, listen: SocketAddr, podstuck: &mut Running) -> (Option<Duration>, Option<Duration>) {
        let uid = self.pod.uid();
        let (mut in_findings, mut in_metrics) = (None, None);
        // A pod stuck long ago is given a little time too.
        let deadline = (self.started + STUCK_TIMEOUT).max(Instant::now() + Duration::from_secs(10));
        within(deadline.saturating_duration_since(Instant::now()), || {
            if podstuck.try_wait().is_some() {
                return Some(());
            }
            if in_findings.is_none() {
                let page: Value = try_get(listen, "/findings")
                    .ok()
                    .and_then(|a| serde_json::from_str(&a.body).ok())
                    .unwrap_or_default();
                let listed = page["findings"].as_array().into_iter().flatten().any(|f| {
                    f["kind"] == "volume-still-mounted"
                        && f["pod_uid"] == uid
                        && f["paths"][0] == self.mount.to_string_lossy().as_ref()
                });
                if listed {
                    in_findings = Some(self.started.elapsed());
                }
            }
            if in_metrics.is_none() {
                let body = try_get(listen, "/metrics").map(|a| a.body).unwrap_or_default();
                let (kind, pod) = ("kind=\"volume-still-mounted\"", format!("pod_uid=\"{uid}\""));
                if body.lines().any(|l| l.starts_with("podstuck_findings{") && l.contains(kind) && l.contains(&pod)) {
                    in_metrics = Some(self.started.elapsed());
                }
            }
            (in_findings.is_some() && in_metrics.is_some()).then_some(())
        });
        (in_findings, in_metrics)
    }
}
