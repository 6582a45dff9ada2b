//! P4 `mount-held`: a mount cannot be unmounted because something uses it:
//! a process with a file open, its cwd or root, or a mapping on it, in this
//! mount namespace or in another one that holds a busy copy (a container's
//! leaked namespace), or submounts below it.
//!
//! Signature: umount2 failing with EBUSY (containerd retries 50 times, 50 ms
//! apart), or EBUSY removing a runtime directory (overlay `merged`, `shm`,
//! netns, rootfs). Pod volumes, raw block volumes' mappings and cgroups
//! have their own detectors.
//! Confirmed by finding the holder in /proc.

use super::holders::{debug_pod_advice, holder_facts, holders_evidence, process_words};
use super::route::{Attempt, Claim, Refusal, Target, NOT_A_POD_VOLUME_OR_CGROUP};
use super::shell::{find_mount, in_mount_namespace_of, kill_if_same, one_after_another, unmount, unmount_lazily};
use super::track::{Attempts, CallerView, FailureLog};
use super::{shown, Confidence, Detector, Finding, Kind, Review, Severity};
use crate::event::CallEvent;
use crate::identify::pod::ContainerId;
use crate::identify::Identity;
use crate::inspect::mounts::{copy_can_block_unmount, mount_at, mount_containing, mounts_on_same_dir, mounts_under};
use crate::inspect::{HoldKind, Mount, MountCopy, MountHolder, NodeInspector, TaskState};

#[derive(Default)]
pub struct MountHeld {
    failures: FailureLog,
}

/// SIGTERM to every holder, each only if its pid still names the process
/// that held the mount (its start time): pids are reused within minutes,
/// and a fix is pasted later. None when a holder's start is unknown.
fn stop_holders(holders: &[MountHolder]) -> Option<String> {
    let mut seen = std::collections::BTreeSet::new();
    let kills: Option<Vec<String>> =
        holders.iter().filter(|h| seen.insert(h.pid)).map(|h| kill_if_same("TERM", h.pid, h.start)).collect();
    kills.map(one_after_another)
}

/// The fix for holders here: stop them, each kill checked against its
/// start, the lazy detach (made to act in the caller's namespace, where
/// that can be proven) as advice; without every start, the detach (which
/// names no process) is the fix: a kill by pid alone could hit whatever
/// process has the pid by the time it is pasted.
fn stop_or_detach(f: &mut Finding, holders: &[MountHolder], lazily: Result<String, String>) {
    match (stop_holders(holders), lazily) {
        (Some(kills), lazily) => {
            f.fix = kills;
            if let Ok(lazily) = lazily {
                f.advice.push(format!(
                    "if the holder must keep running, detach lazily instead: {lazily} (the mount goes when the holder lets go)"
                ));
            }
        }
        (None, lazily) => {
            let h = &holders[0];
            match lazily {
                Ok(lazily) => f.fix = lazily,
                Err(why) => f.advice.push(why),
            }
            f.advice.push(format!(
                "the mount goes when the holder lets go; to stop it now: stop pid {} ({}) once `ps -p {} -o lstart,comm` shows it is still that process (its start could not be read)",
                h.pid, h.comm, h.pid
            ));
        }
    }
}

/// How to stop one holder, in words: its start-checked kill, or its pid
/// with the check to make first where its start is unknown.
fn stop_holder_words(h: &MountHolder) -> String {
    match kill_if_same("TERM", h.pid, h.start) {
        Some(kill) => kill,
        None => {
            format!(
                "stop pid {} ({}) once `ps -p {} -o lstart,comm` shows it is still that process",
                h.pid, h.comm, h.pid
            )
        }
    }
}

fn hold_words(how: HoldKind) -> &'static str {
    match how {
        HoldKind::Cwd => "has its current directory there",
        HoldKind::Root => "has its root directory there",
        HoldKind::OpenFile => "has a file open there",
        HoldKind::MappedFile => "has a file mapped from there",
    }
}

/// "the root filesystem of container <id>", or "a path of container <id>":
/// what the runtime's path is, in the words of whoever must act on it.
fn container_words(path: &[u8], container: &ContainerId) -> String {
    let last = path.rsplit(|b| *b == b'/').next().unwrap_or_default();
    match last {
        b"merged" | b"rootfs" => format!("the root filesystem of container {}", container.as_str()),
        _ => format!("a path of container {}", container.as_str()),
    }
}

/// What mount-held found, before a word of it is said: the decision, with
/// the facts that prove it. The words and the fix are made of it apart
/// ([`MountHeld::tell`]), so tests hold the decision as a value.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(clippy::large_enum_variant, reason = "one per review of a failing mount, never kept in bulk")]
pub enum Verdict {
    /// The path is a mountpoint in the caller's namespace; what keeps it busy.
    Mounted { mount: Mount, busy: Busy },
    /// Nothing is mounted at the path any more, but its directory is still
    /// a mountpoint through other paths (bind views of a parent), deepest
    /// first, and who sits in them here.
    SecondView { views: Vec<Mount>, holders: Vec<MountHolder> },
    /// Nothing is mounted on its directory now: the next retry should work.
    NotMountedNow,
}

/// What keeps a mountpoint busy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Busy {
    /// A process in another namespace holds that namespace's copy, which
    /// the unmount reaches.
    HeldInAnotherNamespace(MountHolder),
    /// Processes of the caller's namespace hold it.
    Held(Vec<MountHolder>),
    /// A directory being removed is still mounted, held by nothing:
    /// nothing unmounted it.
    NeverUnmounted,
    /// Mounts below it, deepest first.
    MountsBelow(Vec<Mount>),
    /// A copy in another namespace, which the unmount reaches, is busy; no
    /// process there was found holding it.
    CopyBusy(MountCopy),
    /// No holder among the processes podstuck could read, and this many
    /// it may not read.
    HolderUnreadable(usize),
    /// No holder at all: a kernel user (a loop device, a swap file) may be one.
    NoHolderFound,
}

impl Verdict {
    /// How sure the decision is.
    pub fn confidence(&self) -> Confidence {
        match self {
            Verdict::Mounted { busy: Busy::CopyBusy(_), .. } => Confidence::Likely,
            Verdict::Mounted { busy: Busy::HolderUnreadable(_) | Busy::NoHolderFound, .. } | Verdict::NotMountedNow => {
                Confidence::Possible
            }
            Verdict::Mounted { .. } | Verdict::SecondView { .. } => Confidence::Confirmed,
        }
    }
}

/// What was read of a busy mountpoint, for the evidence besides the verdict.
struct Seen {
    holders: Vec<MountHolder>,
    denied: Vec<TaskState>,
    copies: Vec<MountCopy>,
    below: Vec<Mount>,
}

impl MountHeld {
    fn decide(a: &mut Attempts, review: &mut Review<'_>) -> Option<Finding> {
        let node = &mut *review.node;
        let view = a.caller_view(node);
        let (verdict, seen) = Self::judge(a, node, &view)?;
        Some(Self::tell(a, &view, &verdict, seen.as_ref()))
    }

    /// Reads the caller's mount table and /proc, and decides. None: not
    /// this cause's (a namespace nobody lives in any more holds nothing
    /// to fix; a cgroup filesystem's EBUSY is its tasks').
    fn judge(a: &Attempts, node: &mut dyn NodeInspector, view: &CallerView) -> Option<(Verdict, Option<Seen>)> {
        let mounts = view.mounts().ok()?;
        let path = view.path.as_slice();
        if mount_containing(mounts, path).is_some_and(Mount::is_cgroup) {
            return None;
        }
        let Some(mount) = mount_at(mounts, path).cloned() else {
            let mut views: Vec<Mount> = mounts_on_same_dir(mounts, path).into_iter().cloned().collect();
            if views.is_empty() {
                return Some((Verdict::NotMountedNow, None));
            }
            views.sort_by_key(|m| std::cmp::Reverse(m.mount_point.len()));
            let holders = views
                .iter()
                .flat_map(|m| node.mount_holders(m, view.mntns).into_iter().filter(|h| !h.other_namespace))
                .collect();
            return Some((Verdict::SecondView { views, holders }, None));
        };
        let unmounting = a.syscall == podstuck_common::Syscall::Umount2;
        // Another namespace's copy can only refuse an unmount that reaches
        // it; removing a directory is never blocked from another namespace.
        let copies: Vec<MountCopy> = if unmounting {
            node.mount_copies(&mount, view.mntns)
                .into_iter()
                .filter(|c| copy_can_block_unmount(&mount, &c.propagation))
                .collect()
        } else {
            Vec::new()
        };
        let holders: Vec<MountHolder> = node
            .mount_holders(&mount, view.mntns)
            .into_iter()
            .filter(|h| !h.other_namespace || copies.iter().any(|c| c.mntns == h.mntns))
            .collect();
        let below: Vec<Mount> = mounts_under(mounts, path).into_iter().cloned().collect();
        let denied = node.processes_unreadable();
        let busy = if let Some(h) = holders.iter().find(|h| h.other_namespace) {
            Busy::HeldInAnotherNamespace(h.clone())
        } else if !holders.is_empty() {
            Busy::Held(holders.clone())
        } else if !unmounting && below.is_empty() {
            Busy::NeverUnmounted
        } else if !below.is_empty() {
            let mut deepest_first = below.clone();
            deepest_first.sort_by_key(|m| std::cmp::Reverse(m.mount_point.len()));
            Busy::MountsBelow(deepest_first)
        } else if let Some(copy) = copies.first() {
            Busy::CopyBusy(copy.clone())
        } else if !denied.is_empty() {
            Busy::HolderUnreadable(denied.len())
        } else {
            Busy::NoHolderFound
        };
        Some((Verdict::Mounted { mount, busy }, Some(Seen { holders, denied, copies, below })))
    }

    /// The verdict in words: the finding, its evidence and its fix, made
    /// to act in the caller's namespace.
    fn tell(a: &Attempts, view: &CallerView, verdict: &Verdict, seen: Option<&Seen>) -> Finding {
        let mut f = Finding::new(Kind::MountHeld, &shown(&a.path), Severity::Critical, a.first);
        a.stamp(&mut f);
        f.confidence = verdict.confidence();
        f.evidence("trace", a.trace_words());
        a.resolution_evidence(view, &mut f);
        match (verdict, seen) {
            (Verdict::Mounted { mount, busy }, Some(seen)) => Self::mounted(a, &mut f, view, mount, busy, seen),
            (Verdict::SecondView { views, holders }, _) => Self::second_view(a, &mut f, view, views, holders),
            _ => Self::not_mounted_now(a, &mut f, view),
        }
        // Paths and mounts are the caller's namespace's: the fix acts there.
        let fix = std::mem::take(&mut f.fix);
        view.place_fix(&mut f, fix);
        if let Some(container) = &a.container {
            let whose = container_words(&a.path, container);
            f.summary = format!("{} is {whose}. {}", shown(&a.path), f.summary);
            f.evidence("runtime", format!("{} is {whose}, by the runtime's own records", shown(&a.path)));
            f.detail("container", container.as_str());
        }
        f
    }

    /// A busy mountpoint, in words.
    fn mounted(a: &Attempts, f: &mut Finding, view: &CallerView, mount: &Mount, busy: &Busy, seen: &Seen) {
        let path = view.path.as_slice();
        let unmounting = a.syscall == podstuck_common::Syscall::Umount2;
        f.evidence(
            "mountinfo",
            format!("{} is a {} mount of {} (mount id {})", shown(path), mount.fstype, mount.source, mount.id),
        );
        Self::busy_evidence(f, seen);
        let what = format!("{} cannot unmount {} ({})", a.actor.description, shown(path), mount.fstype);
        let failed = format!("{}{}", a.failed_words(), a.rhythm_words());
        match busy {
            Busy::HeldInAnotherNamespace(h) => {
                let holder = format!(
                    "{} in another mount namespace (mnt:[{}]) {} and keeps its copy of the mount busy, so the host's unmount is refused",
                    process_words(h.pid, &h.comm, h.owner.as_ref()),
                    h.mntns,
                    hold_words(h.how)
                );
                let unmount = in_mount_namespace_of(h.pid, h.start, &unmount_lazily(path));
                // A leftover debug pod is no workload: deleting it is the fix.
                match h.owner.as_ref().filter(|o| o.is_debug_pod()).and_then(|o| Some((o.words(), o.delete_pod()?))) {
                    Some((pod, delete)) => {
                        f.summary = format!(
                            "{what}: {pod} holds a copy of the mount: {holder}. Delete it: {delete}. {failed}."
                        );
                        f.fix = delete;
                        f.advice.extend(unmount.map(|u| format!("or, keeping the pod: {u}")));
                    }
                    None => {
                        f.summary = format!("{what}: {holder}. {failed}.");
                        f.fix = unmount.unwrap_or_default();
                    }
                }
                f.advice.push(format!("or stop the holder: {}; then the next retry succeeds", stop_holder_words(h)));
            }
            Busy::Held(holders) => {
                let h = &holders[0];
                let verb = if unmounting {
                    what.clone()
                } else {
                    format!(
                        "{} cannot remove {}: it is still mounted ({}) and",
                        a.actor.description,
                        shown(path),
                        mount.fstype
                    )
                };
                f.summary = format!("{verb}: pid {} ({}) {}. {failed}.", h.pid, h.comm, hold_words(h.how));
                stop_or_detach(f, holders, view.fix(unmount_lazily(path)));
            }
            Busy::NeverUnmounted => {
                f.summary = format!(
                    "{} cannot remove {}: it is still mounted ({} from {}) and nothing unmounted it. {failed}.",
                    a.actor.description,
                    shown(path),
                    mount.fstype,
                    mount.source
                );
                f.fix = unmount(path);
                f.advice.push(
                    "never rm -rf a directory that is still a mountpoint: it deletes what is mounted there".into(),
                );
            }
            Busy::MountsBelow(subs) => {
                f.summary = format!("{what}: {} mount(s) below it keep it busy. {failed}.", subs.len());
                f.fix = one_after_another(subs.iter().map(|m| unmount(&m.mount_point)));
            }
            Busy::CopyBusy(copy) => {
                let whose = copy.owner.as_ref().map(|o| format!(", {}", o.words())).unwrap_or_default();
                f.summary = format!(
                    "{what}: a copy in mount namespace mnt:[{}] (pid {} {}{whose}) is busy. {failed}.",
                    copy.mntns, copy.pid, copy.comm
                );
                match in_mount_namespace_of(copy.pid, copy.start, &unmount_lazily(path)) {
                    Some(fix) => f.fix = fix,
                    None => f.advice.push(format!(
                        "no fix is printed: when pid {} started could not be read, so its pid is no proof of which namespace a pasted nsenter would enter",
                        copy.pid
                    )),
                }
                f.advice.extend(debug_pod_advice([copy.owner.as_ref()]));
            }
            Busy::HolderUnreadable(denied) => {
                f.summary = format!(
                    "{what}: who holds it is not readable under this security profile ({denied} process(es) podstuck may not look into: AppArmor, SELinux or ptrace rules), and none it could read holds it. {failed}."
                );
                f.fix = unmount_lazily(path);
                f.advice.push("to name the holder, run podstuck unconfined: the DaemonSet's appArmorProfile Unconfined (deploy/), docker run --security-opt apparmor=unconfined, or as root on the node".into());
            }
            Busy::NoHolderFound => {
                f.summary = format!("{what}, and no holder was found in /proc (a kernel user such as a loop device or swap file may hold it). {failed}.");
                f.fix = unmount_lazily(path);
            }
        }
    }

    /// What keeps a mount busy, as evidence: the processes holding it, its
    /// copies in other namespaces, the mounts below it.
    fn busy_evidence(f: &mut Finding, seen: &Seen) {
        if !seen.holders.is_empty() || !seen.denied.is_empty() {
            holders_evidence(f, &seen.holders, &seen.denied);
        }
        for copy in &seen.copies {
            f.evidence(
                "/proc/*/mountinfo",
                format!(
                    "a copy is mounted in mount namespace mnt:[{}] (pid {} {}{} lives there), {}: unmounting here reaches it",
                    copy.mntns,
                    copy.pid,
                    copy.comm,
                    copy.owner.as_ref().map(|o| format!(" of {}", o.words())).unwrap_or_default(),
                    copy.propagation.join(" ")
                ),
            );
        }
        for sub in &seen.below {
            f.evidence("mountinfo", format!("{} ({}) is mounted below it", shown(&sub.mount_point), sub.fstype));
        }
    }

    /// Nothing is mounted on the path's directory now.
    fn not_mounted_now(a: &Attempts, f: &mut Finding, view: &CallerView) {
        let path = view.path.as_slice();
        f.evidence(
            "mountinfo",
            format!(
                "{} is not a mountpoint now in {}, and no mount sits on its directory by another path",
                shown(path),
                view.whose()
            ),
        );
        f.summary = format!(
            "{} got EBUSY on {}, which is not mounted now: the next retry should succeed. {}{}.",
            a.actor.description,
            shown(path),
            a.failed_words(),
            a.rhythm_words()
        );
        f.fix = find_mount(path);
    }

    /// The path's directory is still a mountpoint through other paths.
    fn second_view(a: &Attempts, f: &mut Finding, view: &CallerView, twins: &[Mount], holders: &[MountHolder]) {
        let path = view.path.as_slice();
        let failed = format!("{}{}", a.failed_words(), a.rhythm_words());
        for twin in twins {
            f.evidence(
                "mountinfo",
                format!(
                    "{} ({} from {}, mount id {}) is mounted on the same directory as {}, reached through another path (a bind view of a parent directory)",
                    shown(&twin.mount_point),
                    twin.fstype,
                    twin.source,
                    twin.id,
                    shown(path)
                ),
            );
        }
        for fact in holder_facts(holders) {
            f.evidence("/proc", fact);
        }
        let views = twins.iter().map(|m| shown(&m.mount_point)).collect::<Vec<_>>().join(", ");
        let held = match holders.first() {
            Some(h) => format!(
                " pid {} ({}) {}, so a plain umount of it would be refused too.",
                h.pid,
                h.comm,
                hold_words(h.how)
            ),
            None => String::new(),
        };
        f.summary = format!(
            "{} cannot remove {}: nothing is mounted at that path any more, but its directory is still a mountpoint through {views}, a second view of it (a bind mount of a parent directory, often left by a backup or debugging tool), and the kernel refuses to remove a mountpoint.{held} {failed}.",
            a.actor.description,
            shown(path),
        );
        f.fix = one_after_another(twins.iter().map(|m| unmount_lazily(&m.mount_point)));
        f.advice.push(
            "umount -l detaches the view's copy at once, even while a process sits in it; then the next retry succeeds"
                .into(),
        );
        f.advice.push("find what made the view (findmnt -o TARGET,SOURCE,PROPAGATION) so it is not made again".into());
        if !holders.is_empty() {
            let pids = holders.iter().map(|h| h.pid.to_string()).collect::<Vec<_>>().join(" ");
            f.advice.push(format!("the processes in the view ({pids}) keep its files open; stop them once the view is gone if they belong to nothing"));
        }
    }
}

impl Detector for MountHeld {
    /// An unmount refused busy, wherever (a lazy detach is never refused
    /// for a holder; a raw block volume's mapping is its device's); a
    /// directory refused busy where no detector of a pod's volume,
    /// subPath or cgroup explains it.
    fn claims(&self) -> &'static [Claim] {
        &[
            Claim {
                attempts: &[Attempt::Unmount],
                refusals: &[Refusal::Busy],
                targets: &[
                    Target::Volume,
                    Target::Subpath,
                    Target::PodDir,
                    Target::Cgroup,
                    Target::RuntimeDir,
                    Target::Cni,
                    Target::Other,
                ],
            },
            Claim { attempts: &[Attempt::RemoveDir], refusals: &[Refusal::Busy], targets: NOT_A_POD_VOLUME_OR_CGROUP },
        ]
    }

    fn failed(&mut self, event: &CallEvent, identity: &Identity) {
        self.failures.record(event, identity);
    }

    fn observe(&mut self, event: &CallEvent, identity: &Identity) {
        self.failures.ended_by(event, identity);
    }

    fn review(&mut self, review: &mut Review<'_>) -> Vec<Finding> {
        self.failures.review(review, Self::decide)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::*;
    use super::*;
    use crate::event::ProcessStart;
    use crate::inspect::{MountCopy, MountHolder};

    const ROOTFS: &str = "/run/containerd/io.containerd.runtime.v2.task/k8s.io/aaaa/rootfs";

    /// What mount-held decides of `calls` on `node`: its verdict alone.
    fn verdict(node: &mut FakeNode, calls: &[Call]) -> Option<Verdict> {
        let a = attempts_of(calls);
        let view = a.caller_view(node);
        MountHeld::judge(&a, node, &view).map(|(verdict, _)| verdict)
    }

    /// The busy mount of `verdict`, asserting there is one.
    fn busy(verdict: Option<Verdict>) -> Busy {
        match verdict {
            Some(Verdict::Mounted { busy, .. }) => busy,
            other => panic!("not a busy mount: {other:?}"),
        }
    }

    fn bursts() -> Vec<Call> {
        (0..10).map(|i| umount(i as f64 * 0.05, "containerd", ROOTFS, -libc::EBUSY)).collect()
    }

    /// sleep's copy of the rootfs in another mount namespace, with the
    /// propagation mountinfo shows for it.
    fn copy(propagation: &[&str]) -> MountCopy {
        MountCopy {
            mntns: 4026532999,
            pid: 3131,
            start: Some(ProcessStart(3_131_000)),
            comm: "sleep".into(),
            mount_point: ROOTFS.into(),
            propagation: propagation.iter().map(|p| p.to_string()).collect(),
            owner: None,
        }
    }

    fn holder(other_namespace: bool, how: HoldKind) -> MountHolder {
        MountHolder {
            pid: 3131,
            start: Some(ProcessStart(313_100)),
            comm: "sleep".into(),
            how,
            path: ROOTFS.into(),
            mntns: 4026532999,
            other_namespace,
            owner: None,
        }
    }

    #[test]
    fn in_a_node_container_the_holder_beside_the_caller_is_the_one_and_fixes_act_there() {
        // containerd inside a kind node (namespace 4026532500, kept alive by
        // its systemd, pid 700) cannot unmount a rootfs a process of the
        // same node container still sits in.
        const NODE_NS: u64 = 4026532500;
        let mut node =
            FakeNode::with_mounts(&[]).with_namespace(NODE_NS, 700, "systemd", &[&format!("60 {ROOTFS} overlay")]);
        node.holders = vec![MountHolder { mntns: NODE_NS, ..holder(false, HoldKind::Cwd) }];
        let calls: Vec<Call> = bursts().into_iter().map(|c| c.in_namespace(NODE_NS)).collect();
        let f = &run(&mut MountHeld::default(), &mut node, &calls, 1.0)[0];
        assert_eq!(f.confidence, Confidence::Confirmed);
        assert_eq!(f.fix, kill_if_same("TERM", 3131, Some(ProcessStart(313_100))).unwrap());
        assert!(
            f.advice.iter().any(|a| a.contains(&entered(700, 10_700, &format!("umount -l -- {ROOTFS}")))),
            "{:?}",
            f.advice
        );
        // No holder: the lazy unmount is the fix, run in that namespace.
        node.holders.clear();
        let f = &run(&mut MountHeld::default(), &mut node, &calls, 1.0)[0];
        assert_eq!(f.fix, entered(700, 10_700, &format!("umount -l -- {ROOTFS}")));
    }

    #[test]
    fn processes_it_may_not_read_make_no_holder_an_unknown_not_a_none() {
        let mut node = FakeNode::with_mounts(&[&format!("60 {ROOTFS} overlay")]);
        node.denied = vec![task(3131, "sleep", 'S')];
        assert_eq!(busy(verdict(&mut node, &bursts())), Busy::HolderUnreadable(1));
        let f = &run(&mut MountHeld::default(), &mut node, &bursts(), 1.0)[0];
        assert_eq!(f.confidence, Confidence::Possible);
        assert!(
            f.evidence.iter().any(|e| e.fact.contains("pid 3131 (sleep); a holder among them cannot be named")),
            "{:?}",
            f.evidence
        );
        assert!(f.advice.iter().any(|a| a.contains("appArmorProfile Unconfined")), "{:?}", f.advice);
        // Never a kill of a process it could not see hold anything.
        assert!(!f.fix.contains("kill"), "{}", f.fix);
    }

    #[test]
    fn a_holder_in_another_mount_namespace() {
        let mut d = MountHeld::default();
        let mut node = FakeNode::with_mounts(&[&format!("60 {ROOTFS} overlay")]);
        node.holders = vec![holder(true, HoldKind::Cwd)];
        node.copies = vec![copy(&["master:60"])];
        assert_eq!(busy(verdict(&mut node, &bursts())), Busy::HeldInAnotherNamespace(holder(true, HoldKind::Cwd)));
        let f = &run(&mut d, &mut node, &bursts(), 1.0)[0];
        assert_eq!(f.kind, Kind::MountHeld);
        assert_eq!(f.confidence, Confidence::Confirmed);
        assert_eq!(f.fix, entered(3131, 313_100, &format!("umount -l -- {ROOTFS}")));
        assert!(f.rhythm.as_deref().unwrap().contains("containerd"));
        assert!(f.evidence.iter().any(|e| e.fact.contains("pid 3131 (sleep)")));
    }

    #[test]
    fn a_holder_in_another_container_is_named_by_its_pod_and_a_leftover_debug_pod_is_to_be_deleted() {
        use crate::identify::owner::Owner;
        let pod = |name: &str, container: &str| Owner {
            pod_name: Some(name.into()),
            pod_namespace: Some("default".into()),
            container: Some(container.into()),
            ..Owner::default()
        };
        let copy = copy(&["master:60"]);
        let mut node = FakeNode::with_mounts(&[&format!("60 {ROOTFS} overlay")]);
        node.holders = vec![MountHolder { owner: Some(pod("web-0", "app")), ..holder(true, HoldKind::Cwd) }];
        node.copies = vec![copy.clone()];
        let f = &run(&mut MountHeld::default(), &mut node, &bursts(), 1.0)[0];
        assert!(
            f.summary.contains("pid 3131 (sleep) of pod default/web-0 (container app) in another mount namespace"),
            "{}",
            f.summary
        );
        assert_eq!(f.fix, entered(3131, 313_100, &format!("umount -l -- {ROOTFS}")));

        let mut node = FakeNode::with_mounts(&[&format!("60 {ROOTFS} overlay")]);
        node.holders = vec![MountHolder {
            owner: Some(pod("node-debugger-node-1-abcde", "debugger")),
            ..holder(true, HoldKind::Cwd)
        }];
        node.copies = vec![copy];
        let f = &run(&mut MountHeld::default(), &mut node, &bursts(), 1.0)[0];
        assert!(
            f.summary.contains(
                "the leftover kubectl debug pod default/node-debugger-node-1-abcde holds a copy of the mount"
            ),
            "{}",
            f.summary
        );
        assert_eq!(f.fix, "kubectl delete pod -n default -- node-debugger-node-1-abcde");
        assert!(
            f.advice.iter().any(|a| a.contains(&entered(3131, 313_100, &format!("umount -l -- {ROOTFS}")))),
            "{:?}",
            f.advice
        );
        assert!(f.evidence.iter().any(|e| e.fact.contains("of the leftover kubectl debug pod")), "{:?}", f.evidence);
    }

    #[test]
    fn a_holder_here_with_an_open_file() {
        let mut d = MountHeld::default();
        let mut node = FakeNode::with_mounts(&[&format!("60 {ROOTFS} overlay")]);
        node.holders = vec![holder(false, HoldKind::OpenFile)];
        assert_eq!(busy(verdict(&mut node, &bursts())), Busy::Held(vec![holder(false, HoldKind::OpenFile)]));
        let f = &run(&mut d, &mut node, &bursts(), 1.0)[0];
        assert_eq!(f.fix, kill_if_same("TERM", 3131, Some(ProcessStart(313_100))).unwrap());
    }

    /// A pid is reused within minutes and a fix is pasted later: each kill
    /// checks that its pid still names the holder podstuck read, by start.
    #[test]
    fn every_holder_is_killed_only_while_its_pid_is_still_that_process() {
        let mut d = MountHeld::default();
        let mut node = FakeNode::with_mounts(&[&format!("60 {ROOTFS} overlay")]);
        let other = MountHolder { pid: 4141, start: Some(ProcessStart(414_100)), ..holder(false, HoldKind::OpenFile) };
        node.holders = vec![holder(false, HoldKind::Cwd), holder(false, HoldKind::OpenFile), other];
        let f = &run(&mut d, &mut node, &bursts(), 1.0)[0];
        let one = kill_if_same("TERM", 3131, Some(ProcessStart(313_100))).unwrap();
        let two = kill_if_same("TERM", 4141, Some(ProcessStart(414_100))).unwrap();
        assert_eq!(f.fix, format!("{one} && {two}"));
        assert_eq!(f.fix.matches("kill -TERM 3131").count(), 1, "{}", f.fix);
    }

    /// Without the holder's start, no kill is the fix: the lazy unmount,
    /// which names no process, is; the kill is advice with the check to make.
    #[test]
    fn a_holder_whose_start_is_unknown_is_never_killed_by_pid_alone() {
        let mut d = MountHeld::default();
        let mut node = FakeNode::with_mounts(&[&format!("60 {ROOTFS} overlay")]);
        node.holders = vec![MountHolder { start: None, ..holder(false, HoldKind::Cwd) }];
        let f = &run(&mut d, &mut node, &bursts(), 1.0)[0];
        assert_eq!(f.confidence, Confidence::Confirmed);
        assert!(!f.fix.contains("kill"), "{}", f.fix);
        assert!(f.fix.contains(&format!("umount -l -- {ROOTFS}")), "{}", f.fix);
        assert!(f.advice.iter().any(|a| a.contains("ps -p 3131 -o lstart,comm")), "{:?}", f.advice);
    }

    #[test]
    fn a_runtime_dir_still_mounted_is_unmounted() {
        let mut d = MountHeld::default();
        let shm = "/var/lib/docker/containers/abc/mounts/shm";
        let mut node = FakeNode::with_mounts(&[&format!("60 {shm} tmpfs")]);
        let calls = [rmdir(0.0, "dockerd", shm, -libc::EBUSY), rmdir(0.5, "dockerd", shm, -libc::EBUSY)];
        assert_eq!(busy(verdict(&mut node, &calls)), Busy::NeverUnmounted);
        let f = &run(&mut d, &mut node, &calls, 1.0)[0];
        assert_eq!(f.fix, format!("umount -- {shm}"));
    }

    #[test]
    fn submounts_are_unmounted_deepest_first() {
        let mut d = MountHeld::default();
        let mut node = FakeNode::with_mounts(&[
            &format!("60 {ROOTFS} overlay"),
            &format!("61 {ROOTFS}/proc proc"),
            &format!("62 {ROOTFS}/proc/sys/fs/binfmt_misc binfmt_misc"),
        ]);
        let Busy::MountsBelow(below) = busy(verdict(&mut node, &bursts())) else { panic!("mounts below") };
        let deepest_first: Vec<String> = below.iter().map(|m| shown(&m.mount_point)).collect();
        assert_eq!(deepest_first, [format!("{ROOTFS}/proc/sys/fs/binfmt_misc"), format!("{ROOTFS}/proc")]);
        let f = &run(&mut d, &mut node, &bursts(), 1.0)[0];
        assert_eq!(f.fix, format!("umount -- {ROOTFS}/proc/sys/fs/binfmt_misc && umount -- {ROOTFS}/proc"));
    }

    #[test]
    fn lazy_unmounts_a_retry_that_works_and_cgroups_are_not_mount_held() {
        let mut d = MountHeld::default();
        let mut node = FakeNode::with_mounts(&[&format!("60 {ROOTFS} overlay"), "70 /sys/fs/cgroup cgroup2"]);
        let calls = [umount(0.0, "containerd", ROOTFS, -libc::EBUSY), umount(0.05, "containerd", ROOTFS, 0)];
        assert!(run(&mut d, &mut node, &calls, 5.0).is_empty());
        let cg = "/sys/fs/cgroup/kubepods.slice/x";
        let calls = [rmdir(0.0, "kubelet", cg, -libc::EBUSY), rmdir(2.0, "kubelet", cg, -libc::EBUSY)];
        let mut node = FakeNode::with_mounts(&["70 /sys/fs/cgroup cgroup2"]);
        assert_eq!(verdict(&mut node, &calls), None);
        assert!(run(&mut d, &mut node, &calls, 5.0).is_empty());
    }

    #[test]
    fn a_symlinked_spelling_of_a_held_rootfs_names_the_holder() {
        // docker's containerd keeps tasks under /var/run, a symlink to /run.
        let mut d = MountHeld::default();
        let mut node = FakeNode::with_mounts(&[&format!("60 {ROOTFS} overlay")]);
        node.symlinks.push(("/var/run".into(), "/run".into()));
        node.holders = vec![holder(false, HoldKind::Cwd)];
        let spelled = ROOTFS.replacen("/run/", "/var/run/", 1);
        let calls: Vec<Call> =
            (0..10).map(|i| umount(i as f64 * 0.05, "containerd-shim", &spelled, -libc::EBUSY)).collect();
        let f = &run(&mut d, &mut node, &calls, 1.0)[0];
        assert_eq!(f.confidence, Confidence::Confirmed, "{}", f.summary);
        assert_eq!(f.fix, kill_if_same("TERM", 3131, Some(ProcessStart(313_100))).unwrap());
        assert_eq!(f.paths, vec![spelled.as_bytes().to_vec()]);
        assert!(f.evidence.iter().any(|e| e.source == "path" && e.fact.contains(ROOTFS)), "{:?}", f.evidence);
    }

    #[test]
    fn a_private_copy_in_another_namespace_neither_blocks_nor_is_blamed() {
        let mut d = MountHeld::default();
        let mut node = FakeNode::with_mounts(&[&format!("60 {ROOTFS} overlay")]);
        // unshare -m: a private copy, its holder sitting in it.
        node.holders = vec![holder(true, HoldKind::Cwd)];
        node.copies = vec![copy(&[])];
        assert_eq!(busy(verdict(&mut node, &bursts())), Busy::NoHolderFound);
        let f = &run(&mut d, &mut node, &bursts(), 1.0)[0];
        assert!(!f.evidence.iter().any(|e| e.fact.contains("3131")), "{:?}", f.evidence);
        assert_ne!(f.confidence, Confidence::Confirmed);
    }

    #[test]
    fn a_merged_dir_still_mounted_through_a_bind_view_is_unmounted_there() {
        // dockerd detached merged, but /backup/view (an rbind of the layer
        // dir) still holds a copy on the same directory: rmdir gets EBUSY,
        // while the umount2 of the path dockerd knows gets EINVAL.
        let merged = "/var/lib/docker/overlay2/abc/merged";
        let mut d = MountHeld::default();
        let mut node = FakeNode {
            mountinfo: "1 0 8:1 / / rw shared:1 - ext4 /dev/sda1 rw\n\
                        50 1 8:1 /var/lib/docker/overlay2/abc /backup/view rw shared:1 - ext4 /dev/sda1 rw\n\
                        51 50 0:60 / /backup/view/merged rw shared:7 - overlay overlay rw\n"
                .into(),
            ..Default::default()
        };
        node.holders = vec![MountHolder {
            pid: 4444,
            start: Some(ProcessStart(444_400)),
            comm: "backup".into(),
            how: HoldKind::Cwd,
            path: b"/backup/view/merged".to_vec(),
            mntns: 4026531840,
            other_namespace: false,
            owner: None,
        }];
        let calls: Vec<Call> = (0..5).map(|i| rmdir(i as f64 * 0.1, "dockerd", merged, -libc::EBUSY)).collect();
        match verdict(&mut node, &calls) {
            Some(Verdict::SecondView { views, holders }) => {
                assert_eq!(views.iter().map(|m| shown(&m.mount_point)).collect::<Vec<_>>(), ["/backup/view/merged"]);
                assert_eq!(holders, node.holders);
            }
            other => panic!("a second view: {other:?}"),
        }
        let f = &run(&mut d, &mut node, &calls, 1.0)[0];
        assert_eq!(f.kind, Kind::MountHeld);
        assert_eq!(f.confidence, Confidence::Confirmed, "{}", f.summary);
        assert_eq!(f.fix, "umount -l -- /backup/view/merged");
        assert!(f.summary.contains("/backup/view/merged") && f.summary.contains("pid 4444"), "{}", f.summary);
        assert!(!f.summary.contains("next retry should succeed"), "{}", f.summary);
    }

    #[test]
    fn a_held_root_filesystem_is_named_by_its_container_not_its_layer() {
        // containers/storage (CRI-O, podman): the layer id is not the
        // container's; identify found the container in the store's index.
        let layer = "92898b9f6667de0bfffb4361d8c9b9e9665d8b7a4f33843f284ca5ade8b4d0f5";
        let container = "ee6688e407098bbd32602928330decccc3ea2a84be0e6ab57bb4aee28e03ed48";
        let merged = format!("/var/lib/containers/storage/overlay/{layer}/merged");
        let mut node = FakeNode {
            mountinfo: format!(
                "1 0 8:1 / / rw shared:1 - ext4 /dev/sda1 rw\n\
                 50 1 8:1 /var/lib/containers/storage/overlay/{layer} /backup/view rw - ext4 /dev/sda1 rw\n\
                 51 50 0:60 / /backup/view/merged rw - overlay overlay rw\n"
            ),
            ..Default::default()
        };
        let calls: Vec<Call> = (0..5)
            .map(|i| {
                let mut c = rmdir(i as f64 * 0.1, "podman", &merged, -libc::EBUSY);
                c.identity.container_id = ContainerId::parse(container);
                c
            })
            .collect();
        let f = &run(&mut MountHeld::default(), &mut node, &calls, 1.0)[0];
        assert!(
            f.summary.starts_with(&format!("{merged} is the root filesystem of container {container}. ")),
            "{}",
            f.summary
        );
        assert_eq!(f.details["container"], container);
        assert_eq!(f.fix, "umount -l -- /backup/view/merged");
    }

    #[test]
    fn ebusy_on_a_dir_that_is_mounted_nowhere_is_only_possible() {
        let mut d = MountHeld::default();
        let mut node = FakeNode::with_mounts(&[]);
        let dir = "/var/lib/docker/overlay2/abc/merged";
        let calls = [rmdir(0.0, "dockerd", dir, -libc::EBUSY), rmdir(0.1, "dockerd", dir, -libc::EBUSY)];
        let f = &run(&mut d, &mut node, &calls, 1.0)[0];
        assert_eq!(f.confidence, Confidence::Possible);
    }
}
