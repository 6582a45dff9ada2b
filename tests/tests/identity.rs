//! End-to-end: events know their absolute path, their actor and their pod,
//! whether the pod is named by the path (kubelet's tree, under a custom or
//! the default root) or by the caller's cgroup; `--pod` shows one pod only.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use podstuck_tests::*;
use serde_json::Value;

fn run_actor(args: &[&OsStr]) -> (u32, String) {
    let child = actor().args(args).stdout(Stdio::piped()).spawn().expect("spawn actor");
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "actor {args:?} failed");
    (pid, String::from_utf8_lossy(&out.stdout).into_owned())
}

fn of_pid(events: &[Value], pid: u32) -> Vec<&Value> {
    events.iter().filter(|e| e["pid"] == pid).collect()
}

/// A pod's CSI volume still mounted under `root`, removed by a `kubelet`
/// that opens the parent and calls unlinkat(dirfd, "mount", AT_REMOVEDIR).
fn kubelet_removal_of_a_mounted_volume_is_tied_to_the_pod(root: &Path, extra: &[&str]) {
    let pod = KubeletRoot::new(root).new_pod();
    let uid = pod.uid();
    let volume = pod.csi_volume("pvc-e2e");
    let _tree = CreatedDirs::create(&volume);
    let _mount = TmpfsMount::new(&volume.join("mount"), "size=1m");
    let mut args = vec!["--pod", uid];
    args.extend_from_slice(extra);
    let watch = Watch::start(&args);

    let (pid, said) =
        run_actor(&["--comm".as_ref(), "kubelet".as_ref(), "rmdir-at".as_ref(), volume.as_os_str(), "mount".as_ref()]);
    assert!(said.contains(&format!("errno {}", libc::EBUSY)), "{said}");

    let done = stop_when(watch, |e| !of_pid(e, pid).is_empty());
    let events = of_pid(&done.events, pid);
    assert_eq!(events.len(), 1, "{events:?}");
    let e = events[0];
    assert_eq!(e["syscall"], "unlinkat");
    assert_eq!(e["path"], "mount");
    assert_eq!(abs_path_bytes(e), volume.join("mount").as_os_str().as_bytes());
    assert_eq!(e["errno"], "EBUSY");
    assert_eq!(e["pod_uid"], uid);
    assert_eq!(e["path_area"], "volume");
    assert_eq!(e["match"], serde_json::json!(["path"]));
    assert_eq!(e["actor"]["comm"], "kubelet");
    assert_eq!(e["actor"]["role"], "kubelet");
    assert_eq!(done.start["pods"], serde_json::json!([uid]));
}

kernel_test! {
    fn a_kubelet_removal_under_a_custom_root_names_the_pod(test) {
        let scratch = test.scratch();
        let root = scratch.path().join("kubelet-root");
        kubelet_removal_of_a_mounted_volume_is_tied_to_the_pod(&root, &["--kubelet-root", text(&root)]);
    }
}

kernel_test! {
    fn a_kubelet_removal_under_a_symlinked_root_names_the_pod(test) {
        // kubelet's root is often a symlink to a data disk; the kernel walks the
        // real directories, the user names the link.
        let scratch = test.scratch();
        let real = scratch.path().join("data/kubelet");
        std::fs::create_dir_all(&real).unwrap();
        let link = scratch.path().join("kubelet-link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        kubelet_removal_of_a_mounted_volume_is_tied_to_the_pod(&real, &["--kubelet-root", text(&link)]);
    }
}

kernel_test! {
    fn a_kubelet_removal_under_the_default_root_names_the_pod() {
        // Only a pods/<fresh uid> subtree is made (and removed) if a real
        // kubelet root exists here.
        kubelet_removal_of_a_mounted_volume_is_tied_to_the_pod(Path::new("/var/lib/kubelet"), &[]);
    }
}

/// Builds dirs/files under `top`: 3 levels, files in each, returns every path.
fn build_tree(top: &Path) -> Vec<PathBuf> {
    let mut made = vec![top.to_path_buf()];
    std::fs::create_dir_all(top).unwrap();
    for a in 0..3 {
        let da = top.join(format!("dir{a}"));
        std::fs::create_dir(&da).unwrap();
        made.push(da.clone());
        for b in 0..3 {
            let db = da.join(format!("sub{b}"));
            std::fs::create_dir(&db).unwrap();
            made.push(db.clone());
            let f = db.join("file");
            std::fs::write(&f, b"x").unwrap();
            made.push(f);
        }
    }
    let odd = top.join(OsStr::from_bytes(b"name with space\nnewline \xff"));
    std::fs::write(&odd, b"x").unwrap();
    made.push(odd);
    made
}

kernel_test! {
    fn a_go_style_remove_all_gets_absolute_paths_for_every_call(test) {
        remove_all_gets_absolute_paths(&test, &[]);
    }
}

kernel_test! {
    /// The walk of kernels without bpf_loop (5.8 to 5.16), run here.
    fn the_unrolled_walk_of_older_kernels_gets_the_same_absolute_paths(test) {
        remove_all_gets_absolute_paths(&test, &["--path-walk", "unrolled"]);
    }
}

kernel_test! {
    /// A base directory deeper than the unrolled walk reaches is marked, never
    /// cut into a wrong path; bpf_loop's walk reaches it.
    fn a_base_directory_deeper_than_the_walk_is_marked_never_wrong(test) {
        let scratch = test.scratch();
        let mut dir = scratch.path().to_path_buf();
        for level in 0..30 {
            dir.push(format!("d{level}"));
        }
        std::fs::create_dir_all(&dir).unwrap();
        for (walk, reaches) in [("unrolled", false), ("auto", true)] {
            std::fs::write(dir.join("victim"), b"x").unwrap();
            let watch = Watch::start(&["--path-walk", walk]);
            assert_eq!(watch.start["path_walk"], if walk == "unrolled" { "unrolled" } else { "bpf_loop" });
            let (pid, said) = run_actor(&["--comm".as_ref(), "cleanup".as_ref(), "unlink-in".as_ref(), dir.as_os_str(), "victim".as_ref()]);
            assert!(said.contains("ok"), "{said}");
            let done = stop_when(watch, |e| !of_pid(e, pid).is_empty());
            let events = of_pid(&done.events, pid);
            let e = events.iter().find(|e| e["path"] == "victim").expect("the unlink");
            if reaches {
                assert_eq!(abs_path_bytes(e), dir.join("victim").as_os_str().as_bytes(), "{e}");
            } else {
                assert_eq!(e["abs_path"], Value::Null, "{e}");
                assert!(e["abs_path_error"].as_str().is_some_and(|w| w.contains("deeper")), "{e}");
            }
        }
    }
}

kernel_test! {
    /// With every kernel read off (what a lockdown=confidentiality kernel
    /// that still loads the read helper gets): whole paths, errnos and pods
    /// as always; a relative path is marked, never guessed.
    fn without_kernel_reads_whole_paths_still_name_their_pod(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let volume = pod.csi_volume("pvc-locked");
        let _tree = CreatedDirs::create(&volume);
        let mount = volume.join("mount");
        let _mount = TmpfsMount::new(&mount, "size=1m");
        std::fs::write(scratch.path().join("victim"), b"x").unwrap();
        let watch = Watch::start(&["--kubelet-root", root.arg(), "--path-walk", "none", "--every-call"]);
        assert_eq!((watch.start["path_walk"].as_str(), watch.start["attach"].as_str()), (Some("none"), Some("tracepoint")));
        let (kubelet, said) = run_actor(&["--comm".as_ref(), "kubelet".as_ref(), "rmdir".as_ref(), mount.as_os_str()]);
        assert!(said.contains("errno 16"), "{said}");
        let (cleanup, said) = run_actor(&["--comm".as_ref(), "cleanup".as_ref(), "unlink-in".as_ref(), scratch.path().as_os_str(), "victim".as_ref()]);
        assert!(said.contains("ok"), "{said}");
        let done = stop_when(watch, |e| !of_pid(e, kubelet).is_empty() && !of_pid(e, cleanup).is_empty());
        let busy = of_pid(&done.events, kubelet)[0];
        assert_eq!(abs_path_bytes(busy), mount.as_os_str().as_bytes(), "{busy}");
        assert_eq!((busy["errno"].as_str(), busy["pod_uid"].as_str()), (Some("EBUSY"), Some(pod.uid())), "{busy}");
        let relative = of_pid(&done.events, cleanup)[0];
        assert_eq!(relative["abs_path"], Value::Null, "{relative}");
        assert!(relative["abs_path_error"].as_str().is_some_and(|w| w.contains("lockdown")), "{relative}");
    }
}

fn remove_all_gets_absolute_paths(test: &KernelTest, extra: &[&str]) {
    let scratch = test.scratch();
    let root = KubeletRoot::new(scratch.path().join("kubelet"));
    let pod = root.new_pod();
    let uid = pod.uid();
    let top = pod.empty_dir("cache");
    let made = build_tree(&top);
    let mut args = vec!["--kubelet-root", root.arg()];
    args.extend_from_slice(extra);
    let watch = Watch::start(&args);

    let (pid, _) = run_actor(&["--comm".as_ref(), "kubelet".as_ref(), "remove-all".as_ref(), top.as_os_str()]);
    assert!(!top.exists());

    // Every path is removed once (files by unlinkat, dirs by AT_REMOVEDIR
    // after an EISDIR attempt).
    let done = stop_when(watch, |e| of_pid(e, pid).iter().filter(|e| e["errno"].is_null()).count() >= made.len());
    let events = of_pid(&done.events, pid);
    assert!(events.len() >= made.len(), "{} events for {} paths", events.len(), made.len());
    for e in &events {
        assert_eq!(e["syscall"], "unlinkat");
        assert!(e["path"].as_str().is_some_and(|p| !p.starts_with('/')) || e["path"].as_str() == Some("cache"));
        let abs = abs_path_bytes(e);
        assert!(abs.starts_with(top.as_os_str().as_bytes()), "{e}");
        assert_eq!(e["pod_uid"], uid, "{e}");
        assert_ne!(e["dfd"], "AT_FDCWD");
    }
    let removed: Vec<Vec<u8>> = events.iter().filter(|e| e["errno"].is_null()).map(|e| abs_path_bytes(e)).collect();
    for path in &made {
        assert!(removed.contains(&path.as_os_str().as_bytes().to_vec()), "no successful removal of {}", path.display());
    }
    // The odd name survives exactly, in JSON (hex) and in text (escaped).
    let odd = events.iter().find(|e| e["path_hex"].is_string()).expect("the non-UTF-8 name");
    assert_eq!(path_bytes(odd), b"name with space\nnewline \xff");
    assert!(odd["abs_path_hex"].is_string());
}

kernel_test! {
    fn cwd_relative_paths_are_made_absolute(test) {
        let scratch = test.scratch();
        let dir = scratch.path().join("work dir");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("victim"), b"x").unwrap();
        let watch = Watch::start(&[]);
        let (pid, said) = run_actor(&["--comm".as_ref(), "cleanup".as_ref(), "unlink-in".as_ref(), dir.as_os_str(), "victim".as_ref()]);
        assert!(said.contains("ok"), "{said}");
        let done = stop_when(watch, |e| !of_pid(e, pid).is_empty());
        let events = of_pid(&done.events, pid);
        let e = events.iter().find(|e| e["path"] == "victim").expect("the unlink");
        assert_eq!(e["dfd"], "AT_FDCWD");
        assert_eq!(abs_path_bytes(e), dir.join("victim").as_os_str().as_bytes());
        assert_eq!(e["pod_uid"], Value::Null);
        assert_eq!(e["actor"]["role"], "other");
    }
}

/// A cgroup v2 child named like a systemd pod slice; removed on drop.
fn pod_cgroup(uid: &str) -> (CgroupDirs, PathBuf) {
    let slice = pod_slice(&cgroup2_root(), "burstable", uid);
    (CgroupDirs::create(&slice), slice)
}

/// A task that joins `cgroup` (pod `uid`'s), unlinks a file and exits,
/// before podstuck can read its /proc entry: its one event is tied to the
/// pod by its cgroup.
fn a_task_in_the_pods_cgroup_is_tied_to_it(test: &KernelTest, uid: &str, cgroup: &Path) {
    let scratch = test.scratch();
    let file = scratch.path().join("inside-the-pod");
    std::fs::write(&file, b"x").unwrap();
    let watch = Watch::start(&["--pod", uid]);

    let (pid, said) = run_actor(&["--cgroup".as_ref(), cgroup.as_os_str(), "unlink".as_ref(), file.as_os_str()]);
    assert!(said.contains("ok"), "{said}");

    let done = stop_when(watch, |e| !of_pid(e, pid).is_empty());
    let events = of_pid(&done.events, pid);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["pod_uid"], uid);
    assert_eq!(events[0]["match"], serde_json::json!(["cgroup"]));
    assert_eq!(abs_path_bytes(events[0]), file.as_os_str().as_bytes());
}

kernel_test! {
    fn a_task_in_a_pod_cgroup_is_tied_to_the_pod(test) {
        let uid = new_pod_uid();
        let (_cgroup, slice) = pod_cgroup(&uid);
        a_task_in_the_pods_cgroup_is_tied_to_it(&test, &uid, &slice);
    }
}

/// Where this node mounts the v1 memory hierarchy (v1 and hybrid nodes:
/// EKS's AL2, RHEL 8, this project's machines).
fn v1_memory_hierarchy(test: &str) -> Option<PathBuf> {
    v1_hierarchy("memory").or_else(|| {
        missing(
            test,
            "a cgroup v1 memory hierarchy",
            "run on a cgroup v1 or hybrid node (cargo xtask vm-test boots 5.10 with cgroup v1)",
        )
    })
}

kernel_test! {
    /// On cgroup v1 (cgroupfs driver: /kubepods/<qos>/pod<uid>/<container>)
    /// the caller's cgroup is read in the kernel at the call: a process of
    /// the pod that has exited before podstuck looks is tied to it all the same.
    fn a_short_lived_task_in_a_v1_pod_cgroup_is_tied_to_the_pod(test) {
        let Some(memory) = v1_memory_hierarchy(test.name()) else { return };
        let uid = new_pod_uid();
        let container = memory.join(format!("kubepods/burstable/pod{uid}/{:0>64}", std::process::id()));
        let _cgroup = CgroupDirs::create(&container);
        a_task_in_the_pods_cgroup_is_tied_to_it(&test, &uid, &container);
    }
}

kernel_test! {
    /// Node-wide, as the DaemonSet watches a v1 node: a pod whose cgroups
    /// appear while podstuck runs, right after a call from another cgroup
    /// it did not know either, has its short-lived process tied to it. The
    /// index of cgroups once waited a second between rescans, and this
    /// call went unnamed.
    fn node_wide_a_new_v1_pods_short_lived_task_is_tied_to_it_after_another_unknown_cgroup(test) {
        let Some(memory) = v1_memory_hierarchy(test.name()) else { return };
        let scratch = test.scratch();
        let (elsewhere, inside) = (scratch.path().join("elsewhere"), scratch.path().join("inside-the-pod"));
        std::fs::write(&elsewhere, b"x").unwrap();
        std::fs::write(&inside, b"x").unwrap();
        let other = memory.join(format!("podstuck-test-other-{}", std::process::id()));
        let _other = CgroupDirs::create(&other);
        let watch = Watch::start(&["--every-call"]);

        let (first, said) =
            run_actor(&["--cgroup".as_ref(), other.as_os_str(), "unlink".as_ref(), elsewhere.as_os_str()]);
        assert!(said.contains("ok"), "{said}");
        let uid = new_pod_uid();
        let container = memory.join(format!("kubepods/burstable/pod{uid}/{:0>64}", std::process::id()));
        let _pod = CgroupDirs::create(&container);
        let (pid, said) = run_actor(&["--cgroup".as_ref(), container.as_os_str(), "unlink".as_ref(), inside.as_os_str()]);
        assert!(said.contains("ok"), "{said}");

        let done = stop_when(watch, |e| !of_pid(e, pid).is_empty() && !of_pid(e, first).is_empty());
        let events = of_pid(&done.events, pid);
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0]["pod_uid"], uid, "{}", events[0]);
        assert_eq!(events[0]["match"], serde_json::json!(["cgroup"]));
        assert_eq!(of_pid(&done.events, first)[0]["pod_uid"], Value::Null);
    }
}

fn busy(args: &[&OsStr]) -> Child {
    actor().args(args).stdout(Stdio::null()).spawn().expect("spawn actor")
}

kernel_test! {
    fn following_pod_a_shows_nothing_of_pod_b(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let (pod_a, pod_b) = (root.new_pod(), root.new_pod());
        let (uid_a, uid_b) = (pod_a.uid(), pod_b.uid());
        let vol_a = pod_a.csi_volume("pv-a");
        let vol_b = pod_b.csi_volume("pv-b");
        let _mount_a = TmpfsMount::new(&vol_a.join("mount"), "size=1m");
        let _mount_b = TmpfsMount::new(&vol_b.join("mount"), "size=1m");
        let (_cgroup_b, slice_b) = pod_cgroup(uid_b);
        let elsewhere = scratch.path().join("b-scratch");
        std::fs::create_dir(&elsewhere).unwrap();
        let watch = Watch::start(&["--pod", uid_a, "--kubelet-root", root.arg()]);

        // Both pods busy at once: A's and B's volume removals fail on the
        // kubelet rhythm, and a task inside B's cgroup deletes files elsewhere.
        let mut a = busy(&["--comm", "kubelet", "--repeat", "20", "--every-ms", "25", "rmdir-at"].map(OsStr::new).iter().copied().chain([vol_a.as_os_str(), "mount".as_ref()]).collect::<Vec<_>>());
        let mut b = busy(&["--comm", "kubelet", "--repeat", "20", "--every-ms", "25", "rmdir-at"].map(OsStr::new).iter().copied().chain([vol_b.as_os_str(), "mount".as_ref()]).collect::<Vec<_>>());
        let mut b_inside = busy(&[
            "--cgroup".as_ref(),
            slice_b.as_os_str(),
            "--repeat".as_ref(),
            "20".as_ref(),
            "--every-ms".as_ref(),
            "25".as_ref(),
            "unlink-in".as_ref(),
            elsewhere.as_os_str(),
            "no-such-file".as_ref(),
        ]);
        let (pid_a, pid_b, pid_b_inside) = (a.id(), b.id(), b_inside.id());
        for child in [&mut a, &mut b, &mut b_inside] {
            assert!(child.wait().unwrap().success());
        }

        let done = stop_when(watch, |e| of_pid(e, pid_a).len() >= 20);
        assert_eq!(of_pid(&done.events, pid_a).len(), 20, "all of A's calls");
        assert!(of_pid(&done.events, pid_b).is_empty(), "B's volume calls leaked into A's view");
        assert!(of_pid(&done.events, pid_b_inside).is_empty(), "B's cgroup calls leaked into A's view");
        assert!(done.events.iter().all(|e| e["pod_uid"] == uid_a), "only pod A");
        let end = done.end.unwrap();
        // The run's counts are A's calls; B's are still counted, as the node's.
        assert_eq!(end["calls"]["unlinkat"], 20, "A's calls: {end}");
        assert!(end["node_calls"].as_u64().unwrap() >= 60, "B's calls are still counted, as the node's: {end}");
    }
}
