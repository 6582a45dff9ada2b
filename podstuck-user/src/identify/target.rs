//! What a call's path is, in the terms the detectors divide their work by:
//! a pod's volume, a raw block volume's mapping, a subPath, the rest of a
//! pod's directory, a cgroup, a container runtime's or CNI's directory, or
//! anything else. Classified once here, so the diagnosis routes each
//! failed call to the one detector that owns its kind of target
//! (`diagnose::route`) rather than each detector guessing what the others
//! take.
//!
//! Only a path the kernel proved the node's ([`super::path_proof`]) is
//! classified: a claim's path is [`Target::Other`] whatever it spells,
//! since a pod can make any path it likes in its own mount namespace.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::mountinfo::{is_at_or_below, parse_mountinfo};
use crate::pod::PathArea;

/// What a path is, for the detectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// `pods/<uid>/volumes/...`: a volume kubelet unmounts and removes.
    Volume,
    /// A raw block volume's mapping: `volumeDevices` in the pod's tree or
    /// in kubelet's plugins tree.
    BlockVolume,
    /// `pods/<uid>/volume-subpaths/...`: subPath bind mounts.
    Subpath,
    /// The rest of a pod's directory in kubelet's tree.
    PodDir,
    /// A cgroup: a pod's, or any directory on a cgroup filesystem.
    Cgroup,
    /// A container runtime's state or storage (docker, containerd, CRI-O,
    /// podman, runc, crun).
    RuntimeDir,
    /// CNI's state and the network namespaces sandboxes are made with.
    Cni,
    /// Anything else, and every path that is only its caller's claim.
    Other,
}

impl Target {
    /// Every target, for the router's table and its test.
    pub const ALL: [Target; 8] = [
        Target::Volume,
        Target::BlockVolume,
        Target::Subpath,
        Target::PodDir,
        Target::Cgroup,
        Target::RuntimeDir,
        Target::Cni,
        Target::Other,
    ];
}

/// Where cgroups are when the node's mount table cannot be read (a
/// recording replayed elsewhere): every distribution mounts them here.
const CGROUP_ROOT: &[u8] = b"/sys/fs/cgroup";

/// The runtimes' directories, as the kernel spells them (`/var/run` is a
/// symlink to `/run` on every node it runs on, and the kernel reports the
/// path the caller walked, so both are listed).
const RUNTIME_DIRS: &[&[u8]] = &[
    b"/var/lib/docker",
    b"/run/docker",
    b"/var/run/docker",
    b"/var/lib/containerd",
    b"/run/containerd",
    b"/var/run/containerd",
    b"/var/lib/containers",
    b"/run/containers",
    b"/var/run/containers",
    b"/run/crio",
    b"/var/run/crio",
    b"/run/runc",
    b"/var/run/runc",
    b"/run/crun",
    b"/var/run/crun",
    b"/run/libpod",
];

/// CNI's state and the named network namespaces sandboxes are made with.
const CNI_DIRS: &[&[u8]] = &[b"/var/lib/cni", b"/run/cni", b"/var/run/cni", b"/run/netns", b"/var/run/netns"];

/// The node's facts a path's target is judged by: where its cgroup
/// filesystems are mounted.
#[derive(Clone, Debug)]
pub struct Targets {
    cgroup_mounts: Vec<Vec<u8>>,
}

impl Default for Targets {
    /// Without the node's mount table: cgroups where they always are.
    fn default() -> Self {
        Targets { cgroup_mounts: vec![CGROUP_ROOT.to_vec()] }
    }
}

impl Targets {
    /// Of the node's mount table (its text): every cgroup filesystem's
    /// mount point, besides the usual root.
    pub fn of_mountinfo(text: &[u8]) -> Targets {
        let mut targets = Targets::default();
        for m in parse_mountinfo(text).into_iter().filter(|m| m.is_cgroup()) {
            if !targets.cgroup_mounts.iter().any(|known| is_at_or_below(&m.mount_point, known)) {
                targets.cgroup_mounts.push(m.mount_point);
            }
        }
        targets
    }

    /// Of the node's mount table at `mountinfo` (as podstuck reaches it).
    pub fn read(mountinfo: &Path) -> Targets {
        std::fs::read(mountinfo).map(|text| Targets::of_mountinfo(&text)).unwrap_or_default()
    }

    /// What a proven path is, given the pod area its text names.
    pub fn of(&self, path: &[u8], area: Option<PathArea>) -> Target {
        match area {
            Some(PathArea::Volume) => return Target::Volume,
            Some(PathArea::VolumeSubpath) => return Target::Subpath,
            Some(PathArea::VolumeDevice | PathArea::PluginDir) if names_volume_devices(path) => {
                return Target::BlockVolume
            }
            Some(PathArea::PodCgroup) => return Target::Cgroup,
            Some(PathArea::VolumeDevice | PathArea::PodDir) => return Target::PodDir,
            Some(PathArea::PluginDir) | None => {}
        }
        let below = |dirs: &[&[u8]]| dirs.iter().any(|dir| is_at_or_below(path, dir));
        if self.cgroup_mounts.iter().any(|dir| is_at_or_below(path, dir)) {
            Target::Cgroup
        } else if below(RUNTIME_DIRS) {
            Target::RuntimeDir
        } else if below(CNI_DIRS) {
            Target::Cni
        } else {
            Target::Other
        }
    }
}

/// A `volumeDevices` segment: the pod's block volume tree, the plugins
/// tree's global map path and the CSI driver's publish path.
fn names_volume_devices(path: &[u8]) -> bool {
    path.split(|b| *b == b'/').any(|segment| segment == b"volumeDevices")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::clues_from_path;
    use std::path::PathBuf;

    const KUBELET: &str = "/var/lib/kubelet";
    const POD: &str = "5f1c2a9e-0000-4000-8000-000000000001";

    fn target_of(targets: &Targets, path: &str) -> Target {
        let area = clues_from_path(path.as_bytes(), &[PathBuf::from(KUBELET)]).pod.map(|(_, area)| area);
        targets.of(path.as_bytes(), area)
    }

    #[test]
    fn each_kind_of_path_is_its_target() {
        let t = Targets::default();
        let pod = format!("{KUBELET}/pods/{POD}");
        for (path, want) in [
            (format!("{pod}/volumes/kubernetes.io~csi/pvc-1/mount"), Target::Volume),
            (format!("{pod}/volume-subpaths/data/app/0"), Target::Subpath),
            (format!("{pod}/volumeDevices/kubernetes.io~csi/pvc-blk"), Target::BlockVolume),
            (format!("{KUBELET}/plugins/kubernetes.io/csi/volumeDevices/pvc-blk/dev/{POD}"), Target::BlockVolume),
            (format!("{pod}/containers/app/0123abcd"), Target::PodDir),
            (pod.clone(), Target::PodDir),
            ("/sys/fs/cgroup/system.slice/foo.service".into(), Target::Cgroup),
            (
                "/sys/fs/cgroup/kubepods.slice/kubepods-pod5f1c2a9e_0000_4000_8000_000000000001.slice".into(),
                Target::Cgroup,
            ),
            ("/run/containerd/io.containerd.runtime.v2.task/k8s.io/aaaa/rootfs".into(), Target::RuntimeDir),
            ("/var/lib/docker/overlay2/abc/merged".into(), Target::RuntimeDir),
            ("/var/lib/containers/storage/overlay/abc/merged".into(), Target::RuntimeDir),
            ("/run/netns/cni-1234".into(), Target::Cni),
            ("/var/lib/cni/networks/podnet/10.0.0.5".into(), Target::Cni),
            ("/mnt/data".into(), Target::Other),
            // Whole components only.
            ("/run/containerdx/a".into(), Target::Other),
            ("/sys/fs/cgroupy".into(), Target::Other),
        ] {
            assert_eq!(target_of(&t, &path), want, "{path}");
        }
    }

    #[test]
    fn a_cgroup_filesystem_mounted_elsewhere_is_a_cgroup() {
        let text = b"30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n\
            40 1 0:30 / /host/cg\\040v1/memory rw - cgroup cgroup rw,memory\n\
            41 1 0:31 / /data rw - ext4 /dev/vdb rw\n";
        let t = Targets::of_mountinfo(text);
        assert_eq!(target_of(&t, "/host/cg v1/memory/kubepods/x"), Target::Cgroup);
        assert_eq!(target_of(&t, "/data/x"), Target::Other);
    }
}
