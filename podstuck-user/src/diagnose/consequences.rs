//! One root cause, its consequences under it. When an actor's teardown
//! fails for one cause, it often fails in other ways on the way: it retries
//! an unmount that already succeeded (EINVAL), for instance. Told apart,
//! those read as two pathologies with two fixes, one of them wrong. Here a
//! finding that only follows from another finding of the same actor is
//! folded into it: listed in its evidence, not told on its own (an
//! unmount retried, a directory that cannot be emptied while what the
//! other finding is about, inside it, stays).

use super::{Finding, Kind, Status};

/// Kinds that, beside another finding of the same actor, are its
/// consequence rather than a cause of their own.
fn follows_from_others(kind: Kind) -> bool {
    kind == Kind::NotMounted
}

/// Whether `candidate` only follows from `root`: a consequence kind beside
/// another finding of the same actor, or a directory that cannot be
/// emptied (ENOTEMPTY) because what `root` is about, inside it, cannot be
/// removed, whoever tries: a runtime's removal of a container's layer
/// directory, whose `merged` a held mount keeps (podman's `rm` and the
/// cleanup its conmon runs both try it).
fn follows_from(candidate: &Finding, root: &Finding) -> bool {
    let inside = |dir: &[u8]| {
        root.paths.first().is_some_and(|p| p.len() > dir.len() + 1 && p.starts_with(dir) && p[dir.len()] == b'/')
    };
    let consequence = match candidate.kind {
        Kind::DirNotEmpty => candidate.paths.first().is_some_and(|dir| inside(dir)),
        // Its holders wait on the lost device under it.
        Kind::MountHeld | Kind::VolumeStillMounted if root.kind == Kind::VolumeDeviceLost => {
            !candidate.paths.is_empty() && candidate.paths.first() == root.paths.first()
        }
        kind => follows_from_others(kind) && !follows_from_others(root.kind) && same_actor(root, candidate),
    };
    consequence && root.status == Status::Active && root.kind != candidate.kind
}

fn same_actor(a: &Finding, b: &Finding) -> bool {
    match (&a.actor, &b.actor) {
        (Some(x), Some(y)) => x.pid == y.pid || (x.comm == y.comm && x.parent == y.parent),
        _ => false,
    }
}

/// Folds consequences into their root findings. Returns the ids of the
/// findings folded, each with the id of the finding it was told under.
pub fn fold(findings: &mut Vec<Finding>) -> Vec<(String, String)> {
    let mut folded = fold_under_roots(findings, consequence_root, |consequence| {
        let path = consequence.paths.first().map(|p| super::shown(p)).unwrap_or_default();
        format!(
            "{}'s {} of {path} also fails with {} {} times: {}, not a second cause",
            consequence.actor.as_ref().map(|a| a.description.as_str()).unwrap_or("the same actor"),
            consequence.syscall.unwrap_or("call"),
            consequence.errno.as_deref().unwrap_or("an error"),
            consequence.count,
            match consequence.kind {
                Kind::DirNotEmpty => "what the cause above keeps inside it cannot go",
                Kind::MountHeld | Kind::VolumeStillMounted => {
                    "what holds it waits on the lost device of the cause above, and ends only when that I/O does"
                }
                _ => "it retries a step that already happened while the teardown fails for the cause above",
            }
        )
    });
    // no-teardown-seen says nothing on the node works on a pod; beside an
    // active finding on that pod it would contradict it: the pod is held by
    // what that finding says, and the quiet is its consequence.
    folded.extend(fold_under_roots(findings, quiet_pod_root, |quiet| {
        format!(
            "no other work on pod {} was seen on this node for {}: this is what holds it",
            quiet.pod_uid.as_ref().map(|p| p.as_str()).unwrap_or_default(),
            super::human_duration(quiet.last_seen.duration_since(quiet.first_seen).unwrap_or_default())
        )
    }));
    folded
}

/// The finding `candidate` only follows from, if any ([`follows_from`]).
fn consequence_root(findings: &[Finding], candidate: &Finding) -> Option<usize> {
    if candidate.status != Status::Active {
        return None;
    }
    findings.iter().position(|r| follows_from(candidate, r))
}

/// The active finding on the pod a no-teardown-seen is the quiet of.
fn quiet_pod_root(findings: &[Finding], quiet: &Finding) -> Option<usize> {
    if quiet.kind != Kind::NoTeardownSeen || quiet.status != Status::Active {
        return None;
    }
    let pod = quiet.pod_uid.as_ref()?;
    findings.iter().position(|r| {
        r.kind != Kind::NoTeardownSeen
            && r.status == Status::Active
            && (r.pod_uid.as_ref() == Some(pod) || r.pods.contains(pod))
    })
}

/// Each finding that `root_of` finds a root for is taken out and said in
/// its root's evidence in the words of `said`; returns (folded, root) ids.
fn fold_under_roots(
    findings: &mut Vec<Finding>,
    root_of: impl Fn(&[Finding], &Finding) -> Option<usize>,
    said: impl Fn(&Finding) -> String,
) -> Vec<(String, String)> {
    let mut folded = Vec::new();
    let mut i = 0;
    while i < findings.len() {
        let Some(root) = root_of(findings, &findings[i]) else {
            i += 1;
            continue;
        };
        let consequence = findings.remove(i);
        let root = if root > i { root - 1 } else { root };
        let r = &mut findings[root];
        r.evidence("consequence", said(&consequence));
        folded.push((consequence.id, r.id.clone()));
    }
    folded
}

#[cfg(test)]
mod tests {
    use super::super::fake::t;
    use super::super::{FindingActor, Severity};
    use super::*;

    fn by(kind: Kind, key: &str, pid: u32, comm: &str) -> Finding {
        let mut f = Finding::new(kind, key, Severity::Critical, t(0.0));
        f.actor = Some(FindingActor {
            pid,
            comm: comm.into(),
            parent: "systemd".into(),
            role: "other",
            description: comm.into(),
        });
        f.paths = vec![key.as_bytes().to_vec()];
        f.syscall = Some("umount2");
        f.errno = Some("EINVAL".into());
        f.count = 3;
        f
    }

    #[test]
    fn an_unmount_retried_by_an_actor_stuck_on_another_cause_is_told_under_it() {
        let mut all = vec![
            by(Kind::NotMounted, "/x/merged", 7, "agent"),
            by(Kind::ImmutableFile, "/x/diff/f", 7, "agent"),
            by(Kind::NotMounted, "/y", 8, "other"),
        ];
        let folded = fold(&mut all);
        assert_eq!(folded, vec![("not-mounted:/x/merged".to_string(), "immutable-file:/x/diff/f".to_string())]);
        assert_eq!(all.len(), 2);
        assert!(all[0]
            .evidence
            .iter()
            .any(|e| e.source == "consequence" && e.fact.contains("/x/merged") && e.fact.contains("EINVAL 3 times")));
        // Another actor's not-mounted stands on its own.
        assert_eq!(all[1].kind, Kind::NotMounted);
    }

    /// podman's RemoveAll of a layer directory meets ENOTEMPTY because
    /// its `merged`, inside, is held (whichever podman process tries it):
    /// one cause, told once. An ENOTEMPTY on a directory the held path is
    /// not inside is a cause of its own.
    #[test]
    fn a_directory_that_cannot_be_emptied_for_a_held_mount_inside_is_told_under_it() {
        let mut all = vec![
            by(Kind::DirNotEmpty, "/s/overlay/abc", 9, "cleanup"),
            by(Kind::MountHeld, "/s/overlay/abc/merged", 7, "podman"),
            by(Kind::DirNotEmpty, "/s/overlay/abcd", 7, "podman"),
            by(Kind::DirNotEmpty, "/s/overlay/abc/merged", 7, "podman"),
        ];
        let folded = fold(&mut all);
        assert_eq!(
            folded,
            vec![("dir-not-empty:/s/overlay/abc".to_string(), "mount-held:/s/overlay/abc/merged".to_string())]
        );
        assert_eq!(all.iter().filter(|f| f.kind == Kind::DirNotEmpty).count(), 2);
        assert!(all[0].evidence.iter().any(|e| e.fact.contains("what the cause above keeps inside it cannot go")));
    }

    /// The holders mount-held names wait on the lost device under the
    /// volume: one cause, the device's. A mount-held of another path stands.
    #[test]
    fn a_held_volume_whose_device_is_lost_is_told_under_the_device() {
        let mut all = vec![
            by(Kind::MountHeld, "/v/mount", 7, "kubelet"),
            by(Kind::VolumeDeviceLost, "/v/mount", 7, "kubelet"),
            by(Kind::MountHeld, "/w/mount", 7, "kubelet"),
        ];
        let folded = fold(&mut all);
        assert_eq!(folded, vec![("mount-held:/v/mount".to_string(), "volume-device-lost:/v/mount".to_string())]);
        assert_eq!(all.iter().map(|f| f.kind).collect::<Vec<_>>(), [Kind::VolumeDeviceLost, Kind::MountHeld]);
        assert!(all[0].evidence.iter().any(|e| e.fact.contains("waits on the lost device")), "{:?}", all[0].evidence);
    }

    #[test]
    fn a_quiet_pod_beside_an_active_finding_on_it_is_told_under_that_finding() {
        use super::super::fake::pod;
        let mut quiet = Finding::new(Kind::NoTeardownSeen, pod().as_str(), Severity::Warning, t(0.0));
        quiet.pod_uid = Some(pod());
        quiet.last_seen = t(150.0);
        let mut held = by(Kind::MountHeld, "/v", 7, "kubelet");
        held.pods = vec![pod()];
        let mut elsewhere = Finding::new(Kind::NoTeardownSeen, "other", Severity::Warning, t(0.0));
        elsewhere.pod_uid = Some(crate::identify::pod::PodUid::parse("5f1c2a9e-0000-4000-8000-000000000002").unwrap());
        let mut all = vec![quiet, held, elsewhere];
        let folded = fold(&mut all);
        assert_eq!(folded, vec![(format!("no-teardown-seen:{}", pod().as_str()), "mount-held:/v".to_string())]);
        assert_eq!(all.len(), 2, "another pod's quiet stands");
        assert!(all[0].evidence.iter().any(|e| e.fact.contains("this is what holds it")), "{:?}", all[0].evidence);
    }
}
