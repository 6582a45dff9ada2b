//! Checks that this node can run podstuck's kernel programs, before trying,
//! so that a missing piece is reported as what it is and what to do about
//! it, rather than as a loader error.
//!
//! Gathering the facts touches the system ([`NodeFacts::gather`]); judging
//! them ([`problems`]) is pure and unit-tested on made-up facts.

use std::path::{Path, PathBuf};

use crate::kernel_features::{AttachPoint, KernelFeatures, Plan};

/// Capability bits (include/uapi/linux/capability.h).
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Where tracefs is usually found, newest convention first.
pub const TRACEFS_CANDIDATES: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// What podstuck needs to know about the node to decide whether it can run.
#[derive(Clone, Debug)]
pub struct NodeFacts {
    /// `uname -r`.
    pub kernel_release: String,
    /// `uname -n`: the node's name.
    pub node_name: String,
    /// Effective capability set of this process (`CapEff` in /proc/self/status).
    pub effective_caps: u64,
    /// A mounted tracefs, if any.
    pub tracefs: Option<PathBuf>,
    /// What the kernel offers, probed (probes need the privileges; without
    /// them they say "unknown").
    pub features: KernelFeatures,
    /// podstuck runs in a container: a fix that mounts tracefs says how
    /// to bring the node's into it.
    pub in_container: bool,
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

fn has_cap(caps: u64, cap: u32) -> bool {
    caps & (1u64 << cap) != 0
}

/// Whether these capabilities may load and attach kernel programs.
pub fn privileged(caps: u64) -> bool {
    has_cap(caps, CAP_SYS_ADMIN) || (has_cap(caps, CAP_BPF) && has_cap(caps, CAP_PERFMON))
}

/// The plan for this node and the attach point asked for, or everything
/// that stops podstuck from tracing. Privileges come first: without them
/// the probes cannot run.
pub fn plan(facts: &NodeFacts, asked: AttachPoint) -> Result<Plan, Vec<Problem>> {
    if !privileged(facts.effective_caps) {
        return Err(vec![Problem {
            what: "podstuck lacks the privileges to load kernel programs".into(),
            fix: "run as root (sudo podstuck ...), or grant CAP_BPF and CAP_PERFMON \
                  (in Kubernetes: a privileged debug pod, e.g. kubectl debug node/<node> --profile=sysadmin)"
                .into(),
        }]);
    }
    Plan::choose(&facts.features, asked, &facts.kernel_release).map_err(|missing| {
        missing
            .into_iter()
            .map(|m| Problem { what: m.what, fix: crate::node_access::tracefs_fix(facts.in_container, m.fix) })
            .collect()
    })
}

/// Everything that stops podstuck from tracing with the default attach point.
pub fn problems(facts: &NodeFacts) -> Vec<Problem> {
    plan(facts, AttachPoint::Auto).err().unwrap_or_default()
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
    /// Reads the node and probes the kernel; `btf` is `--btf`.
    pub fn gather(node: &crate::node_access::Node, btf: Option<&Path>) -> NodeFacts {
        let (kernel_release, node_name) = nix::sys::utsname::uname()
            .map(|u| (u.release().to_string_lossy().into_owned(), u.nodename().to_string_lossy().into_owned()))
            .unwrap_or_default();
        let tracefs = TRACEFS_CANDIDATES.iter().map(Path::new).find(|p| tracefs_at(p)).map(Path::to_path_buf);
        let effective_caps = effective_caps();
        let features = if privileged(effective_caps) {
            KernelFeatures::probe(btf, tracefs.as_deref(), crate::collect::probe_fentry)
        } else {
            KernelFeatures::unprobed(btf)
        };
        NodeFacts { kernel_release, node_name, effective_caps, tracefs, features, in_container: node.in_container() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel_features::{BtfSource, Lockdown, PathWalk, Probed};

    fn good() -> NodeFacts {
        NodeFacts {
            kernel_release: "6.18.44-fc-v657".into(),
            node_name: "node-1".into(),
            effective_caps: u64::MAX,
            tracefs: Some(PathBuf::from("/sys/kernel/tracing")),
            features: KernelFeatures {
                fentry: Probed::No("EPERM".into()),
                lockdown: Lockdown::Integrity,
                ..KernelFeatures::all_present()
            },
            in_container: false,
        }
    }

    #[test]
    fn a_good_node_has_no_problem() {
        assert!(problems(&good()).is_empty());
        assert_eq!(plan(&good(), AttachPoint::Auto).unwrap().attach, AttachPoint::Tracepoint);
    }

    #[test]
    fn an_old_version_number_is_no_refusal_what_is_missing_is() {
        let mut facts = NodeFacts { kernel_release: "5.10.0-35-cloud-amd64".into(), ..good() };
        facts.features.bpf_loop = Probed::No(String::new());
        assert_eq!(plan(&facts, AttachPoint::Auto).unwrap().walk, PathWalk::Unrolled);
        facts.features.ring_buffer = Probed::No(String::new());
        let p = problems(&facts);
        assert_eq!(p.len(), 1);
        assert!(p[0].what.contains("5.10.0-35-cloud-amd64") && p[0].what.contains("ring buffer"), "{p:?}");
    }

    #[test]
    fn unprivileged_is_told_to_use_root_or_caps() {
        let facts = NodeFacts { effective_caps: 0, tracefs: None, ..good() };
        let p = problems(&facts);
        // Nothing else is judged without privileges: the probes could not run.
        assert_eq!(p.len(), 1);
        assert!(p[0].fix.contains("root") && p[0].fix.contains("CAP_BPF") && p[0].fix.contains("CAP_PERFMON"));
        let bpf_and_perfmon = (1 << CAP_BPF) | (1 << CAP_PERFMON);
        assert!(problems(&NodeFacts { effective_caps: bpf_and_perfmon, ..good() }).is_empty());
        assert_eq!(problems(&NodeFacts { effective_caps: 1 << CAP_BPF, ..good() }).len(), 1);
    }

    #[test]
    fn missing_btf_and_tracefs_say_what_to_do() {
        let mut facts = good();
        facts.features.btf = BtfSource::Missing;
        facts.features.syscall_tracepoints = Probed::No("tracefs is not mounted".into());
        let p = problems(&facts);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].what.contains("BTF") && p[0].fix.contains("--btf"));
        assert!(p[1].fix.contains("mount -t tracefs nodev /sys/kernel/tracing"));
    }
}
