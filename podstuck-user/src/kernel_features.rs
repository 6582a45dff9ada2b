//! What the running kernel offers podstuck, found by asking it, never by
//! its version number: RHEL 9 says 5.14 and carries BPF from 6.x, a 5.10
//! node lacks `bpf_loop` but has everything else. Each probe is one bounded
//! system call (a tiny program loaded, a map created, a file read); from
//! the answers comes the [`Plan`]: where the programs attach and how the
//! base directory of a relative path is walked. `podstuck check` prints
//! both, `watch` says the plan in its start line.
//!
//! Probing touches the kernel ([`KernelFeatures::probe`]); choosing the
//! plan ([`Plan::choose`]) is pure and unit-tested on made-up answers.

use std::path::{Path, PathBuf};

use aya::maps::MapType;
use aya::programs::ProgramType;
use aya::sys::{is_helper_supported, is_map_supported, BpfHelper};
use podstuck_common::program::Arch;
use serde::Serialize;

/// Where the programs attach.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AttachPoint {
    /// fentry/fexit where the kernel has BPF trampolines, else tracepoints.
    Auto,
    /// fentry/fexit on the syscall functions: they run for the traced
    /// syscalls only.
    Fentry,
    /// The syscall enter/exit tracepoints: every syscall of every task pays
    /// for their slow path while they are attached.
    Tracepoint,
}

impl AttachPoint {
    pub fn as_str(self) -> &'static str {
        match self {
            AttachPoint::Auto => "auto",
            AttachPoint::Fentry => "fentry",
            AttachPoint::Tracepoint => "tracepoint",
        }
    }
}

/// One probe's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probed {
    Yes,
    /// Not there, and why when the kernel said.
    No(String),
    /// The probe itself could not run (no privileges, ...).
    Unknown(String),
}

impl Probed {
    pub fn yes(&self) -> bool {
        *self == Probed::Yes
    }

    fn of(answer: Result<bool, impl std::fmt::Display>) -> Probed {
        match answer {
            Ok(true) => Probed::Yes,
            Ok(false) => Probed::No(String::new()),
            Err(e) => Probed::Unknown(e.to_string()),
        }
    }

    /// "yes", "no", "no (why)", "unknown (why)".
    pub fn words(&self) -> String {
        match self {
            Probed::Yes => "yes".into(),
            Probed::No(why) if why.is_empty() => "no".into(),
            Probed::No(why) => format!("no ({why})"),
            Probed::Unknown(why) => format!("unknown ({why})"),
        }
    }
}

/// The kernel lockdown mode (`/sys/kernel/security/lockdown`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Lockdown {
    None,
    Integrity,
    /// Blocks BPF reads of kernel memory: no absolute paths for relative
    /// calls, no parent or mount namespace of the caller.
    Confidentiality,
    /// No lockdown file (securityfs missing or no lockdown LSM).
    Unknown,
}

impl Lockdown {
    /// Parses "none [integrity] confidentiality".
    pub fn parse(text: &str) -> Lockdown {
        match text.split_whitespace().find(|w| w.starts_with('[')).map(|w| w.trim_matches(|c| c == '[' || c == ']')) {
            Some("none") => Lockdown::None,
            Some("integrity") => Lockdown::Integrity,
            Some("confidentiality") => Lockdown::Confidentiality,
            _ => Lockdown::Unknown,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Lockdown::None => "none",
            Lockdown::Integrity => "integrity",
            Lockdown::Confidentiality => "confidentiality",
            Lockdown::Unknown => "unknown",
        }
    }
}

/// Where the struct layouts podstuck needs come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BtfSource {
    /// The kernel's own, `/sys/kernel/btf/vmlinux`.
    Kernel,
    /// A file the user named (`--btf`, a BTFHub-style file).
    File(PathBuf),
    Missing,
}

impl BtfSource {
    pub fn path(&self) -> Option<&Path> {
        match self {
            BtfSource::Kernel => Some(Path::new(crate::btf::VMLINUX_BTF)),
            BtfSource::File(p) => Some(p),
            BtfSource::Missing => None,
        }
    }
}

/// Everything probed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelFeatures {
    pub ring_buffer: Probed,
    pub bpf_loop: Probed,
    pub btf: BtfSource,
    /// BPF tracing programs (fentry/fexit) load and attach.
    pub fentry: Probed,
    pub syscall_tracepoints: Probed,
    pub lockdown: Lockdown,
    /// `bpf_probe_read_kernel` loads. Under lockdown=confidentiality Linux
    /// 5.13+ and the stable kernels that took the change (Debian's 5.10
    /// does) refuse it at load (older ones fail each read instead),
    /// and aya's loader then turns podstuck's reads of user memory (the
    /// path arguments) into the legacy helpers, which are refused too.
    pub kernel_read_helper: Probed,
}

/// How the base directory of a relative path is walked in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PathWalk {
    /// `bpf_loop`, up to 64 levels.
    BpfLoop,
    /// A bounded loop the verifier checks step by step, up to 24 levels.
    Unrolled,
    /// None at all: lockdown=confidentiality forbids BPF reads of kernel
    /// memory, so the programs are loaded with every such read switched
    /// off (the kernel then never sees the helper that would be refused).
    Forbidden,
}

impl PathWalk {
    pub fn as_str(self) -> &'static str {
        match self {
            PathWalk::BpfLoop => "bpf_loop",
            PathWalk::Unrolled => "unrolled",
            PathWalk::Forbidden => "none",
        }
    }

    /// The deepest base directory walked.
    pub fn depth(self) -> u32 {
        match self {
            PathWalk::BpfLoop => podstuck_common::BASE_DIR_MAX_DEPTH,
            PathWalk::Unrolled => podstuck_common::BASE_DIR_UNROLLED_DEPTH,
            PathWalk::Forbidden => 0,
        }
    }

    /// Its name and reach: "bpf_loop (up to 64 levels)", "none (lockdown)".
    pub fn words(self) -> String {
        match self {
            PathWalk::Forbidden => "none (lockdown: kernel memory may not be read)".into(),
            walk => format!("{} (up to {} levels)", walk.as_str(), walk.depth()),
        }
    }

    /// Whether the kernel programs may read kernel memory at all.
    pub fn reads_kernel(self) -> bool {
        self != PathWalk::Forbidden
    }
}

/// The mechanisms chosen from the probes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// `Auto` when fentry could not be probed: tried first, with the
    /// tracepoints as the fallback.
    pub attach: AttachPoint,
    pub walk: PathWalk,
    /// What works less well here, in words.
    pub degraded: Vec<String>,
}

/// Why podstuck cannot trace on this kernel: the feature, and what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Missing {
    pub what: String,
    pub fix: String,
}

impl Plan {
    /// The plan for these probes and the attach point asked for; or what
    /// is missing.
    pub fn choose(features: &KernelFeatures, asked: AttachPoint, kernel: &str) -> Result<Plan, Vec<Missing>> {
        let mut missing = missing_basics(features, kernel);
        if nothing_loads(features) {
            // Where it would attach is beside the point: one sentence, not
            // one per consequence.
            return Err(missing);
        }
        let attach = choose_attach(features, asked, kernel, &mut missing);
        if !missing.is_empty() {
            return Err(missing);
        }
        let walk = if features.lockdown == Lockdown::Confidentiality {
            PathWalk::Forbidden
        } else if features.bpf_loop.yes() {
            PathWalk::BpfLoop
        } else {
            PathWalk::Unrolled
        };
        let degraded = degraded(features, attach, walk);
        Ok(Plan { attach, walk, degraded })
    }
}

/// What podstuck cannot trace without, whatever it attaches to: the ring
/// buffer, BTF, and programs lockdown lets load.
/// lockdown=confidentiality with the kernel-read helper refused at load:
/// no program of podstuck's can load (see `kernel_read_helper`).
fn nothing_loads(features: &KernelFeatures) -> bool {
    features.lockdown == Lockdown::Confidentiality && matches!(features.kernel_read_helper, Probed::No(_))
}

fn missing_basics(features: &KernelFeatures, kernel: &str) -> Vec<Missing> {
    let mut missing = Vec::new();
    if let Probed::No(why) = &features.ring_buffer {
        missing.push(Missing {
            what: format!("kernel {kernel} has no BPF ring buffer{}", paren(why)),
            fix: "podstuck streams calls through a BPF ring buffer (Linux 5.8, or backported as in RHEL 8.5+): run it on a newer node kernel".into(),
        });
    }
    if features.btf == BtfSource::Missing {
        missing.push(Missing {
            what: format!("kernel {kernel} publishes no BTF (/sys/kernel/btf/vmlinux is missing) and no --btf file was given"),
            fix: format!(
                "give podstuck this kernel's BTF: --btf FILE, e.g. {kernel}.btf from BTFHub's archive (the aquasecurity/btfhub-archive repository: <distro>/<version>/{}/{kernel}.btf.tar.xz, unpacked)",
                Arch::HOST.btfhub_dir()
            ),
        });
    }
    if nothing_loads(features) {
        missing.push(Missing {
            what: format!(
                "kernel {kernel} runs lockdown=confidentiality and refuses, at load, BPF programs that name bpf_probe_read_kernel; podstuck's loader (aya 0.14) then also turns its reads of the path arguments into helpers that lockdown refuses, so no program of podstuck's can load here"
            ),
            fix: "boot the node with lockdown=integrity (kernel modules must still be signed, /dev/mem stays closed; BPF may read kernel memory again), or trace the same workload on a node without confidentiality".into(),
        });
    }
    missing
}

/// The attach point for the one asked for, given the probes; what rules
/// it out goes into `missing` (the asked one is then returned as it is).
fn choose_attach(
    features: &KernelFeatures,
    asked: AttachPoint,
    kernel: &str,
    missing: &mut Vec<Missing>,
) -> AttachPoint {
    // Under lockdown=confidentiality no program may read kernel memory:
    // they are loaded with those reads off (no path walk, no parent),
    // and only the tracepoints, which hand a call's arguments over in
    // their record, can still say what was called (fentry would read
    // them from the caller's saved registers, kernel memory).
    let confidential = features.lockdown == Lockdown::Confidentiality;
    let fentry = features.fentry.yes() && !confidential;
    let tracepoints = !matches!(features.syscall_tracepoints, Probed::No(_));
    match asked {
        AttachPoint::Fentry | AttachPoint::Auto if confidential && !tracepoints => {
            missing.push(Missing {
                what: format!(
                    "kernel {kernel} runs lockdown=confidentiality, where fentry programs cannot read a call's arguments, and offers no syscall tracepoints{}",
                    paren(&why_of(&features.syscall_tracepoints))
                ),
                fix: "boot the node with lockdown=integrity, or mount tracefs where the kernel allows it (mount -t tracefs nodev /sys/kernel/tracing)".into(),
            });
            asked
        }
        AttachPoint::Fentry if confidential => {
            missing.push(Missing {
                what: format!("--attach fentry: kernel {kernel} runs lockdown=confidentiality, where fentry programs cannot read a call's arguments"),
                fix: "use --attach tracepoint (or auto)".into(),
            });
            asked
        }
        AttachPoint::Auto if confidential => AttachPoint::Tracepoint,
        AttachPoint::Fentry if !fentry && !matches!(features.fentry, Probed::Unknown(_)) => {
            missing.push(Missing {
                what: format!(
                    "--attach fentry: kernel {kernel} refuses BPF tracing programs{}",
                    paren(&why_of(&features.fentry))
                ),
                fix: "use --attach tracepoint (or auto)".into(),
            });
            asked
        }
        AttachPoint::Tracepoint if !tracepoints => {
            missing.push(Missing {
                what: format!(
                    "--attach tracepoint: no syscall tracepoints here{}",
                    paren(&why_of(&features.syscall_tracepoints))
                ),
                fix: "mount tracefs (mount -t tracefs nodev /sys/kernel/tracing), or use --attach fentry".into(),
            });
            asked
        }
        AttachPoint::Auto if fentry => AttachPoint::Fentry,
        AttachPoint::Auto if matches!(features.fentry, Probed::Unknown(_)) => AttachPoint::Auto,
        AttachPoint::Auto if tracepoints => AttachPoint::Tracepoint,
        AttachPoint::Auto => {
            missing.push(Missing {
                what: format!(
                    "kernel {kernel} offers neither BPF tracing programs{} nor syscall tracepoints{}",
                    paren(&why_of(&features.fentry)),
                    paren(&why_of(&features.syscall_tracepoints))
                ),
                fix: "mount tracefs (mount -t tracefs nodev /sys/kernel/tracing); a kernel without CONFIG_FTRACE_SYSCALLS and without BPF trampolines cannot be traced".into(),
            });
            asked
        }
        other => other,
    }
}

/// What works less well with this plan, in words.
fn degraded(features: &KernelFeatures, attach: AttachPoint, walk: PathWalk) -> Vec<String> {
    let confidential = features.lockdown == Lockdown::Confidentiality;
    let mut degraded = Vec::new();
    if walk == PathWalk::Unrolled {
        degraded.push(format!(
            "no bpf_loop: the directory a relative path starts from is walked up to {} levels (deeper ones are marked, never wrong)",
            walk.depth()
        ));
    }
    if attach == AttachPoint::Tracepoint && !confidential {
        degraded
            .push("no BPF trampolines: the syscall tracepoints slow every syscall a little while podstuck runs".into());
    }
    if confidential {
        degraded.push(
            "lockdown=confidentiality: BPF may not read kernel memory, so the syscall tracepoints are used (they slow every syscall a little), relative paths get no absolute path and callers no parent or mount namespace; paths passed whole, errors, pids, cgroups, counts and latencies are unaffected"
                .into(),
        );
    }
    if let BtfSource::File(p) = &features.btf {
        degraded.push(format!("struct layouts read from {} (--btf): it must be this very kernel's", p.display()));
    }
    degraded
}

fn paren(why: &str) -> String {
    if why.is_empty() {
        String::new()
    } else {
        format!(" ({why})")
    }
}

fn why_of(p: &Probed) -> String {
    match p {
        Probed::Yes => String::new(),
        Probed::No(why) | Probed::Unknown(why) => why.clone(),
    }
}

/// Whether tracefs at `tracefs` has every syscall tracepoint the plan
/// attaches on `arch`, entries and exits: one missing fails the attach of
/// them all, so `check` must not say ok on the first alone.
fn syscall_tracepoints_in(tracefs: &Path, arch: Arch) -> Probed {
    let events = tracefs.join("events/syscalls");
    let missing: Vec<&str> = arch
        .programs()
        .iter()
        .flat_map(|p| [p.tracepoint_enter, p.tracepoint_exit])
        .filter(|name| !events.join(name).is_dir())
        .collect();
    match missing.len() {
        0 => Probed::Yes,
        n if n == 2 * arch.programs().len() => Probed::No(format!("{} has no syscall tracepoints", events.display())),
        _ => Probed::No(format!("{} lacks {}", events.display(), missing.join(", "))),
    }
}

impl KernelFeatures {
    /// What can be said without the privileges to probe.
    pub fn unprobed(btf_file: Option<&Path>) -> KernelFeatures {
        let unknown = || Probed::Unknown("needs the privileges to probe".into());
        KernelFeatures {
            ring_buffer: unknown(),
            bpf_loop: unknown(),
            btf: match btf_file {
                Some(p) => BtfSource::File(p.to_path_buf()),
                None if Path::new(crate::btf::VMLINUX_BTF).exists() => BtfSource::Kernel,
                None => BtfSource::Missing,
            },
            fentry: unknown(),
            syscall_tracepoints: unknown(),
            lockdown: Lockdown::Unknown,
            kernel_read_helper: unknown(),
        }
    }

    /// Asks the running kernel. `btf_file` is `--btf`; `tracefs` where
    /// tracefs is mounted, if it is; `fentry` tries podstuck's own
    /// programs (the loader has them: [`crate::collect::probe_fentry`]).
    pub fn probe(btf_file: Option<&Path>, tracefs: Option<&Path>, fentry: impl FnOnce() -> Probed) -> KernelFeatures {
        let btf = match btf_file {
            Some(p) => BtfSource::File(p.to_path_buf()),
            None if Path::new(crate::btf::VMLINUX_BTF).exists() => BtfSource::Kernel,
            None => BtfSource::Missing,
        };
        let ring_buffer = Probed::of(is_map_supported(MapType::RingBuf));
        let bpf_loop = Probed::of(is_helper_supported(ProgramType::TracePoint, BpfHelper::BPF_FUNC_loop));
        let syscall_tracepoints = match tracefs {
            Some(t) => syscall_tracepoints_in(t, Arch::HOST),
            None => Probed::No("tracefs is not mounted".into()),
        };
        // fentry needs the kernel's own BTF to name its target, whatever
        // file the struct layouts come from.
        let fentry = match (Path::new(crate::btf::VMLINUX_BTF).exists(), ring_buffer.yes()) {
            (true, true) => fentry(),
            (true, false) => Probed::Unknown("not tried without a ring buffer".into()),
            (false, _) => Probed::No("no kernel BTF (/sys/kernel/btf/vmlinux)".into()),
        };
        let kernel_read_helper =
            Probed::of(is_helper_supported(ProgramType::TracePoint, BpfHelper::BPF_FUNC_probe_read_kernel));
        KernelFeatures {
            ring_buffer,
            bpf_loop,
            btf,
            fentry,
            syscall_tracepoints,
            lockdown: read_lockdown(),
            kernel_read_helper,
        }
    }

    /// A kernel with everything podstuck can use and no lockdown: what
    /// tests start from, taking away what they are about.
    #[cfg(test)]
    pub(crate) fn all_present() -> KernelFeatures {
        KernelFeatures {
            ring_buffer: Probed::Yes,
            bpf_loop: Probed::Yes,
            btf: BtfSource::Kernel,
            fentry: Probed::Yes,
            syscall_tracepoints: Probed::Yes,
            lockdown: Lockdown::None,
            kernel_read_helper: Probed::Yes,
        }
    }
}

/// The lockdown mode. securityfs is often not mounted; podstuck mounts it
/// only inside a private mount namespace of a child of its own, so the
/// node's mounts stay as they were.
fn read_lockdown() -> Lockdown {
    const FILE: &str = "/sys/kernel/security/lockdown";
    if let Ok(text) = std::fs::read_to_string(FILE) {
        return Lockdown::parse(&text);
    }
    let Ok(me) = std::env::current_exe() else { return Lockdown::Unknown };
    let out = std::process::Command::new(me)
        .arg(LOCKDOWN_HELPER)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    match out {
        Ok(out) if out.status.success() => Lockdown::parse(&String::from_utf8_lossy(&out.stdout)),
        _ => Lockdown::Unknown,
    }
}

/// The hidden command `read_lockdown` runs: a process of its own, so its
/// private mount namespace dies with it.
pub const LOCKDOWN_HELPER: &str = "__read-lockdown";

/// Body of [`LOCKDOWN_HELPER`]: a private mount namespace, securityfs in
/// it, the lockdown file printed.
pub fn print_lockdown_in_private_namespace() -> std::io::Result<()> {
    use nix::mount::{mount, MsFlags};
    use nix::sched::{unshare, CloneFlags};
    unshare(CloneFlags::CLONE_NEWNS)?;
    // Nothing done here may reach the node's namespace.
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)?;
    mount(Some("securityfs"), "/sys/kernel/security", Some("securityfs"), MsFlags::empty(), None::<&str>)?;
    print!("{}", std::fs::read_to_string("/sys/kernel/security/lockdown")?);
    Ok(())
}

/// Parses "6.18.44-fc-v657" into (6, 18). What the kernel can do is
/// probed, not read from its version; the one choice a version makes is
/// on the safe side (`collect::maps`): a kernel that says 6.1 or later
/// has what it relies on, and one that says less (a vendor's 5.14 with
/// 6.x backports) gets what every kernel takes.
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_versions() {
        assert_eq!(kernel_version("6.18.44-fc-v657"), Some((6, 18)));
        assert_eq!(kernel_version("5.4.0-150-generic"), Some((5, 4)));
        assert_eq!(kernel_version("4.19"), Some((4, 19)));
        assert_eq!(kernel_version("garbage"), None);
    }

    #[test]
    fn lockdown_modes_parse_from_the_bracketed_word() {
        assert_eq!(Lockdown::parse("none [integrity] confidentiality\n"), Lockdown::Integrity);
        assert_eq!(Lockdown::parse("[none] integrity confidentiality"), Lockdown::None);
        assert_eq!(Lockdown::parse("none integrity [confidentiality]"), Lockdown::Confidentiality);
        assert_eq!(Lockdown::parse(""), Lockdown::Unknown);
    }

    #[test]
    fn a_modern_kernel_gets_fentry_and_bpf_loop() {
        let plan = Plan::choose(&KernelFeatures::all_present(), AttachPoint::Auto, "6.12.0").unwrap();
        assert_eq!((plan.attach, plan.walk), (AttachPoint::Fentry, PathWalk::BpfLoop));
        assert!(plan.degraded.is_empty());
    }

    /// An arm64 kernel's tracefs (Debian's 5.10 and 6.1) has no unlink and
    /// no rmdir tracepoints: x86_64's plan fails there, arm64's does not.
    #[test]
    fn the_syscall_tracepoints_are_those_of_every_call_the_plan_attaches() {
        let tracefs = crate::test_support::TempDir::new("arm64-tracefs");
        for name in ["sys_enter_unlinkat", "sys_exit_unlinkat", "sys_enter_umount", "sys_exit_umount"] {
            std::fs::create_dir_all(tracefs.0.join("events/syscalls").join(name)).unwrap();
        }
        assert!(syscall_tracepoints_in(&tracefs.0, Arch::Aarch64).yes());
        let Probed::No(why) = syscall_tracepoints_in(&tracefs.0, Arch::X86_64) else { panic!("x86_64 ok on arm64's") };
        assert!(why.ends_with("lacks sys_enter_unlink, sys_exit_unlink, sys_enter_rmdir, sys_exit_rmdir"), "{why}");
        let empty = crate::test_support::TempDir::new("no-tracepoints");
        let Probed::No(why) = syscall_tracepoints_in(&empty.0, Arch::Aarch64) else { panic!("ok with none") };
        assert!(why.ends_with("has no syscall tracepoints"), "{why}");
    }

    #[test]
    fn a_5_10_kernel_walks_unrolled_and_a_locked_down_one_says_what_it_loses() {
        // EKS AL2: no bpf_loop, fentry allowed; this machine kind: no fentry.
        let al2 = KernelFeatures { bpf_loop: Probed::No(String::new()), ..KernelFeatures::all_present() };
        let plan = Plan::choose(&al2, AttachPoint::Auto, "5.10.0").unwrap();
        assert_eq!((plan.attach, plan.walk), (AttachPoint::Fentry, PathWalk::Unrolled));
        assert!(plan.degraded[0].contains("24 levels"), "{:?}", plan.degraded);
        let here = KernelFeatures {
            fentry: Probed::No("EPERM".into()),
            lockdown: Lockdown::Confidentiality,
            ..KernelFeatures::all_present()
        };
        let plan = Plan::choose(&here, AttachPoint::Auto, "6.18.0").unwrap();
        assert_eq!(plan.attach, AttachPoint::Tracepoint);
        assert!(
            plan.degraded.iter().any(|d| d.contains("confidentiality") && d.contains("absolute path")),
            "{:?}",
            plan.degraded
        );
        // Confidentiality where the read helper still loads: tracepoints,
        // nothing reads kernel memory.
        let talos = KernelFeatures { lockdown: Lockdown::Confidentiality, ..KernelFeatures::all_present() };
        let plan = Plan::choose(&talos, AttachPoint::Auto, "6.12.0").unwrap();
        assert_eq!((plan.attach, plan.walk), (AttachPoint::Tracepoint, PathWalk::Forbidden));
        assert!(!plan.walk.reads_kernel());
        let unprivileged = KernelFeatures { fentry: Probed::Unknown("EPERM".into()), ..talos.clone() };
        assert_eq!(Plan::choose(&unprivileged, AttachPoint::Auto, "6.12.0").unwrap().attach, AttachPoint::Tracepoint);
        let asked = Plan::choose(&talos, AttachPoint::Fentry, "6.12.0").unwrap_err();
        assert!(
            asked[0].what.contains("lockdown=confidentiality") && asked[0].fix.contains("--attach tracepoint"),
            "{asked:?}"
        );
        let no_tracefs =
            KernelFeatures { syscall_tracepoints: Probed::No("tracefs is not mounted".into()), ..talos.clone() };
        let missing = Plan::choose(&no_tracefs, AttachPoint::Auto, "6.12.0").unwrap_err();
        assert!(
            missing[0].what.contains("lockdown=confidentiality") && missing[0].fix.contains("lockdown=integrity"),
            "{missing:?}"
        );
        // 5.13+ (and 5.10.y) refuse the kernel-read helper at load there:
        // one sentence naming it, the kernel and what to do.
        let refused = KernelFeatures { kernel_read_helper: Probed::No(String::new()), ..talos };
        let missing = Plan::choose(&refused, AttachPoint::Auto, "6.1.0").unwrap_err();
        assert_eq!(missing.len(), 1, "one sentence, not one per consequence: {missing:?}");
        let closed =
            KernelFeatures { syscall_tracepoints: Probed::No("tracefs is not mounted".into()), ..refused.clone() };
        assert_eq!(Plan::choose(&closed, AttachPoint::Auto, "6.1.0").unwrap_err(), missing);
        assert!(
            missing[0].what.contains("lockdown=confidentiality") && missing[0].what.contains("6.1.0"),
            "{missing:?}"
        );
        assert!(missing[0].fix.contains("lockdown=integrity"), "{missing:?}");
        // RHEL 9 reports 5.14 but has everything: no version gate refuses it.
        assert!(Plan::choose(&KernelFeatures::all_present(), AttachPoint::Auto, "5.14.0-284.el9.x86_64").is_ok());
    }

    #[test]
    fn what_is_missing_is_named_with_what_to_do() {
        let old = KernelFeatures {
            ring_buffer: Probed::No(String::new()),
            btf: BtfSource::Missing,
            ..KernelFeatures::all_present()
        };
        let missing = Plan::choose(&old, AttachPoint::Auto, "4.18.0").unwrap_err();
        assert_eq!(missing.len(), 2);
        assert!(missing[0].what.contains("ring buffer") && missing[0].what.contains("4.18.0"));
        assert!(missing[1].fix.contains("--btf"));
        let no_fentry = KernelFeatures { fentry: Probed::No("EPERM".into()), ..KernelFeatures::all_present() };
        let refused = Plan::choose(&no_fentry, AttachPoint::Fentry, "6.18.0").unwrap_err();
        assert!(refused[0].what.contains("EPERM") && refused[0].fix.contains("--attach tracepoint"));
        let nothing = KernelFeatures {
            fentry: Probed::No(String::new()),
            syscall_tracepoints: Probed::No("tracefs is not mounted".into()),
            ..KernelFeatures::all_present()
        };
        assert!(Plan::choose(&nothing, AttachPoint::Auto, "6.1.0").unwrap_err()[0].fix.contains("mount -t tracefs"));
        // Unprivileged: fentry unknown, tried at attach with the fallback.
        let unknown = KernelFeatures { fentry: Probed::Unknown("EPERM".into()), ..KernelFeatures::all_present() };
        assert_eq!(Plan::choose(&unknown, AttachPoint::Auto, "6.1.0").unwrap().attach, AttachPoint::Auto);
    }
}
