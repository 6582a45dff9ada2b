//! Turns the cgroup id the kernel programs record for a task
//! (`bpf_get_current_cgroup_id()`, a cgroup v2 inode number) into the
//! cgroup's path, so that a call made from inside a pod can be tied to it,
//! and finds the pod of a container id from the cgroup tree.
//!
//! Where cgroup v2 is mounted differs between nodes (`/sys/fs/cgroup`,
//! `/sys/fs/cgroup/unified` on hybrid hosts, nowhere on v1-only hosts), so
//! it is read from mountinfo, never assumed. This module reads the cgroup
//! tree but never changes it; what a path means is `pod`'s business.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::pod::{clues_from_cgroup, ContainerId, PodUid};
use super::RescanLimit;
use crate::mountinfo::parse_mountinfo;
use podstuck_common::V1_HIERARCHIES;

/// How deep [`CgroupIndex::rescan`] walks. Kubernetes cgroups are at most
/// five levels down; the bound only stops a pathological tree.
const MAX_DEPTH: usize = 32;

/// Where the cgroup v2 hierarchy is mounted, read from a mountinfo text
/// (e.g. `/proc/self/mountinfo`): the mount point of the first `cgroup2`
/// filesystem. Modern nodes: `/sys/fs/cgroup`; hybrid: `/sys/fs/cgroup/unified`;
/// v1-only: `None`.
///
/// A mount of the whole hierarchy (mountinfo root `/`) is preferred over a
/// bind mount of a sub-tree, whose paths would not be relative to the
/// hierarchy root.
pub fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    let mounts = parse_mountinfo(mountinfo.as_bytes());
    let cgroup2 = || mounts.iter().filter(|m| m.fstype == "cgroup2");
    cgroup2().find(|m| m.whole()).or_else(|| cgroup2().next()).map(|m| path_of(&m.mount_point))
}

/// The v1 controllers, in the order podstuck prefers their hierarchies to
/// tie callers to pods by: kubelet and the runtimes make every pod's and
/// container's cgroup in each of them, and memory, pids and cpu are on
/// every v1 node; the others follow, for nodes that mount few. A
/// hierarchy of systemd's alone (`name=systemd`) has no controller, and
/// the kernel has nothing to read it by.
const V1_CONTROLLERS: [&str; 15] = [
    "memory",
    "pids",
    "cpu",
    "blkio",
    "freezer",
    "devices",
    "cpuacct",
    "cpuset",
    "hugetlb",
    "net_cls",
    "net_prio",
    "perf_event",
    "rdma",
    "misc",
    "debug",
];

/// A v1 hierarchy whose cgroup the kernel programs read for each caller:
/// the controller they find it by, and where it is mounted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct V1Hierarchy {
    pub controller: &'static str,
    pub mount: PathBuf,
}

/// The v1 hierarchies podstuck reads the callers' cgroups in, on v1 and
/// hybrid nodes (EKS's AL2, RHEL 8), in the order the kernel programs try
/// them: every whole `cgroup` hierarchy mounted with a controller, by
/// [`V1_CONTROLLERS`]' order, at most [`V1_HIERARCHIES`]. Empty where
/// cgroup v1 is not mounted, or only systemd's named hierarchy is.
pub fn v1_hierarchies(mountinfo: &str) -> Vec<V1Hierarchy> {
    let mounts = parse_mountinfo(mountinfo.as_bytes());
    let mut found: Vec<(usize, V1Hierarchy)> = Vec::new();
    for m in mounts.iter().filter(|m| m.fstype == "cgroup" && m.whole()) {
        // The per-superblock options name the controllers: "rw,cpu,cpuacct".
        let Some(rank) = V1_CONTROLLERS.iter().position(|c| m.super_options.split(',').any(|o| o == *c)) else {
            continue;
        };
        // A hierarchy mounted twice is read once.
        if found.iter().any(|(r, _)| *r == rank) {
            continue;
        }
        found.push((rank, V1Hierarchy { controller: V1_CONTROLLERS[rank], mount: path_of(&m.mount_point) }));
    }
    found.sort_by_key(|(rank, _)| *rank);
    found.into_iter().map(|(_, h)| h).take(V1_HIERARCHIES).collect()
}

fn path_of(bytes: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
}

/// Maps cgroup v2 ids (the inode number of a cgroup directory, what
/// `bpf_get_current_cgroup_id` returns) to paths relative to the hierarchy
/// root (`/` for the root, `/kubepods.slice/...` etc.).
#[derive(Debug)]
pub struct CgroupIndex {
    root: PathBuf,
    by_id: HashMap<u64, String>,
    /// A walk [`RESCAN_AT_MOST`] cut short, which the next rescan goes on
    /// with rather than starting over (see [`Walk`]).
    walk: Option<Walk>,
    /// How long one rescan may walk: [`RESCAN_AT_MOST`] (tests shorten it).
    walk_at_most: Duration,
    rescans: RescanLimit,
    /// Ids looked up and not found: a second miss of one waits for
    /// `rescans`' interval.
    missed: HashSet<u64>,
    /// Rescans a first miss may take at once (`FirstMisses`).
    first_misses: FirstMisses,
}

/// Ids remembered as missed; past this many the memory starts over (a
/// bound, whatever ids the kernel reports).
const MISSED_KEPT: usize = 4096;

/// Rescans for ids missed for the first time: up to `BURST` at once, then
/// `PER_SECOND` on average, and no more than `TIME_BURST` of walking at
/// once, `TIME_PER_SECOND` on average. A new pod's cgroup is missed right
/// after it appears, by the first call made in it, and must be found
/// then: with only the interval, a first miss within a second of another
/// found nothing, and a short-lived process of a new pod went unnamed on
/// a busy node. Counted in time as well as in rescans: on a node of
/// thousands of cgroups a rescan takes tens of ms, and 32 of them would
/// hold the collector's loop for a second. An id that stays unknown (a
/// cgroup already gone) is not rescanned for more than once per interval.
#[derive(Debug)]
struct FirstMisses {
    tokens: f64,
    /// Seconds of walking allowed now.
    time: f64,
    refilled: Instant,
}

impl FirstMisses {
    const BURST: f64 = 32.0;
    const PER_SECOND: f64 = 8.0;
    const TIME_BURST: f64 = 0.25;
    const TIME_PER_SECOND: f64 = 0.05;

    fn new() -> FirstMisses {
        FirstMisses { tokens: Self::BURST, time: Self::TIME_BURST, refilled: Instant::now() }
    }

    /// Whether a first miss may rescan now; takes its token if so.
    fn take(&mut self) -> bool {
        let now = Instant::now();
        let elapsed = now.duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * Self::PER_SECOND).min(Self::BURST);
        self.time = (self.time + elapsed * Self::TIME_PER_SECOND).min(Self::TIME_BURST);
        self.refilled = now;
        if self.tokens < 1.0 || self.time <= 0.0 {
            return false;
        }
        self.tokens -= 1.0;
        true
    }

    /// A rescan took `spent`: its time is paid from the budget.
    fn spent(&mut self, spent: Duration) {
        self.time -= spent.as_secs_f64();
    }
}

/// How long one rescan may walk: past it, what it found is added to what
/// the index knew (nothing of the earlier walk is lost), and the next
/// rescan goes on from where it stopped.
const RESCAN_AT_MOST: Duration = Duration::from_millis(200);

/// How long the walk at the start ([`CgroupIndex::fill`]) may take: a
/// node's whole tree takes a small part of it (a stat per cgroup); the
/// bound only keeps a pathological tree from holding podstuck's start,
/// and the rescans go on with what it did not reach.
const FILL_AT_MOST: Duration = Duration::from_secs(5);

/// A walk of the hierarchy in progress: what it found, and the
/// directories it has yet to read, which the next rescan goes on with. A
/// walk started over from the root at each rescan stops at the same place
/// each time, so on a tree too big (or a node too busy) to walk at once
/// the cgroups past that place are never indexed: on a busy 5.10 v1 guest
/// the walk of 6 memory cgroups took 260 ms, stopped after 4, and a
/// short-lived caller's pod, made before podstuck started, went unnamed
/// (issue 61). Going on reaches every cgroup within a bounded number of
/// rescans.
#[derive(Debug)]
struct Walk {
    /// Inode numbers are only unique within one filesystem: the walk stays
    /// on the root's.
    dev: u64,
    found: HashMap<u64, String>,
    /// What it found since the index last took it: a walk cut short hands
    /// over these alone, not all it found again.
    fresh: Vec<(u64, String)>,
    /// (directory, its path relative to the root, its depth).
    pending: Vec<(PathBuf, String, usize)>,
}

impl Walk {
    /// A walk from `root`: the root found, its directory to read. Nothing
    /// to read where the root is gone.
    fn start(root: &Path) -> Walk {
        // The mount point itself may be reached through a symlink; below
        // it nothing is followed.
        let Ok(meta) = std::fs::metadata(root) else {
            return Walk { dev: 0, found: HashMap::new(), fresh: Vec::new(), pending: Vec::new() };
        };
        let found = HashMap::from([(meta.ino(), "/".to_string())]);
        let fresh = vec![(meta.ino(), "/".to_string())];
        Walk { dev: meta.dev(), found, fresh, pending: vec![(root.to_path_buf(), String::new(), 0)] }
    }

    /// Reads directories until none is left (true) or `out_of_time` says
    /// stop (false), which it asks after each one: a walk always reads at
    /// least one, so it ends however little time each rescan has.
    fn go_on(&mut self, mut out_of_time: impl FnMut() -> bool) -> bool {
        while let Some((dir, rel, depth)) = self.pending.pop() {
            self.read(&dir, &rel, depth);
            if out_of_time() {
                return self.pending.is_empty();
            }
        }
        true
    }

    /// The subdirectories of `dir`, found and queued.
    fn read(&mut self, dir: &Path, rel: &str, depth: usize) {
        if depth >= MAX_DEPTH {
            return;
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            // The type readdir gave (cgroupfs gives it), not a stat: a v1
            // memory cgroup holds dozens of files, and a stat of each made
            // the walk of 6 cgroups on a busy 5.10 guest 260-305 ms long
            // (24-66 ms with the directories' stats alone).
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
                continue;
            };
            if !meta.is_dir() || meta.dev() != self.dev {
                continue;
            }
            // cgroup names are chosen by systemd and kubelet and are
            // UTF-8 in practice; a stray byte only spoils the display.
            let child = format!("{rel}/{}", entry.file_name().to_string_lossy());
            self.found.insert(meta.ino(), child.clone());
            self.fresh.push((meta.ino(), child.clone()));
            self.pending.push((entry.path(), child, depth + 1));
        }
    }
}

impl CgroupIndex {
    /// An empty index over the hierarchy mounted at `root`; [`CgroupIndex::fill`]
    /// or the first lookup fills it.
    pub fn new(root: PathBuf) -> CgroupIndex {
        CgroupIndex {
            root,
            by_id: HashMap::new(),
            walk: None,
            walk_at_most: RESCAN_AT_MOST,
            rescans: RescanLimit::default(),
            missed: HashSet::new(),
            first_misses: FirstMisses::new(),
        }
    }

    /// How often a lookup miss may rescan: a miss for a task that has
    /// already exited would otherwise walk the tree on every event.
    pub fn set_min_rescan_interval(&mut self, interval: Duration) {
        self.rescans.set_min_interval(interval);
    }

    /// Walks the hierarchy (directories only, no symlinks followed, at most
    /// 32 levels, not into other filesystems, for [`RESCAN_AT_MOST`]) and
    /// rebuilds the map once the walk has been through it all. A walk cut
    /// short adds what it found to what the index knew (unreachable
    /// directories are skipped), and the next rescan goes on with it.
    pub fn rescan(&mut self) {
        self.rescans.scanned();
        let started = Instant::now();
        self.walk_for(started, self.walk_at_most);
        self.first_misses.spent(started.elapsed());
    }

    /// Walks the whole hierarchy now, before the first call is traced, for
    /// [`FILL_AT_MOST`] at most. Left to the first lookup, the walk ran at
    /// the first call, under whatever load the node had then, within a
    /// lookup's budget: on a busy node a short-lived caller's cgroup, made
    /// long before podstuck started, was not reached in time and its call
    /// went untied (issue 61). Paid at the start, when nothing waits on it;
    /// and a pod's cgroup removed right after its call is still known.
    /// Spends nothing of the rescans' budgets.
    pub fn fill(&mut self) {
        self.walk_for(Instant::now(), FILL_AT_MOST);
    }

    /// Goes on with the walk (or starts one) until `started` is `at_most`
    /// old, and takes what it found.
    fn walk_for(&mut self, started: Instant, at_most: Duration) {
        let mut walk = self.walk.take().unwrap_or_else(|| Walk::start(&self.root));
        if walk.go_on(|| started.elapsed() >= at_most) {
            self.by_id = walk.found;
        } else {
            self.by_id.extend(walk.fresh.drain(..));
            self.walk = Some(walk);
        }
    }

    /// The path of a cgroup id; on a miss, rescans and looks again: at
    /// once for an id missed for the first time (within `FirstMisses`'
    /// budget), else at most once per `min_rescan_interval` (default 1 s).
    /// New pods create cgroups all the time.
    pub fn path_of(&mut self, id: u64) -> Option<String> {
        if let Some(path) = self.by_id.get(&id) {
            return Some(path.clone());
        }
        if self.missed.len() >= MISSED_KEPT {
            self.missed.clear();
        }
        let first_miss = self.missed.insert(id);
        if !(self.rescan_due() || (first_miss && self.first_misses.take())) {
            return None;
        }
        self.rescan();
        // A first miss goes on with a walk cut short while the budget
        // lasts: the caller may be gone by the next lookup of its cgroup.
        while first_miss && !self.by_id.contains_key(&id) && self.walk.is_some() && self.first_misses.take() {
            self.rescan();
        }
        self.by_id.get(&id).cloned()
    }

    /// The pod whose cgroup tree holds the container: the cgroup directory
    /// with a path segment containing the id (`cri-containerd-<cid>.scope`,
    /// `.../pod<uid>/<cid>`), read with [`clues_from_cgroup`]. Rescans once
    /// on a miss, rate-limited like [`CgroupIndex::path_of`].
    pub fn pod_of_container(&mut self, id: &ContainerId) -> Option<PodUid> {
        if let Some(found) = self.find_container(id) {
            return found;
        }
        if !self.rescan_due() {
            return None;
        }
        self.rescan();
        self.find_container(id).flatten()
    }

    /// `None` when no cgroup names the container; `Some(None)` when one
    /// does but it is not in a pod (rescanning would not change that).
    fn find_container(&self, id: &ContainerId) -> Option<Option<PodUid>> {
        let mut found = None;
        for path in self.by_id.values() {
            if !path.split('/').any(|seg| seg.contains(id.as_str())) {
                continue;
            }
            match clues_from_cgroup(path).0 {
                Some(pod) => return Some(Some(pod)),
                None => found = Some(None),
            }
        }
        found
    }

    fn rescan_due(&self) -> bool {
        self.rescans.due()
    }

    /// The directory the index walks.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

/// The cgroup path of process `pid` under `proc_root` that tells the most
/// about it ([`v1_cgroup_path`]), read from its `/proc/<pid>/cgroup` by
/// the `procfs` crate.
pub fn cgroup_path_of_process(proc_root: &Path, pid: u32) -> Option<String> {
    use procfs::FromRead;
    let groups = procfs::ProcessCGroups::from_file(proc_root.join(pid.to_string()).join("cgroup")).ok()?;
    v1_cgroup_path(&groups.0)
}

/// For v1-only hosts: of a process's cgroups (`/proc/<pid>/cgroup`), the
/// path of the most useful hierarchy for [`clues_from_cgroup`]: the
/// `name=systemd` one (it mirrors the systemd driver's slices), else the
/// first with `pids` or `memory` (the controllers kubelet always sets up),
/// else the v2 path (`0::...`) if that is all there is.
pub fn v1_cgroup_path(groups: &[procfs::ProcessCGroup]) -> Option<String> {
    let mut by_controller = None;
    let mut unified = None;
    for group in groups.iter().filter(|g| !g.pathname.is_empty()) {
        let is = |name: &str| group.controllers.iter().any(|c| c == name);
        if is("name=systemd") {
            return Some(group.pathname.clone());
        }
        if by_controller.is_none() && (is("pids") || is("memory")) {
            by_controller = Some(group.pathname.clone());
        }
        if group.hierarchy == 0 && group.controllers.is_empty() && unified.is_none() {
            unified = Some(group.pathname.clone());
        }
    }
    by_controller.or(unified)
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "1b2c3d4e-5f60-4a7b-8c9d-0e1f2a3b4c5d";
    const UID_: &str = "1b2c3d4e_5f60_4a7b_8c9d_0e1f2a3b4c5d";
    const CID: &str = "4f2a1c0d9e8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a29";
    const OTHER_CID: &str = "99999c0d9e8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a29";

    use crate::test_support::TempDir;

    /// Makes a cgroup-like directory and returns its id (inode number).
    fn mkdir(tmp: &TempDir, rel: &str) -> u64 {
        let path = tmp.0.join(rel.trim_start_matches('/'));
        std::fs::create_dir_all(&path).unwrap();
        std::fs::metadata(&path).unwrap().ino()
    }

    fn pod_scope() -> String {
        format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope"
        )
    }

    #[test]
    fn finds_a_v1_hierarchy_on_v1_and_hybrid_nodes_only() {
        let al2 = "\
25 19 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:4 - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:5 - cgroup cgroup rw,xattr,name=systemd
29 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:8 - cgroup cgroup rw,cpu,cpuacct
33 25 0:30 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,pids
36 25 0:33 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,memory
";
        let read = |text: &str| -> Vec<(&str, String)> {
            v1_hierarchies(text).into_iter().map(|h| (h.controller, h.mount.display().to_string())).collect()
        };
        let at = |dir: &str| format!("/sys/fs/cgroup/{dir}");
        assert_eq!(read(al2), [("memory", at("memory")), ("pids", at("pids")), ("cpu", at("cpu,cpuacct"))]);
        let no_memory: String = al2.lines().filter(|l| !l.ends_with("memory")).map(|l| format!("{l}\n")).collect();
        assert_eq!(read(&no_memory), [("pids", at("pids")), ("cpu", at("cpu,cpuacct"))]);
        // systemd's named hierarchy and one controller none of the usual.
        let one = "26 25 0:23 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd\n\
                   27 25 0:24 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer\n";
        assert_eq!(read(one), [("freezer", at("freezer"))]);
        assert_eq!(read(one.lines().next().unwrap()), []);
        let v2 =
            "35 25 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(read(v2), []);
        // A bind of a sub-tree (a container's view) names no hierarchy root.
        let bound = "40 25 0:33 /kubepods /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        assert_eq!(read(bound), []);
    }

    #[test]
    fn finds_the_cgroup2_mount_on_modern_hybrid_and_v1_nodes() {
        let modern = "\
25 1 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
35 25 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
";
        assert_eq!(cgroup2_mount(modern), Some(PathBuf::from("/sys/fs/cgroup")));

        let hybrid = "\
35 25 0:30 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
36 35 0:31 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
37 35 0:32 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
";
        assert_eq!(cgroup2_mount(hybrid), Some(PathBuf::from("/sys/fs/cgroup/unified")));

        let v1_only = "\
35 25 0:30 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
37 35 0:32 / /sys/fs/cgroup/systemd rw,nosuid - cgroup cgroup rw,xattr,name=systemd
38 35 0:33 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
";
        assert_eq!(cgroup2_mount(v1_only), None);
        assert_eq!(cgroup2_mount(""), None);
        assert_eq!(cgroup2_mount("garbage\n1 2 3\n"), None);
    }

    #[test]
    fn cgroup2_mount_prefers_the_whole_hierarchy_and_unescapes_the_path() {
        let text = "\
90 80 0:30 /kubepods.slice /host/pods rw - cgroup2 cgroup2 rw
91 80 0:30 / /host/cgroup\\040v2 rw master:9 - cgroup2 cgroup2 rw
";
        assert_eq!(cgroup2_mount(text), Some(PathBuf::from("/host/cgroup v2")));
        let only_sub_tree = "90 80 0:30 /kubepods.slice /host/pods rw - cgroup2 cgroup2 rw\n";
        assert_eq!(cgroup2_mount(only_sub_tree), Some(PathBuf::from("/host/pods")));
        // "cgroup2" as a source or option is not the fs type.
        let not_v2 = "91 80 0:30 / /x rw - tmpfs cgroup2 rw\n";
        assert_eq!(cgroup2_mount(not_v2), None);
    }

    #[test]
    fn index_maps_inode_numbers_to_paths_relative_to_the_root() {
        let tmp = TempDir::new("index");
        let root_id = std::fs::metadata(&tmp.0).unwrap().ino();
        let slice_id = mkdir(&tmp, "/kubepods.slice");
        let scope_id = mkdir(&tmp, &pod_scope());
        std::fs::write(tmp.0.join("cgroup.procs"), "").unwrap();
        std::os::unix::fs::symlink(tmp.0.join("kubepods.slice"), tmp.0.join("link")).unwrap();

        let mut index = CgroupIndex::new(tmp.0.clone());
        assert_eq!(index.root(), tmp.0.as_path());
        assert_eq!(index.path_of(root_id).as_deref(), Some("/"));
        assert_eq!(index.path_of(slice_id).as_deref(), Some("/kubepods.slice"));
        assert_eq!(index.path_of(scope_id), Some(pod_scope()));
        let file_id = std::fs::metadata(tmp.0.join("cgroup.procs")).unwrap().ino();
        assert_eq!(index.path_of(file_id), None, "files are not cgroups");
        // The symlink was not followed: every path is its real one.
        assert!(index.by_id.values().all(|p| !p.starts_with("/link")));
    }

    #[test]
    fn index_rescans_on_a_miss_but_not_more_than_the_interval_allows() {
        let tmp = TempDir::new("rate");
        let mut index = CgroupIndex::new(tmp.0.clone());
        index.set_min_rescan_interval(Duration::from_secs(3600));
        assert_eq!(index.path_of(u64::MAX), None); // first scan happens here
        let late = mkdir(&tmp, "/kubepods.slice/late.slice");
        // A second miss of an id waits for the interval.
        assert_eq!(index.path_of(u64::MAX), None);
        assert!(!index.by_id.contains_key(&late), "rescanned too soon for an id missed before");
        index.set_min_rescan_interval(Duration::ZERO);
        assert_eq!(index.path_of(late).as_deref(), Some("/kubepods.slice/late.slice"));
        // An explicit rescan ignores the interval and drops what is gone.
        index.set_min_rescan_interval(Duration::from_secs(3600));
        std::fs::remove_dir(tmp.0.join("kubepods.slice/late.slice")).unwrap();
        index.rescan();
        assert_eq!(index.path_of(late), None);
    }

    /// A new pod's cgroup, missed by the first call made in it, is found at
    /// once, even right after another miss: the id's first miss rescans.
    #[test]
    fn a_cgroup_missed_for_the_first_time_is_found_at_once() {
        let tmp = TempDir::new("first");
        let mut index = CgroupIndex::new(tmp.0.clone());
        index.set_min_rescan_interval(Duration::from_secs(3600));
        assert_eq!(index.path_of(u64::MAX), None);
        let mut ids = Vec::new();
        for n in 0..FirstMisses::BURST as usize {
            let id = mkdir(&tmp, &format!("/kubepods/besteffort/pod{n}"));
            assert_eq!(index.path_of(id), Some(format!("/kubepods/besteffort/pod{n}")), "pod {n}");
            ids.push(id);
        }
        // Past the budget, first misses wait for tokens or the interval.
        let over = mkdir(&tmp, "/kubepods/besteffort/over");
        index.first_misses = FirstMisses { tokens: 0.0, time: FirstMisses::TIME_BURST, refilled: Instant::now() };
        assert_eq!(index.path_of(over), None, "a first miss beyond the budget rescans");
        // The memory of missed ids is bounded.
        for id in 0..(MISSED_KEPT as u64 + 10) {
            let _ = index.path_of(u64::MAX - 2 - id);
        }
        assert!(index.missed.len() <= MISSED_KEPT);
    }

    /// A tree of 14 cgroups: 8 units of systemd's beside the pod's
    /// container, 4 levels down; its directories, and the container's id.
    fn busy_node(tmp: &TempDir) -> (usize, u64) {
        for n in 0..8 {
            mkdir(tmp, &format!("/system.slice/unit{n}.service"));
        }
        (14, mkdir(tmp, &pod_scope()))
    }

    /// A walk cut short goes on where it stopped at the next rescan: on a
    /// tree too big, or a node too busy, to walk at once, the cgroups past
    /// the first cut are reached too, not only those before it; once it
    /// has been through the tree, the next walk starts over and forgets
    /// what is gone.
    #[test]
    fn a_walk_cut_short_goes_on_where_it_stopped_until_every_cgroup_is_found() {
        let tmp = TempDir::new("cut");
        let (dirs, container) = busy_node(&tmp);
        let mut index = CgroupIndex::new(tmp.0.clone());
        // One directory a rescan.
        index.walk_at_most = Duration::ZERO;
        let mut rescans = 0;
        while !index.by_id.contains_key(&container) {
            assert!(rescans < dirs, "not found in {rescans} rescans of a tree of {dirs} directories");
            index.rescan();
            rescans += 1;
        }
        while index.walk.is_some() {
            assert!(rescans < dirs, "not through the tree in {rescans} rescans");
            index.rescan();
            rescans += 1;
        }
        assert_eq!(index.by_id.len(), dirs);
        std::fs::remove_dir(tmp.0.join("system.slice/unit3.service")).unwrap();
        index.rescan();
        while index.walk.is_some() {
            index.rescan();
        }
        assert_eq!(index.by_id.len(), dirs - 1);
        assert!(!index.by_id.values().any(|p| p.ends_with("unit3.service")));
        assert_eq!(index.by_id.get(&container), Some(&pod_scope()));
    }

    /// A short-lived caller's cgroup, missed for the first time, is found
    /// by that one lookup even when each walk is cut short: the lookup goes
    /// on walking while the first misses' budget lasts.
    #[test]
    fn a_first_miss_goes_on_with_a_walk_cut_short() {
        let tmp = TempDir::new("cut-miss");
        let (_, container) = busy_node(&tmp);
        let mut index = CgroupIndex::new(tmp.0.clone());
        index.set_min_rescan_interval(Duration::from_secs(3600));
        index.walk_at_most = Duration::ZERO;
        assert_eq!(index.path_of(container), Some(pod_scope()));
    }

    #[test]
    fn index_walk_is_bounded_in_depth_and_survives_a_missing_root() {
        let tmp = TempDir::new("depth");
        let deep: String = (0..40).map(|i| format!("/d{i}")).collect();
        mkdir(&tmp, &deep);
        let mut index = CgroupIndex::new(tmp.0.clone());
        index.rescan();
        let max = index.by_id.values().map(|p| p.matches('/').count()).max();
        assert_eq!(max, Some(MAX_DEPTH));

        let mut gone = CgroupIndex::new(tmp.0.join("does-not-exist"));
        gone.rescan();
        assert_eq!(gone.path_of(1), None);
    }

    #[test]
    fn finds_the_pod_of_a_container_in_either_driver_layout() {
        let tmp = TempDir::new("containers");
        mkdir(&tmp, &pod_scope());
        let mut index = CgroupIndex::new(tmp.0.clone());
        let cid = ContainerId::parse(CID).unwrap();
        let uid = PodUid::parse(UID).unwrap();
        assert_eq!(index.pod_of_container(&cid), Some(uid.clone()));

        let tmp = TempDir::new("cgroupfs");
        mkdir(&tmp, &format!("/kubepods/besteffort/pod{UID}/{CID}"));
        let mut index = CgroupIndex::new(tmp.0.clone());
        assert_eq!(index.pod_of_container(&cid), Some(uid));
    }

    #[test]
    fn pod_of_container_misses_unknown_and_podless_containers() {
        let tmp = TempDir::new("podless");
        mkdir(&tmp, &format!("/system.slice/docker-{CID}.scope"));
        mkdir(&tmp, &format!("/kubepods.slice/kubepods-pod{UID_}.slice"));
        let mut index = CgroupIndex::new(tmp.0.clone());
        index.set_min_rescan_interval(Duration::from_secs(3600));
        let cid = ContainerId::parse(CID).unwrap();
        assert_eq!(index.pod_of_container(&cid), None);
        let other = ContainerId::parse(OTHER_CID).unwrap();
        assert_eq!(index.pod_of_container(&other), None);

        // A container that appears later is found once a rescan is allowed.
        mkdir(&tmp, &format!("/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{OTHER_CID}.scope"));
        assert_eq!(index.pod_of_container(&other), None, "rescanned too soon");
        index.set_min_rescan_interval(Duration::ZERO);
        assert_eq!(index.pod_of_container(&other), Some(PodUid::parse(UID).unwrap()));
    }

    /// [`v1_cgroup_path`] of a `/proc/<pid>/cgroup` text, as
    /// [`cgroup_path_of_process`] reads it.
    fn path_of_text(text: &str) -> Option<String> {
        use procfs::FromBufRead;
        v1_cgroup_path(&procfs::ProcessCGroups::from_buf_read(text.as_bytes()).ok()?.0)
    }

    #[test]
    fn v1_cgroup_path_prefers_systemd_then_pids_or_memory() {
        let scope = pod_scope();
        let text = format!("12:cpu,cpuacct:/kubepods/x\n11:memory:/kubepods/mem\n1:name=systemd:{scope}\n0::/\n");
        assert_eq!(path_of_text(&text), Some(scope));
        let text = "12:cpu,cpuacct:/a\n7:pids:/kubepods/pids\n6:memory:/kubepods/mem\n";
        assert_eq!(path_of_text(text).as_deref(), Some("/kubepods/pids"));
        let text = "12:cpu,cpuacct:/a\n6:memory:/kubepods/mem\n";
        assert_eq!(path_of_text(text).as_deref(), Some("/kubepods/mem"));
        // Paths may contain ':'.
        let text = "1:name=systemd:/odd:name\n";
        assert_eq!(path_of_text(text).as_deref(), Some("/odd:name"));
    }

    #[test]
    fn v1_cgroup_path_near_misses() {
        // "memory" must be a whole controller name.
        assert_eq!(path_of_text("5:memoryx:/a\n4:name=systemdx:/b\n"), None);
        assert_eq!(path_of_text("12:cpu:/a\n"), None);
        assert_eq!(path_of_text(""), None);
        assert_eq!(path_of_text("garbage\n"), None);
        // A v2-only host still yields its one path.
        assert_eq!(path_of_text("0::/kubepods.slice/x\n").as_deref(), Some("/kubepods.slice/x"));
    }
}
