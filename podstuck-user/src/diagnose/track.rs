//! The memory most detectors share: the same call failing on the same path,
//! again and again, until it succeeds. Decides when a failure has persisted
//! long enough to be a finding (one EBUSY that succeeds on retry is not),
//! and how often node state is read again for it.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, SystemTime};

use podstuck_common::Syscall;

use super::rhythm::Rhythm;
use super::{Finding, FindingActor, Review};
use crate::event::{errno_name, syscall_name, CallEvent};
use crate::identify::path_proof::PathProof;
use crate::identify::pod::{ContainerId, PathArea, PodUid};
use crate::identify::Identity;
use crate::inspect::{Mount, MountNamespace, NodeInspector, Probe};

/// A single failure becomes a finding once it has stood this long without
/// a success (when no retry came to show it persists).
pub const SETTLE: Duration = Duration::from_secs(2);
/// Node state is read again for a finding at most this often.
pub const RECHECK: Duration = Duration::from_secs(5);
/// ... and this soon when the last look could not read what it needed
/// (timed out, avoided, out of a resource): it may answer now, and a
/// finding must not stand on a missing fact longer than it has to.
pub const RECHECK_SOON: Duration = Duration::from_secs(1);
/// Failure times kept per path, for the rhythm.
const TIMES_KEPT: usize = 24;
/// A retry this long or more after the failure before it is on a
/// daemon's rhythm (kubelet's housekeeping: 2 s), not a burst's step.
pub const SLOW_RETRY: Duration = Duration::from_secs(1);
/// Paths tracked per detector; the stalest go first.
const PATHS_KEPT: usize = 4096;

/// One path's failures.
#[derive(Clone, Debug)]
pub struct Attempts {
    pub path: Vec<u8>,
    pub first: SystemTime,
    pub last: SystemTime,
    pub failures: u64,
    pub times: VecDeque<SystemTime>,
    pub errno: i32,
    pub syscall: Syscall,
    pub pid: u32,
    pub tid: u32,
    pub uid: u32,
    pub mntns: u32,
    pub actor: FindingActor,
    pub pod: Option<PodUid>,
    pub area: Option<PathArea>,
    /// The container the path is of (its root filesystem, shm), where
    /// identify named one.
    pub container: Option<ContainerId>,
    /// When a later call on the path succeeded.
    pub succeeded: Option<SystemTime>,
    /// Whether a finding was made of it (so a success resolves it visibly).
    pub reported: bool,
    /// When node state was last read for it, and how many failures there were then.
    pub checked: Option<(SystemTime, u64)>,
    /// The finding built at the last check, reused between checks.
    pub finding: Option<Finding>,
    /// The last check could not read what it needed: the next comes soon.
    pub read_short: bool,
    /// How far the path speaks for the node (the latest call's).
    pub proof: PathProof,
}

impl Attempts {
    /// Failed again (or twice), or failed once long enough ago, and no
    /// success since; with `at_once`, failed once: the detector reads the
    /// node state that proves its cause (or not) right away.
    pub fn persists(&self, now: SystemTime, at_once: bool) -> bool {
        self.succeeded.is_none()
            && (at_once || self.failures >= 2 || now.duration_since(self.first).unwrap_or_default() >= SETTLE)
    }

    /// Whether node state should be read again now.
    pub fn due_for_check(&self, now: SystemTime) -> bool {
        match self.checked {
            None => true,
            // Not a finding at the last look, but more has happened since.
            Some((_, failures)) if self.finding.is_none() && failures != self.failures => true,
            Some((at, _)) => {
                let every = if self.read_short { RECHECK_SOON } else { RECHECK };
                now.duration_since(at).unwrap_or_default() >= every
            }
        }
    }

    pub fn mark_checked(&mut self, now: SystemTime) {
        self.checked = Some((now, self.failures));
        self.read_short = false;
    }

    /// A fact this check needed could not be read for now (`why` passes:
    /// timed out, avoided, out of a resource): look again soon.
    pub fn read_again_soon_if(&mut self, why: &crate::inspect::Unreadable) {
        if why.is_passing() {
            self.read_short = true;
        }
    }

    pub fn rhythm(&self) -> Option<Rhythm> {
        super::rhythm::recognise(&self.times.iter().copied().collect::<Vec<_>>()).filter(|r| r.fits(self.actor.role))
    }

    /// " on kubelet volume backoff (...)", or nothing when no rhythm is recognised.
    pub fn rhythm_words(&self) -> String {
        self.rhythm().map(|r| format!(" on {}", r.describe())).unwrap_or_default()
    }

    /// What the caller's mount namespace says of its path: its table, read
    /// through a process still living there (the caller is often gone: a
    /// short-lived `umount` child of kubelet), never another namespace's
    /// in its place; and the path as the kernel resolved it for the caller
    /// (symlinks followed in its root), which is how mount tables name it.
    pub fn caller_view(&self, node: &mut dyn NodeInspector) -> CallerView {
        let namespace = node.mount_namespace(u64::from(self.mntns));
        // Members of a container's namespace share its root; a member
        // stands in for a caller that may have gone.
        let resolver = match &namespace {
            Ok(ns) if !ns.host => ns.member,
            _ => self.pid,
        };
        let path = node.resolved_path(resolver, &self.path).unwrap_or_else(|_| self.path.clone());
        CallerView { mntns: u64::from(self.mntns), namespace, path, proof: self.proof.clone() }
    }

    /// Evidence that the path the caller gave is another spelling of the
    /// one mount tables name, when it is.
    pub fn resolution_evidence(&self, view: &CallerView, finding: &mut Finding) {
        if view.path != self.path {
            finding.evidence(
                "path",
                format!(
                    "{} is {} once symlinks are followed in the caller's root",
                    super::shown(&self.path),
                    super::shown(&view.path)
                ),
            );
        }
    }

    pub fn errno_name(&self) -> String {
        errno_name(self.errno)
    }

    pub fn syscall_name(&self) -> &'static str {
        syscall_name(self.syscall)
    }

    /// "failed with EBUSY 7 times (first 14:02:11, last 14:03:40)" without the times.
    pub fn failed_words(&self) -> String {
        format!("{} failed with {}", self.syscall_name(), self.errno_times(self.failures))
    }

    /// "EBUSY 7 times", "EBUSY once".
    fn errno_times(&self, failures: u64) -> String {
        let times = if failures == 1 { "once".to_string() } else { format!("{failures} times") };
        format!("{} {times}", self.errno_name())
    }

    /// "kubelet's rmdir of /x failed with EBUSY 7 times, on kubelet volume backoff (...)".
    pub fn trace_words(&self) -> String {
        let rhythm = self.rhythm().map(|r| format!(", on {}", r.describe())).unwrap_or_default();
        let failed = self.failed_words();
        let rest = failed.strip_prefix(self.syscall_name()).unwrap_or(&failed).trim_start();
        format!("{}'s {} of {} {rest}{rhythm}", self.actor.description, self.syscall_name(), super::shown(&self.path))
    }

    /// Fills what every finding made of these attempts carries.
    pub fn stamp(&self, finding: &mut Finding) {
        finding.pod_uid = self.pod.clone();
        finding.pods = self.pod.iter().cloned().collect();
        finding.actor = Some(self.actor.clone());
        finding.syscall = Some(self.syscall_name());
        finding.errno = Some(self.errno_name());
        finding.first_seen = self.first;
        finding.last_seen = self.last;
        // Between checks the words were written for the count of the last
        // check: bring them up to date with the count.
        if let Some((_, then)) = self.checked.filter(|(_, then)| *then != self.failures) {
            let (old, new) = (self.errno_times(then), self.errno_times(self.failures));
            finding.summary = finding.summary.replace(&old, &new);
            for e in &mut finding.evidence {
                e.fact = e.fact.replace(&old, &new);
            }
        }
        finding.count = self.failures;
        finding.rhythm = self.rhythm().map(|r| r.describe());
        if finding.paths.is_empty() {
            finding.paths.push(self.path.clone());
        }
    }
}

/// The caller's view of the mount tree, see [`Attempts::caller_view`].
pub struct CallerView {
    /// The caller's mount namespace (0: unknown, taken as the host's).
    pub mntns: u64,
    pub namespace: Probe<MountNamespace>,
    /// The path with symlinks resolved (as written when it could not be).
    pub path: Vec<u8>,
    /// How far the caller's path speaks for the node.
    pub proof: PathProof,
}

impl CallerView {
    /// The caller's namespace's mount table, or why it could not be read.
    pub fn mounts(&self) -> Probe<&[Mount]> {
        self.namespace.as_ref().map(|ns| ns.mounts.as_slice()).map_err(Clone::clone)
    }

    /// Below which root the path's files are read: the node's, where the
    /// path's directory is the node's own (the host's namespace, or one
    /// proven to hold the node's directory); a member's of the caller's
    /// namespace, where it is a runtime's of its own (kubelet in a
    /// container); Err when that namespace cannot be read, never the
    /// node's in its place.
    pub fn reader(&self) -> Probe<u32> {
        match (&self.proof, &self.namespace) {
            (PathProof::RuntimeNamespace { .. }, Ok(ns)) if !ns.host => Ok(ns.member),
            (PathProof::RuntimeNamespace { .. }, Err(why)) => Err(why.clone()),
            _ => Ok(crate::inspect::NODE_ROOT),
        }
    }

    /// Whose table it is, in words: "the host's mount namespace",
    /// "kubelet's mount namespace mnt:[...] (docker container kindnode)".
    pub fn whose(&self) -> String {
        match &self.namespace {
            Ok(ns) => ns.words(),
            Err(_) => format!("mount namespace mnt:[{}]", self.mntns),
        }
    }

    /// `fix` made to act where the caller's paths are, and only there: as
    /// it is in the host's namespace; in another, through `nsenter` into
    /// it once its member's pid is checked to be still that process. Err
    /// says why none can be printed: the namespace could not be read (its
    /// processes gone), or its member's start is unknown. Never the bare
    /// command in the host's namespace for another namespace's paths: the
    /// same path there may be another pod's live volume.
    pub fn fix(&self, fix: String) -> Result<String, String> {
        // A fix of checked kills alone acts the same from anywhere.
        if super::shell::acts_anywhere(&fix) {
            return Ok(fix);
        }
        match &self.namespace {
            Ok(ns) if ns.host => Ok(fix),
            Ok(ns) => super::shell::in_mount_namespace_of(ns.member, ns.member_start, &fix).ok_or_else(|| {
                format!(
                    "no fix is printed: when pid {} ({}), through which {} would be entered, started could not be read, so its pid is no proof of which namespace a pasted nsenter would enter",
                    ns.member,
                    ns.member_comm,
                    ns.words()
                )
            }),
            Err(why) => Err(format!(
                "no fix is printed: {} ({}), so what was seen there can no longer be proven, and the same command on the node would act on the node's own path",
                self.whose(),
                why.said()
            )),
        }
    }

    /// Sets `f`'s fix to `fix` made to act where the caller's paths are
    /// ([`CallerView::fix`]), or to none, saying why.
    pub fn place_fix(&self, f: &mut Finding, fix: String) {
        match self.fix(fix) {
            Ok(fix) => f.fix = fix,
            Err(why) => {
                f.fix.clear();
                f.advice.push(why);
            }
        }
    }

    /// What else may run the fix: the container's runtime, where the
    /// namespace is a docker container's (kind, k3d, minikube nodes).
    pub fn runtime_advice(&self, fix: &str) -> Option<String> {
        let ns = self.namespace.as_ref().ok().filter(|ns| !ns.host)?;
        let owner = ns.owner.as_ref().filter(|o| o.pod_uid.is_none())?;
        let docker = super::shell::in_docker_container(owner.container.as_deref()?, fix)?;
        Some(format!("or through docker: {docker}"))
    }
}

/// Failures by path, for one detector. Walked in path order: a hash map's
/// order differs from run to run, and a finding merged from several paths
/// (disk-full) would then read differently in a replay of the same calls.
#[derive(Default)]
pub struct FailureLog {
    by_path: BTreeMap<Vec<u8>, Attempts>,
    /// The detector's cause is proved or ruled out by the node's state at
    /// the first failure (a mount table, inode flags, a directory's
    /// entries): a path is looked at from its first failure, not its
    /// second.
    at_once: bool,
    /// The detector's cause is proved by the node's state at a path's
    /// retry (its second failure), not its first: a review soon then.
    asks_at_the_retry: bool,
    /// The same, at a retry that came [`SLOW_RETRY`] or more after the
    /// failure before it: a retry on a daemon's rhythm (kubelet's
    /// housekeeping, every 2 s), not a step of a burst that may still
    /// succeed (runc's rounds, 10 ms apart and doubling).
    asks_at_a_slow_retry: bool,
    /// A failure came on a path not looked at yet that the detector can
    /// answer now, so a review soon would (see [`FailureLog::wants_a_look`]).
    unlooked: bool,
}

impl FailureLog {
    /// A log whose paths are looked at from their first failure: for a
    /// cause the node's state proves at once (see [`FailureLog::at_once`]).
    pub fn looked_at_from_the_first_failure() -> FailureLog {
        FailureLog { at_once: true, ..FailureLog::default() }
    }

    /// A log whose paths are looked at from their retry, as any other's,
    /// but that asks for a review soon when a path's retry comes rather
    /// than waiting for the next tick: for a cause the node's state proves
    /// once a failure is known not to be a step of a removal in progress.
    pub fn looked_at_from_the_retry() -> FailureLog {
        FailureLog { asks_at_the_retry: true, ..FailureLog::default() }
    }

    /// A log whose paths are looked at from their retry, that asks for a
    /// review soon at a retry on a daemon's rhythm ([`SLOW_RETRY`] or more
    /// after the failure before it), for a cause a burst of quick tries
    /// may still see go by itself.
    pub fn looked_at_from_a_slow_retry() -> FailureLog {
        FailureLog { asks_at_a_slow_retry: true, ..FailureLog::default() }
    }

    /// A success on a path ends what failed there; any other call is not
    /// this log's to follow here (failures come routed, [`FailureLog::record`]).
    pub fn ended_by(&mut self, event: &CallEvent, identity: &Identity) {
        if let (None, Ok(path)) = (event.errno(), &identity.abs_path) {
            self.succeeded(path, event.time);
        }
    }

    /// A failure the router gave the detector: one more on its path.
    pub fn record(&mut self, event: &CallEvent, identity: &Identity) {
        if let Ok(path) = &identity.abs_path {
            self.failed(path, event, identity);
        }
    }

    /// Whether a failure came, since the last review, on a path whose
    /// cause the node's state proves at once and that was not looked at
    /// yet: a storm of refusals on paths already looked at asks nothing.
    pub fn wants_a_look(&self) -> bool {
        self.unlooked
    }

    /// The attempts it keeps, one per path: what a detector's tests judge.
    #[cfg(test)]
    pub fn into_attempts(self) -> Vec<Attempts> {
        self.by_path.into_values().collect()
    }

    /// Records a failed call on `path`.
    pub fn failed(&mut self, path: &[u8], event: &CallEvent, identity: &Identity) {
        let errno = event.errno().unwrap_or(0);
        let known = self.by_path.get(path);
        let unlooked = known.is_none_or(|a| !a.reported && a.checked.is_none());
        let slow = known.is_some_and(|a| event.time.duration_since(a.last).unwrap_or_default() >= SLOW_RETRY);
        self.unlooked |= unlooked
            && (self.at_once || (self.asks_at_the_retry && known.is_some()) || (self.asks_at_a_slow_retry && slow));
        if let Some(a) = self.by_path.get_mut(path) {
            a.last = event.time;
            // A record may stand for more failures of its series (a storm
            // of them, counted in the kernel).
            a.failures += event.represents;
            if a.times.len() == TIMES_KEPT {
                a.times.pop_front();
            }
            a.times.push_back(event.time);
            a.errno = errno;
            a.syscall = event.syscall;
            a.pid = event.pid;
            a.tid = event.tid;
            a.uid = event.uid;
            a.mntns = event.mntns;
            a.proof = identity.proof.clone();
            a.actor = FindingActor::of(event.pid, &identity.actor);
            // A success followed by a new failure: the problem is back.
            a.succeeded = None;
            if identity.pod_uid.is_some() {
                a.pod = identity.pod_uid.clone();
            }
            if identity.container_id.is_some() {
                a.container = identity.container_id.clone();
            }
            return;
        }
        if self.by_path.len() >= PATHS_KEPT {
            self.forget_stalest();
        }
        self.by_path.insert(
            path.to_vec(),
            Attempts {
                path: path.to_vec(),
                first: event.time,
                last: event.time,
                failures: event.represents,
                times: VecDeque::from([event.time]),
                errno,
                syscall: event.syscall,
                pid: event.pid,
                tid: event.tid,
                uid: event.uid,
                mntns: event.mntns,
                actor: FindingActor::of(event.pid, &identity.actor),
                pod: identity.pod_uid.clone(),
                area: identity.path_area,
                container: identity.container_id.clone(),
                succeeded: None,
                reported: false,
                checked: None,
                finding: None,
                read_short: false,
                proof: identity.proof.clone(),
            },
        );
    }

    /// Records that a call on `path` succeeded: what failed there is over.
    pub fn succeeded(&mut self, path: &[u8], at: SystemTime) {
        if let Some(a) = self.by_path.get_mut(path) {
            a.succeeded = Some(at);
        }
    }

    /// Whether failures on `path` are still being followed.
    pub fn tracks(&self, path: &[u8]) -> bool {
        self.by_path.contains_key(path)
    }

    pub fn is_empty(&self) -> bool {
        self.by_path.is_empty()
    }

    fn forget_stalest(&mut self) {
        if let Some(path) = self.by_path.values().min_by_key(|a| a.last).map(|a| a.path.clone()) {
            self.by_path.remove(&path);
        }
    }

    /// Walks the tracked paths: `decide` returns the finding for a path, or
    /// None when it is not (yet) one. Succeeded paths are resolved (when a
    /// finding was made of them) and forgotten.
    pub fn review(
        &mut self,
        review: &mut Review<'_>,
        mut decide: impl FnMut(&mut Attempts, &mut Review<'_>) -> Option<Finding>,
    ) -> Vec<Finding> {
        let now = review.now;
        self.unlooked = false;
        let mut out = Vec::new();
        let mut done = Vec::new();
        for (path, a) in self.by_path.iter_mut() {
            if let Some(at) = a.succeeded {
                if let (true, Some(mut finding)) = (a.reported, a.finding.take()) {
                    finding.status = super::Status::Resolved;
                    finding.last_seen = at;
                    finding.evidence("trace", format!("a later call on {} succeeded", super::shown(path)));
                    out.push(finding);
                }
                done.push(path.clone());
                continue;
            }
            if !a.persists(now, self.at_once) {
                continue;
            }
            if !a.due_for_check(now) {
                // Between checks the finding read last stands; only the counts move.
                if let Some(mut finding) = a.finding.clone() {
                    a.stamp(&mut finding);
                    out.push(finding);
                }
                continue;
            }
            a.mark_checked(now);
            // Looked at from its first failure, a cause is told then only
            // if the node proved it; else it waits, as any other, for a
            // retry or the settle time (and is looked at again meanwhile).
            let early = !a.persists(now, false);
            let finding = decide(a, review);
            if early && finding.as_ref().is_some_and(|f| f.confidence != super::Confidence::Confirmed) {
                a.checked = None;
                continue;
            }
            a.finding = finding;
            if let Some(finding) = &a.finding {
                a.reported = true;
                out.push(finding.clone());
            }
        }
        for path in done {
            self.by_path.remove(&path);
        }
        out
    }
}
