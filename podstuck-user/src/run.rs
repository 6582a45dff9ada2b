//! What does not change while a run lasts: which podstuck, on which node
//! and kernel, since when, following what. Gathered once when a run
//! starts; the first line of the JSON output, the header of a record, the
//! metadata of the histogram files and the live view's header are all
//! made from it, so they never disagree.

use std::path::PathBuf;
use std::time::SystemTime;

use podstuck_common::Syscall;

use crate::event::syscall_name;
use crate::identify::pod::PodUid;
use crate::kernel_features::{AttachPoint, Lockdown, PathWalk};

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

/// The syscalls traced when `asked` are asked for: those, or all four.
pub fn traced(asked: &[Syscall]) -> &[Syscall] {
    if asked.is_empty() {
        &Syscall::ALL
    } else {
        asked
    }
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
        assert_eq!(run().syscall_names(), ["unlinkat", "unlink", "rmdir", "umount2"]);
        let pod = PodUid::parse("1b2c3d4e-0000-4000-8000-00000000000a").unwrap();
        let narrow = RunFacts { pods: vec![pod], syscalls: vec![Syscall::Rmdir], errors_only: true, ..run() };
        assert_eq!(narrow.scope(), "pod 1b2c3d4e-0000-4000-8000-00000000000a, failed calls only");
        assert_eq!(narrow.filters(), "pod 1b2c3d4e-0000-4000-8000-00000000000a, failed calls only, rmdir only, kubelet root /var/lib/kubelet");
    }
}
