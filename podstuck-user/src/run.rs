//! What does not change while a run lasts: which podstuck, on which node
//! and kernel, since when, following what. Gathered once when a run
//! starts; the first line of the JSON output, the header of a record, the
//! metadata of the histogram files and the live view's header are all
//! made from it, so they never disagree.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use podstuck_common::Syscall;

use crate::event::syscall_name;
use crate::identify::pod::PodUid;
use crate::kernel_features::{AttachPoint, Lockdown, PathWalk};
use podstuck_common::program::Arch;

/// This podstuck's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The run, as told to everyone who says what it was.
#[derive(Clone, Debug, PartialEq)]
pub struct RunFacts {
    pub version: &'static str,
    /// The node's name (uname).
    pub node: String,
    /// The kernel release (uname -r).
    pub kernel: String,
    pub started: SystemTime,
    /// `--pod`: the pods followed; empty = the whole node.
    pub pods: Vec<PodUid>,
    /// `--kubelet-root`, which ties paths to pods.
    pub kubelet_root: PathBuf,
    /// `--syscall`: the calls asked for; empty = all four.
    pub syscalls: Vec<Syscall>,
    /// `--errors-only`: failed calls only, filtered in the kernel.
    pub errors_only: bool,
    /// `--every-call`: every call streamed, no budget per series.
    pub every_call: bool,
}

/// The syscalls traced when `asked` are asked for: those, or all those of
/// this architecture.
pub fn traced(asked: &[Syscall]) -> &[Syscall] {
    if asked.is_empty() {
        Arch::HOST.syscalls()
    } else {
        asked
    }
}

/// Why `asked` cannot be traced on `arch`, if it cannot: a syscall the
/// architecture lacks would watch nothing at all.
pub fn refuse_absent(arch: Arch, asked: &[Syscall]) -> Option<String> {
    let absent = asked.iter().find(|&&s| !arch.has(s))?;
    Some(format!(
        "--syscall {}: {} has no such system call (its removals, of files and directories alike, are unlinkat, with AT_REMOVEDIR for a directory): use --syscall unlinkat",
        syscall_name(*absent),
        arch.name()
    ))
}

impl RunFacts {
    /// The syscalls traced, by name.
    pub fn syscall_names(&self) -> Vec<&'static str> {
        traced(&self.syscalls).iter().map(|s| syscall_name(*s)).collect()
    }

    /// "the whole node" or "pod <uid>, pod <uid>"; plus the errors-only filter.
    pub fn scope(&self) -> String {
        let mut scope = if self.pods.is_empty() {
            "the whole node".to_string()
        } else {
            self.pods.iter().map(|p| format!("pod {p}")).collect::<Vec<_>>().join(", ")
        };
        if self.errors_only {
            scope.push_str(", failed calls only");
        }
        scope
    }

    /// Every filter in force, as a user would say them.
    pub fn filters(&self) -> String {
        let mut filters = self.scope();
        if !self.syscalls.is_empty() {
            filters.push_str(&format!(", {} only", self.syscall_names().join(", ")));
        }
        filters.push_str(&format!(", kubelet root {}", self.kubelet_root.display()));
        filters
    }
}

/// How the kernel side runs, once the programs are attached.
#[derive(Clone, Debug, PartialEq)]
pub struct Tracing {
    /// Kernel ids of the loaded programs.
    pub program_ids: Vec<u32>,
    /// Where they attached (after any fallback).
    pub attach: AttachPoint,
    pub path_walk: PathWalk,
    pub lockdown: Lockdown,
    /// What works less well on this kernel, in words.
    pub degraded: Vec<String>,
}

/// One program's runs and the time spent in them, as the kernel counts
/// them with BPF run-time statistics on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramCost {
    pub name: String,
    pub runs: u64,
    pub run_time_ns: u64,
}

impl std::fmt::Display for ProgramCost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let per_run = if self.runs == 0 { 0.0 } else { self.run_time_ns as f64 / self.runs as f64 };
        write!(f, "{} {} runs, {:.0} ns per run", self.name, self.runs, per_run)
    }
}

/// Totals for a run, as shown in the closing line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunTotals {
    /// Records received and decoded.
    pub events_seen: u64,
    /// Records the kernel could not put in the ring buffer.
    pub events_lost: u64,
    /// Of `events_lost`, the process lifecycle's (execs, signals, exits):
    /// their ring is apart from the calls', and a lost exit is what lets a
    /// reused pid inherit an old pod, so their loss is said apart too.
    pub lifecycle_lost: u64,
    /// The process lifecycle's records received, by kind (`exec`,
    /// `signal`, `exit`): every one the kernel sent, whoever it was about.
    pub lifecycle_seen: BTreeMap<&'static str, u64>,
    /// Every completed call of the node, counted in the kernel.
    pub calls: BTreeMap<Syscall, u64>,
    /// With `--pod`: the calls of the pods followed, by syscall, from the
    /// kernel's per-process counts (calls counted without their process,
    /// the series map full, cannot be told apart and are not in it).
    /// `None` when the whole node is followed: `calls` is then the answer.
    pub pods_calls: Option<BTreeMap<Syscall, u64>>,
    pub calls_without_entry: u64,
    pub entries_not_stored: u64,
    pub paths_unreadable: u64,
    pub records_undecodable: u64,
    /// Calls counted while the series map was full (still in the totals
    /// and histograms, without their process).
    pub calls_outside_series: u64,
    /// What each kernel program cost so far, with `--kernel-cost` (empty
    /// without: the kernel counts nothing then).
    pub programs: Vec<ProgramCost>,
    /// Execs of the node's CNI plugin files set aside as no runtime's work
    /// (a pod's process, a parent that is no runtime), by reason's name:
    /// they never reached a pod.
    pub lifecycle_dropped: BTreeMap<String, u64>,
    /// Failed calls whose path was the caller's word alone (made in a
    /// mount namespace where it is not the node's: a pod's own), by
    /// reason's name: set aside, never diagnosed.
    pub claims_set_aside: BTreeMap<String, u64>,
    /// Calls whose unproven path named another pod than the caller's.
    pub claims_naming_another_pod: u64,
    /// How podstuck's reads of the node stand (`watch`: avoided
    /// filesystems, recoveries, failures by kind).
    pub node_reads: NodeReads,
    /// Times the rings' reader found a queue full and left its ring to the
    /// kernel until the loop made room (the ring filled meanwhile), and
    /// the most a queue held.
    pub queue_full: u64,
    pub queue_high_water: u64,
}

impl RunTotals {
    /// The calls set aside as claims, in words; None when there were none.
    pub fn claims_words(&self) -> Option<String> {
        if self.claims_set_aside.is_empty() && self.claims_naming_another_pod == 0 {
            return None;
        }
        let failed: u64 = self.claims_set_aside.values().sum();
        let reasons: Vec<String> = self.claims_set_aside.iter().map(|(why, n)| format!("{why} {n}")).collect();
        let mut words = format!(
            "{failed} failed call(s) made where their path is not the node's (a pod's own mount namespace) set aside, never diagnosed"
        );
        if !reasons.is_empty() {
            words.push_str(&format!(" ({})", reasons.join(", ")));
        }
        if self.claims_naming_another_pod > 0 {
            words.push_str(&format!(
                "; {} call(s) named another pod's path from a pod's own namespace, believed for no pod",
                self.claims_naming_another_pod
            ));
        }
        Some(words)
    }
}

/// How podstuck's reads of the node stand at the end of a run or a scrape.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeReads {
    /// Filesystems avoided now: a read on each has not returned.
    pub avoided: Vec<AvoidedMount>,
    /// Filesystems that were avoided and answered again, all counted ...
    pub recovered_total: u64,
    /// ... the last few named.
    pub recovered: Vec<RecoveredMount>,
    /// Reads that failed, by kind ("timed-out", "avoided", "too-many"...).
    pub failed: BTreeMap<String, u64>,
}

/// A filesystem avoided now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AvoidedMount {
    pub mount_point: Vec<u8>,
    pub fstype: String,
    pub since: SystemTime,
    /// podstuck's readers still stuck on it.
    pub readers: usize,
}

/// A filesystem that was avoided, and answered again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveredMount {
    pub mount_point: Vec<u8>,
    pub fstype: String,
    pub avoided_for: Duration,
}

impl NodeReads {
    /// The reads in words, for the closing line and the summary; None
    /// when every read answered.
    pub fn words(&self) -> Option<String> {
        let mount = |point: &[u8], fstype: &str| match fstype {
            "" => crate::words::safe_text(point),
            fstype => format!("{} ({fstype})", crate::words::safe_text(point)),
        };
        let mut parts = Vec::new();
        if !self.avoided.is_empty() {
            let avoided: Vec<String> = self
                .avoided
                .iter()
                .map(|a| {
                    let since = crate::words::rfc3339_seconds(a.since);
                    format!("{} since {since}, {} reader(s) stuck", mount(&a.mount_point, &a.fstype), a.readers)
                })
                .collect();
            parts.push(format!("avoided now (a read there did not return): {}", avoided.join(", ")));
        }
        if self.recovered_total > 0 {
            let last: Vec<String> = self
                .recovered
                .iter()
                .rev()
                .take(3)
                .map(|r| {
                    format!(
                        "{} after {}",
                        mount(&r.mount_point, &r.fstype),
                        crate::words::human_duration(r.avoided_for)
                    )
                })
                .collect();
            parts.push(format!("{} avoided filesystem(s) answered again ({})", self.recovered_total, last.join(", ")));
        }
        if !self.failed.is_empty() {
            let failed: Vec<String> = self.failed.iter().map(|(kind, n)| format!("{kind} {n}")).collect();
            parts.push(format!("reads not answered, by kind: {}", failed.join(", ")));
        }
        (!parts.is_empty()).then(|| format!("node reads: {}", parts.join("; ")))
    }
}

impl RunTotals {
    /// The calls the run is about, by syscall: with `--pod` the pods'
    /// (every syscall the node's totals name, zero where the pods made
    /// none), else the node's.
    pub fn shown_calls(&self) -> BTreeMap<Syscall, u64> {
        match &self.pods_calls {
            Some(pods) => {
                self.calls.keys().chain(pods.keys()).map(|s| (*s, pods.get(s).copied().unwrap_or(0))).collect()
            }
            None => self.calls.clone(),
        }
    }

    /// With `--pod`, every call of the node, to be said apart as the
    /// node's; `None` when the shown calls are the node's already.
    pub fn node_calls(&self) -> Option<u64> {
        self.pods_calls.as_ref().map(|_| self.calls.values().sum())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn run() -> RunFacts {
        RunFacts {
            version: VERSION,
            node: "node-1".into(),
            kernel: "6.1.0-test".into(),
            started: SystemTime::UNIX_EPOCH,
            pods: Vec::new(),
            kubelet_root: PathBuf::from("/var/lib/kubelet"),
            syscalls: Vec::new(),
            errors_only: false,
            every_call: false,
        }
    }

    #[test]
    fn the_filters_are_said_as_a_user_gave_them() {
        assert_eq!(run().filters(), "the whole node, kubelet root /var/lib/kubelet");
        let all: &[&str] = if cfg!(target_arch = "aarch64") {
            &["unlinkat", "umount2"]
        } else {
            &["unlinkat", "unlink", "rmdir", "umount2"]
        };
        assert_eq!(run().syscall_names(), all);
        let pod = PodUid::parse("1b2c3d4e-0000-4000-8000-00000000000a").unwrap();
        let narrow = RunFacts { pods: vec![pod], syscalls: vec![Syscall::Rmdir], errors_only: true, ..run() };
        assert_eq!(narrow.scope(), "pod 1b2c3d4e-0000-4000-8000-00000000000a, failed calls only");
        assert_eq!(
            narrow.filters(),
            "pod 1b2c3d4e-0000-4000-8000-00000000000a, failed calls only, rmdir only, kubelet root /var/lib/kubelet"
        );
    }

    #[test]
    fn a_syscall_the_architecture_lacks_is_refused_with_the_one_it_has() {
        assert_eq!(refuse_absent(Arch::X86_64, &[Syscall::Rmdir, Syscall::Unlink]), None);
        assert_eq!(refuse_absent(Arch::Aarch64, &[Syscall::Unlinkat, Syscall::Umount2]), None);
        let why = refuse_absent(Arch::Aarch64, &[Syscall::Unlinkat, Syscall::Rmdir]).unwrap();
        assert!(why.starts_with("--syscall rmdir: aarch64 has no such system call"), "{why}");
        assert!(why.ends_with("use --syscall unlinkat"), "{why}");
    }
}
