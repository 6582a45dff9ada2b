//! Every cause podstuck names, declared once: its kind, its id (what users
//! grep and alert on), its number in docs/pathologies.md, what it was in
//! the past tense (a resolved finding's words), and what tells it: a
//! detector of its own (made here from the run's options), the detector of
//! another cause (immutable-file tells permission-denied), or the
//! Kubernetes API (`explain`). The [`Kind`] enum, its words and the
//! diagnoser's detectors are all made from this table, so a new cause is
//! one line here, one detector file, its docs and its end-to-end test
//! (docs/development.md, "Adding a cause"). Every other list of kinds
//! (Events' reasons, the alerts' and docs' checks) iterates [`Kind::ALL`]
//! or reads this table.

use serde::Serialize;

use super::{
    block_volume_held, cgroup_busy, csi_plugin_gone, dir_not_empty, disk_full, hung_call, immutable_file, mount_held,
    no_teardown_seen, not_mounted, prestop_hook_running, removal_storm, sandbox_teardown_failing, sigterm_ignored,
    subpath_left, unkillable_task, volume_device_lost, volume_still_mounted,
};
use super::{Detector, DiagnoseOptions};

/// What tells a cause's findings.
#[derive(Clone, Copy, Debug)]
pub enum ToldBy {
    /// A detector of its own, made from the run's options.
    Own(fn(&DiagnoseOptions) -> Box<dyn Detector>),
    /// The detector of another cause, which tells both.
    DetectorOf(Kind),
    /// The Kubernetes API (`explain`, and `watch --pod NS/NAME`).
    Api,
}

/// Makes, of the table below, `$then!`'s one thing for every cause.
macro_rules! causes {
    ($(
        $(#[$doc:meta])*
        $kind:ident = $id:literal, $pathology:literal, $past:literal, $told:expr;
    )*) => {
        /// The stable name of a pathology, as in docs/pathologies.md: what
        /// users grep and alert on.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        pub enum Kind {
            $(
                $(#[$doc])*
                #[serde(rename = $id)]
                $kind,
            )*
        }

        impl Kind {
            /// Every cause, in the table's order (the order the diagnoser
            /// asks their detectors in).
            pub const ALL: &'static [Kind] = &[$(Kind::$kind),*];

            /// Its id: what users grep and alert on, and its JSON name.
            pub fn id(self) -> &'static str {
                match self {
                    $(Kind::$kind => $id,)*
                }
            }

            /// Its number in docs/pathologies.md ("P1").
            pub fn pathology(self) -> &'static str {
                match self {
                    $(Kind::$kind => $pathology,)*
                }
            }

            /// What the pathology was, in the past tense, for a finding that is over.
            pub fn past_words(self) -> &'static str {
                match self {
                    $(Kind::$kind => $past,)*
                }
            }

            /// What tells its findings.
            pub fn told_by(self) -> ToldBy {
                use ToldBy::*;
                match self {
                    $(Kind::$kind => $told,)*
                }
            }
        }
    };
}

/// A detector of `$t`, made as it makes itself.
macro_rules! made {
    ($make:expr) => {
        ToldBy::Own(|o: &DiagnoseOptions| -> Box<dyn Detector> {
            #[allow(clippy::redundant_closure_call, reason = "the table's constructor, given the options")]
            Box::new(($make)(o))
        })
    };
}

causes! {
    /// P1: kubelet cannot remove a pod's volume directory: still mounted.
    VolumeStillMounted = "volume-still-mounted", "P1",
        "a volume was still mounted where kubelet removes its directory",
        made!(|_| volume_still_mounted::VolumeStillMounted::default());
    /// P2: one process removes a tree entry by entry for seconds.
    RemovalStorm = "removal-storm", "P2", "a storm of removals ran",
        made!(|o: &DiagnoseOptions| removal_storm::RemovalStorm::new(o.node_name.clone()));
    /// P3: an immutable or append-only file refuses its removal.
    ImmutableFile = "immutable-file", "P3", "an immutable file refused its removal",
        made!(|_| immutable_file::ImmutableFile::default());
    /// P3's near miss: EPERM for another reason (a sticky directory, a
    /// security module), explained as such.
    PermissionDenied = "permission-denied", "P3", "a removal was refused with EPERM",
        DetectorOf(Kind::ImmutableFile);
    /// P4: a mount held busy, its unmount refused.
    MountHeld = "mount-held", "P4", "a mount was held busy and its unmount refused",
        made!(|_| mount_held::MountHeld::default());
    /// P16: a raw block volume's mapping is busy: its loop device (or the
    /// device file) is still in use.
    BlockVolumeHeld = "block-volume-held", "P16",
        "a raw block volume's device was held and its unmap refused",
        made!(|_| block_volume_held::BlockVolumeHeld::default());
    /// P18: a volume's unmount refused while the multipath map under it,
    /// its paths all lost, queues every I/O for ever.
    VolumeDeviceLost = "volume-device-lost", "P18",
        "a volume's device had lost its paths and queued its I/O",
        made!(|_| volume_device_lost::VolumeDeviceLost::default());
    /// P5: a cgroup that cannot be removed while tasks are in it.
    CgroupBusy = "cgroup-busy", "P5", "a cgroup could not be removed while processes were in it",
        made!(|_| cgroup_busy::CgroupBusy::default());
    /// P6: a call in flight that does not return.
    HungCall = "hung-call", "P6", "a call hung",
        made!(|o: &DiagnoseOptions| hung_call::HungCall::new(o.hung_after));
    /// P7: an unmount of what is not mounted, again and again.
    NotMounted = "not-mounted", "P7", "an unmount was asked of something not mounted",
        made!(|_| not_mounted::NotMounted::default());
    /// P8: a pod's directory that holds files.
    DirNotEmpty = "dir-not-empty", "P8", "a directory could not be removed while it held files",
        made!(|_| dir_not_empty::DirNotEmpty::default());
    /// P9, ENOSPC or EDQUOT.
    DiskFull = "disk-full", "P9", "a filesystem was full",
        made!(|_| disk_full::DiskFull::default());
    /// P9, EROFS.
    ReadOnlyFs = "read-only-fs", "P9", "a filesystem was read-only",
        DetectorOf(Kind::DiskFull);
    /// P10: a subPath bind mount left behind.
    SubpathLeft = "subpath-left", "P10", "a subPath bind mount was left behind",
        made!(|_| subpath_left::SubpathLeft::default());
    /// P11, read from the Kubernetes API: a finalizer no controller removes.
    FinalizerPending = "finalizer-pending", "P11", "a finalizer held the pod", Api;
    /// P11: the pod's node is NotReady or unreachable, so its kubelet never
    /// reports the pod gone.
    NodeNotReady = "node-not-ready", "P11", "the pod's node was not ready", Api;
    /// P11: a VolumeAttachment of the pod's volumes that does not detach.
    VolumeDetachStuck = "volume-detach-stuck", "P11", "a volume did not detach", Api;
    /// P11: kubelet's Warning events about the pod, quoted.
    KubeletWarning = "kubelet-warning", "P11", "kubelet warned about the pod", Api;
    /// P11: the pod's grace period ended long ago (the symptom, and since when).
    GracePeriodPast = "grace-period-past", "P11", "the pod's grace period was long past", Api;
    /// P12: the CNI plugin's DEL fails, so the sandbox's network (and the
    /// sandbox) is never torn down.
    SandboxTeardownFailing = "sandbox-teardown-failing", "P12",
        "the pod's sandbox network could not be torn down",
        made!(|o: &DiagnoseOptions| sandbox_teardown_failing::SandboxTeardownFailing::new(o.node_name.clone()));
    /// P13: a container's main process got SIGTERM and did not exit.
    SigtermIgnored = "sigterm-ignored", "P13", "a container's process did not exit on SIGTERM",
        made!(|_| sigterm_ignored::SigtermIgnored::default());
    /// P19: a container's preStop hook runs, and kubelet sends it SIGTERM
    /// only once the hook ends.
    PrestopHookRunning = "prestop-hook-running", "P19",
        "a container's preStop hook ran before its SIGTERM",
        made!(|_| prestop_hook_running::PrestopHookRunning::default());
    /// P19: a sidecar not yet signalled, as kubelet stops sidecars only
    /// after the main containers.
    SidecarWaiting = "sidecar-waiting", "P19", "a sidecar waited for the main containers to end",
        DetectorOf(Kind::PrestopHookRunning);
    /// P14: SIGKILL sent, and the task is still there.
    UnkillableTask = "unkillable-task", "P14", "a task outlived its SIGKILL",
        made!(|_| unkillable_task::UnkillableTask::default());
    /// P17: kubelet cannot reach a CSI driver's node plugin, so it never
    /// unpublishes the pod's volume.
    CsiPluginGone = "csi-plugin-gone", "P17", "kubelet could not reach a CSI driver's node plugin",
        made!(csi_plugin_gone::CsiPluginGone::new);
    /// P15: nothing on the node has worked on the pod's teardown for a while.
    NoTeardownSeen = "no-teardown-seen", "P15", "nothing on the node was working on the pod's teardown",
        made!(|o: &DiagnoseOptions| no_teardown_seen::NoTeardownSeen::new(o.pods.clone()));
}

/// The detectors of every cause that has one of its own, in the table's
/// order, made for a run with `options`.
pub fn detectors(options: &DiagnoseOptions) -> Vec<Box<dyn Detector>> {
    Kind::ALL
        .iter()
        .filter_map(|kind| match kind.told_by() {
            ToldBy::Own(make) => Some(make(options)),
            ToldBy::DetectorOf(_) | ToldBy::Api => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kinds_json_name_is_its_id_and_no_two_share_one() {
        let mut seen = std::collections::BTreeSet::new();
        for kind in Kind::ALL {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.id(), "{kind:?}");
            assert!(seen.insert(kind.id()), "{} twice", kind.id());
            assert!(kind.pathology().starts_with('P'), "{kind:?}");
            assert!(!kind.past_words().is_empty(), "{kind:?}");
        }
    }

    #[test]
    fn a_cause_told_by_another_s_detector_names_one_that_has_its_own() {
        for kind in Kind::ALL {
            if let ToldBy::DetectorOf(other) = kind.told_by() {
                assert!(matches!(other.told_by(), ToldBy::Own(_)), "{kind:?} is told by {other:?}, which has none");
            }
        }
        assert_eq!(detectors(&DiagnoseOptions::default()).len(), 18);
    }
}
