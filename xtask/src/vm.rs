//! `cargo xtask vm-test`: podstuck on the kernels Kubernetes nodes run.
//!
//! Boots Debian's own cloud kernels (5.10 from bullseye, 6.1 from bookworm,
//! 6.12 from trixie) under QEMU (TCG: no KVM needed) with an initramfs that
//! holds everything: busybox, the static release `podstuck` (the file of
//! the release tarball, `cross::build_release_for`), the test helpers
//! `actor` and `fuse_server`, mkfs.ext4 and chattr, GNU rm, bpftool, the
//! kernel modules the scenarios need, and `xtask/vm/init.sh` as /init. The
//! guest runs podstuck's kernel-facing scenarios and prints one line per
//! scenario on the serial console:
//!
//! ```text
//! PODSTUCK-VM RESULT <scenario> PASS|FAIL attach=<a> walk=<w> <detail>
//! ```
//!
//! Each kernel boots twice: the whole suite, then with
//! `lockdown=confidentiality`; 5.10 once more with the whole suite
//! on the syscall tracepoints (`Suite::Tracepoint`), where the `kernel-log`
//! row fails on the WARNING a map without prealloc would print; 5.10 once
//! more with cgroup v1 hierarchies in place of cgroup2 (`Suite::CgroupV1`),
//! the node shape of EKS's AL2 and RHEL 8.
//!
//! The amd64 guests boot as many at a time as the host has cores (each
//! runs single-threaded TCG: one core), the arm64 ones one per two cores
//! (their TCG is multi-threaded); `lanes` says why.
//!
//! The host reads the console, prints a table, saves each kernel's whole
//! console log as `target/vm/console-<kernel>.log`, and fails if any
//! scenario failed, went missing, or the guest outlived its watchdog, and
//! if the guest kernel reported an Oops, BUG, WARNING, panic or stack trace
//! anywhere in the boot, after the last scenario too (the `kernel-log` row).
//!
//! `--arch arm64` boots Debian's arm64 builds of the same three kernels
//! in qemu-system-aarch64 (the `virt` board), with podstuck and the
//! helpers the static release builds for aarch64 and the tools from
//! Debian's arm64 packages (see `guest`), the whole suite once each: on
//! 5.10 and 6.1, which have no BPF trampolines on arm64, that is the
//! syscall tracepoint plan; 6.12 has fentry.
//!
//! `cargo xtask bench` boots the same kernels once more each (`bench_boots`,
//! `podstuck_vm.suite=bench`) for what this machine cannot measure: the
//! storm's cost on fentry beside the tracepoints', one BENCH line per timed
//! removal.
//!
//! The kernels come from Debian's archive through apt with a private
//! sources list and lists directory (the machine's own apt state is left
//! alone, see `debian`), unpacked once under `target/vm/kernels/<kernel>/`
//! (`arm64-<kernel>` for arm64): a second run downloads nothing (remove
//! that directory to take a newer kernel).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::ValueEnum;

use crate::cross::{build_release_for, build_release_helpers, Arch};
use crate::host::{install, is_root, run, say, workspace_root};
use crate::setup::setup;

pub(crate) mod debian;
mod guest;

/// The guest's /init.
const INIT: &str = include_str!("../vm/init.sh");

/// Every scenario /init reports in a kernel's full boot, in its order.
const SCENARIOS: [&str; 13] = [
    "check",
    "pod-isolation",
    "held-in-namespace",
    "demo",
    "hung-call",
    "lifecycle",
    "csi-plugin-gone",
    "cni-words",
    "sigterm-dying",
    "relative-paths",
    "storm-count",
    "sigkill",
    "attach",
];

/// The scenarios of the second, short boot with `lockdown=confidentiality`
/// (Talos with Secure Boot): the kernel refuses podstuck's programs, and
/// podstuck says so in one sentence with what to do, not a verifier log;
/// the DaemonSet's `watch --listen --stay-up` stays up and says why on
/// /metrics instead of exiting (`degraded`).
const LOCKDOWN_SCENARIOS: [&str; 4] = ["check", "lockdown", "degraded", "attach"];

/// The scenario folded into amd64 6.1's whole-suite boot: podstuck
/// confined by an AppArmor profile like the runtimes' default one
/// (ptrace reads of its own profile only), and what it says of the
/// holders it may not read. One kernel: Debian's own, where AppArmor is on
/// by default as on Debian and Ubuntu nodes.
const APPARMOR_SCENARIO: &str = "apparmor";

/// The scenarios of 5.10's third boot, with cgroup v1 hierarchies and no
/// cgroup2 (EKS's AL2, RHEL 8): a short-lived process of a pod tied to it by
/// the cgroup the kernel read, on a node whose CPUs are all busy (the pod
/// one of 21 made before podstuck starts), with `--pod` and node-wide, and a pod frozen by the v1 freezer as one
/// `cgroup-busy` finding whose fix frees all its cgroups; then, with the
/// hierarchies remounted in each layout a v1 node has (every controller
/// as systemd mounts them on RHEL 8 and AL2, a subset, systemd's named
/// hierarchy and one controller), a pod made before podstuck starts whose
/// short-lived caller a node-wide watch ties to it. And a raw block volume's
/// mapping held by a device-mapper device on kubelet's loop device (this
/// machine's own kernel has no device mapper): one `block-volume-held`
/// finding whose fix frees it. And a pod's volume on a multipath map that
/// lost its only path and queues its I/O, a reader of it in D: one
/// `volume-device-lost` finding whose fix fails the queued I/O, after
/// which the volume unmounts.
const CGROUP_V1_SCENARIOS: [&str; 11] = [
    "check",
    "v1-busy-node",
    "v1-identity",
    "v1-identity-node",
    "v1-cgroup-busy",
    "v1-pod-before-rhel8",
    "v1-pod-before-subset",
    "v1-pod-before-one",
    "block-volume-dm",
    "volume-device-lost",
    "attach",
];

/// The scenarios of `cargo xtask bench`'s boot: check, then the storm's
/// timings (BENCH lines).
const BENCH_SCENARIOS: [&str; 2] = ["check", "bench"];

/// One boot of a kernel: its whole suite, the lockdown one, or the bench's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Suite {
    Full,
    /// The whole suite again with every watch held to the syscall
    /// tracepoints: the plan of arm64 nodes before 6.4 and of kernels that
    /// refuse trampolines, on the kernels (5.7 to 6.0) that print a WARNING
    /// for a tracepoint program's map without prealloc.
    Tracepoint,
    Lockdown,
    /// cgroup v1 instead of cgroup2 (`CGROUP_V1_SCENARIOS`).
    CgroupV1,
    /// Paired rounds removing `dirs` directories (see `bench_boots`).
    Bench {
        dirs: usize,
        rounds: usize,
    },
}

impl Suite {
    /// Every scenario this boot of `kernel` reports, in order.
    fn expected(self, kernel: &Kernel) -> Vec<&'static str> {
        let mut scenarios = self.scenarios().to_vec();
        if self.confines_with_apparmor(kernel) {
            // Before `attach`, the last row of the suite.
            scenarios.insert(scenarios.len() - 1, APPARMOR_SCENARIO);
        }
        scenarios
    }

    /// Whether this boot runs the AppArmor scenario (`APPARMOR_SCENARIO`).
    fn confines_with_apparmor(self, kernel: &Kernel) -> bool {
        self == Suite::Full && kernel.target == Arch::X86_64 && kernel.spec.choice == KernelChoice::V6_1
    }

    fn scenarios(self) -> &'static [&'static str] {
        match self {
            Suite::Full | Suite::Tracepoint => &SCENARIOS,
            Suite::Lockdown => &LOCKDOWN_SCENARIOS,
            Suite::CgroupV1 => &CGROUP_V1_SCENARIOS,
            Suite::Bench { .. } => &BENCH_SCENARIOS,
        }
    }

    /// QEMU's `-accel`. Debian's 6.12 oopsed on an `int3` already patched
    /// away (`Oops: int3` at `sched_clock_tick+0x5` during boot, whose
    /// code bytes showed the NOP back in place; and inside perf_event_open
    /// enabling the syscall tracepoints): one vCPU ran a translation of
    /// kernel text that another vCPU's thread had just rewritten with
    /// text_poke_bp, the cross-modifying code multi-threaded TCG gets wrong
    /// now and then (twice here lately: a CI run's boot, a bench boot).
    /// With `thread=single` both vCPUs take turns on one host thread and
    /// see every write before they run again; 6.12's suite took 130 s
    /// (133 s before), the whole matrix 418 s.
    /// The bench keeps `thread=multi`: its rows time a removal while the
    /// collector runs beside it, as on a node's second CPU.
    fn accel(self) -> &'static str {
        match self {
            Suite::Full | Suite::Tracepoint | Suite::Lockdown | Suite::CgroupV1 => "tcg,thread=single",
            Suite::Bench { .. } => "tcg,thread=multi",
        }
    }

    /// The guest kernel's command line: the console, and what /init is to
    /// run and expect there (`podstuck_vm.*`).
    fn kernel_command_line(self, kernel: &Kernel) -> String {
        let console = format!("console={} panic=-1", guest::console(kernel.target));
        let (attach, walk) = (guest::expect_attach(kernel.spec, kernel.target), kernel.spec.expect_walk);
        let apparmor = if self.confines_with_apparmor(kernel) { " podstuck_vm.apparmor=1" } else { "" };
        match self {
            Suite::Full => {
                format!("{console} podstuck_vm.expect_attach={attach} podstuck_vm.expect_walk={walk}{apparmor}")
            }
            Suite::Tracepoint => format!(
                "{console} podstuck_vm.attach=tracepoint podstuck_vm.expect_attach=tracepoint podstuck_vm.expect_walk={walk}"
            ),
            // Each of these kernels refuses, at load, programs that may read
            // kernel memory: podstuck must say so in one sentence.
            Suite::Lockdown => format!(
                "{console} lockdown=confidentiality podstuck_vm.suite=lockdown podstuck_vm.expect_attach=none podstuck_vm.expect_walk=none"
            ),
            // Debian's older kernels leave the memory controller off unless asked.
            Suite::CgroupV1 => format!(
                "{console} cgroup_enable=memory podstuck_vm.suite=cgroup-v1 podstuck_vm.expect_attach={attach} podstuck_vm.expect_walk={walk}"
            ),
            Suite::Bench { dirs, rounds } => format!(
                "{console} podstuck_vm.suite=bench podstuck_vm.bench_dirs={dirs} podstuck_vm.bench_rounds={rounds} podstuck_vm.expect_attach={attach}"
            ),
        }
    }

    /// How long the boot takes, roughly, to start the longest first.
    fn length(self) -> u8 {
        match self {
            Suite::Full | Suite::Tracepoint | Suite::Bench { .. } => 2,
            Suite::Lockdown | Suite::CgroupV1 => 1,
        }
    }

    /// Its name in the table and the console log's file name.
    fn label(self, kernel: &str) -> String {
        match self {
            Suite::Full => kernel.to_string(),
            Suite::Tracepoint => format!("{kernel}-tracepoint"),
            Suite::Lockdown => format!("{kernel}-lockdown"),
            Suite::CgroupV1 => format!("{kernel}-cgroup-v1"),
            Suite::Bench { .. } => format!("{kernel}-bench"),
        }
    }
}

/// The guest CPU: QEMU's TCG `max` without CMPXCHG16B. With it, Debian's
/// 6.12 crashed in each of 6 runs under this machine's QEMU 7.2, 3 to 90 s
/// after boot, with `thread=multi` or `single`, `-cpu max` or Haswell, with
/// or without LA57: double faults in SLUB's per-CPU fast path
/// (`__kmalloc_noprof`, right after its `cmpxchg16b %gs:(%rsi)`, EFLAGS
/// holding RAX's low bits: a flags bug of the emulator, by the look of it),
/// or NULL dereferences in the maple tree and ext4, as after a corrupted
/// freelist. Without cx16 the kernel takes SLUB's locked path, and all
/// three kernels ran clean every time; 5.10 and 6.1 ran clean either way.
const QEMU_CPU: &str = "max,cx16=off";

/// Modules the scenarios need (the loop device under /var/tmp's ext4,
/// FUSE for the hung call, the device mapper for a block volume's holder,
/// its multipath target and path selector for a volume's lost device),
/// by kernel config symbol: loaded in /init where the kernel has them as
/// modules.
const MODULES: [(&str, &str); 5] = [
    ("loop", "CONFIG_BLK_DEV_LOOP"),
    ("fuse", "CONFIG_FUSE_FS"),
    ("dm_mod", "CONFIG_BLK_DEV_DM"),
    ("dm_multipath", "CONFIG_DM_MULTIPATH"),
    ("dm_round_robin", "CONFIG_DM_MULTIPATH"),
];

/// Seconds one kernel's boot and scenarios may take before QEMU is
/// killed: some three times what a whole-suite boot takes here.
const BOOT_TIMEOUT_S: u64 = 420;

#[derive(clap::Args, Clone, Debug)]
pub struct VmArgs {
    /// Which kernel to boot: 5.10 (bullseye), 6.1 (bookworm), 6.12 (trixie), or all three.
    #[arg(long, value_enum, default_value = "all")]
    kernel: KernelChoice,
    /// Seconds one kernel's boot and scenarios may take before QEMU is killed.
    #[arg(long, default_value_t = BOOT_TIMEOUT_S)]
    timeout: u64,
    /// Which boots of each kernel (repeatable; default: every boot the kernel has): the whole suite,
    /// the whole suite on the syscall tracepoints (5.10), lockdown=confidentiality, cgroup v1 (5.10);
    /// arm64 guests boot the whole suite only.
    #[arg(long, value_enum)]
    boot: Vec<Boot>,
    /// The guests' architecture: amd64 (qemu-system-x86_64) or arm64 (qemu-system-aarch64, podstuck
    /// and the test helpers cross-built) [default: this machine's].
    #[arg(long, value_parser = crate::cross::parse_arch)]
    arch: Option<Arch>,
}

/// A boot of `--boot`, by the name of its console log's suffix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Boot {
    Full,
    Tracepoint,
    Lockdown,
    CgroupV1,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum KernelChoice {
    #[value(name = "5.10")]
    V5_10,
    #[value(name = "6.1")]
    V6_1,
    #[value(name = "6.12")]
    V6_12,
    All,
}

/// One Debian kernel series.
struct KernelSpec {
    /// What `--kernel` calls it.
    name: &'static str,
    choice: KernelChoice,
    /// The Debian suite whose newest cloud kernel of the series is taken.
    suite: &'static str,
    /// Its version in `apt-cache search` patterns (`guest::kernel_pattern`).
    series: &'static str,
    /// Where podstuck should attach there ("any": no expectation yet).
    expect_attach: &'static str,
    /// The same on Debian's arm64 build of the series.
    expect_attach_arm64: &'static str,
    /// How it should walk a relative path's base directory: bpf_loop
    /// arrived in 5.17.
    expect_walk: &'static str,
}

const KERNELS: [KernelSpec; 3] = [
    // 5.10 has fentry (BPF trampolines) but no bpf_loop. On arm64,
    // trampolines need direct calls (6.4): 5.10 and 6.1 run on the
    // syscall tracepoints there.
    KernelSpec {
        name: "5.10",
        choice: KernelChoice::V5_10,
        suite: "bullseye",
        series: r"5\.10",
        expect_attach: "fentry",
        expect_attach_arm64: "tracepoint",
        expect_walk: "unrolled",
    },
    KernelSpec {
        name: "6.1",
        choice: KernelChoice::V6_1,
        suite: "bookworm",
        series: r"6\.1",
        expect_attach: "fentry",
        expect_attach_arm64: "tracepoint",
        expect_walk: "bpf_loop",
    },
    KernelSpec {
        name: "6.12",
        choice: KernelChoice::V6_12,
        suite: "trixie",
        series: r"6\.12",
        expect_attach: "fentry",
        expect_attach_arm64: "fentry",
        expect_walk: "bpf_loop",
    },
];

/// A kernel package unpacked on the host.
struct Kernel {
    spec: &'static KernelSpec,
    /// The architecture it was built for.
    target: Arch,
    /// Its name under target/vm and in the table (`guest::tag`).
    tag: String,
    /// The package it came from (name and version).
    package: String,
    /// `uname -r`.
    release: String,
    vmlinuz: PathBuf,
    config: String,
    /// Its lib/modules/<release>.
    modules: PathBuf,
}

fn vm_dir() -> PathBuf {
    workspace_root().join("target/vm")
}

pub fn vm_test(args: &VmArgs) -> Result<()> {
    let (passed, failed) = run_matrix(args)?;
    if failed > 0 {
        bail!("{failed} of {} VM scenarios failed", passed + failed);
    }
    Ok(())
}

/// What `cargo xtask test` boots: every kernel and boot, the default
/// timeout, amd64 guests then arm64 ones (podstuck cross-built for them):
/// (passed, failed). Both matrices are prepared (their builds) before any
/// guest boots, so no build competes with a guest for the CPU. A matrix
/// that could not run at all is said, and counts as one failure.
pub fn run_every_matrix() -> (usize, usize) {
    let mut failed = 0;
    let mut matrices = Vec::new();
    for target in Arch::ALL {
        let args = VmArgs { kernel: KernelChoice::All, timeout: BOOT_TIMEOUT_S, boot: Vec::new(), arch: Some(target) };
        match plan(&args) {
            Ok(matrix) => matrices.push(matrix),
            Err(e) => {
                say(&format!("the {} VM matrix could not run: {e:#}", target.debian_arch()));
                failed += 1;
            }
        }
    }
    let started = Instant::now();
    let mut runs = Vec::new();
    for matrix in &matrices {
        match boot_in_lanes(matrix, Duration::from_secs(BOOT_TIMEOUT_S)) {
            Ok(booted) => runs.extend(booted),
            Err(e) => {
                say(&format!("the {} VM matrix could not run: {e:#}", matrix.target.debian_arch()));
                failed += 1;
            }
        }
    }
    let (passed, failed_scenarios) = report(&runs, started);
    (passed, failed + failed_scenarios)
}

/// Boots the kernels asked for and runs the scenarios in each: (passed,
/// failed) scenario results; Err when the matrix could not run at all.
pub fn run_matrix(args: &VmArgs) -> Result<(usize, usize)> {
    let matrix = plan(args)?;
    let started = Instant::now();
    let runs = boot_in_lanes(&matrix, Duration::from_secs(args.timeout))?;
    Ok(report(&runs, started))
}

/// A matrix ready to boot: its kernels with their initramfs, and the boots
/// to make, in the table's order.
struct Matrix {
    target: Arch,
    kernels: Vec<(Kernel, PathBuf)>,
    /// (index into `kernels`, suite).
    boots: Vec<(usize, Suite)>,
}

/// Prepares the kernels asked for (`prepare`, then each one's initramfs)
/// and lists the boots each makes.
fn plan(args: &VmArgs) -> Result<Matrix> {
    if !is_root() {
        bail!("the VM test installs Debian packages and builds an initramfs with device nodes: run it as root (sudo -E cargo xtask vm-test)");
    }
    let target = match args.arch {
        Some(target) => target,
        None => Arch::HOST,
    };
    // The amd64 guests' other boots (tracepoint, lockdown, cgroup v1) are
    // about the kernel, not the architecture; on arm64 5.10 and 6.1 the
    // whole suite already runs on the tracepoints.
    let amd64 = target == Arch::X86_64;
    if !amd64 && args.boot.iter().any(|b| *b != Boot::Full) {
        bail!("arm64 guests boot the whole suite only (--boot full)");
    }
    let specs: Vec<&'static KernelSpec> =
        KERNELS.iter().filter(|k| args.kernel == KernelChoice::All || k.choice == args.kernel).collect();
    let started = Instant::now();
    let (prepared, common) = prepare(&specs, target)?;
    let wanted = |boot: Boot| args.boot.is_empty() || args.boot.contains(&boot);
    let mut kernels = Vec::new();
    let mut boots = Vec::new();
    for kernel in prepared {
        let initrd = kernel_initramfs(&kernel, &common)?;
        let old = kernel.spec.choice == KernelChoice::V5_10;
        let suites = [
            (Boot::Full, Suite::Full, true),
            // The tracepoint plan where its maps could make the kernel WARN
            // (5.7 to 6.0). The first kernel without that check, 6.1, runs
            // the whole suite on the tracepoints in arm64's matrix (no
            // fentry there before 6.4).
            (Boot::Tracepoint, Suite::Tracepoint, amd64 && old),
            (Boot::Lockdown, Suite::Lockdown, amd64),
            // The v1 node shape on the kernel of the nodes that have it (EKS's AL2).
            (Boot::CgroupV1, Suite::CgroupV1, amd64 && old),
        ];
        for (boot, suite, here) in suites {
            if here && wanted(boot) {
                boots.push((kernels.len(), suite));
            }
        }
        kernels.push((kernel, initrd));
    }
    say(&format!(
        "prepared in {:.0} s; {} boots of {} ({}), {} at a time",
        started.elapsed().as_secs_f64(),
        boots.len(),
        specs.iter().map(|k| k.name).collect::<Vec<_>>().join(", "),
        target.debian_arch(),
        lanes(target)
    ));
    Ok(Matrix { target, kernels, boots })
}

/// How many guests of `target` boot at once. An amd64 guest runs in
/// single-threaded TCG (`Suite::accel`), one host core at most, so one
/// guest per core: two cores boot the amd64 matrix in about half the time,
/// and no guest runs slower for it. An arm64 guest's TCG is multi-threaded
/// (both of its vCPUs busy on a storm), and its scenarios are already the
/// slowest: one per two cores, so it is never starved.
fn lanes(target: Arch) -> usize {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let lanes = match target {
        Arch::X86_64 => cores,
        Arch::Aarch64 => cores / 2,
    };
    // Each guest holds 2 GB.
    lanes.clamp(1, 4)
}

/// Boots every boot of `matrix`, `lanes` at a time, the longest first so
/// the lanes end together; the runs come back in the matrix's order.
fn boot_in_lanes(matrix: &Matrix, timeout: Duration) -> Result<Vec<BootRun>> {
    let mut order: Vec<usize> = (0..matrix.boots.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(matrix.boots[i].1.length()));
    let queue = std::sync::Mutex::new(order.into_iter());
    let done: std::sync::Mutex<Vec<Option<Result<BootRun>>>> =
        std::sync::Mutex::new((0..matrix.boots.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..lanes(matrix.target).min(matrix.boots.len()) {
            scope.spawn(|| loop {
                let next = queue.lock().expect("no lane panics holding the queue").next();
                let Some(i) = next else { break };
                let (k, suite) = matrix.boots[i];
                let (kernel, initrd) = &matrix.kernels[k];
                let run = boot_once_more_if_crashed(kernel, suite, initrd, timeout);
                done.lock().expect("no lane panics holding the results")[i] = Some(run);
            });
        }
    });
    done.into_inner()
        .expect("every lane ended")
        .into_iter()
        .map(|run| run.unwrap_or_else(|| Err(anyhow::anyhow!("a boot was never made"))))
        .collect()
}

/// Prints the table and the totals of `runs`: (passed, failed).
fn report(runs: &[BootRun], started: Instant) -> (usize, usize) {
    print_table(runs);
    let (passed, failed, retried) = totals(runs);
    let again = match retried {
        0 => String::new(),
        n => {
            format!("; {n} first boot(s) crashed as emulation does and were booted once more (RETRY rows, not counted)")
        }
    };
    println!("vm-test: {passed} passed, {failed} failed{again}");
    say(&format!("booted in {:.0} s; console logs in {}", started.elapsed().as_secs_f64(), vm_dir().display()));
    (passed, failed)
}

/// What the whole matrix needs from the network, for both architectures:
/// every kernel package and the arm64 guests' userland, fetched and
/// unpacked into the caches `run_matrix` then finds. `cargo xtask test`
/// runs this beside its builds, so the downloads take no time of their
/// own; the Debian packages (`host_packages`) are installed first, by the
/// caller, since apt takes one install at a time.
pub fn prefetch() -> Result<()> {
    for target in Arch::ALL {
        for spec in &KERNELS {
            fetch_kernel(spec, target)?;
        }
        guest::Userland::prepare(target)?;
    }
    Ok(())
}

/// The Debian packages the matrix needs on this machine, both architectures.
pub fn install_host_packages() -> Result<()> {
    for target in Arch::ALL {
        install(guest::host_packages(target))?;
    }
    Ok(())
}

/// Installs what the host needs, fetches the kernels, builds podstuck and
/// the helpers in release for `target` and the initramfs they share.
fn prepare(specs: &[&'static KernelSpec], target: Arch) -> Result<(Vec<Kernel>, PathBuf)> {
    setup()?;
    install(guest::host_packages(target))?;
    let kernels = specs.iter().map(|spec| fetch_kernel(spec, target)).collect::<Result<Vec<_>>>()?;
    let podstuck = build_release_for(target, "podstuck-user", &["podstuck"])?;
    let helpers = build_release_helpers(target)?;
    let userland = guest::Userland::prepare(target)?;
    let common = build_common_initramfs(&userland, target, &podstuck[0], &helpers[0], &helpers[1])?;
    Ok((kernels, common))
}

/// The kernels `cargo xtask bench --vm-kernels` may name: amd64's by
/// their series, arm64's as `arm64-<series>` (`guest::tag`).
pub fn bench_kernel_names() -> Vec<String> {
    Arch::ALL.iter().flat_map(|&t| KERNELS.iter().map(move |k| guest::tag(t, k.name))).collect()
}

/// One removal the guest timed in `cargo xtask bench`'s boot.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchLine {
    /// untraced, floor-tracepoint, floor-fentry, podstuck-tracepoint, podstuck-fentry.
    pub variant: String,
    pub round: usize,
    /// Wall time of the removal (the guest's clock, 10 ms steps).
    pub seconds: f64,
    /// The unlinkat programs' run time per call (BPF statistics), 0 untraced.
    pub kernel_ns: f64,
    /// unlinkat calls the entry program saw, 0 untraced.
    pub calls: u64,
}

/// Parses `PODSTUCK-VM BENCH variant=<v> round=<r> seconds=<s> kernel_ns=<n> calls=<c>`.
fn parse_bench(line: &str) -> Option<BenchLine> {
    let rest = &line[line.find("PODSTUCK-VM BENCH ")? + "PODSTUCK-VM BENCH ".len()..];
    let field = |name: &str| rest.split_whitespace().find_map(|w| w.strip_prefix(name)?.strip_prefix('='));
    Some(BenchLine {
        variant: field("variant")?.to_string(),
        round: field("round")?.parse().ok()?,
        seconds: field("seconds")?.parse().ok()?,
        kernel_ns: field("kernel_ns")?.parse().ok()?,
        calls: field("calls")?.parse().ok()?,
    })
}

/// What one kernel's bench boot measured.
pub struct KernelBench {
    /// `--vm-kernels`' name of it (5.10, 6.1, 6.12, arm64-6.12...).
    pub kernel: String,
    /// `uname -r`.
    pub release: String,
    /// The removals timed, in the guest's order.
    pub lines: Vec<BenchLine>,
    /// Scenarios (check, bench) that failed, with what they said.
    pub failures: Vec<String>,
}

/// `cargo xtask bench`'s fentry rows: boots each named kernel once in
/// QEMU (TCG: emulated, so only ratios within one boot mean anything) and
/// times `rounds` paired rounds of GNU `rm -rf` of `dirs` directories on
/// the guest's tmpfs: untraced, under the do-nothing pairs on the syscall
/// tracepoints and on fentry, under `podstuck watch` attached each way
/// (the tracepoints only, on a kernel without fentry: arm64 before 6.4).
pub fn bench_boots(kernels: &[String], dirs: usize, rounds: usize) -> Result<Vec<KernelBench>> {
    if !is_root() {
        bail!("the VM rows of the bench build an initramfs with device nodes: run it as root");
    }
    let suite = Suite::Bench { dirs, rounds };
    // Under TCG a removal of 20,000 directories takes seconds and a start
    // of podstuck several: five a round, plus the boot.
    let timeout = Duration::from_secs(120 + (rounds * 5) as u64 * (30 + dirs as u64 / 500));
    let mut out = Vec::new();
    // amd64's kernels, then arm64's, each architecture's userland built once.
    for target in Arch::ALL {
        let specs: Vec<&'static KernelSpec> =
            KERNELS.iter().filter(|k| kernels.contains(&guest::tag(target, k.name))).collect();
        if specs.is_empty() {
            continue;
        }
        let (fetched, common) = prepare(&specs, target)?;
        for kernel in &fetched {
            let initrd = kernel_initramfs(kernel, &common)?;
            let run = boot_once_more_if_crashed(kernel, suite, &initrd, timeout)?;
            // A retried first boot's timings are not used: only the second's.
            let said: Vec<String> =
                run.results.iter().filter(|o| !o.passed()).map(|o| format!("{}: {}", o.scenario, o.detail)).collect();
            out.push(KernelBench {
                kernel: guest::tag(target, kernel.spec.name),
                release: kernel.release.clone(),
                lines: run.bench,
                failures: said,
            });
        }
    }
    Ok(out)
}

// --- kernels ----------------------------------------------------------------

/// The digit runs of a package name, to compare kernel ABIs
/// (5.10.0-32 > 5.10.0-30, 6.12.107+deb13 > 6.12.94+deb13).
fn version_key(name: &str) -> Vec<u64> {
    name.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty()).map(|s| s.parse().unwrap_or(0)).collect()
}

/// The kernel of this series for `target`, from the cache or downloaded
/// and unpacked.
fn fetch_kernel(spec: &'static KernelSpec, target: Arch) -> Result<Kernel> {
    let tag = guest::tag(target, spec.name);
    let dir = vm_dir().join("kernels").join(&tag);
    let pkg = dir.join("pkg");
    if let Ok(kernel) = unpacked_kernel(spec, target, &dir) {
        say(&format!("kernel {tag}: {} (cached in {})", kernel.package, dir.display()));
        return Ok(kernel);
    }
    let options = debian::suite_view(spec.suite, target)?;
    let pattern = guest::kernel_pattern(spec, target);
    let found = Command::new("apt-cache").args(&options).args(["search", "--names-only", &pattern]).output()?;
    let mut names: Vec<String> = String::from_utf8_lossy(&found.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.ends_with(&guest::kernel_suffix(target)))
        .map(str::to_string)
        .collect();
    names.sort_by_key(|n| version_key(n));
    let Some(name) = names.last() else {
        bail!("no {pattern} package in Debian {}", spec.suite);
    };
    say(&format!("kernel {tag}: downloading {name}"));
    let debs = debian::unpack(&options, std::slice::from_ref(name), &dir, &pkg)?;
    let version = debs[0].split('_').nth(1).unwrap_or("?").to_string();
    std::fs::write(dir.join("package"), format!("{name} {version}\n"))?;
    let kernel = unpacked_kernel(spec, target, &dir)?;
    say(&format!("kernel {tag}: {} unpacked in {}", kernel.package, dir.display()));
    Ok(kernel)
}

/// The kernel unpacked under `dir` (its pkg/ and package files).
fn unpacked_kernel(spec: &'static KernelSpec, target: Arch, dir: &Path) -> Result<Kernel> {
    let package = std::fs::read_to_string(dir.join("package"))?.trim().to_string();
    let pkg = dir.join("pkg");
    let vmlinuz = std::fs::read_dir(pkg.join("boot"))?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().and_then(|f| f.to_str()).is_some_and(|f| f.starts_with("vmlinuz-")))
        .context("no boot/vmlinuz-* in the package")?;
    let release = vmlinuz.file_name().unwrap().to_str().unwrap().trim_start_matches("vmlinuz-").to_string();
    let config = std::fs::read_to_string(pkg.join("boot").join(format!("config-{release}")))?;
    let modules = ["lib/modules", "usr/lib/modules"]
        .iter()
        .map(|m| pkg.join(m).join(&release))
        .find(|m| m.is_dir())
        .context("no lib/modules/<release> in the package")?;
    Ok(Kernel { spec, target, tag: guest::tag(target, spec.name), package, release, vmlinuz, config, modules })
}

/// `CONFIG_X`'s value in a kernel config ("y", "m"), if set.
fn config_value<'a>(config: &'a str, symbol: &str) -> Option<&'a str> {
    config.lines().find_map(|l| l.strip_prefix(symbol).and_then(|rest| rest.strip_prefix('=')))
}

/// Every module file under a modules directory, by module name.
fn module_files(dir: &Path) -> std::collections::BTreeMap<String, PathBuf> {
    let mut found = std::collections::BTreeMap::new();
    let mut stack = vec![dir.join("kernel")];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Some(file) = path.file_name().and_then(|f| f.to_str()) {
                if let Some(stem) = [".ko", ".ko.xz", ".ko.zst", ".ko.gz"].iter().find_map(|s| file.strip_suffix(s)) {
                    found.insert(stem.replace('-', "_"), path.clone());
                }
            }
        }
    }
    found
}

/// A module file's contents, uncompressed (busybox insmod takes plain .ko).
fn module_bytes(path: &Path) -> Result<Vec<u8>> {
    let name = path.to_string_lossy();
    let tool = if name.ends_with(".xz") {
        "xz"
    } else if name.ends_with(".zst") {
        "zstd"
    } else if name.ends_with(".gz") {
        "gzip"
    } else {
        return std::fs::read(path).with_context(|| format!("reading {name}"));
    };
    let out = Command::new(tool).arg("-dc").arg(path).output().with_context(|| format!("running {tool} -dc {name}"))?;
    if !out.status.success() {
        bail!("{tool} -dc {name} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(out.stdout)
}

/// The `depends=` of a module's .modinfo section.
fn module_depends(ko: &[u8]) -> Vec<String> {
    let key = b"depends=";
    let Some(at) = ko.windows(key.len()).position(|w| w == key) else { return Vec::new() };
    let rest = &ko[at + key.len()..];
    let end = rest.iter().position(|b| *b == 0).unwrap_or(0);
    String::from_utf8_lossy(&rest[..end]).split(',').filter(|s| !s.is_empty()).map(|s| s.replace('-', "_")).collect()
}

/// The modules of [`MODULES`] this kernel has as modules (not built in),
/// with what they depend on, dependencies first: (name, plain .ko bytes).
fn modules_to_load(kernel: &Kernel) -> Result<Vec<(String, Vec<u8>)>> {
    let files = module_files(&kernel.modules);
    let mut order: Vec<(String, Vec<u8>)> = Vec::new();
    fn add(
        name: &str,
        files: &std::collections::BTreeMap<String, PathBuf>,
        order: &mut Vec<(String, Vec<u8>)>,
        depth: usize,
    ) -> Result<()> {
        if order.iter().any(|(n, _)| n == name) {
            return Ok(());
        }
        if depth > 16 {
            bail!("module dependencies of {name} loop");
        }
        let path = files.get(name).with_context(|| format!("module {name} is not in the package"))?;
        let bytes = module_bytes(path)?;
        for dep in module_depends(&bytes) {
            add(&dep, files, order, depth + 1)?;
        }
        order.push((name.to_string(), bytes));
        Ok(())
    }
    for (module, symbol) in MODULES {
        match config_value(&kernel.config, symbol) {
            Some("y") => {}
            Some("m") => add(module, &files, &mut order, 0)?,
            other => bail!("kernel {}: {symbol} is {other:?}: the scenarios need it", kernel.release),
        }
    }
    Ok(order)
}

// --- the initramfs ----------------------------------------------------------

/// Copies `from` to `root` + `at` (following symlinks), with its libraries
/// where the guest's loader finds them.
fn put_binary(userland: &guest::Userland, root: &Path, from: &Path, at: &str) -> Result<()> {
    let dest = root.join(at.trim_start_matches('/'));
    std::fs::create_dir_all(dest.parent().unwrap())?;
    std::fs::copy(from, &dest).with_context(|| format!("copying {} into the initramfs", from.display()))?;
    for (lib, at) in userland.libraries(from)? {
        let dest = root.join(at.strip_prefix("/").unwrap());
        if !dest.exists() {
            std::fs::create_dir_all(dest.parent().unwrap())?;
            std::fs::copy(&lib, &dest).with_context(|| format!("copying {} into the initramfs", lib.display()))?;
        }
    }
    Ok(())
}

/// `find . | cpio -o -H newc | gzip` of a directory, as root-owned files.
fn cpio_gz(dir: &Path, out: &Path) -> Result<()> {
    let script = "find . -print0 | LC_ALL=C sort -z | cpio --null --create --format=newc --quiet --owner=0:0 | gzip -6";
    let file = std::fs::File::create(out)?;
    run(Command::new("sh").args(["-c", script]).current_dir(dir).stdout(file))
}

/// The initramfs every kernel of an architecture shares: busybox (its
/// applets linked by /init), the binaries under test with their libraries,
/// the tools, /init.
fn build_common_initramfs(
    userland: &guest::Userland,
    target: Arch,
    podstuck: &Path,
    actor: &Path,
    fuse_server: &Path,
) -> Result<PathBuf> {
    let name = guest::tag(target, "common");
    let root = vm_dir().join("initramfs").join(&name);
    let _ = std::fs::remove_dir_all(&root);
    let dirs =
        ["proc", "sys", "dev", "tmp", "run", "var/tmp", "root", "etc", "mnt", "bin", "sbin", "usr/bin", "usr/sbin"];
    for d in dirs {
        std::fs::create_dir_all(root.join(d))?;
    }
    // The console the kernel opens for /init before /dev is mounted.
    let console = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(root.join("dev/console").as_os_str()))?;
    // SAFETY: mknod with a valid C path.
    if unsafe { libc::mknod(console.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(5, 1)) } != 0 {
        bail!("mknod dev/console: {}", std::io::Error::last_os_error());
    }
    // busybox and the shell /init is run by; /init links the other applets
    // (`busybox --install -s`): busybox lists them itself, and a foreign
    // one cannot run here.
    put_binary(userland, &root, &userland.program("busybox")?, "/bin/busybox")?;
    std::os::unix::fs::symlink("/bin/busybox", root.join("bin/sh"))?;
    put_binary(userland, &root, podstuck, "/usr/bin/podstuck")?;
    put_binary(userland, &root, actor, "/usr/bin/actor")?;
    put_binary(userland, &root, fuse_server, "/usr/bin/fuse_server")?;
    put_binary(userland, &root, &userland.program("mkfs.ext4")?, "/sbin/mkfs.ext4")?;
    put_binary(userland, &root, &userland.program("chattr")?, "/usr/bin/chattr")?;
    put_binary(userland, &root, &userland.program("lsattr")?, "/usr/bin/lsattr")?;
    put_binary(userland, &root, &userland.program("bpftool")?, "/usr/sbin/bpftool")?;
    // A device-mapper device over a loop device (amd64's cgroup v1 boot;
    // an arm64 guest runs no scenario that needs one).
    if target == Arch::X86_64 {
        put_binary(userland, &root, &userland.program("dmsetup")?, "/usr/sbin/dmsetup")?;
    }
    // The AppArmor scenario's policy compiler (amd64 guests only).
    if let Some(parser) = guest::apparmor_parser(target)? {
        put_binary(userland, &root, &parser, "/sbin/apparmor_parser")?;
    }
    // GNU rm: rm -rf removes with unlinkat(dirfd, name, AT_REMOVEDIR), as on
    // a real node (busybox rm calls rmdir).
    put_binary(userland, &root, &userland.program("rm")?, "/usr/local/bin/gnu-rm")?;
    if let Some(conf) = userland.config_file("/etc/mke2fs.conf") {
        std::fs::copy(conf, root.join("etc/mke2fs.conf"))?;
    }
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n")?;
    std::fs::write(root.join("etc/group"), "root:x:0:\n")?;
    let init = root.join("init");
    std::fs::write(&init, INIT)?;
    std::fs::set_permissions(&init, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let out = vm_dir().join("initramfs").join(format!("{name}.cpio.gz"));
    cpio_gz(&root, &out)?;
    say(&format!("initramfs: {} ({} KiB)", out.display(), std::fs::metadata(&out)?.len() / 1024));
    Ok(out)
}

/// The common initramfs followed by this kernel's modules (the kernel
/// unpacks concatenated archives in order).
fn kernel_initramfs(kernel: &Kernel, common: &Path) -> Result<PathBuf> {
    let root = vm_dir().join("initramfs").join(format!("modules-{}", kernel.tag));
    let _ = std::fs::remove_dir_all(&root);
    let dir = root.join("lib/modules/podstuck-vm");
    std::fs::create_dir_all(&dir)?;
    let modules = modules_to_load(kernel)?;
    let mut order = String::new();
    for (name, bytes) in &modules {
        std::fs::write(dir.join(format!("{name}.ko")), bytes)?;
        order.push_str(name);
        order.push('\n');
    }
    std::fs::write(dir.join("order"), order)?;
    let part = vm_dir().join("initramfs").join(format!("modules-{}.cpio.gz", kernel.tag));
    cpio_gz(&root, &part)?;
    let initrd = vm_dir().join(format!("initrd-{}.gz", kernel.tag));
    let mut all = std::fs::read(common)?;
    all.extend(std::fs::read(&part)?);
    std::fs::write(&initrd, all)?;
    let names: Vec<&str> = modules.iter().map(|(n, _)| n.as_str()).collect();
    say(&format!(
        "kernel {}: {}, modules to load: {}",
        kernel.tag,
        kernel.release,
        if names.is_empty() { "none (built in)".to_string() } else { names.join(", ") }
    ));
    Ok(initrd)
}

// --- booting ----------------------------------------------------------------

/// The row every boot gets for its console as a whole: PASS when the guest
/// kernel reported nothing wrong from power-on to power-off.
const KERNEL_LOG: &str = "kernel-log";

/// What one row of the table says, and how it counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Pass,
    Fail,
    /// A first boot that crashed in a way emulation does (see
    /// `retry_reason`) and was booted once more: shown, counted neither as
    /// passed nor failed; its scenarios' failures count in the second
    /// boot's rows.
    Retried,
}

impl Verdict {
    fn word(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Retried => "RETRY",
        }
    }
}

/// One scenario's line.
#[derive(Clone, Debug)]
struct Outcome {
    scenario: String,
    verdict: Verdict,
    /// False for a scenario the guest never reported (it crashed, hung or
    /// ended first): failed, with why.
    reported: bool,
    attach: String,
    walk: String,
    detail: String,
}

impl Outcome {
    /// A row about the boot as a whole (the kernel's log), not a scenario.
    fn kernel_log(verdict: Verdict, detail: String) -> Outcome {
        Outcome { scenario: KERNEL_LOG.into(), verdict, reported: true, attach: "-".into(), walk: "-".into(), detail }
    }

    fn passed(&self) -> bool {
        self.verdict == Verdict::Pass
    }
}

/// What one kernel's boot gave.
struct BootRun {
    kernel: String,
    release: String,
    /// The suite's scenarios in order, then `KERNEL_LOG`; after a retry,
    /// the first boot's `KERNEL_LOG` row (`Verdict::Retried`) before them.
    results: Vec<Outcome>,
    /// The bench boot's timed removals.
    bench: Vec<BenchLine>,
    /// Why the guest may be booted once more (`retry_reason`), if it crashed.
    retry: Option<String>,
    /// The console log this boot wrote.
    console: PathBuf,
    wall: Duration,
}

/// Parses `PODSTUCK-VM RESULT <scenario> PASS|FAIL attach=<a> walk=<w> <detail>`.
fn parse_result(line: &str) -> Option<Outcome> {
    let rest = line[line.find("PODSTUCK-VM RESULT ")?..].strip_prefix("PODSTUCK-VM RESULT ")?;
    let mut words = rest.splitn(5, ' ');
    let scenario = words.next()?.to_string();
    let verdict = if words.next()? == "PASS" { Verdict::Pass } else { Verdict::Fail };
    let attach = words.next()?.strip_prefix("attach=")?.to_string();
    let walk = words.next()?.strip_prefix("walk=")?.to_string();
    let detail = words.next().unwrap_or("").trim().to_string();
    Some(Outcome { scenario, verdict, reported: true, attach, walk, detail })
}

/// The text after a kernel console timestamp (`[   12.345678] `, and a
/// `[    T1] ` caller id after it on kernels built with one) at the start
/// of `s`.
fn after_timestamp(s: &str) -> Option<&str> {
    let s = s.strip_prefix('[')?.trim_start_matches(' ');
    let (secs, rest) = s.split_once('.')?;
    let (micros, rest) = rest.split_once(']')?;
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if !digits(secs) || micros.len() != 6 || !digits(micros) {
        return None;
    }
    if let Some(text) = rest.strip_prefix(' ') {
        return Some(text);
    }
    let (id, text) = rest.strip_prefix('[')?.trim_start_matches(' ').split_once("] ")?;
    (id.len() > 1 && (id.starts_with('T') || id.starts_with('C')) && digits(&id[1..])).then_some(text)
}

/// How the kernel begins the lines of its reports of something wrong.
const KERNEL_ERROR_STARTS: [&str; 17] = [
    // "Oops: 0000 [#1] ..." (6.x puts "Oops: " before every die header).
    "Oops",
    // "BUG: unable to handle page fault", "BUG: KASAN: ...", "BUG: scheduling while atomic".
    "BUG:",
    // SLUB's "BUG kmalloc-64 (Not tainted): Object already free".
    "BUG ",
    "kernel BUG at ",
    // "WARNING: CPU: 1 PID: 42 at fs/namei.c:4321 vfs_rmdir+0x1a/0x200", lockdep's and RCU's.
    "WARNING:",
    "Kernel panic",
    "general protection fault",
    "Call Trace:",
    "UBSAN:",
    // Soft and hard lockups.
    "watchdog: ",
    // The hung task detector ("INFO: task actor:311 blocked for more than 120 seconds.").
    "INFO: task ",
    // RCU stalls.
    "rcu: INFO: ",
    "list_add corruption",
    "list_del corruption",
    // arm64's die() header ("Internal error: Oops: 0000000096000005 [#1] SMP"),
    // its faults, and its stack dumps (lower-case "trace").
    "Internal error: ",
    "Unable to handle kernel ",
    "Call trace:",
];

/// Whether the text after a timestamp is the kernel saying something went
/// wrong: one of `KERNEL_ERROR_STARTS`, or die()'s header on kernels before
/// 6.x ("int3: 0000 [#1] SMP NOPTI", "invalid opcode: 0000 [#1] ...").
fn is_kernel_error(text: &str) -> bool {
    if KERNEL_ERROR_STARTS.iter().any(|start| text.starts_with(start)) {
        return true;
    }
    text.match_indices(" [#").any(|(at, _)| {
        let before = &text[..at];
        let code = before.get(before.len().saturating_sub(6)..).unwrap_or("");
        code.len() == 6
            && code.starts_with(": ")
            && code[2..].bytes().all(|b| b.is_ascii_hexdigit())
            && text[at + 3..].starts_with(|c: char| c.is_ascii_digit())
    })
}

/// A kernel report of something wrong in a console line: the line from
/// its timestamp on. Only timestamped lines count, wherever the timestamp
/// falls (a kernel line can land in the middle of one of the guest's, and
/// the_end's dump prefixes them): podstuck and the actors print no kernel
/// timestamps, so their words ("BUG", "panic" in a path or a finding) are
/// never taken for the kernel's.
fn kernel_report(line: &str) -> Option<&str> {
    line.match_indices('[').find_map(|(at, _)| {
        let text = after_timestamp(&line[at..])?;
        is_kernel_error(text).then(|| line[at..].trim_end())
    })
}

/// Whether a kernel report is the emulator's known fault: a trap on an
/// `int3` that text_poke_bp had already patched away (see `Suite::accel`).
/// "Oops: int3: 0000 [#1]" on 6.x, "int3: 0000 [#1]" before.
fn is_emulator_int3(report: &str) -> bool {
    let text = after_timestamp(report).unwrap_or(report);
    text.strip_prefix("Oops: ").unwrap_or(text).starts_with("int3: ")
}

/// A kernel report seen on a boot's console.
#[derive(Clone, Debug, PartialEq)]
struct KernelReport {
    /// The line from its timestamp on.
    line: String,
    /// Whether /init had begun the scenarios (its BEGIN line) when it came.
    began: bool,
    /// Whether it came after the guest's DONE line.
    after_done: bool,
}

/// What a boot's console said, read a line at a time.
#[derive(Default)]
struct Console {
    results: Vec<Outcome>,
    bench: Vec<BenchLine>,
    /// /init's BEGIN line came: podstuck is about to run.
    began: bool,
    /// /init's DONE line came: every scenario ran and the kernel's log was dumped.
    done: bool,
    /// Each report once: the_end's dmesg dump repeats what the console
    /// showed as it happened.
    reports: Vec<KernelReport>,
    lines: usize,
}

impl Console {
    /// Takes one console line; returns what to show on the terminal, if anything.
    fn read(&mut self, line: &str) -> Option<String> {
        self.lines += 1;
        // First, and on every line: a kernel report may be cut into one of
        // the guest's own lines.
        let mut shown = None;
        if let Some(report) = kernel_report(line) {
            if !self.reports.iter().any(|r| r.line == report) {
                self.reports.push(KernelReport { line: report.to_string(), began: self.began, after_done: self.done });
                shown = Some(format!("console: {line}"));
            }
        }
        if let Some(outcome) = parse_result(line) {
            let text =
                format!("{:<17} {} ({}) {}", outcome.scenario, outcome.verdict.word(), outcome.attach, outcome.detail);
            self.results.push(outcome);
            return Some(text);
        }
        if let Some(timed) = parse_bench(line) {
            let text = format!(
                "bench round {} {:<19} {:.2} s, {:.0} ns per call, {} calls",
                timed.round, timed.variant, timed.seconds, timed.kernel_ns, timed.calls
            );
            self.bench.push(timed);
            return Some(text);
        }
        if line.contains("PODSTUCK-VM DONE") {
            self.done = true;
        } else if line.contains("PODSTUCK-VM BEGIN") {
            self.began = true;
        } else if shown.is_none() && (line.contains("PODSTUCK-VM INFO") || line.contains("PODSTUCK-VM TIME")) {
            shown = Some(line[line.find("PODSTUCK-VM ").unwrap() + 12..].to_string());
        } else if shown.is_none() && line.contains("qemu-system") {
            shown = Some(format!("console: {line}"));
        }
        shown
    }

    /// The row for the console as a whole: FAIL naming the kernel's first
    /// report, wherever it came (after DONE too).
    fn kernel_log(&self) -> Outcome {
        let (verdict, detail) = match self.reports.first() {
            None => (
                Verdict::Pass,
                format!("no Oops, BUG, WARNING, panic or stack trace from the kernel in {} console lines", self.lines),
            ),
            Some(first) => {
                let when = if first.after_done {
                    "after DONE"
                } else if !first.began {
                    "before the scenarios began"
                } else {
                    "during the scenarios"
                };
                let more = match self.reports.len() - 1 {
                    0 => String::new(),
                    n => format!(" (and {n} more kernel error line(s), in the console log)"),
                };
                (Verdict::Fail, format!("{when}: {}{more}", first.line))
            }
        };
        Outcome::kernel_log(verdict, detail)
    }
}

/// Why a boot may be booted once more, if it may: the guest kernel's
/// first report came before podstuck ran at all, or is the emulator's
/// known fault (see `Suite::accel`). Anything else (a report after DONE, a
/// WARNING before the crash, any other crash once the scenarios began) may
/// be podstuck's doing, and counts.
fn retry_reason(console: &Console) -> Option<String> {
    let first = console.reports.first().filter(|first| !first.after_done)?;
    if !first.began {
        Some(format!("crashed before any scenario began: {}", first.line))
    } else if is_emulator_int3(&first.line) {
        Some(format!("crashed on the emulator's known int3 fault (TCG and text_poke_bp): {}", first.line))
    } else {
        None
    }
}

/// A boot's rows: the scenarios reported, a failure for each the guest did
/// not report (saying why: `unfinished`), and the kernel-log row.
fn boot_outcomes(console: &Console, expected: &[&str], unfinished: Option<&str>) -> Vec<Outcome> {
    let mut results = console.results.clone();
    if let Some(why) = unfinished {
        missing_scenarios(&mut results, expected, &format!("not reported: {why}"));
    }
    missing_scenarios(&mut results, expected, "not reported by the guest");
    results.push(console.kernel_log());
    results
}

/// Boots the kernel with the initramfs, relays the console to a log file
/// and the interesting lines to the terminal, and collects the results.
fn boot(kernel: &Kernel, suite: Suite, initrd: &Path, timeout: Duration) -> Result<BootRun> {
    let label = suite.label(&kernel.tag);
    let log_path = vm_dir().join(format!("console-{label}.log"));
    let mut log = std::fs::File::create(&log_path)?;
    let append = suite.kernel_command_line(kernel);
    let mut command = guest::qemu(kernel.target, suite.accel());
    command
        .arg("-kernel")
        .arg(&kernel.vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", &append])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    say(&format!(
        "kernel {label}: booting {} under QEMU (TCG), watchdog {} s; console in {}",
        kernel.release,
        timeout.as_secs(),
        log_path.display()
    ));
    let started = Instant::now();
    let mut child = command.spawn().with_context(|| format!("starting {}", guest::qemu_binary(kernel.target)))?;
    let (tx, rx) = mpsc::channel::<String>();
    let mut readers = Vec::new();
    for stream in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        readers.push(std::thread::spawn(move || {
            let mut reader = BufReader::new(stream);
            let mut buf = Vec::new();
            while reader.read_until(b'\n', &mut buf).is_ok_and(|n| n > 0) {
                let line = String::from_utf8_lossy(&buf).trim_end_matches(['\n', '\r']).replace('\r', "");
                if tx.send(line).is_err() {
                    break;
                }
                buf.clear();
            }
        }));
    }
    drop(tx);
    let deadline = started + timeout;
    let mut console = Console::default();
    let mut tail: std::collections::VecDeque<String> = std::collections::VecDeque::new();
    let mut timed_out = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                writeln!(log, "{line}")?;
                if let Some(text) = console.read(&line) {
                    println!("  [{label}] {text}");
                }
                tail.push_back(line);
                if tail.len() > 40 {
                    tail.pop_front();
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                timed_out = true;
                let _ = child.kill();
                break;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let status = child.wait()?;
    for reader in readers {
        let _ = reader.join();
    }
    let wall = started.elapsed();
    log.flush()?;
    let unfinished = (timed_out || !console.done).then(|| {
        let why = if timed_out {
            format!("watchdog: QEMU killed after {} s", timeout.as_secs())
        } else if let Some(crash) = console.reports.first() {
            format!("the guest kernel crashed ({}; whole log in {})", crash_words(&crash.line), log_path.display())
        } else {
            format!("the guest ended before it finished (QEMU {status})")
        };
        println!("  [{label}] {why}; console tail:");
        for line in &tail {
            println!("  [{label}] | {line}");
        }
        why
    });
    say(&format!("kernel {label}: {:.0} s from QEMU start to power-off", wall.as_secs_f64()));
    Ok(BootRun {
        kernel: label,
        release: kernel.release.clone(),
        results: boot_outcomes(&console, &suite.expected(kernel), unfinished.as_deref()),
        retry: retry_reason(&console),
        bench: console.bench,
        console: log_path,
        wall,
    })
}

/// Boots once more a guest whose kernel crashed the way emulation crashes
/// one now and then (`retry_reason`), and says so: one such crash must not
/// fail the matrix. A second crash counts, and so does every scenario the
/// first boot reported failed. The first boot's console is kept beside the
/// second's.
fn boot_once_more_if_crashed(kernel: &Kernel, suite: Suite, initrd: &Path, timeout: Duration) -> Result<BootRun> {
    let label = suite.label(&kernel.tag);
    let kept = vm_dir().join(format!("console-{label}-crashed.log"));
    // An earlier run's, which would read as this one's.
    let _ = std::fs::remove_file(&kept);
    let first = boot(kernel, suite, initrd, timeout)?;
    let Some(reason) = &first.retry else { return Ok(first) };
    std::fs::rename(&first.console, &kept)?;
    say(&format!(
        "kernel {label}: the guest kernel {reason}; booting it once more (first console in {})",
        kept.display()
    ));
    let again = boot(kernel, suite, initrd, timeout)?;
    Ok(merged(first, again, &kept))
}

/// One boot's rows from a crashed first boot and the second: each scenario
/// counted once, failed if either boot reported it failed (a scenario
/// the first boot never reached is the second's alone), and the first
/// boot's crash shown as `Verdict::Retried`.
fn merged(first: BootRun, mut again: BootRun, kept: &Path) -> BootRun {
    let reason = first.retry.clone().unwrap_or_default();
    for o in again.results.iter_mut().filter(|o| o.scenario != KERNEL_LOG) {
        let Some(before) = first.results.iter().find(|b| b.scenario == o.scenario && b.reported) else { continue };
        match (before.passed(), o.passed()) {
            (true, true) => o.detail = format!("{} (passed in both boots)", o.detail),
            (true, false) => o.detail = format!("second boot: {} (the first boot passed it)", o.detail),
            (false, _) => {
                o.detail = format!("first boot: {}; second boot: {} {}", before.detail, o.verdict.word(), o.detail);
                o.verdict = Verdict::Fail;
                o.attach.clone_from(&before.attach);
                o.walk.clone_from(&before.walk);
            }
        }
    }
    let crashed = Outcome::kernel_log(
        Verdict::Retried,
        format!("first boot {reason}; booted once more, not counted (console in {})", kept.display()),
    );
    again.results.insert(0, crashed);
    again.wall += first.wall;
    again
}

/// A kernel line without its timestamp: `Oops: int3: 0000 [#1] ...`.
fn crash_words(line: &str) -> String {
    after_timestamp(line.trim_start()).unwrap_or(line).trim().to_string()
}

/// A failed outcome for every scenario the guest did not report.
fn missing_scenarios(results: &mut Vec<Outcome>, expected: &[&str], why: &str) {
    for &scenario in expected {
        if !results.iter().any(|o| o.scenario == scenario) {
            results.push(Outcome {
                scenario: scenario.to_string(),
                verdict: Verdict::Fail,
                reported: false,
                attach: "-".into(),
                walk: "-".into(),
                detail: why.to_string(),
            });
        }
    }
}

/// Rows passed, failed, and first boots retried (counted neither way).
fn totals(runs: &[BootRun]) -> (usize, usize, usize) {
    let count = |v: Verdict| runs.iter().flat_map(|r| &r.results).filter(|o| o.verdict == v).count();
    (count(Verdict::Pass), count(Verdict::Fail), count(Verdict::Retried))
}

fn print_table(runs: &[BootRun]) {
    println!();
    println!("{:<13} {:<10} {:<9} {:<17} {:<6} detail", "kernel", "attach", "walk", "scenario", "result");
    for run in runs {
        for o in &run.results {
            let detail: String = o.detail.chars().take(200).collect();
            println!(
                "{:<13} {:<10} {:<9} {:<17} {:<6} {detail}",
                run.kernel,
                o.attach,
                o.walk,
                o.scenario,
                o.verdict.word()
            );
        }
    }
    println!();
    for run in runs {
        let (passed, failed, retried) = totals(std::slice::from_ref(run));
        let again = if retried > 0 { ", booted twice (its first boot crashed: RETRY above)" } else { "" };
        println!(
            "kernel {} ({}): {passed}/{} passed, {:.0} s{again}",
            run.kernel,
            run.release,
            passed + failed,
            run.wall.as_secs_f64()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_kernel_abi_wins() {
        let mut names = [
            "linux-image-6.12.94+deb13-cloud-amd64-unsigned",
            "linux-image-6.12.107+deb13-cloud-amd64-unsigned",
            "linux-image-6.12.95+deb12-cloud-amd64-unsigned",
        ];
        names.sort_by_key(|n| version_key(n));
        assert_eq!(names.last(), Some(&"linux-image-6.12.107+deb13-cloud-amd64-unsigned"));
        let mut old = ["linux-image-5.10.0-32-cloud-amd64-unsigned", "linux-image-5.10.0-30-cloud-amd64-unsigned"];
        old.sort_by_key(|n| version_key(n));
        assert_eq!(old.last(), Some(&"linux-image-5.10.0-32-cloud-amd64-unsigned"));
    }

    #[test]
    fn result_lines_parse_with_console_noise_before_them() {
        let o = parse_result(
            "\u{1b}[0mPODSTUCK-VM RESULT storm-count PASS attach=fentry walk=bpf_loop rm -rf of 100001 dirs",
        )
        .unwrap();
        assert_eq!(
            (o.scenario.as_str(), o.passed(), o.attach.as_str(), o.walk.as_str()),
            ("storm-count", true, "fentry", "bpf_loop")
        );
        assert_eq!(o.detail, "rm -rf of 100001 dirs");
        assert!(!parse_result("PODSTUCK-VM RESULT demo FAIL attach=- walk=- exit 2").unwrap().passed());
        assert!(parse_result("PODSTUCK-VM INFO kernel=6.1").is_none());
    }

    #[test]
    fn module_dependencies_come_from_modinfo() {
        assert_eq!(
            module_depends(b"\0license=GPL\0depends=libcrc32c,crc-t10dif\0name=x\0"),
            vec!["libcrc32c", "crc_t10dif"]
        );
        assert!(module_depends(b"\0depends=\0").is_empty());
    }

    #[test]
    fn bench_lines_parse_with_console_noise_before_them() {
        let line =
            "[   12.3] x PODSTUCK-VM BENCH variant=podstuck-fentry round=2 seconds=3.41 kernel_ns=512 calls=20001";
        assert_eq!(
            parse_bench(line),
            Some(BenchLine {
                variant: "podstuck-fentry".into(),
                round: 2,
                seconds: 3.41,
                kernel_ns: 512.0,
                calls: 20001
            })
        );
        assert_eq!(parse_bench("PODSTUCK-VM BENCH variant=untraced round=1 seconds= kernel_ns=0 calls=0"), None);
    }

    /// A boot's console read line by line, as `boot` reads it.
    fn read_console(text: &str) -> Console {
        let mut console = Console::default();
        for line in text.lines() {
            console.read(line);
        }
        console
    }

    fn verdicts(results: &[Outcome]) -> Vec<(&str, &str)> {
        results.iter().map(|o| (o.scenario.as_str(), o.verdict.word())).collect()
    }

    /// What the matrix would return for a boot read from a recorded console.
    fn counted(console: &Console, scenarios: &[&str]) -> (usize, usize, usize) {
        let unfinished = (!console.done).then_some("the guest ended");
        let run = BootRun {
            kernel: "test".into(),
            release: "test".into(),
            results: boot_outcomes(console, scenarios, unfinished),
            bench: Vec::new(),
            retry: retry_reason(console),
            console: PathBuf::new(),
            wall: Duration::ZERO,
        };
        totals(&[run])
    }

    #[test]
    fn kernel_reports_are_the_kernels_timestamped_forms() {
        for line in [
            "[   43.419986] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI",
            "[   12.001000] int3: 0000 [#1] SMP NOPTI",
            "[    9.500000] invalid opcode: 0000 [#1] SMP NOPTI",
            "[  101.234567] general protection fault, probably for non-canonical address 0xdead000000000100: 0000 [#1] SMP NOPTI",
            "[   77.000001] BUG: kernel NULL pointer dereference, address: 0000000000000000",
            "[   77.000002] BUG: unable to handle page fault for address: ffffc90000a3f000",
            "[   80.100000] kernel BUG at mm/slub.c:449!",
            "[   64.123456] WARNING: CPU: 1 PID: 311 at kernel/bpf/trampoline.c:214 bpf_trampoline_update+0x3b0/0x420",
            "[  200.000000] Kernel panic - not syncing: sysrq triggered crash",
            "[   64.123999] Call Trace:",
            "[  150.250000] watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [actor:402]",
            "[  242.000000] INFO: task actor:402 blocked for more than 120 seconds.",
            "[   33.300000] rcu: INFO: rcu_preempt self-detected stall on CPU",
            "[   12.345678][    T1] WARNING: CPU: 0 PID: 1 at fs/namei.c:4321 vfs_rmdir+0x1a/0x200",
            // Cut into one of the guest's lines, and in the_end's dump.
            "PODSTUCK-VM RESULT demo PA[   50.000001] BUG: scheduling while atomic: podstuck/230/0x00000002",
            "PODSTUCK-VM dmesg| [   64.123456] WARNING: CPU: 1 PID: 311 at kernel/bpf/trampoline.c:214 bpf_trampoline_update+0x3b0/0x420",
            // arm64's forms.
            "[   30.100000] Unable to handle kernel NULL pointer dereference at virtual address 0000000000000008",
            "[   30.100500] Internal error: Oops: 0000000096000005 [#1] SMP",
            "[   30.101000] Call trace:",
        ] {
            assert!(kernel_report(line).is_some(), "{line}");
        }
        assert_eq!(
            kernel_report("PODSTUCK-VM dmesg| [   64.123456] WARNING: CPU: 1 PID: 311 at x+0x1/0x2"),
            Some("[   64.123456] WARNING: CPU: 1 PID: 311 at x+0x1/0x2")
        );
        for line in [
            // The scenarios' own words, untimestamped, wherever they fall.
            "PODSTUCK-VM RESULT check PASS attach=fentry walk=bpf_loop exit 0; 14 ok, 1 warn",
            "PODSTUCK-VM hung| podstuck: hung-call: kubelet's unlink of /tmp/fuse/BUG: a has not returned for 3s",
            "PODSTUCK-VM demo-stderr| WARNING: CPU: 0 PID: 1 at nowhere (a path a scenario made up)",
            "Oops: int3: 0000 [#1] PREEMPT SMP NOPTI",
            "Kernel panic - not syncing: x",
            // The kernel's ordinary lines.
            "[    0.000000] Linux version 6.1.0-41-cloud-amd64 (debian-kernel@lists.debian.org)",
            "[    1.204521] Spectre V2 : WARNING: Unprivileged eBPF is enabled with eIBRS on, data leaks possible via Spectre v2 BHB attacks!",
            "[   20.500000] EXT4-fs (loop0): mounted filesystem 00000000-0000-0000-0000-000000000000 r/w with ordered data mode.",
            "[   31.000000] fuse: init (API version 7.41)",
            "[   12.34] BUG: a timestamp without its six digits",
        ] {
            assert_eq!(kernel_report(line), None, "{line}");
        }
        assert!(is_emulator_int3("[   43.419986] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI"));
        assert!(is_emulator_int3("[   12.001000] int3: 0000 [#1] SMP NOPTI"));
        assert!(!is_emulator_int3("[   77.000002] BUG: unable to handle page fault for address: ffffc90000a3f000"));
    }

    /// A real console: Debian's 5.10 booted with lockdown=confidentiality,
    /// its three scenarios passed, DONE, then (a temporary line in /init)
    /// `echo c > /proc/sysrq-trigger`: the panic and its stack after DONE.
    const RECORDED: &str = include_str!("../vm/testdata/panic-after-done-5.10-lockdown.log");
    fn kernel(spec: usize, target: Arch) -> Kernel {
        Kernel {
            spec: &KERNELS[spec],
            target,
            tag: guest::tag(target, KERNELS[spec].name),
            package: String::new(),
            release: String::new(),
            vmlinuz: PathBuf::new(),
            config: String::new(),
            modules: PathBuf::new(),
        }
    }

    #[test]
    fn apparmor_is_folded_into_amd64_6_1s_whole_suite_and_degraded_into_every_lockdown_boot() {
        let six_one = kernel(1, Arch::X86_64);
        let expected = Suite::Full.expected(&six_one);
        assert_eq!(&expected[expected.len() - 2..], [APPARMOR_SCENARIO, "attach"]);
        assert!(Suite::Full.kernel_command_line(&six_one).ends_with(" podstuck_vm.apparmor=1"));
        for other in [kernel(0, Arch::X86_64), kernel(2, Arch::X86_64), kernel(1, Arch::Aarch64)] {
            assert!(!Suite::Full.expected(&other).contains(&APPARMOR_SCENARIO), "{}", other.tag);
            assert!(!Suite::Full.kernel_command_line(&other).contains("apparmor"), "{}", other.tag);
        }
        assert!(!Suite::Tracepoint.expected(&six_one).contains(&APPARMOR_SCENARIO));
        assert_eq!(Suite::Lockdown.expected(&six_one), ["check", "lockdown", "degraded", "attach"]);
    }

    /// The scenarios of the lockdown boot when these consoles were
    /// recorded (before `degraded`): what their rows are read against.
    const RECORDED_SCENARIOS: &[&str] = &["check", "lockdown", "attach"];

    /// The recorded console up to its DONE line: a clean boot.
    fn recorded_until_done() -> String {
        let end = RECORDED.find("PODSTUCK-VM DONE").unwrap();
        let done_line = RECORDED[end..].find('\n').unwrap();
        RECORDED[..end + done_line + 1].to_string()
    }

    #[test]
    fn a_recorded_clean_boot_passes_with_a_kernel_log_row() {
        let console = read_console(&recorded_until_done());
        assert!(console.done && console.reports.is_empty(), "{:?}", console.reports);
        let results = boot_outcomes(&console, RECORDED_SCENARIOS, None);
        assert_eq!(
            verdicts(&results),
            [("check", "PASS"), ("lockdown", "PASS"), ("attach", "PASS"), (KERNEL_LOG, "PASS")]
        );
        assert_eq!(counted(&console, RECORDED_SCENARIOS), (4, 0, 0));
    }

    #[test]
    fn a_recorded_panic_after_done_fails_the_boot() {
        let console = read_console(RECORDED);
        assert!(console.done);
        let results = boot_outcomes(&console, RECORDED_SCENARIOS, None);
        assert_eq!(
            verdicts(&results),
            [("check", "PASS"), ("lockdown", "PASS"), ("attach", "PASS"), (KERNEL_LOG, "FAIL")]
        );
        assert_eq!(
            results[3].detail,
            "after DONE: [    4.806309] Kernel panic - not syncing: sysrq triggered crash (and 1 more kernel error line(s), in the console log)"
        );
        // Finished: no second boot may hide it.
        assert_eq!(retry_reason(&console), None);
        assert_eq!(counted(&console, RECORDED_SCENARIOS), (3, 1, 0));
    }

    /// 5.10's Oops for a NULL write from a syscall, in the kernel's format
    /// (composed for the test: the crash recorded above is a panic).
    const OOPS: &str = "[    4.806309] BUG: kernel NULL pointer dereference, address: 0000000000000000
[    4.806402] #PF: supervisor write access in kernel mode
[    4.806437] #PF: error_code(0x0002) - not-present page
[    4.806470] PGD 0 P4D 0
[    4.806505] Oops: 0002 [#1] SMP NOPTI
[    4.806585] CPU: 0 PID: 1 Comm: init Not tainted 5.10.0-32-cloud-amd64 #1 Debian 5.10.223-1
[    4.806654] Hardware name: QEMU Standard PC (i440FX + PIIX, 1996), BIOS 1.16.2-debian-1.16.2-1 04/01/2014
[    4.806700] RIP: 0010:sysrq_handle_crash+0x16/0x20
[    4.806816] Call Trace:
[    4.807978]  __handle_sysrq.cold+0x43/0x11a
[    4.808013]  write_sysrq_trigger+0x24/0x40
[    4.808081]  vfs_write+0xc4/0x270
[    4.809969] ---[ end trace 5a4d1bc7e9a3c2f1 ]---
";

    #[test]
    fn an_oops_after_done_fails_the_boot() {
        let console = read_console(&format!("{}{OOPS}", recorded_until_done()));
        assert!(console.done);
        let log = console.kernel_log();
        assert_eq!(log.verdict, Verdict::Fail);
        assert_eq!(
            log.detail,
            "after DONE: [    4.806309] BUG: kernel NULL pointer dereference, address: 0000000000000000 (and 2 more kernel error line(s), in the console log)"
        );
        assert_eq!(retry_reason(&console), None);
        assert_eq!(counted(&console, RECORDED_SCENARIOS), (3, 1, 0));
    }

    #[test]
    fn a_warning_on_the_console_and_in_the_dmesg_dump_fails_the_boot_once() {
        let warning =
            "[    3.500000] WARNING: CPU: 1 PID: 236 at kernel/bpf/trampoline.c:214 bpf_trampoline_update+0x3b0/0x420";
        let trace = "[    3.500100] Call Trace:";
        // As it happened (console level 5), then again in the_end's dump.
        let with = recorded_until_done()
            .replacen("PODSTUCK-VM RESULT lockdown", &format!("{warning}\n{trace}\nPODSTUCK-VM RESULT lockdown"), 1)
            .replacen(
                "PODSTUCK-VM DONE",
                &format!("PODSTUCK-VM dmesg| {warning}\nPODSTUCK-VM dmesg| {trace}\nPODSTUCK-VM DONE"),
                1,
            );
        let console = read_console(&with);
        assert_eq!(console.reports.len(), 2, "{:?}", console.reports);
        let log = console.kernel_log();
        assert_eq!(log.verdict, Verdict::Fail);
        assert_eq!(
            log.detail,
            format!("during the scenarios: {warning} (and 1 more kernel error line(s), in the console log)")
        );
        assert_eq!(counted(&console, RECORDED_SCENARIOS), (3, 1, 0));
    }

    /// A boot's console from its lines.
    fn console_of(lines: &[&str]) -> Console {
        read_console(&lines.join("\n"))
    }

    fn run_of(console: &Console, scenarios: &[&str]) -> BootRun {
        let unfinished = (!console.done).then_some("the guest kernel crashed");
        BootRun {
            kernel: "6.12".into(),
            release: "6.12.57+deb13-cloud-amd64".into(),
            results: boot_outcomes(console, scenarios, unfinished),
            bench: Vec::new(),
            retry: retry_reason(console),
            console: PathBuf::new(),
            wall: Duration::ZERO,
        }
    }

    const INT3: &str = "[   43.419986] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI";
    const NULL: &str = "[   43.419986] BUG: kernel NULL pointer dereference, address: 0000000000000008";

    #[test]
    fn only_a_crash_before_the_scenarios_or_the_emulators_int3_is_booted_again() {
        let pass = "PODSTUCK-VM RESULT check PASS attach=fentry walk=bpf_loop exit 0";
        // The kernel's own boot, before /init's BEGIN: nothing of podstuck ran.
        assert!(retry_reason(&console_of(&["[    1.000000] Linux version 6.12", NULL])).is_some());
        assert!(retry_reason(&console_of(&["PODSTUCK-VM BEGIN 3.1", pass, INT3])).is_some());
        // Any other crash once podstuck ran counts.
        assert_eq!(retry_reason(&console_of(&["PODSTUCK-VM BEGIN 3.1", NULL])), None);
        // So does an int3 after a WARNING, and anything after DONE.
        let warning = "[   40.000000] WARNING: CPU: 1 PID: 311 at kernel/bpf/trampoline.c:214 x+0x1/0x2";
        assert_eq!(retry_reason(&console_of(&["PODSTUCK-VM BEGIN 3.1", warning, INT3])), None);
        assert_eq!(retry_reason(&console_of(&["PODSTUCK-VM BEGIN 3.1", pass, "PODSTUCK-VM DONE 60.2", INT3])), None);
        // A guest that ended without a word from the kernel is not an emulator crash.
        assert_eq!(retry_reason(&console_of(&["PODSTUCK-VM BEGIN 3.1", pass])), None);
    }

    #[test]
    fn a_retried_boot_keeps_the_first_boots_failures_and_counts_each_scenario_once() {
        let first = console_of(&[
            "PODSTUCK-VM BEGIN 3.1",
            "PODSTUCK-VM RESULT check PASS attach=fentry walk=bpf_loop exit 0",
            "PODSTUCK-VM RESULT lockdown FAIL attach=- walk=- exit 0, 40 lines",
            INT3,
        ]);
        let second = console_of(&[
            "PODSTUCK-VM BEGIN 3.0",
            "PODSTUCK-VM RESULT check PASS attach=fentry walk=bpf_loop exit 0",
            "PODSTUCK-VM RESULT lockdown PASS attach=- walk=- refused in 1 line(s)",
            "PODSTUCK-VM RESULT attach PASS attach=fentry walk=bpf_loop attached",
            "PODSTUCK-VM DONE 50.0",
        ]);
        let (first, second) = (run_of(&first, RECORDED_SCENARIOS), run_of(&second, RECORDED_SCENARIOS));
        assert!(first.retry.as_deref().is_some_and(|r| r.contains("int3")));
        let run = merged(first, second, Path::new("console-6.12-lockdown-crashed.log"));
        assert_eq!(
            verdicts(&run.results),
            [(KERNEL_LOG, "RETRY"), ("check", "PASS"), ("lockdown", "FAIL"), ("attach", "PASS"), (KERNEL_LOG, "PASS")]
        );
        assert!(
            run.results[2].detail.starts_with("first boot: exit 0, 40 lines; second boot: PASS"),
            "{}",
            run.results[2].detail
        );
        assert!(
            run.results[0].detail.contains("Oops: int3") && run.results[0].detail.contains("crashed.log"),
            "{}",
            run.results[0].detail
        );
        // Five rows, three scenarios and a clean log counted once each, the
        // first boot's failure among them; the crash shown, not counted.
        assert_eq!(totals(&[run]), (3, 1, 1));
    }

    #[test]
    fn a_crash_that_is_not_retried_fails_the_log_and_the_scenarios_it_cut_off() {
        let console = console_of(&[
            "PODSTUCK-VM BEGIN 3.1",
            "PODSTUCK-VM RESULT check PASS attach=fentry walk=bpf_loop exit 0",
            NULL,
        ]);
        let run = run_of(&console, RECORDED_SCENARIOS);
        assert_eq!(run.retry, None);
        assert_eq!(
            verdicts(&run.results),
            [("check", "PASS"), ("lockdown", "FAIL"), ("attach", "FAIL"), (KERNEL_LOG, "FAIL")]
        );
        assert!(
            run.results[3].detail.starts_with("during the scenarios: [   43.419986] BUG: kernel NULL"),
            "{}",
            run.results[3].detail
        );
    }

    #[test]
    fn crash_lines_lose_their_timestamp() {
        assert_eq!(
            crash_words("[   43.419986] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI"),
            "Oops: int3: 0000 [#1] PREEMPT SMP NOPTI"
        );
        assert_eq!(crash_words("Kernel panic - not syncing: x"), "Kernel panic - not syncing: x");
    }

    #[test]
    fn config_values() {
        let config = "CONFIG_FUSE_FS=m\nCONFIG_FUSE_FS_X=y\n# CONFIG_LOOP is not set\n";
        assert_eq!(config_value(config, "CONFIG_FUSE_FS"), Some("m"));
        assert_eq!(config_value(config, "CONFIG_LOOP"), None);
    }
}
