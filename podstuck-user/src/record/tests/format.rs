//! What format 1 is: its first two lines, a record written by hand, paths
//! that are not UTF-8, a record never overwritten, values no live run makes.

use super::*;

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
    // Only what a newer podstuck asks besides: P1 resolves the path it is
    // given, and asks which processes it may not read (an empty list then).
    assert_eq!(summary.not_in_record, 2, "{:?}", summary.first_not_in_record);
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
                start: None,
                comm: "c".into(),
                mount_point: odd.clone(),
                propagation: vec!["master:3".into()],
                owner: None,
            }],
        },
        Question::DirSample {
            path: odd.clone(),
            limit: 3,
            root: 0,
            answer: Ok(DirSample { names: vec![b"\xff".to_vec(), b"ok".to_vec()], counted: 2, complete: true }),
        },
        Question::FileFacts {
            path: odd.clone(),
            root: 0,
            answer: Err(Unreadable::TimedOut("timed out after 1 s: the filesystem may be hung".into())),
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
            answer: Err(Unreadable::Other("no v1 freezer hierarchy mounted, or not a v1 cgroup".into())),
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
    assert!(matches!(reader.next_entry().unwrap(), Some(Entry::End(end)) if end.entries == 3));
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
            vec![Question::RemainingEntries {
                path: b"/data/tree".to_vec(),
                root: 0,
                within_ms: 0,
                answer: Ok(endless),
            }],
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
