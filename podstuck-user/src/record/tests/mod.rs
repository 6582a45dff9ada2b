//! Record, then replay: the same findings; and a record from anywhere, cut
//! or damaged or not a record at all, read without a panic. This room holds
//! what the tests share (a live run on a fake node, an incident, records
//! written by hand); the tests are in the rooms below.

mod damage;
mod format;
mod golden;
mod replays;
mod roundtrip;

use std::cell::RefCell;
use std::io::{self, Write};
use std::rc::Rc;

use flate2::write::GzEncoder;
use flate2::Compression;
use podstuck_common::Syscall;
use proptest::prelude::*;

use super::*;
use crate::diagnose::fake::{
    backup_in_csi_mount, call_by, cgroup_with_a_live_sleep, csi_mount, pod, rmdir, t, task, umount, Call, FakeNode, POD,
};
use crate::diagnose::{CallInFlight, Confidence, Diagnoser, Kind, Review, Status};
use crate::event::{BaseDir, Flight, NoPath, PathStatus, AT_FDCWD};
use crate::identify::actor::Role;
use crate::identify::pod::{ContainerId, PathArea};
use crate::identify::{Actor, MatchReason};
use crate::inspect::{CgroupState, DirSample, HoldKind, Mount, MountCopy, MountHolder, Unreadable};
use crate::test_support::TempDir;

/// A writer the test keeps a hold of, to read what the recorder wrote.
#[derive(Clone, Default)]
struct Shared(Rc<RefCell<Vec<u8>>>);

impl Shared {
    fn bytes(&self) -> Vec<u8> {
        self.0.borrow().clone()
    }
}

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A disk that fills up after `room` bytes.
struct FillsUp {
    kept: Shared,
    room: usize,
}

impl Write for FillsUp {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = buf.len().min(self.room);
        if n == 0 && !buf.is_empty() {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        self.room -= n;
        self.kept.write(&buf[..n])
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

const CG: &str = "/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod5f1c2a9e_0000_4000_8000_000000000001.slice";

fn header() -> RecordHeader {
    let options = DiagnoseOptions {
        hung_after: Duration::from_secs(5),
        node_name: "node-1".into(),
        host_mntns: 4026531840,
        in_container: false,
        pods: Vec::new(),
    };
    let mut header = RecordHeader::new("6.1.0-test", &options);
    header.started = t(0.0);
    header
}

/// A live run as `watch` makes it: every call to the diagnoser and the
/// recorder, a review every half second with the node recorded.
struct Live<W: Write> {
    diagnoser: Diagnoser,
    node: FakeNode,
    recorder: Recorder<W>,
    told: Vec<Report>,
    stopped: Vec<RecordStopped>,
}

impl<W: Write> Live<W> {
    fn new(node: FakeNode, writer: W) -> Live<W> {
        let header = header();
        Live {
            diagnoser: Diagnoser::new(&header.diagnose),
            node,
            recorder: Recorder::new(writer, "incident.podstuck", &header).unwrap(),
            told: Vec::new(),
            stopped: Vec::new(),
        }
    }

    fn call(&mut self, c: &Call) {
        self.diagnoser.observe(&c.event, &c.identity);
        if let Err(e) = self.recorder.add_call(&c.event, &c.identity) {
            self.stopped.push(e);
        }
    }

    fn review(&mut self, at: f64, in_flight: &[CallInFlight]) {
        let mut recording = RecordingNode::new(&mut self.node);
        let reports = self.diagnoser.review(&mut Review { now: t(at), in_flight, node: &mut recording });
        let asked = recording.into_asked();
        if let Err(e) = self.recorder.add_review(t(at), in_flight, &[], asked, &reports, false) {
            self.stopped.push(e);
        }
        self.told.extend(reports);
    }

    fn finish(mut self, at: f64) -> (Vec<Report>, Result<Saved, RecordStopped>) {
        let untold = self.diagnoser.untold();
        let totals = RunTotals { events_seen: 40, events_lost: 3, ..Default::default() };
        let saved = self.recorder.finish(t(at), &untold, Some(&totals));
        self.told.extend(untold);
        (self.told, saved)
    }
}

fn hung_flight(started: f64) -> CallInFlight {
    let path = Some(b"/mnt/fuse/a".to_vec());
    CallInFlight {
        flight: Flight {
            tid: 4321,
            pid: 4321,
            syscall: Syscall::Unlinkat,
            flags: 0,
            dfd: AT_FDCWD,
            started: t(started),
            path: path.clone(),
        },
        path,
        pod_uid: Some(pod()),
        actor: Actor {
            comm: "kubelet".into(),
            exe: None,
            parent: "systemd".into(),
            role: Role::Kubelet,
            description: "kubelet".into(),
        },
        mntns: 4026531840,
        proof: crate::identify::path_proof::PathProof::NodeNamespace,
    }
}

fn incident_node() -> FakeNode {
    let mut node = FakeNode::with_mounts(&[
        &format!("50 {} tmpfs", csi_mount()),
        "70 /sys/fs/cgroup cgroup2",
        "77 /mnt/fuse fuse.sshfs",
        "20 /sys/fs/fuse/connections fusectl",
    ]);
    node.holders = vec![backup_in_csi_mount()];
    node.cgroups.insert(CG.into(), cgroup_with_a_live_sleep());
    let mut stuck = task(4321, "kubelet", 'S');
    stuck.wchan = Some("request_wait_answer".into());
    node.tasks.insert(4321, stuck);
    node.fuse.push(task(900, "sshfs", 'T'));
    node
}

/// P1 (kubelet on its backoff against a mounted CSI volume, a holder that
/// leaves, then the volume unmounted), P5 (a live task in the pod's cgroup,
/// on kubelet's 2 s housekeeping) and P6 (an unlink hung on a stopped FUSE
/// server) in one run of 40 s.
fn incident<W: Write>(writer: W) -> (Vec<Report>, Result<Saved, RecordStopped>) {
    let mut live = Live::new(incident_node(), writer);
    let m = csi_mount();
    let mut calls: Vec<Call> =
        [0.0, 0.5, 1.5, 3.5, 7.5, 15.5, 31.5].iter().map(|s| rmdir(*s, "kubelet", &m, -libc::EBUSY)).collect();
    calls.push(umount(0.2, "umount", &m, -libc::EBUSY));
    calls.extend([1.0, 3.0, 5.0, 7.0, 9.0].iter().map(|s| rmdir(*s, "kubelet", CG, -libc::EBUSY)));
    calls.push(rmdir(36.0, "kubelet", &m, 0));
    calls.sort_by_key(|c| c.event.time);
    let mut next = calls.iter().peekable();
    for tick in 1..=80 {
        let at = tick as f64 * 0.5;
        while let Some(c) = next.next_if(|c| c.event.time <= t(at)) {
            live.call(c);
        }
        if at == 20.0 {
            // The holder goes away: evidence changes, an update is told.
            live.node.holders.clear();
        }
        let flights = if (10.0..30.0).contains(&at) { vec![hung_flight(10.0)] } else { vec![] };
        live.review(at, &flights);
    }
    live.finish(40.2)
}

pub(crate) fn recorded_incident() -> (Vec<Report>, Vec<u8>) {
    let out = Shared::default();
    let (told, saved) = incident(out.clone());
    assert_eq!(saved.unwrap(), Saved { entries: 80 + 14, complete: true });
    (told, out.bytes())
}

fn kinds(reports: &[Report]) -> Vec<(Kind, u32, bool)> {
    reports.iter().map(|r| (r.finding().kind, r.finding().revision, matches!(r, Report::New(_)))).collect()
}

/// The entries of a record, one JSON text each.
fn entry_lines(bytes: &[u8]) -> Vec<String> {
    let header_end = bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(1).unwrap().0 + 1;
    let mut text = String::new();
    io::Read::read_to_string(&mut flate2::read::MultiGzDecoder::new(&bytes[header_end..]), &mut text).unwrap();
    text.lines().map(str::to_string).collect()
}

fn written_by_hand(head: &str, body: &str) -> Vec<u8> {
    let mut record = format!("podstuck-record 1\n{head}\n").into_bytes();
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(body.as_bytes()).unwrap();
    record.extend(gz.finish().unwrap());
    record
}

const HEAD: &str = r#"{"podstuck":"0.1.0","node":"n","kernel":"k","started":"2027-01-15T08:00:00Z","kubelet_root":"/var/lib/kubelet","hung_after":"5s","node_name":"n","host_mntns":1}"#;

fn error_of(record: &[u8]) -> String {
    match replay_findings(record) {
        Err(e) => e.to_string(),
        Ok(found) => panic!("read as a record: {found:?}"),
    }
}
