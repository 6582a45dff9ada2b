//! The JSON shapes of a record's lines, written down here rather than
//! derived from the types the live run uses, because a record outlives the
//! podstuck that wrote it: a field renamed for the output, or a path that
//! the output writes lossily, must not change what an older record means.
//! Every shape here is part of format 1 (see the golden test in `tests`).
//!
//! Each shape borrows from the live values when written (`Cow::Borrowed`,
//! no copies on the hot path of a removal storm) and owns what it reads.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use podstuck_common::Syscall;
use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::diagnose::{CallInFlight, CountedCalls};
use crate::event::{BaseDir, CallEvent, Flight, NoPath, PathStatus, AT_FDCWD};
use crate::identify::owner::Owner;
use crate::identify::pod::{ContainerId, PathArea, PodUid};
use crate::identify::{Actor, Identity, MatchReason};
use crate::inspect::{
    CgroupState, DirSample, EntryEstimate, FileFacts, FreezerLevel, FsUsage, HoldKind, InodeFlags, Mount, MountCopy,
    MountHolder, MountNamespace, Probe, TaskState, Unreadable,
};
use crate::lifecycle::{CniRun, Lifecycle, LifecycleEvent, LifecycleIdentity, SignalResult, SignalSent};
use crate::run::RunTotals;

use super::node::Question;

/// Bytes as JSON: a string when they are UTF-8, as paths nearly always are,
/// so the record stays readable; else `{"hex":"2f746d70ff"}`, so every
/// byte string comes back exactly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bytes<'a>(pub Cow<'a, [u8]>);

impl<'a> Bytes<'a> {
    pub fn of(bytes: &'a [u8]) -> Bytes<'a> {
        Bytes(Cow::Borrowed(bytes))
    }

    pub fn into_vec(self) -> Vec<u8> {
        self.0.into_owned()
    }
}

impl Serialize for Bytes<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(&self.0) {
            Ok(text) => s.serialize_str(text),
            Err(_) => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry("hex", &hex::encode(&self.0))?;
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Bytes<'_> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct BytesVisitor;
        impl<'de> Visitor<'de> for BytesVisitor {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a path: a string, or {\"hex\": \"...\"}")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Vec<u8>, E> {
                within_bytes_field(text.len())?;
                Ok(text.as_bytes().to_vec())
            }
            fn visit_string<E: de::Error>(self, text: String) -> Result<Vec<u8>, E> {
                within_bytes_field(text.len())?;
                Ok(text.into_bytes())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<u8>, A::Error> {
                let Some((key, digits)) = map.next_entry::<String, String>()? else {
                    return Err(de::Error::custom("a path object without \"hex\""));
                };
                if key != "hex" || map.next_key::<de::IgnoredAny>()?.is_some() {
                    return Err(de::Error::custom("a path object holds only \"hex\""));
                }
                within_bytes_field(digits.len() / 2)?;
                hex::decode(&digits).map_err(|_| match digits.len() {
                    // The record's words, quoted only when short.
                    ..=64 => de::Error::custom(format!("{digits:?} is not hex")),
                    n => de::Error::custom(format!("{n} characters that are not hex")),
                })
            }
        }
        d.deserialize_any(BytesVisitor).map(|v| Bytes(Cow::Owned(v)))
    }
}

fn within_bytes_field<E: de::Error>(len: usize) -> Result<(), E> {
    if len > MAX_BYTES_FIELD {
        return Err(de::Error::custom(format!(
            "a path of {len} bytes, longer than any a podstuck writes ({} KiB)",
            MAX_BYTES_FIELD >> 10
        )));
    }
    Ok(())
}

/// Times inside the record: nanoseconds since the Unix epoch, exact and
/// cheap to write for every call.
pub fn nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)).unwrap_or(0)
}

pub fn time(nanos: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(nanos)
}

/// The most items a list of a record holds: calls in flight (the kernel
/// tracks at most 65,536), questions of one review, findings told, counts.
/// A longer list is not one a podstuck wrote, and holding it could take many
/// times its bytes in memory.
pub const MAX_LIST_ITEMS: usize = 1 << 16;

/// Reads a list of at most [`MAX_LIST_ITEMS`] items, refusing the rest
/// before it is held.
fn at_most<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct ListVisitor<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for ListVisitor<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "a list of at most {MAX_LIST_ITEMS} items")
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut items = Vec::new();
            while let Some(item) = seq.next_element()? {
                if items.len() >= MAX_LIST_ITEMS {
                    return Err(de::Error::custom(format!(
                        "a list of more than {MAX_LIST_ITEMS} items, more than a podstuck writes"
                    )));
                }
                items.push(item);
            }
            Ok(items)
        }
    }
    d.deserialize_seq(ListVisitor(std::marker::PhantomData))
}

/// Memory the findings of one entry (`told`, `untold`: JSON as `--json`
/// prints them, a few KB each) may take once read, about. JSON values take
/// up to some 80 times their text in memory (`{"a":0}` is a map of its
/// own), so they are counted as they are read, and a list past this is
/// refused before it is held.
pub const MAX_FINDINGS_MEMORY: usize = 64 << 20;

/// What one JSON value takes in memory, about: the value itself; a map's
/// first node (room for 11 entries) besides.
const VALUE_BYTES: usize = 32;
const MAP_BYTES: usize = 640;

struct Budget(std::cell::Cell<usize>);

impl Budget {
    fn spend<E: de::Error>(&self, bytes: usize) -> Result<(), E> {
        let left = self.0.get();
        if bytes > left {
            return Err(de::Error::custom(format!(
                "findings that would take more than {} MiB of memory, more than a podstuck writes",
                MAX_FINDINGS_MEMORY >> 20
            )));
        }
        self.0.set(left - bytes);
        Ok(())
    }
}

/// One JSON value, read within a budget.
struct BoundedValue<'b>(&'b Budget);

impl<'de> de::DeserializeSeed<'de> for BoundedValue<'_> {
    type Value = serde_json::Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<serde_json::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for BoundedValue<'_> {
    type Value = serde_json::Value;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<serde_json::Value, E> {
        self.0.spend(VALUE_BYTES)?;
        Ok(serde_json::Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<serde_json::Value, E> {
        self.0.spend(VALUE_BYTES)?;
        Ok(v.into())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<serde_json::Value, E> {
        self.0.spend(VALUE_BYTES)?;
        Ok(v.into())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<serde_json::Value, E> {
        self.0.spend(VALUE_BYTES)?;
        Ok(serde_json::Number::from_f64(v).map_or(serde_json::Value::Null, serde_json::Value::Number))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<serde_json::Value, E> {
        self.0.spend(VALUE_BYTES + v.len())?;
        Ok(serde_json::Value::String(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<serde_json::Value, E> {
        self.0.spend(VALUE_BYTES + v.len())?;
        Ok(serde_json::Value::String(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<serde_json::Value, E> {
        self.0.spend(VALUE_BYTES)?;
        Ok(serde_json::Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<serde_json::Value, E> {
        self.visit_unit()
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<serde_json::Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<serde_json::Value, A::Error> {
        self.0.spend(VALUE_BYTES)?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(BoundedValue(self.0))? {
            // The list's own slot for it.
            self.0.spend(VALUE_BYTES)?;
            items.push(item);
        }
        Ok(serde_json::Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<serde_json::Value, A::Error> {
        self.0.spend(VALUE_BYTES + MAP_BYTES)?;
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.0.spend(size_of::<String>() + key.len() + VALUE_BYTES)?;
            let value = map.next_value_seed(BoundedValue(self.0))?;
            object.insert(key, value);
        }
        Ok(serde_json::Value::Object(object))
    }
}

/// Reads findings (JSON values): at most [`MAX_LIST_ITEMS`] of them, in at
/// most [`MAX_FINDINGS_MEMORY`] of memory.
fn findings<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<serde_json::Value>, D::Error> {
    struct FindingsVisitor;
    impl<'de> Visitor<'de> for FindingsVisitor {
        type Value = Vec<serde_json::Value>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "a list of at most {MAX_LIST_ITEMS} findings")
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<serde_json::Value>, A::Error> {
            let budget = Budget(std::cell::Cell::new(MAX_FINDINGS_MEMORY));
            let mut items = Vec::new();
            while let Some(item) = seq.next_element_seed(BoundedValue(&budget))? {
                if items.len() >= MAX_LIST_ITEMS {
                    return Err(de::Error::custom(format!(
                        "a list of more than {MAX_LIST_ITEMS} findings, more than a podstuck writes"
                    )));
                }
                items.push(item);
            }
            Ok(items)
        }
    }
    d.deserialize_seq(FindingsVisitor)
}

/// The longest byte string of a record: a path is at most 4,096 bytes as the
/// kernel hands it over, 8,192 joined to its base directory; a mount point
/// or a link read from /proc no longer. Four times that leaves room.
pub const MAX_BYTES_FIELD: usize = 32 << 10;

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

fn is_zero(n: &u64) -> bool {
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
    container_id: Option<Cow<'a, ContainerId>>,
    actor: Cow<'a, Actor>,
    matched: Cow<'a, [MatchReason]>,
}

impl<'a> WireIdentity<'a> {
    fn of(i: &'a Identity, argument: &[u8]) -> WireIdentity<'a> {
        let Identity { abs_path, pod_uid, path_area, container_id, actor, matched } = i;
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
            container_id: container_id.as_ref().map(Cow::Borrowed),
            actor: Cow::Borrowed(actor),
            matched: Cow::Borrowed(matched),
        }
    }

    fn into_identity(self, argument: &[u8]) -> Result<Identity, String> {
        let abs_path = match (self.abs_path, self.abs_path_error) {
            (Some(path), None) => Ok(path.into_vec()),
            (None, Some(why)) => Err(NoPath::from_text(&why)),
            (None, None) => Ok(argument.to_vec()),
            (Some(_), Some(_)) => return Err("an identity holds both abs_path and abs_path_error".into()),
        };
        Ok(Identity {
            abs_path,
            pod_uid: self.pod_uid.map(Cow::into_owned),
            path_area: self.path_area,
            container_id: self.container_id.map(Cow::into_owned),
            actor: self.actor.into_owned(),
            matched: self.matched.into_owned(),
        })
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
    actor: Cow<'a, Actor>,
}

impl<'a> WireFlight<'a> {
    pub fn of(c: &'a CallInFlight) -> WireFlight<'a> {
        let CallInFlight { flight, path, pod_uid, actor } = c;
        WireFlight {
            tid: flight.tid,
            pid: flight.pid,
            syscall: flight.syscall.into(),
            flags: flight.flags,
            started: nanos(flight.started),
            path: path.as_deref().map(Bytes::of),
            pod_uid: pod_uid.as_ref().map(Cow::Borrowed),
            actor: Cow::Borrowed(actor),
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
        CallInFlight { flight, path, pod_uid: self.pod_uid.map(Cow::into_owned), actor: self.actor.into_owned() }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireMount<'a> {
    id: u32,
    parent_id: u32,
    dev: (u32, u32),
    root: Bytes<'a>,
    mount_point: Bytes<'a>,
    options: Cow<'a, str>,
    propagation: Cow<'a, [String]>,
    fstype: Cow<'a, str>,
    source: Cow<'a, str>,
    super_options: Cow<'a, str>,
}

impl<'a> WireMount<'a> {
    fn of(m: &'a Mount) -> WireMount<'a> {
        let Mount { id, parent_id, dev, root, mount_point, options, propagation, fstype, source, super_options } = m;
        WireMount {
            id: *id,
            parent_id: *parent_id,
            dev: *dev,
            root: Bytes::of(root),
            mount_point: Bytes::of(mount_point),
            options: Cow::Borrowed(options),
            propagation: Cow::Borrowed(propagation),
            fstype: Cow::Borrowed(fstype),
            source: Cow::Borrowed(source),
            super_options: Cow::Borrowed(super_options),
        }
    }

    fn into_mount(self) -> Mount {
        Mount {
            id: self.id,
            parent_id: self.parent_id,
            dev: self.dev,
            root: self.root.into_vec(),
            mount_point: self.mount_point.into_vec(),
            options: self.options.into_owned(),
            propagation: self.propagation.into_owned(),
            fstype: self.fstype.into_owned(),
            source: self.source.into_owned(),
            super_options: self.super_options.into_owned(),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireHolder<'a> {
    pid: u32,
    comm: Cow<'a, str>,
    how: HoldKind,
    path: Bytes<'a>,
    mntns: u64,
    other_namespace: bool,
    /// Absent from records made before podstuck named holders' pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<Owner>,
}

impl<'a> WireHolder<'a> {
    fn of(h: &'a MountHolder) -> WireHolder<'a> {
        let MountHolder { pid, comm, how, path, mntns, other_namespace, owner } = h;
        WireHolder {
            pid: *pid,
            comm: Cow::Borrowed(comm),
            how: *how,
            path: Bytes::of(path),
            mntns: *mntns,
            other_namespace: *other_namespace,
            owner: owner.clone(),
        }
    }

    fn into_holder(self) -> MountHolder {
        MountHolder {
            pid: self.pid,
            comm: self.comm.into_owned(),
            how: self.how,
            path: self.path.into_vec(),
            mntns: self.mntns,
            other_namespace: self.other_namespace,
            owner: self.owner,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireNamespace<'a> {
    host: bool,
    member: u32,
    member_comm: Cow<'a, str>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<Owner>,
    mounts: Vec<WireMount<'a>>,
}

impl<'a> WireNamespace<'a> {
    fn of(ns: &'a MountNamespace) -> WireNamespace<'a> {
        let MountNamespace { mntns: _, host, member, member_comm, owner, mounts } = ns;
        WireNamespace {
            host: *host,
            member: *member,
            member_comm: Cow::Borrowed(member_comm),
            owner: owner.clone(),
            mounts: mounts_of(mounts),
        }
    }
}

impl WireNamespace<'_> {
    fn into_namespace(self, mntns: u64) -> MountNamespace {
        MountNamespace {
            mntns,
            host: self.host,
            member: self.member,
            member_comm: self.member_comm.into_owned(),
            owner: self.owner,
            mounts: into_mounts(self.mounts),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireCopy<'a> {
    mntns: u64,
    pid: u32,
    comm: Cow<'a, str>,
    mount_point: Bytes<'a>,
    /// Absent from records made before podstuck read it.
    #[serde(default)]
    propagation: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<Owner>,
}

impl<'a> WireCopy<'a> {
    fn of(c: &'a MountCopy) -> WireCopy<'a> {
        let MountCopy { mntns, pid, comm, mount_point, propagation, owner } = c;
        WireCopy {
            mntns: *mntns,
            pid: *pid,
            comm: Cow::Borrowed(comm),
            mount_point: Bytes::of(mount_point),
            propagation: propagation.clone(),
            owner: owner.clone(),
        }
    }

    fn into_copy(self) -> MountCopy {
        MountCopy {
            mntns: self.mntns,
            pid: self.pid,
            comm: self.comm.into_owned(),
            mount_point: self.mount_point.into_vec(),
            propagation: self.propagation,
            owner: self.owner,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireDirSample<'a> {
    #[serde(deserialize_with = "at_most")]
    names: Vec<Bytes<'a>>,
    counted: u64,
    complete: bool,
}

impl<'a> WireDirSample<'a> {
    fn of(s: &'a DirSample) -> WireDirSample<'a> {
        let DirSample { names, counted, complete } = s;
        WireDirSample { names: names.iter().map(|n| Bytes::of(n)).collect(), counted: *counted, complete: *complete }
    }

    fn into_sample(self) -> DirSample {
        DirSample {
            names: self.names.into_iter().map(Bytes::into_vec).collect(),
            counted: self.counted,
            complete: self.complete,
        }
    }
}

/// What a node question returned: the fact, or why it could not be read.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireProbe<T> {
    Ok(T),
    Unreadable(String),
}

impl<T> WireProbe<T> {
    fn of<'a, D>(probe: &'a Probe<D>, f: impl FnOnce(&'a D) -> T) -> WireProbe<T> {
        match probe {
            Ok(fact) => WireProbe::Ok(f(fact)),
            Err(why) => WireProbe::Unreadable(why.0.clone()),
        }
    }

    fn into_probe<D>(self, f: impl FnOnce(T) -> D) -> Probe<D> {
        match self {
            WireProbe::Ok(fact) => Ok(f(fact)),
            WireProbe::Unreadable(why) => Err(Unreadable(why)),
        }
    }
}

fn mounts_of(mounts: &[Mount]) -> Vec<WireMount<'_>> {
    mounts.iter().map(WireMount::of).collect()
}

fn into_mounts(mounts: Vec<WireMount<'_>>) -> Vec<Mount> {
    mounts.into_iter().map(WireMount::into_mount).collect()
}

/// One question a detector asked of the node, and its answer. A missing
/// `answer` means: the same as the last answer to the same question (see
/// `LastAnswers`; a node's mount table is asked about every half second and
/// seldom changes).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireQuestion<'a> {
    HostMounts {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<WireProbe<Vec<WireMount<'a>>>>,
    },
    /// Records made before podstuck read a caller's mount namespace
    /// through a process living in it asked by pid: read, and left out
    /// (a replay says the namespace is not in the record).
    MountsOfProcess {
        pid: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<WireProbe<Vec<WireMount<'a>>>>,
    },
    MountNamespace {
        mntns: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<WireProbe<WireNamespace<'a>>>,
    },
    ResolvedPath {
        pid: u32,
        path: Bytes<'a>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<WireProbe<Bytes<'a>>>,
    },
    MountHolders {
        mount: WireMount<'a>,
        /// The namespace the mount is of (0 in records made before podstuck said it: the host's).
        #[serde(default)]
        mntns: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<Vec<WireHolder<'a>>>,
    },
    MountCopies {
        mount: WireMount<'a>,
        #[serde(default)]
        mntns: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<Vec<WireCopy<'a>>>,
    },
    InodeFlags {
        path: Bytes<'a>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<WireProbe<InodeFlags>>,
    },
    FileFacts {
        path: Bytes<'a>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<WireProbe<FileFacts>>,
    },
    DirSample {
        path: Bytes<'a>,
        limit: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<WireProbe<WireDirSample<'a>>>,
    },
    RemainingEntries {
        path: Bytes<'a>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<WireProbe<Cow<'a, EntryEstimate>>>,
    },
    FsUsage {
        path: Bytes<'a>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<WireProbe<Cow<'a, FsUsage>>>,
    },
    Cgroup {
        path: Bytes<'a>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<WireProbe<Cow<'a, CgroupState>>>,
    },
    V1Freezer {
        path: Bytes<'a>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<WireProbe<Cow<'a, [FreezerLevel]>>>,
    },
    Task {
        tid: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<WireProbe<Cow<'a, TaskState>>>,
    },
    FuseServers {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<Cow<'a, [TaskState]>>,
    },
    Avoid {
        path: Bytes<'a>,
    },
}

impl<'a> WireQuestion<'a> {
    pub fn of(asked: &'a Question) -> WireQuestion<'a> {
        match asked {
            Question::HostMounts { answer } => {
                WireQuestion::HostMounts { answer: Some(WireProbe::of(answer, |m| mounts_of(m))) }
            }
            Question::MountNamespace { mntns, answer } => {
                WireQuestion::MountNamespace { mntns: *mntns, answer: Some(WireProbe::of(answer, WireNamespace::of)) }
            }
            Question::ResolvedPath { pid, path, answer } => WireQuestion::ResolvedPath {
                pid: *pid,
                path: Bytes::of(path),
                answer: Some(WireProbe::of(answer, |p| Bytes::of(p))),
            },
            Question::MountHolders { mount, mntns, answer } => WireQuestion::MountHolders {
                mount: WireMount::of(mount),
                mntns: *mntns,
                answer: Some(answer.iter().map(WireHolder::of).collect()),
            },
            Question::MountCopies { mount, mntns, answer } => WireQuestion::MountCopies {
                mount: WireMount::of(mount),
                mntns: *mntns,
                answer: Some(answer.iter().map(WireCopy::of).collect()),
            },
            Question::InodeFlags { path, answer } => {
                WireQuestion::InodeFlags { path: Bytes::of(path), answer: Some(WireProbe::of(answer, |f| *f)) }
            }
            Question::FileFacts { path, answer } => {
                WireQuestion::FileFacts { path: Bytes::of(path), answer: Some(WireProbe::of(answer, |f| *f)) }
            }
            Question::DirSample { path, limit, answer } => WireQuestion::DirSample {
                path: Bytes::of(path),
                limit: *limit as u64,
                answer: Some(WireProbe::of(answer, WireDirSample::of)),
            },
            Question::RemainingEntries { path, answer } => WireQuestion::RemainingEntries {
                path: Bytes::of(path),
                answer: Some(WireProbe::of(answer, Cow::Borrowed)),
            },
            Question::FsUsage { path, answer } => {
                WireQuestion::FsUsage { path: Bytes::of(path), answer: Some(WireProbe::of(answer, Cow::Borrowed)) }
            }
            Question::Cgroup { path, answer } => {
                WireQuestion::Cgroup { path: Bytes::of(path), answer: Some(WireProbe::of(answer, Cow::Borrowed)) }
            }
            Question::V1Freezer { path, answer } => WireQuestion::V1Freezer {
                path: Bytes::of(path),
                answer: Some(WireProbe::of(answer, |l| Cow::Borrowed(l.as_slice()))),
            },
            Question::Task { tid, answer } => {
                WireQuestion::Task { tid: *tid, answer: Some(WireProbe::of(answer, Cow::Borrowed)) }
            }
            Question::FuseServers { answer } => WireQuestion::FuseServers { answer: Some(Cow::Borrowed(answer)) },
            Question::Avoid { path } => WireQuestion::Avoid { path: Bytes::of(path) },
        }
    }

    /// A question only older records hold, which no podstuck asks now: left out when read.
    pub fn is_retired(&self) -> bool {
        matches!(self, WireQuestion::MountsOfProcess { .. })
    }

    /// The question alone (method and arguments), as a key to find the last
    /// answer to it. Only compared within one run of one podstuck.
    pub fn question_key(&self) -> String {
        match self {
            WireQuestion::HostMounts { .. } => "host_mounts".into(),
            WireQuestion::MountsOfProcess { pid, .. } => format!("mounts_of_process {pid}"),
            WireQuestion::MountNamespace { mntns, .. } => format!("mount_namespace {mntns}"),
            WireQuestion::ResolvedPath { pid, path, .. } => format!("resolved_path {pid} {:?}", path.0),
            WireQuestion::MountHolders { mount, mntns, .. } => format!("mount_holders {mntns} {mount:?}"),
            WireQuestion::MountCopies { mount, mntns, .. } => format!("mount_copies {mntns} {mount:?}"),
            WireQuestion::InodeFlags { path, .. } => format!("inode_flags {:?}", path.0),
            WireQuestion::FileFacts { path, .. } => format!("file_facts {:?}", path.0),
            WireQuestion::DirSample { path, limit, .. } => format!("dir_sample {limit} {:?}", path.0),
            WireQuestion::RemainingEntries { path, .. } => format!("remaining_entries {:?}", path.0),
            WireQuestion::FsUsage { path, .. } => format!("fs_usage {:?}", path.0),
            WireQuestion::Cgroup { path, .. } => format!("cgroup {:?}", path.0),
            WireQuestion::V1Freezer { path, .. } => format!("v1_freezer {:?}", path.0),
            WireQuestion::Task { tid, .. } => format!("task {tid}"),
            WireQuestion::FuseServers { .. } => "fuse_servers".into(),
            WireQuestion::Avoid { path } => format!("avoid {:?}", path.0),
        }
    }

    /// Drops the answer: the reader takes it from the last one to the same question.
    pub fn without_answer(&mut self) {
        match self {
            WireQuestion::HostMounts { answer } | WireQuestion::MountsOfProcess { answer, .. } => *answer = None,
            WireQuestion::ResolvedPath { answer, .. } => *answer = None,
            WireQuestion::MountNamespace { answer, .. } => *answer = None,
            WireQuestion::MountHolders { answer, .. } => *answer = None,
            WireQuestion::MountCopies { answer, .. } => *answer = None,
            WireQuestion::InodeFlags { answer, .. } => *answer = None,
            WireQuestion::FileFacts { answer, .. } => *answer = None,
            WireQuestion::DirSample { answer, .. } => *answer = None,
            WireQuestion::RemainingEntries { answer, .. } => *answer = None,
            WireQuestion::FsUsage { answer, .. } => *answer = None,
            WireQuestion::Cgroup { answer, .. } => *answer = None,
            WireQuestion::V1Freezer { answer, .. } => *answer = None,
            WireQuestion::Task { answer, .. } => *answer = None,
            WireQuestion::FuseServers { answer } => *answer = None,
            WireQuestion::Avoid { .. } => {}
        }
    }

    /// The question and its answer, or None when the answer was left out
    /// (the caller finds it by `question_key`).
    pub fn into_asked(self) -> Result<Option<Question>, String> {
        Ok(Some(match self {
            WireQuestion::HostMounts { answer: Some(a) } => Question::HostMounts { answer: a.into_probe(into_mounts) },
            WireQuestion::MountNamespace { mntns, answer: Some(a) } => {
                Question::MountNamespace { mntns, answer: a.into_probe(|w| w.into_namespace(mntns)) }
            }
            WireQuestion::ResolvedPath { pid, path, answer: Some(a) } => {
                Question::ResolvedPath { pid, path: path.into_vec(), answer: a.into_probe(Bytes::into_vec) }
            }
            WireQuestion::MountHolders { mount, mntns, answer: Some(a) } => Question::MountHolders {
                mount: mount.into_mount(),
                mntns,
                answer: a.into_iter().map(WireHolder::into_holder).collect(),
            },
            WireQuestion::MountCopies { mount, mntns, answer: Some(a) } => Question::MountCopies {
                mount: mount.into_mount(),
                mntns,
                answer: a.into_iter().map(WireCopy::into_copy).collect(),
            },
            WireQuestion::InodeFlags { path, answer: Some(a) } => {
                Question::InodeFlags { path: path.into_vec(), answer: a.into_probe(|f| f) }
            }
            WireQuestion::FileFacts { path, answer: Some(a) } => {
                Question::FileFacts { path: path.into_vec(), answer: a.into_probe(|f| f) }
            }
            WireQuestion::DirSample { path, limit, answer: Some(a) } => Question::DirSample {
                path: path.into_vec(),
                limit: usize::try_from(limit).map_err(|_| format!("dir_sample limit {limit} is too large"))?,
                answer: a.into_probe(WireDirSample::into_sample),
            },
            WireQuestion::RemainingEntries { path, answer: Some(a) } => {
                Question::RemainingEntries { path: path.into_vec(), answer: a.into_probe(Cow::into_owned) }
            }
            WireQuestion::FsUsage { path, answer: Some(a) } => {
                Question::FsUsage { path: path.into_vec(), answer: a.into_probe(Cow::into_owned) }
            }
            WireQuestion::Cgroup { path, answer: Some(a) } => {
                Question::Cgroup { path: path.into_vec(), answer: a.into_probe(Cow::into_owned) }
            }
            WireQuestion::V1Freezer { path, answer: Some(a) } => {
                Question::V1Freezer { path: path.into_vec(), answer: a.into_probe(Cow::into_owned) }
            }
            WireQuestion::Task { tid, answer: Some(a) } => {
                Question::Task { tid, answer: a.into_probe(Cow::into_owned) }
            }
            WireQuestion::FuseServers { answer: Some(a) } => Question::FuseServers { answer: a.into_owned() },
            WireQuestion::Avoid { path } => Question::Avoid { path: path.into_vec() },
            _ => return Ok(None),
        }))
    }
}

/// One review: the clock, the calls in flight, every question asked of the
/// node in order, and the findings the live run told after it (JSON as
/// `--json` prints them), so a replay can say whether it agrees.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireReview<'a> {
    pub now: u64,
    #[serde(deserialize_with = "at_most")]
    pub in_flight: Vec<WireFlight<'a>>,
    #[serde(deserialize_with = "at_most")]
    pub asked: Vec<WireQuestion<'a>>,
    #[serde(deserialize_with = "findings")]
    pub told: Vec<serde_json::Value>,
    /// What the kernel counted since the review before (absent from
    /// records made before podstuck passed counts to the diagnosis).
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "at_most")]
    pub counted: Vec<WireCounted>,
    /// The run's last review (absent, false, from records made before
    /// detectors were told).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub closing: bool,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireCounted {
    pid: u32,
    syscall: WireSyscall,
    errno: u16,
    count: u64,
}

impl WireCounted {
    pub fn of(c: &CountedCalls) -> WireCounted {
        WireCounted { pid: c.pid, syscall: c.syscall.into(), errno: c.errno, count: c.count }
    }

    pub fn into_counted(self) -> CountedCalls {
        CountedCalls { pid: self.pid, syscall: self.syscall.into(), errno: self.errno, count: self.count }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireTotals {
    events_seen: u64,
    events_lost: u64,
    calls: BTreeMap<WireSyscall, u64>,
    calls_without_entry: u64,
    entries_not_stored: u64,
    paths_unreadable: u64,
    records_undecodable: u64,
    #[serde(default)]
    calls_outside_series: u64,
}

impl WireTotals {
    pub fn of(t: &RunTotals) -> WireTotals {
        let RunTotals {
            events_seen,
            events_lost,
            calls,
            calls_without_entry,
            entries_not_stored,
            paths_unreadable,
            records_undecodable,
            calls_outside_series,
            programs: _,
            pods_calls: _,
        } = t;
        // What the programs cost is said at the end of the run, not recorded.
        WireTotals {
            events_seen: *events_seen,
            events_lost: *events_lost,
            calls: calls.iter().map(|(s, n)| ((*s).into(), *n)).collect(),
            calls_without_entry: *calls_without_entry,
            entries_not_stored: *entries_not_stored,
            paths_unreadable: *paths_unreadable,
            records_undecodable: *records_undecodable,
            calls_outside_series: *calls_outside_series,
        }
    }

    pub fn into_totals(self) -> RunTotals {
        RunTotals {
            events_seen: self.events_seen,
            events_lost: self.events_lost,
            calls: self.calls.into_iter().map(|(s, n)| (s.into(), n)).collect(),
            calls_without_entry: self.calls_without_entry,
            entries_not_stored: self.entries_not_stored,
            paths_unreadable: self.paths_unreadable,
            records_undecodable: self.records_undecodable,
            calls_outside_series: self.calls_outside_series,
            programs: Vec::new(),
            pods_calls: None,
        }
    }
}

/// The closing line: when the run ended, how many entries came before
/// (a check on the whole), the run's totals, and the findings told at exit.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireEnd {
    pub ended: u64,
    pub entries: u64,
    #[serde(default)]
    pub totals: Option<WireTotals>,
    #[serde(deserialize_with = "findings")]
    pub untold: Vec<serde_json::Value>,
}

/// One line of the compressed part.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireEntry<'a> {
    /// Boxed: calls are most lines, but reviews and the end are smaller.
    Call(Box<WireCall<'a>>),
    Review(WireReview<'a>),
    End(WireEnd),
    Lifecycle(Box<WireLifecycle<'a>>),
}

/// A lifecycle event the diagnosis saw, with who and which pod it is about.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireLifecycle<'a> {
    time: u64,
    pid: u32,
    ppid: u32,
    comm: Cow<'a, str>,
    cgroup_id: u64,
    what: WireWhat<'a>,
    pod_uid: Option<Cow<'a, PodUid>>,
    actor: Cow<'a, Actor>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum WireWhat<'a> {
    Exec { filename: Bytes<'a>, cni: Option<WireCni<'a>> },
    Exit { status: i32 },
    Signal { sig: i32, result: i32, target_pid: u32, target_comm: Cow<'a, str>, group: bool },
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
            Lifecycle::Exec { filename, cni } => WireWhat::Exec {
                filename: Bytes::of(filename),
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
            Lifecycle::Exit { status } => WireWhat::Exit { status: *status },
            Lifecycle::Signal(s) => WireWhat::Signal {
                sig: s.sig,
                result: s.result.code(),
                target_pid: s.target_pid,
                target_comm: Cow::Borrowed(&s.target_comm),
                group: s.group,
            },
        };
        WireLifecycle {
            time: nanos(e.time),
            pid: e.pid,
            ppid: e.ppid,
            comm: Cow::Borrowed(&e.comm),
            cgroup_id: e.cgroup_id,
            what,
            pod_uid: identity.pod_uid.as_ref().map(Cow::Borrowed),
            actor: Cow::Borrowed(&identity.actor),
        }
    }

    pub fn into_lifecycle(self) -> (LifecycleEvent, LifecycleIdentity) {
        let what = match self.what {
            WireWhat::Exec { filename, cni } => Lifecycle::Exec {
                filename: filename.into_vec(),
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
            WireWhat::Exit { status } => Lifecycle::Exit { status },
            WireWhat::Signal { sig, result, target_pid, target_comm, group } => Lifecycle::Signal(SignalSent {
                sig,
                result: SignalResult::of(result),
                target_pid,
                target_comm: target_comm.into_owned(),
                group,
            }),
        };
        let event = LifecycleEvent {
            time: time(self.time),
            pid: self.pid,
            ppid: self.ppid,
            comm: self.comm.into_owned(),
            cgroup_id: self.cgroup_id,
            what,
        };
        (event, LifecycleIdentity { pod_uid: self.pod_uid.map(Cow::into_owned), actor: self.actor.into_owned() })
    }
}

/// The plain-text second line: what the record is, readable with `head -2`.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireHeader<'a> {
    pub podstuck: Cow<'a, str>,
    pub node: Cow<'a, str>,
    pub kernel: Cow<'a, str>,
    /// RFC 3339, nanoseconds, UTC.
    pub started: String,
    #[serde(default)]
    pub pods: Cow<'a, [PodUid]>,
    pub kubelet_root: Bytes<'a>,
    #[serde(default)]
    pub errors_only: bool,
    #[serde(default)]
    pub syscalls: Vec<WireSyscall>,
    /// `--hung-after`, as humantime says it ("5s").
    pub hung_after: String,
    pub node_name: Cow<'a, str>,
    pub host_mntns: u32,
    /// Absent from records made before podstuck ran in containers.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_container: bool,
}
