//! The router: which detector a failed call belongs to. Each failed call
//! is classified once, by what it tried (an unmount, a lazy detach, a
//! directory's or a file's removal), how the kernel refused it (its errno
//! in words) and what its path is ([`Target`], from identify, proven the
//! node's or `Other`), and reaches the one detector that claims that
//! class. Detectors declare their claims ([`Detector::claims`]) instead
//! of skipping what they guess the others take, and the table is checked
//! when the diagnoser is made: no class has two claimants.
//!
//! Successful calls are no one's: every detector sees them (a success ends
//! a failure on its path, a storm is counted in successes). So does every
//! failure, as activity, for the detectors that count calls rather than
//! explain refusals (a removal storm, a pod's teardown going on).

use std::collections::HashMap;

use podstuck_common::Syscall;

use super::Detector;
use crate::event::CallEvent;
pub use crate::identify::target::Target;
use crate::identify::Identity;

/// What a failed call tried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Attempt {
    /// umount2 without MNT_DETACH.
    Unmount,
    /// umount2 with MNT_DETACH: a lazy detach, which a held mount does not refuse.
    Detach,
    /// rmdir, or unlinkat with AT_REMOVEDIR.
    RemoveDir,
    /// unlink, or unlinkat without AT_REMOVEDIR.
    RemoveFile,
}

impl Attempt {
    pub const ALL: [Attempt; 4] = [Attempt::Unmount, Attempt::Detach, Attempt::RemoveDir, Attempt::RemoveFile];

    pub fn of(event: &CallEvent) -> Attempt {
        match event.syscall {
            Syscall::Umount2 if event.flags & libc::MNT_DETACH as u64 != 0 => Attempt::Detach,
            Syscall::Umount2 => Attempt::Unmount,
            Syscall::Rmdir => Attempt::RemoveDir,
            Syscall::Unlinkat if event.flags & libc::AT_REMOVEDIR as u64 != 0 => Attempt::RemoveDir,
            Syscall::Unlinkat | Syscall::Unlink => Attempt::RemoveFile,
        }
    }
}

/// How the kernel refused it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Refusal {
    /// EBUSY.
    Busy,
    /// EPERM.
    NotPermitted,
    /// ENOTEMPTY.
    NotEmpty,
    /// EINVAL of an unmount: not a mountpoint.
    NotMounted,
    /// ENOENT.
    Missing,
    /// ENOSPC or EDQUOT.
    NoSpace,
    /// EROFS.
    ReadOnly,
    /// Anything else: no cause of podstuck's is told by it.
    Other,
}

impl Refusal {
    pub const ALL: [Refusal; 8] = [
        Refusal::Busy,
        Refusal::NotPermitted,
        Refusal::NotEmpty,
        Refusal::NotMounted,
        Refusal::Missing,
        Refusal::NoSpace,
        Refusal::ReadOnly,
        Refusal::Other,
    ];

    pub fn of(attempt: Attempt, errno: i32) -> Refusal {
        match errno {
            libc::EBUSY => Refusal::Busy,
            libc::EPERM => Refusal::NotPermitted,
            libc::ENOTEMPTY => Refusal::NotEmpty,
            libc::EINVAL if matches!(attempt, Attempt::Unmount | Attempt::Detach) => Refusal::NotMounted,
            libc::ENOENT => Refusal::Missing,
            libc::ENOSPC | libc::EDQUOT => Refusal::NoSpace,
            libc::EROFS => Refusal::ReadOnly,
            _ => Refusal::Other,
        }
    }
}

/// A failed call's class: what the router routes by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Class {
    pub attempt: Attempt,
    pub refusal: Refusal,
    pub target: Target,
}

impl Class {
    /// A failed call's class; None for a success.
    pub fn of(event: &CallEvent, identity: &Identity) -> Option<Class> {
        let errno = event.errno()?;
        let attempt = Attempt::of(event);
        Some(Class { attempt, refusal: Refusal::of(attempt, errno), target: identity.target })
    }

    /// Every class there is.
    pub fn all() -> impl Iterator<Item = Class> {
        Attempt::ALL.into_iter().flat_map(|attempt| {
            Refusal::ALL
                .into_iter()
                .flat_map(move |refusal| Target::ALL.into_iter().map(move |target| Class { attempt, refusal, target }))
        })
    }
}

/// A set of classes a detector claims: every combination of the listed
/// attempts, refusals and targets.
#[derive(Clone, Copy, Debug)]
pub struct Claim {
    pub attempts: &'static [Attempt],
    pub refusals: &'static [Refusal],
    pub targets: &'static [Target],
}

impl Claim {
    pub fn covers(&self, class: &Class) -> bool {
        self.attempts.contains(&class.attempt)
            && self.refusals.contains(&class.refusal)
            && self.targets.contains(&class.target)
    }
}

/// Every target but a pod's volumes, subPaths, block volumes and cgroups,
/// which have detectors of their own.
pub const NOT_A_POD_VOLUME_OR_CGROUP: &[Target] = &[Target::PodDir, Target::RuntimeDir, Target::Cni, Target::Other];

/// Two detectors claiming one class: a mistake in their declarations.
#[derive(Debug, PartialEq, Eq)]
pub struct Conflict {
    pub class: Class,
    /// The detectors, by their place in the diagnoser's list.
    pub claimants: Vec<usize>,
}

/// Each class's one claimant, as an index into the diagnoser's detectors.
#[derive(Debug, Default)]
pub struct Router {
    claimant: HashMap<Class, usize>,
}

impl Router {
    /// The table of `detectors`' claims; every class claimed twice is a conflict.
    pub fn new(detectors: &[Box<dyn Detector>]) -> Result<Router, Vec<Conflict>> {
        let mut claimant = HashMap::new();
        let mut conflicts = Vec::new();
        for class in Class::all() {
            let claiming: Vec<usize> = detectors
                .iter()
                .enumerate()
                .filter(|(_, d)| d.claims().iter().any(|claim| claim.covers(&class)))
                .map(|(at, _)| at)
                .collect();
            match claiming.as_slice() {
                [] => {}
                [one] => {
                    claimant.insert(class, *one);
                }
                _ => conflicts.push(Conflict { class, claimants: claiming }),
            }
        }
        if conflicts.is_empty() {
            Ok(Router { claimant })
        } else {
            Err(conflicts)
        }
    }

    /// The detector (its index) a failed call of `class` goes to, if any claims it.
    pub fn claimant(&self, class: &Class) -> Option<usize> {
        self.claimant.get(class).copied()
    }

    /// Detectors, by index, beside the classes each owns: for the table's tests.
    pub fn classes_of(&self, detector: usize) -> Vec<Class> {
        let mut classes: Vec<Class> = self.claimant.iter().filter(|(_, d)| **d == detector).map(|(c, _)| *c).collect();
        classes.sort();
        classes
    }
}

#[cfg(test)]
mod tests {
    use super::super::causes::{self, ToldBy};
    use super::super::{DiagnoseOptions, Kind};
    use super::*;

    /// The causes whose detectors `causes::detectors` makes, in its order.
    fn kinds() -> Vec<Kind> {
        Kind::ALL.iter().copied().filter(|k| matches!(k.told_by(), ToldBy::Own(_))).collect()
    }

    fn router() -> (Vec<Box<dyn Detector>>, Router) {
        let detectors = causes::detectors(&DiagnoseOptions::default());
        let router = Router::new(&detectors).unwrap_or_else(|conflicts| {
            let named: Vec<String> = conflicts
                .iter()
                .map(|c| format!("{:?}: {:?}", c.class, c.claimants.iter().map(|at| kinds()[*at]).collect::<Vec<_>>()))
                .collect();
            panic!("classes with two claimants:\n{}", named.join("\n"))
        });
        (detectors, router)
    }

    /// Who a class goes to, by the kind of its detector.
    fn owner(class: Class) -> Option<Kind> {
        let (_, router) = router();
        router.claimant(&class).map(|at| kinds()[at])
    }

    fn class(attempt: Attempt, refusal: Refusal, target: Target) -> Class {
        Class { attempt, refusal, target }
    }

    #[test]
    fn no_two_detectors_claim_one_class() {
        let (detectors, router) = router();
        // Every detector that claims anything owns some class outright.
        for (at, d) in detectors.iter().enumerate() {
            if !d.claims().is_empty() {
                assert!(!router.classes_of(at).is_empty(), "{:?} claims nothing it owns", kinds()[at]);
            }
        }
    }

    #[test]
    fn a_second_claimant_is_a_conflict_named_by_both_kinds() {
        let mut detectors = causes::detectors(&DiagnoseOptions::default());
        detectors.extend(causes::detectors(&DiagnoseOptions::default()).into_iter().take(1));
        let twice = detectors.len() - 1;
        let conflicts = Router::new(&detectors).expect_err("a detector twice");
        assert!(conflicts.iter().all(|c| c.claimants == [0, twice]), "{conflicts:?}");
        assert_eq!(kinds()[0], Kind::VolumeStillMounted);
        assert!(conflicts.iter().any(|c| c.class == class(Attempt::RemoveDir, Refusal::Busy, Target::Volume)));
    }

    #[test]
    fn each_failure_reaches_the_cause_it_tells() {
        use Attempt::*;
        use Refusal::*;
        use Target::{BlockVolume, Cgroup, Cni, PodDir, RuntimeDir, Subpath, Volume};
        for (c, want) in [
            // A volume's directory still a mountpoint; its unmount refused: a holder.
            (class(RemoveDir, Busy, Volume), Some(Kind::VolumeStillMounted)),
            (class(Unmount, Busy, Volume), Some(Kind::MountHeld)),
            (class(Unmount, Busy, Target::Other), Some(Kind::MountHeld)),
            (class(RemoveDir, Busy, RuntimeDir), Some(Kind::MountHeld)),
            (class(RemoveDir, Busy, Cni), Some(Kind::MountHeld)),
            (class(Detach, Busy, Target::Other), None),
            // Raw block volumes: the mapping's device.
            (class(Unmount, Busy, BlockVolume), Some(Kind::BlockVolumeHeld)),
            (class(RemoveFile, Busy, BlockVolume), Some(Kind::BlockVolumeHeld)),
            // A cgroup's EBUSY is its tasks.
            (class(RemoveDir, Busy, Cgroup), Some(Kind::CgroupBusy)),
            // subPaths: what kubelet's CleanSubPaths trips on; a held one's unmount is a holder's.
            (class(RemoveDir, Busy, Subpath), Some(Kind::SubpathLeft)),
            (class(RemoveDir, NotEmpty, Subpath), Some(Kind::SubpathLeft)),
            (class(Unmount, Missing, Subpath), Some(Kind::SubpathLeft)),
            (class(Unmount, Busy, Subpath), Some(Kind::MountHeld)),
            (class(RemoveDir, NotEmpty, Volume), Some(Kind::DirNotEmpty)),
            (class(RemoveDir, NotEmpty, PodDir), Some(Kind::DirNotEmpty)),
            (class(RemoveFile, NotPermitted, Target::Other), Some(Kind::ImmutableFile)),
            (class(RemoveDir, NotPermitted, Volume), Some(Kind::ImmutableFile)),
            (class(Unmount, NotMounted, Volume), Some(Kind::NotMounted)),
            (class(Detach, NotMounted, Target::Other), Some(Kind::NotMounted)),
            (class(RemoveFile, NoSpace, RuntimeDir), Some(Kind::DiskFull)),
            (class(Unmount, ReadOnly, Target::Other), Some(Kind::DiskFull)),
            (class(RemoveDir, Missing, Volume), None),
            (class(RemoveDir, Other, Volume), None),
        ] {
            assert_eq!(owner(c), want, "{c:?}");
        }
    }
}
