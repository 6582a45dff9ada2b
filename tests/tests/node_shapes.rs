//! The node shapes beside "kubelet a host process": kubelet in a container
//! of its own, as kind, k3d and minikube's docker driver run it (and
//! Talos and RKE1, under containerd or docker). There `/var/lib/kubelet`
//! and the volumes mounted below it exist in the node container's mount
//! namespace only; podstuck, on the host, must read them there, say so,
//! and print fixes that work when pasted on the host.
//!
//! The node is a real docker container (a private dockerd, the busybox
//! image), privileged like a kind node, with busybox shells named as the
//! node's daemons (`systemd` as its PID 1, `kubelet`, `containerd`:
//! `podstuck_tests::runtimes::NODE_DAEMONS`). kubelet's removals run in children it forks, gone
//! by the time podstuck looks, as a real kubelet's `umount` children are.
//! podstuck runs on the host, node-wide, and looks at findings about the
//! test's own pods and paths only.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use podstuck_tests::container::{privileged, NodeDocker};
use podstuck_tests::findings::apply_fix;
use podstuck_tests::runtimes::{short_name, stderr_text};
use podstuck_tests::*;
use serde_json::Value;

const FINDING_TIMEOUT: Duration = Duration::from_secs(60);

/// The node container's scripts, run by busybox sh. `$STUCK` and `$CLEAN`
/// are pod UIDs; what the node's daemons have done is left as files at
/// its root, read from the host through `/proc/<pid>/root`.
const NODE_INIT: &str = r#"
STUCK_VOL=/var/lib/kubelet/pods/$STUCK/volumes/kubernetes.io~csi/pvc-left/mount
ROOTFS=/run/containerd/io.containerd.runtime.v2.task/k8s.io/$CID/rootfs
mkdir -p "$STUCK_VOL" "$ROOTFS"
# The CSI volume its driver reported unmounted but left mounted (P1).
mount -t tmpfs -o size=1m csi-left "$STUCK_VOL" || exit 1
# A container's rootfs that a process of the node still sits in (P4).
mount -t tmpfs -o size=1m rootfs "$ROOTFS" || exit 1
# The holder: a process whose cwd is the rootfs, asleep for good.
(cd "$ROOTFS" && exec sleep 1000000) &
echo ready > /ready
(exec -a sh /bin/kubelet /node/kubelet.sh) &
(exec -a sh /bin/containerd /node/containerd.sh) &
# PID 1 stays, doing nothing, as the node's systemd does for the test.
while :; do sleep 3600; done
"#;

/// kubelet: first a churn of a clean pod's volumes (mount, unmount,
/// remove: no finding), then the stuck volume's removal on its backoff.
const KUBELET: &str = r#"
CLEAN_VOL=/var/lib/kubelet/pods/$CLEAN/volumes/kubernetes.io~csi/pvc-clean/mount
STUCK_VOL=/var/lib/kubelet/pods/$STUCK/volumes/kubernetes.io~csi/pvc-left/mount
i=0
while [ $i -lt 20 ]; do
    mkdir -p "$CLEAN_VOL" && mount -t tmpfs -o size=1m csi-clean "$CLEAN_VOL" && umount "$CLEAN_VOL" && rmdir "$CLEAN_VOL" || exit 1
    i=$((i + 1))
done
echo done > /churned
while :; do
    if rmdir "$STUCK_VOL" 2>/dev/null; then echo removed > /removed; exit 0; fi
    # kubelet's retry rhythm, a stand-in for its backoff.
    sleep 0.5
done
"#;

/// containerd: the rootfs's unmount, retried every 50 ms.
const CONTAINERD: &str = r#"
ROOTFS=/run/containerd/io.containerd.runtime.v2.task/k8s.io/$CID/rootfs
while :; do
    if umount "$ROOTFS" 2>/dev/null; then echo unmounted > /unmounted; exit 0; fi
    # containerd's retry rhythm.
    sleep 0.05
done
"#;

/// A kind-like node: a privileged container of the busybox image, its
/// daemons running the scripts above. Removed with its dockerd.
struct NodeContainer {
    name: String,
    /// The host pid of its PID 1 (`systemd`).
    init: u32,
    stuck: String,
    clean: String,
    cid: String,
}

impl NodeContainer {
    fn start(node: &NodeDocker, scratch: &Path) -> NodeContainer {
        let scripts = scratch.join("node");
        std::fs::create_dir_all(&scripts).unwrap();
        for (name, text) in [("init.sh", NODE_INIT), ("kubelet.sh", KUBELET), ("containerd.sh", CONTAINERD)] {
            std::fs::write(scripts.join(name), text).unwrap();
        }
        let (stuck, clean) = (new_pod_uid(), new_pod_uid());
        let cid = format!("{:0>64}", short_name());
        let name = format!("kindnode-{}", short_name());
        let docker = &node.dockerd;
        let image = docker.image();
        let mount = format!("{}:/node:ro", scripts.display());
        let env = [format!("STUCK={stuck}"), format!("CLEAN={clean}"), format!("CID={cid}")];
        let privileged = privileged();
        let mut args: Vec<&str> = privileged.iter().map(String::as_str).collect();
        args = [&["run", "-d"][..], &args, &["--network", "none", "--name", &name, "--hostname", &name, "-v", &mount]]
            .concat();
        for e in &env {
            args.extend(["-e", e]);
        }
        args.extend([image, "/bin/sh", "-c", "exec -a sh /bin/systemd /node/init.sh"]);
        docker.docker(&args);
        let init: u32 = docker.inspect(&name, "{{.State.Pid}}").parse().expect("the node's pid");
        let container = NodeContainer { name, init, stuck, clean, cid };
        container.wait_for("ready", Duration::from_secs(30));
        container
    }

    /// A file the node's daemons leave at its root, as the host reaches it.
    fn file(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root/{name}", self.init))
    }

    fn wait_for(&self, name: &str, timeout: Duration) {
        wait_until(&format!("the node container to write /{name}"), timeout, || self.file(name).exists());
    }

    fn stuck_volume(&self) -> String {
        format!("/var/lib/kubelet/pods/{}/volumes/kubernetes.io~csi/pvc-left/mount", self.stuck)
    }

    fn rootfs(&self) -> String {
        format!("/run/containerd/io.containerd.runtime.v2.task/k8s.io/{}/rootfs", self.cid)
    }

    /// The host pid of the node's first process named `comm`: the
    /// daemon, not the short-lived children it forks under its name (nor
    /// the loops' `sleep`s, started after the holder's). Waited for: the
    /// node writes /ready before its daemons' shells have exec'd under
    /// their names, and a busy machine may take a while to get there.
    fn process(&self, comm: &str) -> u32 {
        let mntns = ns_of(self.init);
        poll_until(&format!("{comm} in node container {}", self.name), Duration::from_secs(30), || {
            std::fs::read_dir("/proc")
                .unwrap()
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter(|pid| ns_of(*pid) == mntns)
                .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim_end() == comm))
                .min()
        })
    }
}

fn ns_of(pid: u32) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/mnt")).map(|l| l.display().to_string()).unwrap_or_default()
}

fn mentions(finding: &Value, text: &str) -> bool {
    finding.to_string().contains(text)
}

kernel_test! {
    fn kubelet_in_a_node_container_volume_left_mounted_and_a_holder_beside_it(test) {
        let scratch = test.scratch();
        let Some(node) = NodeDocker::start(scratch.path(), test.name()) else { return };
        let mut watch = Watch::start(&["--findings", "--hung-after", "2s"]);
        let kind = NodeContainer::start(&node, scratch.path());
        let kubelet = kind.process("kubelet");
        // `podstuck check` says the node's shape.
        let check = std::process::Command::new(podstuck_binary()).arg("check").output().expect("podstuck check");
        let said = String::from_utf8_lossy(&check.stdout);
        assert!(said.contains("kubelet runs in a container:"), "podstuck check:\n{said}");
        let node_ns = ns_of(kind.init);
        let node_ns = node_ns.trim_start_matches("mnt:");

        // P1: confirmed in kubelet's namespace, though the host has no such mount.
        let volume = kind.stuck_volume();
        assert!(mountinfo::below(&[&volume]).is_empty(), "the host has the volume mounted too");
        let finding = watch.await_finding(
            FINDING_TIMEOUT,
            |f| f["kind"] == "volume-still-mounted" && f["paths"][0] == volume.as_str(),
            |e| {
                e.eq("/pod_uid", kind.stuck.as_str());
                e.eq("/confidence", "confirmed");
                // The caller: kubelet's short-lived child, gone when podstuck looks.
                e.eq("/actor/comm", "rmdir");
                e.eq("/actor/parent", "kubelet");
                e.contains("/summary", &format!("is still mounted (tmpfs, in kubelet's mount namespace mnt:{node_ns}"));
                e.eq("/fix", findings::entered(kubelet, &format!("umount -- {volume}")));
            },
        );
        // The fix, pasted on the host, unmounts it where kubelet sees it:
        // kubelet's next removal succeeds, and podstuck says it is over.
        apply_fix(&finding);
        kind.wait_for("removed", Duration::from_secs(10));
        watch.await_finding(FINDING_TIMEOUT, |f| f["kind"] == "volume-still-mounted" && f["paths"][0] == volume.as_str(), |e| e.eq("/status", "resolved"));

        // P4: the holder beside containerd in the node container is the one named and killed.
        let holder = kind.process("sleep");
        let rootfs = kind.rootfs();
        let finding = watch.await_finding(
            FINDING_TIMEOUT,
            |f| f["kind"] == "mount-held" && f["paths"][0] == rootfs.as_str(),
            |e| {
                e.eq("/confidence", "confirmed");
                e.eq("/actor/parent", "containerd");
                e.that(e.mentions_number("/evidence", holder.into()), format!("evidence should name the holder, pid {holder}"));
                // Only if the pid still names the holder (its start): pids are reused.
                e.contains("/fix", &format!("/proc/{holder}/stat"));
                e.contains("/fix", &format!("] && kill -TERM {holder}"));
            },
        );
        apply_fix(&finding);
        kind.wait_for("unmounted", Duration::from_secs(10));

        // kubelet's clean unmounts and removals of the other pod: nothing.
        kind.wait_for("churned", Duration::from_secs(10));
        let done = watch.stop(libc::SIGINT);
        let about_clean: Vec<&Value> = done.findings.iter().filter(|f| mentions(f, &kind.clean)).collect();
        assert!(about_clean.is_empty(), "a cleanly unmounted volume gave findings: {about_clean:?}");
    }
}

kernel_test! {
    fn podstuck_inside_a_node_container_says_to_run_it_on_the_host(test) {
        let scratch = test.scratch();
        let Some(node) = NodeDocker::start(scratch.path(), test.name()) else { return };
        let kind = NodeContainer::start(&node, scratch.path());
        // As `docker exec` into the node would: its PID namespace, privileged.
        let pid = format!("container:{}", kind.name);
        let out = node
            .run(&[privileged(), vec!["--pid".into(), pid, "--network".into(), "none".into()]].concat(), &["watch", "--json"])
            .stdin(Stdio::null())
            .output()
            .expect("docker run");
        let stderr = stderr_text(&out);
        assert!(!out.status.success(), "podstuck ran in the node container's PID namespace: {stderr}");
        assert!(stderr.contains("inside a node that is itself a container"), "{stderr}");
        assert!(stderr.contains("PID 1 is systemd") && stderr.contains("kubelet runs here"), "{stderr}");
        assert!(stderr.contains("run it on the machine that runs the node's container"), "{stderr}");
        assert!(stderr.contains(&format!("docker ps --filter name={}", kind.name)), "{stderr}");
    }
}
