//! `cgroup-busy` (P5): a pod's cgroup that kubelet cannot remove while a
//! task lives in it (cgroup v2), and a v1 pod frozen by the freezer in
//! every hierarchy: one finding each, whose fix, run as printed, lets
//! kubelet's next attempt remove them.

use std::path::Path;

use podstuck_tests::findings::apply_fix;
use podstuck_tests::node::{rmdir_busy, BusyPodCgroup};
use podstuck_tests::*;
use serde_json::Value;

use super::{all_say, hex64, podstuck, secs, stop, succeeds_soon, FINDING_TIMEOUT};

kernel_test! {
    fn p5_a_pod_cgroup_with_a_live_task_is_named_with_cgroup_kill(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let busy = BusyPodCgroup::create(scratch.path());
        let (uid, cgroup) = (busy.uid.as_str(), &busy.path);
        let mut watch = podstuck(&root, &["--pod", uid]);

        let kubelet = busy.kubelet_removing();
        let ebusy = rmdir_busy();

        if let Some(mut watch) = watch.take() {
            let pid = busy.task.pid();
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "cgroup-busy",
                |e| {
                    e.eq("/pod_uid", uid);
                    e.eq("/paths/0", text(cgroup));
                    e.eq("/actor/comm", "kubelet");
                    e.eq("/errno", "EBUSY");
                    e.that(e.mentions_number("/evidence", pid.into()), format!("evidence should name the live task, pid {pid}"));
                    e.eq("/fix", format!("echo 1 > {}", shell_word(&cgroup.join("cgroup.kill"))));
                },
            );
            all_say(&kubelet.lines(), &ebusy);
            apply_fix(&finding);
            assert_eq!(succeeds_soon(|| sys_rmdir(&cstring(cgroup))), 0, "kubelet's next rmdir after the fix");
            stop(watch, &finding);
            return;
        }
        all_say(&kubelet.lines(), &ebusy);
    }
}

kernel_test! {
    /// Issue 27's report on a cgroup v1 node: a container's task frozen by
    /// the v1 freezer, kubelet failing to remove the pod's cgroups in every
    /// hierarchy. One finding, not one per directory; its fix thaws before
    /// it kills (SIGKILL alone does nothing to a frozen task) and, run as
    /// printed, lets every one of the pod's cgroups go.
    fn p5_a_v1_pod_frozen_by_the_freezer_is_one_finding_whose_fix_frees_every_cgroup(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let uid = new_pod_uid();
        let uid = uid.as_str();
        let parent = text(Path::new(scratch.path().file_name().unwrap())).to_string();
        let mut cgroups = match V1PodCgroups::create(&parent, uid, &hex64()) {
            Ok(c) => c,
            Err(what) => return missing(test.name(), &what, "run it on a cgroup v1 or hybrid node (v1 controllers mounted under /sys/fs/cgroup)"),
        };
        let pid = cgroups.start_task("app");
        cgroups.freeze_container();
        let mut watch = podstuck(&root, &["--pod", uid]);

        // kubelet's pod cgroup cleanup, every 2 s: containers, then the pod, hierarchy by hierarchy.
        let dirs = cgroups.all();
        let mut args = os!["--comm", "kubelet", "--every-ms", "2000", "--repeat", "0", "rmdirs"];
        args.extend(dirs.iter().map(|d| d.clone().into_os_string()));
        let kubelet = start_actor(args);
        let ebusy = format!("rmdirs {}", vec![format!("errno {}", libc::EBUSY); dirs.len()].join(", "));
        all_say(&kubelet.wait_for_lines(1, secs(10)), &ebusy);

        if let Some(mut watch) = watch.take() {
            // What the cgroups hold when the fix is pasted is killed, never a pid read before.
            let thaw = format!("echo THAWED > {} && find ", shell_word(&cgroups.freezer.join("freezer.state")));
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "cgroup-busy",
                |e| {
                    e.eq("/pod_uid", uid);
                    e.eq("/severity", "critical");
                    e.eq("/confidence", "confirmed");
                    e.eq("/actor/comm", "kubelet");
                    e.that(e.text("/paths").matches("/sys/fs/cgroup/").count() == dirs.len(), format!("every one of the {} directories in /paths", dirs.len()));
                    for dir in &dirs {
                        e.contains("/evidence", &format!("of {} failed with EBUSY", text(dir)));
                    }
                    e.contains("/summary", &format!("pid {pid} (app, "));
                    e.contains("/summary", "frozen by the v1 freezer");
                    e.contains("/evidence", &format!("{}: FROZEN", text(&cgroups.freezer.join("freezer.state"))));
                    e.contains("/fix", &thaw);
                },
            );
            let told: Vec<Value> = watch.findings_so_far().into_iter().filter(|f| f["kind"] == "cgroup-busy").collect();
            assert_eq!(told.len(), 1, "one cgroup-busy finding for the pod, not one per directory: {told:#?}");
            // The fix as a person pastes it, with kubelet held between two
            // attempts so that its rmdirs do not race the fix's own.
            kubelet.signal(libc::SIGSTOP);
            apply_fix(&finding);
            let said = kubelet.lines().len();
            kubelet.signal(libc::SIGCONT);
            // kubelet's next attempt removes what is left: the pod's own
            // directories (the one after it, should the stop have caught
            // kubelet halfway through an attempt).
            let removed = |l: &String| l.strip_prefix("rmdirs ").is_some_and(|w| w.split(", ").all(|w| w == "ok" || w == "gone"));
            let next = kubelet.wait_for_lines(said + 1, secs(10));
            let next = if removed(&next[said]) { next } else { kubelet.wait_for_lines(said + 2, secs(10)) };
            assert!(next[said..].iter().any(removed), "kubelet's attempts after the fix: {:?}", &next[said..]);
            for dir in &dirs {
                assert!(!dir.exists(), "{} is left after the fix", dir.display());
            }
            stop(watch, &finding);
            return;
        }
        all_say(&kubelet.lines(), &ebusy);
    }
}
