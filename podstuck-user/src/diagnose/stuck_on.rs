//! What a thread stuck in the kernel waits on, shared by hung-call (a
//! removal or unmount in flight) and unkillable-task (a task that outlived
//! SIGKILL): a FUSE connection whose server does not answer, or a network
//! filesystem's server. Told from the thread's own mount namespace, never
//! from the node's when the thread lives elsewhere: a pod's FUSE mount is
//! not the node's only FUSE mount, and aborting the wrong connection or
//! force-unmounting the wrong mount breaks whoever uses it.
//!
//! Or a block device that will never answer: a multipath map with no
//! path left that queues I/O (`queue_if_no_path`), proven by the device
//! mapper's own table and status.
//!
//! A connection is proven the one a thread waits on when the kernel counts
//! requests waiting on it (fusectl's `waiting`) and on no other FUSE
//! connection of the thread's namespace; a FUSE server is proven the one
//! serving it when it is the only process on the node with /dev/fuse open
//! (a live connection's device is held open by its server). Anything less
//! is said as what it is, with no abort and no signal.

use super::shell::{kill_if_same, unmount_lazily, write_file};
use super::{shown, Confidence, Finding};
use crate::event::ProcessStart;
use crate::inspect::device_mapper::Multipath;
use crate::inspect::{MapperDevice, Mount, MountNamespace, NodeInspector, Probe, TaskState};
use crate::words::shell_word;

/// Where fusectl is mounted on nodes: the connections' control files.
pub const FUSECTL: &str = "/sys/fs/fuse/connections";

pub fn is_fuse(m: &Mount) -> bool {
    m.fstype == "fuse" || m.fstype.starts_with("fuse.") || m.fstype == "fuseblk"
}

pub fn is_network_fs(m: &Mount) -> bool {
    m.fstype.starts_with("nfs") || m.fstype == "cifs" || m.fstype == "smb3" || m.fstype == "ceph"
}

/// The FUSE connections of a namespace's table, each once (a connection
/// mounted at several places is one connection).
pub fn fuse_mounts(mounts: &[Mount]) -> Vec<&Mount> {
    let mut seen = std::collections::BTreeSet::new();
    mounts.iter().filter(|m| is_fuse(m) && seen.insert(m.kernel_dev())).collect()
}

/// What the kernel says of the FUSE connections a thread may wait on.
pub enum FuseWait<'m> {
    /// Requests wait on this connection, and on no other of them.
    Proven(&'m Mount, u64),
    /// Not proven: each candidate with what its count said.
    Unproven(Vec<(&'m Mount, Probe<u64>)>),
}

/// Which of `candidates` (FUSE mounts of the waiting thread's namespace)
/// the thread waits on, by the kernel's count of each connection's
/// waiting requests.
pub fn fuse_wait<'m>(node: &mut dyn NodeInspector, candidates: &[&'m Mount]) -> FuseWait<'m> {
    let counts: Vec<(&Mount, Probe<u64>)> =
        candidates.iter().map(|m| (*m, node.fuse_waiting(m.kernel_dev()))).collect();
    let waiting: Vec<&(&Mount, Probe<u64>)> = counts.iter().filter(|(_, n)| n.as_ref().is_ok_and(|n| *n > 0)).collect();
    match waiting.as_slice() {
        [(m, Ok(n))] if counts.iter().all(|(_, c)| c.is_ok()) => FuseWait::Proven(m, *n),
        _ => FuseWait::Unproven(counts),
    }
}

/// A wait on FUSE mount `m`, its connection proven (by the kernel's count
/// of its waiting `requests`; None: by the path of a call the node made,
/// where fusectl cannot be read): how it stands with its server, and the
/// fix that aborts the connection (fusectl's `abort`, a control file of
/// the kernel's, the same from every namespace: printed for the node's,
/// mounting fusectl first where the node has not). `waiting` says who
/// waits since when.
pub fn on_fuse(
    f: &mut Finding,
    node: &mut dyn NodeInspector,
    (ns, m): (&MountNamespace, &Mount),
    requests: Option<u64>,
    path: &[u8],
    waiting: &str,
) {
    let connection = m.kernel_dev();
    f.confidence = Confidence::Confirmed;
    f.evidence(
        "mountinfo",
        format!(
            "{} is on a FUSE mount at {} ({}, connection {connection})",
            shown(path),
            shown(&m.mount_point),
            m.fstype
        ),
    );
    if let Some(requests) = requests {
        f.evidence(
            format!("{FUSECTL}/{connection}/waiting"),
            format!("{requests} request(s) wait for an answer on connection {connection}, and none on another FUSE connection the thread can reach"),
        );
    }
    let servers = node.fuse_servers();
    for s in &servers {
        f.evidence("/proc/*/fd", format!("FUSE server pid {} ({}) is {}", s.pid, s.comm, s.state_words()));
    }
    // A live connection's device is held open by its server: the only
    // process holding /dev/fuse on the node is this connection's.
    let server: Option<&TaskState> = match servers.as_slice() {
        [only] => Some(only),
        _ => None,
    };
    let server_words = match (server, servers.len()) {
        (Some(s), _) if matches!(s.state, 'T' | 't') => format!("its FUSE server pid {} ({}) is stopped", s.pid, s.comm),
        (Some(_), _) => "its FUSE server does not answer".to_string(),
        (None, 0) => "no process has /dev/fuse open: the FUSE server is gone".to_string(),
        (None, n) => format!(
            "its FUSE server does not answer ({n} processes have /dev/fuse open, and which of them serves this connection cannot be told apart)"
        ),
    };
    f.summary = format!("{waiting}: {server_words}, so every call on {} waits.", shown(&m.mount_point));
    let abort = write_file("1", format!("{FUSECTL}/{connection}/abort").as_bytes());
    let fusectl = node.host_mounts().map(|m| m.iter().any(|m| m.fstype == "fusectl")).unwrap_or(true);
    f.fix = match fusectl {
        true => abort,
        false => format!("mount -t fusectl fusectl {FUSECTL} && {abort}"),
    };
    if let Some(s) = server.filter(|s| matches!(s.state, 'T' | 't')) {
        let start = node.process(s.pid, 0).ok().flatten().map(|p| ProcessStart(p.start));
        if let Some(resume) = kill_if_same("CONT", s.pid, start) {
            f.advice.push(format!("or, if the server should live on, continue it: {resume}"));
        }
    }
    if let Ok(unmount) = fix_in(ns, unmount_lazily(&m.mount_point)) {
        f.advice.push(format!("after aborting, unmount it where it is mounted: {unmount}"));
    }
}

/// A wait on FUSE that no single connection is proven to hold: the
/// candidates and what their counts say, the commands to tell them apart,
/// and no abort.
pub fn on_unproven_fuse(f: &mut Finding, candidates: &[(&Mount, Probe<u64>)], waiting: &str, stack_file: &str) {
    f.confidence = Confidence::Likely;
    let words: Vec<String> = candidates
        .iter()
        .map(|(m, n)| {
            let count = match n {
                Ok(n) => format!("{n} waiting"),
                Err(why) => format!("waiting unknown: {}", why.said()),
            };
            format!("{} (connection {}, {count})", shell_word(&m.mount_point), m.kernel_dev())
        })
        .collect();
    f.summary = match words.is_empty() {
        true => format!("{waiting}: it waits on a FUSE server, on no FUSE mount of its own mount namespace."),
        false => format!(
            "{waiting}: it waits on a FUSE server, and which connection cannot be proven: {}.",
            words.join(", ")
        ),
    };
    f.fix = format!("cat {FUSECTL}/*/waiting; cat {stack_file}");
    f.advice.push(format!(
        "abort the connection whose waiting count is not 0, once you know it is the one: echo 1 > {FUSECTL}/N/abort (fusectl mounted at {FUSECTL}: mount -t fusectl fusectl {FUSECTL})"
    ));
}

/// A wait on network filesystem mount `m` of namespace `ns`: the server
/// does not answer; the fix forces it off there.
pub fn on_network_fs(f: &mut Finding, ns: &MountNamespace, m: &Mount, waiting: &str) {
    f.confidence = Confidence::Confirmed;
    f.evidence(
        "mountinfo",
        format!("{} mount of {} at {}, in {}", m.fstype, m.source, shown(&m.mount_point), ns.words()),
    );
    f.summary = format!("{waiting}: the {} server {} does not answer.", m.fstype, m.source);
    match fix_in(ns, super::shell::unmount_forced(&m.mount_point)) {
        Ok(fix) => f.fix = fix,
        Err(why) => f.advice.push(why),
    }
    f.advice.push(format!("better: bring {} back; the calls then complete by themselves", m.source));
}

/// `fix` for namespace `ns`: as it is on the host's; through a
/// start-checked nsenter into another's; Err saying why not.
pub fn fix_in(ns: &MountNamespace, fix: String) -> Result<String, String> {
    if ns.host {
        return Ok(fix);
    }
    super::shell::in_mount_namespace_of(ns.member, ns.member_start, &fix).ok_or_else(|| {
        format!(
            "no fix is printed: when pid {}, through which {} would be entered, started could not be read",
            ns.member,
            ns.words()
        )
    })
}

/// A multipath map that lost every path and queues its I/O for ever (the
/// device mapper's table and status say so), under a filesystem: its
/// device itself, or the map its device is made on (a partition mapping
/// kpartx made, an LVM volume), `on` then.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostMap {
    pub map: MapperDevice,
    pub multipath: Multipath,
    pub on: Option<MapperDevice>,
}

/// The lost multipath map local filesystem `m` sits on, if any: whatever
/// waits on that filesystem's device waits until a path comes back.
pub fn lost_multipath(node: &mut dyn NodeInspector, m: &Mount) -> Option<LostMap> {
    let device = node.device_mapper(m.dev.0, m.dev.1).ok()??;
    if let Some(multipath) = device.multipath().filter(Multipath::queues_for_ever) {
        return Some(LostMap { map: device, multipath, on: None });
    }
    for (_, (major, minor)) in device.slaves.iter().take(4) {
        let Ok(Some(under)) = node.device_mapper(*major, *minor) else { continue };
        if let Some(multipath) = under.multipath().filter(Multipath::queues_for_ever) {
            return Some(LostMap { map: under, multipath, on: Some(device) });
        }
    }
    None
}

/// A lost multipath map in words: what it is ("a multipath map that lost
/// its paths (...) and queues I/O until one comes back"), its evidence,
/// the fix that fails its queued I/O, and what that costs; `path` is what
/// works again once it did (an unmount, a removal).
pub fn on_lost_multipath(f: &mut Finding, lost: &LostMap, works_again: &str) -> String {
    let LostMap { map, multipath, on } = lost;
    f.confidence = Confidence::Confirmed;
    if let Some(on) = on {
        f.evidence(
            "/sys/dev/block",
            format!(
                "{}:{} is device-mapper device {}, made on {} (its slaves/)",
                on.dev.0,
                on.dev.1,
                on.words(),
                map.words()
            ),
        );
    }
    f.evidence(
        "/sys/dev/block",
        format!("{}:{} is device-mapper device {}, uuid {}", map.dev.0, map.dev.1, map.words(), map.uuid),
    );
    for target in &map.targets {
        f.evidence("dmsetup table", format!("{} {}", target.kind, target.table));
        f.evidence("dmsetup status", format!("{} {}", target.kind, target.status));
    }
    let paths: Vec<String> =
        multipath.paths.iter().map(|p| format!("{} failed ({} failure(s))", p.device, p.fail_count)).collect();
    let paths = match paths.is_empty() {
        true => "it has no path at all".to_string(),
        false => format!("every path failed: {}", paths.join(", ")),
    };
    f.detail("device", map.device.clone());
    f.detail("map", map.name.clone());
    f.detail("paths_failed", multipath.paths.len());
    f.fix = super::shell::multipath_fail_queued(&map.name);
    f.advice.push(format!(
        "what the fix costs: the map stops queueing, so the I/O waiting in it fails at once and every later I/O fails until a path is back: writes that were not yet on the array are lost, and the processes in D get EIO and end; then {works_again}"
    ));
    f.advice.push(format!(
        "if a path can come back (the array, a cable, an iSCSI session: multipath -ll {}, iscsiadm -m session -P 1), bring it back instead: the queued I/O then completes and nothing is lost",
        shell_word(map.name.as_bytes())
    ));
    f.advice.push("killing the processes in D does nothing (they wait in the kernel), and umount -l only hides the mount: the device and its queued I/O stay".into());
    // A partition mapping, an LVM volume or a dm-crypt mapping on the map
    // keeps it open: the map's own removal (multipath -f, the CSI driver's
    // detach) fails until they go, children first.
    for h in &map.holders {
        f.evidence("/sys/block", format!("{} is stacked on {} and keeps it open", h.words(), map.words()));
    }
    let stacked: Vec<&String> = map.holders.iter().filter_map(|h| h.mapper_name.as_ref()).collect();
    if !stacked.is_empty() {
        let removals = super::shell::one_after_another(stacked.iter().map(|n| super::shell::remove_mapping(n)));
        f.detail("stacked", stacked.iter().map(|n| n.to_string()).collect::<Vec<_>>());
        f.advice.push(format!(
            "what is stacked on the map (a partition mapping, an LVM volume, a dm-crypt mapping) keeps it open, so the map cannot be removed (multipath -f, the CSI driver's detach) until it goes: once nothing uses it, {removals}; then {}",
            super::shell::remove_mapping(&map.name)
        ));
    }
    let map_is =
        format!("a multipath map that lost its paths ({paths}) and queues I/O until one comes back (queue_if_no_path)");
    match on {
        Some(on) => format!("{} is made on {}, {map_is}", on.words(), map.words()),
        None => format!("{} is {map_is}", map.words()),
    }
}
