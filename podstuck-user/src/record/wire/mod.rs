//! The JSON shapes of a record's lines, written down here rather than
//! derived from the types the live run uses, because a record outlives the
//! podstuck that wrote it: a field renamed for the output, or a path that
//! the output writes lossily, must not change what an older record means.
//! Every shape here is part of format 1 (see the golden tests in `tests`).
//!
//! This room holds what every line shares (bytes, times, the bounds on
//! what is read) and the lines themselves; the calls, the node's answers
//! and the questions have rooms of their own. Calls, most of a record,
//! borrow from the live values when written (`Cow::Borrowed`, no copies on
//! the hot path of a removal storm); every shape owns what it reads.

mod answers;
mod calls;
mod containers;
mod questions;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::diagnose::pod_shutdown::{PodShutdown, ShutdownContainer, CONTAINERS_KEPT};
use crate::diagnose::CountedCalls;
use crate::identify::pod::PodUid;
use crate::pod::ContainerId;
use crate::run::RunTotals;

pub use answers::Recorded;
pub use calls::{WireCall, WireFlight, WireLifecycle, WireSyscall};
pub use questions::{question_key, WireQuestion};

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

/// One review: the clock, the calls in flight, every question asked of the
/// node in order, and the findings the live run told after it (JSON as
/// `--json` prints them), so a replay can say whether it agrees.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireReview<'a> {
    pub now: u64,
    #[serde(deserialize_with = "at_most")]
    pub in_flight: Vec<WireFlight<'a>>,
    #[serde(deserialize_with = "at_most")]
    pub asked: Vec<WireQuestion>,
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
    /// When the pods' grace periods end, as the API said before this
    /// review (absent without `--pod NS/NAME`, and before podstuck 0.2).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub grace_ends: BTreeMap<PodUid, u64>,
    /// The deleted pods' shutdowns, as the API said them (absent before
    /// podstuck read the containers' hooks and roles: then `grace_ends`
    /// alone, which is written beside for the podstucks of then).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub shutdowns: BTreeMap<PodUid, WireShutdown>,
}

/// A deleted pod's shutdown, as a record keeps it.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireShutdown {
    grace_ends: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deleted_at: Option<u64>,
    #[serde(deserialize_with = "at_most")]
    containers: Vec<WireShutdownContainer>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireShutdownContainer {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id: Option<ContainerId>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    sidecar: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    prestop: Option<Vec<String>>,
    running: bool,
}

impl WireShutdown {
    pub fn of(s: &PodShutdown) -> WireShutdown {
        let PodShutdown { grace_ends, deleted_at, containers } = s;
        let containers = containers
            .iter()
            .map(|c| {
                let ShutdownContainer { name, id, sidecar, prestop, running } = c;
                WireShutdownContainer {
                    name: name.clone(),
                    id: id.clone(),
                    sidecar: *sidecar,
                    prestop: prestop.clone(),
                    running: *running,
                }
            })
            .collect();
        WireShutdown { grace_ends: nanos(*grace_ends), deleted_at: deleted_at.map(nanos), containers }
    }

    fn into_shutdown(self) -> PodShutdown {
        let containers = self
            .containers
            .into_iter()
            .take(CONTAINERS_KEPT)
            .map(|c| {
                let container = ShutdownContainer::new(&c.name, c.id, c.sidecar, c.running);
                match &c.prestop {
                    Some(command) => container.with_prestop(command),
                    None => container,
                }
            })
            .collect();
        PodShutdown { grace_ends: time(self.grace_ends), deleted_at: self.deleted_at.map(time), containers }
    }
}

/// The shutdowns a review's entry holds: its own, else (a record of an
/// older podstuck) the grace periods' ends alone.
pub fn shutdowns_of(
    shutdowns: BTreeMap<PodUid, WireShutdown>,
    grace_ends: BTreeMap<PodUid, u64>,
) -> BTreeMap<PodUid, PodShutdown> {
    if !shutdowns.is_empty() {
        return shutdowns.into_iter().map(|(pod, s)| (pod, s.into_shutdown())).collect();
    }
    let alone = |end| PodShutdown { grace_ends: time(end), deleted_at: None, containers: Vec::new() };
    grace_ends.into_iter().map(|(pod, end)| (pod, alone(end))).collect()
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
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    lifecycle_dropped: BTreeMap<String, u64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    claims_set_aside: BTreeMap<String, u64>,
    #[serde(default, skip_serializing_if = "calls::is_zero")]
    claims_naming_another_pod: u64,
}

impl WireTotals {
    pub fn of(t: &RunTotals) -> WireTotals {
        let RunTotals {
            events_seen,
            events_lost,
            lifecycle_lost: _,
            lifecycle_seen: _,
            calls,
            calls_without_entry,
            entries_not_stored,
            paths_unreadable,
            records_undecodable,
            calls_outside_series,
            programs: _,
            pods_calls: _,
            lifecycle_dropped,
            claims_set_aside,
            claims_naming_another_pod,
            node_reads: _,
            queue_full: _,
            queue_high_water: _,
        } = t;
        // What the programs cost, how the node's reads and the rings'
        // queue fared, which ring lost what, are said at the end of the
        // run, not recorded: a replay reads no node and no ring
        // (`events_lost` holds both rings' losses).
        WireTotals {
            events_seen: *events_seen,
            events_lost: *events_lost,
            calls: calls.iter().map(|(s, n)| ((*s).into(), *n)).collect(),
            calls_without_entry: *calls_without_entry,
            entries_not_stored: *entries_not_stored,
            paths_unreadable: *paths_unreadable,
            records_undecodable: *records_undecodable,
            calls_outside_series: *calls_outside_series,
            lifecycle_dropped: lifecycle_dropped.clone(),
            claims_set_aside: claims_set_aside.clone(),
            claims_naming_another_pod: *claims_naming_another_pod,
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
            lifecycle_dropped: self.lifecycle_dropped,
            claims_set_aside: self.claims_set_aside,
            claims_naming_another_pod: self.claims_naming_another_pod,
            ..RunTotals::default()
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
