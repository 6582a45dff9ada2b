//! Ties a path to the pod or container it belongs to, from the path's text
//! alone: kubelet's `pods/<uid>/...` and `plugins/...` trees, pod cgroups of
//! both cgroup drivers, and the runtimes' per-container directories.
//!
//! The processes that tear a pod down are not in the pod, so the path they
//! act on is usually the only thing that names it. This module only reads
//! text: it never touches the filesystem, never resolves symlinks, and says
//! nothing about a relative path (which directory it is relative to is the
//! caller's business). Mapping a container id or a docker layer to its pod
//! needs node state and lives in the `cgroups` and `docker` modules.
//!
//! Matching is by whole path segments: a pod UID is only recognised where
//! kubelet or a cgroup driver puts one, never as a substring, so a volume
//! named after a UUID elsewhere cannot be mistaken for a pod.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A pod UID as kubelet names it: a lowercase RFC 4122 UUID (8-4-4-4-12 hex)
/// or, for static pods, 32 lowercase hex without dashes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct PodUid(String);

impl PodUid {
    /// Validates user input (e.g. `--pod`): accepts either form in any case
    /// and stores it lowercase, the way kubelet spells it on disk.
    /// Surrounding whitespace is ignored (copy-paste from a terminal).
    pub fn parse(s: &str) -> Result<PodUid, String> {
        let lower = s.trim().to_ascii_lowercase();
        kubelet_uid(lower.as_bytes()).ok_or_else(|| {
            format!(
                "{s:?} is not a pod UID: a pod UID looks like \
                 1b2c3d4e-5f60-4a7b-8c9d-0e1f2a3b4c5d (or 32 hex digits \
                 without dashes for a static pod); find it with \
                 kubectl get pod <name> -o jsonpath='{{.metadata.uid}}'"
            )
        })
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The systemd cgroup-driver form: dashes become underscores, because
    /// systemd reads a dash in a unit name as a step in the slice hierarchy.
    pub fn systemd_form(&self) -> String {
        self.0.replace('-', "_")
    }
}

impl std::fmt::Display for PodUid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for PodUid {
    type Err = String;
    fn from_str(s: &str) -> Result<PodUid, String> {
        PodUid::parse(s)
    }
}

/// Read back from a saved record: validated like `--pod`, so a damaged
/// record cannot bring in a UID kubelet would never write.
impl<'de> serde::Deserialize<'de> for PodUid {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<PodUid, D::Error> {
        let text = String::deserialize(d)?;
        PodUid::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// A container id: 64 lowercase hex chars (containerd, CRI-O, docker).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct ContainerId(String);

impl ContainerId {
    /// Strict: runtimes only ever write ids in lowercase, so anything else is
    /// not an id they made.
    pub fn parse(s: &str) -> Option<ContainerId> {
        container_id(s.as_bytes())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> serde::Deserialize<'de> for ContainerId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ContainerId, D::Error> {
        let text = String::deserialize(d)?;
        ContainerId::parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!("{text:?} is not a container id (64 lowercase hex digits)"))
        })
    }
}

/// Why a path was tied to a pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PathArea {
    /// `pods/<uid>/volumes` or below: kubelet waits for these to go.
    Volume,
    /// `pods/<uid>/volume-subpaths` or below: subPath bind mounts.
    VolumeSubpath,
    /// `pods/<uid>/volumeDevices` or below: block volumes.
    VolumeDevice,
    /// Anything else in the pod's directory, or the directory itself.
    PodDir,
    /// A pod-specific entry in kubelet's `plugins` tree (block volume maps).
    PluginDir,
    /// The pod's cgroup or a cgroup below it.
    PodCgroup,
}

/// What a path says about a pod or container, purely from its text.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PathClues {
    pub pod: Option<(PodUid, PathArea)>,
    pub container: Option<ContainerId>,
    /// A docker overlay2 layer directory name, `-init` suffix kept.
    pub docker_layer: Option<String>,
}

/// Reads pod/container clues from an absolute path. The path is bytes and may
/// be non-UTF-8: each segment is judged on its own, and a segment that is not
/// UTF-8 simply matches nothing. `kubelet_roots` are absolute kubelet root
/// directories (default `/var/lib/kubelet`; pass the symlink-resolved form
/// too when it differs).
///
/// A path with a `..` segment yields nothing: what it names depends on
/// symlinks, and guessing would tie the call to the wrong pod.
pub fn clues_from_path(path: &[u8], kubelet_roots: &[PathBuf]) -> PathClues {
    if !path.starts_with(b"/") {
        return PathClues::default();
    }
    let segs = segments(path);
    if segs.iter().any(|s| *s == b"..") {
        return PathClues::default();
    }
    let (cgroup_pod, cgroup_container) = cgroup_clues(&segs);
    let pod = kubelet_roots
        .iter()
        .find_map(|root| kubelet_clue(&segs, root))
        .or_else(|| cgroup_pod.map(|uid| (uid, PathArea::PodCgroup)));
    PathClues { pod, container: runtime_container(&segs).or(cgroup_container), docker_layer: docker_layer(&segs) }
}

/// Pod and container named by a cgroup path relative to the hierarchy root,
/// e.g. `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/cri-containerd-<cid>.scope`
/// or `/kubepods/besteffort/pod<uid>/<cid>`.
pub fn clues_from_cgroup(cgroup_path: &str) -> (Option<PodUid>, Option<ContainerId>) {
    cgroup_clues(&segments(cgroup_path.as_bytes()))
}

/// Empty and `.` segments carry no meaning (`//` and `/./` appear when paths
/// are joined by hand), so they are dropped.
fn segments(path: &[u8]) -> Vec<&[u8]> {
    path.split(|&b| b == b'/').filter(|s| !s.is_empty() && *s != b".").collect()
}

fn is_lower_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

fn all_lower_hex(s: &[u8]) -> bool {
    s.iter().all(|&b| is_lower_hex(b))
}

/// 8-4-4-4-12 lowercase hex with `sep` between the groups.
fn uuid_shaped(s: &[u8], sep: u8) -> bool {
    s.len() == 36
        && s.iter().enumerate().all(|(i, &b)| match i {
            8 | 13 | 18 | 23 => b == sep,
            _ => is_lower_hex(b),
        })
}

fn static_pod_shaped(s: &[u8]) -> bool {
    s.len() == 32 && all_lower_hex(s)
}

/// Lowercase only: kubelet writes UIDs in lowercase, and a path built later
/// from the stored (lowercase) UID would name a different directory.
fn kubelet_uid(s: &[u8]) -> Option<PodUid> {
    if uuid_shaped(s, b'-') || static_pod_shaped(s) {
        ascii(s).map(PodUid)
    } else {
        None
    }
}

/// The underscored UID of a systemd slice name, turned back into kubelet's.
fn systemd_uid(s: &[u8]) -> Option<PodUid> {
    if uuid_shaped(s, b'_') {
        ascii(s).map(|t| PodUid(t.replace('_', "-")))
    } else if static_pod_shaped(s) {
        ascii(s).map(PodUid)
    } else {
        None
    }
}

fn container_id(s: &[u8]) -> Option<ContainerId> {
    if s.len() == 64 && all_lower_hex(s) {
        ascii(s).map(ContainerId)
    } else {
        None
    }
}

fn ascii(s: &[u8]) -> Option<String> {
    std::str::from_utf8(s).ok().map(str::to_owned)
}

fn kubelet_clue(segs: &[&[u8]], root: &Path) -> Option<(PodUid, PathArea)> {
    let root_bytes = root.as_os_str().as_bytes();
    if !root_bytes.starts_with(b"/") {
        return None;
    }
    let root_segs = segments(root_bytes);
    if root_segs.iter().any(|s| *s == b"..") || !segs.starts_with(&root_segs) {
        return None;
    }
    match &segs[root_segs.len()..] {
        [b"pods", uid, rest @ ..] => {
            let uid = kubelet_uid(uid)?;
            let area = match rest.first() {
                Some(&b"volumes") => PathArea::Volume,
                Some(&b"volume-subpaths") => PathArea::VolumeSubpath,
                Some(&b"volumeDevices") => PathArea::VolumeDevice,
                _ => PathArea::PodDir,
            };
            Some((uid, area))
        }
        // Block volumes: kubelet puts the pod UID after the volume name
        // (`volumeDevices/<pv>/dev/<uid>`, `volumeDevices/publish/<pv>/<uid>`),
        // so the last UID-shaped segment is the pod's even if a volume
        // happens to be named by a bare UUID.
        [b"plugins", rest @ ..] => rest.iter().rev().find_map(|s| kubelet_uid(s)).map(|uid| (uid, PathArea::PluginDir)),
        _ => None,
    }
}

const QOS_CLASSES: [&[u8]; 2] = [b"burstable", b"besteffort"];

/// The shared cgroup rules of [`clues_from_path`] and [`clues_from_cgroup`].
fn cgroup_clues(segs: &[&[u8]]) -> (Option<PodUid>, Option<ContainerId>) {
    let mut pod = None;
    let mut container = None;
    for (i, seg) in segs.iter().enumerate() {
        if pod.is_none() {
            if let Some(uid) = systemd_pod_slice(seg) {
                pod = Some(uid);
            } else if *seg == b"kubepods" {
                let mut at = i + 1;
                if segs.get(at).is_some_and(|s| QOS_CLASSES.contains(s)) {
                    at += 1;
                }
                let uid = segs.get(at).and_then(|s| s.strip_prefix(b"pod")).and_then(kubelet_uid);
                if let Some(uid) = uid {
                    pod = Some(uid);
                    if container.is_none() {
                        container = segs.get(at + 1).and_then(|s| cgroupfs_container(s));
                    }
                }
            }
        }
        if container.is_none() {
            container = container_scope(seg);
        }
    }
    (pod, container)
}

/// `kubepods-<qos>-pod<uid_>.slice` or, for Guaranteed pods,
/// `kubepods-pod<uid_>.slice`.
fn systemd_pod_slice(seg: &[u8]) -> Option<PodUid> {
    let name = seg.strip_suffix(b".slice")?.strip_prefix(b"kubepods-")?;
    let uid = match name.strip_prefix(b"pod") {
        Some(uid) => uid,
        None => QOS_CLASSES.iter().find_map(|qos| name.strip_prefix(*qos)?.strip_prefix(b"-pod"))?,
    };
    systemd_uid(uid)
}

/// A container's cgroup under a pod's of the cgroupfs driver: the bare id
/// (containerd, docker), CRI-O's `crio-<id>` and its monitor's
/// `crio-conmon-<id>`, podman's `libpod-<id>` and `libpod-conmon-<id>`.
fn cgroupfs_container(seg: &[u8]) -> Option<ContainerId> {
    const PREFIXES: [&[u8]; 5] = [b"", b"crio-conmon-", b"crio-", b"libpod-conmon-", b"libpod-"];
    PREFIXES.iter().find_map(|p| seg.strip_prefix(*p).and_then(container_id))
}

/// A container's systemd scope. `crio-conmon-<cid>.scope` holds CRI-O's
/// monitor for that container, so it names the same container.
fn container_scope(seg: &[u8]) -> Option<ContainerId> {
    let name = seg.strip_suffix(b".scope")?;
    const PREFIXES: [&[u8]; 6] =
        [b"cri-containerd-", b"crio-conmon-", b"crio-", b"docker-", b"libpod-conmon-", b"libpod-"];
    PREFIXES.iter().find_map(|p| name.strip_prefix(*p).and_then(container_id))
}

/// The runtimes' per-container directories, at their default locations.
fn runtime_container(segs: &[&[u8]]) -> Option<ContainerId> {
    // `/var/run` is a symlink to `/run` on every modern distribution, and
    // either spelling reaches the kernel.
    let segs = match segs {
        [b"var", b"run", ..] => &segs[1..],
        _ => segs,
    };
    let cid = match segs {
        [b"run", b"containerd", b"io.containerd.runtime.v2.task", _namespace, cid, ..] => cid,
        [b"var", b"lib", b"containers", b"storage", b"overlay-containers", cid, ..] => cid,
        [b"run", b"containers", b"storage", b"overlay-containers", cid, ..] => cid,
        [b"var", b"lib", b"docker", b"containers", cid, ..] => cid,
        _ => return None,
    };
    container_id(cid)
}

/// `/var/lib/docker/overlay2/<layer>`: the layer names no container by
/// itself (that takes docker's layer metadata), so its id is kept as text.
fn docker_layer(segs: &[&[u8]]) -> Option<String> {
    match segs {
        [b"var", b"lib", b"docker", b"overlay2", layer, ..] => {
            let id = layer.strip_suffix(b"-init").unwrap_or(layer);
            if id.len() == 64 && all_lower_hex(id) {
                ascii(layer)
            } else {
                None
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "1b2c3d4e-5f60-4a7b-8c9d-0e1f2a3b4c5d";
    const UID_: &str = "1b2c3d4e_5f60_4a7b_8c9d_0e1f2a3b4c5d";
    const STATIC_UID: &str = "0123456789abcdef0123456789abcdef";
    const CID: &str = "4f2a1c0d9e8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a29";
    const LAYER: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";

    fn uid() -> PodUid {
        PodUid::parse(UID).unwrap()
    }

    fn cid() -> ContainerId {
        ContainerId::parse(CID).unwrap()
    }

    fn roots() -> Vec<PathBuf> {
        vec![PathBuf::from("/var/lib/kubelet")]
    }

    fn pod_of(path: &str) -> Option<(PodUid, PathArea)> {
        clues_from_path(path.as_bytes(), &roots()).pod
    }

    // --- PodUid ---

    #[test]
    fn pod_uid_accepts_both_forms_in_any_case_and_stores_lowercase() {
        assert_eq!(PodUid::parse(UID).unwrap().as_str(), UID);
        assert_eq!(PodUid::parse(&UID.to_uppercase()).unwrap().as_str(), UID);
        assert_eq!(PodUid::parse(STATIC_UID).unwrap().as_str(), STATIC_UID);
        assert_eq!(PodUid::parse(&STATIC_UID.to_uppercase()).unwrap().as_str(), STATIC_UID);
        assert_eq!(PodUid::parse(&format!("  {UID}\n")).unwrap().as_str(), UID);
    }

    #[test]
    fn pod_uid_refuses_near_misses_and_says_how_to_find_one() {
        for bad in [
            "",
            "my-pod",
            UID_,                                    // systemd form
            "1b2c3d4e-5f60-4a7b-8c9d-0e1f2a3b4c5",   // one short
            "1b2c3d4e-5f60-4a7b-8c9d-0e1f2a3b4c5d0", // one long
            "1b2c3d4e5-f60-4a7b-8c9d-0e1f2a3b4c5d",  // dash misplaced
            "1b2c3d4g-5f60-4a7b-8c9d-0e1f2a3b4c5d",  // not hex
            "0123456789abcdef0123456789abcde",       // 31 hex
            "pod1b2c3d4e-5f60-4a7b-8c9d-0e1f2a3b4c5d",
        ] {
            let err = PodUid::parse(bad).unwrap_err();
            assert!(err.contains("kubectl get pod <name> -o jsonpath='{.metadata.uid}'"), "{err}");
            assert!(err.contains("1b2c3d4e-5f60-4a7b-8c9d-0e1f2a3b4c5d"), "{err}");
        }
    }

    #[test]
    fn pod_uid_has_a_systemd_form() {
        assert_eq!(uid().systemd_form(), UID_);
        assert_eq!(PodUid::parse(STATIC_UID).unwrap().systemd_form(), STATIC_UID);
    }

    #[test]
    fn pod_uid_displays_parses_from_str_and_serializes_as_text() {
        assert_eq!(uid().to_string(), UID);
        assert_eq!(UID.parse::<PodUid>().unwrap(), uid());
        assert!("nope".parse::<PodUid>().is_err());
        assert_eq!(serde_json::to_string(&uid()).unwrap(), format!("\"{UID}\""));
    }

    // --- ContainerId ---

    #[test]
    fn container_id_is_64_lowercase_hex() {
        assert_eq!(ContainerId::parse(CID).unwrap().as_str(), CID);
        assert_eq!(serde_json::to_string(&cid()).unwrap(), format!("\"{CID}\""));
        assert_eq!(ContainerId::parse(&CID.to_uppercase()), None);
        assert_eq!(ContainerId::parse(&CID[1..]), None);
        assert_eq!(ContainerId::parse(&format!("{CID}0")), None);
        assert_eq!(ContainerId::parse(&CID.replace('a', "g")), None);
        assert_eq!(ContainerId::parse(""), None);
    }

    #[test]
    fn path_area_serializes_in_kebab_case() {
        let names: Vec<String> = [
            PathArea::Volume,
            PathArea::VolumeSubpath,
            PathArea::VolumeDevice,
            PathArea::PodDir,
            PathArea::PluginDir,
            PathArea::PodCgroup,
        ]
        .iter()
        .map(|a| serde_json::to_string(a).unwrap())
        .collect();
        assert_eq!(
            names,
            [
                "\"volume\"",
                "\"volume-subpath\"",
                "\"volume-device\"",
                "\"pod-dir\"",
                "\"plugin-dir\"",
                "\"pod-cgroup\""
            ]
        );
    }

    // --- kubelet tree ---

    #[test]
    fn kubelet_pod_directories_are_tied_to_the_pod() {
        let cases = [
            (format!("/var/lib/kubelet/pods/{UID}/volumes/kubernetes.io~csi/pvc-1/mount"), PathArea::Volume),
            (format!("/var/lib/kubelet/pods/{UID}/volumes"), PathArea::Volume),
            (format!("/var/lib/kubelet/pods/{UID}/volume-subpaths/data/app/0"), PathArea::VolumeSubpath),
            (format!("/var/lib/kubelet/pods/{UID}/volumeDevices/kubernetes.io~csi/pvc-1"), PathArea::VolumeDevice),
            (format!("/var/lib/kubelet/pods/{UID}"), PathArea::PodDir),
            (format!("/var/lib/kubelet/pods/{UID}/containers/app/0a1b"), PathArea::PodDir),
            (format!("/var/lib/kubelet/pods/{UID}/etc-hosts"), PathArea::PodDir),
            (format!("/var/lib/kubelet//pods/./{UID}/volumes/x"), PathArea::Volume),
        ];
        for (path, area) in cases {
            assert_eq!(pod_of(&path), Some((uid(), area)), "{path}");
        }
        let path = format!("/var/lib/kubelet/pods/{STATIC_UID}/volumes/x");
        assert_eq!(pod_of(&path), Some((PodUid::parse(STATIC_UID).unwrap(), PathArea::Volume)));
    }

    #[test]
    fn kubelet_pod_directories_near_misses_are_not_tied() {
        for path in [
            format!("/var/lib/kubelet2/pods/{UID}/volumes/x"), // root is a prefix of a segment
            format!("/var/lib/kube/pods/{UID}/volumes/x"),
            format!("/var/lib/kubelet/pods/{}/volumes/x", UID.to_uppercase()),
            format!("/var/lib/kubelet/pods/{UID}x/volumes/x"),
            format!("/var/lib/kubelet/pods/pod{UID}/volumes/x"),
            format!("/var/lib/kubelet/pods/{UID_}/volumes/x"),
            format!("/var/lib/kubelet/podsx/{UID}/volumes/x"),
            format!("/var/lib/kubelet/x/pods/{UID}/volumes/x"),
            format!("/srv/var/lib/kubelet/pods/{UID}/volumes/x"),
            "/var/lib/kubelet/pods".to_string(),
            "/var/lib/kubelet".to_string(),
            format!("/var/lib/kubelet/pods/{UID}/../{STATIC_UID}/volumes/x"),
            format!("var/lib/kubelet/pods/{UID}/volumes/x"), // relative
        ] {
            assert_eq!(pod_of(&path), None, "{path}");
        }
    }

    #[test]
    fn any_of_several_kubelet_roots_matches_and_trailing_slashes_do_not_matter() {
        let roots = [PathBuf::from("/var/lib/kubelet"), PathBuf::from("/data/kubelet/")];
        let path = format!("/data/kubelet/pods/{UID}/volumes/x");
        assert_eq!(clues_from_path(path.as_bytes(), &roots).pod, Some((uid(), PathArea::Volume)));
        // A relative root could match anywhere, so it matches nowhere.
        let path = format!("/kubelet/pods/{UID}/volumes/x");
        assert_eq!(clues_from_path(path.as_bytes(), &[PathBuf::from("kubelet")]).pod, None);
        assert_eq!(clues_from_path(path.as_bytes(), &[]).pod, None);
    }

    #[test]
    fn plugin_directories_with_a_pod_uid_segment_are_tied() {
        let path = format!("/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/pvc-9/dev/{UID}");
        assert_eq!(pod_of(&path), Some((uid(), PathArea::PluginDir)));
        // A volume named by a bare UUID comes before the pod UID.
        let path = format!("/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/{STATIC_UID}/{UID}");
        assert_eq!(pod_of(&path), Some((uid(), PathArea::PluginDir)));
    }

    #[test]
    fn plugin_directories_without_a_pod_uid_segment_are_not_tied() {
        for path in [
            format!("/var/lib/kubelet/plugins/kubernetes.io/csi/hostpath.csi.k8s.io/{LAYER}/globalmount"),
            format!("/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/pvc-{UID}/dev"),
            format!("/var/lib/kubelet/plugins_registry/{UID}"),
            format!("/var/lib/kubelet2/plugins/x/{UID}"),
        ] {
            assert_eq!(pod_of(&path), None, "{path}");
        }
    }

    // --- cgroups ---

    #[test]
    fn systemd_driver_cgroups_name_pod_and_container() {
        let cases = [
            format!("/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope"),
            format!("/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/crio-{CID}.scope/cgroup.procs"),
            format!("/sys/fs/cgroup/kubepods.slice/kubepods-pod{UID_}.slice/docker-{CID}.scope"),
            format!("/sys/fs/cgroup/systemd/kubepods.slice/kubepods-pod{UID_}.slice/crio-conmon-{CID}.scope"),
        ];
        for path in cases {
            let clues = clues_from_path(path.as_bytes(), &roots());
            assert_eq!(clues.pod, Some((uid(), PathArea::PodCgroup)), "{path}");
            assert_eq!(clues.container, Some(cid()), "{path}");
        }
        let path = format!("/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice");
        let clues = clues_from_path(path.as_bytes(), &roots());
        assert_eq!(clues.pod, Some((uid(), PathArea::PodCgroup)));
        assert_eq!(clues.container, None);
        let path = format!("/sys/fs/cgroup/kubepods.slice/kubepods-pod{STATIC_UID}.slice");
        assert_eq!(pod_of(&path), Some((PodUid::parse(STATIC_UID).unwrap(), PathArea::PodCgroup)));
    }

    #[test]
    fn cgroupfs_driver_cgroups_name_pod_and_container() {
        for path in [
            format!("/sys/fs/cgroup/kubepods/burstable/pod{UID}/{CID}"),
            format!("/sys/fs/cgroup/memory/kubepods/besteffort/pod{UID}/{CID}/tasks"),
            format!("/sys/fs/cgroup/kubepods/pod{UID}/{CID}"),
            // CRI-O's and podman's cgroupfs shapes: the container, its monitor.
            format!("/sys/fs/cgroup/pids/kubepods/burstable/pod{UID}/crio-{CID}"),
            format!("/sys/fs/cgroup/pids/kubepods/burstable/pod{UID}/crio-conmon-{CID}"),
            format!("/sys/fs/cgroup/memory/kubepods/besteffort/pod{UID}/libpod-{CID}/cgroup.procs"),
            format!("/sys/fs/cgroup/memory/kubepods/besteffort/pod{UID}/libpod-conmon-{CID}"),
            format!("/sys/fs/cgroup/kubepods.slice/kubepods-pod{UID_}.slice/libpod-{CID}.scope"),
        ] {
            let clues = clues_from_path(path.as_bytes(), &roots());
            assert_eq!(clues.pod, Some((uid(), PathArea::PodCgroup)), "{path}");
            assert_eq!(clues.container, Some(cid()), "{path}");
        }
        let path = format!("/sys/fs/cgroup/kubepods/pod{STATIC_UID}/cgroup.procs");
        let clues = clues_from_path(path.as_bytes(), &roots());
        assert_eq!(clues.pod, Some((PodUid::parse(STATIC_UID).unwrap(), PathArea::PodCgroup)));
        assert_eq!(clues.container, None);
    }

    #[test]
    fn cgroup_near_misses_are_not_tied() {
        for path in [
            format!("/sys/fs/cgroup/kubepods.slice/kubepods-burstable-pod{UID}.slice"), // dashes
            format!("/sys/fs/cgroup/kubepods.slice/kubepods-guaranteed-pod{UID_}.slice"),
            format!("/sys/fs/cgroup/kubepods.slice/kubepods-burstable-pod{UID_}.slicex"),
            format!("/sys/fs/cgroup/kubepods.slice/xkubepods-burstable-pod{UID_}.slice"),
            format!("/sys/fs/cgroup/kubepods/guaranteed/pod{UID}"),
            format!("/sys/fs/cgroup/kubepods/burstable/x/pod{UID}"),
            format!("/sys/fs/cgroup/notkubepods/pod{UID}"),
            format!("/sys/fs/cgroup/kubepods/pod{UID_}"),
            format!("/sys/fs/cgroup/kubepods/burstable/{UID}"),
        ] {
            assert_eq!(pod_of(&path), None, "{path}");
        }
        for path in [
            format!("/sys/fs/cgroup/system.slice/cri-containerd-{CID}.scopex"),
            format!("/sys/fs/cgroup/system.slice/containerd-{CID}.scope"),
            format!("/sys/fs/cgroup/system.slice/cri-containerd-{}.scope", &CID[1..]),
            format!("/sys/fs/cgroup/kubepods/pod{UID}/{}", CID.to_uppercase()),
            // The prefixes name a container only where a pod's cgroup has one.
            format!("/sys/fs/cgroup/pids/kubepods/burstable/pod{UID}/x/crio-{CID}"),
            format!("/var/lib/kubelet/pods/{UID}/volumes/v/libpod-{CID}"),
            format!("/sys/fs/cgroup/kubepods/pod{UID}/crio-x{CID}"),
        ] {
            assert_eq!(clues_from_path(path.as_bytes(), &roots()).container, None, "{path}");
        }
    }

    #[test]
    fn clues_from_cgroup_reads_paths_relative_to_the_hierarchy() {
        let p = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope"
        );
        assert_eq!(clues_from_cgroup(&p), (Some(uid()), Some(cid())));
        let p = format!("/kubepods/besteffort/pod{UID}/{CID}");
        assert_eq!(clues_from_cgroup(&p), (Some(uid()), Some(cid())));
        let p = format!("/system.slice/docker-{CID}.scope");
        assert_eq!(clues_from_cgroup(&p), (None, Some(cid())));
        assert_eq!(clues_from_cgroup("/"), (None, None));
        assert_eq!(clues_from_cgroup("/system.slice/containerd.service"), (None, None));
        assert_eq!(clues_from_cgroup(&format!("/kubepods/burstable/pod{UID_}/{CID}")), (None, None));
    }

    // --- runtimes ---

    #[test]
    fn runtime_directories_name_the_container() {
        for path in [
            format!("/run/containerd/io.containerd.runtime.v2.task/k8s.io/{CID}/rootfs"),
            format!("/var/run/containerd/io.containerd.runtime.v2.task/moby/{CID}"),
            format!("/var/lib/containers/storage/overlay-containers/{CID}/userdata/shm"),
            format!("/run/containers/storage/overlay-containers/{CID}/userdata"),
            format!("/var/lib/docker/containers/{CID}/mounts/shm"),
        ] {
            let clues = clues_from_path(path.as_bytes(), &roots());
            assert_eq!(clues.container, Some(cid()), "{path}");
            assert_eq!(clues.pod, None, "{path}");
        }
    }

    #[test]
    fn runtime_directory_near_misses_name_no_container() {
        for path in [
            format!("/run/containerd/io.containerd.runtime.v2.task/{CID}/rootfs"), // no namespace
            format!("/run/containerd/io.containerd.runtime.v2.taskx/k8s.io/{CID}"),
            format!("/srv/run/containerd/io.containerd.runtime.v2.task/k8s.io/{CID}"),
            format!("/var/lib/containers/storage/overlay/{CID}/merged"), // a layer, not a container
            format!("/var/lib/docker/containers/{}/shm", &CID[..12]),
            format!("/var/lib/docker2/containers/{CID}/shm"),
            format!("/var/lib/docker/volumes/{CID}/_data"),
        ] {
            assert_eq!(clues_from_path(path.as_bytes(), &roots()).container, None, "{path}");
        }
    }

    #[test]
    fn docker_overlay_layers_are_kept_as_text() {
        let path = format!("/var/lib/docker/overlay2/{LAYER}/merged");
        assert_eq!(clues_from_path(path.as_bytes(), &roots()).docker_layer.as_deref(), Some(LAYER));
        let path = format!("/var/lib/docker/overlay2/{LAYER}-init/diff/etc");
        let want = format!("{LAYER}-init");
        assert_eq!(clues_from_path(path.as_bytes(), &roots()).docker_layer, Some(want));
        for path in [
            "/var/lib/docker/overlay2/l/ABCDEFGHIJKLMNOPQRSTUVWXYZ".to_string(),
            format!("/var/lib/docker/overlay2/{LAYER}-old/diff"),
            format!("/var/lib/docker/overlay2/{}/diff", &LAYER[1..]),
            format!("/var/lib/docker/image/overlay2/{LAYER}"),
        ] {
            assert_eq!(clues_from_path(path.as_bytes(), &roots()).docker_layer, None, "{path}");
        }
    }

    #[test]
    fn non_utf8_paths_never_panic_and_only_their_readable_segments_count() {
        let mut path = format!("/var/lib/kubelet/pods/{UID}/volumes/").into_bytes();
        path.extend_from_slice(b"\xff\xfe/mount");
        assert_eq!(clues_from_path(&path, &roots()).pod, Some((uid(), PathArea::Volume)));

        let mut path = b"/var/lib/kubelet/pods/".to_vec();
        path.extend_from_slice(UID.as_bytes());
        path.push(0xff); // the UID segment itself is damaged
        assert_eq!(clues_from_path(&path, &roots()), PathClues::default());

        for junk in [&b"\xff"[..], b"/\xc3", b"/\xff/\xfe\xfd", b"", b"/"] {
            assert_eq!(clues_from_path(junk, &roots()), PathClues::default());
        }
    }
}
