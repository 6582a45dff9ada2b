//! P1 `volume-still-mounted`: kubelet cannot remove a pod's volume
//! directory because it is still a mountpoint in kubelet's mount namespace
//! (the host's, or its container's on kind, k3d, minikube, Talos, RKE1),
//! typically because a CSI driver answered NodeUnpublishVolume with success
//! without unmounting (csi-driver-host-path #457).
//!
//! Signature: rmdir or unlinkat(AT_REMOVEDIR) of `pods/<uid>/volumes/...`
//! failing with EBUSY, on kubelet's volume backoff, with no umount2 of that
//! path. Confirmed when the caller's namespace's mountinfo, read through a
//! process still living there, shows the path mounted.

use std::collections::HashMap;

use super::holders::{debug_pod_advice, holders_evidence};
use super::route::{Attempt, Claim, Refusal, Target};
use super::shell::{find_mount, one_after_another, unmount};
use super::track::{Attempts, CallerView, FailureLog};
use super::{shown, unmounts, Confidence, Detector, Finding, Kind, Review, Severity};
use crate::event::{errno_name, CallEvent};
use crate::identify::owner::Owner;
use crate::identify::pod::PodUid;
use crate::identify::Identity;
use crate::inspect::mounts::{depth, mount_at, mounts_under};
use crate::inspect::{Mount, MountHolder, NodeInspector, TaskState, Unreadable};

/// What umount2 calls on a path were seen: how many, and the last errno (0 = success).
#[derive(Clone, Copy, Debug, Default)]
struct UnmountTries {
    count: u64,
    last_errno: i32,
}

pub struct VolumeStillMounted {
    failures: FailureLog,
    unmounts: HashMap<Vec<u8>, UnmountTries>,
}

impl Default for VolumeStillMounted {
    /// Looked at from kubelet's first EBUSY: the mount table proves it.
    fn default() -> Self {
        VolumeStillMounted { failures: FailureLog::looked_at_from_the_first_failure(), unmounts: HashMap::new() }
    }
}

/// "CSI volume", "emptyDir volume", "NFS volume", from the plugin directory
/// (kubelet escapes '/' in plugin names as '~').
pub fn volume_words(path: &[u8]) -> String {
    let text = String::from_utf8_lossy(path);
    let mut parts = text.split('/');
    let plugin = parts.by_ref().skip_while(|p| *p != "volumes").nth(1).unwrap_or("");
    match plugin {
        "kubernetes.io~csi" => "CSI volume".into(),
        "kubernetes.io~empty-dir" => "emptyDir volume".into(),
        "kubernetes.io~nfs" => "NFS volume".into(),
        "kubernetes.io~secret" => "secret volume".into(),
        "kubernetes.io~configmap" => "configMap volume".into(),
        "kubernetes.io~projected" => "projected volume".into(),
        "" => "volume".into(),
        other => format!("{} volume", other.replace('~', "/")),
    }
}

/// The volume's own directory, `pods/<uid>/volumes/<plugin>/<name>`, of a
/// path at or below it; None where the path names no volume.
fn volume_dir(path: &[u8]) -> Option<&[u8]> {
    let at = path.windows(9).position(|w| w == b"/volumes/")?;
    let rest = &path[at + 9..];
    let plugin = rest.iter().position(|c| *c == b'/')?;
    let name = &rest[plugin + 1..];
    let name_len = name.iter().position(|c| *c == b'/').unwrap_or(name.len());
    (name_len > 0).then(|| &path[..at + 9 + plugin + 1 + name_len])
}

/// The mounts kubelet makes for a volume: its directory, and a CSI
/// volume's `mount` below it. Anything mounted deeper was mounted inside
/// the volume by someone else: a container with Bidirectional mount
/// propagation (a FUSE, CIFS or rclone sidecar), or a process on the node.
fn kubelets_own(volume: &[u8], mount_point: &[u8]) -> bool {
    mount_point == volume || (mount_point.strip_prefix(volume) == Some(b"/mount".as_slice()))
}

/// Mounts strictly below a volume's own ones are looked at up to this many
/// (each asks every mount namespace on the node who else holds it).
const INSIDE_LOOKED_AT: usize = 8;

/// A mount inside a volume that kubelet did not make, and the pods whose
/// mount namespaces hold it as a shared peer (the kernel's peer group, not
/// a path: Bidirectional propagation), the one that made it among them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountInVolume {
    pub mount: Mount,
    pub shared_with: Vec<Owner>,
}

/// Every mount inside the volume of `path` in `mounts` that kubelet did not
/// make, deepest first (a stack on one directory: the newest first), as
/// kubelet's own teardown unmounts them.
fn inside_volume(node: &mut dyn NodeInspector, mounts: &[Mount], path: &[u8], mntns: u64) -> Vec<MountInVolume> {
    let Some(volume) = volume_dir(path) else { return Vec::new() };
    let mut inside: Vec<&Mount> =
        mounts_under(mounts, volume).into_iter().filter(|m| !kubelets_own(volume, &m.mount_point)).collect();
    inside.sort_by(|a, b| depth(&b.mount_point).cmp(&depth(&a.mount_point)).then(b.id.cmp(&a.id)));
    inside
        .into_iter()
        .take(INSIDE_LOOKED_AT)
        .map(|m| {
            let shared_with = match m.peer_group() {
                Some(group) => {
                    let mut pods: Vec<Owner> = node
                        .mount_copies(m, mntns)
                        .into_iter()
                        .filter(|c| c.propagation.iter().any(|p| p == group))
                        .filter_map(|c| c.owner.filter(|o| o.pod_uid.is_some()))
                        .collect();
                    pods.sort_by(|a, b| a.pod_uid.cmp(&b.pod_uid));
                    pods.dedup_by(|a, b| a.pod_uid == b.pod_uid);
                    pods
                }
                None => Vec::new(),
            };
            MountInVolume { mount: m.clone(), shared_with }
        })
        .collect()
}

/// What kubelet's unmounts of a volume say of why it is still mounted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unmounted {
    /// No process tried: the volume plugin reported an unmount it did not do.
    Never,
    /// Unmounted this many times, and mounted again.
    ThenMountedAgain(u64),
    /// Tried this many times, refused with this errno (mount-held's).
    Refused { tries: u64, errno: i32 },
}

impl UnmountTries {
    fn said(&self) -> Unmounted {
        match (self.count, self.last_errno) {
            (0, _) => Unmounted::Never,
            (n, 0) => Unmounted::ThenMountedAgain(n),
            (tries, errno) => Unmounted::Refused { tries, errno },
        }
    }
}

impl Unmounted {
    fn words(self) -> String {
        match self {
            Unmounted::Never => {
                "no process tried to unmount it, so the volume plugin reported an unmount it did not do".to_string()
            }
            Unmounted::ThenMountedAgain(n) => format!("it was unmounted {n} time(s) and mounted again"),
            Unmounted::Refused { tries, errno } => {
                format!("umount was tried {tries} time(s) and failed with {} (see mount-held)", errno_name(errno))
            }
        }
    }
}

/// What volume-still-mounted decides of a volume directory kubelet cannot
/// remove, before a word of it is said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A mountpoint in the caller's namespace: the mount, who holds it
    /// (none is the common case: nothing unmounted it), and why it is
    /// still mounted by what the unmounts of it did.
    /// `inside`: what was mounted inside the volume by someone other
    /// than kubelet, deepest first (the failing mount among them where it
    /// is one of those): all of it has to go before kubelet can finish.
    StillMounted {
        mount: Box<Mount>,
        holders: Vec<MountHolder>,
        unreadable: Vec<TaskState>,
        unmounted: Unmounted,
        inside: Vec<MountInVolume>,
    },
    /// Not mounted now: the next retry should work.
    NotMountedNow { unmounted: Unmounted },
    /// The caller's namespace's table can no longer be read: never the
    /// node's in its place, where the same path may be another pod's.
    TableUnreadable { why: Unreadable, unmounted: Unmounted },
}

impl Verdict {
    pub fn confidence(&self) -> Confidence {
        match self {
            Verdict::StillMounted { .. } => Confidence::Confirmed,
            Verdict::NotMountedNow { .. } | Verdict::TableUnreadable { .. } => Confidence::Possible,
        }
    }

    fn unmounted(&self) -> Unmounted {
        match self {
            Verdict::StillMounted { unmounted, .. }
            | Verdict::NotMountedNow { unmounted }
            | Verdict::TableUnreadable { unmounted, .. } => *unmounted,
        }
    }
}

impl VolumeStillMounted {
    fn decide(unmounts: &HashMap<Vec<u8>, UnmountTries>, a: &mut Attempts, review: &mut Review<'_>) -> Option<Finding> {
        // The caller's namespace: with kubelet in a container (kind, k3d,
        // minikube, Talos, RKE1) its volumes are mounted there, not in the host's.
        let view = a.caller_view(review.node);
        let verdict = Self::judge(unmounts, a, review.node, &view);
        if let Verdict::TableUnreadable { why, .. } = &verdict {
            a.read_again_soon_if(why);
        }
        Some(Self::tell(a, &view, &verdict))
    }

    /// Reads the caller's mount table and who holds the mount, and decides.
    fn judge(
        unmounts: &HashMap<Vec<u8>, UnmountTries>,
        a: &Attempts,
        node: &mut dyn NodeInspector,
        view: &CallerView,
    ) -> Verdict {
        let unmounted = unmounts.get(&a.path).copied().unwrap_or_default().said();
        let mounts = match view.mounts() {
            Ok(mounts) => mounts,
            Err(why) => return Verdict::TableUnreadable { why, unmounted },
        };
        let Some(mount) = mount_at(mounts, &view.path).cloned() else {
            return Verdict::NotMountedNow { unmounted };
        };
        let holders = node.mount_holders(&mount, view.mntns);
        let unreadable = node.processes_unreadable();
        let inside = inside_volume(node, mounts, &view.path, view.mntns);
        Verdict::StillMounted { mount: Box::new(mount), holders, unreadable, unmounted, inside }
    }

    /// What was mounted inside the volume by someone other than kubelet:
    /// one evidence line each, and the words the summary ends with.
    fn inside_words(f: &mut Finding, inside: &[MountInVolume], pod: Option<&PodUid>) -> Option<String> {
        if inside.is_empty() {
            return None;
        }
        let mut makers: Vec<String> = Vec::new();
        for i in inside {
            let pods: Vec<String> = i.shared_with.iter().map(Owner::words).collect();
            let shared = if pods.is_empty() {
                String::from("no pod's mount namespace holds it as a shared peer (made on the node, or by a container since gone)")
            } else {
                format!(
                    "held as a shared peer ({}, Bidirectional propagation) in {}",
                    i.mount.peer_group().unwrap_or("?"),
                    pods.join(", ")
                )
            };
            f.evidence(
                "mountinfo",
                format!(
                    "{} ({} from {}) is mounted inside the volume, where kubelet mounts nothing: {shared}",
                    shown(&i.mount.mount_point),
                    i.mount.fstype,
                    i.mount.source
                ),
            );
            for pod in pods {
                if !makers.contains(&pod) {
                    makers.push(pod);
                }
            }
        }
        let others: Vec<&Owner> =
            inside.iter().flat_map(|i| &i.shared_with).filter(|o| o.pod_uid.as_ref() != pod).collect();
        if let Some(other) = others.first() {
            f.advice.push(format!(
                "unmounting it on the node also unmounts it in {} (its shared peer): that pod loses the mount too",
                other.words()
            ));
        }
        f.advice.push(
            "kubelet did not make these mounts: the container that mounts inside a volume with mountPropagation: Bidirectional has to unmount them when it stops (a preStop hook), or the pod's spec has to drop Bidirectional (kubernetes #115054)"
                .into(),
        );
        let who = match makers.as_slice() {
            [] => String::from("no pod holds them now"),
            [one] => format!("made from {one}'s mount namespace"),
            many => format!("made from one of {}", many.join(", ")),
        };
        Some(format!(
            "{} mount(s) inside the volume that kubelet did not make ({who}) keep it busy: unmounted deepest first, as kubelet does",
            inside.len()
        ))
    }

    /// The verdict in words: the finding, its evidence, its fix.
    fn tell(a: &Attempts, view: &CallerView, verdict: &Verdict) -> Finding {
        let path = &a.path;
        let uid = a.pod.as_ref().map(|p| p.to_string()).unwrap_or_else(|| "?".into());
        let volume = volume_words(path);
        let mut f = Finding::new(Kind::VolumeStillMounted, &shown(path), Severity::Critical, a.first);
        a.stamp(&mut f);
        f.confidence = verdict.confidence();
        let rhythm = a.rhythm_words();
        let unmount_words = verdict.unmounted().words();
        f.evidence("trace", a.trace_words());
        f.evidence("trace", unmount_words.clone());
        let resolved = view.path.clone();
        a.resolution_evidence(view, &mut f);
        let whose = view.whose();
        match verdict {
            Verdict::StillMounted { mount: m, holders, unreadable, inside, .. } => {
                f.evidence(
                    "mountinfo",
                    format!(
                        "{} is a mountpoint in {whose}: {} from {} (mount id {})",
                        shown(&resolved),
                        m.fstype,
                        m.source,
                        m.id
                    ),
                );
                holders_evidence(&mut f, holders, unreadable);
                f.advice.extend(debug_pod_advice(holders.iter().map(|h| h.owner.as_ref())));
                let made_inside = Self::inside_words(&mut f, inside, a.pod.as_ref());
                f.summary = format!(
                    "{} cannot remove the {volume} dir of pod {uid}: {} is still mounted ({}, in {whose}). Removal {}{rhythm}; {}.",
                    a.actor.description,
                    shown(&resolved),
                    m.fstype,
                    a.failed_words().trim_start_matches(a.syscall_name()).trim_start(),
                    made_inside.unwrap_or(unmount_words.clone()),
                );
                // Deepest first, as kubelet's own teardown does: a mount
                // with another below it would refuse with EBUSY; then the
                // volume's own mount where that is the one left.
                let mut order: Vec<&[u8]> = inside.iter().map(|i| i.mount.mount_point.as_slice()).collect();
                if !inside.iter().any(|i| i.mount.id == m.id) {
                    order.push(&resolved);
                }
                let fix = one_after_another(order.into_iter().map(unmount));
                f.advice.extend(view.runtime_advice(&fix));
                view.place_fix(&mut f, fix);
            }
            Verdict::NotMountedNow { .. } => {
                f.evidence("mountinfo", format!("{} is not mounted now in {whose}", shown(&resolved)));
                f.summary = format!(
                    "{} could not remove the {volume} dir of pod {uid} ({}) with EBUSY, but it is not mounted now in {whose}: the next retry should succeed.",
                    a.actor.description,
                    shown(&resolved)
                );
                view.place_fix(&mut f, find_mount(&resolved));
            }
            Verdict::TableUnreadable { why, .. } => {
                f.evidence("mountinfo", format!("{whose}: {}", why.said()));
                f.summary = format!("{} could not remove the {volume} dir of pod {uid}: {} was busy (EBUSY), and {whose} can no longer be read, so what keeps it busy cannot be proven.", a.actor.description, shown(&resolved));
                view.place_fix(&mut f, unmount(&resolved));
            }
        }
        if volume.starts_with("CSI") && verdict.unmounted() == Unmounted::Never {
            f.advice.push("upgrade the CSI driver: its NodeUnpublishVolume returned success without unmounting (see csi-driver-host-path #457)".into());
        }
        f.advice.push(
            "never rm -rf a directory that is still a mountpoint: it deletes the volume's data (kubernetes #60987)"
                .into(),
        );
        f
    }
}

/// Volumes whose unmounts are remembered at most (a pod's teardown
/// unmounts each of its volumes once).
const UNMOUNTS_KEPT: usize = 4096;

impl Detector for VolumeStillMounted {
    fn wants_review(&self) -> bool {
        self.failures.wants_a_look()
    }

    fn claims(&self) -> &'static [Claim] {
        &[Claim { attempts: &[Attempt::RemoveDir], refusals: &[Refusal::Busy], targets: &[Target::Volume] }]
    }

    fn failed(&mut self, event: &CallEvent, identity: &Identity) {
        self.failures.record(event, identity);
    }

    fn observe(&mut self, event: &CallEvent, identity: &Identity) {
        let Ok(path) = &identity.abs_path else { return };
        // Whether kubelet tried to unmount the volume, and how that went,
        // whoever explains a refusal of it.
        if unmounts(event) && identity.target == Target::Volume {
            let tries = self.unmounts.entry(path.clone()).or_default();
            tries.count += 1;
            tries.last_errno = event.errno().unwrap_or(0);
        }
        self.failures.ended_by(event, identity);
    }

    fn review(&mut self, review: &mut Review<'_>) -> Vec<Finding> {
        let unmounts = &self.unmounts;
        let out = self.failures.review(review, |a, review| Self::decide(unmounts, a, review));
        if self.failures.is_empty() {
            self.unmounts.clear();
        }
        // While one volume stays stuck, every other volume the node
        // unmounts would be remembered for weeks: past the cap, only the
        // unmounts of volumes still failing are kept.
        if self.unmounts.len() > UNMOUNTS_KEPT {
            let failures = &self.failures;
            self.unmounts.retain(|path, _| failures.tracks(path));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::*;
    use super::*;
    use crate::identify::owner::Owner;
    use podstuck_common::Syscall;

    fn mounted() -> FakeNode {
        FakeNode::with_mounts(&[&format!("50 {} tmpfs", csi_mount())])
    }

    /// kubelet's rmdir of `path` refused as busy twice, at 0 and 0.5 s.
    fn refused_twice(path: &str) -> [Call; 2] {
        [rmdir(0.0, "kubelet", path, -libc::EBUSY), rmdir(0.5, "kubelet", path, -libc::EBUSY)]
    }

    /// What the detector decides of `calls` (the unmounts it saw among
    /// them counted as it counts them), on `node`.
    fn verdict(node: &mut FakeNode, calls: &[Call]) -> Verdict {
        let mut d = VolumeStillMounted::default();
        calls.iter().for_each(|c| d.observe(&c.event, &c.identity));
        let removals: Vec<Call> = calls.iter().filter(|c| c.event.syscall != Syscall::Umount2).cloned().collect();
        let a = attempts_of(&removals);
        let view = a.caller_view(node);
        VolumeStillMounted::judge(&d.unmounts, &a, node, &view)
    }

    #[test]
    fn why_a_volume_is_still_mounted_is_what_its_unmounts_did() {
        let m = csi_mount();
        let [first, again] = refused_twice(&m);
        let still = |node: &mut FakeNode, calls: &[Call]| match verdict(node, calls) {
            Verdict::StillMounted { unmounted, holders, .. } => (unmounted, holders.len()),
            other => panic!("still mounted: {other:?}"),
        };
        assert_eq!(still(&mut mounted(), &[first.clone(), again.clone()]), (Unmounted::Never, 0));
        let unmounted = umount(0.2, "kubelet", &m, 0);
        assert_eq!(
            still(&mut mounted(), &[first.clone(), unmounted, again.clone()]),
            (Unmounted::ThenMountedAgain(1), 0)
        );
        let refused = umount(0.2, "kubelet", &m, -libc::EBUSY);
        assert_eq!(
            still(&mut mounted(), &[first.clone(), refused, again.clone()]),
            (Unmounted::Refused { tries: 1, errno: libc::EBUSY }, 0)
        );
        let mut node = mounted();
        node.holders = vec![backup_in_csi_mount()];
        assert_eq!(still(&mut node, &[first.clone(), again.clone()]), (Unmounted::Never, 1));
        assert_eq!(
            verdict(&mut FakeNode::with_mounts(&[]), &[first, again]),
            Verdict::NotMountedNow { unmounted: Unmounted::Never }
        );
    }

    #[test]
    fn kubelet_on_its_backoff_against_a_mounted_csi_volume() {
        let mut d = VolumeStillMounted::default();
        let mut node = mounted();
        let m = csi_mount();
        let calls: Vec<Call> =
            [0.0, 0.5, 1.5, 3.5, 7.5, 15.5, 31.5].iter().map(|s| rmdir(*s, "kubelet", &m, -libc::EBUSY)).collect();
        let found = run(&mut d, &mut node, &calls, 32.0);
        assert_eq!(found.len(), 1);
        let f = &found[0];
        assert_eq!(f.kind, Kind::VolumeStillMounted);
        assert_eq!(f.confidence, Confidence::Confirmed);
        assert_eq!(f.pod_uid, Some(pod()));
        assert_eq!(f.count, 7);
        assert_eq!(f.fix, format!("umount -- {m}"));
        assert_eq!(f.paths, vec![m.as_bytes().to_vec()]);
        assert!(f.rhythm.as_deref().unwrap().contains("backoff"), "{:?}", f.rhythm);
        assert!(f.summary.contains("is still mounted (tmpfs, in the host's mount namespace)"), "{}", f.summary);
        assert!(f.summary.contains("EBUSY 7 times"), "{}", f.summary);
        assert!(f.summary.contains("no process tried to unmount it"), "{}", f.summary);
        assert!(f.advice.iter().any(|a| a.contains("CSI driver")));
    }

    fn empty_dir() -> String {
        format!("{KUBELET}/pods/{POD}/volumes/kubernetes.io~empty-dir/cache")
    }

    /// Pod `uid`'s namespace holding mount `id` as a peer of its group.
    fn peer_in_pod(id: u32, uid: &str) -> crate::inspect::MountCopy {
        crate::inspect::MountCopy {
            mntns: 4026532777,
            pid: 3100,
            start: Some(crate::event::ProcessStart(13_100)),
            comm: "rclone".into(),
            mount_point: b"/data/a".to_vec(),
            propagation: vec![format!("shared:{id}")],
            owner: Some(Owner {
                pod_uid: Some(PodUid::parse(uid).unwrap()),
                container: Some("mounter".into()),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn mounts_made_inside_a_volume_are_unmounted_deepest_first_and_their_pod_named() {
        let ed = empty_dir();
        let mut node = FakeNode::with_mounts(&[&format!("60 {ed}/a tmpfs"), &format!("61 {ed}/a/b tmpfs")]);
        // Only mount 60's group is held in the pod; 61's peer is elsewhere.
        node.copies = vec![peer_in_pod(60, POD)];
        let deepest = format!("{ed}/a/b");
        let f = &run(&mut VolumeStillMounted::default(), &mut node, &refused_twice(&deepest), 0.6)[0];
        assert_eq!(f.confidence, Confidence::Confirmed);
        assert_eq!(f.fix, format!("umount -- {ed}/a/b && umount -- {ed}/a"));
        assert!(
            f.summary.contains(&format!("2 mount(s) inside the volume that kubelet did not make (made from pod {POD} (container mounter)'s mount namespace)")),
            "{}",
            f.summary
        );
        assert!(
            f.evidence
                .iter()
                .any(|e| e.fact.starts_with(&format!("{ed}/a (tmpfs from tmpfs) is mounted inside the volume"))
                    && e.fact.contains("shared:60")),
            "{:?}",
            f.evidence
        );
        assert!(f.advice.iter().any(|a| a.contains("Bidirectional")), "{:?}", f.advice);
        assert!(!f.advice.iter().any(|a| a.contains("loses the mount too")), "its own pod: {:?}", f.advice);
        // Another pod holding it: named, and warned of.
        let other = "0a0a0a0a-1111-4222-8333-444444444444";
        node.copies = vec![peer_in_pod(60, other)];
        let f = &run(&mut VolumeStillMounted::default(), &mut node, &refused_twice(&deepest), 0.6)[0];
        assert!(f.summary.contains(&format!("made from pod {other}")), "{}", f.summary);
        assert!(
            f.advice.iter().any(|a| a.contains(&format!("pod {other} (container mounter) (its shared peer)"))),
            "{:?}",
            f.advice
        );
    }

    #[test]
    fn a_csi_volume_with_a_mount_inside_it_is_unmounted_after_that_mount() {
        let m = csi_mount();
        let mut node = FakeNode::with_mounts(&[&format!("50 {m} tmpfs"), &format!("51 {m}/fuse fuse.sshfs")]);
        let f = &run(&mut VolumeStillMounted::default(), &mut node, &refused_twice(&m), 0.6)[0];
        assert_eq!(f.fix, format!("umount -- {m}/fuse && umount -- {m}"));
        assert!(f.summary.contains("(no pod holds them now)"), "{}", f.summary);
        // kubelet's own mounts are never "inside": the CSI volume's mount alone.
        let f = &run(&mut VolumeStillMounted::default(), &mut mounted(), &refused_twice(&m), 0.6)[0];
        assert_eq!(f.fix, format!("umount -- {m}"));
        assert!(!f.summary.contains("kubelet did not make"), "{}", f.summary);
    }

    #[test]
    fn a_volume_dir_is_the_plugins_name_level() {
        let ed = empty_dir();
        assert_eq!(volume_dir(format!("{ed}/a/b").as_bytes()), Some(ed.as_bytes()));
        assert_eq!(volume_dir(ed.as_bytes()), Some(ed.as_bytes()));
        assert_eq!(volume_dir(csi_mount().as_bytes()), Some(csi_mount().trim_end_matches("/mount").as_bytes()));
        assert_eq!(volume_dir(format!("{KUBELET}/pods/{POD}/volumes/kubernetes.io~csi").as_bytes()), None);
        assert_eq!(volume_dir(b"/var/tmp/x"), None);
    }

    /// kubelet in a container (kind, k3d, minikube): its namespace, alive
    /// in kubelet (pid 900), holds the volume mount; the host's does not.
    const KUBELET_NS: u64 = 4026532500;

    fn kubelet_in_a_container(volume_mounted: bool) -> FakeNode {
        let lines = if volume_mounted { vec![format!("60 {} tmpfs", csi_mount())] } else { vec![] };
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        FakeNode::with_mounts(&[]).with_namespace(KUBELET_NS, 900, "kubelet", &lines)
    }

    /// kubelet's short-lived children (pid 100, gone) failing with EBUSY on its backoff.
    fn children_of_kubelet_in_its_namespace() -> Vec<Call> {
        [0.0, 0.5, 1.5, 3.5]
            .iter()
            .map(|s| rmdir(*s, "kubelet", &csi_mount(), -libc::EBUSY).in_namespace(KUBELET_NS))
            .collect()
    }

    #[test]
    fn kubelet_in_a_container_its_namespace_confirms_and_the_fix_enters_it() {
        let mut node = kubelet_in_a_container(true);
        let f = &run(&mut VolumeStillMounted::default(), &mut node, &children_of_kubelet_in_its_namespace(), 4.0)[0];
        let m = csi_mount();
        assert_eq!(f.confidence, Confidence::Confirmed);
        assert_eq!(f.fix, entered(900, 10_900, &format!("umount -- {m}")));
        assert!(
            f.summary.contains(&format!("is still mounted (tmpfs, in kubelet's mount namespace mnt:[{KUBELET_NS}])")),
            "{}",
            f.summary
        );
        assert!(
            f.evidence.iter().any(|e| e.fact.starts_with(&format!("{m} is a mountpoint in kubelet's mount namespace"))),
            "{:?}",
            f.evidence
        );
    }

    #[test]
    fn kubelet_in_a_docker_container_gets_docker_exec_as_the_other_way() {
        let mut node = kubelet_in_a_container(true);
        node.namespaces[0].owner = Some(Owner { container: Some("kind-control-plane".into()), ..Default::default() });
        let f = &run(&mut VolumeStillMounted::default(), &mut node, &children_of_kubelet_in_its_namespace(), 4.0)[0];
        assert!(f.summary.contains("(docker container kind-control-plane)"), "{}", f.summary);
        let fix = format!("umount -- {}", csi_mount());
        let docker = format!(
            "or through docker: docker exec -- kind-control-plane sh -c {}",
            super::super::shell::word(fix.as_bytes())
        );
        assert!(f.advice.contains(&docker), "{:?}", f.advice);
    }

    #[test]
    fn a_namespace_cleanly_unmounted_or_gone_is_never_read_as_the_hosts() {
        // Unmounted in kubelet's namespace, yet mounted on the host at the
        // same path (a host kubelet of its own): the host's says nothing here.
        let m = csi_mount();
        let mut node = kubelet_in_a_container(false);
        node.mountinfo = FakeNode::with_mounts(&[&format!("50 {m} tmpfs")]).mountinfo;
        let f = &run(&mut VolumeStillMounted::default(), &mut node, &children_of_kubelet_in_its_namespace(), 4.0)[0];
        assert_eq!(f.confidence, Confidence::Possible);
        assert!(f.summary.contains("not mounted now in kubelet's mount namespace"), "{}", f.summary);
        // Nobody left in the namespace: said, and not confirmed from the host's table.
        let mut node = FakeNode::with_mounts(&[&format!("50 {m} tmpfs")]);
        let f = &run(&mut VolumeStillMounted::default(), &mut node, &children_of_kubelet_in_its_namespace(), 4.0)[0];
        assert_ne!(f.confidence, Confidence::Confirmed);
        assert!(
            f.evidence
                .iter()
                .any(|e| e.fact.contains(&format!("no process is left in mount namespace mnt:[{KUBELET_NS}]"))),
            "{:?}",
            f.evidence
        );
        // ... and no command for the node in its place: the host's path is
        // mounted, in use, and not the one that failed.
        assert_eq!(f.fix, "");
        assert!(f.advice.iter().any(|a| a.contains("can no longer be proven")), "{:?}", f.advice);
        assert!(f.summary.contains("cannot be proven"), "{}", f.summary);
    }

    #[test]
    fn between_checks_the_words_follow_the_count() {
        let mut d = VolumeStillMounted::default();
        let mut node = mounted();
        let m = csi_mount();
        let first = run(&mut d, &mut node, &refused_twice(&m), 0.6);
        assert!(first[0].summary.contains("EBUSY 2 times"));
        let later = run(&mut d, &mut node, &[rmdir(1.5, "kubelet", &m, -libc::EBUSY)], 1.6);
        assert_eq!(later[0].count, 3);
        assert!(later[0].summary.contains("EBUSY 3 times"), "{}", later[0].summary);
        assert!(later[0].evidence[0].fact.contains("EBUSY 3 times"), "{:?}", later[0].evidence);
    }

    #[test]
    fn one_ebusy_that_succeeds_on_retry_is_not_a_finding() {
        let mut d = VolumeStillMounted::default();
        let mut node = mounted();
        let m = csi_mount();
        let found =
            run(&mut d, &mut node, &[rmdir(0.0, "kubelet", &m, -libc::EBUSY), rmdir(0.5, "kubelet", &m, 0)], 10.0);
        assert!(found.is_empty(), "{found:?}");
    }

    /// The mount table proves it at kubelet's first EBUSY: the answer
    /// follows the call, not its retry.
    #[test]
    fn a_single_failure_the_mount_table_proves_is_confirmed_at_once() {
        let mut d = VolumeStillMounted::default();
        let mut node = mounted();
        let m = csi_mount();
        let found = run(&mut d, &mut node, &[rmdir(0.0, "kubelet", &m, -libc::EBUSY)], 0.02);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].confidence, Confidence::Confirmed);
    }

    /// A refusal on a path not looked at yet asks for a review soon; once
    /// it is told, kubelet's retries of it (a storm of them, even) ask for
    /// nothing, and a refusal on another path asks again.
    #[test]
    fn only_a_path_not_looked_at_yet_asks_for_a_review_soon() {
        let mut d = VolumeStillMounted::default();
        let mut node = mounted();
        let m = csi_mount();
        assert!(!d.wants_review());
        let first = rmdir(0.0, "kubelet", &m, -libc::EBUSY);
        feed(&mut d, &first);
        assert!(d.wants_review());
        assert_eq!(run(&mut d, &mut node, &[], 0.02).len(), 1);
        assert!(!d.wants_review(), "the review answered it");
        for i in 1..100 {
            let again = rmdir(0.5 * i as f64, "kubelet", &m, -libc::EBUSY);
            feed(&mut d, &again);
        }
        assert!(!d.wants_review(), "retries of a path told ask for nothing");
        let other = rmdir(60.0, "kubelet", &m.replace("pvc-1", "pvc-2"), -libc::EBUSY);
        feed(&mut d, &other);
        assert!(d.wants_review());
    }

    /// Not proved (nothing mounted there now): one failure is no answer
    /// yet; it waits for a retry or the settle time, looked at again.
    #[test]
    fn a_single_failure_the_node_does_not_prove_waits_for_a_retry_or_the_settle_time() {
        let mut d = VolumeStillMounted::default();
        let mut node = FakeNode::with_mounts(&[]);
        let m = csi_mount();
        assert!(run(&mut d, &mut node, &[rmdir(0.0, "kubelet", &m, -libc::EBUSY)], 0.02).is_empty());
        assert!(run(&mut d, &mut node, &[], 0.5).is_empty());
        let later = run(&mut d, &mut node, &[], 2.5);
        assert_eq!(later.len(), 1, "{later:?}");
        assert_ne!(later[0].confidence, Confidence::Confirmed);
    }

    #[test]
    fn a_success_resolves_a_finding_once() {
        let mut d = VolumeStillMounted::default();
        let mut node = mounted();
        let m = csi_mount();
        let first = run(&mut d, &mut node, &refused_twice(&m), 1.0);
        assert_eq!(first[0].status, super::super::Status::Active);
        let then = run(&mut d, &mut node, &[rmdir(1.5, "kubelet", &m, 0)], 2.0);
        assert_eq!(then.len(), 1);
        assert_eq!(then[0].status, super::super::Status::Resolved);
        assert!(run(&mut d, &mut node, &[], 3.0).is_empty());
    }

    #[test]
    fn holders_and_unmount_attempts_are_told() {
        let mut d = VolumeStillMounted::default();
        let mut node = mounted();
        node.holders = vec![backup_in_csi_mount()];
        let m = csi_mount();
        let calls = [
            umount(0.0, "umount", &m, -libc::EBUSY),
            rmdir(0.1, "kubelet", &m, -libc::EBUSY),
            rmdir(0.6, "kubelet", &m, -libc::EBUSY),
        ];
        let f = &run(&mut d, &mut node, &calls, 1.0)[0];
        assert!(
            f.evidence.iter().any(|e| e.fact.contains("pid 4242 (backup) has its current directory at")),
            "{:?}",
            f.evidence
        );
        assert!(f.summary.contains("umount was tried 1 time(s) and failed with EBUSY"), "{}", f.summary);
    }

    #[test]
    fn processes_it_may_not_read_are_never_said_to_hold_nothing() {
        let mut d = VolumeStillMounted::default();
        let mut node = mounted();
        // Under an AppArmor profile such as docker-default: kubelet's and
        // containerd's /proc refused, podstuck's own profile alone readable.
        node.denied = vec![task(812, "kubelet", 'S'), task(901, "containerd", 'S')];
        let m = csi_mount();
        let f = &run(&mut d, &mut node, &refused_twice(&m), 1.0)[0];
        let facts: Vec<&str> = f.evidence.iter().map(|e| e.fact.as_str()).collect();
        assert!(!facts.contains(&"no process has a file, cwd, root or mapping on it"), "{facts:?}");
        assert!(facts.contains(&"no process podstuck could read has a file, cwd, root or mapping on it"), "{facts:?}");
        assert!(
            facts.contains(&"2 process(es) not readable under this security profile (AppArmor, SELinux or ptrace rules refuse their /proc/PID/fd, cwd and root): pid 812 (kubelet), pid 901 (containerd); a holder among them cannot be named"),
            "{facts:?}"
        );
    }

    #[test]
    fn not_mounted_any_more_is_only_possible_and_other_paths_are_ignored() {
        let mut d = VolumeStillMounted::default();
        let mut node = FakeNode::with_mounts(&[]);
        let m = csi_mount();
        let f = &run(&mut d, &mut node, &refused_twice(&m), 1.0)[0];
        assert_eq!(f.confidence, Confidence::Possible);
        let mut other = VolumeStillMounted::default();
        let calls = refused_twice("/mnt/data");
        assert!(run(&mut other, &mut node, &calls, 5.0).is_empty());
    }
}
