//! Inspect: reads the node state that confirms or rules out a pathology,
//! at the moment a detector asks: mount tables (the host's and other mount
//! namespaces'), who holds a mount (a `fuser` over /proc), inode flags,
//! file metadata, directory contents, filesystem usage, cgroups, task
//! states and loop devices with what holds them.
//!
//! Detectors see the node only through [`NodeInspector`], so they are tested
//! with a fake node; [`real_node::RealNode`] is the real one. Nothing here changes
//! the node. Anything that touches a path (open, stat, statfs, readdir) may
//! block forever on a dead NFS or FUSE server, so the live node does it in a
//! reader process with a deadline and then stays away from that mount.

pub mod device_mapper;
pub mod mounts;
pub mod questions;
pub mod real_node;
pub mod unreadable;

use serde::{Deserialize, Serialize};

use crate::identify::owner::Owner;
use crate::pod::ContainerId;
pub use device_mapper::{MapperDevice, MapperTarget};
pub use unreadable::Unreadable;

pub type Probe<T> = Result<T, Unreadable>;

pub use crate::mountinfo::Mount;

/// How a process holds a mount busy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HoldKind {
    /// Its current directory is on the mount.
    Cwd,
    /// Its root directory (chroot, container rootfs) is on the mount.
    Root,
    /// It has a file open on the mount.
    OpenFile,
    /// It has a file mapped from the mount.
    MappedFile,
}

/// A process that keeps a mount busy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MountHolder {
    pub pid: u32,
    /// When it started (`/proc/<pid>/stat`), read with the hold: a pid
    /// alone names whichever process has it when a fix is pasted, and
    /// pids are reused within minutes. None where it could not be read
    /// (and in records made before podstuck read it).
    pub start: Option<crate::event::ProcessStart>,
    pub comm: String,
    pub how: HoldKind,
    /// The held file or directory, as the holder sees it.
    #[serde(serialize_with = "crate::words::serialize_path")]
    pub path: Vec<u8>,
    /// The holder's mount namespace inode (`/proc/<pid>/ns/mnt`).
    pub mntns: u64,
    /// Whether that is not the namespace the mount was asked about in.
    pub other_namespace: bool,
    /// The pod or container it belongs to, where it is one's.
    pub owner: Option<Owner>,
}

/// A mount namespace as a call's caller saw it, read through a process
/// that still lives in it: a caller is often gone by the time its failure
/// is looked at (kubelet's short-lived `umount` child), but kubelet in a
/// container (kind, k3d, minikube, Talos, RKE1) keeps its namespace alive,
/// and that namespace's table is the one that tells whether its paths are
/// mounted. Never another namespace's table in its place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountNamespace {
    /// Its inode number (`/proc/<pid>/ns/mnt`, the `mntns` of a call).
    pub mntns: u64,
    /// Whether it is the host's (the node's own, where podstuck reads it).
    pub host: bool,
    /// A process living in it, through which it was read and a fix enters
    /// it (`nsenter -t`): kubelet where kubelet lives there, else its
    /// oldest process (a container's init), which outlives the others.
    pub member: u32,
    /// When the member started: a fix enters its namespace only once its
    /// pid is checked to name it still. None where it could not be read
    /// (and in records made before podstuck read it): no fix enters then.
    pub member_start: Option<crate::event::ProcessStart>,
    pub member_comm: String,
    /// The pod or container the member belongs to, where it is one's.
    pub owner: Option<Owner>,
    pub mounts: Vec<Mount>,
}

impl MountNamespace {
    /// "the host's mount namespace", "kubelet's mount namespace
    /// mnt:[4026532301] (docker container kindnode)".
    pub fn words(&self) -> String {
        if self.host {
            return "the host's mount namespace".into();
        }
        let owner = self.owner.as_ref().map(|o| format!(" ({})", o.words())).unwrap_or_default();
        match self.member_comm.as_str() {
            "kubelet" => format!("kubelet's mount namespace mnt:[{}]{owner}", self.mntns),
            comm => format!("mount namespace mnt:[{}] of pid {} ({comm}){owner}", self.mntns, self.member),
        }
    }
}

/// The pid that asks [`NodeInspector::resolved_path`] for the node's own
/// root (no process has pid 0).
pub const NODE_ROOT: u32 = 0;

/// What a namespace with no live process left is said as.
pub fn namespace_gone(mntns: u64) -> Unreadable {
    Unreadable::Gone(format!("no process is left in mount namespace mnt:[{mntns}], so its mounts cannot be read"))
}

/// A copy of a mount in another mount namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MountCopy {
    pub mntns: u64,
    /// One process living in that namespace (for `nsenter -t`).
    pub pid: u32,
    /// When it started (for the check before `nsenter -t`); None where
    /// it could not be read.
    pub start: Option<crate::event::ProcessStart>,
    pub comm: String,
    #[serde(serialize_with = "crate::words::serialize_path")]
    pub mount_point: Vec<u8>,
    /// The copy's optional mountinfo fields ("shared:12", "master:3"):
    /// whether unmounting the original reaches it.
    pub propagation: Vec<String>,
    /// The pod or container that process belongs to, where it is one's.
    pub owner: Option<Owner>,
}

/// A mount on a directory in another namespace than the one asked about
/// ([`NodeInspector::mounts_elsewhere`]): what a removal of that directory
/// would detach there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountElsewhere {
    /// The namespace it is mounted in, as [`MountNamespace`] says one (its
    /// table left out).
    pub namespace: MountNamespace,
    pub mount: Mount,
    /// Who holds it (in that namespace or through a copy of it).
    pub holders: Vec<MountHolder>,
}

impl MountElsewhere {
    /// "mounted in the host's mount namespace (tmpfs from tmpfs), in use by pid 42 (sleep)".
    pub fn words(&self) -> String {
        let held = match self.holders.first() {
            Some(h) => format!(", in use by pid {} ({})", h.pid, h.comm),
            None => String::new(),
        };
        format!("mounted in {} ({} from {}){held}", self.namespace.words(), self.mount.fstype, self.mount.source)
    }
}

/// `lsattr` flags that make a file undeletable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct InodeFlags {
    /// FS_IMMUTABLE_FL (`chattr +i`).
    pub immutable: bool,
    /// FS_APPEND_FL (`chattr +a`).
    pub append_only: bool,
    /// The whole FS_IOC_GETFLAGS word.
    pub raw: u32,
}

/// What `lstat` says of a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileFacts {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u64,
    pub size: u64,
    pub is_dir: bool,
    /// S_ISVTX: in a directory, only owners may remove entries.
    pub sticky: bool,
    pub dev: (u32, u32),
}

/// Some of a directory's entries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirSample {
    /// The first entries read ("." and ".." left out), at most the limit asked.
    pub names: Vec<Vec<u8>>,
    /// Entries counted (all of them when `complete`).
    pub counted: u64,
    pub complete: bool,
}

/// How many entries are left under a directory tree, and how that was found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryEstimate {
    pub entries: u64,
    /// The count is a lower bound (the walk was cut short).
    pub at_least: bool,
    /// "counted", "tmpfs directory size / 20", "link count": said to the user.
    pub method: String,
}

/// What `statfs` says of the filesystem under a path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsUsage {
    /// "tmpfs", "ext4", "overlay", "xfs", ... or the magic number in hex.
    pub fstype: String,
    pub total_bytes: u64,
    /// Available to unprivileged users (f_bavail).
    pub free_bytes: u64,
    pub total_inodes: u64,
    pub free_inodes: u64,
    /// ST_RDONLY.
    pub read_only: bool,
}

/// A task as /proc shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskState {
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
    /// The state letter of /proc/<tid>/stat: R, S, D, T, t, Z, I.
    pub state: char,
    /// Where in the kernel it waits (`/proc/<tid>/wchan`), when readable.
    pub wchan: Option<String>,
    /// `/proc/<tid>/stack` frames, when readable (root, and kernels that allow it).
    pub stack: Vec<String>,
}

/// State letter `state` in words, as `ps` and `/proc/<pid>/status` say
/// it: "D (uninterruptible sleep)".
pub fn state_words(state: char) -> &'static str {
    match state {
        'R' => "R (running)",
        'S' => "S (sleeping)",
        'D' => "D (uninterruptible sleep)",
        'T' => "T (stopped)",
        't' => "t (tracing stop)",
        'Z' => "Z (zombie)",
        'X' => "X (dead)",
        'I' => "I (idle)",
        _ => "? (unknown)",
    }
}

impl TaskState {
    /// "D (uninterruptible sleep)", as `ps` and `/proc/<pid>/status` say it.
    pub fn state_words(&self) -> &'static str {
        state_words(self.state)
    }

    /// Its state and what it waits in, where it waits: "D (uninterruptible
    /// sleep), waiting in io_schedule".
    pub fn waiting_words(&self) -> String {
        let wchan = self.wchan.as_ref().map(|w| format!(", waiting in {w}")).unwrap_or_default();
        format!("{}{wchan}", self.state_words())
    }
}

/// A process (a thread group) as /proc shows it: it is there as long as
/// one of its threads is, so a zombie leader whose other thread waits in
/// the kernel is a process still there (Go and Java programs always have
/// several threads).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessState {
    pub pid: u32,
    /// When it started (`starttime`, clock ticks since boot).
    pub start: u64,
    /// Its leader first, then its threads in D, then the others, at most
    /// [`THREADS_KEPT`]; only D threads and the leader have wchan and stack.
    pub threads: Vec<TaskState>,
    /// How many threads it has (`Threads:`), which may be more than kept.
    pub thread_count: u32,
    /// Its pid in its own PID namespace (the last of `NSpid:`): 1 for a
    /// container's init.
    pub ns_pid: Option<u32>,
    /// `SigIgn:` and `SigCgt:`: signals it ignores, signals it handles.
    pub sig_ignored: u64,
    pub sig_caught: u64,
    /// The mount namespace it lives in (`/proc/<pid>/ns/mnt`): where the
    /// mounts it can wait on are. None where it could not be read.
    pub mntns: Option<u64>,
}

/// Threads kept in a [`ProcessState`].
pub const THREADS_KEPT: usize = 16;

impl ProcessState {
    /// Whether every thread has exited (zombies, dead): its parent has
    /// only to reap it.
    pub fn ended(&self) -> bool {
        self.threads.iter().all(|t| matches!(t.state, 'Z' | 'X'))
    }

    /// The thread that keeps it there: one in D, else the first alive.
    pub fn stuck_thread(&self) -> Option<&TaskState> {
        let alive = |t: &&TaskState| !matches!(t.state, 'Z' | 'X');
        self.threads.iter().find(|t| t.state == 'D').or_else(|| self.threads.iter().find(alive))
    }

    pub fn leader(&self) -> Option<&TaskState> {
        self.threads.iter().find(|t| t.tid == self.pid)
    }

    /// Whether it set `sig` to SIG_IGN.
    pub fn ignores(&self, sig: i32) -> bool {
        sig > 0 && self.sig_ignored & (1 << (sig - 1)) != 0
    }

    /// Whether it has a handler for `sig`.
    pub fn handles(&self, sig: i32) -> bool {
        sig > 0 && self.sig_caught & (1 << (sig - 1)) != 0
    }
}

/// A cgroup directory as the kernel shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupState {
    /// 1 or 2.
    pub version: u8,
    /// Every task in it and below it (cgroup.procs / tasks, recursively).
    pub tasks: Vec<TaskState>,
    /// Child cgroup directory names.
    pub children: Vec<String>,
    /// `populated` from cgroup.events (v2).
    pub populated: Option<bool>,
    /// cgroup.freeze = 1 or `frozen 1` in cgroup.events (v2); freezer.state FROZEN (v1).
    pub frozen: Option<bool>,
    /// Whether cgroup.kill exists (v2, kernel 5.14+).
    pub has_kill: bool,
}

/// One cgroup of the v1 freezer hierarchy, as `freezer.state` says it.
/// On v1 the freezer is a hierarchy of its own: a pod's memory or pids
/// cgroup has no `freezer.state`, its twin under the freezer mount does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreezerLevel {
    /// The freezer cgroup's directory.
    pub dir: Vec<u8>,
    /// `FROZEN`, `FREEZING` or `THAWED`, as read.
    pub state: String,
    /// The processes it holds itself (its `cgroup.procs`): a frozen
    /// process shows in /proc as sleeping, so only this says it is frozen.
    pub pids: Vec<u32>,
}

impl FreezerLevel {
    /// FROZEN or on its way there: its tasks ignore SIGKILL until thawed.
    pub fn frozen(&self) -> bool {
        matches!(self.state.as_str(), "FROZEN" | "FREEZING")
    }
}

/// A loop device bound to a file, as sysfs shows it: kubelet attaches one
/// to each raw block volume it maps, over the bind mount of the device
/// file, so that the device cannot vanish while a pod uses it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LoopDevice {
    /// "loop7".
    pub name: String,
    /// Its device number.
    pub dev: (u32, u32),
    /// The file it is bound to (`/sys/block/<name>/loop/backing_file`), as
    /// the kernel names it.
    #[serde(serialize_with = "crate::words::serialize_path")]
    pub backing_file: Vec<u8>,
    /// LO_FLAGS_AUTOCLEAR: a detach was asked (`losetup -d`, LOOP_CLR_FD)
    /// while the device was in use, and waits for its last user to close it.
    pub autoclear: bool,
    /// The devices stacked on it (`/sys/block/<name>/holders`): device
    /// mapper (LVM), md.
    pub holders: Vec<BlockHolder>,
    /// The processes that have it open.
    pub openers: Vec<DeviceOpener>,
}

/// A block device stacked on another, holding it open.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BlockHolder {
    /// "dm-0", "md127".
    pub device: String,
    /// A device-mapper device's name (`/sys/block/dm-0/dm/name`, what
    /// `dmsetup` and LVM call it); None for md and others.
    pub mapper_name: Option<String>,
    /// Whether it is an md (software RAID) array.
    pub md: bool,
    /// The processes that have it open.
    pub openers: Vec<DeviceOpener>,
}

/// A process with a block device open.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeviceOpener {
    pub pid: u32,
    /// When it started, read with the open file (as `MountHolder::start`):
    /// a kill in a fix is checked against it. None where it could not be.
    pub start: Option<crate::event::ProcessStart>,
    pub comm: String,
    /// The file it has open, as it sees it (`/dev/loop7`).
    #[serde(serialize_with = "crate::words::serialize_path")]
    pub path: Vec<u8>,
    /// The pod or container it belongs to, where it is one's.
    pub owner: Option<Owner>,
}

impl BlockHolder {
    /// "dm-0 (vg-data)", "md127".
    pub fn words(&self) -> String {
        match &self.mapper_name {
            Some(name) => format!("{} ({name})", self.device),
            None => self.device.clone(),
        }
    }
}

/// A container's cgroup and the processes in it, as cgroupfs and /proc
/// show them: who started each tells a process the runtime exec'd into
/// the container (a preStop hook, a probe, `kubectl exec`: its parent is
/// outside the container, the runtime's) from the container's own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ContainerCgroup {
    /// The cgroup's directory, as the node names it.
    #[serde(serialize_with = "crate::words::serialize_path")]
    pub dir: Vec<u8>,
    /// Its processes (its `cgroup.procs` and its children's), oldest
    /// first, at most [`CONTAINER_PROCESSES_KEPT`].
    pub processes: Vec<ContainerProcess>,
    /// The pipes and FIFOs the runtime process that started the
    /// container's init (its parent: the shim, conmon) has open, as
    /// (device, inode), at most [`RUNTIME_PIPES_KEPT`]: the other ends of
    /// the container's and its execs' stdio, which the runtime copies
    /// until every writer has closed them.
    pub runtime_pipes: Vec<(u64, u64)>,
}

/// Pipes kept of a container's runtime process.
pub const RUNTIME_PIPES_KEPT: usize = 256;

/// Processes kept of one container.
pub const CONTAINER_PROCESSES_KEPT: usize = 64;

/// One process of a container's cgroup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ContainerProcess {
    pub pid: u32,
    /// When it started (`starttime`, clock ticks since boot): what a kill
    /// in a fix is checked against.
    pub start: u64,
    /// The same start on the wall clock, to the tick (what it is compared
    /// with: a deletion's time, as the API says it).
    pub started: std::time::SystemTime,
    pub ppid: u32,
    /// Its name: the workload's to choose, evidence only.
    pub comm: String,
    /// The state letter of /proc/<pid>/stat.
    pub state: char,
    /// Its parent is not in the container's cgroup: the runtime's shim or
    /// runc started it (an exec), or the container's init (its parent is
    /// the shim).
    pub parent_outside: bool,
    /// The pipes and FIFOs its stdin, stdout and stderr are (device,
    /// inode, as `stat` of `/proc/<pid>/fd/N` says without opening them).
    pub stdio_pipes: Vec<(u64, u64)>,
    /// Its command line (`/proc/<pid>/cmdline`), words cut to
    /// [`ARGV_WORD_MAX`], at most [`ARGV_KEPT`]: the process's own claim.
    pub argv: Vec<String>,
}

/// Words of a command line kept, and the longest kept whole.
pub const ARGV_KEPT: usize = 16;
pub const ARGV_WORD_MAX: usize = 256;

/// Makes [`NodeInspector`] of the table of questions.
macro_rules! inspector_of {
    ($(
        $(#[$doc:meta])*
        fn $method:ident($($arg:ident: $ty:ty => $owned:ty $(= $older:expr)?),*) -> $answer:ty as $variant:ident;
    )*) => {
        /// What detectors may ask of the node. Every answer is read when asked.
        /// Paths are absolute, as bytes, in the host's mount namespace. One
        /// method per question of [`questions`].
        pub trait NodeInspector {
            $(
                $(#[$doc])*
                fn $method(&mut self, $($arg: $ty),*) -> $answer;
            )*
            /// Tells the inspector a call on `path` hangs: it must not touch that
            /// mount again.
            fn avoid(&mut self, path: &[u8]);
        }
    };
}

questions::node_questions!(inspector_of);
