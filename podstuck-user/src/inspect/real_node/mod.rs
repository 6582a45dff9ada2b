//! The real node: answers [`NodeInspector`] from /proc, cgroupfs and the
//! filesystems themselves, on the machine podstuck runs on.
//!
//! It only reads. The one danger of reading is a filesystem whose server is
//! gone (hard NFS mount, dead FUSE daemon): any open, stat, statfs or
//! readdir there sleeps in the kernel forever, and a diagnosis tool that
//! hangs on exactly the fault it should report is worse than none. So every
//! call that touches a path runs in a reader process of its own (forked,
//! [`deadline`]); the caller waits up to a deadline, then reports the
//! filesystem as possibly hung and stays away from it while that reader
//! is stuck ([`avoidance`]): it is read again once the reader returns,
//! or after a backoff.
//! Not a thread: a lookup that waits on a directory lock held by a hung call
//! sleeps uninterruptibly, SIGKILL cannot end it, and a process is not
//! reaped until its every thread has left the kernel, so one such thread
//! would keep podstuck from ever exiting. A reader process is left behind
//! instead, and ends when the kernel lets it. Reading /proc text files and
//! the /proc magic links (cwd, root, fd/N) never calls into the target
//! filesystem, so those run inline.
//!
//! Its rooms, one concern each:
//!
//! - [`deadline`]: the reader processes, their deadline and the review's
//!   budget;
//! - [`avoidance`]: the filesystems avoided while a reader is stuck on
//!   them, and how they heal;
//! - [`beneath`]: how a reader opens a path, following no link a workload
//!   could have put on the way;
//! - [`processes`]: the processes /proc lists, their mount namespaces,
//!   names and task states;
//! - [`holders`]: who holds a mount (podstuck's `fuser`) and its copies in
//!   other namespaces;
//! - [`cgroupfs`]: a cgroup's state, the v1 freezer's levels;
//! - [`fs_facts`]: inode flags, lstat, directory samples, tree counts, statfs;
//! - [`resolve`]: a path resolved inside another process's root;
//! - [`block_devices`]: loop devices, the devices stacked on them and the
//!   processes that hold them open.
//!
//! This module holds [`RealNode`] and hands each question to its room.
//! Every node path is reached through [`Node::path`] (under `--host-root`
//! in a container); /proc is the one podstuck shares the node's PID
//! namespace through ([`Node::proc_root`]).
//!
//! It is not a parser of mount tables (that is [`super::mounts`]) and it
//! draws no conclusions (that is the diagnose stage).

mod avoidance;
mod beneath;
mod block_devices;
pub mod cgroupfs;
mod deadline;
mod device_mapper;
mod fs_facts;
mod holders;
mod processes;
mod resolve;

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::identify::owner::RuntimeState;
use crate::node_access::Node;

use super::{
    CgroupState, DirSample, EntryEstimate, FileFacts, FreezerLevel, FsUsage, InodeFlags, LoopDevice, Mount, MountCopy,
    MountElsewhere, MountHolder, MountNamespace, NodeInspector, Probe, ProcessState, TaskState, Unreadable,
};
use avoidance::Avoidance;
use deadline::{Root, StuckReader};

pub use avoidance::{AvoidedNow, Recovered};
pub use deadline::{ReadsNow, DEFAULT_DEADLINE, DEFAULT_MAX_STUCK_WORKERS, NOT_READ_STOPPING};

/// The node podstuck runs on, read through /proc and the filesystems.
pub struct RealNode {
    /// How the node is reached from where podstuck runs.
    node: &'static Node,
    proc_root: PathBuf,
    /// Where the runtimes say whose a container is (a holder's pod name).
    runtimes: RuntimeState,
    /// Container cgroups found by id ([`cgroupfs`]), searched for again
    /// once gone.
    container_dirs: HashMap<crate::pod::ContainerId, PathBuf>,
    /// podstuck's own container's mount namespace, when it runs in one:
    /// its processes are never holders.
    podstuck_mntns: Option<u64>,
    deadline: Duration,
    max_stuck_workers: usize,
    /// Readers the caller gave up on that have not ended yet.
    stuck: Vec<StuckReader>,
    /// Once podstuck is stopping: when its reads must be over by.
    stop_by: Option<Instant>,
    /// When the reads of the current review must be over by.
    look_by: Option<Instant>,
    /// The filesystems avoided while a reader is stuck on them.
    avoidance: Avoidance,
    /// Answers that were errors, by kind.
    failed: BTreeMap<&'static str, u64>,
    self_pid: u32,
    /// A member found for each mount namespace asked about, tried first
    /// next time: finding one means reading every process's ns link.
    members: HashMap<u64, u32>,
}

impl RealNode {
    /// The node as /proc shows it, reached as `node` says.
    pub fn new(node: &'static Node) -> RealNode {
        RealNode::with_proc_root(node, node.proc_root())
    }

    /// A node whose /proc is elsewhere (a recorded or fake /proc in tests).
    pub fn with_proc_root(node: &'static Node, proc_root: PathBuf) -> RealNode {
        RealNode {
            node,
            proc_root,
            runtimes: RuntimeState::of_this_node(node),
            container_dirs: HashMap::new(),
            podstuck_mntns: node.podstuck_mntns(),
            deadline: DEFAULT_DEADLINE,
            max_stuck_workers: DEFAULT_MAX_STUCK_WORKERS,
            stuck: Vec::new(),
            stop_by: None,
            look_by: None,
            avoidance: Avoidance::default(),
            failed: BTreeMap::new(),
            self_pid: std::process::id(),
            members: HashMap::new(),
        }
    }

    /// A node seen from a container whose mount namespace is `mntns`.
    pub fn with_podstuck_namespace(mut self, mntns: u64) -> RealNode {
        self.podstuck_mntns = Some(mntns);
        self
    }

    /// How long to wait for one call that touches a path.
    pub fn with_deadline(mut self, deadline: Duration) -> RealNode {
        self.deadline = deadline;
        self
    }

    /// How many hung workers to tolerate before refusing to touch any path.
    pub fn with_max_stuck_workers(mut self, max: usize) -> RealNode {
        self.max_stuck_workers = max.max(1);
        self
    }
}

/// Each question handed to the room that answers it; a fact that could
/// not be read is counted by its kind.
impl NodeInspector for RealNode {
    fn host_mounts(&mut self) -> Probe<Vec<Mount>> {
        let read = self.host_table().map_err(unreadable);
        self.counted(read)
    }

    fn mount_namespace(&mut self, mntns: u64) -> Probe<MountNamespace> {
        let read = self.namespace(mntns);
        self.counted(read)
    }

    fn resolved_path(&mut self, pid: u32, path: &[u8]) -> Probe<Vec<u8>> {
        let read = self.resolve_for(pid, path);
        self.counted(read)
    }

    fn mount_holders(&mut self, mount: &Mount, mntns: u64) -> Vec<MountHolder> {
        self.holders_of(mount, mntns)
    }

    fn mount_copies(&mut self, mount: &Mount, mntns: u64) -> Vec<MountCopy> {
        self.copies_of(mount, mntns)
    }

    fn mounts_elsewhere(&mut self, path: &[u8], mntns: u64) -> Vec<MountElsewhere> {
        self.elsewhere_of(path, mntns)
    }

    fn inode_flags(&mut self, path: &[u8], root: u32) -> Probe<InodeFlags> {
        let read = self.within_deadline_in(Root::of(root), path, fs_facts::inode_flags);
        self.counted(read)
    }

    fn file_facts(&mut self, path: &[u8], root: u32) -> Probe<FileFacts> {
        let read = self.within_deadline_in(Root::of(root), path, fs_facts::lstat);
        self.counted(read)
    }

    fn dir_sample(&mut self, path: &[u8], limit: usize, root: u32) -> Probe<DirSample> {
        let read = self.within_deadline_in(Root::of(root), path, move |b, p| fs_facts::sample_dir(b, p, limit));
        self.counted(read)
    }

    fn remaining_entries(&mut self, path: &[u8], root: u32, within_ms: u32) -> Probe<EntryEstimate> {
        let read = self.entries_below(Root::of(root), path, within_ms);
        self.counted(read)
    }

    fn fs_usage(&mut self, path: &[u8], root: u32) -> Probe<FsUsage> {
        let read = self.usage_of(Root::of(root), path);
        self.counted(read)
    }

    fn cgroup(&mut self, path: &[u8]) -> Probe<CgroupState> {
        let read = self.cgroup_state(path);
        self.counted(read)
    }

    fn v1_freezer(&mut self, path: &[u8]) -> Probe<Vec<FreezerLevel>> {
        let read = self.freezer_levels(path);
        self.counted(read)
    }

    fn task(&mut self, tid: u32) -> Probe<TaskState> {
        let read = self.task_of(tid);
        self.counted(read)
    }

    fn pid_namespace_init(&mut self, pid: u32) -> Vec<TaskState> {
        self.pid_namespace_init_of(pid).into_iter().collect()
    }

    fn fuse_servers(&mut self) -> Vec<TaskState> {
        self.fuse_server_tasks()
    }

    fn fuse_waiting(&mut self, connection: u32) -> Probe<u64> {
        let read = self.fuse_connection_waiting(connection);
        self.counted(read)
    }

    fn loop_devices(&mut self) -> Vec<LoopDevice> {
        self.loops()
    }

    fn device_mapper(&mut self, major: u32, minor: u32) -> Probe<Option<crate::inspect::MapperDevice>> {
        let read = self.mapper_device(major, minor);
        self.counted(read)
    }

    fn container_processes(&mut self, id: &crate::pod::ContainerId) -> Probe<Option<crate::inspect::ContainerCgroup>> {
        let read = self.container_cgroup(id);
        self.counted(read)
    }

    fn process(&mut self, pid: u32, start: u64) -> Probe<Option<ProcessState>> {
        let read = self.process_of(pid, start);
        self.counted(read)
    }

    fn processes_running(&mut self, name: &[u8]) -> Vec<TaskState> {
        self.processes_named(name)
    }

    fn processes_unreadable(&mut self) -> Vec<TaskState> {
        self.denied_tasks()
    }

    fn avoid(&mut self, path: &[u8]) {
        self.avoid_mount_of(path)
    }
}

impl RealNode {
    /// `read`, its failure counted by kind.
    fn counted<T>(&mut self, read: Probe<T>) -> Probe<T> {
        if let Err(why) = &read {
            *self.failed.entry(why.kind()).or_default() += 1;
        }
        read
    }
}

fn path_of(bytes: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(bytes))
}

fn read_link(p: &Path) -> io::Result<Vec<u8>> {
    Ok(fs::read_link(p)?.into_os_string().into_vec())
}

fn unreadable(e: io::Error) -> Unreadable {
    Unreadable::io(&e)
}

#[cfg(test)]
mod tests {
    //! What the rooms' tests share.

    use std::fs;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;
    use std::time::Duration;

    /// A test path as the bytes a node question takes.
    pub(super) fn b(p: &Path) -> &[u8] {
        p.as_os_str().as_bytes()
    }

    /// How long a test waits for the node to show what it made.
    pub(super) const WAIT: Duration = Duration::from_secs(10);

    /// A /proc made of plain files and symlinks: two namespaces, one with a
    /// copy of the mount and one without.
    pub(super) fn fake_proc(root: &Path) {
        use std::os::unix::fs::symlink;
        let put = |rel: &str, text: &str| {
            let p = root.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        };
        let link = |rel: &str, target: &str| {
            let p = root.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            symlink(target, p).unwrap();
        };
        put("self/mountinfo", "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n50 1 0:50 / /vol rw - tmpfs tmpfs rw\n");
        link("self/ns/mnt", "mnt:[1000]");
        // Host namespace: cwd, an open file, a socket, a mapped library.
        link("100/ns/mnt", "mnt:[1000]");
        put("100/comm", "holder\n");
        link("100/cwd", "/vol/dir");
        link("100/root", "/");
        link("100/fd/3", "/vol/file");
        put("100/fdinfo/3", "pos:\t0\nflags:\t0100000\nmnt_id:\t50\nino:\t7\n");
        link("100/fd/4", "socket:[123]");
        put("100/fdinfo/4", "pos:\t0\nflags:\t02\nmnt_id:\t9\n");
        put(
            "100/maps",
            "55d0-55d1 r-xp 00000000 08:01 12 /usr/bin/holder\n\
             7f00-7f01 r-xp 00000000 00:32 33                         /vol/lib.so (deleted)\n\
             7ffd-7ffe rw-p 00000000 00:00 0                          [stack]\n",
        );
        // A container with a copy of /vol, whose cwd was deleted.
        link("200/ns/mnt", "mnt:[2000]");
        put("200/comm", "other\n");
        put("200/mountinfo", "7 6 8:1 / / rw - ext4 /dev/sda1 rw\n70 7 0:50 / /vol rw master:5 - tmpfs tmpfs rw\n");
        link("200/cwd", "/vol/x (deleted)");
        link("200/root", "/");
        // A container without /vol: its /vol is its own directory.
        link("300/ns/mnt", "mnt:[3000]");
        put("300/comm", "bystander\n");
        put("300/mountinfo", "8 6 8:1 /c / rw - ext4 /dev/sda1 rw\n");
        link("300/cwd", "/vol");
        link("300/root", "/");
        // Gone between the listing and the reads.
        fs::create_dir_all(root.join("400")).unwrap();
    }
}
