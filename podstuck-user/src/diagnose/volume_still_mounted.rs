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

use super::shell::{find_mount, unmount};
use super::track::{Attempts, FailureLog};
use super::{removes, removes_dir, shown, unmounts, Confidence, Detector, Finding, Kind, Review, Severity};
use crate::event::{errno_name, CallEvent};
use crate::identify::owner::Owner;
use crate::identify::pod::PathArea;
use crate::identify::Identity;
use crate::inspect::mounts::mount_at;
use crate::inspect::{MountHolder, TaskState};

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

/// "pid 42 (sleep)", and whose it is where it belongs to a pod or container:
/// "pid 42 (sleep) of pod shop/web-0 (container app)".
pub fn process_words(pid: u32, comm: &str, owner: Option<&Owner>) -> String {
    match owner {
        Some(owner) => format!("pid {pid} ({comm}) of {}", owner.words()),
        None => format!("pid {pid} ({comm})"),
    }
}

/// What to do about a leftover `kubectl debug node` pod among the holders:
/// it holds its own copy of every mount of the node until deleted.
pub fn debug_pod_advice<'h>(owners: impl IntoIterator<Item = Option<&'h Owner>>) -> Option<String> {
    let pod = owners.into_iter().flatten().find(|o| o.is_debug_pod())?;
    Some(format!("{} holds a private copy of the mount: delete it: {}", pod.words(), pod.delete_pod()?))
}

/// The processes podstuck may not look into, as one evidence line: a
/// holder may be among them, so "no process holds it" would be a claim
/// podstuck cannot make (an AppArmor profile such as docker-default lets
/// it read only processes of its own profile).
pub fn unreadable_fact(denied: &[TaskState]) -> Option<String> {
    const NAMED: usize = 5;
    if denied.is_empty() {
        return None;
    }
    let named: Vec<String> = denied.iter().take(NAMED).map(|t| format!("pid {} ({})", t.pid, t.comm)).collect();
    let more = match denied.len().saturating_sub(NAMED) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    Some(format!(
        "{} process(es) not readable under this security profile (AppArmor, SELinux or ptrace rules refuse their /proc/PID/fd, cwd and root): {}{more}; a holder among them cannot be named",
        denied.len(),
        named.join(", ")
    ))
}

/// What /proc says of who holds a mount, as evidence: each holder, the
/// processes podstuck could not read, and "no process" only when it
/// could read them all.
pub fn holders_evidence(f: &mut Finding, holders: &[MountHolder], denied: &[TaskState]) {
    match (holders.is_empty(), unreadable_fact(denied)) {
        (true, None) => f.evidence("/proc", "no process has a file, cwd, root or mapping on it"),
        (true, Some(fact)) => {
            f.evidence("/proc", "no process podstuck could read has a file, cwd, root or mapping on it");
            f.evidence("/proc", fact);
        }
        (false, unreadable) => {
            for fact in holder_facts(holders) {
                f.evidence("/proc", fact);
            }
            if let Some(fact) = unreadable {
                f.evidence("/proc", fact);
            }
        }
    }
}

/// Holders as evidence lines.
pub fn holder_facts(holders: &[MountHolder]) -> Vec<String> {
    holders
        .iter()
        .map(|h| {
            let ns = if h.other_namespace {
                format!(", in another mount namespace (mnt:[{}])", h.mntns)
            } else {
                String::new()
            };
            let how = match h.how {
                crate::inspect::HoldKind::Cwd => "has its current directory at",
                crate::inspect::HoldKind::Root => "has its root directory at",
                crate::inspect::HoldKind::OpenFile => "has open",
                crate::inspect::HoldKind::MappedFile => "has mapped",
            };
            format!("{} {how} {}{ns}", process_words(h.pid, &h.comm, h.owner.as_ref()), shown(&h.path))
        })
        .collect()
}

impl UnmountTries {
    /// What the unmounts of a volume dir say of why it is still mounted.
    fn words(&self) -> String {
        if self.count == 0 {
            "no process tried to unmount it, so the volume plugin reported an unmount it did not do".to_string()
        } else if self.last_errno == 0 {
            format!("it was unmounted {} time(s) and mounted again", self.count)
        } else {
            format!(
                "umount was tried {} time(s) and failed with {} (see mount-held)",
                self.count,
                errno_name(self.last_errno)
            )
        }
    }
}

impl VolumeStillMounted {
    fn decide(unmounts: &HashMap<Vec<u8>, UnmountTries>, a: &mut Attempts, review: &mut Review<'_>) -> Option<Finding> {
        let path = a.path.clone();
        let uid = a.pod.as_ref().map(|p| p.to_string()).unwrap_or_else(|| "?".into());
        let volume = volume_words(&path);
        let mut f = Finding::new(Kind::VolumeStillMounted, &shown(&path), Severity::Critical, a.first);
        a.stamp(&mut f);
        let rhythm = a.rhythm_words();
        let tried = unmounts.get(&path).copied().unwrap_or_default();
        let unmount_words = tried.words();
        f.evidence("trace", a.trace_words());
        f.evidence("trace", unmount_words.clone());
        // The caller's namespace: with kubelet in a container (kind, k3d,
        // minikube, Talos, RKE1) its volumes are mounted there, not in the host's.
        let view = a.caller_view(review.node);
        let resolved = view.path.clone();
        a.resolution_evidence(&view, &mut f);
        let whose = view.whose();
        match view.mounts().map(|m| mount_at(m, &resolved).cloned()) {
            Ok(Some(m)) => {
                f.confidence = Confidence::Confirmed;
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
                let holders = review.node.mount_holders(&m, view.mntns);
                let denied = review.node.processes_unreadable();
                holders_evidence(&mut f, &holders, &denied);
                f.advice.extend(debug_pod_advice(holders.iter().map(|h| h.owner.as_ref())));
                f.summary = format!(
                    "{} cannot remove the {volume} dir of pod {uid}: {} is still mounted ({}, in {whose}). Removal {}{rhythm}; {unmount_words}.",
                    a.actor.description,
                    shown(&resolved),
                    m.fstype,
                    a.failed_words().trim_start_matches(a.syscall_name()).trim_start(),
                );
                let fix = unmount(&resolved);
                f.advice.extend(view.runtime_advice(&fix));
                f.fix = view.fix(fix);
            }
            Ok(None) => {
                f.confidence = Confidence::Possible;
                f.evidence("mountinfo", format!("{} is not mounted now in {whose}", shown(&resolved)));
                f.summary = format!(
                    "{} could not remove the {volume} dir of pod {uid} ({}) with EBUSY, but it is not mounted now in {whose}: the next retry should succeed.",
                    a.actor.description,
                    shown(&resolved)
                );
                f.fix = view.fix(find_mount(&resolved));
            }
            Err(why) => {
                a.read_again_soon_if(&why);
                f.evidence("mountinfo", format!("{whose}: {}", why.said()));
                f.summary = format!("{} cannot remove the {volume} dir of pod {uid}: {} is busy (EBUSY), and {whose} cannot be read to say why.", a.actor.description, shown(&resolved));
                f.fix = unmount(&resolved);
            }
        }
        if volume.starts_with("CSI") && tried.count == 0 {
            f.advice.push("upgrade the CSI driver: its NodeUnpublishVolume returned success without unmounting (see csi-driver-host-path #457)".into());
        }
        f.advice.push(
            "never rm -rf a directory that is still a mountpoint: it deletes the volume's data (kubernetes #60987)"
                .into(),
        );
        Some(f)
    }
}

/// Volumes whose unmounts are remembered at most (a pod's teardown
/// unmounts each of its volumes once).
const UNMOUNTS_KEPT: usize = 4096;

impl Detector for VolumeStillMounted {
    fn wants_review(&self) -> bool {
        self.failures.wants_a_look()
    }

    fn observe(&mut self, event: &CallEvent, identity: &Identity) {
        let Ok(path) = &identity.abs_path else { return };
        if unmounts(event) {
            if identity.path_area == Some(PathArea::Volume) {
                let tries = self.unmounts.entry(path.clone()).or_default();
                tries.count += 1;
                tries.last_errno = event.errno().unwrap_or(0);
            }
            return;
        }
        if removes(event) {
            self.failures.observe(event, identity, |errno| {
                errno == libc::EBUSY && removes_dir(event) && identity.path_area == Some(PathArea::Volume)
            });
        }
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

    fn mounted() -> FakeNode {
        FakeNode::with_mounts(&[&format!("50 {} tmpfs", csi_mount())])
    }

    /// kubelet's rmdir of `path` refused as busy twice, at 0 and 0.5 s.
    fn refused_twice(path: &str) -> [Call; 2] {
        [rmdir(0.0, "kubelet", path, -libc::EBUSY), rmdir(0.5, "kubelet", path, -libc::EBUSY)]
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
        assert_eq!(f.fix, format!("nsenter -t 900 -m -- umount -- {m}"));
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
        d.observe(&first.event, &first.identity);
        assert!(d.wants_review());
        assert_eq!(run(&mut d, &mut node, &[], 0.02).len(), 1);
        assert!(!d.wants_review(), "the review answered it");
        for i in 1..100 {
            let again = rmdir(0.5 * i as f64, "kubelet", &m, -libc::EBUSY);
            d.observe(&again.event, &again.identity);
        }
        assert!(!d.wants_review(), "retries of a path told ask for nothing");
        let other = rmdir(60.0, "kubelet", &m.replace("pvc-1", "pvc-2"), -libc::EBUSY);
        d.observe(&other.event, &other.identity);
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
    fn a_long_list_of_unreadable_processes_names_five() {
        let denied: Vec<TaskState> = (1..=8).map(|pid| task(pid, "p", 'S')).collect();
        let fact = unreadable_fact(&denied).unwrap();
        assert!(fact.starts_with("8 process(es) not readable under this security profile"), "{fact}");
        assert!(fact.contains("pid 5 (p) and 3 more;"), "{fact}");
        assert_eq!(unreadable_fact(&[]), None);
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
