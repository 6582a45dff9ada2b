//! The golden questions: every node question, with an answer and with
//! none readable, and every variant of an answer (how a mount is held,
//! cgroup v1 and v2, every task state, a path that is not UTF-8), written
//! as `golden_questions.jsonl` holds them. A change to any wire shape
//! fails here; so does a field renamed in that text.
//!
//! After a deliberate change to the format, write the file anew with
//! `PODSTUCK_BLESS=1 cargo test -p podstuck-user --lib golden`, and keep
//! older records readable.

use super::*;
use crate::identify::owner::Owner;
use crate::inspect::questions::QUESTION_NAMES;
use crate::inspect::{
    BlockHolder, DeviceOpener, EntryEstimate, FileFacts, FreezerLevel, FsUsage, InodeFlags, LoopDevice, MountElsewhere,
    MountNamespace, ProcessState, TaskState,
};
use crate::record::wire::WireQuestion;

const GOLDEN: &str = include_str!("golden_questions.jsonl");

/// An answer that could not be read, of a kind its words do not say:
/// renaming the kind written beside it must change what is read.
fn unreadable() -> Unreadable {
    Unreadable::TooMany("cannot start a reader: out of processes".into())
}

fn golden_mount() -> Mount {
    Mount {
        id: 50,
        parent_id: 1,
        dev: (0, 50),
        root: b"/".to_vec(),
        mount_point: b"/mnt/\xff odd".to_vec(),
        options: "rw,relatime".into(),
        propagation: vec!["shared:50".into()],
        fstype: "tmpfs".into(),
        source: "tmpfs".into(),
        super_options: "rw".into(),
    }
}

fn owner() -> Owner {
    Owner {
        pod_uid: Some(pod()),
        pod_name: Some("web".into()),
        pod_namespace: Some("default".into()),
        container: Some("app".into()),
    }
}

/// A task in every state /proc shows, one with its wait channel and stack read.
fn tasks() -> Vec<TaskState> {
    let mut all: Vec<TaskState> = "RSDTtZXI".chars().zip(1..).map(|(state, tid)| task(tid, "t", state)).collect();
    all[2].wchan = Some("fuse_wait_answer".into());
    all[2].stack = vec!["request_wait_answer+0x0/0x40".into()];
    all
}

fn holders() -> Vec<MountHolder> {
    let how = [HoldKind::Cwd, HoldKind::Root, HoldKind::OpenFile, HoldKind::MappedFile];
    how.into_iter()
        .zip(1..)
        .map(|(how, pid)| MountHolder {
            pid,
            start: Some(crate::event::ProcessStart(u64::from(pid) * 100)),
            comm: "sh".into(),
            how,
            path: b"/mnt/\xff odd/f".to_vec(),
            mntns: 4026532301,
            other_namespace: pid % 2 == 0,
            owner: (pid == 1).then(owner),
        })
        .collect()
}

fn cgroups() -> Vec<CgroupState> {
    let v2 = CgroupState {
        version: 2,
        tasks: tasks(),
        children: vec!["init.scope".into()],
        populated: Some(true),
        frozen: Some(false),
        has_kill: true,
    };
    let v1 =
        CgroupState { version: 1, tasks: vec![], children: vec![], populated: None, frozen: None, has_kill: false };
    vec![v2, v1]
}

/// The host's mount on a directory another namespace asked about.
fn elsewhere(namespace: &MountNamespace) -> Question {
    Question::MountsElsewhere {
        path: b"/var/lib/kubelet/pods/x".to_vec(),
        mntns: 4026532301,
        answer: vec![MountElsewhere {
            namespace: MountNamespace { mounts: Vec::new(), mntns: 4026531840, host: true, ..namespace.clone() },
            mount: golden_mount(),
            holders: holders(),
        }],
    }
}

/// Every question of the node, answered and unreadable.
fn every_question() -> Vec<Question> {
    let path = || b"/var/lib/kubelet/pods/x".to_vec();
    let namespace = MountNamespace {
        mntns: 4026532301,
        host: false,
        member: 812,
        member_start: Some(crate::event::ProcessStart(81_200)),
        member_comm: "kubelet".into(),
        owner: Some(owner()),
        mounts: vec![golden_mount()],
    };
    let copy = MountCopy {
        mntns: 4026532302,
        pid: 9,
        start: Some(crate::event::ProcessStart(900)),
        comm: "c".into(),
        mount_point: b"/mnt/\xff odd".to_vec(),
        propagation: vec!["master:3".into()],
        owner: Some(owner()),
    };
    let facts =
        FileFacts { mode: 0o41777, uid: 1, gid: 2, nlink: 3, size: 4096, is_dir: true, sticky: true, dev: (8, 1) };
    let usage = FsUsage {
        fstype: "ext4".into(),
        total_bytes: 10 << 30,
        free_bytes: 1 << 30,
        total_inodes: 655360,
        free_inodes: 65536,
        read_only: true,
    };
    let frozen =
        FreezerLevel { dir: b"/sys/fs/cgroup/freezer/kubepods".to_vec(), state: "FROZEN".into(), pids: vec![5, 6] };
    let mut asked = vec![
        Question::HostMounts { answer: Ok(vec![golden_mount()]) },
        Question::HostMounts { answer: Err(unreadable()) },
        Question::MountNamespace { mntns: 4026532301, answer: Ok(namespace.clone()) },
        Question::MountNamespace { mntns: 4026532309, answer: Err(unreadable()) },
        Question::ResolvedPath { pid: 100, path: b"/var/run/x".to_vec(), answer: Ok(b"/run/x".to_vec()) },
        Question::ResolvedPath { pid: 100, path: b"/var/run/y".to_vec(), answer: Err(unreadable()) },
        Question::MountHolders { mount: golden_mount(), mntns: 4026531840, answer: holders() },
        Question::MountHolders { mount: golden_mount(), mntns: 4026531841, answer: vec![] },
        Question::MountCopies { mount: golden_mount(), mntns: 4026531840, answer: vec![copy] },
        Question::MountCopies { mount: golden_mount(), mntns: 4026531841, answer: vec![] },
        elsewhere(&namespace),
        Question::MountsElsewhere { path: path(), mntns: 0, answer: vec![] },
        Question::InodeFlags {
            path: path(),
            root: 0,
            answer: Ok(InodeFlags { immutable: true, append_only: true, raw: 0x30 }),
        },
        Question::InodeFlags { path: path(), root: 0, answer: Err(unreadable()) },
        Question::FileFacts { path: path(), root: 0, answer: Ok(facts) },
        Question::FileFacts { path: path(), root: 0, answer: Err(unreadable()) },
        Question::DirSample {
            path: path(),
            limit: 3,
            root: 0,
            answer: Ok(DirSample { names: vec![b"a".to_vec(), b"\xff".to_vec()], counted: 7, complete: false }),
        },
        Question::DirSample { path: path(), limit: 3, root: 812, answer: Err(unreadable()) },
        Question::RemainingEntries {
            path: path(),
            root: 812,
            within_ms: 10,
            answer: Ok(EntryEstimate { entries: 1200, at_least: true, method: "link count".into() }),
        },
        Question::RemainingEntries { path: path(), root: 0, within_ms: 0, answer: Err(unreadable()) },
        Question::FsUsage { path: path(), root: 0, answer: Ok(usage) },
        Question::FsUsage { path: path(), root: 0, answer: Err(unreadable()) },
    ];
    for state in cgroups() {
        asked.push(Question::Cgroup { path: CG.as_bytes().to_vec(), answer: Ok(state) });
    }
    asked.extend([
        Question::Cgroup { path: CG.as_bytes().to_vec(), answer: Err(unreadable()) },
        Question::V1Freezer { path: path(), answer: Ok(vec![frozen]) },
        Question::V1Freezer { path: path(), answer: Err(unreadable()) },
    ]);
    for t in tasks() {
        asked.push(Question::Task { tid: t.tid, answer: Ok(t) });
    }
    asked.extend([
        Question::Task { tid: 99, answer: Err(unreadable()) },
        Question::FuseServers { answer: tasks() },
        Question::FuseServers { answer: vec![] },
        Question::PidNamespaceInit { pid: 3, answer: tasks().into_iter().take(1).collect() },
        Question::PidNamespaceInit { pid: 4, answer: vec![] },
        Question::FuseWaiting { connection: 48, answer: Ok(1) },
        Question::FuseWaiting { connection: 49, answer: Err(unreadable()) },
    ]);
    asked.extend(device_and_container_questions());
    asked.extend([
        // A zombie leader and its thread in D: a process still there.
        Question::Process {
            pid: 3,
            start: 987_654,
            answer: Ok(Some(ProcessState {
                pid: 3,
                start: 987_654,
                threads: vec![task(3, "java", 'Z'), TaskState { tid: 4, pid: 3, ..tasks().remove(2) }],
                thread_count: 2,
                ns_pid: Some(1),
                sig_ignored: 0,
                sig_caught: 1 << 14,
                mntns: Some(4026532301),
            })),
        },
        Question::Process { pid: 4, start: 0, answer: Ok(None) },
        Question::Process { pid: 5, start: 1, answer: Err(unreadable()) },
        Question::ProcessesRunning { name: b"calico-node".to_vec(), answer: vec![task(77, "calico-node", 'S')] },
        Question::ProcessesRunning { name: b"flanneld".to_vec(), answer: vec![] },
        Question::ProcessesUnreadable { answer: tasks() },
        Question::ProcessesUnreadable { answer: vec![] },
        Question::Avoid { path: b"/mnt/\xff odd".to_vec() },
    ]);
    asked
}

/// A loop device kubelet attached over a block volume's mapping, held by
/// a device-mapper device a process uses, and by a process of a pod.
fn golden_loop() -> LoopDevice {
    let opener = |pid: u32, path: &[u8], owner: Option<Owner>| DeviceOpener {
        pid,
        start: Some(crate::event::ProcessStart(u64::from(pid) + 1_000)),
        comm: "dd".into(),
        path: path.to_vec(),
        owner,
    };
    LoopDevice {
        name: "loop7".into(),
        dev: (7, 7),
        backing_file: b"/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/pv/dev/\xff".to_vec(),
        autoclear: true,
        holders: vec![BlockHolder {
            device: "dm-0".into(),
            mapper_name: Some("vg-data".into()),
            md: false,
            openers: vec![opener(12, b"/dev/dm-0", None)],
        }],
        openers: vec![opener(13, b"/dev/loop7", Some(owner()))],
    }
}

/// Loop devices, device-mapper maps; a container found with its
/// processes, one not found, one unread.
fn device_and_container_questions() -> Vec<Question> {
    vec![
        Question::LoopDevices { answer: vec![golden_loop()] },
        Question::LoopDevices { answer: vec![] },
        Question::DeviceMapper { major: 254, minor: 3, answer: Ok(Some(golden_mapper())) },
        Question::DeviceMapper { major: 8, minor: 0, answer: Ok(None) },
        Question::DeviceMapper { major: 254, minor: 4, answer: Err(unreadable()) },
        Question::ContainerProcesses { id: golden_container(), answer: Ok(Some(golden_container_cgroup())) },
        Question::ContainerProcesses { id: golden_container(), answer: Ok(None) },
        Question::ContainerProcesses { id: golden_container(), answer: Err(unreadable()) },
    ]
}

/// A container id, as containerd writes it.
fn golden_container() -> ContainerId {
    ContainerId::parse(&"4b".repeat(32)).unwrap()
}

/// A container's init and a preStop hook the runtime exec'd into it.
fn golden_container_cgroup() -> crate::inspect::ContainerCgroup {
    let process = |pid: u32, ppid: u32, start: u64, argv: &[&str]| crate::inspect::ContainerProcess {
        pid,
        start,
        started: std::time::UNIX_EPOCH + Duration::from_millis(1_780_000_000_000 + start * 10),
        ppid,
        comm: argv[0].into(),
        state: 'S',
        parent_outside: ppid == 50,
        stdio_pipes: vec![(15, 40_000 + u64::from(pid))],
        argv: argv.iter().map(|a| a.to_string()).collect(),
    };
    crate::inspect::ContainerCgroup {
        dir: format!("/sys/fs/cgroup/kubepods/pod{}/{}", POD, "4b".repeat(32)).into_bytes(),
        processes: vec![process(700, 50, 4000, &["nginx"]), process(900, 50, 9000, &["sh", "-c", "sleep 3600"])],
        runtime_pipes: vec![(15, 40_700), (15, 40_900)],
    }
}

/// A multipath map over one path that failed, queueing, with a partition
/// mapping on it; and the control device it could not be asked through.
fn golden_mapper() -> crate::inspect::MapperDevice {
    let mut map = crate::inspect::device_mapper::map(
        "1 queue_if_no_path 0 1 1 round-robin 0 1 1 7:0 1",
        "2 1 0 0 1 1 E 0 1 0 7:0 F 1",
    );
    map.holders =
        vec![BlockHolder { device: "dm-4".into(), mapper_name: Some("mpatha1".into()), md: false, openers: vec![] }];
    map
}

fn written(asked: &[Question]) -> String {
    asked.iter().map(|q| serde_json::to_string(&WireQuestion::of(q)).unwrap() + "\n").collect()
}

/// The question a line of the golden text reads as, or why it does not.
fn read(line: &str) -> Result<Option<Question>, String> {
    let wire: WireQuestion = serde_json::from_str(line).map_err(|e| e.to_string())?;
    wire.into_asked()
}

#[test]
fn every_question_and_answer_is_written_as_the_golden_text_says() {
    let text = written(&every_question());
    if std::env::var_os("PODSTUCK_BLESS").is_some() {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/record/tests/golden_questions.jsonl");
        std::fs::write(file, &text).unwrap();
        return;
    }
    for (line, (now, golden)) in text.lines().zip(GOLDEN.lines()).enumerate() {
        assert_eq!(now, golden, "line {} of golden_questions.jsonl", line + 1);
    }
    assert_eq!(text.lines().count(), GOLDEN.lines().count());
}

#[test]
fn the_golden_text_reads_back_as_every_question_and_answer() {
    let read: Vec<Question> = GOLDEN.lines().map(|l| read(l).unwrap().expect("an answer")).collect();
    assert_eq!(read, every_question());
}

#[test]
fn every_question_has_its_variant_in_the_golden_text() {
    let variants: std::collections::BTreeSet<String> =
        GOLDEN.lines().map(|l| l[2..].split('"').next().unwrap().to_string()).collect();
    // One per question of the table, and avoid; mounts_of_process is retired.
    let methods = QUESTION_NAMES.iter().chain(&["avoid"]);

    assert_eq!(variants, methods.map(|m| m.to_string()).collect());
}

/// Records written before errors had kinds hold the words alone: read
/// with the kind podstuck's words of that time said. A kind a newer
/// podstuck wrote and this one does not know is read from the words too.
#[test]
fn an_answer_without_its_kind_is_read_by_its_words() {
    let older =
        r#"{"file_facts":{"path":"/x","answer":{"unreadable":"timed out after 1 s: the filesystem may be hung"}}}"#;
    match read(older).unwrap() {
        Some(Question::FileFacts { answer: Err(why), .. }) => assert_eq!(why.kind(), "timed-out"),
        other => panic!("{other:?}"),
    }
    let newer = r#"{"task":{"tid":9,"answer":{"unreadable":"permission denied"},"error_kind":"quarantined"}}"#;
    match read(newer).unwrap() {
        Some(Question::Task { answer: Err(why), .. }) => {
            assert_eq!((why.kind(), why.why()), ("denied", "permission denied"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_renamed_answer_field_is_not_read_as_the_golden_answer() {
    let line = GOLDEN.lines().find(|l| l.contains("\"free_bytes\"")).unwrap();
    assert!(read(line).is_ok());
    let renamed = line.replace("\"free_bytes\"", "\"free_space\"");
    let error = read(&renamed).unwrap_err();
    assert!(error.contains("missing field `free_bytes`"), "{error}");
}

/// Every object key of a JSON value, as the path of keys that leads to it.
fn key_paths(value: &serde_json::Value, above: &[String], out: &mut Vec<Vec<String>>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, inner) in map {
                let mut path = above.to_vec();
                path.push(key.clone());
                // An absent value reads as null: nothing to tell a rename by.
                if !inner.is_null() {
                    out.push(path.clone());
                }
                key_paths(inner, &path, out);
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|i| key_paths(i, above, out)),
        _ => {}
    }
}

fn rename(value: &mut serde_json::Value, path: &[String]) {
    match value {
        serde_json::Value::Object(map) => {
            if path.len() == 1 {
                if let Some(inner) = map.remove(&path[0]) {
                    map.insert(format!("{}_renamed", path[0]), inner);
                }
            } else if let Some(inner) = map.get_mut(&path[0]) {
                rename(inner, &path[1..]);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|i| rename(i, path)),
        _ => {}
    }
}

#[test]
fn any_field_renamed_in_the_golden_text_fails_it() {
    let expected = every_question();
    for (line, question) in GOLDEN.lines().zip(&expected) {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        let mut paths = Vec::new();
        key_paths(&value, &[], &mut paths);
        for path in paths {
            let mut renamed = value.clone();
            rename(&mut renamed, &path);
            let read = read(&renamed.to_string());
            assert!(
                read.as_ref().ok() != Some(&Some(question.clone())),
                "{} renamed still reads the same: {line}",
                path.join(".")
            );
        }
    }
}
