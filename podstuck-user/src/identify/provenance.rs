//! Whether an exec of one of the node's CNI plugin files is the node's
//! runtime at work, decided on what the kernel proved, never on what a
//! workload claims. A pod's process may run the node's own plugin file
//! (a hostPath of `/opt/cni/bin`), name its parent `containerd` (prctl),
//! and put any pod's UID in `CNI_ARGS`; if podstuck believed it, one pod
//! could give another a critical finding and steer its fix.
//!
//! An exec counts only when:
//! - its file is one of the node's plugin files (the kernel compared the
//!   file it runs, by superblock and inode; checked again here against
//!   the table as it stands);
//! - it runs in no pod's cgroup (the cgroups the kernel read at the exec);
//! - its parent, the very process (pid and start time, as the kernel read
//!   them at the exec) is a runtime by its executable (containerd, CRI-O,
//!   cri-dockerd, dockerd, k3s, kubelet, podman: the file `/proc` names,
//!   in the node's mount namespace), or a plugin run this module already
//!   trusted (an IPAM or chained plugin), or a node plugin file itself.
//!
//! Anything else is dropped and counted by reason: the run's summary and
//! `/metrics` say it, and it never reaches a pod. Only a trusted exec's
//! `K8S_POD_UID` names a pod.

use std::collections::BTreeMap;

use podstuck_common::PluginFile;

use crate::event::ProcessStart;
use crate::identify::pod::PodUid;

pub use crate::identify::actor::RUNTIMES;

/// Trusted runs remembered, to trust the plugins they run in turn.
const RUNS_KEPT: usize = 1024;

/// Why an exec of a plugin file was not taken for the node's runtime at
/// work. Each is counted under its `name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// The file is not (or no longer) one of the node's plugin files.
    NotAPluginFile,
    /// It ran in a pod's cgroup: a pod's process, whatever it names.
    InAPod(PodUid),
    /// Its cgroup could not be found: nothing shows it is not a pod's.
    CgroupUnknown,
    /// The kernel could not say when it or its parent started.
    NoStartTime,
    /// Its parent is gone, or its pid names another process by now.
    ParentGone,
    /// Its parent's executable is no runtime's and no plugin's.
    ParentNotARuntime(String),
    /// Its parent runs in another mount namespace than the node's: a
    /// container's process, whatever its file is named.
    ParentInAContainer(String),
    /// Trusted, but its `CNI_*` variables were neither in the kernel's
    /// copy of its environment nor in `/proc` (it had ended): no pod.
    EnvironmentUnknown,
}

impl Dropped {
    /// The reason's name, as `/metrics` labels it.
    pub fn name(&self) -> &'static str {
        match self {
            Dropped::NotAPluginFile => "not-a-plugin-file",
            Dropped::InAPod(_) => "in-a-pod",
            Dropped::CgroupUnknown => "cgroup-unknown",
            Dropped::NoStartTime => "no-start-time",
            Dropped::ParentGone => "parent-gone",
            Dropped::ParentNotARuntime(_) => "parent-not-a-runtime",
            Dropped::ParentInAContainer(_) => "parent-in-a-container",
            Dropped::EnvironmentUnknown => "cni-environment-unknown",
        }
    }

    /// In words, for the one line the run says of the first of each.
    pub fn words(&self) -> String {
        match self {
            Dropped::NotAPluginFile => "its file is not one of the node's CNI plugins".into(),
            Dropped::InAPod(pod) => format!("it ran in pod {}'s cgroup", pod.as_str()),
            Dropped::CgroupUnknown => "its cgroup could not be found".into(),
            Dropped::NoStartTime => "the kernel could not say when it or its parent started".into(),
            Dropped::ParentGone => "its parent was gone (or its pid reused) before it could be checked".into(),
            Dropped::ParentNotARuntime(exe) => format!("its parent runs {exe}, no container runtime"),
            Dropped::ParentInAContainer(exe) => {
                format!("its parent ({exe}) runs in a container's mount namespace, not the node's")
            }
            Dropped::EnvironmentUnknown => {
                "its CNI variables lay past the environment the kernel copies, and it ended before /proc was read"
                    .into()
            }
        }
    }
}

/// How a trusted exec was trusted: the runtime that ran it, by its
/// executable, or the trusted plugin run it is part of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trusted {
    /// Run by this runtime (its executable's file name).
    Runtime(String),
    /// Run by a plugin run (pid) already trusted, or by a node plugin
    /// file: an IPAM or chained plugin.
    Plugin(String),
}

impl Trusted {
    /// Who ran it, in the user's words: "containerd", "bridge".
    pub fn runner(&self) -> &str {
        match self {
            Trusted::Runtime(name) | Trusted::Plugin(name) => name,
        }
    }
}

/// What `/proc` says of an exec's parent, read while it lives (a runtime
/// lives long; a plugin's parent plugin waits for it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParentFacts {
    /// Its start time now: another than the kernel's is another process.
    pub start: Option<ProcessStart>,
    /// Its executable as `/proc/<pid>/exe` names it.
    pub exe: Option<Vec<u8>>,
    /// Whether it lives in the node's mount namespace.
    pub in_node_namespace: bool,
    /// Its executable's file, when it is one of the node's plugin files.
    pub plugin_file: Option<PluginFile>,
}

/// What the kernel said of an exec, that the verdict rests on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecFacts {
    pub pid: u32,
    pub start: Option<ProcessStart>,
    pub ppid: u32,
    pub parent_start: Option<ProcessStart>,
    pub file: PluginFile,
    /// The pod its cgroups name, if any; None: its cgroup is unknown.
    pub pod_of_cgroup: Option<Option<PodUid>>,
}

/// The trusted runs seen, and the drops counted.
#[derive(Debug, Default)]
pub struct Provenance {
    /// Trusted plugin runs by (pid, start), with their file name: the
    /// plugins they run are trusted through them. Oldest forgotten first.
    runs: BTreeMap<(u32, ProcessStart), (u64, String)>,
    order: u64,
    /// Drops by reason's name, and the words of the first of each.
    pub dropped: BTreeMap<&'static str, (u64, String)>,
}

/// An executable's file name, without the " (deleted)" `/proc` adds once
/// the file was replaced (a runtime upgraded but not restarted).
pub fn exe_name(exe: &[u8]) -> String {
    let exe = exe.strip_suffix(b" (deleted)").unwrap_or(exe);
    crate::words::safe_text(exe.rsplit(|b| *b == b'/').next().unwrap_or(exe))
}

impl Provenance {
    /// The verdict on one exec; `plugin` names a file of the node's plugin
    /// table (None: not in it), `parent` reads its parent's facts (only
    /// when needed). A trusted run is remembered for the plugins it runs.
    pub fn judge(
        &mut self,
        exec: &ExecFacts,
        plugin: Option<&str>,
        parent: impl FnOnce() -> ParentFacts,
    ) -> Result<Trusted, Dropped> {
        let verdict = self.verdict(exec, plugin, parent);
        match &verdict {
            Ok(_) => {
                if let (Some(start), Some(name)) = (exec.start, plugin) {
                    self.remember(exec.pid, start, name);
                }
            }
            Err(why) => self.count(why),
        }
        verdict
    }

    /// Counts an exec set aside for `why`.
    pub fn count(&mut self, why: &Dropped) {
        let entry = self.dropped.entry(why.name()).or_insert_with(|| (0, why.words()));
        entry.0 += 1;
    }

    fn verdict(
        &self,
        exec: &ExecFacts,
        plugin: Option<&str>,
        parent: impl FnOnce() -> ParentFacts,
    ) -> Result<Trusted, Dropped> {
        if plugin.is_none() {
            return Err(Dropped::NotAPluginFile);
        }
        match &exec.pod_of_cgroup {
            None => return Err(Dropped::CgroupUnknown),
            Some(Some(pod)) => return Err(Dropped::InAPod(pod.clone())),
            Some(None) => {}
        }
        let (Some(_), Some(parent_start)) = (exec.start, exec.parent_start) else {
            return Err(Dropped::NoStartTime);
        };
        if let Some((_, name)) = self.runs.get(&(exec.ppid, parent_start)) {
            return Ok(Trusted::Plugin(name.clone()));
        }
        let facts = parent();
        if facts.start != Some(parent_start) {
            return Err(Dropped::ParentGone);
        }
        let Some(exe) = facts.exe.as_deref() else { return Err(Dropped::ParentGone) };
        let name = exe_name(exe);
        if !facts.in_node_namespace {
            return Err(Dropped::ParentInAContainer(crate::words::escape_path(exe)));
        }
        if facts.plugin_file.is_some() {
            return Ok(Trusted::Plugin(name));
        }
        if RUNTIMES.contains(&name.as_str()) {
            return Ok(Trusted::Runtime(name));
        }
        Err(Dropped::ParentNotARuntime(crate::words::escape_path(exe)))
    }

    fn remember(&mut self, pid: u32, start: ProcessStart, name: &str) {
        if self.runs.len() >= RUNS_KEPT {
            let oldest = self.runs.iter().min_by_key(|(_, (order, _))| *order).map(|(k, _)| *k);
            oldest.map(|k| self.runs.remove(&k));
        }
        self.order += 1;
        self.runs.insert((pid, start), (self.order, name.to_string()));
    }

    /// A trusted run ended: it runs no more plugins.
    pub fn ended(&mut self, pid: u32, start: Option<ProcessStart>) {
        if let Some(start) = start {
            self.runs.remove(&(pid, start));
        }
    }

    /// Every exec dropped, by reason.
    pub fn dropped_counts(&self) -> BTreeMap<String, u64> {
        self.dropped.iter().map(|(name, (n, _))| (name.to_string(), *n)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::fake::pod;

    const FILE: PluginFile = PluginFile { ino: 7, dev: 0x800001, _pad: 0 };

    fn exec(pid: u32, ppid: u32) -> ExecFacts {
        ExecFacts {
            pid,
            start: Some(ProcessStart(500)),
            ppid,
            parent_start: Some(ProcessStart(100)),
            file: FILE,
            pod_of_cgroup: Some(None),
        }
    }

    fn runtime(exe: &str) -> impl FnOnce() -> ParentFacts {
        let exe = exe.as_bytes().to_vec();
        move || ParentFacts {
            start: Some(ProcessStart(100)),
            exe: Some(exe),
            in_node_namespace: true,
            plugin_file: None,
        }
    }

    #[test]
    fn containerd_running_a_node_plugin_is_trusted_and_so_is_the_ipam_plugin_it_runs() {
        let mut p = Provenance::default();
        let outer = p.judge(&exec(40, 10), Some("bridge"), runtime("/usr/bin/containerd"));
        assert_eq!(outer, Ok(Trusted::Runtime("containerd".into())));
        // host-local, run by that bridge (pid 40, start 500): trusted
        // through it, without reading /proc.
        let mut ipam = exec(41, 40);
        ipam.parent_start = Some(ProcessStart(500));
        let inner = p.judge(&ipam, Some("host-local"), || panic!("the parent is known"));
        assert_eq!(inner, Ok(Trusted::Plugin("bridge".into())));
        // Upgraded on disk, not restarted: still containerd.
        assert!(p.judge(&exec(42, 10), Some("bridge"), runtime("/usr/bin/containerd (deleted)")).is_ok());
        assert!(p.dropped.is_empty());
    }

    #[test]
    fn what_a_workload_can_claim_is_dropped_and_counted() {
        let mut p = Provenance::default();
        // A pod's process running the node's own plugin file (a hostPath).
        let mut in_pod = exec(50, 10);
        in_pod.pod_of_cgroup = Some(Some(pod()));
        assert_eq!(p.judge(&in_pod, Some("bridge"), || panic!("never read")), Err(Dropped::InAPod(pod())));
        // Its parent named itself containerd: its file says otherwise.
        let verdict = p.judge(&exec(51, 11), Some("bridge"), runtime("/tmp/evil"));
        assert!(matches!(verdict, Err(Dropped::ParentNotARuntime(_))), "{verdict:?}");
        // A file named containerd in a container's mount namespace.
        let verdict = p.judge(&exec(52, 12), Some("bridge"), || ParentFacts {
            start: Some(ProcessStart(100)),
            exe: Some(b"/usr/bin/containerd".to_vec()),
            in_node_namespace: false,
            plugin_file: None,
        });
        assert!(matches!(verdict, Err(Dropped::ParentInAContainer(_))), "{verdict:?}");
        // The parent's pid reused by another process since.
        let verdict = p.judge(&exec(53, 13), Some("bridge"), || ParentFacts {
            start: Some(ProcessStart(999)),
            ..runtime("/usr/bin/containerd")()
        });
        assert_eq!(verdict, Err(Dropped::ParentGone));
        // Not a plugin file (any more), and no start time from the kernel.
        assert_eq!(p.judge(&exec(54, 10), None, || panic!()), Err(Dropped::NotAPluginFile));
        let mut blind = exec(55, 10);
        blind.parent_start = None;
        assert_eq!(p.judge(&blind, Some("bridge"), || panic!()), Err(Dropped::NoStartTime));
        let mut lost = exec(57, 10);
        lost.pod_of_cgroup = None;
        assert_eq!(p.judge(&lost, Some("bridge"), || panic!()), Err(Dropped::CgroupUnknown));
        let counts = p.dropped_counts();
        assert_eq!(counts.values().sum::<u64>(), 7, "{counts:?}");
        assert_eq!(p.dropped["in-a-pod"].1, format!("it ran in pod {}'s cgroup", pod().as_str()));
        assert_eq!(counts["in-a-pod"], 1);
        // A run of a dropped exec trusts nothing it runs: its parent's own
        // facts decide (a plugin file would be trusted, this one is not).
        let mut child = exec(56, 50);
        child.parent_start = Some(ProcessStart(500));
        let verdict = p.judge(&child, Some("host-local"), || ParentFacts {
            start: Some(ProcessStart(500)),
            ..runtime("/opt/cni/bin/calico")()
        });
        assert!(matches!(verdict, Err(Dropped::ParentNotARuntime(_))), "{verdict:?}");
    }

    #[test]
    fn remembered_runs_are_bounded_oldest_first() {
        let mut p = Provenance::default();
        for pid in 0..(RUNS_KEPT as u32 + 10) {
            let mut e = exec(pid + 1000, 10);
            e.start = Some(ProcessStart(u64::from(pid)));
            p.judge(&e, Some("bridge"), runtime("/usr/bin/containerd")).unwrap();
        }
        assert_eq!(p.runs.len(), RUNS_KEPT);
        assert!(!p.runs.contains_key(&(1000, ProcessStart(0))), "the oldest went first");
        assert!(p.runs.contains_key(&(1000 + RUNS_KEPT as u32 + 9, ProcessStart(u64::from(RUNS_KEPT as u32 + 9)))));
    }
}
