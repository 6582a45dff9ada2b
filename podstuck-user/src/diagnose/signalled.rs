//! What sigterm-ignored and unkillable-task share: a pod's process that
//! was sent a signal, followed until its exit. A process is its pid and
//! its start time: a pid the kernel hands to another process since is not
//! the one followed. Past the time a process takes to die of the signal,
//! the node says whether it is still there: a process is there as long as
//! one of its threads is (a zombie leader whose other thread waits in the
//! kernel is a process still there), and it is gone only when /proc says
//! so; a read that fails otherwise (too many open files, permission
//! denied) is said as such, never taken for an exit. One that ends after
//! it was told is told once more, resolved, then forgotten. Bounded: past
//! [`FOLLOWED_MAX`] the oldest are forgotten.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::Finding;
use crate::event::ProcessStart;
use crate::identify::pod::PodUid;
use crate::identify::Actor;
use crate::identify::LifecycleIdentity;
use crate::inspect::{NodeInspector, ProcessState, Unreadable};
use crate::lifecycle::{LifecycleEvent, SignalSent};

/// Processes followed at most.
pub const FOLLOWED_MAX: usize = 1024;

/// A process sent the signal, not yet seen to exit.
pub struct Followed<T> {
    /// When the signal was first sent.
    pub at: SystemTime,
    /// When the process started, if known: with its pid, the process.
    pub start: Option<ProcessStart>,
    pub pod: PodUid,
    pub comm: String,
    pub sender: Actor,
    pub sender_pid: u32,
    /// Seen to exit, or found gone.
    pub ended: Option<SystemTime>,
    told: bool,
    /// What the detector keeps of its own.
    pub more: T,
}

/// How a followed process stands at a review.
pub enum Standing<'a> {
    /// Still there, as /proc shows it.
    There(&'a ProcessState),
    /// Gone since it was told.
    Ended,
    /// /proc could not be read, and why: not taken for an exit.
    Unreadable(&'a Unreadable),
}

pub struct Signalled<T> {
    followed: BTreeMap<u32, Followed<T>>,
}

impl<T> Default for Signalled<T> {
    fn default() -> Signalled<T> {
        Signalled { followed: BTreeMap::new() }
    }
}

/// Makes room for `key` in `map`, which keeps at most `max` entries: when
/// it is full and `key` is new, the entry `age` says is oldest is forgotten.
pub fn make_room<K: Ord + Clone, V, A: Ord>(map: &mut BTreeMap<K, V>, key: &K, max: usize, age: impl Fn(&V) -> A) {
    if map.len() >= max && !map.contains_key(key) {
        let oldest = map.iter().min_by_key(|(_, v)| age(v)).map(|(k, _)| k.clone());
        oldest.map(|k| map.remove(&k));
    }
}

/// Processes a signal reached, by pid: each one's start and when. At most
/// [`FOLLOWED_MAX`], the oldest forgotten; each forgotten at its exit.
#[derive(Default)]
pub struct Reached {
    by_pid: BTreeMap<u32, (Option<ProcessStart>, SystemTime)>,
}

impl Reached {
    /// The signal reached process `pid` (started at `start`) at `at`.
    pub fn add(&mut self, pid: u32, start: Option<ProcessStart>, at: SystemTime) {
        make_room(&mut self.by_pid, &pid, FOLLOWED_MAX, |(_, at)| *at);
        self.by_pid.insert(pid, (start, at));
    }

    /// When the signal reached process `pid`, if `start` is its start.
    pub fn when(&self, pid: u32, start: Option<ProcessStart>) -> Option<SystemTime> {
        let (reached, at) = self.by_pid.get(&pid)?;
        ProcessStart::may_be_same(*reached, start).then_some(*at)
    }

    /// Process `pid` (started at `start`) exited.
    pub fn exited(&mut self, pid: u32, start: Option<ProcessStart>) {
        if self.when(pid, start).is_some() {
            self.by_pid.remove(&pid);
        }
    }

    /// How many it keeps.
    #[cfg(test)]
    pub fn count(&self) -> usize {
        self.by_pid.len()
    }
}

impl<T> Signalled<T> {
    /// The process `pid` as followed: for a detector's tests of its verdicts.
    #[cfg(test)]
    pub fn followed(&self, pid: u32) -> Option<&Followed<T>> {
        self.followed.get(&pid)
    }

    /// The signal `sent` to a pod's process (none of a process in no
    /// pod): the process it follows, and whether it was followed already.
    pub fn sent(
        &mut self,
        event: &LifecycleEvent,
        identity: &LifecycleIdentity,
        sent: &SignalSent,
        more: impl FnOnce() -> T,
    ) -> Option<(&mut Followed<T>, bool)> {
        let pod = identity.pod_uid.clone()?;
        let pid = sent.target_pid;
        let start = identity.target_start;
        let again =
            self.followed.get(&pid).is_some_and(|f| f.ended.is_none() && ProcessStart::may_be_same(f.start, start));
        if !again {
            make_room(&mut self.followed, &pid, FOLLOWED_MAX, |f| f.at);
            let followed = Followed {
                at: event.time,
                start,
                pod,
                comm: sent.target_comm.clone(),
                sender: identity.actor.clone(),
                sender_pid: event.pid,
                ended: None,
                told: false,
                more: more(),
            };
            self.followed.insert(pid, followed);
        }
        self.followed.get_mut(&pid).map(|f| (f, again))
    }

    /// The process `pid` followed, if `start` is its start.
    pub fn get_mut(&mut self, pid: u32, start: Option<ProcessStart>) -> Option<&mut Followed<T>> {
        self.followed.get_mut(&pid).filter(|f| ProcessStart::may_be_same(f.start, start))
    }

    /// Process `pid` (started at `start`) exited.
    pub fn exited(&mut self, pid: u32, start: Option<ProcessStart>, at: SystemTime) {
        if let Some(f) = self.get_mut(pid, start) {
            f.ended.get_or_insert(at);
        }
    }

    /// The findings of this review: of every process still there `wait`
    /// after its signal (or `wait` says it is not yet time: None), with
    /// how it stands, and of every one told before that has ended since;
    /// made by `finding`, which may also decide to say nothing (None).
    pub fn review(
        &mut self,
        now: SystemTime,
        wait: impl Fn(&Followed<T>) -> Option<Duration>,
        node: &mut dyn NodeInspector,
        mut finding: impl FnMut(u32, &Followed<T>, Standing<'_>, &mut dyn NodeInspector) -> Option<Finding>,
    ) -> Vec<Finding> {
        let mut out = Vec::new();
        for (pid, f) in self.followed.iter_mut() {
            if f.ended.is_none() {
                let Some(wait) = wait(f) else { continue };
                if now.duration_since(f.at).unwrap_or_default() < wait {
                    continue;
                }
            }
            let start = f.start.map_or(0, ProcessStart::ticks);
            let answer = match f.ended {
                Some(_) => None,
                None => Some(node.process(*pid, start)),
            };
            let standing = match &answer {
                None => Standing::Ended,
                Some(Ok(Some(process))) if !process.ended() => Standing::There(process),
                Some(Ok(_)) => {
                    f.ended = Some(now);
                    Standing::Ended
                }
                Some(Err(why)) => Standing::Unreadable(why),
            };
            if matches!(standing, Standing::Ended) && !f.told {
                continue;
            }
            if let Some(told) = finding(*pid, f, standing, node) {
                f.told = true;
                out.push(told);
            }
        }
        self.followed.retain(|_, f| f.ended.is_none());
        out
    }
}

/// Fixtures for the detectors that follow signals: a pod's process that
/// sends one, the signal, the exit of its target.
#[cfg(test)]
pub mod tests {
    use super::super::fake::{pod, t};
    use crate::identify::actor::Role;
    use crate::identify::tests::actor;
    use crate::identify::LifecycleIdentity;
    use crate::lifecycle::{Lifecycle, LifecycleEvent, SignalResult, SignalSent};

    /// A process outside the pod named `comm`, the `role` it plays, child
    /// of `parent`, sending to the pod's processes.
    pub fn sender(comm: &str, parent: &str, role: Role) -> LifecycleIdentity {
        LifecycleIdentity::of(Some(pod()), actor(comm, parent, role))
    }

    /// Process `from` (pid, name) sends `sig` to the group of `to` (pid,
    /// name) at `at` seconds, and the kernel's verdict is `result`.
    pub fn signal(at: f64, from: (u32, &str), sig: i32, result: SignalResult, to: (u32, &str)) -> LifecycleEvent {
        let sent = SignalSent {
            sig,
            result,
            target_pid: to.0,
            target_comm: to.1.into(),
            group: true,
            group_exiting: Some(false),
        };
        LifecycleEvent {
            time: t(at),
            pid: from.0,
            start: None,
            ppid: 1,
            parent_start: None,
            comm: from.1.into(),
            cgroup_id: 0,
            v1_cgroup_id: 0,
            v1_hierarchy: 0,
            what: Lifecycle::Signal(sent),
        }
    }

    /// Process `pid` (`comm`) exits at `at` seconds, killed.
    pub fn exit(at: f64, pid: u32, comm: &str) -> LifecycleEvent {
        LifecycleEvent {
            time: t(at),
            pid,
            start: None,
            ppid: 1,
            parent_start: None,
            comm: comm.into(),
            cgroup_id: 0,
            v1_cgroup_id: 0,
            v1_hierarchy: 0,
            what: Lifecycle::Exit { status: Some(9), last_thread: true },
        }
    }
}
