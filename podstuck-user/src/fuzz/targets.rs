//! The targets, one per thing read from outside, each with its seeds
//! (valid inputs of its format), its vocabulary, what it checks beyond
//! "no panic", and the inputs that once crashed it.

use std::io::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use podstuck_common::{lifecycle as wire_lifecycle, Syscall};

use super::{run_target, Target};
use crate::event::{decode, tests::record_bytes, WallClock};
use crate::inspect::NodeInspector;
use crate::node_access::Node;

pub(crate) const TARGETS: &[Target] = &[
    Target {
        name: "call_records",
        seeds: call_seeds,
        words: &[b"/var/lib/kubelet/pods/", b"\x1b[2J", b"\xe2\x80\xae"],
        max_len: 16 << 10,
        run: call_record,
        regressions: &[],
    },
    Target {
        name: "lifecycle_records",
        seeds: lifecycle_seeds,
        words: &[
            b"CNI_COMMAND=DEL\0",
            b"CNI_ARGS=K8S_POD_UID=",
            b";K8S_POD_NAME=",
            b"1b2c3d4e-0000-4000-8000-00000000000a",
        ],
        max_len: 8 << 10,
        run: lifecycle_record,
        regressions: &[],
    },
    Target {
        name: "record_files",
        seeds: record_seeds,
        words: &[
            b"{\"review\":",
            b"{\"call\":",
            b"\"answer\":",
            b"\"unreadable\":",
            b"\"error_kind\":\"",
            b"null",
            b"{}",
            b"[]",
        ],
        max_len: 64 << 10,
        run: record_file,
        regressions: &[],
    },
    Target {
        name: "mountinfo",
        seeds: mountinfo_seeds,
        words: &[b" - ", b"\\040", b"\\134", b"shared:", b"master:", b"propagate_from:", b"fuse.", b"\n"],
        max_len: 16 << 10,
        run: mountinfo,
        regressions: &[],
    },
    Target {
        name: "proc_files",
        seeds: proc_seeds,
        words: &[
            b"\xfe",
            b"Tgid:\t",
            b"Threads:\t",
            b"SigIgn:\t",
            b"NSpid:\t",
            b"mnt_id:\t",
            b"(deleted)",
            b") D ",
            b"0::/",
        ],
        max_len: 16 << 10,
        run: proc_files,
        regressions: &[],
    },
    Target {
        name: "cgroup_files",
        seeds: cgroup_seeds,
        words: &[
            b"kubepods",
            b".slice",
            b"-pod",
            b".scope",
            b"cri-containerd-",
            b"name=systemd",
            b"populated ",
            b"frozen ",
        ],
        max_len: 8 << 10,
        run: cgroup_files,
        regressions: &[],
    },
    Target {
        name: "cni_environment",
        seeds: cni_seeds,
        words: &[b"CNI_COMMAND=", b"CNI_ARGS=", b"K8S_POD_UID=", b";", b"\0", b"IgnoreUnknown=1"],
        max_len: 8 << 10,
        run: cni_environment,
        regressions: &[CNI_ALL_ESCAPES],
    },
    Target {
        name: "api_json",
        seeds: api_seeds,
        words: &[
            b"\"deletionTimestamp\":",
            b"\"finalizers\":",
            b"\"status\":",
            b"\"conditions\":",
            b"null",
            b"\"2026-01-01T00:00:00Z\"",
        ],
        max_len: 32 << 10,
        run: api_json,
        // A deletionTimestamp before 1970 (year 27) panicked in humantime
        // as grace_period_past said when the pod was due.
        regressions: &[
            br#"{"metadata":{"deletionTimestamp":"0027-01-15T08:00:00Z","name":"web-0","namespace":"shop","uid":"1b2c3d4e-0000-4000-8000-00000000000a"},"spec":{"containers":[],"nodeName":"worker-1"}}"#,
        ],
    },
    Target {
        name: "kubeconfig",
        seeds: kubeconfig_seeds,
        words: &[
            b"clusters:",
            b"contexts:",
            b"users:",
            b"current-context:",
            b"certificate-authority:",
            b"tokenFile:",
            b"\n- ",
            b": ",
        ],
        max_len: 16 << 10,
        run: kubeconfig,
        regressions: &[],
    },
    Target {
        name: "http_requests",
        seeds: http_seeds,
        words: &[b"GET ", b" HTTP/1.1\r\n", b"\r\n\r\n", b"Host: x\r\n", b"/metrics", b"/findings", b"HEAD "],
        max_len: 8 << 10,
        run: http_request,
        regressions: &[],
    },
];

fn clock() -> WallClock {
    WallClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000), 1_000_000_000)
}

/// No byte that moves a terminal's cursor or changes its colours: what
/// podstuck prints of a workload's words is made safe first.
fn terminal_safe(text: &str) {
    let bad = text.chars().find(|c| (c.is_control() && *c != '\n') || ('\u{202a}'..='\u{202e}').contains(c));
    assert!(bad.is_none(), "a {bad:?} reaches the terminal in {text:?}");
}

fn call_seeds() -> Vec<Vec<u8>> {
    vec![
        record_bytes(Syscall::Rmdir, -16, 0, b"/var/lib/kubelet/pods/1b2c3d4e-0000-4000-8000-00000000000a/volumes/x"),
        record_bytes(Syscall::Unlinkat, 0, 0x200, b"relative/dir"),
        record_bytes(Syscall::Umount2, -22, 2, b"/mnt/\xff\x1b[31mred"),
        record_bytes(Syscall::Unlink, -1, 0, b""),
    ]
}

/// A call record as the kernel sends it: decoded, said as a JSON line and
/// as a call line; the JSON is JSON, the line safe for a terminal.
fn call_record(bytes: &[u8]) -> bool {
    let Ok(event) = decode(bytes, &clock()) else { return false };
    let _ = event.abs_path();
    let _ = crate::event::decode_flags(event.syscall, event.flags);
    let identity = crate::print::tests::identity(&event);
    let line = crate::print::json_lines::event_json(&event, &identity);
    let _: serde_json::Value = serde_json::from_str(&line).expect("a call's JSON line is JSON");
    terminal_safe(crate::print::call_lines::event_text(&event, &identity).trim_end_matches('\n'));
    true
}

fn lifecycle_seeds() -> Vec<Vec<u8>> {
    use crate::lifecycle::tests::{bytes, record};
    let env = b"PATH=/usr/bin\0CNI_COMMAND=DEL\0CNI_CONTAINERID=abc123\0CNI_NETNS=/var/run/netns/cni-1\0CNI_IFNAME=eth0\0CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0;K8S_POD_UID=1b2c3d4e-0000-4000-8000-00000000000a\0";
    let mut exec = record(wire_lifecycle::EXEC);
    exec.filename_len = 20;
    exec.env_len = env.len() as u16;
    exec.env_total = env.len() as u32;
    let mut filename = b"/opt/cni/bin/calico\0".to_vec();
    filename.resize(wire_lifecycle::FILENAME_MAX, 0);
    let mut signal = record(wire_lifecycle::SIGNAL);
    signal.sig = 15;
    signal.target_pid = 77;
    signal.target_comm = *b"nginx\0\0\0\0\0\0\0\0\0\0\0";
    vec![
        bytes(&exec, &[filename, env.to_vec()].concat()),
        bytes(&signal, &[]),
        bytes(&record(wire_lifecycle::EXIT), &[]),
    ]
}

fn lifecycle_record(bytes: &[u8]) -> bool {
    let Ok(event) = crate::lifecycle::decode(bytes, &clock()) else { return false };
    if let crate::lifecycle::Lifecycle::Exec { cni: Some(run), .. } = &event.what {
        terminal_safe(&run.pod_words());
        terminal_safe(&run.netns);
    }
    terminal_safe(&event.comm);
    let _ = format!("{event:?}");
    true
}

fn record_seeds() -> Vec<Vec<u8>> {
    // A record as `podstuck record` writes it, its entries unpacked: the
    // target packs them again, so mutations reach the entries' JSON.
    let (_, bytes) = crate::record::tests::recorded_incident();
    let header_end = bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(1).map_or(0, |(i, _)| i + 1);
    let mut plain = bytes[..header_end].to_vec();
    let mut body = Vec::new();
    let _ = std::io::Read::read_to_end(&mut flate2::read::MultiGzDecoder::new(&bytes[header_end..]), &mut body);
    plain.extend(body);
    vec![plain, bytes]
}

/// A record file: its entries packed as podstuck packs them (the input's
/// third line on), or the input as it is; read and diagnosed again. A
/// diagnosis that panics on what it was handed is a defect (replay
/// catches it and says so: here it is a crash).
fn record_file(input: &[u8]) -> bool {
    let packed = match input.starts_with(b"podstuck-record ") {
        true => {
            let header_end = input.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(1).map(|(i, _)| i + 1);
            let header_end = header_end.unwrap_or(input.len());
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            let _ = gz.write_all(&input[header_end..]);
            [&input[..header_end], &gz.finish().unwrap_or_default()[..]].concat()
        }
        false => input.to_vec(),
    };
    match crate::record::replay::replay_findings(&packed[..]) {
        Ok(_) => true,
        Err(e @ crate::record::read::RecordError::Diagnosis { .. }) => panic!("{e}"),
        Err(e) => {
            let _ = e.to_string();
            false
        }
    }
}

fn mountinfo_seeds() -> Vec<Vec<u8>> {
    vec![
        std::fs::read("/proc/self/mountinfo").unwrap_or_default(),
        b"1 0 8:1 / / rw - ext4 /dev/sda1 rw\n50 1 0:50 / /vol\\040x rw shared:5 master:3 - tmpfs tmpfs rw\n70 50 0:70 /sub /vol\\040x/in rw - fuse.sshfs u@h:/ rw,user_id=0\n".to_vec(),
    ]
}

/// A mount table: read, and asked which mount holds a path and what is
/// below one, as the detectors ask.
fn mountinfo(bytes: &[u8]) -> bool {
    let mounts = crate::mountinfo::parse_mountinfo(bytes);
    for m in mounts.iter().take(64) {
        let _ = crate::inspect::mounts::mount_containing(&mounts, &m.mount_point);
        let _ = crate::inspect::mounts::mounts_under(&mounts, &m.mount_point);
        let _ = m.kernel_dev();
        let _ = m.read_only();
    }
    let text = String::from_utf8_lossy(bytes);
    let _ = crate::identify::cgroups::cgroup2_mount(&text);
    let _ = crate::identify::cgroups::v1_hierarchies(&text);
    !mounts.is_empty()
}

/// A directory of the thread's own for the files an input becomes (a
/// fake /proc, a kubeconfig), in memory where the machine has /dev/shm:
/// a disk's journal would make each input cost milliseconds.
fn fake_proc() -> PathBuf {
    thread_local! {
        static DIR: OnceLock<Leftover> = const { OnceLock::new() };
    }
    DIR.with(|d| {
        d.get_or_init(|| {
            let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
            let dir = base
                .join(format!("podstuck-fuzz-{}-{:?}", std::process::id(), std::thread::current().id()))
                .to_string_lossy()
                .replace(['(', ')'], "");
            let dir = PathBuf::from(dir);
            std::fs::create_dir_all(dir.join("4242/fdinfo")).unwrap();
            std::fs::create_dir_all(dir.join("4242/task/4242")).unwrap();
            std::fs::create_dir_all(dir.join("4242/fd")).unwrap();
            std::fs::create_dir_all(dir.join("4242/ns")).unwrap();
            use std::os::unix::fs::symlink;
            let _ = symlink("/vol/file", dir.join("4242/fd/3"));
            let _ = symlink("/vol/dir", dir.join("4242/cwd"));
            let _ = symlink("/", dir.join("4242/root"));
            let _ = symlink("4242", dir.join("self"));
            Leftover(dir)
        })
        .0
        .clone()
    })
}

/// A thread's fuzz directory, removed when the thread (a test) ends.
struct Leftover(PathBuf);

impl Drop for Leftover {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The files of process 4242 an input fills, in its order, split by 0xfe.
const PROC_FILES: [&str; 9] =
    ["stat", "status", "wchan", "stack", "maps", "fdinfo/3", "cgroup", "mountinfo", "environ"];

fn proc_seeds() -> Vec<Vec<u8>> {
    let parts: [&[u8]; 9] = [
        b"4242 (we) ird (x) D 1 4242 4242 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 3 0 12345 0 0",
        b"Name:\twe) ird\nState:\tD (disk sleep)\nTgid:\t4242\nPid:\t4242\nThreads:\t3\nNSpid:\t4242\t1\nSigIgn:\t0000000000004000\nSigCgt:\t0000000000000000\n",
        b"fuse_simple_request",
        b"[<0>] fuse_simple_request+0x1a0/0x2c0 [fuse]\n[<0>] fuse_lookup_name+0xe8/0x200 [fuse]\n",
        b"7f00-7f01 r-xp 00000000 00:32 33    /vol/lib.so (deleted)\n7ffd-7ffe rw-p 00000000 00:00 0  [stack]\n",
        b"pos:\t0\nflags:\t0100000\nmnt_id:\t50\nino:\t7\n",
        b"12:pids:/kubepods/besteffort/pod1b2c3d4e-0000-4000-8000-00000000000a/abc\n0::/kubepods.slice/kubepods-pod1b2c3d4e_0000_4000_8000_00000000000a.slice/cri-containerd-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope\n",
        b"1 0 8:1 / / rw - ext4 /dev/sda1 rw\n50 1 0:50 / /vol rw - tmpfs tmpfs rw\n",
        b"CNI_COMMAND=DEL\0CNI_ARGS=K8S_POD_UID=1b2c3d4e-0000-4000-8000-00000000000a\0",
    ];
    vec![parts.join(&b'\xfe')]
}

/// /proc files of a process, as hostile as a process can make its own
/// (its name, its environment, its mapped files' names) and as cut as a
/// read of a process that exits midway: read by the node's real readers
/// (a task, a process with its threads, who holds a mount) and by
/// identify (its pod, from its cgroup file).
fn proc_files(input: &[u8]) -> bool {
    let root = fake_proc();
    let dir = root.join("4242");
    let parts: Vec<&[u8]> = input.split(|b| *b == 0xfe).collect();
    for (i, name) in PROC_FILES.iter().enumerate() {
        // A file the input does not reach is as a process cut short leaves it: gone.
        match parts.get(i) {
            Some(part) => std::fs::write(dir.join(name), part).unwrap(),
            None => {
                let _ = std::fs::remove_file(dir.join(name));
            }
        }
    }
    let _ = std::fs::write(dir.join("task/4242/stat"), parts[0]);
    let ns = parts.get(9).copied().unwrap_or(b"mnt:[4026531841]");
    let _ = std::fs::remove_file(dir.join("ns/mnt"));
    let _ = std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(ns), dir.join("ns/mnt"));
    let mut node = crate::inspect::real_node::RealNode::with_proc_root(Node::direct(), root.clone());
    let task = node.task(4242);
    let process = node.process(4242, 0);
    if let Ok(Some(p)) = &process {
        assert!(p.threads.len() <= crate::inspect::THREADS_KEPT);
        terminal_safe(&p.threads.iter().map(|t| t.comm.as_str()).collect::<String>());
    }
    if let Ok(t) = &task {
        terminal_safe(&t.comm);
    }
    if let Ok(mounts) = node.host_mounts() {
        if let Some(m) = mounts.first() {
            let _ = node.mount_holders(m, 0);
            let _ = node.mount_copies(m, 0);
        }
    }
    let _ = crate::identify::process::parse_stat(parts[0]);
    let _ = crate::identify::cgroups::cgroup_path_of_process(&root, 4242);
    task.is_ok()
}

fn cgroup_seeds() -> Vec<Vec<u8>> {
    vec![
        b"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1b2c3d4e_0000_4000_8000_00000000000a.slice/cri-containerd-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope".to_vec(),
        b"/kubepods/burstable/pod1b2c3d4e-0000-4000-8000-00000000000a/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef".to_vec(),
        b"12:pids:/kubepods/pod1b2c3d4e-0000-4000-8000-00000000000a\n1:name=systemd:/system.slice/x\n0::/\n".to_vec(),
        b"populated 1\nfrozen 0\n".to_vec(),
    ]
}

/// cgroup paths (where a call came from) and cgroup files: a pod and a
/// container read from a path, a process's cgroup file, cgroup.events.
fn cgroup_files(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(bytes);
    let (pod, container) = crate::identify::pod::clues_from_cgroup(&text);
    if let Some(pod) = &pod {
        assert!(crate::identify::pod::PodUid::parse(pod.as_str()).is_ok(), "{pod:?} is no pod UID");
    }
    let groups = <procfs::ProcessCGroups as procfs::FromRead>::from_read(bytes);
    if let Ok(groups) = &groups {
        let _ = crate::identify::cgroups::v1_cgroup_path(&groups.0);
    }
    let _ = crate::inspect::real_node::cgroupfs::key_value(&text, "populated");
    pod.is_some() || container.is_some() || groups.is_ok()
}

/// Found by the target: a value of control characters only, each kept
/// as a six-character escape (past the four the target first allowed).
const CNI_ALL_ESCAPES: &[u8] = b"CNI_COMMAND=DEL\0CNI_NETNS=\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b\0";

fn cni_seeds() -> Vec<Vec<u8>> {
    vec![b"PATH=/usr/bin\0CNI_COMMAND=DEL\0CNI_CONTAINERID=abc123\0CNI_NETNS=/var/run/netns/cni-1\0CNI_IFNAME=eth0\0CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0;K8S_POD_UID=1b2c3d4e-0000-4000-8000-00000000000a\0".to_vec()]
}

/// A CNI plugin's environment (the kernel's copy or /proc's): what it
/// says is a claim, bounded and made safe; a pod UID only if it is one.
fn cni_environment(bytes: &[u8]) -> bool {
    let Some(run) = crate::lifecycle::CniRun::from_env(bytes) else { return false };
    terminal_safe(&run.pod_words());
    for field in [&run.command, &run.container_id, &run.netns, &run.ifname, &run.pod_name, &run.pod_namespace] {
        terminal_safe(field);
        // The longest escape of one byte is six characters (`\u{1b}`).
        assert!(field.len() <= 6 * crate::lifecycle::CNI_VALUE_MAX, "{} bytes kept", field.len());
    }
    true
}

fn api_seeds() -> Vec<Vec<u8>> {
    let due = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let pod = crate::explain::tests::deleted_pod(due);
    vec![
        serde_json::to_vec(&pod).unwrap_or_default(),
        br#"{"node":"n","updated":"2026-01-01T00:00:00Z","findings":[{"kind":"hung-call","summary":"x\u001b[2J","fix":"y","severity":"critical","status":"active"}]}"#.to_vec(),
    ]
}

/// What the Kubernetes API (or kubectl, or a node's /findings) answers:
/// a pod read and explained, kubectl's JSON read, a node's findings page.
fn api_json(bytes: &[u8]) -> bool {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_100);
    let mut accepted = false;
    if let Ok(pod) = serde_json::from_slice::<k8s_openapi::api::core::v1::Pod>(bytes) {
        let snapshot = crate::explain::snapshot::ApiSnapshot::of(pod, now);
        let findings = crate::explain::findings(&snapshot);
        let _ = crate::explain::verdict(&snapshot, &findings);
        for f in &findings {
            terminal_safe(&f.summary);
        }
        accepted = true;
    }
    let text = String::from_utf8_lossy(bytes);
    accepted |= crate::kubectl_plugin::pod_json::TargetPod::parse(&text).is_ok();
    let _ = crate::kubectl_plugin::pod_json::DebugPodState::parse(&text);
    if let Ok(page) = crate::explain::all::FindingsPage::parse(&text) {
        for f in &page.findings {
            terminal_safe(&f.kind);
            terminal_safe(&f.summary.replace('\n', " "));
        }
        accepted = true;
    }
    let _ = crate::explain::PodRef::parse(&text, Some("default"));
    accepted
}

fn kubeconfig_seeds() -> Vec<Vec<u8>> {
    vec![br#"apiVersion: v1
kind: Config
current-context: kind-kind
clusters:
- name: kind-kind
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority: ca.crt
contexts:
- name: kind-kind
  context:
    cluster: kind-kind
    user: kind-kind
    namespace: shop
users:
- name: kind-kind
  user:
    tokenFile: token
"#
    .to_vec()]
}

/// A kubeconfig file: read as `podstuck explain` reads one, every file it
/// names placed where it is reached.
fn kubeconfig(bytes: &[u8]) -> bool {
    let dir = fake_proc();
    let path = dir.join("kubeconfig");
    std::fs::write(&path, bytes).unwrap();
    crate::explain::client::read_kubeconfig(&path, &|p: &Path| p.to_path_buf()).is_ok()
}

fn http_seeds() -> Vec<Vec<u8>> {
    vec![
        b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9090\r\nAccept: text/plain\r\n\r\n".to_vec(),
        b"HEAD /findings HTTP/1.0\r\n\r\n".to_vec(),
    ]
}

/// A request to the metrics endpoint, from anyone on the network.
fn http_request(bytes: &[u8]) -> bool {
    matches!(crate::serve::parse_head(bytes), Ok(Some(_)))
}

macro_rules! each_target {
    ($($test:ident => $name:literal,)*) => {
        $(
            #[test]
            fn $test() {
                run_target($name);
            }
        )*

        #[test]
        fn every_target_has_its_test() {
            let tested = [$($name),*];
            for target in TARGETS {
                assert!(tested.contains(&target.name), "{} has no test", target.name);
            }
        }
    };
}

each_target! {
    fuzz_call_records => "call_records",
    fuzz_lifecycle_records => "lifecycle_records",
    fuzz_record_files => "record_files",
    fuzz_mountinfo => "mountinfo",
    fuzz_proc_files => "proc_files",
    fuzz_cgroup_files => "cgroup_files",
    fuzz_cni_environment => "cni_environment",
    fuzz_api_json => "api_json",
    fuzz_kubeconfig => "kubeconfig",
    fuzz_http_requests => "http_requests",
}
