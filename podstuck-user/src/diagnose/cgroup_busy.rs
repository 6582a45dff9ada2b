//! P5 `cgroup-busy`: a pod's cgroup cannot be removed because tasks still
//! live in it (alive, in D state, or frozen) or child cgroups remain, so
//! kubelet never sees the pod's cgroup gone.
//!
//! Signature: rmdir or unlinkat(AT_REMOVEDIR) on a cgroup filesystem
//! failing with EBUSY, every 2 s from kubelet or in 5-try bursts from runc.
//! Confirmed from cgroup.procs (recursively), cgroup.events and the freezer.
//!
//! On cgroup v1 a pod has a directory in every hierarchy (memory, pids,
//! freezer, cpu,cpuacct, name=systemd...), each with its containers' below
//! it, and one stuck task makes every one of them fail: one cause, so one
//! finding per pod, each failing directory in its evidence, and one fix
//! for all of them. The v1 freezer shows only in the freezer hierarchy,
//! and a frozen task ignores SIGKILL (and reads as merely sleeping in
//! /proc), so the fix thaws first, wherever the failing directory was.
//! Cgroups of no known pod fold by their path relative to the hierarchy:
//! the same path in every v1 hierarchy is one group made by one runtime
//! for the same tasks (`docker/<id>`, `system.slice/x.service`), and a
//! fix for one hierarchy alone would not let the others go. cgroup v2
//! has one hierarchy and keeps one finding per directory, as before.

use std::collections::{BTreeMap, BTreeSet};

use super::route::{Attempt, Claim, Refusal, Target};
use super::shell::{file_in, kill_what_cgroups_hold, list, remove_dirs, show_file, word, write_file};
use super::track::{Attempts, FailureLog};
use super::{shown, Confidence, Detector, Finding, Kind, Review, Severity, Status};
use crate::event::CallEvent;
use crate::identify::Identity;
use crate::inspect::mounts::{cgroup_place, depth, mount_containing, CgroupPlace};
use crate::inspect::Mount;
use crate::inspect::{CgroupState, FreezerLevel, NodeInspector, TaskState, Unreadable};

/// Tasks named in a sentence, at most this many.
const TASKS_NAMED: usize = 5;
/// Directories listed in one folded finding's paths.
const PATHS_KEPT: usize = 32;

pub struct CgroupBusy {
    failures: FailureLog,
    /// What was read of each failing directory at its last check, by
    /// path: folding needs the facts (tasks, freezer levels, children),
    /// not the sentences made of them.
    read: BTreeMap<Vec<u8>, Read>,
}

impl Default for CgroupBusy {
    /// Looked at soon after a retry on kubelet's rhythm, which proves a
    /// cgroup busy (every v1 hierarchy's directories of a pod fail in
    /// kubelet's one pass, within a review's gap); not at runc's quick
    /// rounds, which a task still exiting may end.
    fn default() -> CgroupBusy {
        CgroupBusy { failures: FailureLog::looked_at_from_a_slow_retry(), read: BTreeMap::new() }
    }
}

/// The node's answers for one failing cgroup directory.
#[derive(Clone, Debug, Default)]
struct Read {
    place: Option<CgroupPlace>,
    state: Option<CgroupState>,
    /// v1 only: the freezer twin and the cgroups below it.
    freezer: Vec<FreezerLevel>,
}

impl Read {
    fn frozen_levels(&self) -> impl Iterator<Item = &FreezerLevel> {
        self.freezer.iter().filter(|l| l.frozen())
    }

    /// Whether process `pid` sits in a frozen freezer cgroup.
    fn frozen_pid(&self, pid: u32) -> bool {
        self.frozen_levels().any(|l| l.pids.contains(&pid))
    }
}

fn task_words(t: &TaskState, frozen: bool) -> String {
    let wchan = t.wchan.as_ref().map(|w| format!(" in {w}")).unwrap_or_default();
    // A v1-frozen task reads as sleeping in /proc: say what it really is.
    let frozen = if frozen { ", frozen by the v1 freezer" } else { "" };
    format!("pid {} ({}, {}{wchan}{frozen})", t.pid, t.comm, t.state_words())
}

/// The exact commands for one v2 directory, in the order they must run.
fn fix(cg: &[u8], state: &CgroupState) -> String {
    let mut steps = Vec::new();
    if !state.tasks.is_empty() {
        if state.version == 1 && state.frozen == Some(true) {
            // v1 frozen tasks cannot die until thawed; v2's cgroup.kill works on frozen ones.
            steps.push(write_file("THAWED", &file_in(cg, "freezer.state")));
        }
        if state.has_kill {
            steps.push(write_file("1", &file_in(cg, "cgroup.kill")));
        } else {
            steps.extend(kill_what_cgroups_hold([cg]));
        }
    } else if state.frozen == Some(true) {
        steps.push(if state.version == 2 {
            write_file("0", &file_in(cg, "cgroup.freeze"))
        } else {
            write_file("THAWED", &file_in(cg, "freezer.state"))
        });
    } else if !state.children.is_empty() {
        steps.push(remove_dirs(state.children.iter().map(|c| file_in(cg, c))));
    }
    steps.join(" && ")
}

/// What the failing directories of one group hold, read together.
#[derive(Default)]
struct GroupFacts {
    /// Every task, once (the same task is in the pod's cgroup of every hierarchy).
    tasks: Vec<TaskState>,
    /// pids of those that sit in a frozen v1 freezer cgroup.
    frozen_pids: BTreeSet<u32>,
    /// Frozen freezer cgroups, parents first.
    frozen_levels: Vec<Vec<u8>>,
    /// v2 directories frozen with cgroup.freeze.
    frozen_v2: Vec<Vec<u8>>,
    /// Child cgroups left in the failing directories, deepest first.
    children: Vec<Vec<u8>>,
    /// The failing directories that hold tasks (themselves or below).
    holding: Vec<Vec<u8>>,
}

impl GroupFacts {
    fn of<'a>(reads: impl Iterator<Item = (&'a [u8], &'a Read)>) -> GroupFacts {
        let mut g = GroupFacts::default();
        let mut levels = BTreeSet::new();
        let mut children = BTreeSet::new();
        for (path, read) in reads {
            for l in read.frozen_levels() {
                levels.insert(l.dir.clone());
            }
            let Some(state) = &read.state else { continue };
            if !state.tasks.is_empty() {
                g.holding.push(path.to_vec());
            }
            for t in &state.tasks {
                if read.frozen_pid(t.pid) || (state.version == 1 && state.frozen == Some(true)) {
                    g.frozen_pids.insert(t.pid);
                }
                if !g.tasks.iter().any(|k| k.tid == t.tid) {
                    g.tasks.push(t.clone());
                }
            }
            if state.version == 2 && state.frozen == Some(true) {
                g.frozen_v2.push(path.to_vec());
            }
            for c in &state.children {
                let mut child = path.to_vec();
                child.push(b'/');
                child.extend_from_slice(c.as_bytes());
                children.insert(child);
            }
        }
        g.tasks.sort_by_key(|t| (t.pid, t.tid));
        g.frozen_levels = levels.into_iter().collect();
        g.frozen_levels.sort_by_key(|d| depth(d));
        g.children = children.into_iter().collect();
        g.children.sort_by_key(|d| std::cmp::Reverse(depth(d)));
        g
    }

    /// The fix for every directory of the group at once, in the order it
    /// must run: thaw each frozen level (parents first: a parent's freeze
    /// holds its children), kill the tasks (a v1 frozen task ignores
    /// SIGKILL until thawed), then remove the child cgroups left, deepest
    /// first, in every hierarchy. The killed tasks leave their cgroups as
    /// they exit, a moment after kill returns: hence the pause.
    fn fix(&self) -> String {
        let mut steps: Vec<String> =
            self.frozen_levels.iter().map(|d| write_file("THAWED", &file_in(d, "freezer.state"))).collect();
        steps.extend(self.frozen_v2.iter().map(|d| write_file("0", &file_in(d, "cgroup.freeze"))));
        if !self.tasks.is_empty() {
            steps.extend(kill_what_cgroups_hold(&self.holding));
        }
        if !self.children.is_empty() {
            if !self.tasks.is_empty() {
                steps.push("sleep 1".into());
            }
            steps.push(remove_dirs(&self.children));
        }
        steps.join(" && ")
    }

    fn frozen(&self) -> bool {
        !self.frozen_levels.is_empty() || !self.frozen_v2.is_empty()
    }
}

/// What cgroup-busy found of one failing directory, before a word of it
/// is said; the facts it stands on are the directory's [`Read`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The directory is gone now: removed since.
    Gone,
    /// It could not be read now (why is in the evidence).
    Unread,
    /// Tasks still live in it: how many, how many wait in D on something
    /// other than the freezer, and whether it is frozen.
    TasksLive { tasks: usize, stuck: usize, frozen: bool },
    /// No task, but frozen.
    Frozen,
    /// No task, not frozen, but child cgroups remain.
    ChildrenLeft(Vec<String>),
    /// Empty now: the next retry should succeed.
    EmptyNow,
}

impl Verdict {
    pub fn confidence(&self) -> Confidence {
        match self {
            Verdict::TasksLive { .. } | Verdict::Frozen | Verdict::ChildrenLeft(_) => Confidence::Confirmed,
            // Not read now: the failure stands, its cause unread yet.
            Verdict::Unread => Confidence::Likely,
            Verdict::Gone | Verdict::EmptyNow => Confidence::Possible,
        }
    }
}

impl CgroupBusy {
    fn decide(a: &mut Attempts, review: &mut Review<'_>, reads: &mut BTreeMap<Vec<u8>, Read>) -> Option<Finding> {
        let (read, verdict, unreadable) = Self::judge(a, review.node)?;
        if let Some(why) = &unreadable {
            a.read_again_soon_if(why);
        }
        let f = Self::tell(a, &read, &verdict, unreadable.as_ref());
        reads.insert(a.path.clone(), read);
        Some(f)
    }

    /// Reads the directory (its tasks, children, freezer) and decides.
    /// None: not on a cgroup filesystem, so not this cause's.
    fn judge(a: &Attempts, node: &mut dyn NodeInspector) -> Option<(Read, Verdict, Option<Unreadable>)> {
        let path = a.path.as_slice();
        let mounts = node.host_mounts().ok()?;
        if !mount_containing(&mounts, path).is_some_and(Mount::is_cgroup) {
            return None;
        }
        let mut read = Read { place: cgroup_place(&mounts, path), ..Read::default() };
        let state = match node.cgroup(path) {
            Ok(state) => state,
            Err(why) if why.is_gone() => return Some((read, Verdict::Gone, Some(why))),
            Err(why) => return Some((read, Verdict::Unread, Some(why))),
        };
        if state.version == 1 {
            // A v1 freezer is read in the freezer hierarchy, wherever the
            // directory that failed is; without one, nothing is frozen.
            read.freezer = node.v1_freezer(path).unwrap_or_default();
        }
        let frozen_task = |t: &TaskState| read.frozen_pid(t.pid) || (state.version == 1 && state.frozen == Some(true));
        // Newer kernels show a frozen task as D: it waits on the freezer, not on I/O.
        let stuck = state.tasks.iter().filter(|t| t.state == 'D' && !frozen_task(t)).count();
        let frozen = state.frozen == Some(true) || read.frozen_levels().next().is_some();
        let verdict = if !state.tasks.is_empty() {
            Verdict::TasksLive { tasks: state.tasks.len(), stuck, frozen }
        } else if frozen {
            Verdict::Frozen
        } else if !state.children.is_empty() {
            Verdict::ChildrenLeft(state.children.clone())
        } else {
            Verdict::EmptyNow
        };
        read.state = Some(state);
        Some((read, verdict, None))
    }

    /// The verdict in words: the finding, its evidence and its fix.
    fn tell(a: &Attempts, read: &Read, verdict: &Verdict, unreadable: Option<&Unreadable>) -> Finding {
        let path = a.path.as_slice();
        let mut f = Finding::new(Kind::CgroupBusy, &shown(path), Severity::Critical, a.first);
        a.stamp(&mut f);
        f.confidence = verdict.confidence();
        f.evidence("trace", a.trace_words());
        let whose = a.pod.as_ref().map(|p| format!("the cgroup of pod {p}")).unwrap_or_else(|| "the cgroup".into());
        let failed = format!("{}{}", a.failed_words(), a.rhythm_words());
        let (Some(state), None) = (&read.state, unreadable) else {
            return unread(a, f, &whose, &failed, path, unreadable.expect("a cgroup unread says why"));
        };
        Self::state_evidence(&mut f, path, read, state);
        let what = format!("{} cannot remove {whose} {}", a.actor.description, shown(path));
        match verdict {
            Verdict::TasksLive { tasks, stuck, frozen } => {
                let frozen_task =
                    |t: &TaskState| read.frozen_pid(t.pid) || (state.version == 1 && state.frozen == Some(true));
                let named: Vec<String> =
                    state.tasks.iter().take(TASKS_NAMED).map(|t| task_words(t, frozen_task(t))).collect();
                let frozen = if *frozen { ", frozen" } else { "" };
                f.summary =
                    format!("{what}: {tasks} task(s) still live in it{frozen}: {}. {failed}.", named.join(", "));
                if *stuck > 0 {
                    f.advice.push(format!(
                        "{stuck} task(s) are in D state: they die only when their I/O returns (see any hung-call finding)"
                    ));
                }
            }
            Verdict::Frozen => f.summary = format!("{what}: it is frozen. {failed}."),
            Verdict::ChildrenLeft(children) => {
                f.summary = format!("{what}: child cgroups remain: {}. {failed}.", children.join(", "))
            }
            Verdict::EmptyNow | Verdict::Gone | Verdict::Unread => {
                f.summary = format!("{what}: {failed}, but it is empty now: the next retry should succeed.");
                f.fix = remove_dirs([path]);
                return f;
            }
        }
        f.fix = if state.version == 1 { GroupFacts::of(std::iter::once((path, read))).fix() } else { fix(path, state) };
        f
    }

    /// What was read of the directory, as evidence.
    fn state_evidence(f: &mut Finding, path: &[u8], read: &Read, state: &CgroupState) {
        if let Some(populated) = state.populated {
            f.evidence("cgroup.events", format!("populated {}", populated as u8));
        }
        if state.version == 2 && state.frozen == Some(true) {
            f.evidence("cgroup.freeze", "frozen");
        } else if read.frozen_levels().next().is_some() {
            for l in read.frozen_levels() {
                f.evidence(
                    "freezer.state",
                    format!(
                        "{}: {} (the v1 freezer: its tasks ignore SIGKILL until thawed)",
                        word(&file_in(&l.dir, "freezer.state")),
                        l.state
                    ),
                );
            }
        } else if state.frozen == Some(true) {
            f.evidence("freezer.state", "frozen");
        }
        let frozen_task = |t: &TaskState| read.frozen_pid(t.pid) || (state.version == 1 && state.frozen == Some(true));
        for t in state.tasks.iter().take(TASKS_NAMED) {
            f.evidence("cgroup.procs", task_words(t, frozen_task(t)));
            if let Some(top) = t.stack.first() {
                f.evidence(format!("/proc/{}/stack", t.tid), format!("waits in {top}"));
            }
        }
        if state.tasks.len() > TASKS_NAMED {
            f.evidence("cgroup.procs", format!("and {} more tasks", state.tasks.len() - TASKS_NAMED));
        }
        if !state.children.is_empty() {
            f.evidence("cgroupfs", format!("child cgroups of {}: {}", shown(path), state.children.join(", ")));
        }
        f.detail("tasks", state.tasks.len());
        f.detail("children", state.children.len());
    }
}

/// The finding of a cgroup that could not be read: gone since (the
/// failure is over), or not read now, said by the kind of why.
fn unread(a: &Attempts, mut f: Finding, whose: &str, failed: &str, path: &[u8], why: &Unreadable) -> Finding {
    if why.is_gone() {
        f.confidence = Confidence::Possible;
        f.evidence("cgroupfs", format!("{} is gone now ({why})", shown(path)));
        f.summary = format!(
            "{} could not remove {whose} {}: it was busy. {failed}. It is gone now: removed since.",
            a.actor.description,
            shown(path)
        );
        f.fix = list(path);
    } else {
        f.evidence("cgroupfs", format!("{}: {}", shown(path), why.said()));
        f.summary = format!("{} cannot remove {whose} {}: it is busy. {failed}.", a.actor.description, shown(path));
        f.fix = show_file(&file_in(path, "cgroup.procs"));
    }
    f
}

/// How findings are grouped: a v1 cgroup of a known pod by the pod (and
/// then the pod's v2 directory of a hybrid node with it), a v1 cgroup of
/// no known pod by its path relative to its hierarchy; a v2-only
/// directory not at all.
fn group_key(f: &Finding, reads: &BTreeMap<Vec<u8>, Read>, v1_pods: &BTreeSet<String>) -> Option<String> {
    let place = f.paths.first().and_then(|p| reads.get(p)).and_then(|r| r.place.as_ref());
    match (&f.pod_uid, place) {
        (Some(pod), _) if v1_pods.contains(pod.as_str()) => Some(format!("pod {pod}")),
        (_, Some(place)) if place.version == 1 => Some(shown(&place.relative)),
        _ => None,
    }
}

/// One finding per pod (or per relative path) on v1, see the module doc.
fn fold(findings: Vec<Finding>, reads: &BTreeMap<Vec<u8>, Read>) -> Vec<Finding> {
    let is_v1 = |f: &Finding| {
        f.paths.first().and_then(|p| reads.get(p)).and_then(|r| r.place.as_ref()).is_some_and(|p| p.version == 1)
    };
    let v1_pods: BTreeSet<String> = findings
        .iter()
        .filter(|f| is_v1(f))
        .filter_map(|f| f.pod_uid.as_ref())
        .map(|p| p.as_str().to_string())
        .collect();
    let mut out = Vec::new();
    let mut groups: BTreeMap<String, Vec<Finding>> = BTreeMap::new();
    for f in findings {
        match group_key(&f, reads, &v1_pods) {
            Some(key) => groups.entry(key).or_default().push(f),
            None => out.push(f),
        }
    }
    out.extend(groups.into_iter().map(|(key, members)| merged(&key, members, reads)));
    out
}

/// The members' evidence and advice in `f`: each directory's own calls
/// first (one trace line each), then what was read, said once however many
/// hierarchies said it.
fn merge_evidence(f: &mut Finding, members: &[Finding]) {
    for m in members {
        for e in m.evidence.iter().filter(|e| e.source == "trace") {
            f.evidence.push(e.clone());
        }
    }
    for m in members {
        for e in m.evidence.iter().filter(|e| e.source != "trace") {
            if !f.evidence.contains(e) {
                f.evidence.push(e.clone());
            }
        }
        for a in &m.advice {
            if !f.advice.contains(a) {
                f.advice.push(a.clone());
            }
        }
    }
}

/// The findings of one group's directories said as one.
fn merged(key: &str, mut members: Vec<Finding>, reads: &BTreeMap<Vec<u8>, Read>) -> Finding {
    let place_of = |f: &Finding| f.paths.first().and_then(|p| reads.get(p)).and_then(|r| r.place.clone());
    // The pod's own directories first, then its containers'; by hierarchy within a level.
    members.sort_by_key(|f| {
        let place = place_of(f);
        (place.as_ref().map(|p| depth(&p.relative)), place.map(|p| p.hierarchy), f.paths.first().cloned())
    });
    let first_seen = members.iter().map(|m| m.first_seen).min().unwrap_or(members[0].first_seen);
    let mut f = Finding::new(Kind::CgroupBusy, key, Severity::Critical, first_seen);
    let latest = members.iter().max_by_key(|m| m.last_seen).cloned().unwrap_or_else(|| members[0].clone());
    f.pod_uid = members.iter().find_map(|m| m.pod_uid.clone());
    f.pods = f.pod_uid.iter().cloned().collect();
    f.actor = latest.actor.clone();
    f.syscall = latest.syscall;
    f.errno = latest.errno.clone();
    f.last_seen = latest.last_seen;
    f.rhythm = members.iter().find_map(|m| m.rhythm.clone());
    f.count = members.iter().map(|m| m.count).sum();
    let active: Vec<&Finding> = members.iter().filter(|m| m.status == Status::Active).collect();
    f.status = if active.is_empty() { Status::Resolved } else { Status::Active };
    f.confidence = active
        .iter()
        .chain(if active.is_empty() { members.iter().collect::<Vec<_>>() } else { vec![] }.iter())
        .map(|m| m.confidence)
        .max()
        .unwrap_or(Confidence::Possible);
    for m in &members {
        if f.paths.len() < PATHS_KEPT {
            f.paths.extend(m.paths.first().cloned());
        }
    }
    let mut hierarchies: Vec<String> = Vec::new();
    let mut relatives: BTreeSet<Vec<u8>> = BTreeSet::new();
    for m in &members {
        if let Some(place) = place_of(m) {
            if !hierarchies.contains(&place.hierarchy) {
                hierarchies.push(place.hierarchy.clone());
            }
            relatives.insert(place.relative);
        }
    }
    hierarchies.sort();
    merge_evidence(&mut f, &members);
    let facts = GroupFacts::of(
        members.iter().filter_map(|m| m.paths.first()).filter_map(|p| reads.get(p).map(|r| (p.as_slice(), r))),
    );
    f.detail("directories", members.len());
    f.detail("hierarchies", hierarchies.len());
    f.detail("tasks", facts.tasks.len());
    f.detail("children", facts.children.len());

    let actor = f.actor.as_ref().map(|a| a.description.clone()).unwrap_or_else(|| "the caller".into());
    let whose = match &f.pod_uid {
        Some(pod) => format!("the cgroups of pod {pod}"),
        None => format!("the cgroup {key}"),
    };
    let levels = if relatives.len() > 1 {
        format!(", {} levels (the pod's and its containers')", relatives.len())
    } else {
        String::new()
    };
    let dirs = if members.len() == 1 { "1 directory".to_string() } else { format!("{} directories", members.len()) };
    let failed = format!(
        "{} failed with {} {} times in all{}",
        f.syscall.unwrap_or("rmdir"),
        f.errno.as_deref().unwrap_or("EBUSY"),
        f.count,
        f.rhythm.as_ref().map(|r| format!(", on {r}")).unwrap_or_default()
    );
    let what = format!(
        "{actor} cannot remove {whose}: {dirs} in {} hierarch{} ({}){levels}",
        hierarchies.len(),
        if hierarchies.len() == 1 { "y" } else { "ies" },
        hierarchies.join(", ")
    );
    let frozen_words = if facts.frozen_levels.is_empty() {
        String::new()
    } else {
        let at: Vec<String> = facts.frozen_levels.iter().map(|d| word(&file_in(d, "freezer.state"))).collect();
        format!(", frozen by the v1 freezer ({} FROZEN; a frozen task ignores SIGKILL until thawed)", at.join(", "))
    };
    if !facts.tasks.is_empty() {
        let named: Vec<String> =
            facts.tasks.iter().take(TASKS_NAMED).map(|t| task_words(t, facts.frozen_pids.contains(&t.pid))).collect();
        f.summary = format!(
            "{what}: {} task(s) still live in them{frozen_words}: {}. {failed}.",
            facts.tasks.len(),
            named.join(", ")
        );
        f.fix = facts.fix();
    } else if facts.frozen() {
        f.summary = format!("{what}: they are frozen{frozen_words}. {failed}.");
        f.fix = facts.fix();
    } else if !facts.children.is_empty() {
        let names: Vec<String> = facts.children.iter().map(|c| shown(c)).collect();
        f.summary = format!("{what}: child cgroups remain: {}. {failed}.", names.join(", "));
        f.fix = facts.fix();
    } else {
        f.summary = format!("{what}: {failed}, but they are empty now: the next retries should succeed.");
        let mut paths = f.paths.clone();
        paths.sort_by_key(|p| std::cmp::Reverse(depth(p)));
        f.fix = remove_dirs(paths);
    }
    if !facts.frozen_levels.is_empty() {
        f.advice.push("a task frozen by the v1 freezer shows in ps and /proc as S (sleeping), or D on kernels 6.1 and later, never as frozen; kill -9 does nothing to it until it is thawed: the fix thaws first".into());
    }
    f
}

impl Detector for CgroupBusy {
    fn wants_review(&self) -> bool {
        self.failures.wants_a_look()
    }

    fn claims(&self) -> &'static [Claim] {
        &[Claim { attempts: &[Attempt::RemoveDir], refusals: &[Refusal::Busy], targets: &[Target::Cgroup] }]
    }

    fn failed(&mut self, event: &CallEvent, identity: &Identity) {
        // Whether the path is on a cgroup filesystem is confirmed at review.
        self.failures.record(event, identity);
    }

    fn observe(&mut self, event: &CallEvent, identity: &Identity) {
        self.failures.ended_by(event, identity);
    }

    fn review(&mut self, review: &mut Review<'_>) -> Vec<Finding> {
        let reads = &mut self.read;
        let findings = self.failures.review(review, |a, review| Self::decide(a, review, reads));
        // Facts of directories no longer failing go with them.
        let failures = &self.failures;
        reads.retain(|path, _| failures.tracks(path) || findings.iter().any(|f| f.paths.first() == Some(path)));
        fold(findings, reads)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::*;
    use super::*;
    use crate::inspect::FreezerLevel;

    const CG: &str = "/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod5f1c2a9e_0000_4000_8000_000000000001.slice";

    fn node_with(state: CgroupState) -> FakeNode {
        let mut node = FakeNode::with_mounts(&["70 /sys/fs/cgroup cgroup2"]);
        node.cgroups.insert(CG.into(), state);
        node
    }

    /// What cgroup-busy decides of `calls` on `node`: its verdict alone.
    fn verdict(node: &mut FakeNode, calls: &[Call]) -> Option<Verdict> {
        CgroupBusy::judge(&attempts_of(calls), node).map(|(_, verdict, _)| verdict)
    }

    fn housekeeping() -> Vec<Call> {
        [0.0, 2.0, 4.0, 6.0].iter().map(|s| rmdir(*s, "kubelet", CG, -libc::EBUSY)).collect()
    }

    #[test]
    fn a_live_task_keeps_the_pod_cgroup_on_kubelets_two_second_housekeeping() {
        let mut d = CgroupBusy::default();
        let mut node = node_with(cgroup_with_a_live_sleep());
        assert_eq!(verdict(&mut node, &housekeeping()), Some(Verdict::TasksLive { tasks: 1, stuck: 0, frozen: false }));
        let f = &run(&mut d, &mut node, &housekeeping(), 6.5)[0];
        assert_eq!(f.kind, Kind::CgroupBusy);
        assert_eq!(f.confidence, Confidence::Confirmed);
        assert_eq!(f.pod_uid, Some(pod()));
        assert_eq!(f.fix, format!("echo 1 > {CG}/cgroup.kill"));
        assert!(f.rhythm.as_deref().unwrap().contains("every 2 s"));
        assert!(f.evidence.iter().any(|e| e.fact.contains("pid 999 (sleep, S (sleeping))")), "{:?}", f.evidence);
    }

    /// kubelet's retry 2 s after its first try proves the cgroup busy: a
    /// review is asked for then, and it tells the finding confirmed; runc's
    /// rounds, milliseconds apart, ask for none (a task still exiting may
    /// let a later round succeed).
    #[test]
    fn kubelets_retry_asks_for_a_review_at_once_and_runcs_quick_rounds_do_not() {
        let mut d = CgroupBusy::default();
        let mut node = node_with(cgroup_with_a_live_sleep());
        feed(&mut d, &rmdir(0.0, "kubelet", CG, -libc::EBUSY));
        assert!(!d.wants_review(), "one failure proves nothing yet");
        feed(&mut d, &rmdir(2.0, "kubelet", CG, -libc::EBUSY));
        assert!(d.wants_review());
        let told = run(&mut d, &mut node, &[], 2.025);
        assert!(matches!(&told[..], [f] if f.confidence == Confidence::Confirmed), "{told:?}");
        assert!(!d.wants_review());
        let mut d = CgroupBusy::default();
        for (i, at) in [0.0, 0.01, 0.03, 0.07].into_iter().enumerate() {
            feed(&mut d, &rmdir(at, "runc", CG, -libc::EBUSY));
            assert!(!d.wants_review(), "runc's round {i}");
        }
    }

    #[test]
    fn a_v2_frozen_or_parent_cgroup_gets_its_own_fix() {
        let mut d = CgroupBusy::default();
        let mut node = node_with(CgroupState {
            version: 2,
            tasks: vec![],
            children: vec!["c1".into()],
            populated: Some(false),
            frozen: Some(false),
            has_kill: true,
        });
        assert_eq!(verdict(&mut node, &housekeeping()), Some(Verdict::ChildrenLeft(vec!["c1".into()])));
        let f = &run(&mut d, &mut node, &housekeeping(), 6.5)[0];
        assert_eq!(f.fix, format!("rmdir -- {CG}/c1"));
        assert_eq!(f.id, format!("cgroup-busy:{CG}"), "v2 keeps one finding per directory");
    }

    /// The v1 hierarchies of an EKS AL2 or RHEL 8 node, as mounted there.
    const V1: [(&str, &str); 5] = [
        ("memory", "memory"),
        ("pids", "pids"),
        ("freezer", "freezer"),
        ("cpu,cpuacct", "cpu,cpuacct"),
        ("systemd", "xattr,name=systemd"),
    ];
    const CID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn v1_node() -> FakeNode {
        let mut text = String::from("1 0 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n30 1 0:25 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755\n");
        for (i, (dir, options)) in V1.iter().enumerate() {
            text.push_str(&format!(
                "{} 30 0:{} / /sys/fs/cgroup/{dir} rw,nosuid - cgroup cgroup rw,{options}\n",
                31 + i,
                31 + i
            ));
        }
        FakeNode { mountinfo: text, ..Default::default() }
    }

    fn pod_dir(hierarchy: &str) -> String {
        format!("/sys/fs/cgroup/{hierarchy}/kubepods/besteffort/pod{POD}")
    }

    /// The report of issue 27: one task of the pod's container frozen by
    /// the v1 freezer (`level`: at the container or the pod), kubelet
    /// failing to remove the pod's cgroups, containers first, hierarchy by
    /// hierarchy, every 2 s.
    fn frozen_pod(freeze_pod_level: bool) -> (FakeNode, Vec<Call>) {
        let mut node = v1_node();
        let frozen_task = task(5, "app", 'S');
        for (h, _) in V1 {
            let pod = pod_dir(h);
            let container = format!("{pod}/{CID}");
            let v1 = |tasks: Vec<TaskState>, children: Vec<String>| CgroupState {
                version: 1,
                tasks,
                children,
                populated: None,
                frozen: None,
                has_kill: false,
            };
            node.cgroups.insert(pod.clone().into_bytes(), v1(vec![frozen_task.clone()], vec![CID.into()]));
            node.cgroups.insert(container.into_bytes(), v1(vec![frozen_task.clone()], vec![]));
        }
        let state = |frozen: bool| if frozen { "FROZEN" } else { "THAWED" }.to_string();
        node.freezer = vec![
            FreezerLevel { dir: pod_dir("freezer").into_bytes(), state: state(freeze_pod_level), pids: vec![] },
            FreezerLevel {
                dir: format!("{}/{CID}", pod_dir("freezer")).into_bytes(),
                state: state(true),
                pids: vec![5],
            },
        ];
        let mut calls = Vec::new();
        for round in 0..4 {
            for (i, (h, _)) in V1.iter().enumerate() {
                let at = round as f64 * 2.0 + i as f64 * 0.01;
                calls.push(rmdir(at, "kubelet", &format!("{}/{CID}", pod_dir(h)), -libc::EBUSY));
                calls.push(rmdir(at + 0.005, "kubelet", &pod_dir(h), -libc::EBUSY));
            }
        }
        (node, calls)
    }

    #[test]
    fn a_v1_pod_frozen_in_its_container_is_one_finding_that_thaws_kills_and_removes() {
        let (mut node, calls) = frozen_pod(false);
        let mut d = CgroupBusy::default();
        let found = run(&mut d, &mut node, &calls, 6.5);
        assert_eq!(found.len(), 1, "{:#?}", found.iter().map(|f| &f.id).collect::<Vec<_>>());
        let f = &found[0];
        assert_eq!(f.id, format!("cgroup-busy:pod {POD}"));
        assert_eq!((f.severity, f.confidence, f.count), (Severity::Critical, Confidence::Confirmed, 40));
        assert_eq!(f.pod_uid, Some(pod()));
        assert_eq!(f.paths.len(), 10);
        assert_eq!(f.paths[0], pod_dir("cpu,cpuacct").into_bytes(), "the pod's own directories first");
        for (h, _) in V1 {
            for dir in [pod_dir(h), format!("{}/{CID}", pod_dir(h))] {
                assert!(
                    f.evidence.iter().any(|e| e.source == "trace" && e.fact.contains(&format!("of {dir} failed"))),
                    "{dir} in {:#?}",
                    f.evidence
                );
            }
        }
        let freezer = format!("{}/{CID}/freezer.state", pod_dir("freezer"));
        assert!(
            f.evidence.iter().any(|e| e.source == "freezer.state"
                && e.fact == format!("{freezer}: FROZEN (the v1 freezer: its tasks ignore SIGKILL until thawed)")),
            "{:#?}",
            f.evidence
        );
        assert_eq!(
            f.evidence.iter().filter(|e| e.source == "cgroup.procs").count(),
            1,
            "the task is said once: {:#?}",
            f.evidence
        );
        assert!(
            f.summary.contains(
                "10 directories in 5 hierarchies (cpu,cpuacct, freezer, memory, name=systemd, pids), 2 levels"
            ),
            "{}",
            f.summary
        );
        assert!(f.summary.contains("pid 5 (app, S (sleeping), frozen by the v1 freezer)"), "{}", f.summary);
        assert!(f.summary.contains(&format!("frozen by the v1 freezer ({freezer} FROZEN")), "{}", f.summary);
        let containers: Vec<String> = ["cpu,cpuacct", "freezer", "memory", "pids", "systemd"]
            .iter()
            .map(|h| format!("{}/{CID}", pod_dir(h)))
            .collect();
        let pods: Vec<String> =
            ["cpu,cpuacct", "freezer", "memory", "systemd", "pids"].iter().map(|h| pod_dir(h)).collect();
        assert_eq!(
            f.fix,
            format!(
                "echo THAWED > {freezer} && {} && sleep 1 && rmdir -- {}",
                kill_what_cgroups_hold(&pods).unwrap(),
                containers.join(" ")
            )
        );
        assert!(f.rhythm.as_deref().unwrap().contains("every 2 s"), "{:?}", f.rhythm);
    }

    #[test]
    fn a_pod_frozen_at_its_own_level_is_thawed_from_the_top() {
        let (mut node, calls) = frozen_pod(true);
        // Kernels from 6.1 show a frozen task as D: waiting on the freezer, not on I/O.
        node.cgroups.values_mut().flat_map(|c| c.tasks.iter_mut()).for_each(|t| t.state = 'D');
        let found = run(&mut CgroupBusy::default(), &mut node, &calls, 6.5);
        assert_eq!(found.len(), 1);
        assert!(!found[0].advice.iter().any(|a| a.contains("D state")), "{:?}", found[0].advice);
        assert!(
            found[0].summary.contains("(app, D (uninterruptible sleep), frozen by the v1 freezer)"),
            "{}",
            found[0].summary
        );
        let freezer = pod_dir("freezer");
        assert!(
            found[0].fix.starts_with(&format!(
                "echo THAWED > {freezer}/freezer.state && echo THAWED > {freezer}/{CID}/freezer.state && find "
            )),
            "{}",
            found[0].fix
        );
    }

    #[test]
    fn a_v1_cgroup_of_no_pod_folds_by_its_path_in_every_hierarchy() {
        let mut node = v1_node();
        let mut calls = Vec::new();
        for (i, (h, _)) in V1.iter().enumerate() {
            let dir = format!("/sys/fs/cgroup/{h}/docker/{CID}");
            node.cgroups.insert(
                dir.clone().into_bytes(),
                CgroupState {
                    version: 1,
                    tasks: vec![task(77, "nginx", 'S')],
                    children: vec![],
                    populated: None,
                    frozen: None,
                    has_kill: false,
                },
            );
            calls.push(rmdir(i as f64 * 0.1, "dockerd", &dir, -libc::EBUSY));
            calls.push(rmdir(1.0 + i as f64 * 0.1, "dockerd", &dir, -libc::EBUSY));
        }
        // Another group elsewhere stays its own finding.
        let other = "/sys/fs/cgroup/memory/system.slice/x.service";
        node.cgroups.insert(
            other.into(),
            CgroupState {
                version: 1,
                tasks: vec![task(78, "x", 'S')],
                children: vec![],
                populated: None,
                frozen: None,
                has_kill: false,
            },
        );
        calls.extend([rmdir(0.0, "systemd", other, -libc::EBUSY), rmdir(1.0, "systemd", other, -libc::EBUSY)]);
        let found = run(&mut CgroupBusy::default(), &mut node, &calls, 3.0);
        let ids: Vec<&str> = found.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(ids, [format!("cgroup-busy:docker/{CID}"), "cgroup-busy:system.slice/x.service".to_string()]);
        assert_eq!(found[0].paths.len(), 5);
        let dirs: Vec<String> = ["cpu,cpuacct", "freezer", "memory", "systemd", "pids"]
            .iter()
            .map(|h| format!("/sys/fs/cgroup/{h}/docker/{CID}"))
            .collect();
        assert_eq!(found[0].fix, kill_what_cgroups_hold(&dirs).unwrap());
        assert_eq!(found[0].pod_uid, None);
        assert!(
            found[0]
                .summary
                .starts_with(&format!("dockerd cannot remove the cgroup docker/{CID}: 5 directories in 5 hierarchies")),
            "{}",
            found[0].summary
        );
    }

    #[test]
    fn a_folded_finding_resolves_when_every_directory_went() {
        let (mut node, mut calls) = frozen_pod(false);
        let mut d = CgroupBusy::default();
        assert_eq!(run(&mut d, &mut node, &calls, 6.5).len(), 1);
        // The fix ran: kubelet's next round removes everything.
        calls.clear();
        for (h, _) in V1 {
            calls.push(rmdir(8.0, "kubelet", &format!("{}/{CID}", pod_dir(h)), 0));
            calls.push(rmdir(8.0, "kubelet", &pod_dir(h), 0));
        }
        let found = run(&mut d, &mut node, &calls, 8.5);
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].id.as_str(), found[0].status),
            (format!("cgroup-busy:pod {POD}").as_str(), Status::Resolved)
        );
        assert!(run(&mut d, &mut node, &[], 9.0).is_empty());
    }

    #[test]
    fn ebusy_outside_a_cgroup_filesystem_is_not_cgroup_busy() {
        let mut d = CgroupBusy::default();
        let mut node = FakeNode::with_mounts(&["70 /sys/fs/cgroup cgroup2"]);
        let calls = [
            rmdir(0.0, "containerd", "/run/x/rootfs", -libc::EBUSY),
            rmdir(1.0, "containerd", "/run/x/rootfs", -libc::EBUSY),
        ];
        // Never routed here (a runtime's directory is mount-held's), and
        // refused at review even if it were: it is on no cgroup filesystem.
        assert!(run(&mut d, &mut node, &calls, 5.0).is_empty());
        assert_eq!(verdict(&mut node, &calls), None);
        // A cgroup that went since, and one empty now: the retry's to make.
        let mut node = FakeNode::with_mounts(&["70 /sys/fs/cgroup cgroup2"]);
        assert_eq!(verdict(&mut node, &housekeeping()), Some(Verdict::Gone));
        node.cgroups.insert(
            CG.into(),
            CgroupState {
                version: 2,
                tasks: vec![],
                children: vec![],
                populated: Some(false),
                frozen: None,
                has_kill: true,
            },
        );
        assert_eq!(verdict(&mut node, &housekeeping()), Some(Verdict::EmptyNow));
    }
}
