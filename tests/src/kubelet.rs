//! kubelet's tree, as the scenarios lay it out: a kubelet root
//! (`--kubelet-root`), a pod's directory under it, and the directories
//! kubelet gives a pod's volumes and subpaths; fresh pod UIDs, and the
//! cgroup the systemd driver names after a pod. The paths are only
//! spelled here (a test makes what its scenario needs, mounts included),
//! except by [`Pod::create_csi_volume`], which lays a volume out whole.

use std::ffi::CString;
use std::path::{Path, PathBuf};

use crate::calls::cstring;
use crate::harness::text;

/// A kubelet root directory: `/var/lib/kubelet` on a node, a directory of
/// the test's own here.
pub struct KubeletRoot(PathBuf);

impl KubeletRoot {
    /// The root at `dir`, made or not.
    pub fn new(dir: impl Into<PathBuf>) -> KubeletRoot {
        KubeletRoot(dir.into())
    }

    /// The root at `dir`, made now with no pod in it: podstuck wants a
    /// kubelet root that exists.
    pub fn empty(dir: impl Into<PathBuf>) -> KubeletRoot {
        let root = KubeletRoot::new(dir);
        std::fs::create_dir_all(&root.0).expect("create the kubelet root");
        root
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The root as podstuck's `--kubelet-root` argument.
    pub fn arg(&self) -> &str {
        text(&self.0)
    }

    /// The pod `uid` under this root.
    pub fn pod(&self, uid: &str) -> Pod {
        Pod { uid: uid.to_string(), dir: self.0.join("pods").join(uid) }
    }

    /// A pod with a fresh UID under this root.
    pub fn new_pod(&self) -> Pod {
        self.pod(&new_pod_uid())
    }

    /// `n` pods with fresh UIDs (directories of root's), and in each a
    /// path whose unlink fails with ENOENT: a call per pod, for tests of
    /// more pods than podstuck keeps apart.
    pub fn pods_missing_a_file(&self, n: usize) -> (Vec<String>, Vec<CString>) {
        let pods: Vec<String> = (0..n).map(|_| new_pod_uid()).collect();
        let mut paths = Vec::new();
        for uid in &pods {
            let volume = self.pod(uid).dir().join("volumes");
            std::fs::create_dir_all(&volume).unwrap();
            paths.push(cstring(&volume.join("missing")));
        }
        (pods, paths)
    }
}

/// A kubelet root `<dir>/kubelet` with a fresh pod whose emptyDir `name`
/// is made: where a workload's files come and go. (root, pod, the emptyDir)
pub fn pod_with_empty_dir(dir: &Path, name: &str) -> (KubeletRoot, Pod, PathBuf) {
    let root = KubeletRoot::new(dir.join("kubelet"));
    let pod = root.new_pod();
    let volume = pod.empty_dir(name);
    std::fs::create_dir_all(&volume).unwrap();
    (root, pod, volume)
}

/// A pod's directory, `<kubelet root>/pods/<uid>`, and the paths in it.
#[derive(Clone)]
pub struct Pod {
    uid: String,
    dir: PathBuf,
}

impl Pod {
    pub fn uid(&self) -> &str {
        &self.uid
    }

    /// `<root>/pods/<uid>`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `<pod>/volumes/<plugin>/<name>`: where kubelet mounts a volume.
    fn volume(&self, plugin: &str, name: &str) -> PathBuf {
        self.dir.join("volumes").join(plugin).join(name)
    }

    /// A CSI volume's directory: its `mount` is where the driver mounts it.
    pub fn csi_volume(&self, pv: &str) -> PathBuf {
        self.volume("kubernetes.io~csi", pv)
    }

    /// A CSI volume's directory as kubelet lays it out, made now with its
    /// `vol_data.json`.
    pub fn create_csi_volume(&self, pv: &str) -> PathBuf {
        self.create_csi_volume_of(pv, "hostpath.csi.k8s.io")
    }

    /// The same, of CSI driver `driver`.
    pub fn create_csi_volume_of(&self, pv: &str, driver: &str) -> PathBuf {
        let dir = self.csi_volume(pv);
        std::fs::create_dir_all(&dir).unwrap();
        let data = format!(
            r#"{{"driverName":"{driver}","volumeHandle":"{pv}","specVolID":"{pv}","nodeName":"node-1"}}"#
        );
        std::fs::write(dir.join("vol_data.json"), data).unwrap();
        dir
    }

    /// An emptyDir volume.
    pub fn empty_dir(&self, name: &str) -> PathBuf {
        self.volume("kubernetes.io~empty-dir", name)
    }

    /// A projected volume (a service account token...).
    pub fn projected(&self, name: &str) -> PathBuf {
        self.volume("kubernetes.io~projected", name)
    }

    /// The emptyDir plugin's own directory for a volume,
    /// `<pod>/plugins/kubernetes.io~empty-dir/<name>`.
    pub fn empty_dir_plugin(&self, name: &str) -> PathBuf {
        self.dir.join("plugins/kubernetes.io~empty-dir").join(name)
    }

    /// `<pod>/volume-subpaths/<volume>/<container>/<index>`: where kubelet
    /// bind-mounts a container's subPath of a volume.
    pub fn subpath(&self, volume: &str, container: &str, index: u32) -> PathBuf {
        self.dir.join("volume-subpaths").join(volume).join(container).join(index.to_string())
    }
}

/// A fresh pod UID, unique to this test run.
pub fn new_pod_uid() -> String {
    static SEQUENCE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = SEQUENCE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!(
        "{nanos:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        std::process::id() & 0xffff,
        n & 0xfff,
        n >> 12,
        0xfeed_0000_0000u64 + n as u64
    )
}

/// The cgroup of pod `uid` of QoS class `qos` (`besteffort`, `burstable`)
/// as the systemd cgroup driver names it, below `parent`:
/// `kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid, - as _>.slice`.
pub fn pod_slice(parent: &Path, qos: &str, uid: &str) -> PathBuf {
    parent.join(format!("kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{}.slice", uid.replace('-', "_")))
}
