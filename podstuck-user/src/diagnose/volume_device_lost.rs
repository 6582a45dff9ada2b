//! P18 `volume-device-lost`: a volume cannot be unmounted because the
//! block device under its filesystem is lost: a multipath map with no
//! path left that queues I/O (`queue_if_no_path`, multipathd's default
//! for most arrays): the storage array or its SAN paths gone, an iSCSI
//! session down. Every read and write of the volume then sleeps in D,
//! waiting for a path that does not come back, and whoever sleeps there
//! keeps the mount busy; SIGKILL does not end a task in D, and a lazy
//! unmount only hides the mount, the device and its queued I/O staying
//! (hpe-storage csi-driver #578, democratic-csi #536, longhorn #6533).
//!
//! Signature: an unmount of a pod's volume (or subPath) refused with
//! EBUSY, whoever tries (kubelet, a CSI node plugin). That refusal is
//! mount-held's to explain (the router gives it there, and mount-held
//! names the holders); this detector sees it as any call and looks under
//! the mount. Confirmed by the device mapper itself: the mount's device
//! is a map whose one target is multipath, whose table says
//! `queue_if_no_path` and whose status says no path is active. The fix
//! fails the queued I/O (`dmsetup message NAME 0 fail_if_no_path`), its
//! cost said plainly (the writes queued are lost); restoring a path is
//! the advice. mount-held's finding on the same path is told under this
//! one (`consequences`).

use super::holders::process_words;
use super::route::{Attempt, Claim, Class, Refusal, Target};
use super::shell::unmount;
use super::stuck_on::{lost_multipath, on_lost_multipath, LostMap};
use super::track::{Attempts, CallerView, FailureLog};
use super::{shown, Detector, Finding, Kind, Review, Severity};
use crate::event::CallEvent;
use crate::identify::Identity;
use crate::inspect::mounts::mount_at;
use crate::inspect::{Mount, MountHolder, NodeInspector, TaskState};

/// The failures it looks under (mount-held's to explain, the router's
/// classes): an unmount of a pod's volume or subPath refused busy.
const LOOKS_UNDER: Claim =
    Claim { attempts: &[Attempt::Unmount], refusals: &[Refusal::Busy], targets: &[Target::Volume, Target::Subpath] };

pub struct VolumeDeviceLost {
    failures: FailureLog,
}

impl Default for VolumeDeviceLost {
    /// Looked at from the first EBUSY: the device mapper's state proves it.
    fn default() -> Self {
        VolumeDeviceLost { failures: FailureLog::looked_at_from_the_first_failure() }
    }
}

/// What volume-device-lost decides of a volume whose unmount is refused,
/// before a word of it is said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The mount's device is (or is made on) a multipath map with no path
    /// left that queues I/O for ever.
    Lost(LostMap),
}

/// What was read beside the verdict: the evidence.
pub struct Seen {
    mount: Mount,
    /// Its holders, each with its state as /proc says it (in D: waiting on
    /// the device).
    holders: Vec<(MountHolder, Option<TaskState>)>,
}

impl VolumeDeviceLost {
    fn decide(a: &mut Attempts, review: &mut Review<'_>) -> Option<Finding> {
        let node = &mut *review.node;
        let view = a.caller_view(node);
        let (verdict, seen) = Self::judge(node, &view)?;
        Some(Self::tell(a, &view, &verdict, &seen))
    }

    /// Reads the device under the volume's mount and decides; None when it
    /// is no lost multipath map (mount-held says what holds the mount).
    fn judge(node: &mut dyn NodeInspector, view: &CallerView) -> Option<(Verdict, Seen)> {
        let mounts = view.mounts().ok()?;
        let mount = mount_at(mounts, &view.path)?.clone();
        let lost = lost_multipath(node, &mount)?;
        let holders = node
            .mount_holders(&mount, view.mntns)
            .into_iter()
            .map(|h| {
                let state = node.task(h.pid).ok();
                (h, state)
            })
            .collect();
        Some((Verdict::Lost(lost), Seen { mount, holders }))
    }

    /// The verdict in words: the finding, its evidence, its fix.
    fn tell(a: &Attempts, view: &CallerView, verdict: &Verdict, seen: &Seen) -> Finding {
        let Verdict::Lost(lost) = verdict;
        let path = view.path.as_slice();
        let mut f = Finding::new(Kind::VolumeDeviceLost, &shown(&a.path), Severity::Critical, a.first);
        a.stamp(&mut f);
        f.evidence("trace", a.trace_words());
        a.resolution_evidence(view, &mut f);
        let m = &seen.mount;
        f.evidence(
            "mountinfo",
            format!("{} is a {} mount of {} on device {}:{}", shown(path), m.fstype, m.source, m.dev.0, m.dev.1),
        );
        let works_again = format!("the next unmount of {} succeeds (or run {} yourself)", shown(path), unmount(path));
        let lost = on_lost_multipath(&mut f, lost, &works_again);
        let waiting: Vec<&(MountHolder, Option<TaskState>)> =
            seen.holders.iter().filter(|(_, t)| t.as_ref().is_some_and(|t| t.state == 'D')).collect();
        for (h, task) in &seen.holders {
            let state = task.as_ref().map(|t| format!(", {}", t.waiting_words()));
            f.evidence(
                "/proc",
                format!(
                    "{} has {} on it{}",
                    process_words(h.pid, &h.comm, h.owner.as_ref()),
                    shown(&h.path),
                    state.unwrap_or_default()
                ),
            );
        }
        let who = match waiting.len() {
            0 => "whoever reads or writes the volume waits in D".to_string(),
            n => {
                let named: Vec<String> =
                    waiting.iter().take(3).map(|(h, _)| process_words(h.pid, &h.comm, h.owner.as_ref())).collect();
                format!("{n} process(es) wait in D on it ({}), and keep the mount busy", named.join(", "))
            }
        };
        f.summary = format!(
            "{} cannot unmount {}: its device {lost}, so {who}. {}{}.",
            a.actor.description,
            shown(path),
            a.failed_words(),
            a.rhythm_words()
        );
        f.detail("waiting", waiting.len());
        f
    }
}

impl Detector for VolumeDeviceLost {
    fn observe(&mut self, event: &CallEvent, identity: &Identity) {
        if Class::of(event, identity).is_some_and(|class| LOOKS_UNDER.covers(&class)) {
            self.failures.record(event, identity);
        } else {
            self.failures.ended_by(event, identity);
        }
    }

    fn wants_review(&self) -> bool {
        self.failures.wants_a_look()
    }

    fn review(&mut self, review: &mut Review<'_>) -> Vec<Finding> {
        self.failures.review(review, Self::decide)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::*;
    use super::super::Confidence;
    use super::*;
    use crate::event::ProcessStart;
    use crate::inspect::device_mapper::map;
    use crate::inspect::{HoldKind, MapperDevice, MapperTarget};

    /// A multipath map over one path (a loop device) that failed, queueing.
    fn lost() -> MapperDevice {
        map("1 queue_if_no_path 0 1 1 round-robin 0 1 1 7:0 1", "2 1 0 0 1 1 E 0 1 0 7:0 F 1")
    }

    /// The pod's CSI volume on `/dev/mapper/mpatha` (254:3), a `cat` of a
    /// file in it waiting in D, and `mapper` the node's one map.
    fn node(mapper: Option<MapperDevice>) -> FakeNode {
        let m = csi_mount();
        let mut node = FakeNode::with_mounts(&[]);
        node.mountinfo.push_str(&format!("50 1 254:3 / {m} rw,relatime shared:50 - ext4 /dev/mapper/mpatha rw\n"));
        node.mappers = mapper.into_iter().collect();
        node.holders = vec![MountHolder {
            pid: 4242,
            start: Some(ProcessStart(4_242_000)),
            comm: "cat".into(),
            how: HoldKind::OpenFile,
            path: format!("{m}/data").into_bytes(),
            mntns: 1,
            other_namespace: false,
            owner: None,
        }];
        let mut cat = task(4242, "cat", 'D');
        cat.wchan = Some("io_schedule".into());
        node.tasks.insert(4242, cat);
        node
    }

    fn refused() -> Vec<Call> {
        vec![umount(0.0, "kubelet", &csi_mount(), -libc::EBUSY)]
    }

    #[test]
    fn a_volume_on_a_map_that_lost_its_paths_and_queues_is_told_with_the_fix_that_fails_its_io() {
        let found = run(&mut VolumeDeviceLost::default(), &mut node(Some(lost())), &refused(), 0.1);
        let [f] = &found[..] else { panic!("{found:?}") };
        assert_eq!(
            (f.kind, f.severity, f.confidence),
            (Kind::VolumeDeviceLost, Severity::Critical, Confidence::Confirmed)
        );
        assert_eq!(f.fix, "dmsetup message -- mpatha 0 fail_if_no_path");
        assert!(f.summary.contains("its device dm-3 (mpatha) is a multipath map that lost its paths (every path failed: 7:0 failed (1 failure(s)))"), "{}", f.summary);
        assert!(f.summary.contains("1 process(es) wait in D on it (pid 4242 (cat))"), "{}", f.summary);
        assert!(
            f.evidence.iter().any(|e| e.fact == "multipath 1 queue_if_no_path 0 1 1 round-robin 0 1 1 7:0 1"),
            "{:?}",
            f.evidence
        );
        assert!(
            f.evidence.iter().any(|e| e.fact.contains("pid 4242 (cat)") && e.fact.contains("in io_schedule")),
            "{:?}",
            f.evidence
        );
        assert!(f.advice[0].contains("writes that were not yet on the array are lost"), "{:?}", f.advice);
        assert!(f.advice.iter().any(|a| a.contains("multipath -ll mpatha")), "{:?}", f.advice);
        assert_eq!((f.details["map"].as_str(), f.details["waiting"].as_u64()), (Some("mpatha"), Some(1)));
    }

    /// The filesystem on a partition mapping (kpartx's mpatha1) made on the
    /// lost map: the map under it is found through its slaves, and the
    /// mapping is what keeps the map open once the volume is unmounted.
    #[test]
    fn a_volume_on_a_partition_of_the_lost_map_is_told_as_the_maps() {
        let mut lost = lost();
        let partition = crate::inspect::BlockHolder {
            device: "dm-4".into(),
            mapper_name: Some("mpatha1".into()),
            md: false,
            openers: Vec::new(),
        };
        lost.holders = vec![partition];
        let mpatha1 = MapperDevice {
            device: "dm-4".into(),
            dev: (254, 4),
            name: "mpatha1".into(),
            uuid: "part1-mpath-3600a098038303052".into(),
            slaves: vec![("dm-3".into(), (254, 3))],
            holders: Vec::new(),
            targets: vec![MapperTarget { kind: "linear".into(), table: "254:3 2048".into(), status: String::new() }],
            table_unread: None,
        };
        let mut n = node(None);
        n.mountinfo = n.mountinfo.replace("254:3", "254:4").replace("/dev/mapper/mpatha ", "/dev/mapper/mpatha1 ");
        n.mappers = vec![mpatha1, lost];
        let found = run(&mut VolumeDeviceLost::default(), &mut n, &refused(), 0.1);
        let [f] = &found[..] else { panic!("{found:?}") };
        assert!(
            f.summary
                .contains("its device dm-4 (mpatha1) is made on dm-3 (mpatha), a multipath map that lost its paths"),
            "{}",
            f.summary
        );
        assert_eq!(f.fix, "dmsetup message -- mpatha 0 fail_if_no_path");
        assert!(
            f.advice.iter().any(|a| a.ends_with("dmsetup remove -- mpatha1; then dmsetup remove -- mpatha")),
            "{:?}",
            f.advice
        );
        // A mapping on a map that still has a path: not this.
        n.mappers[1].targets[0].status = "2 0 0 0 1 1 A 0 1 0 7:0 A 0".into();
        assert!(run(&mut VolumeDeviceLost::default(), &mut n, &refused(), 5.0).is_empty());
    }

    /// kpartx's partition mapping left on the map: named, and its removal
    /// (then the map's) said in the order the kernel allows.
    #[test]
    fn a_mapping_stacked_on_the_lost_map_is_named_with_its_removal_first() {
        let mut map = lost();
        map.holders = vec![crate::inspect::BlockHolder {
            device: "dm-4".into(),
            mapper_name: Some("mpatha1".into()),
            md: false,
            openers: Vec::new(),
        }];
        let found = run(&mut VolumeDeviceLost::default(), &mut node(Some(map)), &refused(), 0.1);
        let f = &found[0];
        assert!(
            f.evidence.iter().any(|e| e.fact == "dm-4 (mpatha1) is stacked on dm-3 (mpatha) and keeps it open"),
            "{:?}",
            f.evidence
        );
        assert!(
            f.advice
                .iter()
                .any(|a| a.ends_with("once nothing uses it, dmsetup remove -- mpatha1; then dmsetup remove -- mpatha")),
            "{:?}",
            f.advice
        );
        assert_eq!(f.details["stacked"], serde_json::json!(["mpatha1"]));
    }

    #[test]
    fn a_map_with_a_path_left_one_that_fails_its_io_or_no_map_at_all_is_not_this() {
        let one_left =
            map("1 queue_if_no_path 0 1 1 round-robin 0 2 1 7:0 1 7:1 1", "2 0 0 0 1 1 A 0 2 0 7:0 F 1 7:1 A 0");
        let failing = map("0 0 1 1 round-robin 0 1 1 7:0 1", "2 0 0 0 1 1 E 0 1 0 7:0 F 1");
        for mapper in [Some(one_left), Some(failing), None] {
            let found = run(&mut VolumeDeviceLost::default(), &mut node(mapper.clone()), &refused(), 5.0);
            assert!(found.is_empty(), "{mapper:?}: {found:?}");
        }
        // A runtime's directory, not a pod's volume: mount-held's alone.
        let rootfs = "/run/containerd/io.containerd.runtime.v2.task/k8s.io/aaaa/rootfs";
        let mut n = node(Some(lost()));
        n.mountinfo = n.mountinfo.replace(&csi_mount(), rootfs);
        let calls = [umount(0.0, "containerd", rootfs, -libc::EBUSY)];
        assert!(run(&mut VolumeDeviceLost::default(), &mut n, &calls, 5.0).is_empty());
    }

    #[test]
    fn the_unmount_that_succeeds_once_the_io_failed_resolves_it() {
        let mut d = VolumeDeviceLost::default();
        let mut n = node(Some(lost()));
        assert_eq!(run(&mut d, &mut n, &refused(), 0.1).len(), 1);
        let over = run(&mut d, &mut n, &[umount(3.0, "kubelet", &csi_mount(), 0)], 3.1);
        assert!(matches!(&over[..], [f] if f.status == super::super::Status::Resolved), "{over:?}");
    }
}
