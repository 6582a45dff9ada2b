//! End-to-end: events know their absolute path, their actor and their pod,
//! whether the pod is named by the path (kubelet's tree, under a custom or
//! the default root) or by the caller's cgroup; `--pod` shows one pod only.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use podstuck_tests::*;
use serde_json::Value;

fn actor() -> Command {
    Command::new(env!("CARGO_BIN_EXE_actor"))
}

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
    let uid = new_pod_uid();
    let volume = root.join("pods").join(&uid).join("volumes/kubernetes.io~csi/pvc-e2e");
    let _tree = CreatedDirs::create(&volume);
    let _mount = TmpfsMount::new(&volume.join("mount"), "size=1m");
    let mut args = vec!["--pod", uid.as_str()];
    args.extend_from_slice(extra);
    let watch = Watch::start(&args);

    let (pid, said) = run_actor(&[
        "--comm".as_ref(),
        "kubelet".as_ref(),
        "rmdir-at".as_ref(),
        volume.as_os_str(),
        "mount".as_ref(),
    ]);
    assert!(said.contains(&format!("errno {}", libc::EBUSY)), "{said}");

    let done = stop_when(watch, |e| !of_pid(e, pid).is_empty());
    let events = of_pid(&done.events, pid);
    assert_eq!(events.len(), 1, "{events:?}");
    let e = events[0];
    assert_eq!(e["syscall"], "unlinkat");
    assert_eq!(e["path"], "mount");
    assert_eq!(abs_path_bytes(e), volume.join("mount").as_os_str().as_bytes());
    assert_eq!(e["errno"], "EBUSY");
    assert_eq!(e["pod_uid"], uid.as_str());
    assert_eq!(e["path_area"], "volume");
    assert_eq!(e["match"], serde_json::json!(["path"]));
    assert_eq!(e["actor"]["comm"], "kubelet");
    assert_eq!(e["actor"]["role"], "kubelet");
    assert_eq!(done.start["pods"], serde_json::json!([uid]));
}

#[test]
fn a_kubelet_removal_under_a_custom_root_names_the_pod() {
    if !can_touch_the_kernel("a_kubelet_removal_under_a_custom_root_names_the_pod") {
        return;
    }
    let scratch = ScratchDir::new("custom-root");
    let root = scratch.path().join("kubelet-root");
    let root_arg = root.to_str().unwrap().to_string();
    kubelet_removal_of_a_mounted_volume_is_tied_to_the_pod(&root, &["--kubelet-root", &root_arg]);
}

#[test]
fn a_kubelet_removal_under_a_symlinked_root_names_the_pod() {
    if !can_touch_the_kernel("a_kubelet_removal_under_a_symlinked_root_names_the_pod") {
        return;
    }
    // kubelet's root is often a symlink to a data disk; the kernel walks the
    // real directories, the user names the link.
    let scratch = ScratchDir::new("symlinked-root");
    let real = scratch.path().join("data/kubelet");
    std::fs::create_dir_all(&real).unwrap();
    let link = scratch.path().join("kubelet-link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let link_arg = link.to_str().unwrap().to_string();
    kubelet_removal_of_a_mounted_volume_is_tied_to_the_pod(&real, &["--kubelet-root", &link_arg]);
}

#[test]
fn a_kubelet_removal_under_the_default_root_names_the_pod() {
    if !can_touch_the_kernel("a_kubelet_removal_under_the_default_root_names_the_pod") {
        return;
    }
    // Only a pods/<fresh uid> subtree is made (and removed) if a real
    // kubelet root exists here.
    kubelet_removal_of_a_mounted_volume_is_tied_to_the_pod(Path::new("/var/lib/kubelet"), &[]);
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

#[test]
fn a_go_style_remove_all_gets_absolute_paths_for_every_call() {
    if !can_touch_the_kernel("a_go_style_remove_all_gets_absolute_paths_for_every_call") {
        return;
    }
    remove_all_gets_absolute_paths("removeall", &[]);
}

/// The walk of kernels without bpf_loop (5.8 to 5.16), run here.
#[test]
fn the_unrolled_walk_of_older_kernels_gets_the_same_absolute_paths() {
    if !can_touch_the_kernel("the_unrolled_walk_of_older_kernels_gets_the_same_absolute_paths") {
        return;
    }
    remove_all_gets_absolute_paths("removeall-unrolled", &["--path-walk", "unrolled"]);
}

/// A base directory deeper than the unrolled walk reaches is marked, never
/// cut into a wrong path; bpf_loop's walk reaches it.
#[test]
fn a_base_directory_deeper_than_the_walk_is_marked_never_wrong() {
    if !can_touch_the_kernel("a_base_directory_deeper_than_the_walk_is_marked_never_wrong") {
        return;
    }
    let scratch = ScratchDir::new("deep");
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

fn remove_all_gets_absolute_paths(name: &str, extra: &[&str]) {
    let scratch = ScratchDir::new(name);
    let root = scratch.path().join("kubelet");
    let uid = new_pod_uid();
    let top = root.join("pods").join(&uid).join("volumes/kubernetes.io~empty-dir/cache");
    let made = build_tree(&top);
    let root_arg = root.to_str().unwrap().to_string();
    let mut args = vec!["--kubelet-root", &root_arg];
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
        assert_eq!(e["pod_uid"], uid.as_str(), "{e}");
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

#[test]
fn cwd_relative_paths_are_made_absolute() {
    if !can_touch_the_kernel("cwd_relative_paths_are_made_absolute") {
        return;
    }
    let scratch = ScratchDir::new("cwd");
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

/// A cgroup v2 child named like a systemd pod slice; removed on drop.
fn pod_slice(uid: &str) -> (CgroupDirs, PathBuf) {
    let slice = cgroup2_root().join(format!(
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
        uid.replace('-', "_")
    ));
    (CgroupDirs::create(&slice), slice)
}

#[test]
fn a_task_in_a_pod_cgroup_is_tied_to_the_pod() {
    if !can_touch_the_kernel("a_task_in_a_pod_cgroup_is_tied_to_the_pod") {
        return;
    }
    let uid = new_pod_uid();
    let (_cgroup, slice) = pod_slice(&uid);
    let scratch = ScratchDir::new("cgroup");
    let file = scratch.path().join("inside-the-pod");
    std::fs::write(&file, b"x").unwrap();
    let watch = Watch::start(&["--pod", &uid]);

    let (pid, said) = run_actor(&["--cgroup".as_ref(), slice.as_os_str(), "unlink".as_ref(), file.as_os_str()]);
    assert!(said.contains("ok"), "{said}");

    let done = stop_when(watch, |e| !of_pid(e, pid).is_empty());
    let events = of_pid(&done.events, pid);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["pod_uid"], uid.as_str());
    assert_eq!(events[0]["match"], serde_json::json!(["cgroup"]));
    assert_eq!(abs_path_bytes(events[0]), file.as_os_str().as_bytes());
}

fn busy(args: &[&OsStr]) -> Child {
    actor().args(args).stdout(Stdio::null()).spawn().expect("spawn actor")
}

#[test]
fn following_pod_a_shows_nothing_of_pod_b() {
    if !can_touch_the_kernel("following_pod_a_shows_nothing_of_pod_b") {
        return;
    }
    let scratch = ScratchDir::new("two-pods");
    let root = scratch.path().join("kubelet");
    let (uid_a, uid_b) = (new_pod_uid(), new_pod_uid());
    let vol_a = root.join("pods").join(&uid_a).join("volumes/kubernetes.io~csi/pv-a");
    let vol_b = root.join("pods").join(&uid_b).join("volumes/kubernetes.io~csi/pv-b");
    let _mount_a = TmpfsMount::new(&vol_a.join("mount"), "size=1m");
    let _mount_b = TmpfsMount::new(&vol_b.join("mount"), "size=1m");
    let (_cgroup_b, slice_b) = pod_slice(&uid_b);
    let elsewhere = scratch.path().join("b-scratch");
    std::fs::create_dir(&elsewhere).unwrap();
    let root_arg = root.to_str().unwrap().to_string();
    let watch = Watch::start(&["--pod", &uid_a, "--kubelet-root", &root_arg]);

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
    assert!(done.events.iter().all(|e| e["pod_uid"] == uid_a.as_str()), "only pod A");
    let end = done.end.unwrap();
    assert!(end["calls"]["unlinkat"].as_u64().unwrap() >= 40, "B's calls are still counted: {end}");
}
