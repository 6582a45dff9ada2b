//! Every question a detector may ask of the node, declared once: its
//! method, its arguments (as the detector passes them `=>` as a record
//! keeps them), its answer and its name in a record. The inspector trait
//! ([`super::NodeInspector`]), the record's question, the recording and
//! replaying nodes, the record's wire question and the detectors' fake
//! node (which answers a question [`Unanswered`] until a test needs it)
//! are all made from this table, so a new question is one entry here plus
//! its reader on the real node (`real_node`); a new answer type also
//! takes its wire shape (`record/wire/answers.rs`) and a golden line.
//!
//! An argument `= value` is one that older records lack: read as its
//! type's default when absent (so `value` is always that default, `0`), and
//! a recorded answer with that value answers the question whatever it is
//! asked with.

use super::{Probe, Unreadable};

/// Hands the table to `$then!`, a macro that makes one thing of every question.
macro_rules! node_questions {
    ($then:ident) => {
        $then! {
            /// The host's mount table (podstuck runs in the host mount namespace).
            fn host_mounts() -> Probe<Vec<Mount>> as HostMounts;
            /// Mount namespace `mntns` (0: unknown, taken as the host's) with its
            /// table, read through a process living in it; unreadable when none
            /// is left ([`namespace_gone`]).
            fn mount_namespace(mntns: u64 => u64) -> Probe<MountNamespace> as MountNamespace;
            /// `path` as process `pid` reaches it ([`NODE_ROOT`](crate::inspect::NODE_ROOT): the node itself):
            /// every symlink followed inside its root (`/var/run/x` is `/run/x` on most nodes), `..` taken after
            /// the symlink before it, and a tail that no longer exists kept as
            /// written. Mount tables name resolved paths, callers pass whatever
            /// they were given.
            fn resolved_path(pid: u32 => u32, path: &[u8] => Vec<u8>) -> Probe<Vec<u8>> as ResolvedPath;
            /// Processes, in any mount namespace, whose cwd, root, open files or
            /// mappings lie on `mount` of namespace `mntns`'s table (or on its
            /// copies in other namespaces).
            fn mount_holders(mount: &Mount => Mount, mntns: u64 => u64 = 0) -> Vec<MountHolder> as MountHolders;
            /// Copies of `mount` of namespace `mntns` in the other namespaces:
            /// at its path, or anywhere in its peer group (`shared:N`: a
            /// volume seen inside a container with Bidirectional propagation).
            fn mount_copies(mount: &Mount => Mount, mntns: u64 => u64 = 0) -> Vec<MountCopy> as MountCopies;
            /// Where the directory entry `path` names in namespace `mntns` (0:
            /// the host's) is a mountpoint in another namespace, the host's
            /// among them: each such mount, with its namespace and who holds
            /// it. Since Linux 3.18 a directory that is a mountpoint only in
            /// another namespace can be removed, and the kernel then detaches
            /// the mount there, under whoever uses it: a removal printed for
            /// one namespace is checked against these first.
            fn mounts_elsewhere(path: &[u8] => Vec<u8>, mntns: u64 => u64) -> Vec<MountElsewhere> as MountsElsewhere;
            /// FS_IOC_GETFLAGS of a regular file or directory (never follows a
            /// symlink). Every question of a path takes `root`: the node's `/`
            /// ([`NODE_ROOT`](crate::inspect::NODE_ROOT)), or the root of process
            /// `root` (a member of the mount namespace the path is proven in:
            /// kubelet's, in a container), never the node's in its place.
            fn inode_flags(path: &[u8] => Vec<u8>, root: u32 => u32 = 0) -> Probe<InodeFlags> as InodeFlags;
            /// lstat.
            fn file_facts(path: &[u8] => Vec<u8>, root: u32 => u32 = 0) -> Probe<FileFacts> as FileFacts;
            /// Up to `limit` names of a directory's entries, and how many there are.
            fn dir_sample(path: &[u8] => Vec<u8>, limit: usize => usize, root: u32 => u32 = 0) -> Probe<DirSample> as DirSample;
            /// How many entries remain in the tree under `path`, counted for at
            /// most `within_ms` (0: the count's own budget, 200 ms); a count cut
            /// short says "at least" what it counted.
            fn remaining_entries(path: &[u8] => Vec<u8>, root: u32 => u32 = 0, within_ms: u32 => u32 = 0) -> Probe<EntryEstimate> as RemainingEntries;
            /// statfs.
            fn fs_usage(path: &[u8] => Vec<u8>, root: u32 => u32 = 0) -> Probe<FsUsage> as FsUsage;
            /// A cgroup directory (v1 or v2) and the tasks in it.
            fn cgroup(path: &[u8] => Vec<u8>) -> Probe<CgroupState> as Cgroup;
            /// The v1 freezer's view of a v1 cgroup of any hierarchy: its twin
            /// (the same path relative to the freezer hierarchy's mount) and every
            /// cgroup below that twin, parents first. Unreadable when no v1
            /// freezer hierarchy is mounted or the twin does not exist.
            fn v1_freezer(path: &[u8] => Vec<u8>) -> Probe<Vec<FreezerLevel>> as V1Freezer;
            /// A task (thread id) by /proc.
            fn task(tid: u32 => u32) -> Probe<TaskState> as Task;
            /// Process `pid` if it is still the one that started at `start`
            /// (clock ticks since boot; 0: whichever has the pid), with its
            /// threads and how it takes signals; None when it is gone or its
            /// pid names another process by now.
            fn process(pid: u32 => u32, start: u64 => u64) -> Probe<Option<ProcessState>> as Process;
            /// The processes whose executable's file name is `name` (a CNI
            /// plugin's daemon: calico-node, cilium-agent).
            fn processes_running(name: &[u8] => Vec<u8>) -> Vec<TaskState> as ProcessesRunning;
            /// The init (pid 1) of process `pid`'s PID namespace, with its
            /// state and stack: none where `pid` is that init, lives in the
            /// node's PID namespace, or the namespace cannot be read. A
            /// container's init that exited waits in `zap_pid_ns_processes`
            /// for every task of its namespace to end.
            fn pid_namespace_init(pid: u32 => u32) -> Vec<TaskState> as PidNamespaceInit;
            /// Processes that have /dev/fuse open: the FUSE servers.
            fn fuse_servers() -> Vec<TaskState> as FuseServers;
            /// Requests of FUSE connection `connection` (fusectl's number, the
            /// mount's device) waiting for an answer: the kernel's own count,
            /// which says whether a stuck thread can be waiting on it.
            fn fuse_waiting(connection: u32 => u32) -> Probe<u64> as FuseWaiting;
            /// Every bound loop device: its backing file, whether a detach
            /// waits for its last user, and what holds it open (devices stacked
            /// on it, processes).
            fn loop_devices() -> Vec<LoopDevice> as LoopDevices;
            /// The device-mapper device numbered `major`:`minor` (a volume's
            /// filesystem's `st_dev`), its sysfs and its table and status;
            /// None when that device is no device-mapper one.
            fn device_mapper(major: u32 => u32, minor: u32 => u32) -> Probe<Option<MapperDevice>> as DeviceMapper;
            /// The cgroup of container `id` (the one whose directory name
            /// carries it, as kubelet's cgroup drivers and the runtimes name
            /// them) and the processes in it; None when no cgroup of it is
            /// found (the container is gone, or on another node).
            fn container_processes(id: &ContainerId => ContainerId) -> Probe<Option<ContainerCgroup>> as ContainerProcesses;
            /// Processes whose namespaces, open files, cwd and root podstuck may
            /// not read: the kernel's ptrace access check refused it (an AppArmor
            /// or SELinux profile, Yama, no CAP_SYS_PTRACE), not a process gone.
            /// A holder among them cannot be named, nor ruled out.
            fn processes_unreadable() -> Vec<TaskState> as ProcessesUnreadable;
        }
    };
}

pub(crate) use node_questions;

/// Every type the table names: a macro's types are resolved where it
/// expands, so each file that expands the table imports these
/// (`use crate::inspect::questions::named::*`), and a new type is added
/// here once.
pub mod named {
    pub use crate::inspect::{
        CgroupState, ContainerCgroup, DirSample, EntryEstimate, FileFacts, FreezerLevel, FsUsage, InodeFlags,
        LoopDevice, MapperDevice, Mount, MountCopy, MountElsewhere, MountHolder, MountNamespace, Probe, ProcessState,
        TaskState,
    };
    pub use crate::pod::ContainerId;
}

macro_rules! names_of {
    ($(
        $(#[$doc:meta])*
        fn $method:ident($($arguments:tt)*) -> $answer:ty as $variant:ident;
    )*) => {
        &[$(stringify!($method)),*]
    };
}

/// Every question's method name, in the table's order: what a test of
/// every question holds its cases against.
pub const QUESTION_NAMES: &[&str] = node_questions!(names_of);

/// An answer from a node that has none to give: unreadable, saying why,
/// where the answer is a fact ([`Probe`]); an empty list where it is a
/// list. What a replay answers a question its record lacks, and the fake
/// node of the detectors' tests one its test gave no answer to.
pub trait Unanswered {
    fn unanswered(why: &str) -> Self;
}

impl<T> Unanswered for Probe<T> {
    fn unanswered(why: &str) -> Probe<T> {
        Err(Unreadable::Other(why.into()))
    }
}

/// A list answers with none, whatever the reason.
impl<T> Unanswered for Vec<T> {
    fn unanswered(_why: &str) -> Vec<T> {
        Vec::new()
    }
}
