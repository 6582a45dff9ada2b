//! What sigterm-ignored and unkillable-task share: a pod's process that
//! was sent a signal, followed until its exit. Past the time a process
//! takes to die of it, the node says whether it is still there (a zombie
//! has exited: only its parent has yet to reap it); one that ends after it
//! was told is told once more, resolved, then forgotten. Bounded: past
//! [`FOLLOWED_MAX`] the lowest pids are forgotten.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::Finding;
use crate::identify::pod::PodUid;
use crate::identify::Actor;
use crate::inspect::{NodeInspector, TaskState};
use crate::lifecycle::{LifecycleEvent, LifecycleIdentity, SignalSent};

/// Processes followed at most.
pub const FOLLOWED_MAX: usize = 1024;

/// A process sent the signal, not yet seen to exit.
pub struct Followed<T> {
    /// When the signal was first sent.
    pub at: SystemTime,
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

pub struct Signalled<T> {
    followed: BTreeMap<u32, Followed<T>>,
}

impl<T> Default for Signalled<T> {
    fn default() -> Signalled<T> {
        Signalled { followed: BTreeMap::new() }
    }
}

impl<T> Signalled<T> {
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
        let again = self.followed.get(&pid).is_some_and(|f| f.ended.is_none());
        if !again {
            if self.followed.len() >= FOLLOWED_MAX {
                self.followed.pop_first();
            }
            let followed = Followed {
                at: event.time,
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

    pub fn get_mut(&mut self, pid: u32) -> Option<&mut Followed<T>> {
        self.followed.get_mut(&pid)
    }

    /// Process `pid` exited.
    pub fn exited(&mut self, pid: u32, at: SystemTime) {
        if let Some(f) = self.followed.get_mut(&pid) {
            f.ended.get_or_insert(at);
        }
    }

    /// The findings of this review: of every process still there `wait`
    /// after its signal (with its state as /proc says it), and of every one
    /// told before that has ended since (no state), made by `finding`.
    pub fn review(
        &mut self,
        now: SystemTime,
        wait: Duration,
        node: &mut dyn NodeInspector,
        mut finding: impl FnMut(u32, &Followed<T>, Option<TaskState>, &mut dyn NodeInspector) -> Finding,
    ) -> Vec<Finding> {
        let mut out = Vec::new();
        for (pid, f) in self.followed.iter_mut() {
            if f.ended.is_none() && now.duration_since(f.at).unwrap_or_default() < wait {
                continue;
            }
            let mut state = None;
            if f.ended.is_none() {
                match node.task(*pid) {
                    Ok(task) if task.state != 'Z' && task.state != 'X' => state = Some(task),
                    _ => f.ended = Some(now),
                }
            }
            if f.ended.is_some() && !f.told {
                continue;
            }
            f.told = true;
            out.push(finding(*pid, f, state, node));
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
    use crate::lifecycle::{Lifecycle, LifecycleEvent, LifecycleIdentity, SignalResult, SignalSent};

    /// A process of the pod named `comm`, the `role` it plays, child of `parent`.
    pub fn sender(comm: &str, parent: &str, role: Role) -> LifecycleIdentity {
        LifecycleIdentity { pod_uid: Some(pod()), actor: actor(comm, parent, role) }
    }

    /// Process `from` (pid, name) sends `sig` to the group of `to` (pid,
    /// name) at `at` seconds, and the kernel's verdict is `result`.
    pub fn signal(at: f64, from: (u32, &str), sig: i32, result: SignalResult, to: (u32, &str)) -> LifecycleEvent {
        let sent = SignalSent { sig, result, target_pid: to.0, target_comm: to.1.into(), group: true };
        LifecycleEvent {
            time: t(at),
            pid: from.0,
            ppid: 1,
            comm: from.1.into(),
            cgroup_id: 0,
            what: Lifecycle::Signal(sent),
        }
    }

    /// Process `pid` (`comm`) exits at `at` seconds, killed.
    pub fn exit(at: f64, pid: u32, comm: &str) -> LifecycleEvent {
        LifecycleEvent {
            time: t(at),
            pid,
            ppid: 1,
            comm: comm.into(),
            cgroup_id: 0,
            what: Lifecycle::Exit { status: 9 },
        }
    }
}
