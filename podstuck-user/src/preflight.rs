//! Checks that this node can run podstuck's kernel programs, before trying,
//! so that a missing piece is reported as what it is and what to do about
//! it, rather than as a loader error.
//!
//! Gathering the facts touches the system ([`NodeFacts::gather`]); judging
//! them ([`problems`]) is pure and unit-tested on made-up facts.

use std::path::{Path, PathBuf};

/// Capability bits (include/uapi/linux/capability.h).
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// The oldest kernel podstuck's programs load on: BPF ring buffers (5.8)
/// carry the events, and `bpf_loop` (5.17) walks a call's base directory.
const MIN_KERNEL: (u32, u32) = (5, 17);

/// Where tracefs is usually found, newest convention first.
pub const TRACEFS_CANDIDATES: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// What podstuck needs to know about the node to decide whether it can run.
#[derive(Clone, Debug)]
pub struct NodeFacts {
    /// `uname -r`.
    pub kernel_release: String,
    /// Effective capability set of this process (`CapEff` in /proc/self/status).
    pub effective_caps: u64,
    /// Whether `/sys/kernel/btf/vmlinux` exists.
    pub btf_present: bool,
    /// A mounted tracefs, if any, and whether it has the syscall tracepoints.
    pub tracefs: Option<PathBuf>,
    pub syscall_tracepoints: bool,
}

/// A reason podstuck cannot run here, and what the user should do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub what: String,
    pub fix: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}\n  what to do: {}", self.what, self.fix)
    }
}

/// Parses "6.18.44-fc-v657" into (6, 18).
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

fn has_cap(caps: u64, cap: u32) -> bool {
    caps & (1u64 << cap) != 0
}

/// Everything that stops podstuck from tracing on a node with these facts.
/// Privileges come before tracefs: an unprivileged user cannot see it.
pub fn problems(facts: &NodeFacts) -> Vec<Problem> {
    let mut found = Vec::new();
    match kernel_version(&facts.kernel_release) {
        Some(version) if version < MIN_KERNEL => found.push(Problem {
            what: format!(
                "kernel {} is too old: podstuck needs 5.17 or newer (BPF ring buffer since 5.8, bpf_loop since 5.17)",
                facts.kernel_release
            ),
            fix: "run podstuck on a node with kernel 5.17 or newer".into(),
        }),
        Some(_) => {}
        None => found.push(Problem {
            what: format!("cannot read the kernel version from '{}'", facts.kernel_release),
            fix: "report this kernel release string to the podstuck developers".into(),
        }),
    }
    let caps = facts.effective_caps;
    let privileged = has_cap(caps, CAP_SYS_ADMIN) || (has_cap(caps, CAP_BPF) && has_cap(caps, CAP_PERFMON));
    if !privileged {
        found.push(Problem {
            what: "podstuck lacks the privileges to load kernel programs".into(),
            fix: "run as root (sudo podstuck ...), or grant CAP_BPF and CAP_PERFMON \
                  (in Kubernetes: a privileged debug pod, e.g. kubectl debug node/<node> --profile=sysadmin)"
                .into(),
        });
        return found;
    }
    if !facts.btf_present {
        found.push(Problem {
            what: "this kernel publishes no BTF (/sys/kernel/btf/vmlinux is missing)".into(),
            fix: "podstuck reads kernel struct layouts from BTF: use a kernel built with \
                  CONFIG_DEBUG_INFO_BTF=y (default on current distributions)"
                .into(),
        });
    }
    match &facts.tracefs {
        None => found.push(Problem {
            what: "tracefs is not mounted, so the syscall tracepoints cannot be attached".into(),
            fix: "mount it: mount -t tracefs nodev /sys/kernel/tracing".into(),
        }),
        Some(path) if !facts.syscall_tracepoints => found.push(Problem {
            what: format!("{} has no syscall tracepoints (events/syscalls)", path.display()),
            fix: "use a kernel built with CONFIG_FTRACE_SYSCALLS=y (default on current distributions)".into(),
        }),
        Some(_) => {}
    }
    found
}

fn effective_caps() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0)
}

/// A tracefs is mounted at `path` if its `events` directory is there.
fn tracefs_at(path: &Path) -> bool {
    path.join("events").is_dir()
}

impl NodeFacts {
    pub fn gather() -> NodeFacts {
        let kernel_release = nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default();
        let tracefs = TRACEFS_CANDIDATES.iter().map(Path::new).find(|p| tracefs_at(p)).map(Path::to_path_buf);
        let syscall_tracepoints = tracefs
            .as_ref()
            .is_some_and(|t| t.join("events/syscalls/sys_enter_unlinkat").is_dir());
        NodeFacts {
            kernel_release,
            effective_caps: effective_caps(),
            btf_present: Path::new(crate::btf::VMLINUX_BTF).exists(),
            tracefs,
            syscall_tracepoints,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> NodeFacts {
        NodeFacts {
            kernel_release: "6.18.44-fc-v657".into(),
            effective_caps: u64::MAX,
            btf_present: true,
            tracefs: Some(PathBuf::from("/sys/kernel/tracing")),
            syscall_tracepoints: true,
        }
    }

    #[test]
    fn a_good_node_has_no_problem() {
        assert!(problems(&good()).is_empty());
    }

    #[test]
    fn parses_kernel_versions() {
        assert_eq!(kernel_version("6.18.44-fc-v657"), Some((6, 18)));
        assert_eq!(kernel_version("5.4.0-150-generic"), Some((5, 4)));
        assert_eq!(kernel_version("4.19"), Some((4, 19)));
        assert_eq!(kernel_version("garbage"), None);
    }

    #[test]
    fn old_kernel_is_refused_with_the_version() {
        let facts = NodeFacts { kernel_release: "5.4.0-150-generic".into(), ..good() };
        let p = problems(&facts);
        assert_eq!(p.len(), 1);
        assert!(p[0].what.contains("5.4.0-150-generic") && p[0].what.contains("5.17"));
        let facts = NodeFacts { kernel_release: "5.16.20".into(), ..good() };
        assert_eq!(problems(&facts).len(), 1, "no bpf_loop before 5.17");
        let facts = NodeFacts { kernel_release: "5.17.0".into(), ..good() };
        assert!(problems(&facts).is_empty());
    }

    #[test]
    fn unprivileged_is_told_to_use_root_or_caps() {
        let facts = NodeFacts { effective_caps: 0, tracefs: None, ..good() };
        let p = problems(&facts);
        // tracefs is not judged without privileges: it may just be unreadable.
        assert_eq!(p.len(), 1);
        assert!(p[0].fix.contains("root") && p[0].fix.contains("CAP_BPF") && p[0].fix.contains("CAP_PERFMON"));
        let bpf_and_perfmon = (1 << CAP_BPF) | (1 << CAP_PERFMON);
        assert!(problems(&NodeFacts { effective_caps: bpf_and_perfmon, ..good() }).is_empty());
        assert_eq!(problems(&NodeFacts { effective_caps: 1 << CAP_BPF, ..good() }).len(), 1);
    }

    #[test]
    fn missing_btf_and_tracefs_say_what_to_do() {
        let facts = NodeFacts { btf_present: false, tracefs: None, ..good() };
        let p = problems(&facts);
        assert_eq!(p.len(), 2);
        assert!(p[0].what.contains("BTF"));
        assert!(p[1].fix.contains("mount -t tracefs nodev /sys/kernel/tracing"));
        let facts = NodeFacts { syscall_tracepoints: false, ..good() };
        assert!(problems(&facts)[0].fix.contains("CONFIG_FTRACE_SYSCALLS"));
    }
}
