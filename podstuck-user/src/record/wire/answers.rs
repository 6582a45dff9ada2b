//! The shapes of the node's answers (and of the questions' arguments) in a
//! record, each its own struct beside the live type it is read into, with
//! the conversions both ways written out: a field renamed or added on a
//! live type (for `--json`, say) fails to compile here, or fails the
//! golden test in `tests`, instead of changing the record format unseen.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::containers::WireContainerCgroup;
use super::{at_most, Bytes};
use crate::event::ProcessStart;
use crate::identify::owner::Owner;
use crate::identify::pod::PodUid;
use crate::inspect::{
    BlockHolder, CgroupState, ContainerCgroup, DeviceOpener, DirSample, EntryEstimate, FileFacts, FreezerLevel,
    FsUsage, HoldKind, InodeFlags, LoopDevice, MapperDevice, MapperTarget, Mount, MountCopy, MountElsewhere,
    MountHolder, MountNamespace, Probe, ProcessState, TaskState, Unreadable,
};

/// A live value as a record keeps it: its wire shape, and back.
pub trait Recorded: Sized {
    type Wire: Serialize + DeserializeOwned;
    fn to_wire(&self) -> Self::Wire;
    /// The live value, or why the record's value cannot be one.
    fn from_wire(wire: Self::Wire) -> Result<Self, String>;
    /// The kind of the error it is (an answer that could not be read),
    /// written beside it: older podstucks read the words and leave it.
    fn error_kind(&self) -> Option<&'static str> {
        None
    }
    /// The value read, given the kind written beside it (None: a record
    /// older than kinds, whose words say it).
    fn with_error_kind(self, _kind: Option<&str>) -> Self {
        self
    }
}

/// Values whose wire shape is the value itself: numbers.
macro_rules! recorded_as_itself {
    ($($t:ty),*) => {$(
        impl Recorded for $t {
            type Wire = $t;
            fn to_wire(&self) -> $t {
                *self
            }
            fn from_wire(wire: $t) -> Result<$t, String> {
                Ok(wire)
            }
        }
    )*};
}

recorded_as_itself!(u32, u64);

/// Values whose wire shape is a struct of this room, by `From` both ways.
macro_rules! recorded_through {
    ($($live:ty => $wire:ty),*) => {$(
        impl Recorded for $live {
            type Wire = $wire;
            fn to_wire(&self) -> $wire {
                self.into()
            }
            fn from_wire(wire: $wire) -> Result<$live, String> {
                Ok(wire.into())
            }
        }
    )*};
}

recorded_through!(
    Mount => WireMount,
    MountHolder => WireHolder,
    MountCopy => WireCopy,
    InodeFlags => WireInodeFlags,
    FileFacts => WireFileFacts,
    DirSample => WireDirSample,
    EntryEstimate => WireEntryEstimate,
    FsUsage => WireFsUsage,
    CgroupState => WireCgroup,
    FreezerLevel => WireFreezerLevel,
    TaskState => WireTask,
    LoopDevice => WireLoopDevice,
    MapperDevice => WireMapperDevice,
    ContainerCgroup => WireContainerCgroup,
    ProcessState => WireProcess
);

/// A container id, as the runtimes write it (validated when read back).
impl Recorded for crate::pod::ContainerId {
    type Wire = crate::pod::ContainerId;
    fn to_wire(&self) -> crate::pod::ContainerId {
        self.clone()
    }
    fn from_wire(wire: crate::pod::ContainerId) -> Result<crate::pod::ContainerId, String> {
        Ok(wire)
    }
}

/// A count as the record keeps it: 64 bits on any machine.
impl Recorded for usize {
    type Wire = u64;
    fn to_wire(&self) -> u64 {
        *self as u64
    }
    fn from_wire(wire: u64) -> Result<usize, String> {
        usize::try_from(wire).map_err(|_| format!("{wire} is too large for this machine"))
    }
}

/// A path: text where it is UTF-8, else hex ([`Bytes`]).
impl Recorded for Vec<u8> {
    type Wire = Bytes<'static>;
    fn to_wire(&self) -> Bytes<'static> {
        Bytes(self.clone().into())
    }
    fn from_wire(wire: Bytes<'static>) -> Result<Vec<u8>, String> {
        Ok(wire.into_vec())
    }
}

impl<T: Recorded> Recorded for Vec<T> {
    type Wire = Vec<T::Wire>;
    fn to_wire(&self) -> Vec<T::Wire> {
        self.iter().map(T::to_wire).collect()
    }
    fn from_wire(wire: Vec<T::Wire>) -> Result<Vec<T>, String> {
        wire.into_iter().map(T::from_wire).collect()
    }
}

/// A fact that may be absent (a process gone): null in the record.
impl<T: Recorded> Recorded for Option<T> {
    type Wire = Option<T::Wire>;
    fn to_wire(&self) -> Option<T::Wire> {
        self.as_ref().map(T::to_wire)
    }
    fn from_wire(wire: Option<T::Wire>) -> Result<Option<T>, String> {
        wire.map(T::from_wire).transpose()
    }
}

/// What a node question returned: the fact, or why it could not be read,
/// in words (its kind is written beside the answer, where a podstuck
/// older than kinds does not look: it reads both ways).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireProbe<T> {
    Ok(T),
    Unreadable(String),
}

impl<T: Recorded> Recorded for Probe<T> {
    type Wire = WireProbe<T::Wire>;
    fn to_wire(&self) -> WireProbe<T::Wire> {
        match self {
            Ok(fact) => WireProbe::Ok(fact.to_wire()),
            Err(why) => WireProbe::Unreadable(why.why().to_string()),
        }
    }
    fn from_wire(wire: WireProbe<T::Wire>) -> Result<Probe<T>, String> {
        Ok(match wire {
            WireProbe::Ok(fact) => Ok(T::from_wire(fact)?),
            // Its kind comes from beside it; a record older than kinds
            // has its words alone, which said the kind.
            WireProbe::Unreadable(why) => Err(Unreadable::from_words(why)),
        })
    }
    fn error_kind(&self) -> Option<&'static str> {
        self.as_ref().err().map(Unreadable::kind)
    }
    fn with_error_kind(self, kind: Option<&str>) -> Probe<T> {
        match (self, kind) {
            (Err(why), Some(kind)) => {
                let words = why.why().to_string();
                // A kind a newer podstuck knows and this one does not: its words.
                Err(Unreadable::of_kind(kind, words).unwrap_or(why))
            }
            (read, _) => read,
        }
    }
}

/// A namespace's table. Its inode number is the question's argument, not
/// written again: read back as 0 here, the question sets it.
impl Recorded for MountNamespace {
    type Wire = WireNamespace;
    fn to_wire(&self) -> WireNamespace {
        let MountNamespace { mntns: _, host, member, member_start, member_comm, owner, mounts } = self;
        WireNamespace {
            host: *host,
            member: *member,
            member_start: member_start.map(|s| s.ticks()),
            member_comm: member_comm.clone(),
            owner: owner.as_ref().map(WireOwner::from),
            mounts: mounts.to_wire(),
        }
    }
    fn from_wire(wire: WireNamespace) -> Result<MountNamespace, String> {
        Ok(MountNamespace {
            mntns: 0,
            host: wire.host,
            member: wire.member,
            member_start: wire.member_start.map(ProcessStart),
            member_comm: wire.member_comm,
            owner: wire.owner.map(Owner::from),
            mounts: Recorded::from_wire(wire.mounts)?,
        })
    }
}

/// A mount on the same directory in another namespace: the namespace as
/// a table-less [`WireNamespace`] with its number, the mount, its holders.
impl Recorded for MountElsewhere {
    type Wire = WireElsewhere;
    fn to_wire(&self) -> WireElsewhere {
        let MountElsewhere { namespace, mount, holders } = self;
        WireElsewhere {
            mntns: namespace.mntns,
            namespace: namespace.to_wire(),
            mount: mount.into(),
            holders: holders.to_wire(),
        }
    }
    fn from_wire(wire: WireElsewhere) -> Result<MountElsewhere, String> {
        let mut namespace = MountNamespace::from_wire(wire.namespace)?;
        namespace.mntns = wire.mntns;
        Ok(MountElsewhere { namespace, mount: wire.mount.into(), holders: Recorded::from_wire(wire.holders)? })
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireElsewhere {
    mntns: u64,
    namespace: WireNamespace,
    mount: WireMount,
    holders: Vec<WireHolder>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireMount {
    id: u32,
    parent_id: u32,
    dev: (u32, u32),
    root: Bytes<'static>,
    mount_point: Bytes<'static>,
    options: String,
    propagation: Vec<String>,
    fstype: String,
    source: String,
    super_options: String,
}

impl From<&Mount> for WireMount {
    fn from(m: &Mount) -> WireMount {
        let Mount { id, parent_id, dev, root, mount_point, options, propagation, fstype, source, super_options } = m;
        WireMount {
            id: *id,
            parent_id: *parent_id,
            dev: *dev,
            root: root.to_wire(),
            mount_point: mount_point.to_wire(),
            options: options.clone(),
            propagation: propagation.clone(),
            fstype: fstype.clone(),
            source: source.clone(),
            super_options: super_options.clone(),
        }
    }
}

impl From<WireMount> for Mount {
    fn from(w: WireMount) -> Mount {
        Mount {
            id: w.id,
            parent_id: w.parent_id,
            dev: w.dev,
            root: w.root.into_vec(),
            mount_point: w.mount_point.into_vec(),
            options: w.options,
            propagation: w.propagation,
            fstype: w.fstype,
            source: w.source,
            super_options: w.super_options,
        }
    }
}

/// Who a process belongs to; every part absent when unknown.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireOwner {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pod_uid: Option<PodUid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pod_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pod_namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    container: Option<String>,
}

impl From<&Owner> for WireOwner {
    fn from(o: &Owner) -> WireOwner {
        let Owner { pod_uid, pod_name, pod_namespace, container } = o;
        WireOwner {
            pod_uid: pod_uid.clone(),
            pod_name: pod_name.clone(),
            pod_namespace: pod_namespace.clone(),
            container: container.clone(),
        }
    }
}

impl From<WireOwner> for Owner {
    fn from(w: WireOwner) -> Owner {
        Owner { pod_uid: w.pod_uid, pod_name: w.pod_name, pod_namespace: w.pod_namespace, container: w.container }
    }
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WireHoldKind {
    Cwd,
    Root,
    OpenFile,
    MappedFile,
}

impl From<HoldKind> for WireHoldKind {
    fn from(h: HoldKind) -> WireHoldKind {
        match h {
            HoldKind::Cwd => WireHoldKind::Cwd,
            HoldKind::Root => WireHoldKind::Root,
            HoldKind::OpenFile => WireHoldKind::OpenFile,
            HoldKind::MappedFile => WireHoldKind::MappedFile,
        }
    }
}

impl From<WireHoldKind> for HoldKind {
    fn from(h: WireHoldKind) -> HoldKind {
        match h {
            WireHoldKind::Cwd => HoldKind::Cwd,
            WireHoldKind::Root => HoldKind::Root,
            WireHoldKind::OpenFile => HoldKind::OpenFile,
            WireHoldKind::MappedFile => HoldKind::MappedFile,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireHolder {
    pid: u32,
    /// Absent from records made before podstuck read holders' starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    start: Option<u64>,
    comm: String,
    how: WireHoldKind,
    path: Bytes<'static>,
    mntns: u64,
    other_namespace: bool,
    /// Absent from records made before podstuck named holders' pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<WireOwner>,
}

impl From<&MountHolder> for WireHolder {
    fn from(h: &MountHolder) -> WireHolder {
        let MountHolder { pid, start, comm, how, path, mntns, other_namespace, owner } = h;
        WireHolder {
            pid: *pid,
            start: start.map(ProcessStart::ticks),
            comm: comm.clone(),
            how: (*how).into(),
            path: path.to_wire(),
            mntns: *mntns,
            other_namespace: *other_namespace,
            owner: owner.as_ref().map(WireOwner::from),
        }
    }
}

impl From<WireHolder> for MountHolder {
    fn from(w: WireHolder) -> MountHolder {
        MountHolder {
            pid: w.pid,
            start: w.start.map(ProcessStart),
            comm: w.comm,
            how: w.how.into(),
            path: w.path.into_vec(),
            mntns: w.mntns,
            other_namespace: w.other_namespace,
            owner: w.owner.map(Owner::from),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireNamespace {
    host: bool,
    member: u32,
    /// Absent from records made before podstuck read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    member_start: Option<u64>,
    member_comm: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<WireOwner>,
    mounts: Vec<WireMount>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireCopy {
    mntns: u64,
    pid: u32,
    /// Absent from records made before podstuck read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    start: Option<u64>,
    comm: String,
    mount_point: Bytes<'static>,
    /// Absent from records made before podstuck read it.
    #[serde(default)]
    propagation: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<WireOwner>,
}

impl From<&MountCopy> for WireCopy {
    fn from(c: &MountCopy) -> WireCopy {
        let MountCopy { mntns, pid, start, comm, mount_point, propagation, owner } = c;
        WireCopy {
            mntns: *mntns,
            pid: *pid,
            start: start.map(|s| s.ticks()),
            comm: comm.clone(),
            mount_point: mount_point.to_wire(),
            propagation: propagation.clone(),
            owner: owner.as_ref().map(WireOwner::from),
        }
    }
}

impl From<WireCopy> for MountCopy {
    fn from(w: WireCopy) -> MountCopy {
        MountCopy {
            mntns: w.mntns,
            pid: w.pid,
            start: w.start.map(ProcessStart),
            comm: w.comm,
            mount_point: w.mount_point.into_vec(),
            propagation: w.propagation,
            owner: w.owner.map(Owner::from),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireInodeFlags {
    immutable: bool,
    append_only: bool,
    raw: u32,
}

impl From<&InodeFlags> for WireInodeFlags {
    fn from(f: &InodeFlags) -> WireInodeFlags {
        let InodeFlags { immutable, append_only, raw } = *f;
        WireInodeFlags { immutable, append_only, raw }
    }
}

impl From<WireInodeFlags> for InodeFlags {
    fn from(w: WireInodeFlags) -> InodeFlags {
        InodeFlags { immutable: w.immutable, append_only: w.append_only, raw: w.raw }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireFileFacts {
    mode: u32,
    uid: u32,
    gid: u32,
    nlink: u64,
    size: u64,
    is_dir: bool,
    sticky: bool,
    dev: (u32, u32),
}

impl From<&FileFacts> for WireFileFacts {
    fn from(f: &FileFacts) -> WireFileFacts {
        let FileFacts { mode, uid, gid, nlink, size, is_dir, sticky, dev } = *f;
        WireFileFacts { mode, uid, gid, nlink, size, is_dir, sticky, dev }
    }
}

impl From<WireFileFacts> for FileFacts {
    fn from(w: WireFileFacts) -> FileFacts {
        let WireFileFacts { mode, uid, gid, nlink, size, is_dir, sticky, dev } = w;
        FileFacts { mode, uid, gid, nlink, size, is_dir, sticky, dev }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireDirSample {
    #[serde(deserialize_with = "at_most")]
    names: Vec<Bytes<'static>>,
    counted: u64,
    complete: bool,
}

impl From<&DirSample> for WireDirSample {
    fn from(s: &DirSample) -> WireDirSample {
        let DirSample { names, counted, complete } = s;
        WireDirSample { names: names.to_wire(), counted: *counted, complete: *complete }
    }
}

impl From<WireDirSample> for DirSample {
    fn from(w: WireDirSample) -> DirSample {
        DirSample {
            names: w.names.into_iter().map(Bytes::into_vec).collect(),
            counted: w.counted,
            complete: w.complete,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireEntryEstimate {
    entries: u64,
    at_least: bool,
    method: String,
}

impl From<&EntryEstimate> for WireEntryEstimate {
    fn from(e: &EntryEstimate) -> WireEntryEstimate {
        let EntryEstimate { entries, at_least, method } = e;
        WireEntryEstimate { entries: *entries, at_least: *at_least, method: method.clone() }
    }
}

impl From<WireEntryEstimate> for EntryEstimate {
    fn from(w: WireEntryEstimate) -> EntryEstimate {
        EntryEstimate { entries: w.entries, at_least: w.at_least, method: w.method }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireFsUsage {
    fstype: String,
    total_bytes: u64,
    free_bytes: u64,
    total_inodes: u64,
    free_inodes: u64,
    read_only: bool,
}

impl From<&FsUsage> for WireFsUsage {
    fn from(u: &FsUsage) -> WireFsUsage {
        let FsUsage { fstype, total_bytes, free_bytes, total_inodes, free_inodes, read_only } = u;
        WireFsUsage {
            fstype: fstype.clone(),
            total_bytes: *total_bytes,
            free_bytes: *free_bytes,
            total_inodes: *total_inodes,
            free_inodes: *free_inodes,
            read_only: *read_only,
        }
    }
}

impl From<WireFsUsage> for FsUsage {
    fn from(w: WireFsUsage) -> FsUsage {
        let WireFsUsage { fstype, total_bytes, free_bytes, total_inodes, free_inodes, read_only } = w;
        FsUsage { fstype, total_bytes, free_bytes, total_inodes, free_inodes, read_only }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireTask {
    tid: u32,
    pid: u32,
    comm: String,
    /// The state letter of /proc/<tid>/stat, as a one-letter string.
    state: char,
    wchan: Option<String>,
    stack: Vec<String>,
}

impl From<&TaskState> for WireTask {
    fn from(t: &TaskState) -> WireTask {
        let TaskState { tid, pid, comm, state, wchan, stack } = t;
        WireTask { tid: *tid, pid: *pid, comm: comm.clone(), state: *state, wchan: wchan.clone(), stack: stack.clone() }
    }
}

impl From<WireTask> for TaskState {
    fn from(w: WireTask) -> TaskState {
        let WireTask { tid, pid, comm, state, wchan, stack } = w;
        TaskState { tid, pid, comm, state, wchan, stack }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireProcess {
    pid: u32,
    start: u64,
    threads: Vec<WireTask>,
    thread_count: u32,
    ns_pid: Option<u32>,
    sig_ignored: u64,
    sig_caught: u64,
    /// Absent from records made before podstuck read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mntns: Option<u64>,
}

impl From<&ProcessState> for WireProcess {
    fn from(p: &ProcessState) -> WireProcess {
        let ProcessState { pid, start, threads, thread_count, ns_pid, sig_ignored, sig_caught, mntns } = p;
        WireProcess {
            pid: *pid,
            start: *start,
            threads: threads.iter().map(WireTask::from).collect(),
            thread_count: *thread_count,
            ns_pid: *ns_pid,
            sig_ignored: *sig_ignored,
            sig_caught: *sig_caught,
            mntns: *mntns,
        }
    }
}

impl From<WireProcess> for ProcessState {
    fn from(w: WireProcess) -> ProcessState {
        let WireProcess { pid, start, threads, thread_count, ns_pid, sig_ignored, sig_caught, mntns } = w;
        ProcessState {
            pid,
            start,
            threads: threads.into_iter().map(TaskState::from).collect(),
            thread_count,
            ns_pid,
            sig_ignored,
            sig_caught,
            mntns,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireCgroup {
    version: u8,
    tasks: Vec<WireTask>,
    children: Vec<String>,
    populated: Option<bool>,
    frozen: Option<bool>,
    has_kill: bool,
}

impl From<&CgroupState> for WireCgroup {
    fn from(c: &CgroupState) -> WireCgroup {
        let CgroupState { version, tasks, children, populated, frozen, has_kill } = c;
        WireCgroup {
            version: *version,
            tasks: tasks.to_wire(),
            children: children.clone(),
            populated: *populated,
            frozen: *frozen,
            has_kill: *has_kill,
        }
    }
}

impl From<WireCgroup> for CgroupState {
    fn from(w: WireCgroup) -> CgroupState {
        CgroupState {
            version: w.version,
            tasks: w.tasks.into_iter().map(TaskState::from).collect(),
            children: w.children,
            populated: w.populated,
            frozen: w.frozen,
            has_kill: w.has_kill,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireFreezerLevel {
    /// The directory's bytes, as a list of numbers.
    dir: Vec<u8>,
    state: String,
    pids: Vec<u32>,
}

impl From<&FreezerLevel> for WireFreezerLevel {
    fn from(l: &FreezerLevel) -> WireFreezerLevel {
        let FreezerLevel { dir, state, pids } = l;
        WireFreezerLevel { dir: dir.clone(), state: state.clone(), pids: pids.clone() }
    }
}

impl From<WireFreezerLevel> for FreezerLevel {
    fn from(w: WireFreezerLevel) -> FreezerLevel {
        FreezerLevel { dir: w.dir, state: w.state, pids: w.pids }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireLoopDevice {
    name: String,
    dev: (u32, u32),
    backing_file: Bytes<'static>,
    autoclear: bool,
    holders: Vec<WireBlockHolder>,
    openers: Vec<WireOpener>,
}

impl From<&LoopDevice> for WireLoopDevice {
    fn from(l: &LoopDevice) -> WireLoopDevice {
        let LoopDevice { name, dev, backing_file, autoclear, holders, openers } = l;
        WireLoopDevice {
            name: name.clone(),
            dev: *dev,
            backing_file: backing_file.to_wire(),
            autoclear: *autoclear,
            holders: holders.iter().map(WireBlockHolder::from).collect(),
            openers: openers.iter().map(WireOpener::from).collect(),
        }
    }
}

impl From<WireLoopDevice> for LoopDevice {
    fn from(w: WireLoopDevice) -> LoopDevice {
        LoopDevice {
            name: w.name,
            dev: w.dev,
            backing_file: w.backing_file.into_vec(),
            autoclear: w.autoclear,
            holders: w.holders.into_iter().map(BlockHolder::from).collect(),
            openers: w.openers.into_iter().map(DeviceOpener::from).collect(),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireMapperDevice {
    device: String,
    dev: (u32, u32),
    name: String,
    uuid: String,
    slaves: Vec<(String, (u32, u32))>,
    holders: Vec<WireBlockHolder>,
    /// Each target's type, table line and status line.
    targets: Vec<(String, String, String)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    table_unread: Option<String>,
}

impl From<&MapperDevice> for WireMapperDevice {
    fn from(m: &MapperDevice) -> WireMapperDevice {
        let MapperDevice { device, dev, name, uuid, slaves, holders, targets, table_unread } = m;
        WireMapperDevice {
            device: device.clone(),
            dev: *dev,
            name: name.clone(),
            uuid: uuid.clone(),
            slaves: slaves.clone(),
            holders: holders.iter().map(WireBlockHolder::from).collect(),
            targets: targets.iter().map(|t| (t.kind.clone(), t.table.clone(), t.status.clone())).collect(),
            table_unread: table_unread.clone(),
        }
    }
}

impl From<WireMapperDevice> for MapperDevice {
    fn from(w: WireMapperDevice) -> MapperDevice {
        MapperDevice {
            device: w.device,
            dev: w.dev,
            name: w.name,
            uuid: w.uuid,
            slaves: w.slaves,
            holders: w.holders.into_iter().map(BlockHolder::from).collect(),
            targets: w.targets.into_iter().map(|(kind, table, status)| MapperTarget { kind, table, status }).collect(),
            table_unread: w.table_unread,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireBlockHolder {
    device: String,
    mapper_name: Option<String>,
    md: bool,
    openers: Vec<WireOpener>,
}

impl From<&BlockHolder> for WireBlockHolder {
    fn from(h: &BlockHolder) -> WireBlockHolder {
        let BlockHolder { device, mapper_name, md, openers } = h;
        WireBlockHolder {
            device: device.clone(),
            mapper_name: mapper_name.clone(),
            md: *md,
            openers: openers.iter().map(WireOpener::from).collect(),
        }
    }
}

impl From<WireBlockHolder> for BlockHolder {
    fn from(w: WireBlockHolder) -> BlockHolder {
        BlockHolder {
            device: w.device,
            mapper_name: w.mapper_name,
            md: w.md,
            openers: w.openers.into_iter().map(DeviceOpener::from).collect(),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireOpener {
    pid: u32,
    /// Absent where it could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    start: Option<u64>,
    comm: String,
    path: Bytes<'static>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<WireOwner>,
}

impl From<&DeviceOpener> for WireOpener {
    fn from(o: &DeviceOpener) -> WireOpener {
        let DeviceOpener { pid, start, comm, path, owner } = o;
        WireOpener {
            pid: *pid,
            start: start.map(ProcessStart::ticks),
            comm: comm.clone(),
            path: path.to_wire(),
            owner: owner.as_ref().map(WireOwner::from),
        }
    }
}

impl From<WireOpener> for DeviceOpener {
    fn from(w: WireOpener) -> DeviceOpener {
        DeviceOpener {
            pid: w.pid,
            start: w.start.map(ProcessStart),
            comm: w.comm,
            path: w.path.into_vec(),
            owner: w.owner.map(Owner::from),
        }
    }
}
