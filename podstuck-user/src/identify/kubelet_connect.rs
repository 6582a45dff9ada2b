//! Whose volumes a failing `connect()` of kubelet's keeps on the node: a
//! CSI node plugin that is gone shows in the kernel as kubelet's connects
//! to its socket failing (ENOENT: no socket file; ECONNREFUSED: a socket
//! file nothing listens on), while kubelet retries NodeUnpublish and
//! NodeUnstage for ever and the pod's volume stays.
//!
//! The kernel streams a connect by its caller's name, a claim; it counts
//! here only when the caller is kubelet by what the kernel and the node
//! say: it runs in no pod's cgroup (as the kernel read it), it is the very
//! process that made the call (its start), and its executable is named
//! `kubelet` (or `k3s`, which runs kubelet in its own process). The socket
//! path is then kubelet's own word. It names pods only through kubelet's
//! own files: each CSI volume directory's `vol_data.json` (beside the
//! mount point, where a pod cannot write) says its driver, and a volume
//! is the connect's when its driver is a directory of the socket's path
//! (`plugins/<driver>/csi.sock`, the layout every driver's node plugin
//! uses). A connect that names no followed pod's volume is set aside,
//! counted.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::pod::PodUid;
use super::process::process_start;
use super::provenance::exe_name;
use crate::lifecycle::{ConnectFailed, LifecycleEvent};

/// The executables that are kubelet: kubelet itself, and k3s, which runs
/// it in-process.
pub const KUBELET_EXES: [&str; 2] = ["kubelet", "k3s"];

/// Pods and CSI volumes a pod read at most: a node runs some 110 pods.
const PODS_MAX: usize = 1024;
const VOLUMES_MAX: usize = 64;
/// The bytes of a `vol_data.json` read at most (kubelet's are ~300).
const VOL_DATA_MAX: u64 = 16 * 1024;
/// The longest driver name the CSI spec allows.
const DRIVER_NAME_MAX: usize = 63;

/// A pod's CSI volume, as kubelet keeps it on the node.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CsiVolume {
    pub pod: PodUid,
    /// The volume's directory name (the PV's name, or the inline
    /// volume's): `volumes/kubernetes.io~csi/<name>`.
    pub name: String,
    /// Its driver, as kubelet wrote it in `vol_data.json`.
    pub driver: String,
}

/// Why a connect was set aside, by name (the run's counts of records
/// not trusted).
pub fn dropped_name(why: Dropped) -> &'static str {
    match why {
        Dropped::InAPod => "connect-in-a-pod",
        Dropped::CallerGone => "connect-caller-gone",
        Dropped::NotKubelet => "connect-not-kubelet",
        Dropped::NoVolume => "connect-no-volume",
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// The caller runs in a pod's cgroup: a pod's process named kubelet.
    InAPod,
    /// The caller is gone, or its pid names another process by now.
    CallerGone,
    /// Its executable is not kubelet's.
    NotKubelet,
    /// No followed pod has a CSI volume of a driver the socket's path names.
    NoVolume,
}

/// The facts a verdict on one connect rests on.
pub struct ConnectFacts<'a> {
    pub event: &'a LifecycleEvent,
    pub failed: &'a ConnectFailed,
    /// The caller's pod by the cgroups the kernel read: Some(None) none,
    /// None not found.
    pub pod_of_caller: Option<Option<PodUid>>,
    pub proc_root: &'a Path,
    /// The kubelet root as podstuck reaches it.
    pub kubelet_dir: &'a Path,
}

/// The CSI volumes of followed pods whose driver the failing connect's
/// socket names, when its caller is kubelet; else why not.
pub fn judge(facts: &ConnectFacts<'_>, follows: impl Fn(&PodUid) -> bool) -> Result<Vec<CsiVolume>, Dropped> {
    let event = facts.event;
    // A cgroup not found proves nothing either way: the executable decides.
    if let Some(Some(_)) = facts.pod_of_caller {
        return Err(Dropped::InAPod);
    }
    let start = process_start(facts.proc_root, event.pid);
    match event.start {
        Some(kernel) if start != Some(kernel) => return Err(Dropped::CallerGone),
        Some(_) => {}
        // Unread (lockdown): the process holding the pid now is taken for
        // the caller only where the kernel's cgroup puts it in no pod.
        None if start.is_none() || facts.pod_of_caller != Some(None) => return Err(Dropped::CallerGone),
        None => {}
    }
    let exe =
        std::fs::read_link(facts.proc_root.join(event.pid.to_string()).join("exe")).map_err(|_| Dropped::CallerGone)?;
    if !KUBELET_EXES.contains(&exe_name(exe.as_os_str().as_encoded_bytes()).as_str()) {
        return Err(Dropped::NotKubelet);
    }
    // Read once more: a kubelet that exited and whose pid was taken while
    // it was read is another process.
    if process_start(facts.proc_root, event.pid) != start {
        return Err(Dropped::CallerGone);
    }
    let components: Vec<&[u8]> = facts.failed.socket.split(|b| *b == b'/').filter(|c| !c.is_empty()).collect();
    let names_driver = |driver: &str| components.iter().rev().skip(1).any(|c| *c == driver.as_bytes());
    let volumes: Vec<CsiVolume> =
        csi_volumes(facts.kubelet_dir, &follows).into_iter().filter(|v| names_driver(&v.driver)).collect();
    if volumes.is_empty() {
        return Err(Dropped::NoVolume);
    }
    Ok(volumes)
}

/// The CSI volumes kubelet keeps under `root` for followed pods, each
/// with its driver, in order (pods and volumes bounded).
pub fn csi_volumes(root: &Path, follows: &impl Fn(&PodUid) -> bool) -> Vec<CsiVolume> {
    let mut out = Vec::new();
    let Ok(pods) = std::fs::read_dir(root.join("pods")) else { return out };
    for entry in pods.flatten().take(PODS_MAX) {
        let Some(pod) = entry.file_name().to_str().and_then(|n| PodUid::parse(n).ok()) else { continue };
        if !follows(&pod) {
            continue;
        }
        let Ok(volumes) = std::fs::read_dir(entry.path().join("volumes/kubernetes.io~csi")) else { continue };
        for volume in volumes.flatten().take(VOLUMES_MAX) {
            let Some(driver) = driver_of(&volume.path().join("vol_data.json")) else { continue };
            let name = crate::words::safe_text(volume.file_name().as_encoded_bytes());
            out.push(CsiVolume { pod: pod.clone(), name, driver });
        }
    }
    out.sort();
    out
}

/// The driver kubelet wrote in a CSI volume's `vol_data.json`, when it is
/// a name the CSI spec allows.
fn driver_of(vol_data: &Path) -> Option<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(vol_data).ok()?.take(VOL_DATA_MAX).read_to_end(&mut bytes).ok()?;
    let data: BTreeMap<String, serde_json::Value> = serde_json::from_slice(&bytes).ok()?;
    let driver = data.get("driverName")?.as_str()?;
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_';
    (!driver.is_empty() && driver.len() <= DRIVER_NAME_MAX && driver.chars().all(allowed)).then(|| driver.to_string())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::event::ProcessStart;
    use crate::lifecycle::Lifecycle;

    const POD: &str = "1b2c3d4e-0000-4000-8000-00000000000a";
    const OTHER: &str = "1b2c3d4e-0000-4000-8000-00000000000b";

    struct Node {
        dir: crate::test_support::TempDir,
    }

    impl Node {
        fn new() -> Node {
            Node { dir: crate::test_support::TempDir::new("kubelet-connect") }
        }
        fn proc_root(&self) -> PathBuf {
            self.dir.0.join("proc")
        }
        fn kubelet(&self) -> PathBuf {
            self.dir.0.join("kubelet")
        }
        /// Process `pid` started at tick `start`, running `exe`.
        fn process(&self, pid: u32, start: u64, exe: &str) {
            let dir = self.proc_root().join(pid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            let stat = format!("{pid} (kubelet) S 1{} {start} 0 0\n", " 0".repeat(17));
            std::fs::write(dir.join("stat"), stat).unwrap();
            std::os::unix::fs::symlink(exe, dir.join("exe")).unwrap();
        }
        fn volume(&self, pod: &str, name: &str, vol_data: &str) {
            let dir = self.kubelet().join("pods").join(pod).join("volumes/kubernetes.io~csi").join(name);
            std::fs::create_dir_all(dir.join("mount")).unwrap();
            std::fs::write(dir.join("vol_data.json"), vol_data).unwrap();
        }
    }

    fn connect(pid: u32, start: u64, socket: &str) -> (LifecycleEvent, ConnectFailed) {
        let mut event =
            crate::lifecycle::tests::connect_failed(std::time::SystemTime::UNIX_EPOCH, socket, libc::ECONNREFUSED);
        (event.pid, event.start) = (pid, Some(ProcessStart(start)));
        let Lifecycle::ConnectFailed(failed) = &event.what else { unreachable!() };
        let failed = failed.clone();
        (event, failed)
    }

    fn verdict(
        node: &Node,
        pid: u32,
        start: u64,
        pod_of_caller: Option<Option<PodUid>>,
    ) -> Result<Vec<CsiVolume>, Dropped> {
        let (event, failed) = connect(pid, start, "/var/lib/kubelet/plugins/ebs.csi.aws.com/csi.sock");
        let dir = node.kubelet();
        let facts = ConnectFacts {
            event: &event,
            failed: &failed,
            pod_of_caller,
            proc_root: &node.proc_root(),
            kubelet_dir: &dir,
        };
        judge(&facts, |_| true)
    }

    #[test]
    fn kubelets_failing_connect_names_the_volumes_of_the_driver_its_socket_names() {
        let node = Node::new();
        node.process(700, 70, "/usr/bin/kubelet");
        node.volume(POD, "pvc-1", r#"{"driverName":"ebs.csi.aws.com","specVolID":"pvc-1"}"#);
        node.volume(POD, "pvc-2", r#"{"driverName":"efs.csi.aws.com","specVolID":"pvc-2"}"#);
        node.volume(OTHER, "pvc-3", r#"{"driverName":"ebs.csi.aws.com"}"#);
        let volumes = verdict(&node, 700, 70, Some(None)).unwrap();
        let names: Vec<(&str, &str)> = volumes.iter().map(|v| (v.pod.as_str(), v.name.as_str())).collect();
        assert_eq!(names, [(POD, "pvc-1"), (OTHER, "pvc-3")]);
        assert!(volumes.iter().all(|v| v.driver == "ebs.csi.aws.com"));
    }

    #[test]
    fn a_process_named_kubelet_in_a_pod_or_not_kubelet_or_gone_names_nothing() {
        let node = Node::new();
        node.process(700, 70, "/usr/bin/kubelet");
        node.process(800, 80, "/usr/bin/python3");
        node.volume(POD, "pvc-1", r#"{"driverName":"ebs.csi.aws.com"}"#);
        let pod = Some(Some(PodUid::parse(OTHER).unwrap()));
        assert_eq!(verdict(&node, 700, 70, pod), Err(Dropped::InAPod));
        assert_eq!(verdict(&node, 800, 80, Some(None)), Err(Dropped::NotKubelet));
        // Its pid taken by another process since, or gone.
        assert_eq!(verdict(&node, 700, 71, Some(None)), Err(Dropped::CallerGone));
        assert_eq!(verdict(&node, 900, 90, Some(None)), Err(Dropped::CallerGone));
        // Its start unread (lockdown): kubelet by its cgroup and file, not
        // where its cgroup is unknown.
        let unread = |pod_of_caller| {
            let (mut event, failed) = connect(700, 70, "/var/lib/kubelet/plugins/ebs.csi.aws.com/csi.sock");
            event.start = None;
            let dir = node.kubelet();
            let proc_root = node.proc_root();
            let facts = ConnectFacts {
                event: &event,
                failed: &failed,
                pod_of_caller,
                proc_root: &proc_root,
                kubelet_dir: &dir,
            };
            judge(&facts, |_| true).map(|v| v.len())
        };
        assert_eq!(unread(Some(None)), Ok(1));
        assert_eq!(unread(None), Err(Dropped::CallerGone));
    }

    #[test]
    fn a_socket_of_no_volumes_driver_and_a_forged_driver_name_name_nothing() {
        let node = Node::new();
        node.process(700, 70, "/usr/local/bin/k3s");
        node.volume(POD, "pvc-1", r#"{"driverName":"efs.csi.aws.com"}"#);
        // Not a name a driver may have: never matched, never printed.
        node.volume(POD, "pvc-2", r#"{"driverName":"../../x\n"}"#);
        node.volume(POD, "pvc-3", "not json");
        assert_eq!(verdict(&node, 700, 70, Some(None)), Err(Dropped::NoVolume));
        // The driver as the socket's file name only is no directory of it.
        let (event, failed) = connect(700, 70, "/run/efs.csi.aws.com");
        let dir = node.kubelet();
        let facts = ConnectFacts {
            event: &event,
            failed: &failed,
            pod_of_caller: Some(None),
            proc_root: &node.proc_root(),
            kubelet_dir: &dir,
        };
        assert_eq!(judge(&facts, |_| true), Err(Dropped::NoVolume));
    }

    #[test]
    fn only_followed_pods_volumes_are_read() {
        let node = Node::new();
        node.volume(POD, "pvc-1", r#"{"driverName":"ebs.csi.aws.com"}"#);
        node.volume(OTHER, "pvc-3", r#"{"driverName":"ebs.csi.aws.com"}"#);
        let only = |p: &PodUid| p.as_str() == OTHER;
        let volumes = csi_volumes(&node.kubelet(), &only);
        assert_eq!(volumes.len(), 1);
        assert_eq!(volumes[0].pod.as_str(), OTHER);
    }
}
