//! `cargo xtask soak`: podstuck's always-on mode, the DaemonSet's `watch
//! --listen --concurrent` (the release build), through minutes of pod
//! churn (the harness is podstuck_tests::soak, which the short soak test
//! shares), its samples printed as they come. Writes BENCHMARKS.md's Soak
//! section with the command, the machine, the churn rate reached, the
//! samples and the verdict against the targets; the rest of the file is
//! kept, and `cargo xtask bench`, which writes the rest, keeps this
//! section. Fails when a target is missed (not the 40 MB aim).
//!
//! `--faults` adds, beside the churn, one fault every
//! `--fault-every-seconds` in turn (podstuck_tests::soak::faults): a FUSE
//! volume that stalls and recovers, podstuck stopped with SIGSTOP under a
//! fork storm, an overflow storm, a mount holder's pid reused; each
//! fault's recovery is a row of the section "Soak with faults", which a
//! plain soak leaves as it is (and the other way round).
//!
//! `--demos-beside` runs `podstuck demo` again and again beside the
//! churn: a lab of pods stuck in every way, whose findings the soaked
//! podstuck tells too, as on a node with incidents; its section is "Soak
//! with demos beside", for memory that grows only with findings told.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use podstuck_tests::soak::faults::{self, FaultPlan};
use podstuck_tests::soak::{self, SoakOptions, SoakReport, PODS_ALIVE};

/// How long to soak.
#[derive(clap::Args, Clone, Debug)]
pub struct SoakArgs {
    /// Minutes of pod churn (a pod about every 0.1 s: 10,000 pods take about 17).
    #[arg(long, default_value_t = 6)]
    pub minutes: u64,
    /// Seconds between samples.
    #[arg(long, default_value_t = 15)]
    pub sample_seconds: u64,
    /// The file whose Soak section is written.
    #[arg(long, default_value = "BENCHMARKS.md")]
    pub out: PathBuf,
    /// Inject faults beside the churn, in turn: a FUSE volume that stalls
    /// and recovers, podstuck stopped (SIGSTOP) for 5 s, an overflow
    /// storm, a mount holder's pid reused.
    #[arg(long)]
    pub faults: bool,
    /// Seconds from one fault's end to the next's start.
    #[arg(long, default_value_t = 45)]
    pub fault_every_seconds: u64,
    /// The podstuck to soak, in place of this tree's release build: another
    /// build, or a wrapper that runs it under a heap profiler (`exec
    /// heaptrack -o FILE /path/to/podstuck "$@"`: the RSS sampled is then
    /// the wrapper's, the profile podstuck's).
    #[arg(long)]
    pub podstuck: Option<PathBuf>,
    /// Run `podstuck demo --duration 20s` (this tree's release build) again
    /// and again beside the churn: its pods' findings told beside the
    /// churn's, as on a node with incidents.
    #[arg(long, conflicts_with = "faults")]
    pub demos_beside: bool,
}

/// The section's heading; it runs to the next `## ` heading or the end.
const HEADING: &str = "## Soak";
/// The heading of `--faults`' section.
const FAULTS_HEADING: &str = "## Soak with faults";
/// The heading of `--demos-beside`' section.
const DEMOS_HEADING: &str = "## Soak with demos beside";
/// How long each demo beside the churn traces its lab.
const DEMO_DURATION: &str = "20s";

/// `podstuck demo`, run again and again until stopped, on a thread of its own.
struct DemosBeside {
    stop: Arc<AtomicBool>,
    runs: std::thread::JoinHandle<(u32, u32)>,
}

impl DemosBeside {
    fn start(podstuck: &Path) -> DemosBeside {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, podstuck) = (stop.clone(), podstuck.to_path_buf());
        let runs = std::thread::spawn(move || {
            let (mut runs, mut failed) = (0, 0);
            while !flag.load(Ordering::Relaxed) {
                let status = Command::new(&podstuck)
                    .args(["demo", "--duration", DEMO_DURATION])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
                runs += 1;
                if !status.is_ok_and(|s| s.success()) {
                    failed += 1;
                    // A demo that cannot start would spin: give the churn the CPU.
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
            (runs, failed)
        });
        DemosBeside { stop, runs }
    }

    /// Stops after the demo running now; (runs, runs that failed).
    fn finish(self) -> (u32, u32) {
        self.stop.store(true, Ordering::Relaxed);
        self.runs.join().unwrap_or((0, 0))
    }
}

fn say(message: &str) {
    eprintln!("xtask soak: {message}");
}

/// Runs the soak with these binaries and writes the section to `args.out`.
/// `demo`, given with `--demos-beside`, is the podstuck whose demo runs
/// beside the churn.
pub fn soak(podstuck: &Path, actor: &Path, fuse_server: &Path, demo: Option<&Path>, args: &SoakArgs) -> Result<()> {
    let scratch = podstuck_tests::ScratchDir::new("soak");
    let mut options = SoakOptions::new(
        podstuck.to_path_buf(),
        actor.to_path_buf(),
        scratch.path().to_path_buf(),
        Duration::from_secs(args.minutes * 60),
    );
    options.sample_every = Duration::from_secs(args.sample_seconds.max(1));
    options.faults = args.faults.then(|| FaultPlan {
        every: Duration::from_secs(args.fault_every_seconds.max(1)),
        fuse_server: fuse_server.to_path_buf(),
    });
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    say(&format!(
        "{} minutes of pod churn under {}, a sample every {} s",
        args.minutes,
        podstuck.display(),
        args.sample_seconds
    ));
    let demos = demo.map(DemosBeside::start);
    let report = soak::run(&options, |s| println!("{}", soak::sample_line(s)), |_| Ok(()));
    let demos = demos.map(DemosBeside::finish);
    let report = report?;
    if let Some((runs, failed)) = demos {
        say(&format!("podstuck demo ran {runs} times beside the churn, {failed} of them failed"));
    }
    say(&format!(
        "{} pods churned in {:.1} s: {:.1} a second",
        report.pods,
        report.churned_for.as_secs_f64(),
        report.pods_per_s()
    ));
    let command = format!(
        "cargo xtask soak --minutes {}{}{}{}{}",
        args.minutes,
        if args.sample_seconds == 15 { String::new() } else { format!(" --sample-seconds {}", args.sample_seconds) },
        match (args.faults, args.fault_every_seconds) {
            (false, _) => String::new(),
            (true, 45) => " --faults".to_string(),
            (true, every) => format!(" --faults --fault-every-seconds {every}"),
        },
        if args.demos_beside { " --demos-beside" } else { "" },
        // `--out` is shown where it is not the default (the workspace's BENCHMARKS.md).
        if args.out == crate::host::workspace_root().join("BENCHMARKS.md") {
            String::new()
        } else {
            format!(" --out {}", args.out.display())
        }
    );
    let heading = match (args.faults, demos.is_some()) {
        (true, _) => FAULTS_HEADING,
        (false, true) => DEMOS_HEADING,
        (false, false) => HEADING,
    };
    let mut section = section(heading, &report, &command, &load, args.faults.then_some(args.fault_every_seconds))?;
    if let Some((runs, failed)) = demos {
        section = with_demos_said(&section, runs, failed);
    }
    let before = std::fs::read_to_string(&args.out).unwrap_or_default();
    std::fs::write(&args.out, crate::report::with_section(&before, heading, &section, &[]))?;
    say(&format!("wrote the Soak section of {}", args.out.display()));
    let missed: Vec<String> = report
        .verdicts()
        .into_iter()
        .filter(|v| !v.met && !v.aim)
        .map(|v| format!("{} ({})", v.target, v.measured))
        .collect();
    if !missed.is_empty() {
        bail!("targets missed: {}", missed.join("; "));
    }
    Ok(())
}

/// The Soak section, from its heading to its last line.
fn section(
    heading: &str,
    report: &SoakReport,
    command: &str,
    load: &str,
    options_every: Option<u64>,
) -> Result<String> {
    let mut out = String::new();
    writeln!(out, "{heading}\n")?;
    let date = Command::new("date")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    writeln!(out, "Written by `{command}` (as root), {date}.\n")?;
    writeln!(
        out,
        "Machine: {}; load average at the start {} (the machine is shared with other builds).\n",
        machine(),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(", ")
    )?;
    writeln!(
        out,
        "podstuck's release build as the DaemonSet runs it (deploy/base/podstuck-daemonset.yaml), its output a pipe: `{}` (a port of loopback, the run's own kubelet root). For {} a pod was made about every 0.1 s, each with an emptyDir of {} files and a memory-backed emptyDir (a tmpfs), and cgroups as kubelet's cgroupfs driver makes them on this node (`{}`); each was torn down {} pods later as kubelet tears one down, by processes named `kubelet` (the tests' `actor`): rmdir of the tmpfs emptyDir, still mounted (EBUSY), and of the other, still full (ENOTEMPTY); umount of the tmpfs; the real `/bin/rm -rf` of the files, run inside the pod's cgroups as a container cleaning up would be; rmdir of the cgroups; Go's RemoveAll of the pod's directory. Sampled every {} s (and at the churn's end): VmRSS, the entries of /proc/PID/fd, utime + stime, and one scrape of /metrics (series: its sample lines, neither comments nor empty). One pod was stuck for real from before the churn to its end, and another after it (a CSI volume left mounted, kubelet failing to rmdir it on its volume backoff, EBUSY); both had to be named on /findings and in `podstuck_findings` at the end.\n",
        generic_command(&report.command),
        soak::minutes(report.churned_for),
        report.files_per_pod,
        report.cgroups,
        PODS_ALIVE,
        report.sample_every.as_secs(),
    )?;
    writeln!(
        out,
        "Churn reached: {} pods in {:.1} s, **{:.1} pods a second**; podstuck's CPU {:.1} ms per pod churned. The pod stuck after the churn ({}) was on /findings {} and in `podstuck_findings` {}; the pod stuck through it {}; GET /healthz at the end: {}; on SIGTERM podstuck {}.\n",
        report.pods,
        report.churned_for.as_secs_f64(),
        report.pods_per_s(),
        report.cpu_ms_per_pod(),
        report.stuck_pod,
        after(report.stuck_in_findings),
        after(report.stuck_in_metrics),
        match report.stuck_through_churn_named {
            Some(true) => "was still named in both",
            Some(false) => "was NOT named any more",
            None => "was not made",
        },
        report.healthz,
        if report.exited_cleanly { "exited cleanly".to_string() } else { format!("ended {}", report.exit) },
    )?;
    out.push_str(&report.markdown_table());
    writeln!(out, "\nCPU: podstuck's user + system time since it started; over the interval, its share of one CPU.\n")?;
    if let Some(every) = report.faults.first().and(options_every) {
        out.push_str(&faults_table(report, every));
    }
    writeln!(out, "| target | met | measured |")?;
    writeln!(out, "|---|---|---|")?;
    for v in report.verdicts() {
        let met = match (v.met, v.aim) {
            (true, _) => "yes",
            (false, false) => "**no**",
            (false, true) => "no (an aim)",
        };
        writeln!(out, "| {} | {met} | {} |", v.target, v.measured)?;
    }
    let printed = report.finding_lines();
    let ours = printed.iter().filter(|l| l.contains(&report.stuck_pod)).count();
    writeln!(
        out,
        "\nFinding lines podstuck printed (its output a pipe: one a finding told or resolved): {}, {ours} of them the stuck pod's; by cause: {}. podstuck traces the whole machine, so the calls of whatever else runs on it are in its figures too, and their findings below.",
        printed.len(),
        by_cause(&printed)
    )?;
    if !printed.is_empty() {
        writeln!(out, "\n```\n{}\n```", printed.iter().take(6).copied().collect::<Vec<_>>().join("\n"))?;
    }
    if let Some(closing) = report.stdout.iter().rev().find(|l| l.starts_with("podstuck: ")) {
        writeln!(out, "\nIts closing line: `{closing}`")?;
    }
    let said: Vec<&str> = report.stderr.lines().filter(|l| !l.trim().is_empty()).take(12).collect();
    if !said.is_empty() {
        writeln!(out, "\npodstuck's stderr:\n\n```\n{}\n```", said.join("\n"))?;
    }
    Ok(out)
}

/// The faults, one row each: when, what, how soon the findings were right
/// again, the loss counted, and what happened.
fn faults_table(report: &SoakReport, every: u64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Faults, in turn, each {every} s after the last ended (tests/src/soak/faults.rs). Right again is the time from the fault's end until /findings said what it should, held to {} s: the FUSE volume's dir-not-empty confirmed again; the pod that got stuck during the fault named; the held volume's finding ended with nothing naming the process given the holder's pid, and the fix printed before, pasted after the pid was reused, leaving that process alive.\n",
        faults::RIGHT_AGAIN_WITHIN.as_secs()
    );
    out.push_str(
        "| at | fault | right again after | podstuck_events_lost_total | what happened |\n|---|---|---|---|---|\n",
    );
    for o in &report.faults {
        let lost = |n: Option<u64>| n.map_or("?".to_string(), |n| n.to_string());
        let right = o.right_again.map_or("**not in time**".to_string(), |d| format!("{:.1} s", d.as_secs_f64()));
        let wrong = o.wrong.as_deref().map(|w| format!(" **WRONG: {w}**")).unwrap_or_default();
        let _ = writeln!(
            out,
            "| {} | {} | {right} | {} → {} | {}{wrong} |",
            soak::minutes(o.at),
            o.fault.words(),
            lost(o.lost_before),
            lost(o.lost_after),
            o.detail.replace('|', "/")
        );
    }
    out.push('\n');
    out
}

/// podstuck's command line with the run's port and kubelet root as words.
fn generic_command(command: &str) -> String {
    let mut words: Vec<String> = command.split(' ').map(str::to_string).collect();
    for i in 1..words.len() {
        match words[i - 1].as_str() {
            "--listen" => words[i] = "127.0.0.1:PORT".into(),
            "--kubelet-root" => words[i] = "ROOT".into(),
            _ => {}
        }
    }
    words.join(" ")
}

fn after(at: Option<Duration>) -> String {
    match at {
        Some(d) => format!("after {:.1} s", d.as_secs_f64()),
        None => "**not within the time allowed**".into(),
    }
}

/// CPUs, model, memory, kernel, and the cgroup hierarchies mounted.
fn machine() -> String {
    let mounts = podstuck_tests::mountinfo::here();
    let v1 = mounts.iter().filter(|m| m.fstype == "cgroup").count();
    let v2 = mounts.iter().any(|m| m.fstype == "cgroup2");
    let cgroups = match (v1 > 0, v2) {
        (true, true) => format!("hybrid cgroups ({v1} v1 hierarchies, cgroup2 beside them)"),
        (true, false) => format!("cgroup v1 ({v1} hierarchies)"),
        (false, true) => "cgroup v2".to_string(),
        (false, false) => "no cgroups mounted".to_string(),
    };
    format!("{}, {cgroups}", crate::report::machine_basics())
}

/// "volume-still-mounted 12, dir-not-empty 3": finding lines counted by
/// their cause, the word after "FINDING [severity]", most first.
fn by_cause(lines: &[&str]) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    // A finding is a block: its first line says FINDING, the rest indent.
    for line in lines {
        let Some((_, told)) = line.split_once(" FINDING [") else { continue };
        let cause = told.split_once("] ").and_then(|(_, rest)| rest.split_whitespace().next()).unwrap_or("?");
        *counts.entry(cause).or_default() += 1;
    }
    let mut counts: Vec<(&str, usize)> = counts.into_iter().collect();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    if counts.is_empty() {
        return "none".to_string();
    }
    counts.iter().map(|(cause, n)| format!("{cause} {n}")).collect::<Vec<_>>().join(", ")
}

/// The section with the demos beside the churn said after its machine's
/// paragraph: how many ran, and that their findings are in the figures.
fn with_demos_said(section: &str, runs: u32, failed: u32) -> String {
    let said = format!(
        "Beside the churn, `podstuck demo --duration {DEMO_DURATION}` (this tree's release build) ran {runs} times one after another ({failed} failed): a lab of pods stuck in every way, whose findings the soaked podstuck told too (the finding lines by cause, below), as on a node with incidents beside its churn.\n\n"
    );
    match section.find("podstuck's release build as the DaemonSet runs it") {
        Some(at) => format!("{}{said}{}", &section[..at], &section[at..]),
        None => format!("{section}\n{said}"),
    }
}

/// `file` with its Soak section replaced by `section`, or `section`
/// added at the end where it has none; everything else as it was.
#[cfg(test)]
fn with_section(file: &str, section: &str) -> String {
    crate::report::with_section(file, HEADING, section, &[])
}

/// The Soak sections of `file` as they stand, the plain one and the one
/// with faults ("" if none), for a writer of the rest of the file to keep
/// them.
pub fn kept_section(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    [HEADING, FAULTS_HEADING, DEMOS_HEADING]
        .iter()
        .filter_map(|heading| crate::report::section_span(&text, heading))
        .map(|(start, end)| format!("\n{}\n", text[start..end].trim_end()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soak_section_is_replaced_or_added_and_the_rest_kept() {
        let section = "## Soak\n\nnew table\n";
        let bench = "# podstuck benchmarks\n\n## The storm\n\nrows\n";
        assert_eq!(
            with_section(bench, section),
            "# podstuck benchmarks\n\n## The storm\n\nrows\n\n## Soak\n\nnew table\n"
        );
        let old = "# podstuck benchmarks\n\n## Soak\n\nold table\n\n## The storm\n\nrows\n";
        assert_eq!(
            with_section(old, section),
            "# podstuck benchmarks\n\n## Soak\n\nnew table\n\n## The storm\n\nrows\n"
        );
        let last = "# b\n\n## The storm\n\nrows\n\n## Soak\n\nold\n";
        assert_eq!(with_section(last, section), "# b\n\n## The storm\n\nrows\n\n## Soak\n\nnew table\n");
        // A heading that only starts with "Soak" is another section.
        let other = "# b\n\n## Soaked\n\nx\n";
        assert_eq!(with_section(other, section), "# b\n\n## Soaked\n\nx\n\n## Soak\n\nnew table\n");
        assert_eq!(with_section("", section), "## Soak\n\nnew table\n");
    }

    #[test]
    fn the_demos_beside_are_said_before_the_churn_and_their_section_kept() {
        let section =
            "## Soak with demos beside\n\nWritten by x.\n\npodstuck's release build as the DaemonSet runs it (...).\n";
        let said = with_demos_said(section, 17, 1);
        assert!(said.starts_with(
            "## Soak with demos beside\n\nWritten by x.\n\nBeside the churn, `podstuck demo --duration 20s`"
        ));
        assert!(said.contains("ran 17 times one after another (1 failed)"));
        assert!(said.ends_with("\n\npodstuck's release build as the DaemonSet runs it (...).\n"));
        let dir = podstuck_tests::ScratchDir::new("soak-kept");
        let file = dir.path().join("BENCHMARKS.md");
        std::fs::write(&file, format!("# b\n\n## The storm\n\nrows\n\n## Soak\n\nquiet\n\n{said}")).unwrap();
        let kept = kept_section(&file);
        assert!(kept.contains("## Soak\n\nquiet") && kept.contains("ran 17 times"), "{kept}");
    }

    #[test]
    fn finding_blocks_are_counted_by_cause_most_first() {
        let lines = [
            "2026-11-27T15:50:12Z FINDING [critical] volume-still-mounted  pod 05fa  confirmed",
            "  status:   active, 1 call",
            "2026-11-27T15:50:13Z FINDING [warning] dir-not-empty  pod 06fa  confirmed",
            "2026-11-27T15:50:14Z FINDING [critical] volume-still-mounted  pod 05fa  resolved",
        ];
        assert_eq!(by_cause(&lines), "volume-still-mounted 2, dir-not-empty 1");
        assert_eq!(by_cause(&lines[1..2]), "none");
    }

    #[test]
    fn the_command_shows_no_port_or_scratch_path() {
        let command = "podstuck watch --listen 127.0.0.1:40123 --concurrent --kubelet-root /var/tmp/x/kubelet --node-name soak-node";
        assert_eq!(
            generic_command(command),
            "podstuck watch --listen 127.0.0.1:PORT --concurrent --kubelet-root ROOT --node-name soak-node"
        );
    }
}
