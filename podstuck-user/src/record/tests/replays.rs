//! A run recorded then replayed tells the same findings: the incident,
//! any incident, a removal storm, lifecycle events and the closing review.

use super::*;

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
    assert_eq!(p1.fix, format!("umount -- {}", csi_mount()));
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
    // P1, the volume's one claimant, reads the mount table of its EBUSY
    // rmdir and resolves its path (cgroup-busy never sees a volume's).
    assert_eq!(summary.not_in_record, 2);
    assert_eq!(summary.first_not_in_record.as_deref(), Some("mount_namespace 4026531840"));
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
    let mut asked = BTreeMap::<&str, (usize, Vec<serde_json::Value>)>::new();
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
            start: Some(crate::event::ProcessStart(90_000 + what as u64)),
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

/// A pod whose init drops SIGTERM, a CNI DEL that keeps failing and, with
/// `--pod`, a closing review: lifecycle lines and the last review's mark
/// replay to what the live run told.
#[test]
fn lifecycle_events_and_the_closing_review_replay_to_the_same_findings() {
    use crate::diagnose::pod_shutdown::{PodShutdown, ShutdownContainer};
    use crate::identify::LifecycleIdentity;
    use crate::lifecycle::{CniRun, Lifecycle, LifecycleEvent, SignalResult, SignalSent};
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
    let who = |comm: &str| {
        let mut identity = LifecycleIdentity::of(Some(pod()), actor(comm));
        identity.target_start = Some(crate::event::ProcessStart(4000));
        identity.runner = Some("containerd".into());
        identity
    };
    let event = |at: f64, pid: u32, what: Lifecycle| LifecycleEvent {
        time: t(at),
        pid,
        start: Some(crate::event::ProcessStart(u64::from(pid))),
        ppid: 10,
        parent_start: Some(crate::event::ProcessStart(10)),
        comm: "x".into(),
        cgroup_id: 0,
        v1_cgroup_id: 0,
        v1_hierarchy: 0,
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
                group_exiting: Some(false),
            }),
        ),
        who("containerd-shim"),
    )];
    for (i, at) in [0.2, 1.2].into_iter().enumerate() {
        let pid = 100 + i as u32;
        let exec = Lifecycle::Exec {
            filename: b"/usr/lib/cni/bridge".to_vec(),
            cni: Some(cni.clone()),
            file: podstuck_common::PluginFile { ino: 7, dev: 0x800001, _pad: 0 },
            mntns: 4026531840,
            env_cut: false,
        };
        events.push((event(at, pid, exec), who("bridge")));
        let exit = Lifecycle::Exit { status: Some(0x100), last_thread: true };
        events.push((event(at + 0.05, pid, exit), who("bridge")));
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
        // The API's grace period for the pod, as watch --pod NS/NAME joins it.
        let app = ShutdownContainer::new("app", None, false, true).with_prestop(&["sleep".into(), "60".into()]);
        let shutdown = PodShutdown { grace_ends: t(60.0), deleted_at: Some(t(0.0)), containers: vec![app] };
        let ends = BTreeMap::from([(pod(), shutdown)]);
        diagnoser.shutdowns(&ends);
        recorder.shutdowns(&ends);
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

/// A review of a record made before podstuck read the containers' hooks
/// holds the grace periods' ends alone: they are read as shutdowns
/// without containers; a newer review's shutdowns win over its ends.
#[test]
fn an_older_records_grace_ends_are_read_as_shutdowns() {
    use crate::record::wire::{shutdowns_of, WireShutdown};
    let old = shutdowns_of(BTreeMap::new(), BTreeMap::from([(pod(), wire::nanos(t(60.0)))]));
    assert_eq!(old[&pod()].grace_ends, t(60.0));
    assert!(old[&pod()].deleted_at.is_none() && old[&pod()].containers.is_empty());
    let app = crate::diagnose::pod_shutdown::ShutdownContainer::new("app", None, false, true);
    let shutdown = PodShutdown { grace_ends: t(90.0), deleted_at: Some(t(30.0)), containers: vec![app] };
    let new = shutdowns_of(
        BTreeMap::from([(pod(), WireShutdown::of(&shutdown))]),
        BTreeMap::from([(pod(), wire::nanos(t(90.0)))]),
    );
    assert_eq!(new[&pod()], shutdown);
}
