//! Identify: ties each call to the pod it concerns and names its actor.
//!
//! The processes that tear a pod down (kubelet, the runtime, shims, runc,
//! CSI plugins) are not inside the pod, so a call concerns pod X when its
//! path names X (kubelet's tree, a pod cgroup, a container of X), or when
//! the caller itself runs in X's cgroup. Both are checked; the path wins
//! when they disagree, because it says what was acted on, but only a path
//! the kernel proves is the node's ([`path_proof`]): a path a caller in a
//! pod's own mount namespace passes is its claim, and such a call is its
//! own pod's alone, by the cgroup the kernel read.
//!
//! Reads node state (the cgroup tree, docker's layer metadata,
//! containers/storage's container index, `/proc/<pid>/exe`) through small
//! caches; never changes anything.

pub mod actor;
pub mod cgroups;
pub mod docker;
pub mod kubelet_connect;
pub mod lifecycle;
pub mod namespaces;
pub mod owner;
pub mod path_proof;
pub mod process;
pub mod provenance;
pub use crate::pod;
pub mod storage;
pub mod target;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::event::{CallEvent, Flight, NoPath};
use crate::node_access::Node;
use actor::{describe, role_of, Role};
use cgroups::{cgroup2_mount, cgroup_path_of_process, v1_hierarchies, CgroupIndex, V1Hierarchy};
use docker::{DockerLayers, DEFAULT_DOCKER_ROOT};
use lifecycle::LifecycleMemory;
pub use lifecycle::{LifecycleIdentity, PluginTable};
use namespaces::Namespaces;
use path_proof::{judge, CallPlace, PathProof};
use pod::{clues_from_cgroup, clues_from_path, ContainerId, PathArea, PodUid};
use process::ProcessFacts;
use storage::StorageLayers;
use target::{Target, Targets};

/// Where kubelet keeps pods unless told otherwise (`--root-dir`).
pub const DEFAULT_KUBELET_ROOT: &str = "/var/lib/kubelet";

/// Caches stay small on a busy node: cleared when full, refilled on demand.
const CACHE_LIMIT: usize = 4096;

/// How often an index of node state (the cgroup tree, docker's layers) may
/// be rebuilt after a lookup misses: a miss for something long gone would
/// otherwise rescan on every event.
#[derive(Clone, Debug)]
pub struct RescanLimit {
    last_scan: Option<std::time::Instant>,
    min_interval: std::time::Duration,
}

impl Default for RescanLimit {
    fn default() -> RescanLimit {
        RescanLimit { last_scan: None, min_interval: std::time::Duration::from_secs(1) }
    }
}

impl RescanLimit {
    pub fn set_min_interval(&mut self, interval: std::time::Duration) {
        self.min_interval = interval;
    }

    /// Records that a scan happens now.
    pub fn scanned(&mut self) {
        self.last_scan = Some(std::time::Instant::now());
    }

    /// Whether a scan is allowed now.
    pub fn due(&self) -> bool {
        self.last_scan.is_none_or(|at| at.elapsed() >= self.min_interval)
    }
}

/// The caller of a call, as identify reads it: from the event the kernel
/// streamed, or from `/proc` for a call known only by its thread.
struct Caller<'a> {
    pid: u32,
    comm: &'a str,
    pcomm: &'a str,
    /// The v2 cgroup the kernel recorded; 0 when unknown.
    cgroup_id: u64,
    /// The v1 cgroup the kernel recorded (0 when not read), and which of
    /// the hierarchies it asked for it is of.
    v1_cgroup_id: u64,
    v1_hierarchy: u8,
    /// The mount namespace of the call (its inode); 0 when unknown.
    mntns: u32,
}

/// A process's cgroups as the kernel read them when it acted: the v2 id,
/// and the v1 id with its hierarchy's place in the run's list (0s: none
/// read, then `/proc` says).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelCgroups {
    pub v2: u64,
    pub v1: u64,
    pub v1_hierarchy: u8,
}

impl ProcessFacts {
    /// The caller these facts name, in cgroup `cgroup_id` where known.
    fn caller(&self, cgroup_id: u64) -> Caller<'_> {
        Caller {
            pid: self.pid,
            comm: &self.comm,
            pcomm: &self.pcomm,
            cgroup_id,
            v1_cgroup_id: 0,
            v1_hierarchy: 0,
            mntns: 0,
        }
    }
}

/// Who made a call, as a person reads it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    pub comm: String,
    /// The executable, when it could still be read (short-lived helpers
    /// such as `umount` may be gone by then).
    pub exe: Option<String>,
    pub parent: String,
    pub role: Role,
    /// "kubelet", or "umount (child of kubelet)".
    pub description: String,
}

/// Why an event was tied to its pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MatchReason {
    /// The path lies in the pod's kubelet tree or cgroup.
    Path,
    /// The path names a container of the pod.
    Container,
    /// The caller runs in the pod's cgroup.
    Cgroup,
}

/// What podstuck knows of a call beyond its arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub abs_path: Result<Vec<u8>, NoPath>,
    pub pod_uid: Option<PodUid>,
    pub path_area: Option<PathArea>,
    /// What the path is, for the detectors (`diagnose::route`): Other
    /// for a claim's path.
    pub target: Target,
    pub container_id: Option<ContainerId>,
    pub actor: Actor,
    pub matched: Vec<MatchReason>,
    /// How far the path speaks for the node: a claim's path names no pod,
    /// no container and no area, and no detector reads the node at it.
    pub proof: PathProof,
    /// The pod an unproven path named (a claim), when it is not the
    /// caller's own: said, never believed.
    pub claimed_pod: Option<PodUid>,
}

impl Identity {
    /// Whether the path is proven the node's (or its runtime's), so the
    /// node's state at it says something of the call.
    pub fn proven(&self) -> bool {
        self.proof.proven()
    }
}

/// Where on this node to look.
#[derive(Clone, Debug)]
pub struct NodeLayout {
    pub kubelet_root: PathBuf,
    pub docker_root: PathBuf,
    /// The node's `/` as podstuck reaches it, and its mount table: where
    /// containers/storage's stores are found ([`storage`]).
    pub node_root: PathBuf,
    pub mountinfo: PathBuf,
    /// The cgroup v2 mount; None on v1-only hosts.
    pub cgroup2_root: Option<PathBuf>,
    /// The v1 hierarchies whose cgroups the kernel programs read for each
    /// call, in the order they try them ([`cgroups::v1_hierarchies`]):
    /// controller and mount each; empty on v2-only hosts.
    pub cgroup_v1: Vec<V1Hierarchy>,
    /// Where `<pid>/exe` and `<pid>/cgroup` are read.
    pub proc_root: PathBuf,
    /// How the node is reached from where podstuck runs.
    pub node: &'static Node,
}

impl NodeLayout {
    /// This node: the given kubelet root, docker's default root, the cgroup
    /// v2 mount found in the node's mountinfo. Directories are as podstuck
    /// reaches them from where it runs; the kubelet root stays the node's
    /// spelling, as the kernel reports paths in it.
    pub fn of_this_node(node: &'static Node, kubelet_root: PathBuf) -> NodeLayout {
        let mountinfo = std::fs::read_to_string(node.mountinfo()).unwrap_or_default();
        NodeLayout {
            kubelet_root,
            docker_root: node.path(DEFAULT_DOCKER_ROOT),
            node_root: node.path("/"),
            mountinfo: node.mountinfo(),
            cgroup2_root: cgroup2_mount(&mountinfo).map(|at| node.path(at)),
            cgroup_v1: v1_hierarchies(&mountinfo)
                .into_iter()
                .map(|h| V1Hierarchy { controller: h.controller, mount: node.path(h.mount) })
                .collect(),
            proc_root: node.proc_root(),
            node,
        }
    }
}

/// Turns events into identities, keeping what it learned of the node.
pub struct Identifier {
    kubelet_roots: Vec<PathBuf>,
    /// The kubelet root as podstuck reaches it (its files read there).
    kubelet_dir: PathBuf,
    cgroups: Option<CgroupIndex>,
    /// The v1 hierarchies the kernel's `v1_cgroup_id` may be of, in the
    /// order the kernel tried them (a call's `v1_hierarchy` is a place here).
    cgroups_v1: Vec<CgroupIndex>,
    docker: DockerLayers,
    storage: StorageLayers,
    proc_root: PathBuf,
    exes: HashMap<u32, Option<String>>,
    container_pods: HashMap<ContainerId, Option<PodUid>>,
    /// The mount namespaces calls come from, for their paths' proof.
    namespaces: Namespaces,
    /// What identifying lifecycle records keeps between them.
    lifecycle: LifecycleMemory,
    /// Where the node's cgroup filesystems are, for a path's target.
    targets: Targets,
}

impl Identifier {
    pub fn new(layout: NodeLayout) -> Identifier {
        // A symlinked kubelet root is matched in both spellings: callers may
        // use either, and the kernel reports what they passed or walked.
        let mut kubelet_roots = vec![layout.kubelet_root.clone()];
        if let Ok(real) = std::fs::canonicalize(layout.node.path(&layout.kubelet_root)).map(|p| layout.node.shown(p)) {
            if real != layout.kubelet_root {
                kubelet_roots.push(real);
            }
        }
        // The stores are read now: a container whose removal fails later
        // has left its store's index by then (see `storage`).
        let proc_root = layout.proc_root;
        let mut storage = StorageLayers::new(layout.node_root, layout.mountinfo.clone(), proc_root.clone());
        storage.discover();
        let node_mntns = process::own_mount_namespace(layout.node);
        // The cgroups too: those of the pods already there are known before
        // the first call, whatever the node's load then (see `fill`).
        let mut cgroups = layout.cgroup2_root.map(CgroupIndex::new);
        let mut cgroups_v1: Vec<CgroupIndex> =
            layout.cgroup_v1.into_iter().map(|h| CgroupIndex::new(h.mount)).collect();
        cgroups.iter_mut().chain(cgroups_v1.iter_mut()).for_each(CgroupIndex::fill);
        Identifier {
            kubelet_dir: layout.node.path(&layout.kubelet_root),
            kubelet_roots,
            cgroups,
            cgroups_v1,
            docker: DockerLayers::new(layout.docker_root),
            storage,
            proc_root: proc_root.clone(),
            exes: HashMap::new(),
            container_pods: HashMap::new(),
            targets: Targets::read(&layout.mountinfo),
            namespaces: Namespaces::new(proc_root.clone(), layout.mountinfo, node_mntns),
            lifecycle: LifecycleMemory::default(),
        }
    }

    /// Uses `mntns` as the node's mount namespace (tests on a fake /proc).
    #[cfg(test)]
    pub(crate) fn with_node_mntns(mut self, mntns: u32) -> Identifier {
        self.namespaces =
            Namespaces::new(self.proc_root.clone(), self.namespaces.node_mountinfo().to_path_buf(), mntns);
        self
    }

    /// `path` as the node's table may name it besides itself: under the
    /// kubelet root's other spelling (a symlinked root's real directory).
    fn other_spellings(&self, path: &[u8]) -> Vec<Vec<u8>> {
        let roots: Vec<&[u8]> = self.kubelet_roots.iter().map(|r| r.as_os_str().as_encoded_bytes()).collect();
        let Some(under) = roots.iter().find(|r| crate::mountinfo::is_at_or_below(path, r)) else { return Vec::new() };
        let rest = &path[under.len()..];
        roots.iter().filter(|r| *r != under).map(|r| [*r, rest].concat()).collect()
    }

    /// What changed in the node's indexes since the last review, read
    /// (containers/storage's, a stat each): containers are learned while
    /// they exist, before a removal makes their runtime forget them.
    pub fn refresh(&mut self) {
        self.storage.refresh();
    }

    pub fn kubelet_roots(&self) -> &[PathBuf] {
        &self.kubelet_roots
    }

    fn exe_of(&mut self, pid: u32) -> Option<String> {
        if self.exes.len() >= CACHE_LIMIT {
            self.exes.clear();
        }
        let proc_root = &self.proc_root;
        self.exes
            .entry(pid)
            .or_insert_with(|| {
                std::fs::read_link(proc_root.join(pid.to_string()).join("exe"))
                    .ok()
                    .map(|p| crate::words::safe_text(p.as_os_str().as_encoded_bytes()))
            })
            .clone()
    }

    fn pod_of_container(&mut self, container: &ContainerId) -> Option<PodUid> {
        if let Some(known) = self.container_pods.get(container) {
            return known.clone();
        }
        let found = self.cgroups.as_mut().and_then(|c| c.pod_of_container(container));
        // Kubelet and the runtimes make the same tree in every v1 hierarchy:
        // the first one tells.
        let found = found.or_else(|| self.cgroups_v1.first_mut().and_then(|c| c.pod_of_container(container)));
        if self.container_pods.len() >= CACHE_LIMIT {
            self.container_pods.clear();
        }
        // Only hits are cached: a container's cgroup may not exist yet.
        if found.is_some() {
            self.container_pods.insert(container.clone(), found.clone());
        }
        found
    }

    /// The caller's cgroup path, as the kernel saw it at the call: in the
    /// v2 tree by its id, or in the v1 hierarchy by the id the kernel
    /// programs read there; on hybrid nodes the pods are in the v1
    /// hierarchies and the v2 tree is systemd's, so whichever names a pod
    /// or container wins. Only where the kernel gave neither,
    /// `/proc/<pid>/cgroup` (racy: a short-lived caller is gone).
    fn caller_cgroup(&mut self, caller: &Caller<'_>) -> Option<String> {
        let v2 = self.cgroups.as_mut().and_then(|index| index.path_of(caller.cgroup_id));
        let v1 = match (caller.v1_cgroup_id, self.cgroups_v1.get_mut(usize::from(caller.v1_hierarchy))) {
            (0, _) | (_, None) => None,
            (id, Some(index)) => index.path_of(id),
        };
        let names_a_pod = |path: &Option<String>| path.as_deref().is_some_and(|p| clues_from_cgroup(p) != (None, None));
        if names_a_pod(&v1) && !names_a_pod(&v2) {
            return v1;
        }
        if v2.is_some() || v1.is_some() {
            return v2.or(v1);
        }
        cgroup_path_of_process(&self.proc_root, caller.pid)
    }

    /// A call streamed by the kernel.
    pub fn identify(&mut self, event: &CallEvent) -> Identity {
        let caller = Caller {
            pid: event.pid,
            comm: &event.comm,
            pcomm: &event.pcomm,
            cgroup_id: event.cgroup_id,
            v1_cgroup_id: event.v1_cgroup_id,
            v1_hierarchy: event.v1_hierarchy,
            mntns: event.mntns,
        };
        self.identify_call(&caller, event.abs_path())
    }

    /// A call by `caller` on `abs_path`: its pod by path, container and
    /// cgroup, and its actor.
    fn identify_call(&mut self, caller: &Caller<'_>, abs_path: Result<Vec<u8>, NoPath>) -> Identity {
        // The caller's own pod, by the cgroup the kernel read: what no path can change.
        let caller_cgroup = self.caller_cgroup(caller);
        let (caller_pod, caller_container) = caller_cgroup.as_deref().map(clues_from_cgroup).unwrap_or_default();
        let spellings = abs_path.as_ref().map(|p| self.other_spellings(p)).unwrap_or_default();
        let place = CallPlace {
            mntns: caller.mntns,
            pid: caller.pid,
            in_a_pod: caller_pod.is_some(),
            path: abs_path.as_deref().ok(),
        };
        let proof = judge(place, self.namespaces.node_mntns(), &spellings, &mut self.namespaces);
        let clues = match &abs_path {
            Ok(path) => clues_from_path(path, &self.kubelet_roots),
            Err(_) => Default::default(),
        };
        let actor = self.actor_of(caller);
        if !proof.proven() {
            // A claim: the caller's pod alone; the pod its path named is only said.
            let claimed_pod = clues.pod.map(|(uid, _)| uid).filter(|uid| caller_pod.as_ref() != Some(uid));
            let matched = if caller_pod.is_some() { vec![MatchReason::Cgroup] } else { Vec::new() };
            let container_id = caller_pod.as_ref().and(caller_container);
            return Identity {
                abs_path,
                pod_uid: caller_pod,
                path_area: None,
                target: Target::Other,
                container_id,
                actor,
                matched,
                proof,
                claimed_pod,
            };
        }
        let mut matched = Vec::new();
        let mut pod_uid = None;
        let mut path_area = None;
        if let Some((uid, area)) = clues.pod {
            pod_uid = Some(uid);
            path_area = Some(area);
            matched.push(MatchReason::Path);
        }
        let mut container_id = clues.container;
        if container_id.is_none() {
            if let Some(layer) = &clues.docker_layer {
                container_id = self.docker.container_of_layer(layer);
            }
        }
        if container_id.is_none() {
            if let Ok(path) = &abs_path {
                container_id = self.storage.container_of_path(path, caller.pid, caller.mntns).map(|c| c.id);
            }
        }
        if let Some(container) = container_id.clone() {
            match self.pod_of_container(&container) {
                Some(uid) if pod_uid.is_none() || pod_uid.as_ref() == Some(&uid) => {
                    pod_uid = Some(uid);
                    matched.push(MatchReason::Container);
                }
                // A path in one pod's tree that names another pod's
                // container (a file a workload named so) is that pod's
                // path: the container is not the call's.
                Some(_) => container_id = None,
                None => {}
            }
        }
        if let Some(uid) = caller_pod {
            if pod_uid.is_none() || pod_uid.as_ref() == Some(&uid) {
                pod_uid = Some(uid);
                matched.push(MatchReason::Cgroup);
            }
        }
        if container_id.is_none() && matched.contains(&MatchReason::Cgroup) {
            container_id = caller_container;
        }
        let target = match &abs_path {
            Ok(path) => self.targets.of(path, path_area),
            Err(_) => Target::Other,
        };
        Identity { abs_path, pod_uid, path_area, target, container_id, actor, matched, proof, claimed_pod: None }
    }

    /// Who `caller` is, by its name, its executable and its parent's name.
    fn actor_of(&mut self, caller: &Caller<'_>) -> Actor {
        let exe = self.exe_of(caller.pid);
        let role = role_of(caller.comm, exe.as_deref(), caller.pcomm);
        Actor {
            description: describe(caller.comm, caller.pcomm, role),
            comm: caller.comm.to_string(),
            exe,
            parent: caller.pcomm.to_string(),
            role,
        }
    }

    /// A call still in flight, identified from what /proc says of it.
    pub fn identify_flight(&mut self, flight: &Flight) -> Identity {
        let facts = ProcessFacts::read(flight.pid, flight.tid, &self.proc_root);
        let abs_path = process::flight_path(flight, &self.proc_root);
        // The caller is in the call, so alive: its namespace is its own now.
        let mut caller = facts.caller(0);
        caller.mntns = namespaces::namespace_of(&self.proc_root, flight.tid).unwrap_or(0);
        self.identify_call(&caller, abs_path)
    }

    /// Calls of process `pid` the kernel counted without streaming them:
    /// who made them, from /proc and their cgroup.
    pub fn identify_process(&mut self, pid: u32, cgroup_id: u64) -> Identity {
        let facts = ProcessFacts::read(pid, pid, &self.proc_root);
        self.identify_call(&facts.caller(cgroup_id), Err(NoPath::PathUnreadable))
    }

    /// The pod process `pid` runs in, by any of its cgroups: on a hybrid
    /// node (v1 hierarchies and a v2 one) a runtime may put a pod in
    /// either, and one naming the pod is enough.
    pub fn pod_of_process(&self, pid: u32) -> Option<PodUid> {
        use procfs::FromRead;
        let file = self.proc_root.join(pid.to_string()).join("cgroup");
        let groups = procfs::ProcessCGroups::from_file(file).ok()?;
        groups.0.iter().find_map(|g| clues_from_cgroup(&g.pathname).0)
    }

    /// A process a lifecycle event names, by the name the kernel recorded
    /// (it may be gone from /proc by now: a CNI plugin lives milliseconds)
    /// and its parent's from /proc; its cgroups as the kernel read them
    /// (0: none, then /proc's).
    pub fn identify_task(&mut self, pid: u32, comm: &str, ppid: u32, cgroups: KernelCgroups) -> Identity {
        let parent = ProcessFacts::read(ppid, ppid, &self.proc_root);
        let caller = Caller {
            pid,
            comm,
            pcomm: &parent.comm,
            cgroup_id: cgroups.v2,
            v1_cgroup_id: cgroups.v1,
            v1_hierarchy: cgroups.v1_hierarchy,
            mntns: 0,
        };
        self.identify_call(&caller, Err(NoPath::PathUnreadable))
    }

    /// The pod whose cgroup process `pid` was in, by the cgroup v2 and v1
    /// ids the kernel read (what a workload cannot claim otherwise); only
    /// where the kernel gave neither, `/proc/<pid>/cgroup`. None: its
    /// cgroup could not be found at all, which proves nothing either way.
    pub fn pod_of_caller(&mut self, pid: u32, cgroups: KernelCgroups) -> Option<Option<PodUid>> {
        let caller = Caller {
            pid,
            comm: "",
            pcomm: "",
            cgroup_id: cgroups.v2,
            v1_cgroup_id: cgroups.v1,
            v1_hierarchy: cgroups.v1_hierarchy,
            mntns: 0,
        };
        self.caller_cgroup(&caller).map(|path| clues_from_cgroup(&path).0)
    }

    /// Where the node's processes are listed.
    pub fn proc_root(&self) -> &Path {
        &self.proc_root
    }
}

/// Which pods a watch follows: `--pod`, repeatable; none means the node.
#[derive(Clone, Debug, Default)]
pub struct PodFilter {
    pods: BTreeSet<PodUid>,
}

impl PodFilter {
    pub fn new(pods: impl IntoIterator<Item = PodUid>) -> PodFilter {
        PodFilter { pods: pods.into_iter().collect() }
    }

    pub fn is_whole_node(&self) -> bool {
        self.pods.is_empty()
    }

    pub fn pods(&self) -> impl Iterator<Item = &PodUid> {
        self.pods.iter()
    }

    /// Whether an event with this identity belongs in the view.
    pub fn admits(&self, identity: &Identity) -> bool {
        self.pods.is_empty() || identity.pod_uid.as_ref().is_some_and(|uid| self.pods.contains(uid))
    }

    /// Pods asked for that have no directory under the kubelet root.
    pub fn pods_not_on_node(&self, node: &Node, kubelet_root: &Path) -> Vec<PodUid> {
        let pods = node.path(kubelet_root.join("pods"));
        self.pods.iter().filter(|uid| !pods.join(uid.as_str()).exists()).cloned().collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::event::{decode, tests::record_bytes, WallClock};
    use crate::test_support::TempDir;
    use podstuck_common::Syscall;
    use std::os::unix::fs::MetadataExt;

    /// A process named `comm`, child of `parent`, known by its name alone.
    pub(crate) fn actor(comm: &str, parent: &str, role: Role) -> Actor {
        Actor { comm: comm.into(), exe: None, parent: parent.into(), role, description: comm.into() }
    }

    /// The node's mount namespace, as the test records have it.
    pub(crate) const NODE_NS: u32 = 4026531841;
    pub(crate) const POD_A: &str = "1b2c3d4e-0000-4000-8000-00000000000a";
    pub(crate) const POD_B: &str = "1b2c3d4e-0000-4000-8000-00000000000b";
    const CID: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

    /// A fake node: a cgroup tree with pod B's slice and a container of A.
    pub(crate) struct FakeNode {
        _tmp: TempDir,
        pub(crate) dir: PathBuf,
    }

    impl FakeNode {
        pub(crate) fn new(name: &str) -> FakeNode {
            let tmp = TempDir::new(name);
            let dir = tmp.0.clone();
            let slice_b = format!(
                "cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
                POD_B.replace('-', "_")
            );
            let scope_a = format!(
                "cgroup/kubepods.slice/kubepods-pod{}.slice/cri-containerd-{CID}.scope",
                POD_A.replace('-', "_")
            );
            std::fs::create_dir_all(dir.join(slice_b)).unwrap();
            std::fs::create_dir_all(dir.join(scope_a)).unwrap();
            std::fs::create_dir_all(dir.join("kubelet/pods").join(POD_A)).unwrap();
            std::fs::create_dir_all(dir.join("proc")).unwrap();
            FakeNode { _tmp: tmp, dir }
        }

        pub(crate) fn identifier(&self) -> Identifier {
            Identifier::new(NodeLayout {
                kubelet_root: self.dir.join("kubelet"),
                docker_root: self.dir.join("docker"),
                node_root: self.dir.join("root"),
                mountinfo: self.dir.join("mountinfo"),
                cgroup2_root: Some(self.dir.join("cgroup")),
                cgroup_v1: Vec::new(),
                proc_root: self.dir.join("proc"),
                node: Node::direct(),
            })
            .with_node_mntns(NODE_NS)
        }

        /// A hybrid node: the v2 tree systemd's alone (no pods), pods in a
        /// v1 memory hierarchy (cgroupfs driver, as EKS's AL2 nodes): pod
        /// B's container there, and its cgroup's id.
        fn hybrid(&self) -> (Identifier, u64) {
            let unified = self.dir.join("unified/system.slice");
            std::fs::create_dir_all(&unified).unwrap();
            let container = self.dir.join(format!("memory/kubepods/burstable/pod{POD_B}/{CID}"));
            std::fs::create_dir_all(&container).unwrap();
            let identifier = Identifier::new(NodeLayout {
                kubelet_root: self.dir.join("kubelet"),
                docker_root: self.dir.join("docker"),
                node_root: self.dir.join("root"),
                mountinfo: self.dir.join("mountinfo"),
                cgroup2_root: Some(self.dir.join("unified")),
                cgroup_v1: vec![V1Hierarchy { controller: "memory", mount: self.dir.join("memory") }],
                proc_root: self.dir.join("proc"),
                node: Node::direct(),
            })
            .with_node_mntns(NODE_NS);
            (identifier, std::fs::metadata(container).unwrap().ino())
        }

        pub(crate) fn cgroup_id_of_pod_b(&self) -> u64 {
            let slice = format!(
                "cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
                POD_B.replace('-', "_")
            );
            std::fs::metadata(self.dir.join(slice)).unwrap().ino()
        }
    }

    fn event(path: &[u8], comm: &str, pcomm: &str, cgroup_id: u64) -> CallEvent {
        let mut e = decode(&record_bytes(Syscall::Unlinkat, -16, 0x200, path), &WallClock::now()).unwrap();
        e.comm = comm.into();
        e.pcomm = pcomm.into();
        e.cgroup_id = cgroup_id;
        e
    }

    #[test]
    fn a_kubelet_volume_path_names_its_pod() {
        let node = FakeNode::new("volume");
        let mut identifier = node.identifier();
        let path = node.dir.join(format!("kubelet/pods/{POD_A}/volumes/kubernetes.io~csi/pv1/mount"));
        let id = identifier.identify(&event(path.to_str().unwrap().as_bytes(), "kubelet", "systemd", 1));
        assert_eq!(id.pod_uid.unwrap().as_str(), POD_A);
        assert_eq!(id.path_area, Some(PathArea::Volume));
        assert_eq!(id.matched, vec![MatchReason::Path]);
        assert_eq!(id.actor.role, Role::Kubelet);
        assert_eq!(id.actor.description, "kubelet");
    }

    #[test]
    fn the_callers_cgroup_names_its_pod() {
        let node = FakeNode::new("cgroup");
        let mut identifier = node.identifier();
        let id = identifier.identify(&event(b"/tmp/scratch", "rm", "sh", node.cgroup_id_of_pod_b()));
        assert_eq!(id.pod_uid.unwrap().as_str(), POD_B);
        assert_eq!(id.matched, vec![MatchReason::Cgroup]);
    }

    #[test]
    fn on_a_hybrid_node_the_kernels_v1_cgroup_ties_a_caller_gone_from_proc_to_its_pod() {
        let node = FakeNode::new("v1-cgroup");
        let (mut identifier, v1_id) = node.hybrid();
        let unified_root = std::fs::metadata(node.dir.join("unified")).unwrap().ino();
        // The caller (`rm` in the pod) has exited: /proc has nothing of it.
        let mut call = event(b"/tmp/scratch", "rm", "sh", unified_root);
        call.v1_cgroup_id = v1_id;
        let id = identifier.identify(&call);
        assert_eq!(id.pod_uid.as_ref().map(|p| p.as_str()), Some(POD_B));
        assert_eq!(id.container_id.as_ref().map(|c| c.as_str()), Some(CID));
        assert_eq!(id.matched, vec![MatchReason::Cgroup]);
        // Without the kernel's v1 id nothing ties it (the v2 tree is systemd's).
        call.v1_cgroup_id = 0;
        assert_eq!(identifier.identify(&call).pod_uid, None);
    }

    /// A pod's cgroups that exist when podstuck starts are known before
    /// the first call: a short-lived caller in one is tied to its pod
    /// whatever a lookup could walk then, here even once the cgroup is
    /// gone (the pod torn down right after the call).
    #[test]
    fn a_v1_cgroup_there_at_the_start_ties_its_caller_even_once_removed() {
        let node = FakeNode::new("v1-at-start");
        let (mut identifier, v1_id) = node.hybrid();
        std::fs::remove_dir(node.dir.join(format!("memory/kubepods/burstable/pod{POD_B}/{CID}"))).unwrap();
        let mut call = event(b"/tmp/scratch", "rm", "sh", 1);
        call.v1_cgroup_id = v1_id;
        let id = identifier.identify(&call);
        assert_eq!(id.pod_uid.as_ref().map(|p| p.as_str()), Some(POD_B));
        assert_eq!(id.container_id.as_ref().map(|c| c.as_str()), Some(CID));
        assert_eq!(id.matched, vec![MatchReason::Cgroup]);
    }

    /// The kernel read the caller's cgroup in the second hierarchy asked
    /// for (pids: it was at memory's root): the id is looked up there, and
    /// the same id in the first hierarchy, another cgroup, names nothing.
    #[test]
    fn a_v1_id_is_looked_up_in_the_hierarchy_the_kernel_read_it_in() {
        let node = FakeNode::new("v1-slots");
        let memory = node.dir.join("memory");
        std::fs::create_dir_all(memory.join("system.slice")).unwrap();
        let container = node.dir.join(format!("pids/kubepods/burstable/pod{POD_B}/{CID}"));
        std::fs::create_dir_all(&container).unwrap();
        let mut identifier = Identifier::new(NodeLayout {
            kubelet_root: node.dir.join("kubelet"),
            docker_root: node.dir.join("docker"),
            node_root: node.dir.join("root"),
            mountinfo: node.dir.join("mountinfo"),
            cgroup2_root: None,
            cgroup_v1: vec![
                V1Hierarchy { controller: "memory", mount: memory },
                V1Hierarchy { controller: "pids", mount: node.dir.join("pids") },
            ],
            proc_root: node.dir.join("proc"),
            node: Node::direct(),
        })
        .with_node_mntns(NODE_NS);
        let mut call = event(b"/tmp/scratch", "rm", "sh", 1);
        call.v1_cgroup_id = std::fs::metadata(&container).unwrap().ino();
        call.v1_hierarchy = 1;
        let id = identifier.identify(&call);
        assert_eq!(id.pod_uid.as_ref().map(|p| p.as_str()), Some(POD_B));
        assert_eq!(id.matched, vec![MatchReason::Cgroup]);
        // A place no hierarchy has: nothing is guessed.
        call.v1_hierarchy = 7;
        assert_eq!(identifier.identify(&call).pod_uid, None);
    }

    /// A path in pod A's tree naming a container of pod B (a file a
    /// workload named so) is pod A's, and names no container.
    #[test]
    fn a_container_id_of_another_pod_in_a_pods_path_is_dropped() {
        let node = FakeNode::new("forged-container");
        let mut identifier = node.identifier();
        let other_cid = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
        let slice_b = format!(
            "cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{other_cid}.scope",
            POD_B.replace('-', "_")
        );
        std::fs::create_dir_all(node.dir.join(slice_b)).unwrap();
        let path = node.dir.join(format!("kubelet/pods/{POD_A}/volumes/v/cri-containerd-{other_cid}.scope"));
        let id = identifier.identify(&event(path.to_str().unwrap().as_bytes(), "rm", "sh", 0));
        assert_eq!(id.pod_uid.unwrap().as_str(), POD_A);
        assert_eq!(id.container_id, None);
        assert_eq!(id.matched, vec![MatchReason::Path]);
    }

    /// The namespace of [`caller_in_its_own_namespace`].
    const OWN_NS: u32 = 4026532900;

    /// A process of pod B's (pid 4242, `comm`), alive in a mount namespace
    /// of its own whose table is `table` (the kubelet root's spelling put
    /// for `{kubelet}`), and the node's table; its call on pod A's `volume`
    /// path, and the identifier that will judge it.
    fn caller_in_its_own_namespace(node: &FakeNode, table: &str, comm: &str, volume: &str) -> (Identifier, CallEvent) {
        let kubelet = node.dir.join("kubelet");
        let dir = node.dir.join("proc/4242");
        std::fs::create_dir_all(dir.join("ns")).unwrap();
        std::os::unix::fs::symlink(format!("mnt:[{OWN_NS}]"), dir.join("ns/mnt")).unwrap();
        std::fs::write(dir.join("mountinfo"), table.replace("{kubelet}", kubelet.to_str().unwrap())).unwrap();
        std::fs::write(node.dir.join("mountinfo"), "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n").unwrap();
        let path = kubelet.join(format!("pods/{POD_A}/volumes/{volume}"));
        let mut call = event(path.to_str().unwrap().as_bytes(), comm, "containerd-shim", node.cgroup_id_of_pod_b());
        call.pid = 4242;
        call.mntns = OWN_NS;
        (node.identifier(), call)
    }

    /// Pod B's process, in its own namespace over a tmpfs it mounted on
    /// the kubelet directory, removes "pod A's" volume there: the call is
    /// B's alone, and A is only said to have been named.
    #[test]
    fn a_path_a_pod_made_in_its_own_namespace_names_no_other_pod() {
        let node = FakeNode::new("claim");
        let table = "500 400 0:80 / / rw - overlay overlay rw\n502 500 0:81 / {kubelet} rw - tmpfs tmpfs rw\n";
        let (mut identifier, mut call) =
            caller_in_its_own_namespace(&node, table, "kubelet", "kubernetes.io~empty-dir/data");
        let id = identifier.identify(&call);
        assert_eq!(id.proof, PathProof::claim(path_proof::Unproven::NotTheNodes));
        assert_eq!(id.pod_uid.as_ref().map(|p| p.as_str()), Some(POD_B));
        assert_eq!(id.claimed_pod.as_ref().map(|p| p.as_str()), Some(POD_A));
        assert_eq!((id.path_area, id.container_id.as_ref()), (None, None));
        assert_eq!(id.matched, vec![MatchReason::Cgroup]);
        // Gone before it could be read: nothing proves the path either.
        call.pid = 4343;
        call.mntns = 4026532999;
        let id = identifier.identify(&call);
        assert_eq!(id.proof, PathProof::claim(path_proof::Unproven::NamespaceGone));
        assert_eq!(id.pod_uid.as_ref().map(|p| p.as_str()), Some(POD_B));
    }

    /// The same call from a namespace that holds the node's own kubelet
    /// directory (a CSI node plugin's): the path is the node's, and names A.
    #[test]
    fn a_path_on_the_nodes_own_directory_in_another_namespace_names_its_pod() {
        let node = FakeNode::new("node-directory");
        let table =
            "500 400 0:80 / / rw - overlay overlay rw\n501 500 8:1 {kubelet} {kubelet} rw - ext4 /dev/sda1 rw\n";
        let (mut identifier, call) =
            caller_in_its_own_namespace(&node, table, "csi-node", "kubernetes.io~csi/pv/mount");
        let id = identifier.identify(&call);
        assert_eq!(id.proof, PathProof::NodeDirectory { mntns: OWN_NS });
        assert_eq!(id.pod_uid.as_ref().map(|p| p.as_str()), Some(POD_A));
        assert_eq!(id.path_area, Some(PathArea::Volume));
        assert_eq!(id.claimed_pod, None);
    }

    #[test]
    fn the_path_wins_over_the_callers_cgroup() {
        let node = FakeNode::new("disagree");
        let mut identifier = node.identifier();
        let path = node.dir.join(format!("kubelet/pods/{POD_A}/volumes/x"));
        let id = identifier.identify(&event(path.to_str().unwrap().as_bytes(), "rm", "sh", node.cgroup_id_of_pod_b()));
        assert_eq!(id.pod_uid.unwrap().as_str(), POD_A);
        assert_eq!(id.matched, vec![MatchReason::Path]);
    }

    #[test]
    fn a_container_path_is_tied_to_its_pod_through_the_cgroup_tree() {
        let node = FakeNode::new("container");
        let mut identifier = node.identifier();
        let path = format!("/run/containerd/io.containerd.runtime.v2.task/k8s.io/{CID}/rootfs");
        let id = identifier.identify(&event(path.as_bytes(), "containerd", "systemd", 1));
        assert_eq!(id.container_id.unwrap().as_str(), CID);
        assert_eq!(id.pod_uid.unwrap().as_str(), POD_A);
        assert_eq!(id.matched, vec![MatchReason::Container]);
        assert_eq!(id.actor.role, Role::Runtime);
    }

    #[test]
    fn unrelated_calls_have_no_pod_and_the_umount_child_of_kubelet_is_kubelets() {
        let node = FakeNode::new("none");
        let mut identifier = node.identifier();
        let id = identifier.identify(&event(b"/home/user/file", "umount", "kubelet", 1));
        assert!(id.pod_uid.is_none());
        assert!(id.matched.is_empty());
        assert_eq!(id.actor.role, Role::Kubelet);
        assert_eq!(id.actor.description, "umount (child of kubelet)");
    }

    #[test]
    fn the_filter_admits_only_the_pods_asked_for() {
        let node = FakeNode::new("filter");
        let mut identifier = node.identifier();
        let a = identifier.identify(&event(
            node.dir.join(format!("kubelet/pods/{POD_A}/volumes/x")).to_str().unwrap().as_bytes(),
            "kubelet",
            "systemd",
            1,
        ));
        let b = identifier.identify(&event(b"/tmp/x", "rm", "sh", node.cgroup_id_of_pod_b()));
        let none = identifier.identify(&event(b"/tmp/y", "rm", "sh", 1));
        let only_a = PodFilter::new([PodUid::parse(POD_A).unwrap()]);
        assert!(only_a.admits(&a) && !only_a.admits(&b) && !only_a.admits(&none));
        let node_wide = PodFilter::default();
        assert!(node_wide.admits(&a) && node_wide.admits(&b) && node_wide.admits(&none));
        assert_eq!(only_a.pods_not_on_node(Node::direct(), &node.dir.join("kubelet")), vec![]);
        let only_b = PodFilter::new([PodUid::parse(POD_B).unwrap()]);
        assert_eq!(
            only_b.pods_not_on_node(Node::direct(), &node.dir.join("kubelet")),
            vec![PodUid::parse(POD_B).unwrap()]
        );
    }
}
