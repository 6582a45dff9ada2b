//! Record, then replay: the same findings; and a record from anywhere, cut
//! or damaged or not a record at all, read without a panic.

use std::cell::RefCell;
use std::io::{self, Write};
use std::rc::Rc;

use flate2::write::GzEncoder;
use flate2::Compression;
use podstuck_common::Syscall;
use proptest::prelude::*;

use super::*;
use crate::diagnose::fake::{call_by, csi_mount, pod, rmdir, t, task, umount, Call, FakeNode, POD};
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
    }
}

fn incident_node() -> FakeNode {
    let mut node = FakeNode::with_mounts(&[
        &format!("50 {} tmpfs", csi_mount()),
        "70 /sys/fs/cgroup cgroup2",
        "77 /mnt/fuse fuse.sshfs",
        "20 /sys/fs/fuse/connections fusectl",
    ]);
    node.holders = vec![MountHolder {
        pid: 4242,
        comm: "backup".into(),
        how: HoldKind::Cwd,
        path: csi_mount().into_bytes(),
        mntns: 1,
        other_namespace: false,
        owner: None,
    }];
    node.cgroups.insert(
        CG.into(),
        CgroupState {
            version: 2,
            tasks: vec![task(999, "sleep", 'S')],
            children: vec![],
            populated: Some(true),
            frozen: Some(false),
            has_kill: true,
        },
    );
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

fn recorded_incident() -> (Vec<Report>, Vec<u8>) {
    let out = Shared::default();
    let (told, saved) = incident(out.clone());
    assert_eq!(saved.unwrap(), Saved { entries: 80 + 14, complete: true });
    (told, out.bytes())
}

fn kinds(reports: &[Report]) -> Vec<(Kind, u32, bool)> {
    reports.iter().map(|r| (r.finding().kind, r.finding().revision, matches!(r, Report::New(_)))).collect()
}

#[test]
fn a_recorded_incident_replays_to_the_same_findings() {
    let (live, bytes) = recorded_incident();
    // The incident is what it means to be: P1, P5 and P6, with updates.
    for kind in [Kind::VolumeStillMounted, Kind::CgroupBusy, Kind::HungCall] {
        assert!(
            live.iter().any(|r| r.finding().kind == kind && r.finding().confidence == Confidence::Confirmed),
            "{kind:?} in {:?}",
            kinds(&live)
        );
    }
    assert!(live.iter().any(|r| matches!(r, Report::Update(f) if f.status == Status::Resolved)), "{:?}", kinds(&live));
    let replayed = replay_findings(&bytes[..]).unwrap();
    assert_eq!(kinds(&replayed), kinds(&live));
    for (r, l) in replayed.iter().zip(&live) {
        let (r, l) = (r.finding(), l.finding());
        assert_eq!((&r.id, r.revision, &r.fix, &r.evidence), (&l.id, l.revision, &l.fix, &l.evidence));
    }
    assert_eq!(replayed, live);
    let p1 = replayed.iter().find(|r| r.finding().kind == Kind::VolumeStillMounted).unwrap().finding();
    assert_eq!(p1.fix, format!("umount {}", csi_mount()));
    assert!(
        p1.evidence.iter().any(|e| e.fact.contains("pid 4242 (backup) has its current directory at")),
        "{:?}",
        p1.evidence
    );
    let p5 = replayed.iter().find(|r| r.finding().kind == Kind::CgroupBusy).unwrap().finding();
    assert_eq!(p5.fix, format!("echo 1 > {CG}/cgroup.kill"));
}

#[test]
fn the_replay_checks_itself_against_what_the_live_run_told() {
    let (_, bytes) = recorded_incident();
    let mut told = 0;
    let summary = replay_record(&bytes[..], "incident.podstuck", &mut |_| told += 1).unwrap();
    assert_eq!((summary.calls, summary.reviews), (14, 80));
    assert!(summary.end.is_some() && summary.broken.is_none() && !summary.ends_early());
    assert_eq!(summary.differences, 0, "{:?}", summary.first_difference);
    assert_eq!(summary.not_in_record, 0, "{:?}", summary.first_not_in_record);
    assert_eq!(summary.end.as_ref().unwrap().totals.as_ref().unwrap().events_lost, 3);
    assert_eq!(summary.header.node, "node-1");
    assert_eq!(summary.header.diagnose.hung_after, Duration::from_secs(5));
    assert_eq!(summary.header.diagnose.host_mntns, 4026531840);
    assert!(told > 0);
    let json: serde_json::Value = serde_json::from_str(&replay::record_json("incident.podstuck", &summary)).unwrap();
    assert_eq!(
        (json["type"].as_str(), json["complete"].as_bool(), json["calls"].as_u64(), json["events_lost"].as_u64()),
        (Some("record"), Some(true), Some(14), Some(3))
    );
    let text = replay::record_text("incident.podstuck", &summary);
    assert!(text.starts_with("podstuck record incident.podstuck: node node-1, kernel 6.1.0-test, podstuck "), "{text}");
    assert!(text.contains("14 calls, 80 reviews; the whole node; the live run lost 3 events"), "{text}");
}

#[test]
fn a_replay_with_other_detectors_says_what_the_record_lacks() {
    // A record made by a podstuck whose detectors asked nothing of the node.
    let out = Shared::default();
    let mut recorder = Recorder::new(out.clone(), "old.podstuck", &header()).unwrap();
    let m = csi_mount();
    for c in [rmdir(0.0, "kubelet", &m, -libc::EBUSY), rmdir(0.5, "kubelet", &m, -libc::EBUSY)] {
        recorder.add_call(&c.event, &c.identity).unwrap();
    }
    recorder.add_review(t(1.0), &[], &[], Vec::new(), &[], false).unwrap();
    recorder.finish(t(1.5), &[], None).unwrap();
    let mut told = Vec::new();
    let summary = replay_record(&out.bytes()[..], "old.podstuck", &mut |r| told.push(r.clone())).unwrap();
    // P1 and P5 both read the mount table of an EBUSY rmdir; P1 resolves its path too.
    assert_eq!(summary.not_in_record, 3);
    assert_eq!(summary.first_not_in_record.as_deref(), Some("host_mounts"));
    // Unreadable mounts: P1 is told as unconfirmed, which the live run did not tell.
    assert_eq!(told.len(), 1);
    assert!(
        told[0].finding().evidence.iter().any(|e| e.fact.contains(NOT_IN_THE_RECORD)),
        "{:?}",
        told[0].finding().evidence
    );
    assert_eq!(summary.differences, 1);
    let first = summary.first_difference.unwrap();
    assert!(first.contains("the live run told nothing; this replay told volume-still-mounted:"), "{first}");
}

#[test]
fn unchanged_answers_are_written_once() {
    let (_, bytes) = recorded_incident();
    let mut asked = std::collections::BTreeMap::<&str, (usize, Vec<serde_json::Value>)>::new();
    let lines: Vec<serde_json::Value> = entry_lines(&bytes).iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    for question in lines.iter().filter_map(|l| l["review"]["asked"].as_array()).flatten() {
        let (method, body) = question.as_object().unwrap().iter().next().unwrap();
        let seen = asked.entry(method.as_str()).or_default();
        seen.0 += 1;
        if let Some(answer) = body.get("answer") {
            seen.1.push(answer.clone());
        }
    }
    let (times, written) = &asked["host_mounts"];
    assert!(
        *times > 10 && written.len() == 1,
        "the mount table never changed: asked {times} times, written {}",
        written.len()
    );
    // The holder left at 20 s: the answer is written again then, once.
    let (times, written) = &asked["mount_holders"];
    assert!(*times > 2, "{times}");
    assert_eq!(written.len(), 2);
    assert_eq!(written[0][0]["pid"], 4242);
    assert_eq!(written[1], serde_json::json!([]));
}

/// The entries of a record, one JSON text each.
fn entry_lines(bytes: &[u8]) -> Vec<String> {
    let header_end = bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(1).unwrap().0 + 1;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::MultiGzDecoder::new(&bytes[header_end..]), &mut text).unwrap();
    text.lines().map(str::to_string).collect()
}

#[test]
fn the_first_two_lines_say_what_a_record_is() {
    let (_, bytes) = recorded_incident();
    let text = String::from_utf8_lossy(&bytes);
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("podstuck-record 1"));
    let head: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(head["node"], "node-1");
    assert_eq!(head["kernel"], "6.1.0-test");
    assert_eq!(head["podstuck"], env!("CARGO_PKG_VERSION"));
    assert_eq!(head["started"], "2027-01-15T08:00:00.000000000Z");
    assert_eq!(head["hung_after"], "5s");
    assert_eq!(head["kubelet_root"], "/var/lib/kubelet");
    assert_eq!(head["host_mntns"], 4026531840u64);
}

/// Format 1 as written by hand: it must replay as long as podstuck reads
/// format 1. A field renamed or retyped in the record breaks this test:
/// keep the old name readable, or make it format 2.
#[test]
fn a_format_1_record_written_by_hand_still_replays() {
    let m = csi_mount();
    // The absolute path given, or left out as the path argument itself.
    let call = |at: u64, abs: &str| {
        format!(
            r#"{{"call":{{"event":{{"time":{at},"pid":100,"tid":100,"comm":"kubelet","ppid":1,"pcomm":"systemd","cgroup_id":1,"mntns":4026531840,"uid":0,"syscall":"unlinkat","flags":512,"dfd":-100,"path":"{m}","path_status":"whole","base":"not-needed","ret":-16,"latency_ns":20000}},"identity":{{{abs}"pod_uid":"{POD}","path_area":"volume","container_id":null,"actor":{{"comm":"kubelet","exe":null,"parent":"systemd","role":"kubelet","description":"kubelet"}},"matched":["path"]}}}}}}"#
        )
    };
    let mount = format!(
        r#"{{"id":50,"parent_id":1,"dev":[0,50],"root":"/","mount_point":"{m}","options":"rw,relatime","propagation":["shared:50"],"fstype":"tmpfs","source":"tmpfs","super_options":"rw"}}"#
    );
    let review = format!(
        r#"{{"review":{{"now":1800000001000000000,"in_flight":[],"asked":[{{"host_mounts":{{"answer":{{"ok":[{mount}]}}}}}},{{"mount_holders":{{"mount":{mount},"answer":[{{"pid":7,"comm":"sh","how":"cwd","path":{{"hex":"2f6dff"}},"mntns":1,"other_namespace":false}}]}}}}],"told":[]}}}}"#
    );
    let end = r#"{"end":{"ended":1800000002000000000,"entries":3,"totals":null,"untold":[]}}"#;
    let body = [
        call(1_800_000_000_000_000_000, &format!("\"abs_path\":\"{m}\",")),
        call(1_800_000_000_500_000_000, ""),
        review,
        end.to_string(),
    ]
    .join("\n")
        + "\n";
    let head = r#"{"podstuck":"0.1.0","node":"n","kernel":"k","started":"2027-01-15T08:00:00Z","kubelet_root":"/var/lib/kubelet","hung_after":"5s","node_name":"n","host_mntns":4026531840}"#;
    let record = written_by_hand(head, &body);
    let mut told = Vec::new();
    let summary = replay_record(&record[..], "hand.podstuck", &mut |r| told.push(r.clone())).unwrap();
    assert!(summary.broken.is_none() && summary.end.is_some(), "{:?}", summary.broken);
    // Only what a newer podstuck asks besides: P1 resolves the path it is given.
    assert_eq!(summary.not_in_record, 1, "{:?}", summary.first_not_in_record);
    assert!(
        summary.first_not_in_record.as_deref().is_some_and(|q| q.starts_with("resolved_path 100 ")),
        "{:?}",
        summary.first_not_in_record
    );
    assert_eq!(told.len(), 1);
    let f = told[0].finding();
    assert_eq!((f.kind, f.confidence), (Kind::VolumeStillMounted, Confidence::Confirmed));
    assert!(f.evidence.iter().any(|e| e.fact == "pid 7 (sh) has its current directory at /m\\xff"), "{:?}", f.evidence);
    // The hand-written run told nothing; the replay notices.
    assert_eq!(summary.differences, 1);
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

#[test]
fn what_is_not_a_record_is_said_so() {
    assert_eq!(error_of(b""), "the record is not a podstuck record: it is empty");
    assert_eq!(
        error_of(b"hello\nworld\n"),
        "the record is not a podstuck record: it does not begin with \"podstuck-record\""
    );
    assert_eq!(
        error_of(b"\x1f\x8b\x08\x00"),
        "the record is not a podstuck record: it does not begin with \"podstuck-record\""
    );
    assert_eq!(
        error_of(b"podstuck-record one\n"),
        "the record is not a podstuck record: its first line is not \"podstuck-record <format>\""
    );
    assert_eq!(error_of(b"podstuck-record 0\n{}\n"), "the record is not a podstuck record: format 0 does not exist");
    let newer = error_of(b"podstuck-record 2\n{\"podstuck\":\"9.1.0\",\"whatever\":1}\n\x00\x01");
    assert_eq!(
        newer,
        format!(
            "the record was written by a newer podstuck (podstuck 9.1.0, format 2); this one ({}) reads format 1: replay it with podstuck 9.1.0 or newer",
            env!("CARGO_PKG_VERSION")
        )
    );
    assert!(error_of(b"podstuck-record 7\n").contains("newer podstuck (format 7)"));
    assert!(error_of(b"podstuck-record 1\n").contains("header is corrupt: the record ends before it"));
    assert!(error_of(b"podstuck-record 1\n{\"podstuck\":\"0.1.0\"}\n").contains("header is corrupt: missing field"));
    assert!(error_of(format!("podstuck-record 1\n{}\n", HEAD.replace("5s", "soon")).as_bytes())
        .contains("header is corrupt: hung_after \"soon\""));
}

#[test]
fn a_corrupt_entry_is_named_and_what_came_before_is_replayed() {
    let m = csi_mount();
    let (_, bytes) = recorded_incident();
    let mut lines = entry_lines(&bytes);
    lines[30] = lines[30].replacen("\"now\":", "\"now\":\"soon\",\"x\":", 1);
    let broken = written_by_hand(HEAD, &(lines.join("\n") + "\n"));
    let mut told = 0;
    let summary = replay_record(&broken[..], "x.podstuck", &mut |_| told += 1).unwrap();
    let error = summary.broken.unwrap().to_string();
    assert!(error.starts_with("x.podstuck: entry 31 is corrupt: invalid type: string \"soon\""), "{error}");
    assert_eq!(summary.calls + summary.reviews, 30);
    assert!(told > 0, "the findings before entry 31 are told");
    // Whole entries but a checksum that does not match: said, after the replay.
    let mut altered = bytes.clone();
    let crc = altered.len() - 8;
    altered[crc] ^= 1;
    let mut told = 0;
    let summary = replay_record(&altered[..], "x.podstuck", &mut |_| told += 1).unwrap();
    assert_eq!(summary.entries(), 94);
    assert!(told > 0 && summary.end.is_none());
    let error = summary.broken.unwrap().to_string();
    assert!(error.starts_with("x.podstuck is damaged (corrupt gzip stream does not have a matching checksum): the findings replayed from it may be wrong"), "{error}");
    // Each way an entry can be wrong.
    let cases = [
        ("{\"call\":{\"event\":42}}\n".to_string(), "entry 1 is corrupt: invalid type"),
        ("{\"review\":{\"now\":1,\"in_flight\":[],\"asked\":[{\"host_mounts\":{}}],\"told\":[]}}\n".into(), "entry 1 is corrupt: the answer to host_mounts refers to an earlier one the record does not hold"),
        ("{\"end\":{\"ended\":1,\"entries\":5,\"untold\":[]}}\n".into(), "entry 1 is corrupt: the record's end counts 5 entries before it, but 0 were read"),
        ("{\"end\":{\"ended\":1,\"entries\":0,\"untold\":[]}}\n{\"end\":{}}\n".into(), "entry 2 is corrupt: there is data after the end of the record"),
        ("not json\n".into(), "entry 1 is corrupt: expected value at line 1 column 1"),
        ("{\"sneeze\":{}}\n".into(), "entry 1 is corrupt: unknown variant `sneeze`"),
        ("{\"review\":{\"now\":1,\"in_flight\":[],\"asked\":[{\"file_facts\":{\"path\":{\"hex\":\"2g\"},\"answer\":{\"unreadable\":\"x\"}}}],\"told\":[]}}\n".into(), "\"2g\" is not hex"),
        (format!("{{\"call\":{{\"event\":{{\"time\":1,\"pid\":1,\"tid\":1,\"comm\":\"k\",\"ppid\":1,\"pcomm\":\"s\",\"cgroup_id\":1,\"mntns\":1,\"uid\":0,\"syscall\":\"rmdir\",\"flags\":0,\"dfd\":-100,\"path\":\"{m}\",\"path_status\":\"whole\",\"base\":\"not-needed\",\"ret\":0,\"latency_ns\":1}},\"identity\":{{\"pod_uid\":\"NOT-A-UID\",\"path_area\":null,\"container_id\":null,\"actor\":{{\"comm\":\"k\",\"exe\":null,\"parent\":\"s\",\"role\":\"kubelet\",\"description\":\"k\"}},\"matched\":[]}}}}}}\n"), "is not a pod UID"),
    ];
    for (body, said) in cases {
        let error = error_of(&written_by_hand(HEAD, &body));
        assert!(error.contains(said), "{body}: {error}");
    }
}

/// Reads a record to its end: entries read, whether complete, or the error.
fn read_all(bytes: &[u8]) -> Result<(u64, bool), RecordError> {
    let mut reader = RecordReader::open(bytes, "cut.podstuck")?;
    let mut complete = false;
    while let Some(entry) = reader.next_entry()? {
        complete = matches!(entry, Entry::End(_));
    }
    assert_eq!(complete, !reader.ends_early());
    Ok((reader.entries(), complete))
}

#[test]
fn a_record_cut_anywhere_replays_what_it_holds() {
    let (live, bytes) = recorded_incident();
    let header_end = bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(1).unwrap().0 + 1;
    let mut entries_before = 0;
    for cut in 0..=bytes.len() {
        match read_all(&bytes[..cut]) {
            Ok((entries, complete)) => {
                assert!(cut >= header_end, "a cut header read as a record at {cut}");
                // Only the gzip stream's last block and trailer may be
                // missing from a record read to its end.
                assert!(!complete || cut + 16 >= bytes.len(), "cut at {cut} of {}", bytes.len());
                assert!(entries >= entries_before, "fewer entries read at a longer cut {cut}");
                entries_before = entries;
            }
            Err(e) => {
                assert!(cut < header_end, "cut at {cut}: {e}");
                let said = e.to_string();
                assert!(said.contains("is not a podstuck record") || said.contains("header is corrupt"), "{said}");
            }
        }
        // The whole replay on some of them (it is the slow part); a cut in
        // the gzip trailer may still hold the end entry (see above).
        if cut >= header_end && cut % 97 == 0 && cut + 16 < bytes.len() {
            let mut told = Vec::new();
            let summary = replay_record(&bytes[..cut], "cut.podstuck", &mut |r| told.push(r.clone())).unwrap();
            assert!(summary.broken.is_none() && summary.ends_early(), "cut at {cut}: {:?}", summary.broken);
            assert!(told.len() <= live.len());
        }
    }
    assert_eq!(entries_before, 95, "94 calls and reviews, and the end");
}

/// A minute of kubelet retrying against P1 and P5, written to a disk with
/// `room` bytes free.
fn on_a_small_disk(room: usize) -> (Vec<RecordStopped>, bool, Vec<u8>) {
    let kept = Shared::default();
    let mut live = Live::new(incident_node(), FillsUp { kept: kept.clone(), room });
    let m = csi_mount();
    for i in 0..120 {
        let at = i as f64 * 0.5;
        live.call(&rmdir(at, "kubelet", &m, -libc::EBUSY));
        live.call(&call_by(at + 0.1, "kubelet", 7, Syscall::Rmdir, 0, CG, -libc::EBUSY));
        live.review(at + 0.25, &[]);
    }
    let mut stopped = std::mem::take(&mut live.stopped);
    // The disk may also fill up with the closing entry: said then.
    let complete = match live.finish(61.0).1 {
        Ok(saved) => saved.complete,
        Err(e) => {
            stopped.push(e);
            false
        }
    };
    (stopped, complete, kept.bytes())
}

#[test]
fn a_full_disk_stops_the_record_once_and_it_replays_up_to_there() {
    let (stopped, complete, whole) = on_a_small_disk(usize::MAX);
    assert!(stopped.is_empty() && complete);
    let header_bytes = whole.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(1).unwrap().0 + 1 + 32;
    for room in [header_bytes, whole.len() / 3, whole.len() / 2, whole.len() - 40, whole.len() - 1] {
        let (stopped, complete, kept) = on_a_small_disk(room);
        assert_eq!(stopped.len(), 1, "said once, at room {room}");
        assert!(!complete);
        let said = stopped[0].to_string();
        assert!(said.starts_with("recording to incident.podstuck stopped: the disk is full; "), "{said}");
        assert!(
            said.contains(&format!(
                "incident.podstuck holds its first {} entries, up to 2027-01-15T08:",
                stopped[0].entries_held
            )),
            "{said}"
        );
        assert!(said.ends_with("and `podstuck replay incident.podstuck` reads them"), "{said}");
        let summary = replay_record(&kept[..], "incident.podstuck", &mut |_| {}).unwrap();
        // Cut in the gzip trailer, after the closing entry: whole all the same.
        assert!(
            summary.broken.is_none() && (summary.ends_early() || room + 8 >= whole.len()),
            "room {room}: {:?}",
            summary.broken
        );
        assert!(
            summary.entries() >= stopped[0].entries_held,
            "room {room}: {} < {}",
            summary.entries(),
            stopped[0].entries_held
        );
    }
}

#[test]
fn paths_that_are_not_utf8_come_back_byte_for_byte() {
    let out = Shared::default();
    let mut recorder = Recorder::new(out.clone(), "bytes.podstuck", &header()).unwrap();
    let mut c = rmdir(1.0, "rm", "/x", -libc::EBUSY);
    c.event.path = b"rel/\xff\xfe\n\"\\dir".to_vec();
    c.event.base = BaseDir::Resolved(b"/var/lib/kubelet/pods/\xc3\x28".to_vec());
    c.event.path_status = PathStatus::TooLong;
    c.identity.abs_path = Ok(b"/var/lib/kubelet/pods/\xc3\x28/rel/\xff\xfe\n\"\\dir".to_vec());
    c.identity.container_id = Some(ContainerId::parse(&"ab".repeat(32)).unwrap());
    c.identity.path_area = Some(PathArea::VolumeSubpath);
    c.identity.matched = vec![MatchReason::Path, MatchReason::Container];
    let mut unresolved = rmdir(1.5, "rm", "/y", 0);
    unresolved.event.base = BaseDir::Unresolved(NoPath::BadFd);
    unresolved.identity.abs_path = Err(NoPath::BadFd);
    recorder.add_call(&c.event, &c.identity).unwrap();
    recorder.add_call(&unresolved.event, &unresolved.identity).unwrap();
    let odd = b"/mnt/\x80\x81 space".to_vec();
    let mount = Mount {
        id: 9,
        parent_id: 1,
        dev: (0, 9),
        root: b"/\xff".to_vec(),
        mount_point: odd.clone(),
        options: "rw".into(),
        propagation: vec!["shared:9".into(), "master:2".into()],
        fstype: "fuse.x".into(),
        source: "src".into(),
        super_options: "rw".into(),
    };
    let asked = vec![
        Question::HostMounts { answer: Ok(vec![mount.clone()]) },
        Question::MountCopies {
            mount: mount.clone(),
            mntns: 5,
            answer: vec![MountCopy {
                mntns: 5,
                pid: 6,
                comm: "c".into(),
                mount_point: odd.clone(),
                propagation: vec!["master:3".into()],
                owner: None,
            }],
        },
        Question::DirSample {
            path: odd.clone(),
            limit: 3,
            answer: Ok(DirSample { names: vec![b"\xff".to_vec(), b"ok".to_vec()], counted: 2, complete: true }),
        },
        Question::FileFacts {
            path: odd.clone(),
            answer: Err(Unreadable("timed out after 1 s: the filesystem may be hung".into())),
        },
        Question::V1Freezer {
            path: odd.clone(),
            answer: Ok(vec![crate::inspect::FreezerLevel {
                dir: odd.clone(),
                state: "FROZEN".into(),
                pids: vec![5, 6],
            }]),
        },
        Question::V1Freezer {
            path: b"/sys/fs/cgroup/memory/x".to_vec(),
            answer: Err(Unreadable("no v1 freezer hierarchy mounted, or not a v1 cgroup".into())),
        },
        Question::Avoid { path: odd.clone() },
    ];
    let mut flight = hung_flight(0.5);
    flight.path = Some(odd.clone());
    recorder.add_review(t(2.0), std::slice::from_ref(&flight), &[], asked.clone(), &[], false).unwrap();
    recorder.finish(t(3.0), &[], None).unwrap();

    let bytes = out.bytes();
    let mut reader = RecordReader::open(&bytes[..], "bytes.podstuck").unwrap();
    let Some(Entry::Call(first)) = reader.next_entry().unwrap() else { panic!("a call first") };
    assert_eq!((first.event, first.identity), (c.event, c.identity));
    let Some(Entry::Call(second)) = reader.next_entry().unwrap() else { panic!("a call") };
    assert_eq!((second.event, second.identity), (unresolved.event, unresolved.identity));
    let Some(Entry::Review(review)) = reader.next_entry().unwrap() else { panic!("a review") };
    assert_eq!(review.asked, asked);
    assert_eq!(review.now, t(2.0));
    assert_eq!(review.in_flight.len(), 1);
    assert_eq!(review.in_flight[0].path.as_deref(), Some(&odd[..]));
    assert_eq!(review.in_flight[0].flight.started, t(0.5));
    assert!(matches!(reader.next_entry().unwrap(), Some(Entry::End(RecordEnd { entries: 3, .. }))));
    assert!(reader.next_entry().unwrap().is_none());
    assert!(!reader.ends_early());
}

#[test]
fn a_record_file_is_never_overwritten_and_says_where_it_cannot_go() {
    let dir = TempDir::new("record");
    let path = dir.0.join("incident.podstuck");
    let recorder = Recorder::create(&path, &header()).unwrap();
    recorder.finish(t(1.0), &[], None).unwrap();
    let again = Recorder::create(&path, &header()).err().unwrap().to_string();
    assert_eq!(again, format!("{} exists: choose another name or remove it", path.display()));
    let nowhere = dir.0.join("no/such/dir/x.podstuck");
    let said = Recorder::create(&nowhere, &header()).err().unwrap().to_string();
    assert!(
        said.ends_with(&format!(
            "directory {} does not exist: create it or choose another place",
            dir.0.join("no/such/dir").display()
        )),
        "{said}"
    );
    let said = Recorder::create(&dir.0, &header()).err().unwrap().to_string();
    assert!(said.contains("is a directory: give a file name in it"), "{said}");
    let denied = create_error(&path, io::Error::from_raw_os_error(libc::EACCES)).to_string();
    assert!(
        denied.contains("is not writable for podstuck") && denied.contains("choose a directory you can write"),
        "{denied}"
    );
    let full = create_error(&path, io::Error::from_raw_os_error(libc::ENOSPC)).to_string();
    assert!(full.ends_with("is full: free some space or choose another place"), "{full}");
    let read_only = create_error(&path, io::Error::from_raw_os_error(libc::EROFS)).to_string();
    assert!(read_only.contains("is on a read-only filesystem: choose a writable directory"), "{read_only}");
    // And the file replays.
    replay(&path, true).unwrap();
    let gone = replay(&dir.0.join("gone.podstuck"), false).unwrap_err().to_string();
    assert!(gone.ends_with("gone.podstuck does not exist"), "{gone}");
}

/// A record no live run would make (a tree of 2^64 entries left, removed at
/// half an entry a second) once sent the removal-storm detector into a
/// panic (an ETA beyond Duration): it now replays to a storm finding.
#[test]
fn a_record_with_an_absurd_estimate_replays_without_a_failure() {
    let out = Shared::default();
    let mut recorder = Recorder::new(out.clone(), "odd.podstuck", &header()).unwrap();
    for i in 0..20_000 {
        let c = call_by(i as f64 / 5000.0, "rm", 300, Syscall::Unlinkat, 0, &format!("/data/tree/d{}/f{i}", i % 10), 0);
        recorder.add_call(&c.event, &c.identity).unwrap();
    }
    let last = call_by(6.0, "rm", 300, Syscall::Unlinkat, 0, "/data/tree/d0/last", 0);
    recorder.add_call(&last.event, &last.identity).unwrap();
    let endless = crate::inspect::EntryEstimate { entries: u64::MAX, at_least: false, method: "counted".into() };
    recorder
        .add_review(
            t(6.05),
            &[],
            &[],
            vec![Question::RemainingEntries { path: b"/data/tree".to_vec(), answer: Ok(endless) }],
            &[],
            false,
        )
        .unwrap();
    // The calls have stopped: the rate is that of the last seconds, 0.5 a second.
    recorder.add_review(t(8.3), &[], &[], vec![], &[], false).unwrap();
    recorder.finish(t(9.0), &[], None).unwrap();
    let mut kinds = Vec::new();
    let summary = replay_record(&out.bytes()[..], "odd.podstuck", &mut |r| kinds.push(r.finding().kind)).unwrap();
    assert!(summary.broken.is_none(), "{:?}", summary.broken.map(|b| b.to_string()));
    assert!(kinds.contains(&Kind::RemovalStorm), "{kinds:?}");
}

// Reading never panics, whatever the bytes.

fn said_clearly(e: &RecordError) -> bool {
    let said = e.to_string();
    ["is not a podstuck record", "newer podstuck", "header is corrupt", "is corrupt: ", "is damaged (", "cannot read"]
        .iter()
        .any(|p| said.contains(p))
}

fn small_record() -> Vec<u8> {
    thread_local! {
        static RECORD: Vec<u8> = recorded_incident().1;
    }
    RECORD.with(|r| r.clone())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_are_read_without_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        if let Err(e) = replay_findings(&bytes[..]) {
            prop_assert!(said_clearly(&e), "{e}");
        }
    }

    #[test]
    fn any_bytes_after_a_good_header_are_read_without_a_panic(tail in proptest::collection::vec(any::<u8>(), 0..4096), gzip_head in any::<bool>()) {
        let mut bytes = format!("podstuck-record 1\n{HEAD}\n").into_bytes();
        if gzip_head {
            bytes.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3]);
        }
        bytes.extend(tail);
        if let Err(e) = replay_findings(&bytes[..]) {
            prop_assert!(said_clearly(&e), "{e}");
        }
    }

    #[test]
    fn a_damaged_record_is_read_without_a_panic(flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..6)) {
        let mut bytes = small_record();
        for (at, x) in &flips {
            let i = at.index(bytes.len());
            bytes[i] ^= x;
        }
        match replay_findings(&bytes[..]) {
            Ok(_) => {}
            Err(e) => prop_assert!(said_clearly(&e), "{e}"),
        }
    }

    #[test]
    fn any_entries_written_are_read_back_the_same(
        calls in proptest::collection::vec(arbitrary_call(), 1..20),
        answers in proptest::collection::vec(arbitrary_asked(), 0..20),
    ) {
        let out = Shared::default();
        let mut recorder = Recorder::new(out.clone(), "p.podstuck", &header()).unwrap();
        for (event, identity) in &calls {
            recorder.add_call(event, identity).unwrap();
        }
        // Twice: the second review leaves out the answers that did not change.
        recorder.add_review(t(1.0), &[], &[], answers.clone(), &[], false).unwrap();
        recorder.add_review(t(2.0), &[], &[], answers.clone(), &[], false).unwrap();
        recorder.finish(t(3.0), &[], None).unwrap();
        let bytes = out.bytes();
        let mut reader = RecordReader::open(&bytes[..], "p.podstuck").unwrap();
        for (event, identity) in &calls {
            match reader.next_entry().unwrap() {
                Some(Entry::Call(call)) => {
                    prop_assert_eq!(&call.event, event);
                    prop_assert_eq!(&call.identity, identity);
                }
                other => prop_assert!(false, "a call, not {:?}", other),
            }
        }
        for _ in 0..2 {
            match reader.next_entry().unwrap() {
                Some(Entry::Review(r)) => prop_assert_eq!(&r.asked, &answers),
                other => prop_assert!(false, "a review, not {:?}", other),
            }
        }
        let ended = matches!(reader.next_entry().unwrap(), Some(Entry::End(_)));
        prop_assert!(ended);
    }
}

fn bytes_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![proptest::collection::vec(any::<u8>(), 0..40), "[/a-z~.-]{0,40}".prop_map(String::into_bytes),]
}

fn arbitrary_call() -> impl Strategy<Value = (CallEvent, Identity)> {
    (
        (any::<u64>(), any::<u32>(), any::<u32>(), ".{0,16}", ".{0,16}", any::<u64>(), any::<i64>(), any::<u64>()),
        (bytes_strategy(), bytes_strategy(), 0u8..4, 0u8..3, 0u8..3, any::<u64>(), any::<i32>()),
        (prop::option::of(bytes_strategy()), ".{0,30}", any::<bool>(), prop::option::of(".{0,20}"), 0u8..7),
    )
        .prop_map(
            |(
                (time, pid, tid, comm, pcomm, cgroup_id, ret, latency_ns),
                (path, base, syscall, status, base_kind, flags, dfd),
                (abs, why, with_pod, exe, role),
            )| {
                let mut c = call_by(0.0, &comm, pid, Syscall::from_u8(syscall).unwrap(), flags, "/", 0);
                let e = &mut c.event;
                e.time = wire::time(time);
                e.tid = tid;
                e.pcomm = pcomm.clone();
                e.cgroup_id = cgroup_id;
                e.ret = ret;
                e.latency_ns = latency_ns;
                e.dfd = dfd;
                e.path = path;
                e.path_status = [PathStatus::Whole, PathStatus::TooLong, PathStatus::Unreadable][status as usize];
                e.base = match base_kind {
                    0 => BaseDir::NotNeeded,
                    1 => BaseDir::Resolved(base),
                    _ => BaseDir::Unresolved(NoPath::BaseUnreadable),
                };
                let i = &mut c.identity;
                i.abs_path = abs.ok_or_else(|| NoPath::from_text(&why));
                i.pod_uid = with_pod.then(pod);
                i.actor.exe = exe;
                i.actor.role =
                    [Role::Kubelet, Role::Runtime, Role::Shim, Role::Runc, Role::CsiPlugin, Role::Systemd, Role::Other]
                        [role as usize];
                (c.event, c.identity)
            },
        )
}

fn arbitrary_mount() -> impl Strategy<Value = Mount> {
    (any::<u32>(), bytes_strategy(), ".{0,10}").prop_map(|(id, at, fstype)| Mount {
        id,
        parent_id: 1,
        dev: (0, id),
        root: b"/".to_vec(),
        mount_point: at,
        options: "rw".into(),
        propagation: vec![],
        fstype,
        source: "s".into(),
        super_options: "rw".into(),
    })
}

fn arbitrary_asked() -> impl Strategy<Value = Question> {
    prop_oneof![
        (proptest::collection::vec(arbitrary_mount(), 0..3), prop::option::of(".{0,20}"))
            .prop_map(|(m, why)| Question::HostMounts { answer: why.map_or(Ok(m), |w| Err(Unreadable(w))) }),
        (arbitrary_mount(), proptest::collection::vec((any::<u32>(), bytes_strategy()), 0..3)).prop_map(
            |(mount, h)| Question::MountHolders {
                mount,
                mntns: 7,
                answer: h
                    .into_iter()
                    .map(|(pid, path)| MountHolder {
                        pid,
                        comm: "c".into(),
                        how: HoldKind::OpenFile,
                        path,
                        mntns: 2,
                        other_namespace: true,
                        owner: None
                    })
                    .collect(),
            }
        ),
        (bytes_strategy(), any::<u32>(), any::<bool>()).prop_map(|(path, raw, immutable)| Question::InodeFlags {
            path,
            answer: Ok(crate::inspect::InodeFlags { immutable, append_only: false, raw })
        }),
        (bytes_strategy(), 0usize..100, proptest::collection::vec(bytes_strategy(), 0..4)).prop_map(
            |(path, limit, names)| Question::DirSample {
                path,
                limit,
                answer: Ok(DirSample { counted: names.len() as u64, names, complete: false })
            }
        ),
        (any::<u32>(), any::<char>())
            .prop_map(|(tid, state)| Question::Task { tid, answer: Ok(task(tid, "t", state)) }),
        bytes_strategy().prop_map(|path| Question::Avoid { path }),
        Just(Question::FuseServers { answer: vec![task(1, "f", 'T')] }),
    ]
}

// Any incident, recorded then replayed, is diagnosed the same.

/// Paths the detectors care about, and one they do not.
fn incident_paths() -> Vec<String> {
    vec![
        csi_mount(),
        CG.to_string(),
        "/mnt/fuse/a".into(),
        format!("/var/lib/kubelet/pods/{POD}/volumes/kubernetes.io~empty-dir/cache"),
        format!("/var/lib/kubelet/pods/{POD}/volume-subpaths/data/app/0"),
        "/var/lib/docker/overlay2/abc/merged/etc/hosts".into(),
        "/tmp/scratch".into(),
    ]
}

const ERRNOS: [i32; 7] = [0, libc::EBUSY, libc::EPERM, libc::ENOTEMPTY, libc::ENOSPC, libc::EROFS, libc::EINVAL];
const COMMS: [&str; 5] = ["kubelet", "containerd", "umount", "runc", "rm"];

/// One thing that happens in a random incident.
#[derive(Clone, Debug)]
enum Happening {
    /// (path, errno, comm, syscall) at a time.
    Call(usize, usize, usize, u8),
    /// The node changes: a holder comes or goes, a cgroup empties, a file turns immutable.
    NodeChange(u8),
    /// A call on a path hangs from now, or returns.
    Hang(usize, bool),
}

fn happening() -> impl Strategy<Value = Happening> {
    prop_oneof![
        8 => (0..incident_paths().len(), 0..ERRNOS.len(), 0..COMMS.len(), 0u8..4).prop_map(|(p, e, c, s)| Happening::Call(p, e, c, s)),
        1 => any::<u8>().prop_map(Happening::NodeChange),
        1 => (0..incident_paths().len(), any::<bool>()).prop_map(|(p, h)| Happening::Hang(p, h)),
    ]
}

fn change(node: &mut FakeNode, what: u8) {
    let paths = incident_paths();
    match what % 6 {
        0 => node.holders.clear(),
        1 => node.holders.push(MountHolder {
            pid: 4000 + what as u32,
            comm: "app".into(),
            how: HoldKind::OpenFile,
            path: csi_mount().into_bytes(),
            mntns: 9,
            other_namespace: what.is_multiple_of(2),
            owner: None,
        }),
        2 => {
            if let Some(c) = node.cgroups.get_mut(CG.as_bytes()) {
                c.tasks.clear();
            }
        }
        3 => {
            node.flags.insert(
                paths[what as usize % paths.len()].clone().into_bytes(),
                crate::inspect::InodeFlags { immutable: true, append_only: false, raw: 0x10 },
            );
        }
        4 => {
            node.dirs.insert(paths[what as usize % paths.len()].clone().into_bytes(), vec!["stray.log", "core"]);
        }
        _ => node.mountinfo = FakeNode::with_mounts(&[]).mountinfo,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_incident_replays_to_what_the_live_run_told(story in proptest::collection::vec((0u32..400, happening()), 0..120)) {
        let mut story = story;
        story.sort_by_key(|(at, _)| *at);
        let out = Shared::default();
        let mut live = Live::new(incident_node(), out.clone());
        let paths = incident_paths();
        let mut hanging: Vec<CallInFlight> = Vec::new();
        let mut next = story.iter().peekable();
        // Reviews every half second; things happen every tenth of one.
        for tick in 1..=90 {
            let at = tick as f64 * 0.5;
            while let Some((when, what)) = next.next_if(|(when, _)| (*when as f64) / 10.0 <= at) {
                let when = *when as f64 / 10.0;
                match what {
                    Happening::Call(p, e, c, s) => {
                        let syscall = Syscall::from_u8(*s).unwrap();
                        let flags = if syscall == Syscall::Unlinkat && p % 2 == 0 { libc::AT_REMOVEDIR as u64 } else { 0 };
                        live.call(&call_by(when, COMMS[*c], 100 + *c as u32, syscall, flags, &paths[*p], -ERRNOS[*e]));
                    }
                    Happening::NodeChange(what) => change(&mut live.node, *what),
                    // A thread is in one call at a time.
                    Happening::Hang(p, true) if hanging.iter().any(|f| f.flight.tid == 4321 + *p as u32) => {}
                    Happening::Hang(p, true) => {
                        let mut f = hung_flight(when);
                        f.flight.tid = 4321 + *p as u32;
                        f.path = Some(paths[*p].clone().into_bytes());
                        hanging.push(f);
                    }
                    Happening::Hang(p, false) => hanging.retain(|f| f.flight.tid != 4321 + *p as u32),
                }
            }
            live.review(at, &hanging);
        }
        let (told, saved) = live.finish(45.5);
        prop_assert!(saved.unwrap().complete);
        let mut replayed = Vec::new();
        let summary = replay_record(&out.bytes()[..], "any.podstuck", &mut |r| replayed.push(r.clone())).unwrap();
        prop_assert!(summary.broken.is_none(), "{:?}", summary.broken);
        prop_assert_eq!(summary.differences, 0, "{:?}", summary.first_difference);
        prop_assert_eq!(summary.not_in_record, 0, "{:?}", summary.first_not_in_record);
        let sorted = |reports: &[Report]| {
            let mut all: Vec<String> = reports.iter().map(crate::print::json_lines::finding_json).collect();
            all.sort();
            all
        };
        prop_assert_eq!(sorted(&replayed), sorted(&told));
    }
}

#[test]
fn a_removal_storm_of_two_processes_replays_the_same() {
    let mut node = FakeNode::with_mounts(&[]);
    let trees = [
        format!("/var/lib/kubelet/pods/{POD}/volumes/kubernetes.io~empty-dir/cache"),
        "/var/lib/containerd/tmpmounts/x".to_string(),
    ];
    for tree in &trees {
        node.remaining.insert(tree.clone().into_bytes(), 150_000);
    }
    let out = Shared::default();
    let mut live = Live::new(node, out.clone());
    let mut calls = 0;
    for tick in 1..=20 {
        let at = tick as f64 * 0.5;
        // 3000 removals a second by each of two processes, under their trees.
        for i in 0..1500 {
            let when = at - 0.5 + i as f64 / 3000.0;
            for (pid, tree) in [(300, &trees[0]), (301, &trees[1])] {
                live.call(&call_by(when, "rm", pid, Syscall::Unlinkat, 0, &format!("{tree}/d{}/f{i}", tick % 7), 0));
                calls += 1;
            }
        }
        live.review(at, &[]);
    }
    for at in [11.0, 13.0, 16.5] {
        live.review(at, &[]);
    }
    let (told, _) = live.finish(17.0);
    assert!(told.iter().filter(|r| r.finding().kind == Kind::RemovalStorm).count() >= 2, "{:?}", kinds(&told));
    let bytes = out.bytes();
    let mut replayed = Vec::new();
    let summary = replay_record(&bytes[..], "storm.podstuck", &mut |r| replayed.push(r.clone())).unwrap();
    assert_eq!(summary.calls, calls);
    assert_eq!(summary.differences, 0, "{:?}", summary.first_difference);
    let sorted = |reports: &[Report]| {
        let mut all: Vec<String> = reports.iter().map(crate::print::json_lines::finding_json).collect();
        all.sort();
        all
    };
    assert_eq!(sorted(&replayed), sorted(&told));
    // Compact: a storm's calls are alike, and compress well.
    let per_call = bytes.len() as f64 / calls as f64;
    assert!(per_call < 40.0, "{per_call:.1} bytes a call");
}

// Bounded reading: a record from anywhere is read in bounded memory, and
// what is too long to be a podstuck's is passed over and said.

/// A record of `lines` (entries, newline-terminated each) after HEAD.
fn record_of(lines: &[String]) -> Vec<u8> {
    written_by_hand(HEAD, &(lines.join("\n") + "\n"))
}

#[test]
fn an_entry_too_long_to_be_a_podstucks_is_skipped_and_said() {
    let (_, bytes) = recorded_incident();
    let mut lines = entry_lines(&bytes);
    let call = lines.iter().position(|l| l.starts_with("{\"call\"")).unwrap();
    // A call whose path is longer than any the kernel hands over.
    let long_path = format!("/{}", "a".repeat(read::MAX_CALL_BYTES));
    lines[call] = format!("{{\"call\":{{\"event\":{{\"path\":\"{long_path}\"}}}}}}");
    let review = lines.iter().position(|l| l.starts_with("{\"review\"")).unwrap();
    let mut told = Vec::new();
    let expected = replay_record(&record_of(&lines)[..], "a", &mut |r| told.push(r.clone())).unwrap();
    // And a review longer than any: read in bounded memory, passed over.
    let mut huge = String::with_capacity(read::MAX_ENTRY_BYTES + 64);
    huge.push_str("{\"review\":{\"now\":1,\"in_flight\":[],\"asked\":[],\"told\":[");
    while huge.len() <= read::MAX_ENTRY_BYTES {
        huge.push_str("{},");
    }
    huge.push_str("{}]}}");
    lines.insert(review, huge);
    // The end counts the entries skipped too.
    let end = lines.pop().unwrap();
    let end: serde_json::Value = serde_json::from_str(&end).unwrap();
    let entries = end["end"]["entries"].as_u64().unwrap() + 1;
    lines.push(format!("{{\"end\":{{\"ended\":{},\"entries\":{entries},\"untold\":[]}}}}", end["end"]["ended"]));
    let summary = replay_record(&record_of(&lines)[..], "long.podstuck", &mut |_| {}).unwrap();
    assert!(summary.broken.is_none(), "{}", summary.broken.unwrap());
    assert!(summary.end.is_some(), "read to its end");
    assert_eq!(summary.skipped, 2);
    let first = summary.first_skipped.clone().unwrap();
    assert!(first.starts_with(&format!("entry {} is longer than any entry a podstuck writes", call + 1)), "{first}");
    assert_eq!(summary.calls + summary.reviews + 2, entries);
    assert_eq!(expected.skipped, 1);
    let text = replay::record_text("long.podstuck", &summary);
    assert!(text.contains("2 entries too long to be any podstuck's were skipped"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&replay::record_json("long.podstuck", &summary)).unwrap();
    assert_eq!(json["skipped"], 2);
}

#[test]
fn a_stream_of_zeros_is_passed_over_in_bounded_memory() {
    // 64 MiB of zeros, no newline: 64 KiB compressed.
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..64 {
        gz.write_all(&zeros).unwrap();
    }
    let mut record = format!("podstuck-record 1\n{HEAD}\n").into_bytes();
    record.extend(gz.finish().unwrap());
    let mut reader = RecordReader::open(&record[..], "zeros").unwrap();
    assert!(reader.next_entry().unwrap().is_none());
    assert!(reader.ends_early());
    assert_eq!((reader.skipped(), reader.entries()), (1, 1));
    // What it kept of the line: nothing.
    assert!(reader.line_room() <= read::MAX_CALL_BYTES + 1, "{}", reader.line_room());
}

#[test]
fn lists_and_findings_past_what_a_podstuck_writes_are_refused_before_they_are_held() {
    let items = wire::MAX_LIST_ITEMS + 1;
    let counted = vec!["{\"pid\":1,\"syscall\":\"rmdir\",\"errno\":0,\"count\":1}"; items].join(",");
    let error = error_of(&record_of(&[format!(
        "{{\"review\":{{\"now\":1,\"in_flight\":[],\"asked\":[],\"told\":[],\"counted\":[{counted}]}}}}"
    )]));
    assert!(error.contains("entry 1 is corrupt: a list of more than 65536 items"), "{error}");
    // {"a":0} takes some 80 times its bytes as a JSON value.
    let objects = vec!["{\"a\":0}"; 200_000].join(",");
    let error = error_of(&record_of(&[format!(
        "{{\"review\":{{\"now\":1,\"in_flight\":[],\"asked\":[],\"told\":[[{objects}]]}}}}"
    )]));
    assert!(error.contains("entry 1 is corrupt: findings that would take more than 64 MiB of memory"), "{error}");
    let error = error_of(&record_of(&[format!("{{\"end\":{{\"ended\":1,\"entries\":0,\"untold\":[[{objects}]]}}}}")]));
    assert!(error.contains("findings that would take more than 64 MiB"), "{error}");
    // A path longer than any.
    let path = "b".repeat(wire::MAX_BYTES_FIELD + 1);
    let error = error_of(&record_of(&[format!(
        "{{\"review\":{{\"now\":1,\"in_flight\":[],\"asked\":[{{\"file_facts\":{{\"path\":\"{path}\",\"answer\":{{\"unreadable\":\"x\"}}}}}}],\"told\":[]}}}}"
    )]));
    assert!(error.contains("a path of 32769 bytes, longer than any a podstuck writes"), "{error}");
    // Findings as a podstuck writes them are read as they were.
    let told = serde_json::json!({"type": "finding", "id": "x", "evidence": [{"fact": "a", "n": 1.5, "ok": true, "none": null, "big": u64::MAX, "neg": -3}]});
    let record = record_of(&[format!("{{\"review\":{{\"now\":1,\"in_flight\":[],\"asked\":[],\"told\":[{told}]}}}}")]);
    let mut reader = RecordReader::open(&record[..], "r").unwrap();
    match reader.next_entry().unwrap() {
        Some(Entry::Review(review)) => assert_eq!(review.told, vec![told]),
        other => panic!("a review, not {other:?}"),
    }
}

#[test]
fn reasons_are_read_back_as_podstucks_own_or_kept_as_bounded_text() {
    use crate::event::{NoPath, UNKNOWN_REASON};
    assert_eq!(NoPath::from_text(NoPath::BadFd.as_str()), NoPath::BadFd);
    assert_eq!(NoPath::from_text("a newer podstuck's reason"), NoPath::Other("a newer podstuck's reason".into()));
    assert_eq!(NoPath::from_text(&"x".repeat(10_000)).as_str(), UNKNOWN_REASON);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    /// Lines of any length around the caps, calls or not, whole or cut:
    /// never a panic, each line over its cap skipped and counted, the others
    /// read (as corrupt: they are not entries).
    #[test]
    fn lines_around_the_caps_are_read_or_skipped(
        lines in proptest::collection::vec((any::<bool>(), prop_oneof![0usize..64, (read::MAX_CALL_BYTES - 16)..(read::MAX_CALL_BYTES + 16), (read::MAX_ENTRY_BYTES - 8)..(read::MAX_ENTRY_BYTES + 8)], any::<bool>()), 1..4),
        newline_at_end in any::<bool>(),
    ) {
        let mut body = Vec::new();
        let mut over = 0;
        for (i, (is_call, len, _)) in lines.iter().enumerate() {
            let prefix: &[u8] = if *is_call { b"{\"call\"" } else { b"{\"review\"" };
            let mut line = prefix.to_vec();
            line.resize(prefix.len().max(*len), b' ');
            let cap = if *is_call { read::MAX_CALL_BYTES } else { read::MAX_ENTRY_BYTES };
            if line.len() > cap && over == i {
                over += 1;
            }
            body.extend_from_slice(&line);
            if i + 1 < lines.len() || newline_at_end {
                body.push(b'\n');
            }
        }
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        gz.write_all(&body).unwrap();
        let mut record = format!("podstuck-record 1\n{HEAD}\n").into_bytes();
        record.extend(gz.finish().unwrap());
        let mut reader = RecordReader::open(&record[..], "r").unwrap();
        loop {
            match reader.next_entry() {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    prop_assert!(said_clearly(&e), "{}", e);
                    break;
                }
            }
        }
        // Every line before the first that is read (and found corrupt) and is over its cap was skipped.
        prop_assert_eq!(reader.skipped(), over as u64);
        prop_assert!(reader.line_room() <= 2 * read::MAX_ENTRY_BYTES);
    }

    /// A real record with entries spliced from pieces of JSON: never a panic.
    #[test]
    fn entries_made_of_json_pieces_are_read_without_a_panic(pieces in proptest::collection::vec(prop_oneof![
        Just("{".to_string()), Just("}".to_string()), Just("[".to_string()), Just("]".to_string()), Just(",".to_string()), Just(":".to_string()),
        Just("\"call\"".to_string()), Just("\"review\"".to_string()), Just("\"end\"".to_string()), Just("\"told\"".to_string()), Just("\"asked\"".to_string()),
        Just("\"hex\"".to_string()), Just("\"path\"".to_string()), Just("null".to_string()), Just("1e999".to_string()), Just("-1".to_string()),
        "\"[a-z_]{0,12}\"", "[0-9]{1,25}",
    ], 0..60), at in any::<prop::sample::Index>()) {
        let (_, bytes) = recorded_incident();
        let mut lines = entry_lines(&bytes);
        let i = at.index(lines.len());
        lines[i] = pieces.concat();
        match replay_findings(&record_of(&lines)[..]) {
            Ok(_) => {}
            Err(e) => prop_assert!(said_clearly(&e), "{}", e),
        }
    }
}

/// A pod whose init drops SIGTERM, a CNI DEL that keeps failing and, with
/// `--pod`, a closing review: lifecycle lines and the last review's mark
/// replay to what the live run told.
#[test]
fn lifecycle_events_and_the_closing_review_replay_to_the_same_findings() {
    use crate::lifecycle::{CniRun, Lifecycle, LifecycleEvent, LifecycleIdentity, SignalResult, SignalSent};
    let mut header = header();
    // A second pod nothing touches: said at the closing review only.
    let quiet = PodUid::parse("5f1c2a9e-0000-4000-8000-000000000002").unwrap();
    header.pods = vec![pod(), quiet.clone()];
    header.diagnose.pods = header.pods.clone();
    let mut node = FakeNode::default();
    node.tasks.insert(700, task(700, "app", 'S'));
    let mut bytes = Vec::new();
    let mut recorder = Recorder::new(&mut bytes, "incident.podstuck", &header).unwrap();
    let mut diagnoser = Diagnoser::new(&header.diagnose);
    let actor = |comm: &str| Actor {
        comm: comm.into(),
        exe: None,
        parent: "containerd".into(),
        role: Role::Other,
        description: comm.into(),
    };
    let who = |comm: &str| LifecycleIdentity { pod_uid: Some(pod()), actor: actor(comm) };
    let event = |at: f64, pid: u32, what: Lifecycle| LifecycleEvent {
        time: t(at),
        pid,
        ppid: 10,
        comm: "x".into(),
        cgroup_id: 0,
        what,
    };
    let cni = CniRun { command: "DEL".into(), container_id: "abc".into(), pod_uid: Some(pod()), ..Default::default() };
    let mut events = vec![(
        event(
            0.1,
            50,
            Lifecycle::Signal(SignalSent {
                sig: libc::SIGTERM,
                result: SignalResult::Ignored,
                target_pid: 700,
                target_comm: "app".into(),
                group: true,
            }),
        ),
        who("containerd-shim"),
    )];
    for (i, at) in [0.2, 1.2].into_iter().enumerate() {
        let pid = 100 + i as u32;
        let exec = Lifecycle::Exec { filename: b"/usr/lib/cni/bridge".to_vec(), cni: Some(cni.clone()) };
        events.push((event(at, pid, exec), who("bridge")));
        events.push((event(at + 0.05, pid, Lifecycle::Exit { status: 0x100 }), who("bridge")));
    }
    let mut live = Vec::new();
    for (e, identity) in &events {
        diagnoser.lifecycle(e, identity);
        recorder.add_lifecycle(e, identity).unwrap();
    }
    for (at, closing) in [(0.5, false), (2.0, false), (3.0, true)] {
        if closing {
            diagnoser.closing();
        }
        let mut recording = RecordingNode::new(&mut node);
        let reports = diagnoser.review(&mut Review { now: t(at), in_flight: &[], node: &mut recording });
        recorder.add_review(t(at), &[], &[], recording.into_asked(), &reports, closing).unwrap();
        live.extend(reports);
    }
    let untold = diagnoser.untold();
    recorder.finish(t(3.5), &untold, None).unwrap();
    live.extend(untold);
    let found: Vec<Kind> = live.iter().map(|r| r.finding().kind).collect();
    for kind in [Kind::SigtermIgnored, Kind::SandboxTeardownFailing, Kind::NoTeardownSeen] {
        assert!(found.contains(&kind), "{kind:?} in {found:?}");
    }
    let silent: Vec<_> = live.iter().filter(|r| r.finding().kind == Kind::NoTeardownSeen).collect();
    assert!(matches!(&silent[..], [r] if r.finding().pod_uid.as_ref() == Some(&quiet)), "{silent:?}");
    assert_eq!(replay_findings(&bytes[..]).unwrap(), live);
}
