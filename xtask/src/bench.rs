//! `cargo xtask bench`: what tracing costs the storm podstuck exists for.
//!
//! A leaked volume of empty directories is removed, untraced, under
//! `podstuck watch` (whole node, histograms on), under a bpftrace script
//! keeping an unlinkat latency histogram per comm, and (on the smallest
//! case) under `strace -f -c`, in paired rounds whose order rotates, on
//! tmpfs and on a fresh ext4, by `rm -rf`, by a Go-style RemoveAll and by
//! the real `docker volume rm` (Debian's docker.io, the container tests'
//! private dockerd with its data root on the filesystem measured). It
//! reports medians and median paired ratios, checks that podstuck counted
//! every call exactly, its collector CPU, peak memory, kernel cost per
//! call, time to attach and to detach; then compares attach mechanisms
//! alone (`podstuck attach-cost`), a 10M-call storm's memory and a
//! fork/exec storm (`--only fork-exec` runs that section alone and replaces
//! only it). Results go to BENCHMARKS.md with the command and the machine
//! (its Soak section, `cargo xtask soak`'s, is kept). Wall-clock only
//! in ratios measured side by side, never in a test.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use podstuck_tests::runtimes::{Dockerd, DockerdSetup, DOCKER};

use crate::report::machine_basics;

mod answer;
mod attach;

/// What to measure.
#[derive(clap::Args, Clone, Debug)]
pub struct BenchArgs {
    /// Paired rounds per case (each: untraced, podstuck, bpftrace, order rotating).
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Tree sizes in empty directories, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "200000,1000000")]
    pub sizes: Vec<usize>,
    /// Paired rounds for sizes of a million directories and more (each
    /// round builds the tree four times), so a full run fits in an hour.
    #[arg(long, default_value_t = 2)]
    pub large_runs: usize,
    /// Filesystems, comma-separated (tmpfs, ext4).
    #[arg(long, value_delimiter = ',', default_value = "tmpfs,ext4")]
    pub filesystems: Vec<String>,
    /// Calls in the memory storm (mkdir + unlinkat, one traced call each).
    #[arg(long, default_value_t = 10_000_000)]
    pub storm_calls: u64,
    /// Rounds of strace (36 times slower: only on the first size, tmpfs;
    /// one, so a full run fits in an hour).
    #[arg(long, default_value_t = 1)]
    pub strace_runs: usize,
    /// Removers, comma-separated (rm-rf, RemoveAll, docker: `docker volume rm` of a private dockerd).
    #[arg(long, value_delimiter = ',', default_value = "rm-rf,RemoveAll,docker",
          value_parser = clap::builder::PossibleValuesParser::new(REMOVERS.map(|(arg, _)| arg)))]
    pub removers: Vec<String>,
    /// Debian kernels to boot in QEMU for the fentry rows (5.10, 6.1,
    /// 6.12; arm64's as arm64-5.10...), comma-separated, or none: this
    /// machine's kernel refuses fentry.
    #[arg(long, value_delimiter = ',', default_value = "5.10,6.1,6.12,arm64-5.10,arm64-6.1,arm64-6.12")]
    pub vm_kernels: Vec<String>,
    /// Directories each removal in the VM takes (GNU rm -rf, tmpfs).
    #[arg(long, default_value_t = 20_000)]
    pub vm_dirs: usize,
    /// Paired rounds per VM kernel (five removals each).
    #[arg(long, default_value_t = 5)]
    pub vm_rounds: usize,
    /// Spawns in the fork/exec storm (each a fork, an exec of /bin/true, its exit); 0: none.
    #[arg(long, default_value_t = 20_000)]
    pub fork_calls: usize,
    /// Run this section alone (with `--runs` rounds), replacing only it in
    /// `--out` (added where a full run puts it if absent).
    #[arg(long, value_enum)]
    pub only: Option<Only>,
    /// Where to write the results.
    #[arg(long, default_value = "BENCHMARKS.md")]
    pub out: PathBuf,
}

/// The sections `--only` runs alone.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Only {
    /// "A fork/exec storm": untraced, the lifecycle's do-nothing trio, podstuck.
    ForkExec,
    /// "Time to answer": each demo scenario's first call to its finding, and to it confirmed.
    TimeToAnswer,
    /// "Start, idle, stop" and "Attach mechanisms alone": start, memory and
    /// detach; each mechanism's and variant's cost per call beside podstuck's.
    Attach,
}

/// The removers: the name `--removers` takes, the name in the table.
const REMOVERS: [(&str, &str); 3] = [("rm-rf", "rm -rf"), ("RemoveAll", "RemoveAll"), ("docker", DOCKER_RM)];

const DOCKER_RM: &str = "docker volume rm";

const BPFTRACE_SCRIPT: &str = "tracepoint:syscalls:sys_enter_unlinkat { @start[tid] = nsecs; } \
tracepoint:syscalls:sys_exit_unlinkat /@start[tid]/ { @us[comm] = hist((nsecs - @start[tid]) / 1000); delete(@start[tid]); }";

/// A fake pod the trees live in, so podstuck's per-pod series can be
/// checked against the exact number of calls made.
const POD: &str = "0b5e7c1a-0000-4000-8000-00000000be4c";

fn say(message: &str) {
    eprintln!("xtask bench: {message}");
}

fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// The first line of a section run alone (`--only`): by what, when, and
/// on which machine, as the file's other sections may come from another.
fn written_alone(command: &str) -> String {
    let date = sh(Command::new("date").arg("-u")).unwrap_or_default();
    format!(
        "Written by `{command}` (as root), {}, alone; the rest of this file is from the run named at its top. Machine: {}.\n",
        date.trim(),
        machine_basics()
    )
}

fn sh(command: &mut Command) -> Result<String> {
    let shown = format!("{command:?}");
    let out = command.output().with_context(|| format!("cannot run {shown}"))?;
    if !out.status.success() {
        bail!("{shown} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The scratch filesystems, unmounted and removed when dropped.
struct Scratch {
    root: PathBuf,
    mounts: Vec<PathBuf>,
}

impl Scratch {
    fn new() -> Result<Scratch> {
        let root = PathBuf::from(format!("/var/tmp/podstuck-bench-{}", std::process::id()));
        std::fs::create_dir_all(&root)?;
        Ok(Scratch { root, mounts: Vec::new() })
    }

    /// A mounted filesystem of `kind`, big enough for `dirs` directories.
    fn filesystem(&mut self, kind: &str, dirs: usize) -> Result<PathBuf> {
        let at = self.root.join(kind);
        std::fs::create_dir_all(&at)?;
        match kind {
            "tmpfs" => {
                sh(Command::new("mount")
                    .args(["-t", "tmpfs", "-o", "size=8g,nr_inodes=0", "podstuck-bench"])
                    .arg(&at))?;
            }
            "ext4" => {
                let image = self.root.join("ext4.img");
                let inodes = (dirs * 2 + 100_000).to_string();
                sh(Command::new("truncate").args(["-s", "8G"]).arg(&image))?;
                sh(Command::new("mkfs.ext4").args(["-q", "-F", "-N", &inodes]).arg(&image))?;
                sh(Command::new("mount").args(["-o", "loop"]).arg(&image).arg(&at))?;
            }
            other => bail!("unknown filesystem {other} (tmpfs or ext4)"),
        }
        self.mounts.push(at.clone());
        Ok(at)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for at in self.mounts.drain(..).rev() {
            let _ = Command::new("umount").arg(&at).status();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The volume a tree is built in: a pod's emptyDir under a fake kubelet root.
fn volume(fs: &Path) -> PathBuf {
    fs.join("kubelet/pods").join(POD).join("volumes/kubernetes.io~empty-dir/leaked")
}

/// `dirs` empty directories in rows of 1000 (`dirs` + the rows + the top
/// are removed: that many successful unlinkat calls). Returns that count.
fn build_tree(top: &Path, dirs: usize) -> Result<u64> {
    if top.exists() {
        std::fs::remove_dir_all(top)?;
    }
    std::fs::create_dir_all(top)?;
    let rows = dirs.div_ceil(1000);
    let mut made = 0;
    for row in 0..rows {
        let row_dir = top.join(format!("r{row}"));
        std::fs::create_dir(&row_dir)?;
        for i in 0..1000.min(dirs - made) {
            std::fs::create_dir(row_dir.join(i.to_string()))?;
        }
        made += 1000.min(dirs - made);
    }
    let _ = Command::new("sync").status();
    Ok((dirs + rows + 1) as u64)
}

/// CPU seconds a process has used so far (user + system).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit_once(')').map(|(_, r)| r.split_whitespace().collect()).unwrap_or_default();
    let ticks: f64 = fields.get(11).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// Peak resident memory (VmHWM) of a live process, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:").and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok()))
        .unwrap_or(0)
}

fn interrupt(child: &Child) {
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
}

/// A tracer running in the background, attached.
struct Tracer {
    child: Child,
    attached_after: Duration,
    cpu_at_start: f64,
    histograms: Option<PathBuf>,
    /// bpftrace's: BPF run-time statistics switched on while it runs.
    stats: Option<BpfStats>,
}

/// The kernel's BPF run-time statistics (`kernel.bpf_stats_enabled`), on
/// while held, as `podstuck --kernel-cost` holds them; set back when dropped.
struct BpfStats {
    before: String,
}

const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStats {
    fn on() -> Result<BpfStats> {
        let before = std::fs::read_to_string(BPF_STATS).context("reading kernel.bpf_stats_enabled")?;
        std::fs::write(BPF_STATS, "1").context("turning on kernel.bpf_stats_enabled")?;
        Ok(BpfStats { before })
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = std::fs::write(BPF_STATS, self.before.trim());
    }
}

/// Run time per call of the BPF programs process `pid` holds: each
/// program's run_time_ns / run_cnt from its fdinfo, summed (the entry and
/// the exit program of the one syscall traced).
fn kernel_ns_per_call_of(pid: u32) -> f64 {
    let mut total = 0.0;
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd")).into_iter().flatten().flatten() {
        if std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == "anon_inode:bpf-prog") {
            let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy()))
                .unwrap_or_default();
            let field = |name: &str| -> f64 {
                info.lines()
                    .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim_start_matches(':').trim().parse().ok()))
                    .unwrap_or(0.0)
            };
            let runs = field("run_cnt");
            if runs > 0.0 {
                total += field("run_time_ns") / runs;
            }
        }
    }
    total
}

/// What one podstuck run said.
#[derive(Default, Clone)]
struct PodstuckRun {
    exact: bool,
    counted: u64,
    expected: u64,
    events_lost: u64,
    cpu_s: f64,
    peak_rss_kib: u64,
    kernel_ns_per_call: f64,
    attach_s: f64,
    detach_s: f64,
}

fn start_podstuck(podstuck: &Path, kubelet_root: &Path, histograms: &Path) -> Result<Tracer> {
    let started = Instant::now();
    let mut child = Command::new(podstuck)
        .args(["watch", "--json", "--findings", "--concurrent", "--kernel-cost", "--force", "--histograms"])
        .arg(histograms)
        .arg("--kubelet-root")
        .arg(kubelet_root)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting podstuck watch")?;
    // The start line comes once every program is attached.
    let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    stdout.read_line(&mut line)?;
    if !line.contains("\"type\":\"start\"") {
        let mut err = String::new();
        child.stderr.take().expect("piped").read_to_string(&mut err)?;
        bail!("podstuck did not start: {line}{err}");
    }
    let attached_after = started.elapsed();
    // Drain stdout so podstuck never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let cpu_at_start = cpu_seconds(child.id());
    Ok(Tracer { child, attached_after, cpu_at_start, histograms: Some(histograms.to_path_buf()), stats: None })
}

fn start_bpftrace() -> Result<Tracer> {
    let stats = Some(BpfStats::on()?);
    let started = Instant::now();
    let mut child = Command::new("bpftrace")
        .args(["-e", BPFTRACE_SCRIPT])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting bpftrace")?;
    let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    stdout.read_line(&mut line)?;
    if !line.starts_with("Attaching") {
        bail!("bpftrace did not attach: {line}");
    }
    let attached_after = started.elapsed();
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    // bpftrace prints "Attaching" just before attaching: give it a moment.
    std::thread::sleep(Duration::from_millis(500));
    Ok(Tracer { child, attached_after, cpu_at_start: 0.0, histograms: None, stats })
}

/// The series of summary.json that count the fake pod's removals.
fn pod_series(tag: &str) -> bool {
    tag.starts_with("unlinkat/ok/") && tag.ends_with(POD)
}

/// The series that count dockerd's removals: its volumes are in no pod, so
/// `unlinkat/ok/runtime/node` (the tags are syscall/outcome/role/pod).
fn runtime_series(tag: &str) -> bool {
    tag.starts_with("unlinkat/ok/runtime/")
}

/// Stops podstuck and reads what it counted in the series `counts` picks.
fn stop_podstuck(mut tracer: Tracer, expected: u64, calls: u64, counts: fn(&str) -> bool) -> Result<PodstuckRun> {
    // One review (500 ms) reads the kernel's series after the storm.
    std::thread::sleep(Duration::from_millis(1200));
    let pid = tracer.child.id();
    let cpu_s = cpu_seconds(pid) - tracer.cpu_at_start;
    let peak_rss_kib = peak_rss_kib(pid);
    let stopping = Instant::now();
    interrupt(&tracer.child);
    let mut err = String::new();
    tracer.child.stderr.take().expect("piped").read_to_string(&mut err)?;
    tracer.child.wait()?;
    let detach_s = stopping.elapsed().as_secs_f64();
    let summary: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
        tracer.histograms.as_ref().expect("podstuck").join("summary.json"),
    )?)?;
    let counted: u64 = summary["series"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["tag"].as_str().is_some_and(counts))
        .map(|s| s["count"].as_u64().unwrap_or(0))
        .sum();
    let events_lost = summary["run"]["events_lost"].as_u64().unwrap_or(0);
    // "kernel cost: NAME N runs, X ns per run"
    let mut kernel_ns = 0.0;
    for line in err.lines().filter(|l| l.contains("kernel cost:") && l.contains("unlinkat")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let Some(at) = words.iter().position(|w| *w == "per") {
            kernel_ns += words[at - 2].parse::<f64>().unwrap_or(0.0);
        }
    }
    Ok(PodstuckRun {
        exact: counted == expected,
        counted,
        expected,
        events_lost,
        cpu_s: cpu_s / (calls as f64 / 1e6),
        peak_rss_kib,
        kernel_ns_per_call: kernel_ns,
        attach_s: tracer.attached_after.as_secs_f64(),
        detach_s,
    })
}

/// Stops a tracer; bpftrace's kernel ns per call (0 for others).
fn stop(mut tracer: Tracer) -> Result<f64> {
    let kernel_ns = if tracer.stats.is_some() { kernel_ns_per_call_of(tracer.child.id()) } else { 0.0 };
    interrupt(&tracer.child);
    tracer.child.wait()?;
    Ok(kernel_ns)
}

/// Starts `podstuck attach-cost MECHANISM ARGS`: once attached, the child
/// and its stderr past the "attached" line; else what it said.
fn attach_cost(
    podstuck: &Path,
    mechanism: &str,
    args: &[&str],
    stdout: Stdio,
) -> Result<Result<(Child, BufReader<ChildStderr>), String>> {
    let mut child = Command::new(podstuck)
        .args(["attach-cost", mechanism])
        .args(args)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting podstuck attach-cost {mechanism}"))?;
    let mut stderr = BufReader::new(child.stderr.take().expect("piped"));
    let mut line = String::new();
    stderr.read_line(&mut line)?;
    if !line.contains("attached") {
        let mut rest = String::new();
        stderr.read_to_string(&mut rest)?;
        child.wait()?;
        return Ok(Err(format!("{line}{rest}").trim().to_string()));
    }
    Ok(Ok((child, stderr)))
}

/// The do-nothing pair on the unlinkat tracepoints (`podstuck
/// attach-cost tracepoint`): the floor any tracer there pays.
fn start_floor(podstuck: &Path) -> Result<Child> {
    match attach_cost(podstuck, "tracepoint", &[], Stdio::null())? {
        Ok((child, mut stderr)) => {
            std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
            Ok(child)
        }
        Err(said) => bail!("podstuck attach-cost tracepoint did not attach: {said}"),
    }
}

/// Removes `top` with `tool`; the wall time.
fn remove(tool: &str, top: &Path, actor: &Path, strace: bool) -> Result<f64> {
    let mut command = match (tool, strace) {
        ("rm -rf", false) => {
            let mut c = Command::new("rm");
            c.arg("-rf").arg(top);
            c
        }
        ("RemoveAll", false) => {
            let mut c = Command::new(actor);
            c.arg("remove-all").arg(top);
            c
        }
        (_, true) => {
            let mut c = Command::new("strace");
            c.args(["-f", "-c", "-o", "/dev/null"]);
            if tool == "rm -rf" {
                c.arg("rm").arg("-rf").arg(top);
            } else {
                c.arg(actor).arg("remove-all").arg(top);
            }
            c
        }
        _ => bail!("unknown tool {tool}"),
    };
    command.stdout(Stdio::null()).stderr(Stdio::null());
    let started = Instant::now();
    let status = command.status()?;
    let took = started.elapsed().as_secs_f64();
    if top.exists() {
        bail!("{tool} left {} behind ({status})", top.display());
    }
    Ok(took)
}

/// The `docker volume rm` remover: a private dockerd (Debian's docker.io,
/// the container tests' own [`Dockerd`], with their cleanup) whose data
/// root is on the bench filesystem measured, so `docker volume rm` removes
/// trees there.
struct DockerVolumes {
    dockerd: Dockerd,
    /// Volumes made so far, for the next one's name.
    made: Cell<u64>,
}

/// A docker volume holding a tree.
struct Volume {
    name: String,
    /// `<data-root>/volumes/<name>`, which `docker volume rm` removes with its `_data`.
    dir: PathBuf,
    /// Where the tree is built, like the other removers' `leaked`.
    tree: PathBuf,
}

impl DockerVolumes {
    /// Starts its dockerd with overlay2, or vfs where this kernel refuses
    /// overlay2 on `fs`; in a containerd namespace of its own, apart from
    /// a dockerd already using this node's containerd.
    fn start(fs: &Path, kind: &str, scratch: &Path) -> Result<DockerVolumes> {
        let mut refused = Vec::new();
        for storage_driver in ["overlay2", "vfs"] {
            let setup = DockerdSetup {
                scratch,
                data_root: fs.join("docker"),
                storage_driver,
                containerd_namespace: Some("podstuck-bench"),
            };
            match Dockerd::launch(&setup) {
                Ok(dockerd) => {
                    say(&format!(
                        "{kind}: private dockerd up (storage driver {storage_driver}, data root {})",
                        dockerd.data_root().display()
                    ));
                    return Ok(DockerVolumes { dockerd, made: Cell::new(0) });
                }
                Err(e) => {
                    say(&format!("{kind}: dockerd with --storage-driver {storage_driver} did not start: {e}"));
                    refused.push(format!("{storage_driver}: {}", e.why));
                    // The next driver starts on an empty data root, not on what this one left.
                    let _ = std::fs::remove_dir_all(&setup.data_root);
                }
            }
        }
        bail!("no private dockerd on {kind}: {}", refused.join("; "))
    }

    /// A new volume, with its tree's place in its `_data`.
    fn create_volume(&self) -> Result<Volume> {
        let n = self.made.get();
        self.made.set(n + 1);
        let name = format!("podstuck-bench-{n}");
        sh(&mut self.dockerd.docker_command(&["volume", "create", &name]))?;
        let mountpoint = PathBuf::from(
            sh(&mut self.dockerd.docker_command(&["volume", "inspect", "-f", "{{.Mountpoint}}", &name]))?.trim(),
        );
        let dir = mountpoint.parent().context("a volume's mountpoint has a parent")?.to_path_buf();
        Ok(Volume { name, dir, tree: mountpoint.join("leaked") })
    }

    /// `docker volume rm`, the client's wall time; under `strace -f -c`
    /// attached to dockerd (which does the removal) if `strace`.
    fn remove_volume(&self, volume: &Volume, strace: bool) -> Result<f64> {
        let tracer = if strace {
            let mut child = Command::new("strace")
                .args(["-f", "-c", "-o", "/dev/null", "-p", &self.dockerd.pid().to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .context("starting strace")?;
            // "strace: Process N attached with M threads": every thread is traced.
            let mut stderr = BufReader::new(child.stderr.take().expect("piped"));
            let mut line = String::new();
            stderr.read_line(&mut line)?;
            if !line.contains("attached") {
                interrupt(&child);
                child.wait()?;
                bail!("strace did not attach to dockerd: {line}");
            }
            std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
            Some(child)
        } else {
            None
        };
        let started = Instant::now();
        let out = self.dockerd.docker_command(&["volume", "rm", &volume.name]).output();
        let took = started.elapsed().as_secs_f64();
        if let Some(mut child) = tracer {
            interrupt(&child);
            child.wait()?;
        }
        let out = out.context("running docker volume rm")?;
        if !out.status.success() {
            bail!("docker volume rm {} failed: {}", volume.name, String::from_utf8_lossy(&out.stderr));
        }
        if volume.dir.exists() {
            bail!("docker volume rm left {} behind", volume.dir.display());
        }
        Ok(took)
    }
}

/// A freshly built tree for one removal by `tool`.
struct Prepared {
    /// Successful unlinkat calls podstuck must count.
    expected: u64,
    /// unlinkat calls the removal makes, failed ones included.
    calls: u64,
    volume: Option<Volume>,
}

fn prepare(tool: &str, top: &Path, dirs: usize, dockerd: Option<&DockerVolumes>) -> Result<Prepared> {
    if tool != DOCKER_RM {
        let expected = build_tree(top, dirs)?;
        // RemoveAll also fails once per directory (EISDIR): those are counted apart.
        let calls = if tool == "RemoveAll" { expected * 2 } else { expected };
        return Ok(Prepared { expected, calls, volume: None });
    }
    let volume = dockerd.context("the docker remover needs its dockerd")?.create_volume()?;
    let tree = build_tree(&volume.tree, dirs)?;
    // dockerd 20.10's os.RemoveAll (Go) removes `_data` (with the tree in
    // it), then the volume's directory. Every directory costs two calls,
    // unlinkat(fd, name, 0) failing with EISDIR, then AT_REMOVEDIR, and
    // each of the two RemoveAll calls first tries its path whole: `_data`
    // gets unlink (EISDIR) and rmdir (ENOTEMPTY) before its walk, which
    // unlinks it again (EISDIR) before removing it; the empty volume
    // directory is removed by that first try. Seen with strace -f -p on
    // dockerd: tree + 2 directories removed, (tree + 2) ok + (tree + 3)
    // EISDIR + 1 ENOTEMPTY calls.
    Ok(Prepared { expected: tree + 2, calls: 2 * tree + 6, volume: Some(volume) })
}

/// Removes what `prepare` built; the wall time.
fn remove_prepared(
    tool: &str,
    top: &Path,
    actor: &Path,
    dockerd: Option<&DockerVolumes>,
    prepared: &Prepared,
    strace: bool,
) -> Result<f64> {
    match (&prepared.volume, dockerd) {
        (Some(volume), Some(dockerd)) => dockerd.remove_volume(volume, strace),
        _ => remove(tool, top, actor, strace),
    }
}

/// One case's rounds.
#[derive(Default)]
struct Case {
    untraced: Vec<f64>,
    podstuck: Vec<f64>,
    bpftrace: Vec<f64>,
    /// The do-nothing tracepoint pair attached.
    floor: Vec<f64>,
    bpftrace_kernel_ns: Vec<f64>,
    strace: Vec<f64>,
    runs: Vec<PodstuckRun>,
}

fn pct(ratio: f64) -> String {
    format!("{:+.1} %", (ratio - 1.0) * 100.0)
}

fn machine() -> String {
    let bpftrace = sh(Command::new("bpftrace").arg("--version")).unwrap_or_default();
    let strace = sh(Command::new("strace").arg("-V")).unwrap_or_default();
    format!("{}, {}, {}", machine_basics(), bpftrace.trim(), strace.lines().next().unwrap_or_default().trim())
}

/// Start to first event, idle memory and detach, over `rounds` starts of
/// `podstuck watch` as the storm rows run it: each start is timed from
/// spawn to the JSON line of a directory of the fake pod removed every
/// 5 ms meanwhile; idle RSS is read 2 s later, nothing traced meanwhile.
fn start_and_stop(podstuck: &Path, fs: &Path, rounds: usize, report: &mut String) -> Result<StartAndStop> {
    let dir = volume(fs);
    std::fs::create_dir_all(&dir)?;
    let (mut first_event, mut idle_rss, mut idle_anon, mut detach) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut pair_detach = Vec::new();
    let mut maps = Vec::new();
    for round in 0..rounds {
        let marker = dir.join(format!("start-{round}"));
        let started = Instant::now();
        let mut child = Command::new(podstuck)
            .args(["watch", "--json", "--concurrent", "--force", "--histograms"])
            .arg(fs.join("start-histograms"))
            .arg("--kubelet-root")
            .arg(fs.join("kubelet"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting podstuck watch")?;
        let (seen_tx, seen) = std::sync::mpsc::channel();
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        let name = format!("start-{round}");
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if line.contains("\"type\":\"event\"") && line.contains(&name) {
                    let _ = seen_tx.send(());
                }
            }
        });
        let deadline = started + Duration::from_secs(20);
        let took = loop {
            let _ = std::fs::create_dir(&marker);
            let _ = std::fs::remove_dir(&marker);
            if seen.recv_timeout(Duration::from_millis(5)).is_ok() {
                break started.elapsed().as_secs_f64();
            }
            if Instant::now() > deadline {
                interrupt(&child);
                child.wait()?;
                bail!("podstuck showed no event of {} within 20 s", marker.display());
            }
        };
        first_event.push(took);
        std::thread::sleep(Duration::from_secs(2));
        let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
        let kib = |key: &str| -> f64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok()))
                .unwrap_or(0.0)
        };
        idle_rss.push(kib("VmRSS:") / 1024.0);
        idle_anon.push(kib("RssAnon:") / 1024.0);
        if round == 0 {
            maps = map_memory(child.id())?;
        }
        let stopping = Instant::now();
        interrupt(&child);
        child.wait()?;
        detach.push(stopping.elapsed().as_secs_f64());
        pair_detach.push(floor_detach(podstuck)?);
    }
    writeln!(report, "\n{START_HEADING}\n")?;
    writeln!(report, "{rounds} starts of `podstuck watch --json --histograms DIR --kubelet-root ROOT` (every call printed, whole node, nothing else traced): start is from spawn to the JSON line of a directory of the fake pod removed every 5 ms meanwhile; idle RSS is read 2 s later (VmRSS, and RssAnon: the process's own heap and stacks, without the ring buffer's kernel pages, mapped twice: 4 MiB, so 8 MiB of VmRSS); detach is from SIGINT to exit; after each, the do-nothing tracepoint pair (`podstuck attach-cost tracepoint`) is attached and its detach timed the same way: the kernel's own time for two syscall tracepoints' teardown.\n")?;
    writeln!(report, "| start to first event (target ≤ 0.2 s) | idle RSS (target ≤ 25 MB) | of it RssAnon | detach (target ≤ 0.2 s) | the do-nothing pair's detach | kernel memory of its maps |")?;
    writeln!(report, "|---|---|---|---|---|---|")?;
    let measured = StartAndStop {
        first_event: median(&mut first_event),
        idle_rss: median(&mut idle_rss),
        idle_anon: median(&mut idle_anon),
        detach: median(&mut detach),
        pair_detach: median(&mut pair_detach),
    };
    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    let all: u64 = maps.iter().map(|(_, bytes)| bytes).sum();
    writeln!(
        report,
        "| {:.3} s | {:.1} MiB | {:.1} MiB | {:.3} s | {:.3} s | {:.1} MiB |",
        measured.first_event,
        measured.idle_rss,
        measured.idle_anon,
        measured.detach,
        measured.pair_detach,
        mib(all)
    )?;
    let each: Vec<String> = maps.iter().map(|(name, bytes)| format!("{name} {:.2} MiB", mib(*bytes))).collect();
    writeln!(
        report,
        "\nThe kernel memory of its maps is their `memlock` (from `/proc/PID/fdinfo`, named by bpftool), on this machine's plan, the syscall tracepoints, in the first start: {}. Here (Linux 6.1 and later, and the fentry plan everywhere) the threads' entries (CALLS_IN_FLIGHT) and the series (SERIES) grow as they come: a few KB on a quiet node, at most 65536 threads and 4096 series of 1320 bytes; on the tracepoints before 6.1 they are preallocated (kernels 5.7 to 6.0 print a WARNING for a tracepoint program's hash map without prealloc), 8192 threads and 1024 series, 2.3 MiB from the start (docs/kernels.md).",
        each.join(", ")
    )?;
    Ok(measured)
}

/// The maps process `pid` holds, by name, with the kernel memory each
/// costs: `memlock` from the fd's fdinfo, the name from bpftool (fdinfo
/// has only the map's id). Largest first.
fn map_memory(pid: u32) -> Result<Vec<(String, u64)>> {
    let mut maps = Vec::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))?.flatten() {
        let info = std::fs::read_to_string(fd.path()).unwrap_or_default();
        let field =
            |key: &str| info.lines().find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse::<u64>().ok()));
        let (Some(id), Some(memlock)) = (field("map_id:"), field("memlock:")) else { continue };
        let shown = Command::new("bpftool").args(["--json", "map", "show", "id", &id.to_string()]).output();
        let name = shown
            .ok()
            .and_then(|o| serde_json::from_slice::<serde_json::Value>(&o.stdout).ok())
            .and_then(|v| v["name"].as_str().map(str::to_string))
            .unwrap_or_else(|| format!("map {id}"));
        maps.push((name, memlock));
    }
    if maps.is_empty() {
        bail!("no map among podstuck's open files (pid {pid})");
    }
    maps.sort_by_key(|m| std::cmp::Reverse(m.1));
    Ok(maps)
}

/// Medians of `start_and_stop`: seconds and MiB.
struct StartAndStop {
    first_event: f64,
    idle_rss: f64,
    idle_anon: f64,
    detach: f64,
    /// The do-nothing tracepoint pair's, from SIGINT to exit.
    pair_detach: f64,
}

/// The syscall tracepoints' perf events podstuck's tracepoint plan tears
/// down at its stop: four syscalls' enter and exit, kubelet's connect pair.
const PERF_EVENTS: usize = 10;

/// podstuck's kernel-time target against bpftrace's on the storm rows.
const BPFTRACE_SHARE: f64 = 0.6;

/// From SIGINT to exit of the do-nothing tracepoint pair, attached a
/// moment: two perf events' teardown, what the kernel takes for each.
fn floor_detach(podstuck: &Path) -> Result<f64> {
    let mut floor = start_floor(podstuck)?;
    let stopping = Instant::now();
    interrupt(&floor);
    floor.wait()?;
    Ok(stopping.elapsed().as_secs_f64())
}

/// One storm row's figures the notes weigh against the targets.
struct StormRow {
    /// fs, dirs, remover.
    label: String,
    /// podstuck / floor: (podstuck - untraced) / (floor - untraced); None
    /// where the floor's slowdown is within the noise.
    over_floor: Option<f64>,
    /// Median wall time under podstuck minus under the do-nothing pair.
    added_s: f64,
    /// unlinkat calls one removal makes.
    calls: u64,
    /// podstuck's programs' kernel ns per call, and bpftrace's.
    kernel_ns: f64,
    bpftrace_ns: f64,
    /// Collector CPU-s per million calls.
    cpu: f64,
}

/// Slowdowns under this (1 %) are not used as the base of a ratio: a
/// round's time moves that much with noise alone (the guest's 10 ms clock
/// and emulation in the VM rows; ext4's journal on this machine).
const NOISE: f64 = 0.01;

/// (traced - 1) / (base - 1) of two slowdowns: how much of `base`'s cost
/// `traced` pays; None where `base` is within the noise.
fn over(traced: f64, base: f64) -> Option<f64> {
    (base - 1.0 >= NOISE).then(|| (traced - 1.0) / (base - 1.0))
}

/// `over`'s ratio in a table cell.
fn shown_over(ratio: Option<f64>, base: f64) -> String {
    match ratio {
        Some(r) => format!("{r:.2}"),
        None => format!("none: its base, {}, is within the noise", pct(base)),
    }
}

/// One VM kernel's medians: podstuck's slowdown over the do-nothing
/// pair's on fentry, kernel ns per call on fentry and on the tracepoints.
struct FentryRow {
    kernel: String,
    /// None where the do-nothing pair's slowdown is within the noise.
    over_floor: Option<f64>,
    fentry_ns: f64,
    tracepoint_ns: f64,
}

/// The VM section: each kernel booted once in QEMU, removals timed inside
/// it (`vm::bench_boots`); only ratios within one boot are reported.
fn fentry_rows(kernels: &[String], dirs: usize, rounds: usize, report: &mut String) -> Result<Vec<FentryRow>> {
    let boots = crate::vm::bench_boots(kernels, dirs, rounds)?;
    const VARIANTS: [&str; 4] = ["floor-tracepoint", "floor-fentry", "podstuck-tracepoint", "podstuck-fentry"];
    writeln!(report, "\n## fentry, tracepoints, untraced: Debian's kernels in QEMU (emulated)\n")?;
    writeln!(report, "This machine's kernel refuses fentry, so each of Debian's cloud kernels boots once under QEMU without KVM (TCG: software emulation, 2 vCPUs, `cargo xtask vm-test`'s initramfs) and times GNU `rm -rf` of {dirs} empty directories on the guest's tmpfs, {rounds} paired rounds, the order rotating: untraced; the do-nothing pair (`podstuck attach-cost MECHANISM --kernel-cost`) on the syscall tracepoints and on fentry/fexit; `podstuck watch --json --findings --kernel-cost --histograms DIR --attach tracepoint|fentry`. The arm64 kernels (arm64-5.10...) boot in qemu-system-aarch64, an arm64 machine emulated on this x86_64 one, with podstuck cross-built; arm64 has BPF trampolines only from 6.4, so its 5.10 and 6.1 rows time the tracepoints against untraced alone. Emulation makes every instruction slower, not alike: absolute times mean nothing here, and ratios only within one boot. Slowdowns are medians of each round's traced/untraced ratio (the guest's clock, 10 ms steps); kernel time per call is the unlinkat programs' BPF run-time statistics.\n")?;
    writeln!(report, "| kernel | rounds | untraced | floor slowdown: tracepoint | fentry | podstuck slowdown: tracepoint | fentry | podstuck fentry / tracepoint | podstuck / floor on fentry (target ≤ 1.07) | kernel ns per call, podstuck: tracepoint | fentry | fentry / tracepoint | do-nothing pair on fentry | calls seen (expected {}) |", dirs + 1)?;
    writeln!(report, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")?;
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for boot in &boots {
        failures.extend(boot.failures.iter().map(|f| format!("{} ({}): {f}", boot.kernel, boot.release)));
        let untraced: BTreeMap<usize, f64> =
            boot.lines.iter().filter(|l| l.variant == "untraced").map(|l| (l.round, l.seconds)).collect();
        let of = |variant: &'static str| boot.lines.iter().filter(move |l| l.variant == variant);
        // Median of the rounds' variant/untraced ratios.
        let slowdown = |variant: &'static str| {
            let mut r: Vec<f64> = of(variant)
                .filter_map(|l| untraced.get(&l.round).filter(|u| **u > 0.0).map(|u| l.seconds / u))
                .collect();
            median(&mut r)
        };
        let ns = |variant: &'static str| median(&mut of(variant).map(|l| l.kernel_ns).collect::<Vec<_>>());
        // A kernel without fentry (arm64 before 6.4) times the tracepoints only.
        let ft_only = "podstuck-tracepoint";
        let fentry_timed = of("floor-fentry").next().is_some() || of("podstuck-fentry").next().is_some();
        if !untraced.is_empty() && !fentry_timed && boot.failures.is_empty() && of(ft_only).next().is_some() {
            writeln!(
                report,
                "| {} ({}) | {} | {:.2} s | {} | no fentry on this kernel | {} | no fentry | | | {:.0} | | | | {} |",
                boot.kernel,
                boot.release,
                untraced.len(),
                median(&mut untraced.values().copied().collect::<Vec<_>>()),
                pct(slowdown("floor-tracepoint")),
                pct(slowdown(ft_only)),
                ns(ft_only),
                of(ft_only)
                    .map(|l| l.calls.to_string())
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect::<Vec<_>>()
                    .join(", "),
            )?;
            continue;
        }
        if untraced.is_empty() || VARIANTS.iter().any(|v| of(v).next().is_none()) {
            writeln!(
                report,
                "| {} ({}) | not measured: see below | | | | | | | | | | | | |",
                boot.kernel, boot.release
            )?;
            continue;
        }
        let [ft, ff, pt, pf] = VARIANTS.map(slowdown);
        let (tracepoint_ns, fentry_ns) = (ns("podstuck-tracepoint"), ns("podstuck-fentry"));
        let calls: Vec<String> = {
            let mut seen: Vec<u64> = of("podstuck-tracepoint").chain(of("podstuck-fentry")).map(|l| l.calls).collect();
            seen.sort_unstable();
            seen.dedup();
            seen.iter().map(|c| c.to_string()).collect()
        };
        let row = FentryRow { kernel: boot.kernel.clone(), over_floor: over(pf, ff), fentry_ns, tracepoint_ns };
        writeln!(
            report,
            "| {} ({}) | {} | {:.2} s | {} | {} | {} | {} | {} | {} | {tracepoint_ns:.0} | {fentry_ns:.0} | {:.2} | {:.0} | {} |",
            boot.kernel,
            boot.release,
            untraced.len(),
            median(&mut untraced.values().copied().collect::<Vec<_>>()),
            pct(ft),
            pct(ff),
            pct(pt),
            pct(pf),
            shown_over(over(pf, pt), pt),
            shown_over(row.over_floor, ff),
            fentry_ns / tracepoint_ns,
            ns("floor-fentry"),
            calls.join(", "),
        )?;
        rows.push(row);
    }
    writeln!(report, "\npodstuck fentry / tracepoint is (fentry - untraced) / (tracepoint - untraced): the share of the tracepoints' slowdown left on fentry. podstuck / floor on fentry is (podstuck - untraced) / (do-nothing pair - untraced), both on fentry; either is left out where its base slowdown is under {:.0} %, the noise of the guest's clock and of emulation over a round. bpftrace is not in the guest: the fifth-of-bpftrace target is measured on this machine's tracepoints (above) only.", NOISE * 100.0)?;
    for failure in failures {
        writeln!(report, "\n- {failure}")?;
    }
    Ok(rows)
}

/// What the run says of the targets it cannot meet: each with the
/// measurement that shows why.
fn notes(
    report: &mut String,
    rows: &[StormRow],
    costs: &attach::AttachCosts,
    start: Option<&StartAndStop>,
    fentry: &[FentryRow],
) -> Result<()> {
    let podstuck_ns = median(&mut rows.iter().map(|r| r.kernel_ns).collect::<Vec<_>>());
    let bpftrace_ns = median(&mut rows.iter().map(|r| r.bpftrace_ns).collect::<Vec<_>>());
    let mut lines = Vec::new();
    for row in rows {
        let mut line = match row.over_floor {
            None => format!(
                "- Wall slowdown over the floor, {}: not measurable, the floor's own slowdown was within the noise",
                row.label
            ),
            Some(r) if r > 1.07 => format!("- Wall slowdown over the floor, {}: {r:.2}", row.label),
            Some(_) => continue,
        };
        if let Some(floor) = costs.floor_ns {
            let extra = row.calls as f64 * (row.kernel_ns - floor) / 1e9;
            write!(
                line,
                ". podstuck's programs take {:.0} ns per unlinkat call, the do-nothing pair {floor:.0}: {} calls x {:.0} ns = {extra:.3} s of kernel time, against {:.3} s that podstuck's removal took beyond the floor's (medians)",
                row.kernel_ns,
                row.calls,
                row.kernel_ns - floor,
                row.added_s
            )?;
        }
        lines.push(format!("{line}."));
    }
    for row in rows.iter().filter(|r| r.cpu > 0.5) {
        lines.push(format!("- Collector CPU, {}: {:.3} CPU-s per million calls (target 0.5).", row.label, row.cpu));
    }
    for row in fentry {
        if let Some(over_floor) = row.over_floor.filter(|r| *r > 1.07) {
            lines.push(format!(
                "- Wall slowdown on fentry, {} in QEMU: podstuck's is {over_floor:.2} times the do-nothing pair's. There the trampolines cost little, so what podstuck's programs do shows: {:.0} ns per call on fentry against {:.0} on the tracepoints (emulated: compare within the row only).",
                row.kernel, row.fentry_ns, row.tracepoint_ns
            ));
        }
    }
    if bpftrace_ns > 0.0 && podstuck_ns > BPFTRACE_SHARE * bpftrace_ns {
        lines.push(format!(
            "- Kernel time per call: podstuck {podstuck_ns:.0} ns, bpftrace {bpftrace_ns:.0} ns (medians of the storm rows), {:.2} of it (target {BPFTRACE_SHARE}).{}",
            podstuck_ns / bpftrace_ns,
            match (costs.floor_ns, costs.entry_ns) {
                (Some(floor), Some(entry)) => format!(" Of bpftrace's, the do-nothing pair takes {:.2} here and the clocks with the entry {:.2} (attach mechanisms, above): what is left to podstuck's counting is {:.0} ns a call.", floor / bpftrace_ns, entry / bpftrace_ns, podstuck_ns - entry),
                _ => String::new(),
            }
        ));
    }
    if let Some(line) = attach::target_line(costs).filter(|l| !l.ends_with(": met.")) {
        lines.push(format!("- {line}"));
    }
    if let Some(s) = start {
        if s.idle_rss > 25.0 {
            lines.push(format!(
                "- Idle RSS: {:.1} MiB, of which {:.1} MiB is the process's own (RssAnon); the rest is the binary's pages and the ring buffer's 4 MiB of kernel pages, which VmRSS counts twice (the ring is mapped twice so a record never wraps), and which shrink only with the ring (`--ring-buffer-kib`).",
                s.idle_rss, s.idle_anon
            ));
        }
        if s.detach > 0.2 {
            lines.push(format!(
                "- Detach: {:.3} s. The kernel frees a syscall tracepoint's perf event only after RCU grace periods, under a lock (`event_mutex`) every such teardown queues on, whoever closes it and however side by side: the do-nothing pair's two take {:.3} s here (from SIGINT to exit, median). podstuck's plan here has {PERF_EVENTS} (the four syscalls' pairs and kubelet's connect pair; the lifecycle's three programs are on raw and BTF tracepoints, whose detach needs no such wait), about {:.3} s of the kernel's alone; podstuck begins them first thing at the stop and does its last work meanwhile. fentry programs detach side by side.",
                s.detach,
                s.pair_detach,
                s.pair_detach * PERF_EVENTS as f64 / 2.0
            ));
        }
        if s.first_event > 0.2 {
            lines.push(format!(
                "- Start to first event: {:.3} s, mostly the verifier on the four exit programs (loaded side by side, one CPU each), and the kernel's BTF read by the loader.",
                s.first_event
            ));
        }
    }
    if !lines.is_empty() {
        writeln!(report, "\n## Targets not met, and why\n")?;
        for line in lines {
            writeln!(report, "{line}")?;
        }
    }
    Ok(())
}

/// The memory storm: `calls` traced unlinkat calls (mkdir, then remove it).
fn memory_storm(podstuck: &Path, fs: &Path, calls: u64, report: &mut String) -> Result<()> {
    let histograms = fs.join("storm-histograms");
    let tracer = start_podstuck(podstuck, &fs.join("kubelet"), &histograms)?;
    let dir = volume(fs);
    std::fs::create_dir_all(&dir)?;
    let path = std::ffi::CString::new(dir.join("x").as_os_str().as_encoded_bytes())?;
    let started = Instant::now();
    for _ in 0..calls {
        // SAFETY: a C string we own.
        unsafe {
            libc::mkdir(path.as_ptr(), 0o755);
            libc::unlinkat(libc::AT_FDCWD, path.as_ptr(), libc::AT_REMOVEDIR);
        }
    }
    let took = started.elapsed().as_secs_f64();
    let run = stop_podstuck(tracer, calls, calls, pod_series)?;
    writeln!(report, "\n## A {calls}-call storm\n")?;
    writeln!(report, "One process creating and removing a directory of the fake pod {calls} times ({took:.1} s, {:.0} calls/s), `podstuck watch` as above.\n", calls as f64 / took)?;
    writeln!(
        report,
        "| counted (exact?) | events lost | collector CPU per million calls | peak RSS | kernel time per call |"
    )?;
    writeln!(report, "|---|---|---|---|---|")?;
    writeln!(
        report,
        "| {} of {} ({}) | {} | {:.3} CPU-s | {:.1} MiB | {:.0} ns |",
        run.counted,
        run.expected,
        if run.exact { "exact" } else { "NOT exact" },
        run.events_lost,
        run.cpu_s,
        run.peak_rss_kib as f64 / 1024.0,
        run.kernel_ns_per_call
    )?;
    Ok(())
}

const FORK_EXEC_HEADING: &str = "## A fork/exec storm";

/// `n` spawns of /bin/true, one after the other, each waited for: the wall
/// time. posix_spawn (glibc's clone(CLONE_VM|CLONE_VFORK), then execve in
/// the child) and waitpid, with argv made once and an empty environment:
/// next to nothing of its own beside the fork, exec and exit measured.
fn spawn_storm(n: usize) -> Result<f64> {
    let program = std::ffi::CString::new("/bin/true")?;
    let argv = [program.as_ptr() as *mut libc::c_char, std::ptr::null_mut()];
    let envp: [*mut libc::c_char; 1] = [std::ptr::null_mut()];
    let started = Instant::now();
    for _ in 0..n {
        let mut pid: libc::pid_t = 0;
        // SAFETY: a C string we own, argv and envp NULL-terminated; no
        // file actions or attributes.
        let rc = unsafe {
            libc::posix_spawn(
                &mut pid,
                program.as_ptr(),
                std::ptr::null(),
                std::ptr::null(),
                argv.as_ptr(),
                envp.as_ptr(),
            )
        };
        if rc != 0 {
            bail!("posix_spawn /bin/true: {}", std::io::Error::from_raw_os_error(rc));
        }
        let mut status = 0;
        // SAFETY: our own child.
        if unsafe { libc::waitpid(pid, &mut status, 0) } != pid
            || !libc::WIFEXITED(status)
            || libc::WEXITSTATUS(status) != 0
        {
            bail!("/bin/true (pid {pid}) did not exit 0 (status {status:#x})");
        }
    }
    Ok(started.elapsed().as_secs_f64())
}

/// The same spawns by dash's loop (`sh -c 'while ...; do /bin/true; ...'`),
/// whose fork copies the shell: the wall time, to show the loop's own share.
fn shell_storm(n: usize) -> Result<f64> {
    let script = format!("i=0; while [ $i -lt {n} ]; do /bin/true; i=$((i+1)); done");
    let started = Instant::now();
    sh(Command::new("sh").args(["-c", &script]))?;
    Ok(started.elapsed().as_secs_f64())
}

/// The fork/exec storm's rounds.
#[derive(Default)]
struct ForkExec {
    untraced: Vec<f64>,
    /// `podstuck attach-cost lifecycle` attached.
    floor: Vec<f64>,
    /// The trio and the unlinkat tracepoint pair (`attach-cost tracepoint`):
    /// do-nothing programs where podstuck has its own, the syscall
    /// tracepoints' slow path included.
    floors: Vec<f64>,
    podstuck: Vec<f64>,
    /// Kernel ns per spawn, all the programs on the lifecycle's tracepoints together.
    floor_ns: Vec<f64>,
    podstuck_ns: Vec<f64>,
    /// podstuck's ns per run of each lifecycle program, by name.
    programs: BTreeMap<String, Vec<f64>>,
}

/// The do-nothing trio's kernel time, over `n` spawns, from attach-cost's JSON line.
fn floor_ns_per_spawn(line: &str, n: usize) -> f64 {
    let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap_or_default();
    programs_run_time_ns(&v) / n as f64
}

/// The run time of every program in attach-cost's JSON line, together.
fn programs_run_time_ns(line: &serde_json::Value) -> f64 {
    line["programs"].as_array().into_iter().flatten().map(|p| p["run_time_ns"].as_f64().unwrap_or(0.0)).sum()
}

/// Stops `podstuck watch`; its lifecycle programs' "kernel cost: NAME N
/// runs, X ns per run" lines, as (name, runs, ns per run).
fn stop_for_lifecycle_costs(mut tracer: Tracer) -> Result<Vec<(String, f64, f64)>> {
    interrupt(&tracer.child);
    let mut err = String::new();
    tracer.child.stderr.take().expect("piped").read_to_string(&mut err)?;
    tracer.child.wait()?;
    let mut costs = Vec::new();
    for line in err.lines().filter(|l| l.contains("kernel cost:") && l.contains("lifecycle")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let (Some(name), Some(per)) =
            (words.iter().position(|w| *w == "cost:"), words.iter().position(|w| *w == "per"))
        else {
            continue;
        };
        let number = |at: usize| words.get(at).and_then(|w| w.parse::<f64>().ok()).unwrap_or(0.0);
        costs.push((words.get(name + 1).unwrap_or(&"?").to_string(), number(name + 2), number(per - 2)));
    }
    Ok(costs)
}

/// The rounds of the fork/exec storm: untraced, the do-nothing trio,
/// podstuck, and the trio with the unlinkat pair, in rotating order.
fn fork_exec_rounds(podstuck: &Path, dir: &Path, runs: usize, n: usize) -> Result<ForkExec> {
    let kubelet_root = dir.join("kubelet");
    std::fs::create_dir_all(kubelet_root.join("pods"))?;
    let mut storm = ForkExec::default();
    for round in 0..runs {
        say(&format!("fork/exec storm, {n} spawns: round {} of {runs}", round + 1));
        for variant in (0..4).map(|i| (i + round) % 4) {
            match variant {
                0 => storm.untraced.push(spawn_storm(n)?),
                1 => {
                    let (mut child, _stderr) =
                        match attach_cost(podstuck, "lifecycle", &["--kernel-cost"], Stdio::piped())? {
                            Ok(attached) => attached,
                            Err(said) => bail!("podstuck attach-cost lifecycle did not attach: {said}"),
                        };
                    storm.floor.push(spawn_storm(n)?);
                    interrupt(&child);
                    let mut out = String::new();
                    child.stdout.take().expect("piped").read_to_string(&mut out)?;
                    child.wait()?;
                    storm.floor_ns.push(floor_ns_per_spawn(&out, n));
                }
                3 => {
                    let mut pair = start_floor(podstuck)?;
                    let took = match attach_cost(podstuck, "lifecycle", &[], Stdio::null())? {
                        Ok((mut trio, _stderr)) => {
                            let took = spawn_storm(n);
                            interrupt(&trio);
                            trio.wait()?;
                            took
                        }
                        Err(said) => Err(anyhow::anyhow!("podstuck attach-cost lifecycle did not attach: {said}")),
                    };
                    interrupt(&pair);
                    pair.wait()?;
                    storm.floors.push(took?);
                }
                _ => {
                    let tracer = start_podstuck(podstuck, &kubelet_root, &dir.join("histograms"))?;
                    storm.podstuck.push(spawn_storm(n)?);
                    let costs = stop_for_lifecycle_costs(tracer)?;
                    if costs.is_empty() {
                        bail!("podstuck watch printed no kernel cost of a lifecycle program: were they attached?");
                    }
                    storm.podstuck_ns.push(costs.iter().map(|(_, runs, ns)| runs * ns).sum::<f64>() / n as f64);
                    for (name, _, ns) in costs {
                        storm.programs.entry(name).or_default().push(ns);
                    }
                }
            }
        }
    }
    Ok(storm)
}

/// The fork/exec storm's section; with `own_command`, the line that wrote
/// it and when (`--only fork-exec`).
fn fork_exec_section(podstuck: &Path, dir: &Path, runs: usize, n: usize, own_command: Option<&str>) -> Result<String> {
    let shell_s = shell_storm(n)?;
    let mut storm = fork_exec_rounds(podstuck, dir, runs, n)?;
    let ratio = |traced: &[f64]| -> f64 {
        let mut r: Vec<f64> = traced.iter().zip(&storm.untraced).map(|(t, u)| t / u).collect();
        median(&mut r)
    };
    let (floor, floors, p) = (ratio(&storm.floor), ratio(&storm.floors), ratio(&storm.podstuck));
    let base = median(&mut storm.untraced);
    let mut out = String::new();
    writeln!(out, "{FORK_EXEC_HEADING}\n")?;
    if let Some(command) = own_command {
        writeln!(out, "{}", written_alone(command))?;
    }
    writeln!(out, "{n} spawns of `/bin/true`, one after the other, each waited for, by a loop in the benchmark itself: `posix_spawn` (glibc's clone(CLONE_VM|CLONE_VFORK), then execve) and `waitpid`, argv made once, an empty environment, {:.0} µs per spawn untraced. That is the loop with the least overhead of its own: dash's `sh -c 'i=0; while [ $i -lt {n} ]; do /bin/true; i=$((i+1)); done'`, which forks a copy of the shell for each, took {shell_s:.2} s for the same spawns, untraced, once. Each spawn passes each of the lifecycle's tracepoints once: `sched:sched_process_exec` (podstuck reads the exec'd file's inode number and tests its bit among the CNI plugin files', `PLUGIN_INODES`; `/bin/true` is no plugin), `sched:sched_process_exit` (the leader's; podstuck reads how many processes it watches, `WATCHED_COUNT`: none) and `signal:signal_generate` (the parent's SIGCHLD, which podstuck drops first thing). {runs} paired rounds, the order rotating: untraced; the do-nothing trio (`podstuck attach-cost lifecycle --kernel-cost`: three programs on the same tracepoints that only count their calls); `podstuck watch` as the storm rows run it (every program attached, the lifecycle's included); the trio with the unlinkat do-nothing pair (`podstuck attach-cost tracepoint`) beside it, the floor of do-nothing programs where podstuck attaches its own: an enabled syscall tracepoint sends every syscall of every process (some 30 in each spawn) through the kernel's slow path, which the trio alone does not. Slowdowns are medians of each round's traced/untraced ratio; podstuck / floor is (podstuck - untraced) / (floor - untraced), left out where the floor's slowdown is under {:.0} %; kernel ns per spawn is the BPF run-time statistics of the programs on those three tracepoints (podstuck's from `--kernel-cost`'s lines at exit), over the {n} spawns (the node's other processes' execs, exits and signals meanwhile included).\n", base / n as f64 * 1e6, NOISE * 100.0)?;
    writeln!(out, "| spawns | rounds | untraced | do-nothing trio | trio + unlinkat pair | podstuck | trio slowdown | trio + pair slowdown | podstuck slowdown | podstuck / trio | podstuck / (trio + pair) | kernel ns per spawn: trio | podstuck | podstuck's ns per run, each program |")?;
    writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")?;
    let each: Vec<String> = storm.programs.iter_mut().map(|(name, ns)| format!("{name} {:.0}", median(ns))).collect();
    writeln!(
        out,
        "| {n} | {runs} | {base:.3} s | {:.3} s | {:.3} s | {:.3} s | {} | {} | {} | {} | {} | {:.0} | {:.0} | {} |",
        median(&mut storm.floor),
        median(&mut storm.floors),
        median(&mut storm.podstuck),
        pct(floor),
        pct(floors),
        pct(p),
        shown_over(over(p, floor), floor),
        shown_over(over(p, floors), floors),
        median(&mut storm.floor_ns),
        median(&mut storm.podstuck_ns),
        each.join(", ")
    )?;
    Ok(out)
}

/// `file` with its fork/exec section replaced by `section`, or, where it
/// has none, `section` put where a full run puts it (before the fentry
/// rows, the targets not met or the Soak, whichever comes first; else at
/// the end); everything else as it was.
fn with_fork_exec_section(file: &str, section: &str) -> String {
    let next = [answer::HEADING, "## fentry, tracepoints", "## Targets not met", "## Soak"];
    crate::report::with_section(file, FORK_EXEC_HEADING, section, &next)
}

/// `file` with its time-to-answer section replaced by `section`, or put
/// where a full run puts it (after the fork/exec storm).
fn with_time_to_answer_section(file: &str, section: &str) -> String {
    let next = ["## fentry, tracepoints", "## Targets not met", "## Soak"];
    crate::report::with_section(file, answer::HEADING, section, &next)
}

/// `--only time-to-answer`: the demo's answers alone, replacing their section of `--out`.
fn only_time_to_answer(podstuck: &Path, args: &BenchArgs) -> Result<()> {
    let command = format!("cargo xtask bench --only time-to-answer --runs {}{}", args.runs, out_flag(args));
    let section = answer::section(podstuck, args.runs, Some(&command))?;
    let file = std::fs::read_to_string(&args.out).unwrap_or_default();
    std::fs::write(&args.out, with_time_to_answer_section(&file, &section))?;
    say(&format!("wrote its time-to-answer section into {}", args.out.display()));
    Ok(())
}

/// `--only fork-exec`: the fork/exec storm alone, replacing its section of `--out`.
fn only_fork_exec(podstuck: &Path, args: &BenchArgs) -> Result<()> {
    let command = format!(
        "cargo xtask bench --only fork-exec --runs {} --fork-calls {}{}",
        args.runs,
        args.fork_calls,
        out_flag(args)
    );
    let scratch = Scratch::new()?;
    let section = fork_exec_section(podstuck, &scratch.root, args.runs, args.fork_calls, Some(&command))?;
    let file = std::fs::read_to_string(&args.out).unwrap_or_default();
    std::fs::write(&args.out, with_fork_exec_section(&file, &section))?;
    say(&format!("wrote its fork/exec section into {}", args.out.display()));
    Ok(())
}

/// The heading of the start, idle and stop section.
const START_HEADING: &str = "## Start, idle, stop";

/// `--only attach`: the start, idle and stop section and the attach
/// mechanisms', alone, replacing those two sections of `--out`.
fn only_attach(podstuck: &Path, args: &BenchArgs) -> Result<()> {
    let command = format!("cargo xtask bench --only attach --runs {}{}", args.runs, out_flag(args));
    let mut scratch = Scratch::new()?;
    let fs = scratch.filesystem("tmpfs", 100_000)?;
    let mut start = String::new();
    start_and_stop(podstuck, &fs, args.runs, &mut start)?;
    let (attach, _) = attach::section(podstuck, &fs, args.runs)?;
    let written = written_alone(&command);
    let file = std::fs::read_to_string(&args.out).unwrap_or_default();
    let file = crate::report::with_section(
        &file,
        START_HEADING,
        &alone(&start, &written),
        &[attach::HEADING, "## A ", "## Time to answer", "## Soak"],
    );
    std::fs::write(&args.out, attach::with_attach_section(&file, &alone(&attach, &written)))?;
    say(&format!("wrote its start, idle and stop section and its attach mechanisms' into {}", args.out.display()));
    Ok(())
}

/// `section` with the line that says it was run alone after its heading.
fn alone(section: &str, written: &str) -> String {
    let section = section.trim_start();
    match section.split_once("\n\n") {
        Some((heading, rest)) => format!("{heading}\n\n{written}\n{rest}"),
        None => format!("{section}\n\n{written}"),
    }
}

/// `--out FILE` as a command line shows it: nothing for the default, the
/// workspace's BENCHMARKS.md.
fn out_flag(args: &BenchArgs) -> String {
    let default_out = Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(|w| w.join("BENCHMARKS.md"));
    match default_out.as_deref() == Some(args.out.as_path()) {
        true => String::new(),
        false => format!(" --out {}", args.out.display()),
    }
}

/// The command line that reproduces this run, as BENCHMARKS.md shows it.
fn bench_command(args: &BenchArgs, vm_kernels: &[String]) -> String {
    format!(
        "cargo xtask bench --runs {} --large-runs {} --sizes {} --filesystems {} --storm-calls {} --fork-calls {} --strace-runs {} --removers {} --vm-kernels {} --vm-dirs {} --vm-rounds {}{}",
        args.runs,
        args.large_runs,
        args.sizes.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(","),
        args.filesystems.join(","),
        args.storm_calls,
        args.fork_calls,
        args.strace_runs,
        args.removers.join(","),
        if vm_kernels.is_empty() { "none".to_string() } else { vm_kernels.join(",") },
        args.vm_dirs,
        args.vm_rounds,
        out_flag(args)
    )
}

/// Where one filesystem's cases run: the volume's top, the fake kubelet
/// root, podstuck's histograms and, for `docker volume rm`, the dockerd.
struct Place<'a> {
    fs_kind: &'a str,
    top: &'a Path,
    kubelet_root: &'a Path,
    histograms: &'a Path,
    dockerd: Option<&'a DockerVolumes>,
}

/// Every round of one case, the removal untraced, under podstuck, under
/// bpftrace and under the floor in rotating order, then `strace_runs`
/// under strace; with the calls one removal makes.
fn run_case(
    place: &Place,
    tool: &str,
    dirs: usize,
    runs: usize,
    strace_runs: usize,
    podstuck: &Path,
    actor: &Path,
) -> Result<(Case, u64)> {
    let fs_kind = place.fs_kind;
    let mut case = Case::default();
    let mut calls = 0;
    for round in 0..runs {
        say(&format!("{fs_kind}, {dirs} dirs, {tool}: round {} of {runs}", round + 1));
        for variant in (0..4).map(|i| (i + round) % 4) {
            let prepared = prepare(tool, place.top, dirs, place.dockerd)?;
            calls = prepared.calls;
            let removal = || remove_prepared(tool, place.top, actor, place.dockerd, &prepared, false);
            match variant {
                0 => case.untraced.push(removal()?),
                3 => {
                    let mut floor = start_floor(podstuck)?;
                    case.floor.push(removal()?);
                    interrupt(&floor);
                    floor.wait()?;
                }
                1 => {
                    let tracer = start_podstuck(podstuck, place.kubelet_root, place.histograms)?;
                    case.podstuck.push(removal()?);
                    let counts = if tool == DOCKER_RM { runtime_series } else { pod_series };
                    case.runs.push(stop_podstuck(tracer, prepared.expected, prepared.calls, counts)?);
                }
                _ => {
                    let tracer = start_bpftrace()?;
                    case.bpftrace.push(removal()?);
                    case.bpftrace_kernel_ns.push(stop(tracer)?);
                }
            }
        }
    }
    for round in 0..strace_runs {
        say(&format!("{fs_kind}, {dirs} dirs, {tool} under strace: {} of {strace_runs}", round + 1));
        let prepared = prepare(tool, place.top, dirs, place.dockerd)?;
        case.strace.push(remove_prepared(tool, place.top, actor, place.dockerd, &prepared, true)?);
    }
    Ok((case, calls))
}

/// One storm case as a row of the table, its figures the medians of its rounds.
fn storm_row(
    tables: &mut String,
    fs_kind: &str,
    dirs: usize,
    tool: &str,
    runs: usize,
    case: &Case,
    calls: u64,
) -> Result<StormRow> {
    let ratio = |traced: &[f64]| -> f64 {
        let mut r: Vec<f64> = traced.iter().zip(&case.untraced).map(|(t, u)| t / u).collect();
        median(&mut r)
    };
    let (p, b, floor) = (ratio(&case.podstuck), ratio(&case.bpftrace), ratio(&case.floor));
    let strace = if case.strace.is_empty() {
        "not run".to_string()
    } else {
        format!(
            "{:.2} s ({:.0}x)",
            median(&mut case.strace.clone()),
            median(&mut case.strace.clone()) / median(&mut case.untraced.clone())
        )
    };
    let col = |f: fn(&PodstuckRun) -> f64| median(&mut case.runs.iter().map(f).collect::<Vec<_>>());
    let row = StormRow {
        label: format!("{fs_kind}, {dirs} dirs, {tool}"),
        over_floor: over(p, floor),
        added_s: median(&mut case.podstuck.clone()) - median(&mut case.floor.clone()),
        calls,
        kernel_ns: col(|r| r.kernel_ns_per_call),
        bpftrace_ns: median(&mut case.bpftrace_kernel_ns.clone()),
        cpu: col(|r| r.cpu_s),
    };
    let exact = case.runs.iter().filter(|r| r.exact).count();
    let counted: Vec<String> =
        case.runs.iter().filter(|r| !r.exact).map(|r| format!("{} of {}", r.counted, r.expected)).collect();
    writeln!(
        tables,
        "| {fs_kind} | {dirs} | {tool} | {runs} | {:.3} s | {:.3} s | {:.3} s | {strace} | {} | {} | {} | {} | {} | {exact} of {} runs{} | {:.0} | {:.3} CPU-s | {:.1} MiB | {:.0} | {:.0} | {:.2} | {:.2} s | {:.2} s |",
        median(&mut case.untraced.clone()),
        median(&mut case.podstuck.clone()),
        median(&mut case.bpftrace.clone()),
        pct(floor),
        pct(p),
        pct(b),
        shown_over(row.over_floor, floor),
        shown_over(over(p, b), b),
        case.runs.len(),
        if counted.is_empty() { String::new() } else { format!(" ({})", counted.join(", ")) },
        col(|r| r.events_lost as f64),
        row.cpu,
        col(|r| r.peak_rss_kib as f64) / 1024.0,
        row.kernel_ns,
        row.bpftrace_ns,
        row.kernel_ns / row.bpftrace_ns,
        col(|r| r.attach_s),
        col(|r| r.detach_s),
    )?;
    Ok(row)
}

pub fn bench(podstuck: &Path, actor: &Path, args: &BenchArgs) -> Result<()> {
    match args.only {
        Some(Only::ForkExec) => return only_fork_exec(podstuck, args),
        Some(Only::TimeToAnswer) => return only_time_to_answer(podstuck, args),
        Some(Only::Attach) => return only_attach(podstuck, args),
        None => {}
    }
    let mut tools = Vec::new();
    for name in &args.removers {
        match REMOVERS.iter().find(|(arg, _)| arg == name) {
            Some(&(_, tool)) if !tools.contains(&tool) => tools.push(tool),
            Some(_) => {}
            None => bail!("unknown remover {name} ({})", REMOVERS.map(|(arg, _)| arg).join(", ")),
        }
    }
    let vm_kernels: Vec<String> = args.vm_kernels.iter().filter(|k| k.as_str() != "none").cloned().collect();
    let known = crate::vm::bench_kernel_names();
    if let Some(unknown) = vm_kernels.iter().find(|k| !known.contains(k)) {
        bail!("unknown VM kernel {unknown} ({}, or none)", known.join(", "));
    }
    let whole_run = Instant::now();
    // `cargo xtask soak` writes a section of its own into the same file.
    let soak = crate::soak::kept_section(&args.out);
    let mut scratch = Scratch::new()?;
    let mut report = String::new();
    let command = bench_command(args, &vm_kernels);
    writeln!(report, "# podstuck benchmarks\n")?;
    writeln!(
        report,
        "Written by `{command}` (as root), {}.\n",
        sh(Command::new("date").arg("-u")).unwrap_or_default().trim()
    )?;
    writeln!(report, "Machine: {}.\n", machine())?;
    writeln!(report, "Every figure is a median over paired rounds run side by side in this one run (each round runs every variant on a freshly built, identical tree, in rotating order); slowdowns are medians of each round's traced/untraced ratio. The trees are leaked emptyDir volumes of a fake pod (rows of 1000 empty directories) under a fake kubelet root. podstuck runs as `podstuck watch --json --findings --kernel-cost --histograms DIR --kubelet-root ROOT` on the whole node (histograms on); bpftrace runs `{BPFTRACE_SCRIPT}`; strace runs `strace -f -c`.\n")?;
    let mut drivers: Vec<String> = Vec::new();
    let mut tables = String::new();
    writeln!(tables, "## The storm\n")?;
    writeln!(tables, "| fs | dirs | remover | rounds | untraced | podstuck | bpftrace | strace | floor slowdown | podstuck slowdown | bpftrace slowdown | podstuck / floor (target ≤ 1.07) | podstuck / bpftrace | counted exactly | events lost | collector CPU per M calls (target ≤ 0.5) | peak RSS | kernel ns per call: podstuck | bpftrace | podstuck / bpftrace (target ≤ 0.6) | attach | detach |")?;
    writeln!(tables, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")?;
    let mut attach_fs = None;
    let mut rows: Vec<StormRow> = Vec::new();
    for fs_kind in &args.filesystems {
        let fs = scratch.filesystem(fs_kind, *args.sizes.iter().max().unwrap_or(&200_000))?;
        if fs_kind == "tmpfs" {
            attach_fs = Some(fs.clone());
        }
        let kubelet_root = fs.join("kubelet");
        let top = volume(&fs);
        let dockerd =
            if tools.contains(&DOCKER_RM) { Some(DockerVolumes::start(&fs, fs_kind, &scratch.root)?) } else { None };
        if let Some(d) = &dockerd {
            drivers.push(format!("{} on {fs_kind}", d.dockerd.storage_driver()));
        }
        for (size_index, &dirs) in args.sizes.iter().enumerate() {
            for &tool in &tools {
                let runs = if dirs >= 1_000_000 { args.large_runs.min(args.runs) } else { args.runs };
                let strace_runs = if fs_kind == "tmpfs" && size_index == 0 { args.strace_runs } else { 0 };
                let place = Place {
                    fs_kind,
                    top: &top,
                    kubelet_root: &kubelet_root,
                    histograms: &fs.join("histograms"),
                    dockerd: dockerd.as_ref(),
                };
                let (case, calls) = run_case(&place, tool, dirs, runs, strace_runs, podstuck, actor)?;
                let row = storm_row(&mut tables, fs_kind, dirs, tool, runs, &case, calls)?;
                rows.push(row);
                std::fs::write(&args.out, format!("{report}{tables}\n(still running)\n{soak}"))?;
            }
        }
    }
    report.push_str(&tables);
    writeln!(report, "\nColumns: wall time of the removal alone (tracers attached before it starts); \"counted exactly\": podstuck's `unlinkat/ok/*/<pod>` series in summary.json equal the directories removed; collector CPU: podstuck's user+system time from attach to 1.2 s after the storm, per million traced calls (RemoveAll: two per directory); peak RSS: VmHWM at the end; kernel ns per call: entry + exit programs' run time per call (BPF run-time statistics, which themselves add a little), podstuck's from `--kernel-cost`, bpftrace's from its programs' fdinfo (run_time_ns / run_cnt) with `kernel.bpf_stats_enabled` on while it runs; floor: `podstuck attach-cost tracepoint` attached, two programs on the unlinkat tracepoints that only count, the slow-path cost any tracer there pays; podstuck / floor is (podstuck - untraced) / (floor - untraced); rounds: paired rounds of four variants (untraced, podstuck, bpftrace, floor) in rotating order, fewer for a million directories and more (`--large-runs`); attach: from spawn to the start line (every program attached); detach: from SIGINT to exit (programs gone with the process).")?;
    if tools.contains(&DOCKER_RM) {
        let version = sh(Command::new(DOCKER).arg("--version")).unwrap_or_default();
        writeln!(report, "\n`{DOCKER_RM}`: Debian's docker.io ({}) as users meet it: a private `dockerd --data-root FS/docker --iptables=false --ip6tables=false --bridge=none --storage-driver DRIVER` per filesystem ({}); each round runs `docker volume create`, builds the tree in the volume's `_data/leaked`, and times the whole `docker volume rm` command (client start and API round trip included). dockerd's Go RemoveAll makes two unlinkat calls per directory (EISDIR, then AT_REMOVEDIR), plus four for the two paths it tries whole; the volume is in no pod, so \"counted exactly\" compares podstuck's `unlinkat/ok/runtime/*` series with the directories removed (the tree, `_data` and the volume's directory), and collector CPU is per million of all its calls. Its strace column is `strace -f -c -p` attached to dockerd.", version.trim().trim_start_matches("Docker version "), drivers.join(", "))?;
    }
    let (mut started, mut costs) = (None, attach::AttachCosts::default());
    if let Some(fs) = attach_fs {
        started = Some(start_and_stop(podstuck, &fs, args.runs, &mut report)?);
        let (section, measured) = attach::section(podstuck, &fs, args.runs)?;
        write!(report, "\n{section}")?;
        costs = measured;
        if args.storm_calls > 0 {
            memory_storm(podstuck, &fs, args.storm_calls, &mut report)?;
        }
    }
    if args.fork_calls > 0 {
        let section = fork_exec_section(podstuck, &scratch.root.join("fork-exec"), args.runs, args.fork_calls, None)?;
        write!(report, "\n{section}")?;
    }
    let section = answer::section(podstuck, args.runs, None)?;
    write!(report, "\n{section}")?;
    let fentry = if vm_kernels.is_empty() {
        Vec::new()
    } else {
        std::fs::write(&args.out, format!("{report}\n(still running: the VM rows)\n{soak}"))?;
        fentry_rows(&vm_kernels, args.vm_dirs, args.vm_rounds, &mut report)?
    };
    notes(&mut report, &rows, &costs, started.as_ref(), &fentry)?;
    writeln!(report, "\nThe whole run took {:.1} minutes.", whole_run.elapsed().as_secs_f64() / 60.0)?;
    std::fs::write(&args.out, format!("{report}{soak}"))?;
    say(&format!("wrote {}", args.out.display()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECTION: &str = "## A fork/exec storm\n\nnew figures\n";

    #[test]
    fn the_fork_exec_section_is_replaced_alone() {
        let file =
            "# podstuck benchmarks\n\n## The storm\n\nrows\n\n## A fork/exec storm\n\nold figures\n\n## Soak\n\nsoak\n";
        assert_eq!(
            with_fork_exec_section(file, SECTION),
            "# podstuck benchmarks\n\n## The storm\n\nrows\n\n## A fork/exec storm\n\nnew figures\n\n## Soak\n\nsoak\n"
        );
    }

    #[test]
    fn an_absent_fork_exec_section_goes_where_a_full_run_puts_it() {
        let file = "# b\n\n## A 10-call storm\n\nx\n\n## Targets not met, and why\n\n- y\n\n## Soak\n\nsoak\n";
        assert_eq!(
            with_fork_exec_section(file, SECTION),
            "# b\n\n## A 10-call storm\n\nx\n\n## A fork/exec storm\n\nnew figures\n\n## Targets not met, and why\n\n- y\n\n## Soak\n\nsoak\n"
        );
        assert_eq!(with_fork_exec_section("# b\n\nx\n", SECTION), "# b\n\nx\n\n## A fork/exec storm\n\nnew figures\n");
        assert_eq!(with_fork_exec_section("", SECTION), SECTION);
    }
}
