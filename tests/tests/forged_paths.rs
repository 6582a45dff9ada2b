//! End-to-end: a path is a claim until the kernel says whose it is. A
//! pod's process runs in its pod's cgroup and in a mount namespace of its
//! own, as every container's does; there it may mount what it likes
//! (a tmpfs over the kubelet directory, its own read-only root) and make
//! any path, another pod's volumes included. Its calls on such paths
//! give no other pod a finding and print no command for the node; what is
//! set aside is counted (`claims_set_aside`, `claims_naming_another_pod`
//! on the end line). And a CSI node plugin, whose namespace does hold the
//! node's kubelet directory, is believed: when its unmount of a pod's
//! volume reaches only its own copy, the node's mount and its user are
//! named, and no removal is printed that would detach it under that user.
//!
//! podstuck runs node-wide, as the DaemonSet does. Each test ends its
//! scenario with a barrier: a genuine failure of the node's, whose finding
//! the same review tells that would have told any finding of the calls
//! before it (the kernel hands calls over in order).
//!
//! Runs as root; see `kernel_test!` for the skip rule.

use std::path::Path;
use std::time::Duration;

use podstuck_tests::node::{make_shared, PodCgroup};
use podstuck_tests::*;
use serde_json::Value;

const FINDING_TIMEOUT: Duration = Duration::from_secs(60);

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// A word of a script for `sh -c`.
fn word(text: &str) -> String {
    shell_word(Path::new(text))
}

/// `script` run by a process of `cgroup`'s pod, in a mount namespace of
/// its own (private: nothing it mounts reaches the node, as in a
/// container): the mounts it makes there go with it.
fn in_its_own_namespace(cgroup: &PodCgroup, script: &str) -> Process {
    cgroup.run(&format!("exec unshare --mount --propagation private sh -c {}", word(script)))
}

/// The actor, as a script names it.
fn actor_word() -> String {
    shell_word(&actor_binary())
}

/// The barrier: pod `pod`'s emptyDir still mounted on the node, kubelet's
/// removal of it refused (EBUSY), and its confirmed finding awaited.
fn barrier(watch: &mut Watch, pod: &Pod) -> TmpfsMount {
    let dir = pod.empty_dir("barrier");
    std::fs::create_dir_all(&dir).unwrap();
    let mounted = TmpfsMount::new(&dir, "size=1m");
    let out = actor().args(["--comm", "kubelet", "rmdir"]).arg(&dir).output().expect("run the actor");
    assert_eq!(text_of(&out.stdout), format!("rmdir errno {}\n", libc::EBUSY), "the barrier's removal is refused");
    watch.await_finding(
        FINDING_TIMEOUT,
        |f| f["kind"] == "volume-still-mounted" && f["pod_uid"] == pod.uid(),
        |e| e.eq("/confidence", "confirmed"),
    );
    mounted
}

fn text_of(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// What a finding says, whole, for a search.
fn said(finding: &Value) -> String {
    finding.to_string()
}

/// The end line's count of failed calls set aside for `reason`.
fn set_aside(end: &Value, reason: &str) -> u64 {
    end["claims_set_aside"][reason].as_u64().unwrap_or(0)
}

kernel_test! {
    /// Issue 61's first two attacks, as a pod makes them: pod A's process
    /// mounts a tmpfs over the kubelet directory in its own namespace,
    /// makes pod B's emptyDir there with a file in it and fails kubelet's
    /// rmdir on it with ENOTEMPTY, again and again; then mounts a tmpfs at
    /// B's CSI volume path there, fails the rmdir with EBUSY twice and
    /// exits. B's real emptyDir holds B's data on the node, and B's real
    /// CSI volume is mounted there. Before, B got a confirmed dir-not-empty
    /// whose fix deleted B's data, and a volume-still-mounted whose fix
    /// unmounted B's live volume.
    fn a_pods_forged_kubelet_paths_give_another_pod_no_finding_and_are_counted(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let (a, b, fence) = (root.new_pod(), root.new_pod(), root.new_pod());
        let data = b.empty_dir("data");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("b-data"), "pod B's own data").unwrap();
        let csi = b.create_csi_volume("pv-b").join("mount");
        std::fs::create_dir_all(&csi).unwrap();
        let _b_volume = TmpfsMount::new(&csi, "size=1m");
        let cgroup = PodCgroup::create(scratch.path(), a.uid());
        let mut watch = Watch::start(&["--findings", "--kubelet-root", root.arg()]);

        let script = format!(
            "mount -t tmpfs pod-a {root} && mkdir -p {data}/x {csi} && mount -t tmpfs forged {csi} \
             && {actor} --comm kubelet --repeat 4 --every-ms 300 rmdir {data} \
             && exec {actor} --comm kubelet --repeat 2 --every-ms 300 rmdir {csi}",
            root = shell_word(root.path()),
            data = shell_word(&data),
            csi = shell_word(&csi),
            actor = actor_word(),
        );
        let (status, lines) = in_its_own_namespace(&cgroup, &script).finish(secs(60));
        let calls: Vec<&String> = lines.iter().filter(|l| l.starts_with("rmdir")).collect();
        let (enotempty, ebusy) = (format!("rmdir errno {}", libc::ENOTEMPTY), format!("rmdir errno {}", libc::EBUSY));
        assert!(status.success(), "the attacker failed: {lines:?}");
        assert_eq!(calls, [&enotempty, &enotempty, &enotempty, &enotempty, &ebusy, &ebusy], "the fixture: {lines:?}");

        let _fence = barrier(&mut watch, &fence);
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "podstuck failed: {}", done.stderr);
        for f in &done.findings {
            assert!(!said(f).contains(b.uid()), "a finding about pod B, from pod A's claims: {f}");
            assert!(!said(f).contains(a.uid()) || f["kind"] != "dir-not-empty", "a finding on A's own claims: {f}");
        }
        let end = done.end.expect("an end line");
        // The last may come after the pod's process exited: its namespace
        // gone, which proves nothing either.
        let counted = set_aside(&end, "not-the-nodes-directory") + set_aside(&end, "namespace-gone");
        assert!(counted >= 6, "the six failed calls are counted: {end}");
        assert!(end["claims_naming_another_pod"].as_u64().unwrap_or(0) >= 6, "{end}");
        // B's data and volume are as they were.
        assert!(data.join("b-data").exists());
        assert!(is_mountpoint(&csi), "pod B's volume is still mounted on the node");
    }
}

kernel_test! {
    /// A pod's own read-only root (readOnlyRootFilesystem) and a removal
    /// storm in its own directory, both in its own namespace at paths the
    /// node has too: EROFS on its read-only directory, and a storm of
    /// unlinks in its own. Before, the first was a node finding whose fix
    /// remounted the node's filesystem read-write, the second one whose
    /// fix drained the node.
    fn a_pods_own_read_only_root_and_its_own_storm_get_no_node_fix(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let (a, fence) = (root.new_pod(), root.new_pod());
        let (own_usr, own_etc) = (scratch.path().join("usr"), scratch.path().join("etc"));
        std::fs::create_dir_all(&own_usr).unwrap();
        std::fs::create_dir_all(&own_etc).unwrap();
        let cgroup = PodCgroup::create(scratch.path(), a.uid());
        let mut watch = Watch::start(&["--findings", "--kubelet-root", root.arg()]);

        // 60,000 unlinks in 3 s: a removal storm by podstuck's measure
        // (20,000 calls, 2 s, 1,000 a second), were it the node's.
        let script = format!(
            "mount -t tmpfs -o ro pod-a-usr {usr} && mount -t tmpfs pod-a-etc {etc} \
             && {actor} --repeat 3 --every-ms 200 unlink {usr}/bin-x \
             && exec {actor} --calls-per-s 20000 churn-unlink {etc} 60000",
            usr = shell_word(&own_usr),
            etc = shell_word(&own_etc),
            actor = actor_word(),
        );
        let (status, lines) = in_its_own_namespace(&cgroup, &script).finish(secs(120));
        assert!(status.success(), "the pod's process failed: {lines:?}");
        let erofs = format!("unlink errno {}", libc::EROFS);
        assert_eq!(lines.iter().filter(|l| **l == erofs).count(), 3, "the fixture: {lines:?}");
        assert!(lines.iter().any(|l| l == "churn-unlink 60000 unlinked, 0 failed"), "the fixture: {lines:?}");

        let _fence = barrier(&mut watch, &fence);
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "podstuck failed: {}", done.stderr);
        for f in &done.findings {
            assert!(!matches!(f["kind"].as_str(), Some("read-only-fs" | "removal-storm")), "a node finding of a pod's own: {f}");
            let fix = f["fix"].as_str().unwrap_or_default();
            assert!(!fix.contains("remount") && !fix.contains("drain"), "a node-wide fix: {f}");
        }
        let end = done.end.expect("an end line");
        assert!(set_aside(&end, "not-the-nodes-directory") >= 3, "the EROFS failures are counted: {end}");
    }
}

/// Pod B's CSI volume as a driver mounts it on the node, with a process
/// of B's in it (cwd): a live volume. Shared, its volume directory is a
/// shared mount of its own with the volume mounted below it: an unmount
/// propagates by the parent mount's peers, and this machine's root is
/// private (a node's, by systemd, is shared).
struct LiveVolume {
    path: std::path::PathBuf,
    user: Process,
    _mount: TmpfsMount,
    _shared_parent: Option<TmpfsMount>,
}

impl LiveVolume {
    fn new(b: &Pod, shared: bool) -> LiveVolume {
        let dir = b.create_csi_volume("pv-live");
        let shared_parent = shared.then(|| {
            let parent = TmpfsMount::new(&dir, "size=1m");
            make_shared(&dir);
            parent
        });
        let path = dir.join("mount");
        std::fs::create_dir_all(&path).unwrap();
        let mount = TmpfsMount::new(&path, "size=1m");
        let user = start_actor([std::ffi::OsStr::new("--comm"), "app".as_ref(), "hold-cwd".as_ref(), path.as_os_str()]);
        user.wait_ready(secs(10));
        LiveVolume { path, user, _mount: mount, _shared_parent: shared_parent }
    }
}

/// A CSI plugin's scene: pod B's live volume (its parent shared or not),
/// the plugin's pod cgroup, podstuck watching the node.
struct PluginScene {
    volume: LiveVolume,
    b: Pod,
    cgroup: PodCgroup,
    watch: Watch,
    _root: KubeletRoot,
    _scratch: ScratchDir,
}

impl PluginScene {
    fn new(test: &KernelTest, shared: bool) -> PluginScene {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let (plugin_pod, b) = (root.new_pod(), root.new_pod());
        let volume = LiveVolume::new(&b, shared);
        let cgroup = PodCgroup::create(scratch.path(), plugin_pod.uid());
        let watch = Watch::start(&["--findings", "--kubelet-root", root.arg()]);
        PluginScene { volume, b, cgroup, watch, _root: root, _scratch: scratch }
    }

    /// The plugin's unmounts of the volume, three, `before` them what it
    /// does first, in a namespace unshared with `propagation`: each a line
    /// `umount errno N`, then it stays (a plugin lives on).
    fn plugin(&self, propagation: &str, before: &str) -> Process {
        let script = format!(
            "{before}{actor} --comm csi-node --repeat 3 --every-ms 300 umount {path}; exec {actor} --comm csi-node sleep",
            path = shell_word(&self.volume.path),
            actor = actor_word(),
        );
        let plugin =
            self.cgroup.run(&format!("exec unshare --mount --propagation {propagation} sh -c {}", word(&script)));
        plugin.wait_for_lines(5, secs(30));
        plugin
    }

    /// Its finding of `kind` about the volume, once it is as `check` says.
    fn finding(&mut self, kind: &str, check: impl Fn(&mut Expect)) -> Value {
        let path = self.volume.path.to_str().unwrap().to_string();
        let b = self.b.uid().to_string();
        let user = self.volume.user.pid();
        self.watch.await_finding(
            FINDING_TIMEOUT,
            |f| f["kind"] == kind && f["paths"][0] == path.as_str(),
            |e| {
                e.eq("/pod_uid", b.as_str());
                e.eq("/confidence", "confirmed");
                e.that(e.mentions_number("/evidence", user.into()), format!("the evidence names the user, pid {user}"));
                e.that(!e.text("/fix").contains("rmdir"), "no removal in the fix");
                check(e);
            },
        )
    }

    /// Stops podstuck: no finding printed a removal, and nothing of the
    /// volume or its user was undone.
    fn end(self, plugin: Process) {
        drop(plugin);
        let done = self.watch.stop(libc::SIGINT);
        assert!(done.status.success(), "podstuck failed: {}", done.stderr);
        for f in &done.findings {
            assert!(!said(f).contains("rmdir --"), "a removal of the node's mountpoint in use: {f}");
        }
        assert!(is_mountpoint(&self.volume.path) && alive(self.volume.user.pid()), "nothing was undone by podstuck");
    }
}

kernel_test! {
    /// Issue 61's third case: a CSI node plugin's process, in its own pod
    /// and a private copy of the node's mounts, unmounts pod B's volume
    /// (NodeUnpublish): its own copy goes, the node's stays, in use. Its
    /// next unmounts fail EINVAL. The plugin's namespace holds the node's
    /// kubelet directory, so its path is believed: not-mounted names the
    /// node's mount and the process using it, and prints no rmdir (in the
    /// plugin's namespace an rmdir would detach the node's mount under
    /// its user).
    fn a_plugins_private_unmount_names_the_nodes_user_and_prints_no_removal(test) {
        let mut scene = PluginScene::new(&test, false);
        let first = format!("umount {} && ", shell_word(&scene.volume.path));
        let plugin = scene.plugin("private", &first);
        let einval = format!("umount errno {}", libc::EINVAL);
        let lines = plugin.lines();
        assert_eq!(lines.iter().filter(|l| **l == einval).count(), 3, "the fixture: {lines:?}");
        assert!(is_mountpoint(&scene.volume.path), "the node's mount stays");
        let user = scene.volume.user.pid();
        let finding = scene.finding("not-mounted", |e| {
            e.contains("/summary", "still mounted in the host's mount namespace");
            e.contains("/summary", &format!("in use by pid {user} (app)"));
            e.contains("/fix", &format!("/proc/{user}/stat"));
        });
        eprintln!("finding: {finding}");
        scene.end(plugin);
    }
}

kernel_test! {
    /// The same plugin with the kubelet directory shared with the node
    /// (Bidirectional, as CSI node plugins mount it): its unmount reaches
    /// the node's mount, which is in use, so it fails EBUSY. mount-held
    /// names the process using it on the node.
    fn a_plugins_shared_unmount_of_a_volume_in_use_names_the_nodes_user(test) {
        let mut scene = PluginScene::new(&test, true);
        let plugin = scene.plugin("unchanged", "");
        let ebusy = format!("umount errno {}", libc::EBUSY);
        let lines = plugin.lines();
        assert_eq!(lines.iter().filter(|l| **l == ebusy).count(), 3, "the fixture: {lines:?}");
        let finding = scene.finding("mount-held", |_| {});
        eprintln!("finding: {finding}");
        scene.end(plugin);
    }
}
