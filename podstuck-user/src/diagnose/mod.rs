//! Diagnose: recognises the pathologies of docs/pathologies.md in the stream of
//! identified calls, confirms each against node state read at that moment,
//! and says it as a [`Finding`]: the cause in plain words, the evidence, and
//! the exact command that fixes it (printed, never run).
//!
//! Pure: it takes calls, calls still in flight, a clock and a
//! [`NodeInspector`], and returns findings, so every detector is tested on
//! synthetic streams with a fake node. One detector per pathology, one file
//! each. A finding is emitted once and then updated as evidence grows
//! ([`Diagnoser::review`] decides when a change is worth a new revision).

pub mod block_volume_held;
pub mod causes;
pub mod cgroup_busy;
pub mod consequences;
pub mod csi_plugin_gone;
mod diagnoser;
pub mod dir_not_empty;
pub mod disk_full;
pub mod holders;
pub mod hung_call;
pub mod immutable_file;
pub mod mount_held;
pub mod no_teardown_seen;
pub mod not_mounted;
pub mod pod_shutdown;
pub mod prestop_hook_running;
pub mod removal_storm;
pub mod rhythm;
pub mod route;
pub mod sandbox_teardown_failing;
pub mod shell;
pub mod signalled;
pub mod sigterm_ignored;
pub mod stuck_on;
pub mod subpath_left;
pub mod track;
pub mod unkillable_task;
pub mod volume_device_lost;
pub mod volume_still_mounted;
pub mod wording;

#[cfg(test)]
pub(crate) mod fake;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use podstuck_common::Syscall;
use serde::Serialize;

use crate::event::{CallEvent, Flight};
use crate::identify::pod::PodUid;
use crate::identify::LifecycleIdentity;
use crate::identify::{Actor, Identity};
use crate::inspect::NodeInspector;
use crate::lifecycle::LifecycleEvent;
pub use crate::words::human_duration;
pub use causes::Kind;
pub use diagnoser::{Diagnoser, Report, MAX_FINDINGS_KEPT};
use pod_shutdown::PodShutdown;
pub use route::Claim;

/// How much a finding matters to the pod's deletion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    Info,
    /// Slows teardown or hurts the node, may not block on its own.
    Warning,
    /// Blocks a pod's deletion until someone acts.
    Critical,
}

impl Severity {
    /// The name used in output, same as the JSON form.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

/// How sure podstuck is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Confidence {
    /// The calls fit, node state could not be read or no longer agrees.
    Possible,
    /// The calls fit and nothing read contradicts it.
    Likely,
    /// Node state read now shows the cause.
    Confirmed,
}

impl Confidence {
    /// The name used in output, same as the JSON form.
    pub fn as_str(self) -> &'static str {
        match self {
            Confidence::Confirmed => "confirmed",
            Confidence::Likely => "likely",
            Confidence::Possible => "possible",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Still happening.
    Active,
    /// The blocked call succeeded, or the hung call returned, or the storm ended.
    Resolved,
}

/// One fact behind a finding and where it was read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Evidence {
    /// "trace", "mountinfo", "/proc/123/stack", "FS_IOC_GETFLAGS", "statfs"...
    pub source: String,
    pub fact: String,
}

impl Evidence {
    pub fn new(source: impl Into<String>, fact: impl Into<String>) -> Evidence {
        Evidence { source: source.into(), fact: fact.into() }
    }
}

/// Who made the calls a finding is about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FindingActor {
    pub pid: u32,
    pub comm: String,
    pub parent: String,
    pub role: &'static str,
    pub description: String,
}

impl FindingActor {
    pub fn of(pid: u32, actor: &Actor) -> FindingActor {
        FindingActor {
            pid,
            comm: actor.comm.clone(),
            parent: actor.parent.clone(),
            role: actor.role.as_str(),
            description: actor.description.clone(),
        }
    }
}

/// What podstuck concluded, with its evidence and the fix.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    /// Stable across revisions: kind and the key path (or actor).
    pub id: String,
    pub kind: Kind,
    pub severity: Severity,
    pub status: Status,
    pub confidence: Confidence,
    /// The cause, in one paragraph of plain words.
    pub summary: String,
    pub pod_uid: Option<PodUid>,
    /// Every pod concerned (a full disk hits them all).
    pub pods: Vec<PodUid>,
    pub actor: Option<FindingActor>,
    pub syscall: Option<&'static str>,
    pub errno: Option<String>,
    /// The key path first.
    #[serde(serialize_with = "serialize_paths")]
    pub paths: Vec<Vec<u8>>,
    pub evidence: Vec<Evidence>,
    /// The retry rhythm recognised, if any.
    pub rhythm: Option<String>,
    /// The exact command that fixes it; podstuck never runs it.
    pub fix: String,
    /// What else to do or know.
    pub advice: Vec<String>,
    #[serde(serialize_with = "serialize_time")]
    pub first_seen: SystemTime,
    #[serde(serialize_with = "serialize_time")]
    pub last_seen: SystemTime,
    /// Calls behind it (failures, removals, hung calls).
    pub count: u64,
    /// 1 for the first emission, then one more per update.
    pub revision: u32,
    /// Kind-specific numbers (a storm's rate, a hang's duration...).
    pub details: BTreeMap<String, serde_json::Value>,
}

fn serialize_paths<S: serde::Serializer>(paths: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(paths.iter().map(|p| String::from_utf8_lossy(p).into_owned()))
}

fn serialize_time<S: serde::Serializer>(time: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::words::rfc3339(*time))
}

impl Finding {
    /// A finding with its identity set and everything else empty.
    pub fn new(kind: Kind, key: &str, severity: Severity, first_seen: SystemTime) -> Finding {
        Finding {
            id: format!("{}:{key}", kind.id()),
            kind,
            severity,
            status: Status::Active,
            confidence: Confidence::Likely,
            summary: String::new(),
            pod_uid: None,
            pods: Vec::new(),
            actor: None,
            syscall: None,
            errno: None,
            paths: Vec::new(),
            evidence: Vec::new(),
            rhythm: None,
            fix: String::new(),
            advice: Vec::new(),
            first_seen,
            last_seen: first_seen,
            count: 0,
            revision: 0,
            details: BTreeMap::new(),
        }
    }

    pub fn evidence(&mut self, source: impl Into<String>, fact: impl Into<String>) {
        self.evidence.push(Evidence::new(source, fact));
    }

    pub fn detail(&mut self, key: &str, value: impl Into<serde_json::Value>) {
        self.details.insert(key.to_string(), value.into());
    }

    /// What changed in a way worth telling at once (not just the count).
    fn differs_materially(&self, other: &Finding) -> bool {
        self.status != other.status
            || self.confidence != other.confidence
            || self.severity != other.severity
            || self.fix != other.fix
            || self.evidence.len() != other.evidence.len()
    }
}

/// A call that entered and has not returned: the kernel's in-flight entry
/// as user space read it ([`Flight`]), with who made it and on what.
#[derive(Clone, Debug)]
pub struct CallInFlight {
    pub flight: Flight,
    /// The absolute path, when the argument could be read from the
    /// caller's memory and, if relative, based on its directory.
    pub path: Option<Vec<u8>>,
    pub pod_uid: Option<PodUid>,
    pub actor: Actor,
    /// The caller's mount namespace (0: unknown), where its path lies and
    /// its mounts are read: the thread is in the call, so alive.
    pub mntns: u32,
    /// How far the path speaks for the node.
    pub proof: crate::identify::path_proof::PathProof,
}

/// What a review may use besides the calls observed.
pub struct Review<'a> {
    pub now: SystemTime,
    pub in_flight: &'a [CallInFlight],
    pub node: &'a mut dyn NodeInspector,
}

/// Settings a user may change.
#[derive(Clone, Debug)]
pub struct DiagnoseOptions {
    /// A call in flight longer than this is hung (`--hung-after`).
    pub hung_after: Duration,
    /// The node's name, for `kubectl drain <node>`.
    pub node_name: String,
    /// podstuck's own mount namespace (the host's), to tell a caller in
    /// another namespace.
    pub host_mntns: u32,
    /// podstuck runs in a container: fixes are printed to act in the
    /// node's mount namespace (`nsenter -t 1 -m -- ...`).
    pub in_container: bool,
    /// The pods `--pod` follows (empty: the whole node), whose teardown
    /// podstuck says it does not see anyone working on.
    pub pods: Vec<PodUid>,
}

impl Default for DiagnoseOptions {
    fn default() -> DiagnoseOptions {
        DiagnoseOptions {
            hung_after: Duration::from_secs(5),
            node_name: "<node>".into(),
            host_mntns: 0,
            in_container: false,
            pods: Vec::new(),
        }
    }
}

/// Calls the kernel counted for one process, one syscall and one outcome
/// since the last read, streamed or not (a storm is mostly counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CountedCalls {
    pub pid: u32,
    pub syscall: Syscall,
    /// 0 for success; `u16::MAX` for a failure whose errno is unknown.
    pub errno: u16,
    pub count: u64,
}

/// One pathology's recogniser.
pub trait Detector {
    /// Sees what the kernel counted since the last read, before a review.
    /// Only detectors that count need it.
    fn counted(&mut self, _counts: &[CountedCalls]) {}
    /// The failed calls it explains, by class ([`route`]): a failed call
    /// reaches [`Detector::failed`] of the one detector whose claims cover
    /// its class, and no other's; no two detectors claim one class.
    fn claims(&self) -> &'static [Claim] {
        &[]
    }
    /// A failed call of a class it claims, in order.
    fn failed(&mut self, _event: &CallEvent, _identity: &Identity) {}
    /// Sees every completed call in scope, in order, failed or not: a
    /// success ends a failure on its path, and the detectors that count
    /// calls (a storm, a teardown going on) count them here; a refusal is
    /// explained only by its claimant. Must be cheap: a removal storm sends
    /// hundreds of thousands per second.
    fn observe(&mut self, _event: &CallEvent, _identity: &Identity) {}
    /// Sees every lifecycle event in scope (an exec of a CNI plugin, a
    /// SIGTERM or SIGKILL, an exit of a process either named), in order.
    fn lifecycle(&mut self, _event: &LifecycleEvent, _identity: &LifecycleIdentity) {}
    /// The shutdown of each deleted pod the API was read for (when its
    /// grace period ends, its containers' hooks and roles), as of now:
    /// told before each review.
    fn shutdowns(&mut self, _shutdowns: &BTreeMap<PodUid, PodShutdown>) {}
    /// Told before the run's last review: what it returns is the last word.
    fn closing(&mut self) {}
    /// Whether it wants what running CNI plugins write on their stdout
    /// (a sandbox whose DEL fails): the kernel reads it only while some
    /// detector does, since every write of the node passes the program.
    fn wants_plugin_words(&self) -> bool {
        false
    }
    /// Whether a call came since the last review whose cause the node's
    /// state can prove at once (a mount table, inode flags, a directory's
    /// entries): the watch then reviews soon, not at its next tick, so the
    /// answer follows the call that proves it.
    fn wants_review(&self) -> bool {
        false
    }
    /// Decides, confirms against the node, and returns the current state of
    /// every finding it holds (active or just resolved).
    fn review(&mut self, review: &mut Review<'_>) -> Vec<Finding>;
}

/// rmdir(2), or unlinkat(2) with AT_REMOVEDIR: removing a directory.
pub fn removes_dir(event: &CallEvent) -> bool {
    match event.syscall {
        Syscall::Rmdir => true,
        Syscall::Unlinkat => event.flags & libc::AT_REMOVEDIR as u64 != 0,
        _ => false,
    }
}

/// Any of the removal calls (not umount2).
pub fn removes(event: &CallEvent) -> bool {
    event.syscall != Syscall::Umount2
}

/// umount2 without MNT_DETACH: a call that can be refused as busy.
pub fn unmounts(event: &CallEvent) -> bool {
    event.syscall == Syscall::Umount2
}

/// A path for a sentence.
pub fn shown(path: &[u8]) -> String {
    crate::words::escape_path(path)
}
