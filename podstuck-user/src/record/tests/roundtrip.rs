//! Any calls and answers written are read back the same.

use super::*;
use crate::inspect::unreadable::KINDS;

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

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
        (0usize..10, any::<u32>(), any::<bool>()),
    )
        .prop_map(
            |(
                (time, pid, tid, comm, pcomm, cgroup_id, ret, latency_ns),
                (path, base, syscall, status, base_kind, flags, dfd),
                (abs, why, with_pod, exe, role),
                (proof, mntns, claimed),
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
                i.proof = every_proof(mntns).swap_remove(proof);
                i.claimed_pod = claimed.then(pod);
                (c.event, c.identity)
            },
        )
}

/// Every proof a call's path may carry, every reason of a claim's.
fn every_proof(mntns: u32) -> Vec<crate::identify::path_proof::PathProof> {
    use crate::identify::path_proof::{PathProof, Unproven};
    let mut all = vec![
        PathProof::NodeNamespace,
        PathProof::RuntimeNamespace { mntns, runtime: "kubelet".into() },
        PathProof::NodeDirectory { mntns },
        PathProof::OutsidePods,
        PathProof::Unrecorded,
    ];
    all.extend(Unproven::ALL.iter().map(|why| PathProof::claim(*why)));
    all
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
        (proptest::collection::vec(arbitrary_mount(), 0..3), prop::option::of((0..KINDS.len(), ".{0,20}"))).prop_map(
            |(m, why)| Question::HostMounts {
                answer: why.map_or(Ok(m), |(kind, w)| Err(Unreadable::of_kind(KINDS[kind], w).unwrap()))
            }
        ),
        (arbitrary_mount(), proptest::collection::vec((any::<u32>(), bytes_strategy()), 0..3)).prop_map(
            |(mount, h)| Question::MountHolders {
                mount,
                mntns: 7,
                answer: h
                    .into_iter()
                    .map(|(pid, path)| MountHolder {
                        pid,
                        start: (pid % 2 == 0).then_some(crate::event::ProcessStart(u64::from(pid) * 7)),
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
            root: 0,
            answer: Ok(crate::inspect::InodeFlags { immutable, append_only: false, raw })
        }),
        (bytes_strategy(), 0usize..100, proptest::collection::vec(bytes_strategy(), 0..4)).prop_map(
            |(path, limit, names)| Question::DirSample {
                path,
                limit,
                root: 0,
                answer: Ok(DirSample { counted: names.len() as u64, names, complete: false })
            }
        ),
        (any::<u32>(), any::<char>())
            .prop_map(|(tid, state)| Question::Task { tid, answer: Ok(task(tid, "t", state)) }),
        bytes_strategy().prop_map(|path| Question::Avoid { path }),
        Just(Question::FuseServers { answer: vec![task(1, "f", 'T')] }),
        any::<u32>().prop_map(|pid| Question::PidNamespaceInit { pid, answer: vec![task(1, "init", 'S')] }),
    ]
}
