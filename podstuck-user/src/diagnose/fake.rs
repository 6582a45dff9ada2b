//! A fake node and synthetic calls for the detectors' unit tests: node
//! state is whatever a test says, calls are made at chosen times.
//!
//! The fake node's [`NodeInspector`] is made from the table of questions
//! (`inspect::questions`): a question it has no logic for answers
//! "unanswered" (unreadable, or an empty list), so a new question needs
//! nothing here until a test asks it; then its answer goes in
//! `impl FakeAnswers for FakeNode`, from a field the test sets.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use podstuck_common::Syscall;

use super::route::Class;
use super::track::{Attempts, FailureLog};
use super::{CallInFlight, Detector, Finding, Review};
use crate::event::{BaseDir, CallEvent, PathStatus, ProcessStart};
use crate::identify::actor::{describe, role_of};
use crate::identify::path_proof::PathProof;
use crate::identify::pod::{clues_from_path, PodUid};
use crate::identify::target::Targets;
use crate::identify::{Actor, Identity, MatchReason};
use crate::inspect::mounts::parse_mountinfo;
use crate::inspect::questions::{node_questions, Unanswered};
use crate::inspect::*;
use crate::pod::ContainerId;

pub const POD: &str = "5f1c2a9e-0000-4000-8000-000000000001";
pub const KUBELET: &str = "/var/lib/kubelet";
/// The host's mount namespace, every synthetic call's unless a test says otherwise.
pub const HOST_MNTNS: u64 = 4026531840;

pub fn pod() -> PodUid {
    PodUid::parse(POD).unwrap()
}

/// `secs` after a fixed origin.
pub fn t(secs: f64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000) + Duration::from_secs_f64(secs)
}

/// A node whose every fact is set by the test.
#[derive(Default)]
pub struct FakeNode {
    pub mountinfo: String,
    /// Mount namespaces other than the host's ([`HOST_MNTNS`]), with their tables.
    pub namespaces: Vec<MountNamespace>,
    pub holders: Vec<MountHolder>,
    pub copies: Vec<MountCopy>,
    pub flags: HashMap<Vec<u8>, InodeFlags>,
    pub facts: HashMap<Vec<u8>, FileFacts>,
    pub dirs: HashMap<Vec<u8>, Vec<&'static str>>,
    pub remaining: HashMap<Vec<u8>, u64>,
    pub usage: HashMap<Vec<u8>, FsUsage>,
    pub cgroups: HashMap<Vec<u8>, CgroupState>,
    /// Cgroups of the v1 freezer hierarchy; a v1 cgroup's twin and those
    /// below it are found through the mount table, as on a node.
    pub freezer: Vec<FreezerLevel>,
    pub tasks: HashMap<u32, TaskState>,
    /// Processes with more than a task says: threads, signal dispositions,
    /// start. A pid in `tasks` alone is a one-thread process started at 0.
    pub processes: HashMap<u32, ProcessState>,
    /// Processes running, by their executable's file name.
    pub running: Vec<(&'static str, TaskState)>,
    /// Processes whose /proc cannot be read (too many open files).
    pub unreadable_processes: Vec<u32>,
    pub fuse: Vec<TaskState>,
    /// The init of a pid's PID namespace, by that pid.
    pub pid_inits: HashMap<u32, TaskState>,
    /// FUSE connections' waiting requests, by connection (absent: unreadable).
    pub fuse_waiting: HashMap<u32, u64>,
    /// Bound loop devices and what holds them.
    pub loops: Vec<LoopDevice>,
    /// Device-mapper devices by number.
    pub mappers: Vec<MapperDevice>,
    /// Container cgroups and their processes, by container id.
    pub containers: Vec<(ContainerId, ContainerCgroup)>,
    /// Processes whose /proc podstuck may not read (an AppArmor profile).
    pub denied: Vec<TaskState>,
    pub avoided: Vec<Vec<u8>>,
    /// Symlinks: (link path, absolute target), resolved as prefixes.
    pub symlinks: Vec<(String, String)>,
    /// The roots every read of a path was asked below, in order (the
    /// node's is 0): the fake answers each the same, and a test checks
    /// where a detector read.
    pub roots_read: Vec<u32>,
    /// The time each count of a tree's entries was given, in ms (0: its own).
    pub counts_within: Vec<u32>,
}

fn missing<T>() -> Probe<T> {
    Err(Unreadable::Gone("no such file or directory".into()))
}

impl FakeNode {
    /// The host mount table: `/` on ext4 plus these lines
    /// ("<id> <mount point> <fstype> [options]").
    pub fn with_mounts(lines: &[&str]) -> FakeNode {
        let mut text = String::from("1 0 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n");
        for line in lines {
            let mut f = line.split_whitespace();
            let id = f.next().unwrap();
            let at = f.next().unwrap();
            let fstype = f.next().unwrap();
            let options = f.next().unwrap_or("rw,relatime");
            text.push_str(&format!("{id} 1 0:{id} / {at} {options} shared:{id} - {fstype} {fstype} rw\n"));
        }
        FakeNode { mountinfo: text, ..Default::default() }
    }

    pub fn mounts(&self) -> Vec<Mount> {
        parse_mountinfo(self.mountinfo.as_bytes())
    }

    /// Adds mount namespace `mntns` (kubelet's in a container, say),
    /// living on in process `member` (`comm`), with its own table made as
    /// [`FakeNode::with_mounts`] makes the host's.
    pub fn with_namespace(mut self, mntns: u64, member: u32, comm: &str, lines: &[&str]) -> FakeNode {
        let mounts = FakeNode::with_mounts(lines).mounts();
        self.namespaces.push(MountNamespace {
            mntns,
            host: false,
            member,
            member_start: Some(ProcessStart(u64::from(member) + 10_000)),
            member_comm: comm.into(),
            owner: None,
            mounts,
        });
        self
    }
}

impl Call {
    /// The same call, made from mount namespace `mntns`.
    /// Made in mount namespace `mntns`, a runtime's (kubelet in a container).
    pub fn in_namespace(mut self, mntns: u64) -> Call {
        self.event.mntns = mntns as u32;
        self.identity.proof = PathProof::RuntimeNamespace { mntns: mntns as u32, runtime: "kubelet".into() };
        self
    }

    /// Made in mount namespace `mntns`, where the path's directory is the node's.
    pub fn on_the_nodes_directory(mut self, mntns: u64) -> Call {
        self.event.mntns = mntns as u32;
        self.identity.proof = PathProof::NodeDirectory { mntns: mntns as u32 };
        self
    }
}

/// Makes, of the table of questions (`inspect::questions`), the fake
/// node's [`NodeInspector`], which answers each question as
/// [`FakeAnswers`] does, and `FakeAnswers` itself, which answers each one
/// "unanswered" unless [`FakeNode`] gives it logic of its own.
macro_rules! fake_node_of {
    ($(
        $(#[$doc:meta])*
        fn $method:ident($($arg:ident: $ty:ty => $owned:ty $(= $older:expr)?),*) -> $answer:ty as $variant:ident;
    )*) => {
        /// The fake node's answer to each question: unanswered (unreadable,
        /// "the fake node was given no answer to task", or an empty list)
        /// until a test needs the question and the fake answers it from
        /// what the test set.
        trait FakeAnswers {
            $(
                #[allow(unused_variables)]
                fn $method(&mut self, $($arg: $ty),*) -> $answer {
                    Unanswered::unanswered(concat!("the fake node was given no answer to ", stringify!($method)))
                }
            )*
        }

        impl NodeInspector for FakeNode {
            $(
                fn $method(&mut self, $($arg: $ty),*) -> $answer {
                    FakeAnswers::$method(self, $($arg),*)
                }
            )*
            fn avoid(&mut self, path: &[u8]) {
                self.avoided.push(path.to_vec());
            }
        }
    };
}

node_questions!(fake_node_of);

/// The questions the detectors' tests set answers to.
impl FakeAnswers for FakeNode {
    fn host_mounts(&mut self) -> Probe<Vec<Mount>> {
        Ok(self.mounts())
    }
    fn mount_namespace(&mut self, mntns: u64) -> Probe<MountNamespace> {
        if mntns == 0 || mntns == HOST_MNTNS {
            return Ok(MountNamespace {
                mntns,
                host: true,
                member: 1,
                member_start: Some(ProcessStart(1)),
                member_comm: "systemd".into(),
                owner: None,
                mounts: self.mounts(),
            });
        }
        self.namespaces.iter().find(|n| n.mntns == mntns).cloned().ok_or_else(|| namespace_gone(mntns))
    }
    fn resolved_path(&mut self, _pid: u32, path: &[u8]) -> Probe<Vec<u8>> {
        for (link, target) in &self.symlinks {
            if mounts::is_at_or_below(path, link.as_bytes()) {
                let mut out = target.as_bytes().to_vec();
                out.extend_from_slice(&path[link.len()..]);
                return Ok(out);
            }
        }
        Ok(path.to_vec())
    }
    fn mount_holders(&mut self, _mount: &Mount, _mntns: u64) -> Vec<MountHolder> {
        self.holders.clone()
    }
    fn mount_copies(&mut self, _mount: &Mount, _mntns: u64) -> Vec<MountCopy> {
        self.copies.clone()
    }
    /// As on a node: the host's table and every namespace's, searched for
    /// mounts on the entry `path` names in `mntns`; each held by the
    /// test's holders.
    fn mounts_elsewhere(&mut self, path: &[u8], mntns: u64) -> Vec<MountElsewhere> {
        let asked = if mntns == 0 { HOST_MNTNS } else { mntns };
        let Ok(here) = FakeAnswers::mount_namespace(self, asked) else { return Vec::new() };
        let Some(entry) = crate::mountinfo::entry_location(&here.mounts, path) else { return Vec::new() };
        let host = FakeAnswers::mount_namespace(self, HOST_MNTNS).expect("the host's table");
        let mut found = Vec::new();
        for namespace in std::iter::once(host).chain(self.namespaces.iter().cloned()).filter(|n| n.mntns != asked) {
            for mount in &namespace.mounts {
                if mounts::mount_point_location(&namespace.mounts, mount).as_ref() == Some(&entry) {
                    let namespace = MountNamespace { mounts: Vec::new(), ..namespace.clone() };
                    found.push(MountElsewhere { namespace, mount: mount.clone(), holders: self.holders.clone() });
                }
            }
        }
        found
    }
    fn inode_flags(&mut self, path: &[u8], root: u32) -> Probe<InodeFlags> {
        self.roots_read.push(root);
        match self.flags.get(path) {
            Some(f) => Ok(*f),
            None if self.facts.contains_key(path) => Ok(InodeFlags::default()),
            None => missing(),
        }
    }
    fn file_facts(&mut self, path: &[u8], root: u32) -> Probe<FileFacts> {
        self.roots_read.push(root);
        self.facts.get(path).copied().ok_or(()).or_else(|_| missing())
    }
    fn dir_sample(&mut self, path: &[u8], limit: usize, root: u32) -> Probe<DirSample> {
        self.roots_read.push(root);
        let names = self.dirs.get(path).ok_or(()).or_else(|_| missing())?;
        Ok(DirSample {
            names: names.iter().take(limit).map(|n| n.as_bytes().to_vec()).collect(),
            counted: names.len() as u64,
            complete: true,
        })
    }
    fn remaining_entries(&mut self, path: &[u8], root: u32, within_ms: u32) -> Probe<EntryEstimate> {
        self.roots_read.push(root);
        self.counts_within.push(within_ms);
        let entries = *self.remaining.get(path).ok_or(()).or_else(|_| missing())?;
        Ok(EntryEstimate { entries, at_least: false, method: "counted".into() })
    }
    fn fs_usage(&mut self, path: &[u8], root: u32) -> Probe<FsUsage> {
        self.roots_read.push(root);
        self.usage.get(path).cloned().ok_or(()).or_else(|_| missing())
    }
    fn cgroup(&mut self, path: &[u8]) -> Probe<CgroupState> {
        self.cgroups.get(path).cloned().ok_or(()).or_else(|_| missing())
    }
    fn v1_freezer(&mut self, path: &[u8]) -> Probe<Vec<FreezerLevel>> {
        let twin = mounts::freezer_twin(&self.mounts(), path).ok_or(()).or_else(|_| missing())?;
        let mut levels: Vec<FreezerLevel> =
            self.freezer.iter().filter(|l| mounts::is_at_or_below(&l.dir, &twin)).cloned().collect();
        if !levels.iter().any(|l| l.dir == twin) {
            return missing();
        }
        levels.sort_by_key(|l| l.dir.iter().filter(|b| **b == b'/').count());
        Ok(levels)
    }
    fn task(&mut self, tid: u32) -> Probe<TaskState> {
        self.tasks.get(&tid).cloned().ok_or(()).or_else(|_| missing())
    }
    fn pid_namespace_init(&mut self, pid: u32) -> Vec<TaskState> {
        self.pid_inits.get(&pid).cloned().into_iter().collect()
    }
    fn fuse_servers(&mut self) -> Vec<TaskState> {
        self.fuse.clone()
    }
    fn fuse_waiting(&mut self, connection: u32) -> Probe<u64> {
        self.fuse_waiting.get(&connection).copied().ok_or(()).or_else(|_| missing())
    }
    fn loop_devices(&mut self) -> Vec<LoopDevice> {
        self.loops.clone()
    }
    fn device_mapper(&mut self, major: u32, minor: u32) -> Probe<Option<MapperDevice>> {
        Ok(self.mappers.iter().find(|m| m.dev == (major, minor)).cloned())
    }
    fn container_processes(&mut self, id: &ContainerId) -> Probe<Option<ContainerCgroup>> {
        Ok(self.containers.iter().find(|(c, _)| c == id).map(|(_, cgroup)| cgroup.clone()))
    }
    fn process(&mut self, pid: u32, start: u64) -> Probe<Option<ProcessState>> {
        if self.unreadable_processes.contains(&pid) {
            return Err(Unreadable::TooMany("too many open files".into()));
        }
        let found = match (self.processes.get(&pid), self.tasks.get(&pid)) {
            (Some(p), _) => Some(p.clone()),
            (None, Some(t)) => Some(one_thread(t.clone())),
            (None, None) => None,
        };
        Ok(found.filter(|p| start == 0 || p.start == 0 || p.start == start))
    }
    fn processes_running(&mut self, name: &[u8]) -> Vec<TaskState> {
        self.running.iter().filter(|(n, _)| n.as_bytes() == name).map(|(_, t)| t.clone()).collect()
    }
    fn processes_unreadable(&mut self) -> Vec<TaskState> {
        self.denied.clone()
    }
}

/// A process of one thread, `task`, started at 0 (any start matches).
pub fn one_thread(task: TaskState) -> ProcessState {
    ProcessState {
        pid: task.pid,
        start: 0,
        threads: vec![task],
        thread_count: 1,
        ns_pid: None,
        sig_ignored: 0,
        sig_caught: 0,
        mntns: Some(HOST_MNTNS),
    }
}

/// `fix` entered into the mount namespace of pid `pid`, checked first to
/// be the process that started at `start`, as fixes print it.
pub fn entered(pid: u32, start: u64, fix: &str) -> String {
    format!("[ \"$(sed 's/.*) //' /proc/{pid}/stat | cut -d' ' -f20)\" = {start} ] && nsenter -t {pid} -m -- {fix}")
}

/// A regular file's or directory's lstat.
pub fn facts(is_dir: bool, mode: u32, uid: u32) -> FileFacts {
    FileFacts { mode, uid, gid: 0, nlink: 1, size: 0, is_dir, sticky: mode & 0o1000 != 0, dev: (8, 1) }
}

pub fn task(tid: u32, comm: &str, state: char) -> TaskState {
    TaskState { tid, pid: tid, comm: comm.into(), state, wchan: None, stack: Vec::new() }
}

/// A synthetic call and its identity, as identify would make them.
#[derive(Clone)]
pub struct Call {
    pub event: CallEvent,
    pub identity: Identity,
}

/// A call by `comm` (pid 100) on an absolute path at `at` seconds,
/// returning `ret` (0 or -errno).
pub fn call(at: f64, comm: &str, syscall: Syscall, flags: u64, path: &str, ret: i32) -> Call {
    call_by(at, comm, 100, syscall, flags, path, ret)
}

pub fn call_by(at: f64, comm: &str, pid: u32, syscall: Syscall, flags: u64, path: &str, ret: i32) -> Call {
    let event = CallEvent {
        time: t(at),
        pid,
        tid: pid,
        comm: comm.into(),
        ppid: 1,
        pcomm: "systemd".into(),
        cgroup_id: 1,
        v1_cgroup_id: 0,
        v1_hierarchy: 0,
        mntns: HOST_MNTNS as u32,
        uid: 0,
        syscall,
        flags,
        dfd: -100,
        path: path.as_bytes().to_vec(),
        path_status: PathStatus::Whole,
        base: BaseDir::NotNeeded,
        ret: ret as i64,
        latency_ns: 20_000,
        represents: 1,
    };
    let clues = clues_from_path(path.as_bytes(), &[std::path::PathBuf::from(KUBELET)]);
    let (pod_uid, path_area) = match clues.pod {
        Some((uid, area)) => (Some(uid), Some(area)),
        None => (None, None),
    };
    let role = role_of(comm, None, "systemd");
    let identity = Identity {
        abs_path: Ok(path.as_bytes().to_vec()),
        matched: if pod_uid.is_some() { vec![MatchReason::Path] } else { vec![] },
        pod_uid,
        path_area,
        target: Targets::default().of(path.as_bytes(), path_area),
        container_id: clues.container,
        actor: Actor {
            comm: comm.into(),
            exe: None,
            parent: "systemd".into(),
            role,
            description: describe(comm, "systemd", role),
        },
        proof: PathProof::NodeNamespace,
        claimed_pod: None,
    };
    Call { event, identity }
}

pub fn rmdir(at: f64, comm: &str, path: &str, ret: i32) -> Call {
    call(at, comm, Syscall::Unlinkat, libc::AT_REMOVEDIR as u64, path, ret)
}

pub fn unlink(at: f64, comm: &str, path: &str, ret: i32) -> Call {
    call(at, comm, Syscall::Unlinkat, 0, path, ret)
}

pub fn umount(at: f64, comm: &str, path: &str, ret: i32) -> Call {
    call(at, comm, Syscall::Umount2, 0, path, ret)
}

/// One call, as the diagnoser hands it to the detector: a failure only
/// where the detector claims its class (the router's rule), every call to
/// its `observe`.
pub fn feed(detector: &mut dyn Detector, c: &Call) {
    if let Some(class) = Class::of(&c.event, &c.identity) {
        if detector.claims().iter().any(|claim| claim.covers(&class)) {
            detector.failed(&c.event, &c.identity);
        }
    }
    detector.observe(&c.event, &c.identity);
}

/// The one path's attempts `calls` make, as a detector's failure log keeps
/// them (every failure taken as routed to it): what a detector's decision
/// is tested on, apart from its words.
pub fn attempts_of(calls: &[Call]) -> Attempts {
    let mut log = FailureLog::default();
    for c in calls {
        match c.event.errno() {
            Some(_) => log.record(&c.event, &c.identity),
            None => log.ended_by(&c.event, &c.identity),
        }
    }
    let mut kept = log.into_attempts();
    assert_eq!(kept.len(), 1, "the calls fail on one path");
    kept.remove(0)
}

/// Feeds the calls to the detector and reviews at `now` seconds.
pub fn run(detector: &mut dyn Detector, node: &mut FakeNode, calls: &[Call], now: f64) -> Vec<Finding> {
    run_with(detector, node, calls, &[], now)
}

pub fn run_with(
    detector: &mut dyn Detector,
    node: &mut FakeNode,
    calls: &[Call],
    in_flight: &[CallInFlight],
    now: f64,
) -> Vec<Finding> {
    for c in calls {
        feed(detector, c);
    }
    let found = detector.review(&mut Review { now: t(now), in_flight, node });
    // Every detector's every test holds the rule: no printed command names
    // a pid it does not check first.
    for f in &found {
        for text in std::iter::once(&f.fix).chain(&f.advice) {
            let unchecked = super::shell::unchecked_pids(text);
            assert!(unchecked.is_empty(), "{} names pid(s) {unchecked:?} unchecked: {text}", f.id);
        }
    }
    found
}

/// The pod's CSI volume mount dir.
pub fn csi_mount() -> String {
    format!("{KUBELET}/pods/{POD}/volumes/kubernetes.io~csi/pvc-1/mount")
}

/// A `backup` process (pid 4242) whose current directory is the pod's CSI
/// volume: what keeps a volume mounted in the detectors' and the record's tests.
pub fn backup_in_csi_mount() -> MountHolder {
    MountHolder {
        pid: 4242,
        start: Some(ProcessStart(4_242_000)),
        comm: "backup".into(),
        how: HoldKind::Cwd,
        path: csi_mount().into_bytes(),
        mntns: 1,
        other_namespace: false,
        owner: None,
    }
}

/// A v2 cgroup with one live `sleep` (tid 999) in it, which keeps it busy.
pub fn cgroup_with_a_live_sleep() -> CgroupState {
    CgroupState {
        version: 2,
        tasks: vec![task(999, "sleep", 'S')],
        children: vec![],
        populated: Some(true),
        frozen: Some(false),
        has_kill: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake with no logic of its own.
    struct Blank;
    impl FakeAnswers for Blank {}

    #[test]
    fn a_question_the_fake_has_no_logic_for_is_unanswered() {
        let why = |question: &str| Unreadable::Other(format!("the fake node was given no answer to {question}"));
        assert_eq!(Blank.task(7), Err(why("task")));
        assert_eq!(Blank.file_facts(b"/a", 0), Err(why("file_facts")));
        assert!(Blank.fuse_servers().is_empty());
        assert!(Blank.mount_holders(&FakeNode::with_mounts(&[]).mounts()[0], 0).is_empty());
    }
}
