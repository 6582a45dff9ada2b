//! The shapes of the calls a record holds: each call with what identify
//! said of it, the calls in flight at a review, the process lifecycle's
//! events. Each borrows from the live values when written.

use std::borrow::Cow;

use podstuck_common::{PluginFile, Syscall};
use serde::{Deserialize, Serialize};

use super::{nanos, time, Bytes};
use crate::diagnose::CallInFlight;
use crate::event::{BaseDir, CallEvent, Flight, NoPath, PathStatus, ProcessStart, AT_FDCWD};
use crate::identify::actor::Role;
use crate::identify::kubelet_connect::CsiVolume;
use crate::identify::path_proof::{PathProof, Unproven};
use crate::identify::pod::{ContainerId, PathArea, PodUid};
use crate::identify::target::{Target, Targets};
use crate::identify::LifecycleIdentity;
use crate::identify::{Actor, Identity, MatchReason};
use crate::lifecycle::{CniRun, ConnectFailed, Lifecycle, LifecycleEvent, PluginWrote, SignalResult, SignalSent};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WireSyscall {
    Unlinkat,
    Unlink,
    Rmdir,
    Umount2,
}

impl From<Syscall> for WireSyscall {
    fn from(s: Syscall) -> WireSyscall {
        match s {
            Syscall::Unlinkat => WireSyscall::Unlinkat,
            Syscall::Unlink => WireSyscall::Unlink,
            Syscall::Rmdir => WireSyscall::Rmdir,
            Syscall::Umount2 => WireSyscall::Umount2,
        }
    }
}

impl From<WireSyscall> for Syscall {
    fn from(s: WireSyscall) -> Syscall {
        match s {
            WireSyscall::Unlinkat => Syscall::Unlinkat,
            WireSyscall::Unlink => Syscall::Unlink,
            WireSyscall::Rmdir => Syscall::Rmdir,
            WireSyscall::Umount2 => Syscall::Umount2,
        }
    }
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum WirePathStatus {
    Whole,
    TooLong,
    Unreadable,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum WireBase<'a> {
    NotNeeded,
    Resolved(Bytes<'a>),
    Unresolved(Cow<'a, str>),
}

#[derive(Debug, Serialize, Deserialize)]
struct WireEvent<'a> {
    time: u64,
    pid: u32,
    tid: u32,
    comm: Cow<'a, str>,
    ppid: u32,
    pcomm: Cow<'a, str>,
    cgroup_id: u64,
    /// Absent when 0 (v2-only nodes, and records made before podstuck read it).
    #[serde(default, skip_serializing_if = "is_zero")]
    v1_cgroup_id: u64,
    /// Which v1 hierarchy of the run's it is of; absent when the first
    /// (and in records made before podstuck read more than one).
    #[serde(default, skip_serializing_if = "is_first")]
    v1_hierarchy: u8,
    mntns: u32,
    uid: u32,
    syscall: WireSyscall,
    flags: u64,
    dfd: i32,
    path: Bytes<'a>,
    path_status: WirePathStatus,
    base: WireBase<'a>,
    ret: i64,
    latency_ns: u64,
    /// Absent when 1 (every call of an older record, most calls of a new one).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    represents: u64,
}

fn one() -> u64 {
    1
}

fn is_one(n: &u64) -> bool {
    *n == 1
}

pub(super) fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_first(n: &u8) -> bool {
    *n == 0
}

impl<'a> WireEvent<'a> {
    fn of(e: &'a CallEvent) -> WireEvent<'a> {
        // Destructured so that a field added to CallEvent fails to compile
        // here until the record format says what to do with it.
        let CallEvent {
            time,
            pid,
            tid,
            comm,
            ppid,
            pcomm,
            cgroup_id,
            v1_cgroup_id,
            v1_hierarchy,
            mntns,
            uid,
            syscall,
            flags,
            dfd,
            path,
            path_status,
            base,
            ret,
            latency_ns,
            represents,
        } = e;
        WireEvent {
            time: nanos(*time),
            pid: *pid,
            tid: *tid,
            comm: Cow::Borrowed(comm),
            ppid: *ppid,
            pcomm: Cow::Borrowed(pcomm),
            cgroup_id: *cgroup_id,
            v1_cgroup_id: *v1_cgroup_id,
            v1_hierarchy: *v1_hierarchy,
            mntns: *mntns,
            uid: *uid,
            syscall: (*syscall).into(),
            flags: *flags,
            dfd: *dfd,
            path: Bytes::of(path),
            path_status: match path_status {
                PathStatus::Whole => WirePathStatus::Whole,
                PathStatus::TooLong => WirePathStatus::TooLong,
                PathStatus::Unreadable => WirePathStatus::Unreadable,
            },
            base: match base {
                BaseDir::NotNeeded => WireBase::NotNeeded,
                BaseDir::Resolved(dir) => WireBase::Resolved(Bytes::of(dir)),
                BaseDir::Unresolved(why) => WireBase::Unresolved(Cow::Borrowed(why.as_str())),
            },
            ret: *ret,
            latency_ns: *latency_ns,
            represents: *represents,
        }
    }

    fn into_event(self) -> CallEvent {
        CallEvent {
            time: time(self.time),
            pid: self.pid,
            tid: self.tid,
            comm: self.comm.into_owned(),
            ppid: self.ppid,
            pcomm: self.pcomm.into_owned(),
            cgroup_id: self.cgroup_id,
            v1_cgroup_id: self.v1_cgroup_id,
            v1_hierarchy: self.v1_hierarchy,
            mntns: self.mntns,
            uid: self.uid,
            syscall: self.syscall.into(),
            flags: self.flags,
            dfd: self.dfd,
            path: self.path.into_vec(),
            path_status: match self.path_status {
                WirePathStatus::Whole => PathStatus::Whole,
                WirePathStatus::TooLong => PathStatus::TooLong,
                WirePathStatus::Unreadable => PathStatus::Unreadable,
            },
            base: match self.base {
                WireBase::NotNeeded => BaseDir::NotNeeded,
                WireBase::Resolved(dir) => BaseDir::Resolved(dir.into_vec()),
                WireBase::Unresolved(why) => BaseDir::Unresolved(NoPath::from_text(&why)),
            },
            ret: self.ret,
            latency_ns: self.latency_ns,
            represents: self.represents,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct WireIdentity<'a> {
    /// At most one of `abs_path` and `abs_path_error`; neither when the
    /// absolute path is the path argument itself, as it mostly is (a
    /// removal storm's record is a seventh smaller so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    abs_path: Option<Bytes<'a>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    abs_path_error: Option<Cow<'a, str>>,
    pod_uid: Option<Cow<'a, PodUid>>,
    path_area: Option<PathArea>,
    /// Only where it is not what the path alone says (a cgroup
    /// filesystem mounted elsewhere, a claim's path), and absent from
    /// records made before targets were classified: read as the path says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    target: Option<Target>,
    container_id: Option<Cow<'a, ContainerId>>,
    actor: WireActor<'a>,
    matched: Cow<'a, [MatchReason]>,
    /// Absent from records made before podstuck proved paths.
    #[serde(default = "WireProof::unrecorded")]
    proof: WireProof,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    claimed_pod: Option<Cow<'a, PodUid>>,
}

/// How far a call's path speaks for the node, as a record keeps it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "is", rename_all = "kebab-case")]
enum WireProof {
    NodeNamespace,
    RuntimeNamespace { mntns: u32, runtime: String },
    NodeDirectory { mntns: u32 },
    OutsidePods,
    Claim { why: WireUnproven },
    Unrecorded,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum WireUnproven {
    NamespaceUnknown,
    NamespaceGone,
    TableUnreadable,
    NotTheNodesDirectory,
    NoPath,
}

impl WireProof {
    fn unrecorded() -> WireProof {
        WireProof::Unrecorded
    }

    fn of(proof: &PathProof) -> WireProof {
        match proof {
            PathProof::NodeNamespace => WireProof::NodeNamespace,
            PathProof::RuntimeNamespace { mntns, runtime } => {
                WireProof::RuntimeNamespace { mntns: *mntns, runtime: runtime.clone() }
            }
            PathProof::NodeDirectory { mntns } => WireProof::NodeDirectory { mntns: *mntns },
            PathProof::OutsidePods => WireProof::OutsidePods,
            PathProof::Claim { why } => WireProof::Claim {
                why: match why {
                    Unproven::NamespaceUnknown => WireUnproven::NamespaceUnknown,
                    Unproven::NamespaceGone => WireUnproven::NamespaceGone,
                    Unproven::TableUnreadable => WireUnproven::TableUnreadable,
                    Unproven::NotTheNodes => WireUnproven::NotTheNodesDirectory,
                    Unproven::NoPath => WireUnproven::NoPath,
                },
            },
            PathProof::Unrecorded => WireProof::Unrecorded,
        }
    }

    fn into_proof(self) -> PathProof {
        match self {
            WireProof::NodeNamespace => PathProof::NodeNamespace,
            WireProof::RuntimeNamespace { mntns, runtime } => PathProof::RuntimeNamespace { mntns, runtime },
            WireProof::NodeDirectory { mntns } => PathProof::NodeDirectory { mntns },
            WireProof::OutsidePods => PathProof::OutsidePods,
            WireProof::Claim { why } => PathProof::claim(match why {
                WireUnproven::NamespaceUnknown => Unproven::NamespaceUnknown,
                WireUnproven::NamespaceGone => Unproven::NamespaceGone,
                WireUnproven::TableUnreadable => Unproven::TableUnreadable,
                WireUnproven::NotTheNodesDirectory => Unproven::NotTheNodes,
                WireUnproven::NoPath => Unproven::NoPath,
            }),
            WireProof::Unrecorded => PathProof::Unrecorded,
        }
    }
}

impl<'a> WireIdentity<'a> {
    fn of(i: &'a Identity, argument: &[u8]) -> WireIdentity<'a> {
        let Identity { abs_path, pod_uid, path_area, target, container_id, actor, matched, proof, claimed_pod } = i;
        let said = target_said(abs_path.as_deref().ok(), *path_area, proof);
        let (abs_path, abs_path_error) = match abs_path {
            Ok(path) if path == argument => (None, None),
            Ok(path) => (Some(Bytes::of(path)), None),
            Err(why) => (None, Some(Cow::Borrowed(why.as_str()))),
        };
        WireIdentity {
            abs_path,
            abs_path_error,
            pod_uid: pod_uid.as_ref().map(Cow::Borrowed),
            path_area: *path_area,
            target: (said != *target).then_some(*target),
            container_id: container_id.as_ref().map(Cow::Borrowed),
            actor: WireActor::of(actor),
            matched: Cow::Borrowed(matched),
            proof: WireProof::of(proof),
            claimed_pod: claimed_pod.as_ref().map(Cow::Borrowed),
        }
    }

    fn into_identity(self, argument: &[u8]) -> Result<Identity, String> {
        let abs_path = match (self.abs_path, self.abs_path_error) {
            (Some(path), None) => Ok(path.into_vec()),
            (None, Some(why)) => Err(NoPath::from_text(&why)),
            (None, None) => Ok(argument.to_vec()),
            (Some(_), Some(_)) => return Err("an identity holds both abs_path and abs_path_error".into()),
        };
        let proof = self.proof.into_proof();
        let target = self.target.unwrap_or_else(|| target_said(abs_path.as_deref().ok(), self.path_area, &proof));
        Ok(Identity {
            abs_path,
            pod_uid: self.pod_uid.map(Cow::into_owned),
            path_area: self.path_area,
            target,
            container_id: self.container_id.map(Cow::into_owned),
            actor: self.actor.into_actor(),
            matched: self.matched.into_owned(),
            proof,
            claimed_pod: self.claimed_pod.map(Cow::into_owned),
        })
    }
}

/// The target a call's path and area say without the node's mount table:
/// what a record leaves out.
fn target_said(path: Option<&[u8]>, area: Option<PathArea>, proof: &PathProof) -> Target {
    match path {
        Some(path) if proof.proven() => Targets::default().of(path, area),
        _ => Target::Other,
    }
}

/// One call the diagnosis saw, with what identify said of it.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireCall<'a> {
    event: WireEvent<'a>,
    identity: WireIdentity<'a>,
}

impl<'a> WireCall<'a> {
    pub fn of(event: &'a CallEvent, identity: &'a Identity) -> WireCall<'a> {
        WireCall { event: WireEvent::of(event), identity: WireIdentity::of(identity, &event.path) }
    }

    pub fn into_call(self) -> Result<(CallEvent, Identity), String> {
        let event = self.event.into_event();
        let identity = self.identity.into_identity(&event.path)?;
        Ok((event, identity))
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireFlight<'a> {
    tid: u32,
    pid: u32,
    syscall: WireSyscall,
    flags: u64,
    started: u64,
    path: Option<Bytes<'a>>,
    pod_uid: Option<Cow<'a, PodUid>>,
    actor: WireActor<'a>,
    /// Absent from records made before podstuck read it: 0, unknown.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    mntns: u32,
    /// Absent from records made before podstuck proved paths.
    #[serde(default = "WireProof::unrecorded")]
    proof: WireProof,
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

impl<'a> WireFlight<'a> {
    pub fn of(c: &'a CallInFlight) -> WireFlight<'a> {
        let CallInFlight { flight, path, pod_uid, actor, mntns, proof } = c;
        WireFlight {
            tid: flight.tid,
            pid: flight.pid,
            syscall: flight.syscall.into(),
            flags: flight.flags,
            started: nanos(flight.started),
            path: path.as_deref().map(Bytes::of),
            pod_uid: pod_uid.as_ref().map(Cow::Borrowed),
            actor: WireActor::of(actor),
            mntns: *mntns,
            proof: WireProof::of(proof),
        }
    }

    /// The call as the live run's diagnosis saw it. The record keeps the
    /// absolute path, which the detectors read, and not the argument as
    /// passed: the call is given that path as its argument, which names
    /// the same file.
    pub fn into_flight(self) -> CallInFlight {
        let path = self.path.map(Bytes::into_vec);
        let flight = Flight {
            tid: self.tid,
            pid: self.pid,
            syscall: self.syscall.into(),
            flags: self.flags,
            dfd: AT_FDCWD,
            started: time(self.started),
            path: path.clone(),
        };
        CallInFlight {
            flight,
            path,
            pod_uid: self.pod_uid.map(Cow::into_owned),
            actor: self.actor.into_actor(),
            mntns: self.mntns,
            proof: self.proof.into_proof(),
        }
    }
}

/// A lifecycle event the diagnosis saw, with who and which pod it is about.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireLifecycle<'a> {
    time: u64,
    pid: u32,
    /// When the process started (clock ticks since boot); absent in
    /// records of podstuck before 0.2, and where the kernel could not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    start: Option<u64>,
    ppid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parent_start: Option<u64>,
    comm: Cow<'a, str>,
    cgroup_id: u64,
    #[serde(default)]
    v1_cgroup_id: u64,
    /// As a call's: absent when the first.
    #[serde(default, skip_serializing_if = "is_first")]
    v1_hierarchy: u8,
    what: WireWhat<'a>,
    pod_uid: Option<Cow<'a, PodUid>>,
    actor: WireActor<'a>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sender_pod: Option<Cow<'a, PodUid>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    target_start: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    runner: Option<Cow<'a, str>>,
    /// A failing connect of kubelet's: the CSI volumes it keeps.
    #[serde(default, skip_serializing_if = "<[_]>::is_empty")]
    csi_volumes: Cow<'a, [CsiVolume]>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum WireWhat<'a> {
    Exec {
        filename: Bytes<'a>,
        cni: Option<WireCni<'a>>,
        #[serde(default)]
        file_ino: u64,
        #[serde(default)]
        file_dev: u32,
        #[serde(default)]
        mntns: u32,
        #[serde(default)]
        env_cut: bool,
    },
    /// `status` null: the kernel could not read it (lockdown).
    Exit {
        status: Option<i32>,
        #[serde(default)]
        last_thread: bool,
    },
    Signal {
        sig: i32,
        result: i32,
        target_pid: u32,
        target_comm: Cow<'a, str>,
        group: bool,
        /// Absent: not read (lockdown), or a record of an older podstuck.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        group_exiting: Option<bool>,
    },
    ConnectFailed {
        socket: Bytes<'a>,
        errno: i32,
        #[serde(default)]
        mntns: u32,
    },
    PluginWrote {
        bytes: Bytes<'a>,
        total: u32,
    },
}

#[derive(Debug, Serialize, Deserialize)]
struct WireCni<'a> {
    command: Cow<'a, str>,
    container_id: Cow<'a, str>,
    netns: Cow<'a, str>,
    ifname: Cow<'a, str>,
    pod_uid: Option<Cow<'a, PodUid>>,
    pod_namespace: Cow<'a, str>,
    pod_name: Cow<'a, str>,
}

impl<'a> WireLifecycle<'a> {
    pub fn of(e: &'a LifecycleEvent, identity: &'a LifecycleIdentity) -> WireLifecycle<'a> {
        let what = match &e.what {
            Lifecycle::Exec { filename, cni, file, mntns, env_cut } => WireWhat::Exec {
                filename: Bytes::of(filename),
                file_ino: file.ino,
                file_dev: file.dev,
                mntns: *mntns,
                env_cut: *env_cut,
                cni: cni.as_ref().map(|c| WireCni {
                    command: Cow::Borrowed(&c.command),
                    container_id: Cow::Borrowed(&c.container_id),
                    netns: Cow::Borrowed(&c.netns),
                    ifname: Cow::Borrowed(&c.ifname),
                    pod_uid: c.pod_uid.as_ref().map(Cow::Borrowed),
                    pod_namespace: Cow::Borrowed(&c.pod_namespace),
                    pod_name: Cow::Borrowed(&c.pod_name),
                }),
            },
            Lifecycle::Exit { status, last_thread } => WireWhat::Exit { status: *status, last_thread: *last_thread },
            Lifecycle::Signal(s) => WireWhat::Signal {
                sig: s.sig,
                result: s.result.code(),
                target_pid: s.target_pid,
                target_comm: Cow::Borrowed(&s.target_comm),
                group: s.group,
                group_exiting: s.group_exiting,
            },
            Lifecycle::ConnectFailed(c) => {
                WireWhat::ConnectFailed { socket: Bytes::of(&c.socket), errno: c.errno, mntns: c.mntns }
            }
            Lifecycle::PluginWrote(w) => WireWhat::PluginWrote { bytes: Bytes::of(&w.bytes), total: w.total },
        };
        WireLifecycle {
            time: nanos(e.time),
            pid: e.pid,
            start: e.start.map(ProcessStart::ticks),
            ppid: e.ppid,
            parent_start: e.parent_start.map(ProcessStart::ticks),
            comm: Cow::Borrowed(&e.comm),
            cgroup_id: e.cgroup_id,
            v1_cgroup_id: e.v1_cgroup_id,
            v1_hierarchy: e.v1_hierarchy,
            what,
            pod_uid: identity.pod_uid.as_ref().map(Cow::Borrowed),
            actor: WireActor::of(&identity.actor),
            sender_pod: identity.sender_pod.as_ref().map(Cow::Borrowed),
            target_start: identity.target_start.map(ProcessStart::ticks),
            runner: identity.runner.as_deref().map(Cow::Borrowed),
            csi_volumes: Cow::Borrowed(&identity.csi_volumes),
        }
    }

    pub fn into_lifecycle(self) -> (LifecycleEvent, LifecycleIdentity) {
        let what = match self.what {
            WireWhat::Exec { filename, cni, file_ino, file_dev, mntns, env_cut } => Lifecycle::Exec {
                filename: filename.into_vec(),
                file: PluginFile { ino: file_ino, dev: file_dev, _pad: 0 },
                mntns,
                env_cut,
                cni: cni.map(|c| CniRun {
                    command: c.command.into_owned(),
                    container_id: c.container_id.into_owned(),
                    netns: c.netns.into_owned(),
                    ifname: c.ifname.into_owned(),
                    pod_uid: c.pod_uid.map(Cow::into_owned),
                    pod_namespace: c.pod_namespace.into_owned(),
                    pod_name: c.pod_name.into_owned(),
                }),
            },
            WireWhat::Exit { status, last_thread } => Lifecycle::Exit { status, last_thread },
            WireWhat::Signal { sig, result, target_pid, target_comm, group, group_exiting } => {
                Lifecycle::Signal(SignalSent {
                    sig,
                    result: SignalResult::of(result),
                    target_pid,
                    target_comm: target_comm.into_owned(),
                    group,
                    group_exiting,
                })
            }
            WireWhat::ConnectFailed { socket, errno, mntns } => {
                Lifecycle::ConnectFailed(ConnectFailed { socket: socket.into_vec(), errno, mntns })
            }
            WireWhat::PluginWrote { bytes, total } => {
                Lifecycle::PluginWrote(PluginWrote { bytes: bytes.into_vec(), total })
            }
        };
        let event = LifecycleEvent {
            time: time(self.time),
            pid: self.pid,
            start: self.start.map(ProcessStart),
            ppid: self.ppid,
            parent_start: self.parent_start.map(ProcessStart),
            comm: self.comm.into_owned(),
            cgroup_id: self.cgroup_id,
            v1_cgroup_id: self.v1_cgroup_id,
            v1_hierarchy: self.v1_hierarchy,
            what,
        };
        let mut identity = LifecycleIdentity::of(self.pod_uid.map(Cow::into_owned), self.actor.into_actor());
        identity.sender_pod = self.sender_pod.map(Cow::into_owned);
        identity.target_start = self.target_start.map(ProcessStart);
        identity.runner = self.runner.map(Cow::into_owned);
        identity.csi_volumes = self.csi_volumes.into_owned();
        (event, identity)
    }
}

/// Who made a call, as the record keeps it (apart from `Actor`, which
/// `--json` prints).
#[derive(Debug, Serialize, Deserialize)]
struct WireActor<'a> {
    comm: Cow<'a, str>,
    exe: Option<Cow<'a, str>>,
    parent: Cow<'a, str>,
    role: WireRole,
    description: Cow<'a, str>,
}

impl<'a> WireActor<'a> {
    fn of(a: &'a Actor) -> WireActor<'a> {
        let Actor { comm, exe, parent, role, description } = a;
        WireActor {
            comm: Cow::Borrowed(comm),
            exe: exe.as_deref().map(Cow::Borrowed),
            parent: Cow::Borrowed(parent),
            role: (*role).into(),
            description: Cow::Borrowed(description),
        }
    }

    fn into_actor(self) -> Actor {
        Actor {
            comm: self.comm.into_owned(),
            exe: self.exe.map(Cow::into_owned),
            parent: self.parent.into_owned(),
            role: self.role.into(),
            description: self.description.into_owned(),
        }
    }
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum WireRole {
    Kubelet,
    Runtime,
    Shim,
    Runc,
    CsiPlugin,
    Systemd,
    Other,
}

impl From<Role> for WireRole {
    fn from(r: Role) -> WireRole {
        match r {
            Role::Kubelet => WireRole::Kubelet,
            Role::Runtime => WireRole::Runtime,
            Role::Shim => WireRole::Shim,
            Role::Runc => WireRole::Runc,
            Role::CsiPlugin => WireRole::CsiPlugin,
            Role::Systemd => WireRole::Systemd,
            Role::Other => WireRole::Other,
        }
    }
}

impl From<WireRole> for Role {
    fn from(r: WireRole) -> Role {
        match r {
            WireRole::Kubelet => Role::Kubelet,
            WireRole::Runtime => Role::Runtime,
            WireRole::Shim => Role::Shim,
            WireRole::Runc => Role::Runc,
            WireRole::CsiPlugin => Role::CsiPlugin,
            WireRole::Systemd => Role::Systemd,
            WireRole::Other => Role::Other,
        }
    }
}
