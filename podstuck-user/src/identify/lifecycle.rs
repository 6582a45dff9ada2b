//! Who a process lifecycle record is about (an exec of a CNI plugin, a
//! SIGTERM or SIGKILL, an exit), beside the calls' identification and by
//! the same rule: decided on what the kernel proved (cgroups, start
//! times, the file exec'd), never on what a workload says of itself. An
//! exec is a pod's only when it is the node's runtime at work
//! ([`super::provenance`]); a signal is its target's, by the target's own
//! cgroups or as an earlier record named it; an exit is the process's
//! that an exec or signal named (by pid and start: a pid named again by
//! another process is that other process).
//!
//! Reads `/proc` only: a parent's start, executable and mount namespace,
//! a plugin's environment past the kernel's copy. The node's plugin files
//! are known to `cni_plugins`, beside this module: the watch hands their
//! table in ([`PluginTable`]).

use std::collections::BTreeMap;
use std::path::Path;

use podstuck_common::PluginFile;

use super::kubelet_connect::{self, ConnectFacts, CsiVolume};
use super::namespaces::namespace_of;
use super::pod::PodUid;
use super::process::process_start;
use super::provenance::{exe_name, Dropped, ExecFacts, ParentFacts, Provenance};
use super::{Actor, Identifier, KernelCgroups};
use crate::event::ProcessStart;
use crate::lifecycle::{CniRun, Lifecycle, LifecycleEvent};

/// Who an event is about, as identified: the pod it concerns (a signal's
/// target's, by its cgroups; a trusted CNI run's `K8S_POD_UID`; an exit's
/// as its exec or signal said) and the process behind it (a signal's
/// sender).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LifecycleIdentity {
    pub pod_uid: Option<PodUid>,
    pub actor: Actor,
    /// A signal's sender's pod, by the cgroups the kernel read: a pod's
    /// own process signalling its own (a supervisor restarting its
    /// workers) is no teardown.
    pub sender_pod: Option<PodUid>,
    /// A signal's target's start: with its pid, the one process meant.
    pub target_start: Option<ProcessStart>,
    /// A CNI exec's runner, by executable (`containerd`, `crio`, the
    /// plugin that ran it): never its comm.
    pub runner: Option<String>,
    /// A failing connect of kubelet's: the followed pods' CSI volumes of
    /// the driver its socket names (`pod_uid` is the first's pod).
    pub csi_volumes: Vec<CsiVolume>,
}

impl LifecycleIdentity {
    /// `actor`'s, about `pod`, nothing more known.
    pub fn of(pod_uid: Option<PodUid>, actor: Actor) -> LifecycleIdentity {
        LifecycleIdentity {
            pod_uid,
            actor,
            sender_pod: None,
            target_start: None,
            runner: None,
            csi_volumes: Vec::new(),
        }
    }
}

/// The node's CNI plugin files, as the watch knows them.
pub trait PluginTable {
    /// The path of plugin file `file`, when it is one.
    fn path_of(&self, file: &PluginFile) -> Option<&Path>;
    /// The plugin file process `pid` runs, when it runs one.
    fn file_of_process(&self, proc_root: &Path, pid: u32) -> Option<PluginFile>;
}

/// Processes remembered between their exec or signal and their exit, at
/// most: past this the oldest are forgotten (the kernel's own map of them
/// is as large, and LRU).
const NAMED_MAX: usize = 4096;

/// The bytes of a plugin's `/proc/<pid>/environ` read, at most, when the
/// kernel's copy was cut before its `CNI_*` variables.
const ENVIRON_MAX: u64 = 64 * 1024;

/// A process an event named: when it started and its pod.
#[derive(Clone, Debug)]
struct NamedProcess {
    start: Option<ProcessStart>,
    pod: Option<PodUid>,
    order: u64,
}

/// The processes named, by pid, each with its start.
#[derive(Debug, Default)]
struct Named {
    by_pid: BTreeMap<u32, NamedProcess>,
    order: u64,
}

impl Named {
    fn insert(&mut self, pid: u32, start: Option<ProcessStart>, pod: Option<PodUid>) {
        if !self.by_pid.contains_key(&pid) && self.by_pid.len() >= NAMED_MAX {
            let oldest = self.by_pid.iter().min_by_key(|(_, n)| n.order).map(|(pid, _)| *pid);
            oldest.map(|pid| self.by_pid.remove(&pid));
        }
        self.order += 1;
        self.by_pid.insert(pid, NamedProcess { start, pod, order: self.order });
    }

    /// Process `pid` as named, if `start` is its start (either unknown:
    /// taken as the same, the pid being all there is to go by).
    fn get(&self, pid: u32, start: Option<ProcessStart>) -> Option<&NamedProcess> {
        self.by_pid.get(&pid).filter(|n| ProcessStart::may_be_same(n.start, start))
    }

    fn remove(&mut self, pid: u32, start: Option<ProcessStart>) -> Option<NamedProcess> {
        self.get(pid, start)?;
        self.by_pid.remove(&pid)
    }
}

/// What identifying lifecycle records keeps between them: the processes
/// named, and which plugin runs were trusted (and what was dropped).
#[derive(Debug, Default)]
pub struct LifecycleMemory {
    named: Named,
    provenance: Provenance,
    /// kubelet's failing connects set aside, by reason.
    connects_dropped: BTreeMap<&'static str, u64>,
}

impl LifecycleMemory {
    /// Lifecycle records set aside as untrusted, by reason.
    pub fn dropped_counts(&self) -> BTreeMap<String, u64> {
        let mut counts = self.provenance.dropped_counts();
        counts.extend(self.connects_dropped.iter().map(|(why, n)| (why.to_string(), *n)));
        counts
    }
}

impl Identifier {
    /// Who lifecycle record `event` is about, when it is about a pod that
    /// `follows` says is followed (None: set aside, counted where it was a
    /// plugin exec not trusted); `plugins`, the node's plugin files. A
    /// trusted exec may have its CNI variables filled from `/proc` here.
    pub fn identify_lifecycle(
        &mut self,
        event: &mut LifecycleEvent,
        plugins: Option<&dyn PluginTable>,
        follows: impl Fn(Option<&PodUid>) -> bool,
    ) -> Option<LifecycleIdentity> {
        // An exit of a process nothing named before is none of ours.
        if let Lifecycle::Exit { .. } = event.what {
            self.lifecycle.named.get(event.pid, event.start)?;
            self.lifecycle.provenance.ended(event.pid, event.start);
        }
        let identity = self.lifecycle_identity(event, plugins, follows)?;
        let named = match &event.what {
            Lifecycle::Exec { .. } => Some((event.pid, event.start)),
            Lifecycle::Signal(sent) => Some((sent.target_pid, identity.target_start)),
            Lifecycle::Exit { .. } | Lifecycle::ConnectFailed(_) | Lifecycle::PluginWrote(_) => None,
        };
        if let Some((pid, start)) = named {
            self.lifecycle.named.insert(pid, start, identity.pod_uid.clone());
        }
        Some(identity)
    }

    /// Lifecycle records set aside as untrusted, by reason.
    pub fn lifecycle_dropped(&self) -> BTreeMap<String, u64> {
        self.lifecycle.dropped_counts()
    }

    fn lifecycle_identity(
        &mut self,
        event: &mut LifecycleEvent,
        plugins: Option<&dyn PluginTable>,
        follows: impl Fn(Option<&PodUid>) -> bool,
    ) -> Option<LifecycleIdentity> {
        if let Lifecycle::ConnectFailed(failed) = &event.what {
            return self.connect_identity(event, failed, follows);
        }
        let cgroups = cgroups_of(event);
        let (mut runner, mut target_start) = (None, None);
        let pod_uid = match &mut event.what {
            Lifecycle::Exec { file, cni, env_cut, .. } => {
                let parent = (event.ppid, event.parent_start);
                let trusted = self.trusted_exec((event.pid, event.start, cgroups), parent, *file, plugins)?;
                if *env_cut && cni.as_ref().is_none_or(|c| c.pod_uid.is_none()) {
                    // The variables past the kernel's cut, while the plugin lives.
                    if let Some(more) = environ_of(&self.proc_root, event.pid, event.start) {
                        *cni = CniRun::from_env(&more).or(cni.take());
                    }
                }
                let Some(run) = cni.as_ref() else {
                    self.lifecycle.provenance.count(&Dropped::EnvironmentUnknown);
                    return None;
                };
                runner = Some(trusted);
                run.pod_uid.clone()
            }
            // The target's pod: as an earlier signal named it (a SIGKILL's
            // target is gone from /proc by the time its record is read),
            // else from its cgroups; its start from /proc, or as named.
            Lifecycle::Signal(sent) => {
                let start = process_start(&self.proc_root, sent.target_pid);
                target_start = start;
                match self.lifecycle.named.get(sent.target_pid, start) {
                    Some(named) => {
                        target_start = named.start.or(start);
                        named.pod.clone()
                    }
                    None if start.is_some() => self.pod_of_process(sent.target_pid),
                    None => None,
                }
            }
            Lifecycle::Exit { .. } => self.lifecycle.named.remove(event.pid, event.start)?.pod,
            // A write of a process no trusted plugin exec named is none of ours.
            Lifecycle::PluginWrote(_) => self.lifecycle.named.get(event.pid, event.start)?.pod.clone(),
            Lifecycle::ConnectFailed(_) => unreachable!("identified above"),
        };
        // A signal or an exit is its target's: one for no pod followed (most
        // of a node's) is dropped before its sender is read from /proc.
        if !follows(pod_uid.as_ref()) {
            return None;
        }
        let mut actor = self.identify_task(event.pid, &event.comm, event.ppid, cgroups).actor;
        if let Some(runner) = &runner {
            // Who ran it by its executable: the comm is the workload's.
            actor.parent = runner.clone();
            actor.description = format!("{} (child of {runner})", actor.comm);
        }
        let mut identity = LifecycleIdentity::of(pod_uid, actor);
        if let Lifecycle::Signal(_) = event.what {
            identity.sender_pod = self.pod_of_caller(event.pid, cgroups).flatten();
        }
        identity.target_start = target_start;
        identity.runner = runner;
        Some(identity)
    }

    /// A failing connect's: the followed pods' CSI volumes it keeps, when
    /// its caller is kubelet ([`kubelet_connect`]); None (counted by why)
    /// when it is not, or it names none.
    fn connect_identity(
        &mut self,
        event: &LifecycleEvent,
        failed: &crate::lifecycle::ConnectFailed,
        follows: impl Fn(Option<&PodUid>) -> bool,
    ) -> Option<LifecycleIdentity> {
        let cgroups = cgroups_of(event);
        let pod_of_caller = self.pod_of_caller(event.pid, cgroups);
        let facts =
            ConnectFacts { event, failed, pod_of_caller, proc_root: &self.proc_root, kubelet_dir: &self.kubelet_dir };
        match kubelet_connect::judge(&facts, |pod| follows(Some(pod))) {
            Err(why) => {
                *self.lifecycle.connects_dropped.entry(kubelet_connect::dropped_name(why)).or_default() += 1;
                None
            }
            Ok(volumes) => {
                let actor = self.identify_task(event.pid, &event.comm, event.ppid, cgroups).actor;
                let mut identity = LifecycleIdentity::of(volumes.first().map(|v| v.pod.clone()), actor);
                identity.csi_volumes = volumes;
                Some(identity)
            }
        }
    }

    /// The runner of an exec of plugin file `file` by `pid` (started at
    /// `start`, in `cgroups` as the kernel read them), child of `parent`
    /// (its pid and start as the kernel read them), when it is the node's
    /// runtime at work; None (counted by why) when it is not.
    fn trusted_exec(
        &mut self,
        (pid, start, cgroups): (u32, Option<ProcessStart>, KernelCgroups),
        (ppid, parent_start): (u32, Option<ProcessStart>),
        file: PluginFile,
        plugins: Option<&dyn PluginTable>,
    ) -> Option<String> {
        let plugin = plugins.and_then(|p| p.path_of(&file)).map(|p| exe_name(p.as_os_str().as_encoded_bytes()));
        let facts = ExecFacts { pid, start, ppid, parent_start, file, pod_of_cgroup: self.pod_of_caller(pid, cgroups) };
        let (proc_root, node_mntns) = (self.proc_root.clone(), self.namespaces.node_mntns());
        let parent = || parent_facts(&proc_root, ppid, node_mntns, plugins);
        let trusted = self.lifecycle.provenance.judge(&facts, plugin.as_deref(), parent).ok()?;
        Some(trusted.runner().to_string())
    }
}

/// The cgroups of `event`'s process, as the kernel read them.
fn cgroups_of(event: &LifecycleEvent) -> KernelCgroups {
    KernelCgroups { v2: event.cgroup_id, v1: event.v1_cgroup_id, v1_hierarchy: event.v1_hierarchy }
}

/// What `/proc` says of an exec's parent, read while it lives (a runtime
/// lives long; a plugin's parent plugin waits for it).
fn parent_facts(proc_root: &Path, ppid: u32, node_mntns: u32, plugins: Option<&dyn PluginTable>) -> ParentFacts {
    let entry = proc_root.join(ppid.to_string());
    let start = process_start(proc_root, ppid);
    let exe = std::fs::read_link(entry.join("exe")).ok().map(|p| p.into_os_string().into_encoded_bytes());
    let in_node_namespace = namespace_of(proc_root, ppid).is_some_and(|ns| ns == node_mntns);
    let plugin_file = plugins.and_then(|p| p.file_of_process(proc_root, ppid));
    // Read once more: a parent that exited and whose pid was taken while
    // it was read is another process, whatever the reads said.
    let start = start.filter(|s| process_start(proc_root, ppid) == Some(*s));
    ParentFacts { start, exe, in_node_namespace, plugin_file }
}

/// A process's environment from `/proc`, if it is still the one that
/// started at `start`.
fn environ_of(proc_root: &Path, pid: u32, start: Option<ProcessStart>) -> Option<Vec<u8>> {
    use std::io::Read;
    let start = start?;
    let file = std::fs::File::open(proc_root.join(pid.to_string()).join("environ")).ok()?;
    let mut env = Vec::new();
    file.take(ENVIRON_MAX).read_to_end(&mut env).ok()?;
    (process_start(proc_root, pid) == Some(start)).then_some(env)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identify::tests::{FakeNode, NODE_NS, POD_A};
    use std::os::unix::fs::MetadataExt;

    /// The node's bridge plugin, by superblock and inode.
    const BRIDGE: PluginFile = PluginFile { ino: 77, dev: 8, _pad: 0 };

    /// The node's plugin table: the bridge alone.
    struct Bridge;

    impl PluginTable for Bridge {
        fn path_of(&self, file: &PluginFile) -> Option<&Path> {
            (*file == BRIDGE).then(|| Path::new("/opt/cni/bin/bridge"))
        }
        fn file_of_process(&self, _proc_root: &Path, _pid: u32) -> Option<PluginFile> {
            None
        }
    }

    /// A process in the fake /proc: its stat line (its start in field
    /// 22), executable and mount namespace.
    fn process(node: &FakeNode, pid: u32, comm: &str, start: u64, exe: &str, mntns: u32) {
        let dir = node.dir.join("proc").join(pid.to_string());
        std::fs::create_dir_all(dir.join("ns")).unwrap();
        let stat = format!("{pid} ({comm}) S 1{} {start} 0 0\n", " 0".repeat(17));
        std::fs::write(dir.join("stat"), stat).unwrap();
        std::fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
        std::os::unix::fs::symlink(exe, dir.join("exe")).unwrap();
        std::os::unix::fs::symlink(format!("mnt:[{mntns}]"), dir.join("ns/mnt")).unwrap();
    }

    /// A cgroup of the node's own (no pod's), and its id.
    fn service_cgroup(node: &FakeNode) -> u64 {
        let dir = node.dir.join("cgroup/system.slice/containerd.service");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::metadata(dir).unwrap().ino()
    }

    /// The bridge plugin exec'd (pid 5000, started at 500) by pid 4000
    /// (started at 400, as the kernel read it), a DEL for pod A.
    fn bridge_del(cgroup_id: u64) -> LifecycleEvent {
        let env = format!("CNI_COMMAND=DEL\0CNI_CONTAINERID=abc\0CNI_ARGS=K8S_POD_UID={POD_A}\0");
        LifecycleEvent {
            time: std::time::SystemTime::UNIX_EPOCH,
            pid: 5000,
            start: Some(ProcessStart(500)),
            ppid: 4000,
            parent_start: Some(ProcessStart(400)),
            comm: "bridge".into(),
            cgroup_id,
            v1_cgroup_id: 0,
            v1_hierarchy: 0,
            what: Lifecycle::Exec {
                filename: b"/opt/cni/bin/bridge".to_vec(),
                cni: CniRun::from_env(env.as_bytes()),
                file: BRIDGE,
                mntns: NODE_NS,
                env_cut: false,
            },
        }
    }

    /// The whole node, as the pipeline follows it: any pod, never no pod.
    fn everyone(pod: Option<&PodUid>) -> bool {
        pod.is_some()
    }

    #[test]
    fn a_runtime_by_its_executable_in_the_nodes_namespace_runs_a_trusted_plugin() {
        let node = FakeNode::new("lifecycle-runtime");
        process(&node, 4000, "anything", 400, "/usr/bin/containerd", NODE_NS);
        let mut identifier = node.identifier();
        let mut exec = bridge_del(service_cgroup(&node));
        let identity = identifier.identify_lifecycle(&mut exec, Some(&Bridge), everyone).expect("trusted");
        assert_eq!(identity.pod_uid.as_ref().map(PodUid::as_str), Some(POD_A));
        assert_eq!(identity.runner.as_deref(), Some("containerd"));
        assert_eq!(identity.actor.description, "bridge (child of containerd)");
        assert!(identifier.lifecycle_dropped().is_empty());
    }

    #[test]
    fn a_forged_parent_a_reused_pid_a_container_and_a_pod_are_no_runtime_at_work() {
        let cases: [(&str, u64, &str, u32, &str); 3] = [
            // Named containerd, running a shell: its executable says.
            ("containerd", 400, "/bin/sh", NODE_NS, "parent-not-a-runtime"),
            // The parent's pid names another process by now (its start).
            ("containerd", 999, "/usr/bin/containerd", NODE_NS, "parent-gone"),
            // A containerd of a container's own namespace.
            ("containerd", 400, "/usr/bin/containerd", 4026532777, "parent-in-a-container"),
        ];
        for (comm, start, exe, mntns, why) in cases {
            let node = FakeNode::new("lifecycle-forged");
            process(&node, 4000, comm, start, exe, mntns);
            let mut identifier = node.identifier();
            let mut exec = bridge_del(service_cgroup(&node));
            assert_eq!(identifier.identify_lifecycle(&mut exec, Some(&Bridge), everyone), None, "{why}");
            assert_eq!(identifier.lifecycle_dropped().get(why), Some(&1), "{why}");
        }
        // Run in pod B's cgroup, whatever its parent.
        let node = FakeNode::new("lifecycle-in-a-pod");
        process(&node, 4000, "containerd", 400, "/usr/bin/containerd", NODE_NS);
        let mut identifier = node.identifier();
        let mut exec = bridge_del(node.cgroup_id_of_pod_b());
        assert_eq!(identifier.identify_lifecycle(&mut exec, Some(&Bridge), everyone), None);
        assert_eq!(identifier.lifecycle_dropped().get("in-a-pod"), Some(&1));
        // Not the node's plugin file at all.
        let mut exec = bridge_del(service_cgroup(&node));
        if let Lifecycle::Exec { file, .. } = &mut exec.what {
            file.ino = 78;
        }
        assert_eq!(identifier.identify_lifecycle(&mut exec, Some(&Bridge), everyone), None);
        assert_eq!(identifier.lifecycle_dropped().get("not-a-plugin-file"), Some(&1));
    }

    /// An exit is the process's an exec named only when it is that very
    /// process: its pid named again by another (its start) is another's.
    #[test]
    fn an_exit_is_the_named_process_only_by_its_pid_and_start() {
        let node = FakeNode::new("lifecycle-exit");
        process(&node, 4000, "containerd", 400, "/usr/bin/containerd", NODE_NS);
        let mut identifier = node.identifier();
        let mut exec = bridge_del(service_cgroup(&node));
        assert!(identifier.identify_lifecycle(&mut exec, Some(&Bridge), everyone).is_some());
        let exit = |start: u64| LifecycleEvent {
            start: Some(ProcessStart(start)),
            what: Lifecycle::Exit { status: Some(256), last_thread: true },
            ..bridge_del(0)
        };
        assert_eq!(identifier.identify_lifecycle(&mut exit(600), Some(&Bridge), everyone), None, "a reused pid");
        let identity = identifier.identify_lifecycle(&mut exit(500), Some(&Bridge), everyone).expect("its exit");
        assert_eq!(identity.pod_uid.as_ref().map(PodUid::as_str), Some(POD_A));
        // Once: a second exit of it names nothing.
        assert_eq!(identifier.identify_lifecycle(&mut exit(500), Some(&Bridge), everyone), None);
        // A signal's target is tied by its own cgroup, never its sender's word.
        let signal = |target: u32| LifecycleEvent {
            what: Lifecycle::Signal(crate::lifecycle::SignalSent {
                sig: libc::SIGTERM,
                result: crate::lifecycle::SignalResult::Delivered,
                target_pid: target,
                target_comm: "app".into(),
                group: true,
                group_exiting: Some(false),
            }),
            ..bridge_del(0)
        };
        assert_eq!(identifier.identify_lifecycle(&mut signal(31337), None, everyone), None, "a target gone");
    }
}
