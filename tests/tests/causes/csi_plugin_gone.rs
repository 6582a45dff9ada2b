//! `csi-plugin-gone` (P17): kubelet retrying a CSI driver's node plugin
//! whose socket nothing listens on, while the pod's CSI volume stays; its
//! near miss: a pod's process that names its file and itself `kubelet`
//! dialing the same socket, which must give no pod a finding.

use std::path::{Path, PathBuf};

use podstuck_tests::*;
use serde_json::Value;

use super::{secs, watch_pods, FINDING_TIMEOUT};

/// The drivers the tests' CSI volumes are of: one each, as the tests run
/// side by side and each one's kubelet stand-in is a kubelet to the
/// other's podstuck too.
const DRIVER: &str = "gone.csi.podstuck.test";
const FORGED_DRIVER: &str = "forged.csi.podstuck.test";

/// The driver's socket, `<driver>/csi.sock` as every node plugin lays it
/// out (`plugins/<driver>/csi.sock` under the kubelet root, which would
/// not fit a socket's 108 bytes below a scratch directory), left behind
/// by a plugin that is gone: a socket file nothing listens on.
fn stale_socket(scratch: &Path, driver: &str) -> PathBuf {
    let socket = scratch.join(driver).join("csi.sock");
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    drop(std::os::unix::net::UnixListener::bind(&socket).expect("bind the plugin's socket"));
    socket
}

/// The `actor` binary copied as `<scratch>/bin/kubelet`: a process whose
/// executable is named kubelet, as the node's is.
fn kubelet_binary(scratch: &Path) -> PathBuf {
    let kubelet = scratch.join("bin/kubelet");
    std::fs::create_dir_all(kubelet.parent().unwrap()).unwrap();
    std::fs::copy(actor_binary(), &kubelet).expect("copy the actor as kubelet");
    kubelet
}

/// kubelet's stand-in dialing `socket` every 200 ms, each connect failing.
fn dialing(socket: &Path) -> Vec<String> {
    let every = ["--repeat", "0", "--every-ms", "200", "connect"];
    every.iter().map(|s| s.to_string()).chain([socket.display().to_string()]).collect()
}

kernel_test! {
    /// Issue 63's fifth cause: kubelet's NodeUnpublish of a pod's CSI
    /// volume cannot reach the driver's node plugin (its pod gone, its
    /// socket left behind), so kubelet retries for ever. Told on the pod,
    /// naming the driver, the socket, the volume and the command that
    /// finds the plugin's pod; and not no-teardown-seen, since kubelet is
    /// at work.
    fn kubelet_failing_to_reach_a_csi_plugin_is_csi_plugin_gone_on_the_volumes_pod(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid().to_string();
        pod.create_csi_volume_of("pvc-plugin-gone", DRIVER);
        let socket = stale_socket(scratch.path(), DRIVER);
        let kubelet = kubelet_binary(scratch.path());
        let mut watch = watch_pods(&root, &[&pod]);
        let retrying = Process::spawn(std::process::Command::new(&kubelet).args(dialing(&socket)));
        let refused = format!("connect errno {}", libc::ECONNREFUSED);
        assert!(retrying.wait_for_line(&refused, secs(10)), "kubelet's stand-in: {:?}", retrying.lines());
        let shown = socket.display().to_string();
        let finding = watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(),
            |f| f["kind"] == "csi-plugin-gone",
            |e| {
                e.eq("/status", "active");
                e.eq("/severity", "critical");
                e.eq("/confidence", "confirmed");
                e.eq("/pod_uid", uid.as_str());
                e.eq("/errno", "ECONNREFUSED");
                e.eq("/paths/0", shown.as_str());
                e.eq("/details/driver", DRIVER);
                e.eq("/details/volumes/0", "pvc-plugin-gone");
                e.eq("/actor/comm", "kubelet");
                e.contains("/summary", &format!("driver {DRIVER}"));
                e.contains("/summary", "nothing listens on");
                e.contains("/summary", &format!("pvc-plugin-gone of pod {uid}"));
                e.that(e.mentions("/evidence", "is a socket file"), "the evidence says what the path holds");
                e.contains("/fix", "--field-selector spec.nodeName=");
                e.contains("/fix", "-e gone");
                e.that(e.mentions("/advice", "kubectl get csinode"), "the advice says how to see it registered");
            },
        );
        eprintln!("finding: {finding}");
        drop(retrying);
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "podstuck failed: {}", done.stderr);
        let told: Vec<&Value> = done.findings.iter().filter(|f| f["kind"] == "no-teardown-seen").collect();
        assert!(told.is_empty(), "kubelet at work on the pod is no silence: {told:?}");
        let end = done.end.expect("an end line");
        assert!(end["lifecycle_seen"]["connect-failed"].as_u64().unwrap_or(0) >= 2, "{end}");
    }
}

kernel_test! {
    /// A pod's process that copies a binary as `kubelet` and dials the
    /// same socket in its own cgroup, and a process named kubelet whose
    /// executable is not: neither is kubelet, so neither names the pod
    /// whose volume the socket's driver serves. Both are counted as set
    /// aside, by why.
    fn a_process_claiming_to_be_kubelet_gives_no_pod_a_csi_finding(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let victim = root.new_pod();
        victim.create_csi_volume_of("pvc-victim", FORGED_DRIVER);
        let attacker = root.new_pod();
        let socket = stale_socket(scratch.path(), FORGED_DRIVER);
        let kubelet = kubelet_binary(scratch.path());
        let watch = watch_pods(&root, &[&victim, &attacker]);
        let cgroup = PodCgroup::create(scratch.path(), attacker.uid());
        let args = dialing(&socket).iter().map(|a| shell_word(Path::new(a))).collect::<Vec<_>>();
        let in_a_pod = cgroup.run(&format!("exec {} {}", shell_word(&kubelet), args.join(" ")));
        // Named kubelet by prctl, its executable the actor's.
        let mut named = vec!["--comm".to_string(), "kubelet".to_string()];
        named.extend(dialing(&socket));
        let not_kubelet = start_actor(&named);
        // Dialing for 7 s: longer than kubelet's failures take to be told.
        let refused = format!("connect errno {}", libc::ECONNREFUSED);
        for process in [&in_a_pod, &not_kubelet] {
            let lines = process.wait_for_lines(36, secs(30));
            assert!(lines.iter().filter(|l| *l != "ready").all(|l| *l == refused), "{lines:?}");
        }
        let done = watch.stop(libc::SIGINT);
        drop((in_a_pod, not_kubelet));
        assert!(done.status.success(), "podstuck failed: {}", done.stderr);
        let told: Vec<&Value> = done.findings.iter().filter(|f| f["kind"] == "csi-plugin-gone").collect();
        assert!(told.is_empty(), "a claim of being kubelet told: {told:?}");
        let end = done.end.expect("an end line");
        for reason in ["connect-in-a-pod", "connect-not-kubelet"] {
            assert!(end["lifecycle_dropped"][reason].as_u64().unwrap_or(0) >= 2, "{reason}: {end}");
        }
    }
}
