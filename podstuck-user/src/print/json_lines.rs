//! `--json`: one JSON object per line, for machines. A `start` line (when,
//! on what, with which programs and filters), an `event` per call (unless
//! `--findings`), a `finding` when one is first told and `finding-update`
//! for later revisions, and an `end` line with what was counted and lost.
//!
//! Paths are bytes on Linux. JSON carries a UTF-8 `path`; when the bytes are
//! not UTF-8 the exact bytes also go in `path_hex` so nothing is lost.

use std::collections::BTreeMap;
use std::io;
use std::time::SystemTime;

use serde::Serialize;
use serde_json::Value;

use crate::diagnose::{Finding, Report};
use crate::event::{errno_name, syscall_name, CallEvent, AT_FDCWD};
use crate::identify::path_proof::Unproven;
use crate::identify::pod::{ContainerId, PathArea, PodUid};
use crate::identify::target::Target;
use crate::identify::{Actor, Identity, MatchReason};
use crate::run::RunTotals;
use crate::run::{RunFacts, Tracing};
use crate::words::rfc3339;

use super::{calls_by_name, Ending, Out, Printer};

/// `--json`: every line a JSON object.
pub struct JsonLines {
    /// Each call too, not only findings (no `--findings`).
    calls: bool,
}

impl JsonLines {
    pub fn new(calls: bool) -> JsonLines {
        JsonLines { calls }
    }
}

impl Printer for JsonLines {
    fn start(&mut self, out: &mut Out, run: &RunFacts, tracing: &Tracing) -> io::Result<()> {
        out.line_as_is(&start_json(&StartLine::new(run, tracing)))
    }

    fn call(&mut self, out: &mut Out, event: &CallEvent, identity: &Identity) -> io::Result<()> {
        match self.calls {
            true => out.line_as_is(&event_json(event, identity)),
            false => Ok(()),
        }
    }

    fn findings(&mut self, out: &mut Out, reports: &[Report]) -> io::Result<()> {
        reports.iter().try_for_each(|report| out.line(&finding_json(report)))
    }

    fn finish(&mut self, out: &mut Out, ending: &Ending<'_>) -> io::Result<()> {
        out.line_as_is(&end_json(ending.totals, ending.stopped_by))
    }
}

/// `dfd` as users read it: the number, or "AT_FDCWD".
fn dfd_value(dfd: i32) -> Value {
    if dfd == AT_FDCWD {
        Value::from("AT_FDCWD")
    } else {
        Value::from(dfd)
    }
}

#[derive(Serialize)]
struct EventLine<'a> {
    r#type: &'static str,
    ts: String,
    pid: u32,
    tid: u32,
    comm: &'a str,
    ppid: u32,
    pcomm: &'a str,
    cgroup_id: u64,
    mntns: u32,
    uid: u32,
    syscall: &'static str,
    flags: Vec<String>,
    flags_raw: u64,
    dfd: Value,
    path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    path_hex: Option<String>,
    path_status: &'static str,
    abs_path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    abs_path_hex: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    abs_path_error: Option<&'a str>,
    ret: i64,
    errno: Option<String>,
    latency_ns: u64,
    /// Calls of the same series this line stands for (itself included).
    represents: u64,
    pod_uid: Option<&'a PodUid>,
    container_id: Option<&'a ContainerId>,
    path_area: Option<PathArea>,
    /// What the path is, as the diagnosis routes a failure by it.
    target: Target,
    actor: &'a Actor,
    r#match: &'a [MatchReason],
    /// How far the path speaks for the node: "node-namespace",
    /// "runtime-namespace", "node-directory", or "claim" (the caller's
    /// word alone, with why in `path_unproven`).
    path_proof: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    path_unproven: Option<&'static str>,
    /// The pod a claim's path named, never taken for the call's.
    #[serde(skip_serializing_if = "Option::is_none")]
    claimed_pod: Option<&'a PodUid>,
}

/// A path as JSON text, plus its exact bytes in hex when not UTF-8.
fn json_path(bytes: &[u8]) -> (String, Option<String>) {
    match std::str::from_utf8(bytes) {
        Ok(s) => (s.to_string(), None),
        Err(_) => (String::from_utf8_lossy(bytes).into_owned(), Some(hex::encode(bytes))),
    }
}

/// One event and what podstuck knows of it, as a JSON object (no newline).
pub fn event_json(event: &CallEvent, identity: &Identity) -> String {
    let (path, path_hex) = json_path(&event.path);
    let (abs_path, abs_path_hex, abs_path_error) = match &identity.abs_path {
        Ok(abs) => {
            let (text, hex) = json_path(abs);
            (Some(text), hex, None)
        }
        Err(why) => (None, None, Some(why.as_str())),
    };
    let line = EventLine {
        r#type: "event",
        ts: rfc3339(event.time),
        pid: event.pid,
        tid: event.tid,
        comm: &event.comm,
        ppid: event.ppid,
        pcomm: &event.pcomm,
        cgroup_id: event.cgroup_id,
        mntns: event.mntns,
        uid: event.uid,
        syscall: syscall_name(event.syscall),
        flags: event.flag_names(),
        flags_raw: event.flags,
        dfd: dfd_value(event.dfd),
        path,
        path_hex,
        path_status: event.path_status.as_str(),
        abs_path,
        abs_path_hex,
        abs_path_error,
        ret: event.ret,
        errno: event.errno().map(errno_name),
        latency_ns: event.latency_ns,
        represents: event.represents,
        pod_uid: identity.pod_uid.as_ref(),
        container_id: identity.container_id.as_ref(),
        path_area: identity.path_area,
        target: identity.target,
        actor: &identity.actor,
        r#match: &identity.matched,
        path_proof: identity.proof.name(),
        path_unproven: identity.proof.unproven().map(Unproven::name),
        claimed_pod: identity.claimed_pod.as_ref(),
    };
    serde_json::to_string(&line).expect("event serialises")
}

/// What the first line of a run says: when, on what, with which programs.
#[derive(Serialize, Debug, Clone)]
pub struct StartLine {
    pub r#type: &'static str,
    pub ts: String,
    pub version: &'static str,
    pub kernel: String,
    pub pid: u32,
    /// Kernel ids of the loaded programs, so anyone can check they are gone
    /// after podstuck exits.
    pub program_ids: Vec<u32>,
    /// Where they attached: "fentry" or "tracepoint".
    pub attach: &'static str,
    /// How a relative path's base directory is walked: "bpf_loop" or
    /// "unrolled" (kernels without bpf_loop, fewer levels).
    pub path_walk: &'static str,
    /// The kernel lockdown mode: "none", "integrity", "confidentiality", "unknown".
    pub lockdown: &'static str,
    /// What works less well on this kernel, in words.
    pub degraded: Vec<String>,
    /// Whether every call is streamed, or a budget per series (the rest
    /// carried by `represents`).
    pub every_call: bool,
    /// The filters in force: pods followed (empty = the whole node), the
    /// kubelet root used to recognise them, syscalls streamed, errors only.
    pub pods: Vec<PodUid>,
    pub kubelet_root: String,
    pub syscalls: Vec<&'static str>,
    pub errors_only: bool,
}

impl StartLine {
    /// The start line of `run`, traced as `tracing` says, as of now.
    pub fn new(run: &RunFacts, tracing: &Tracing) -> StartLine {
        StartLine {
            r#type: "start",
            ts: rfc3339(SystemTime::now()),
            version: run.version,
            kernel: run.kernel.clone(),
            pid: std::process::id(),
            program_ids: tracing.program_ids.clone(),
            attach: tracing.attach.as_str(),
            path_walk: tracing.path_walk.as_str(),
            lockdown: tracing.lockdown.as_str(),
            degraded: tracing.degraded.clone(),
            every_call: run.every_call,
            pods: run.pods.clone(),
            kubelet_root: run.kubelet_root.to_string_lossy().into_owned(),
            syscalls: run.syscall_names(),
            errors_only: run.errors_only,
        }
    }
}

pub fn start_json(start: &StartLine) -> String {
    serde_json::to_string(start).expect("start line serialises")
}

#[derive(Serialize)]
struct EndLine<'a> {
    r#type: &'static str,
    ts: String,
    events_seen: u64,
    events_lost: u64,
    /// Of `events_lost`, the process lifecycle's records.
    lifecycle_lost: u64,
    /// The process lifecycle's records received, by kind (absent when none).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    lifecycle_seen: &'a BTreeMap<&'static str, u64>,
    /// With `--pod`, the pods' calls; else the node's.
    calls: BTreeMap<&'static str, u64>,
    /// With `--pod`, every call of the node.
    #[serde(skip_serializing_if = "Option::is_none")]
    node_calls: Option<u64>,
    calls_without_entry: u64,
    entries_not_stored: u64,
    paths_unreadable: u64,
    records_undecodable: u64,
    calls_outside_series: u64,
    /// Execs of the node's CNI plugin files set aside as no runtime's
    /// work, by reason (absent when none).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    lifecycle_dropped: &'a BTreeMap<String, u64>,
    /// Failed calls whose path was the caller's word alone (made where it
    /// is not the node's: a pod's own mount namespace), set aside, by
    /// reason (absent when none).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    claims_set_aside: &'a BTreeMap<String, u64>,
    /// Calls whose unproven path named another pod than the caller's.
    claims_naming_another_pod: u64,
    /// Times the rings' reader found a queue full.
    queue_full: u64,
    /// Filesystems avoided at the end (a read there did not return).
    avoided_mounts: Vec<AvoidedLine>,
    /// Avoided filesystems that answered again.
    mounts_recovered: u64,
    /// Node reads that failed, by kind (absent when none).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    node_reads_failed: &'a BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stopped_by: Option<&'a str>,
}

/// A filesystem avoided at the end, in the closing line.
#[derive(Serialize)]
struct AvoidedLine {
    #[serde(serialize_with = "crate::words::serialize_path")]
    mount_point: Vec<u8>,
    fstype: String,
    since: String,
    readers: usize,
}

/// A finding as a JSON object: its line in `--json`, or an entry of the
/// current findings (`--listen`'s `/findings`), which also names the node.
#[derive(Serialize)]
pub struct FindingLine<'a> {
    r#type: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<&'a str>,
    #[serde(flatten)]
    finding: &'a Finding,
}

impl<'a> FindingLine<'a> {
    /// A finding as it stands now on `node`.
    pub fn current(finding: &'a Finding, node: &'a str) -> FindingLine<'a> {
        FindingLine { r#type: "finding", node: Some(node), finding }
    }
}

/// A finding as one JSON object: `"type":"finding"` when first told,
/// `"finding-update"` for later revisions of the same `id`.
pub fn finding_json(report: &Report) -> String {
    serde_json::to_string(&finding_line(report)).expect("finding serialises")
}

/// The same object as a JSON value, made without printing it: what a
/// record keeps of each finding told, and what replay compares.
pub fn finding_value(report: &Report) -> Value {
    serde_json::to_value(finding_line(report)).expect("finding serialises")
}

fn finding_line(report: &Report) -> FindingLine<'_> {
    let r#type = match report {
        Report::New(_) => "finding",
        Report::Update(_) => "finding-update",
    };
    FindingLine { r#type, node: None, finding: report.finding() }
}

/// The closing line: what was seen, what was lost, every call counted.
pub fn end_json(totals: &RunTotals, stopped_by: Option<&str>) -> String {
    let line = EndLine {
        r#type: "end",
        ts: rfc3339(SystemTime::now()),
        events_seen: totals.events_seen,
        events_lost: totals.events_lost,
        lifecycle_lost: totals.lifecycle_lost,
        lifecycle_seen: &totals.lifecycle_seen,
        calls: calls_by_name(totals),
        node_calls: totals.node_calls(),
        calls_without_entry: totals.calls_without_entry,
        entries_not_stored: totals.entries_not_stored,
        paths_unreadable: totals.paths_unreadable,
        records_undecodable: totals.records_undecodable,
        calls_outside_series: totals.calls_outside_series,
        lifecycle_dropped: &totals.lifecycle_dropped,
        claims_set_aside: &totals.claims_set_aside,
        claims_naming_another_pod: totals.claims_naming_another_pod,
        queue_full: totals.queue_full,
        avoided_mounts: totals
            .node_reads
            .avoided
            .iter()
            .map(|a| AvoidedLine {
                mount_point: a.mount_point.clone(),
                fstype: a.fstype.clone(),
                since: rfc3339(a.since),
                readers: a.readers,
            })
            .collect(),
        mounts_recovered: totals.node_reads.recovered_total,
        node_reads_failed: &totals.node_reads.failed,
        stopped_by,
    };
    serde_json::to_string(&line).expect("end line serialises")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::print::tests::{event, identity};
    use crate::words::escape_path;
    use podstuck_common::Syscall;

    fn json(event: &CallEvent) -> String {
        event_json(event, &identity(event))
    }

    #[test]
    fn json_has_every_documented_field() {
        let line = json(&event(Syscall::Unlinkat, -16, 0x200, b"/var/lib/kubelet/pods/x"));
        let v: Value = serde_json::from_str(&line).unwrap();
        for key in [
            "type",
            "ts",
            "pid",
            "tid",
            "comm",
            "ppid",
            "pcomm",
            "cgroup_id",
            "mntns",
            "uid",
            "syscall",
            "flags",
            "dfd",
            "path",
            "ret",
            "errno",
            "latency_ns",
            "represents",
            "abs_path",
            "pod_uid",
            "container_id",
            "actor",
            "match",
        ] {
            assert!(v.get(key).is_some(), "missing {key} in {line}");
        }
        assert_eq!(v["type"], "event");
        assert_eq!(v["syscall"], "unlinkat");
        assert_eq!(v["flags"], serde_json::json!(["AT_REMOVEDIR"]));
        assert_eq!(v["dfd"], "AT_FDCWD");
        assert_eq!(v["errno"], "EBUSY");
        assert_eq!(v["ret"], -16);
        assert_eq!(v["latency_ns"], 5000);
        assert_eq!(v["path"], "/var/lib/kubelet/pods/x");
        assert!(v.get("path_hex").is_none());
        assert_eq!(v["abs_path"], "/var/lib/kubelet/pods/x");
        assert_eq!(v["pod_uid"], "1b2c3d4e-0000-4000-8000-00000000000a");
        assert_eq!(v["container_id"], Value::Null);
        assert_eq!(v["path_area"], "volume");
        assert_eq!(v["actor"]["role"], "kubelet");
        assert_eq!(v["actor"]["comm"], "rmrf");
        assert_eq!(v["actor"]["parent"], "bash");
        assert_eq!(v["actor"]["exe"], "/usr/bin/kubelet");
        assert_eq!(v["match"], serde_json::json!(["path"]));
        // RFC 3339 with nanoseconds, UTC.
        let ts = v["ts"].as_str().unwrap();
        assert!(ts.ends_with('Z') && ts.len() == "2026-01-01T00:00:00.000000000Z".len(), "{ts}");
        assert!(humantime::parse_rfc3339(ts).is_ok());
    }

    #[test]
    fn success_has_null_errno_and_numeric_dfd() {
        let mut e = event(Syscall::Unlinkat, 0, 0, b"f");
        e.dfd = 7;
        let v: Value = serde_json::from_str(&json(&e)).unwrap();
        assert_eq!(v["errno"], Value::Null);
        assert_eq!(v["abs_path"], Value::Null, "relative path, no base directory");
        assert!(v["abs_path_error"].is_string());
        assert_eq!(v["dfd"], 7);
        assert_eq!(v["flags"], serde_json::json!([]));
    }

    #[test]
    fn non_utf8_paths_are_kept_exactly() {
        let raw = b"/tmp/a\xffb\nc";
        let v: Value = serde_json::from_str(&json(&event(Syscall::Unlink, 0, 0, raw))).unwrap();
        assert_eq!(v["path_hex"], hex::encode(raw));
        assert_eq!(v["abs_path_hex"], hex::encode(raw));
        assert_eq!(escape_path(raw), "/tmp/a\\xffb\\nc");
        assert_eq!(escape_path("dir with space/é\\".as_bytes()), "dir with space/é\\\\");
    }

    #[test]
    fn end_line_counts_everything() {
        let mut totals = RunTotals { events_seen: 3, events_lost: 2, ..Default::default() };
        totals.calls.insert(Syscall::Rmdir, 5);
        let v: Value = serde_json::from_str(&end_json(&totals, Some("SIGINT"))).unwrap();
        assert_eq!(v["type"], "end");
        assert_eq!(v["events_seen"], 3);
        assert_eq!(v["events_lost"], 2);
        assert_eq!(v["calls"]["rmdir"], 5);
        assert_eq!(v["stopped_by"], "SIGINT");
        assert!(v.get("node_calls").is_none(), "the whole node: its calls are the calls");
        assert_eq!(v["lifecycle_lost"], 0);
        assert!(v.get("lifecycle_seen").is_none(), "no lifecycle record came");
        totals.lifecycle_lost = 1;
        totals.lifecycle_seen = BTreeMap::from([("exit", 7), ("signal", 8)]);
        let v: Value = serde_json::from_str(&end_json(&totals, None)).unwrap();
        assert_eq!((v["lifecycle_lost"].as_u64(), v["lifecycle_seen"]["exit"].as_u64()), (Some(1), Some(7)));
        totals.pods_calls = Some(BTreeMap::from([(Syscall::Rmdir, 1)]));
        let v: Value = serde_json::from_str(&end_json(&totals, None)).unwrap();
        assert_eq!((v["calls"]["rmdir"].as_u64(), v["node_calls"].as_u64()), (Some(1), Some(5)));
    }
}
