//! P5 `cgroup-busy`: a pod's cgroup cannot be removed because tasks still
//! live in it (alive, in D state, or frozen) or child cgroups remain, so
//! kubelet never sees the pod's cgroup gone.
//!
//! Signature: rmdir or unlinkat(AT_REMOVEDIR) on a cgroup filesystem
//! failing with EBUSY, every 2 s from kubelet or in 5-try bursts from runc.
//! Confirmed from cgroup.procs (recursively), cgroup.events and the freezer.

use super::shell::word;
use super::track::{Attempts, FailureLog};
use super::mount_held::is_cgroupfs;
use super::{removes, removes_dir, shown, Confidence, Detector, Finding, Kind, Review, Severity};
use crate::event::CallEvent;
use crate::identify::Identity;
use crate::inspect::mounts::mount_containing;
use crate::inspect::{CgroupState, TaskState};

/// Tasks named in a sentence, at most this many.
const TASKS_NAMED: usize = 5;

#[derive(Default)]
pub struct CgroupBusy {
    failures: FailureLog,
}

fn task_words(t: &TaskState) -> String {
    let wchan = t.wchan.as_ref().map(|w| format!(" in {w}")).unwrap_or_default();
    format!("pid {} ({}, {}{wchan})", t.pid, t.comm, t.state_words())
}

/// The exact commands, in the order they must run.
fn fix(cg: &[u8], state: &CgroupState) -> String {
    let dir = String::from_utf8_lossy(cg);
    let file = |name: &str| word(format!("{dir}/{name}").as_bytes());
    let mut steps = Vec::new();
    if !state.tasks.is_empty() {
        if state.version == 1 && state.frozen == Some(true) {
            // v1 frozen tasks cannot die until thawed; v2's cgroup.kill works on frozen ones.
            steps.push(format!("echo THAWED > {}", file("freezer.state")));
        }
        if state.has_kill {
            steps.push(format!("echo 1 > {}", file("cgroup.kill")));
        } else {
            let pids: Vec<String> = state.tasks.iter().map(|t| t.pid.to_string()).collect();
            steps.push(format!("kill -9 {}", pids.join(" ")));
        }
    } else if state.frozen == Some(true) {
        steps.push(if state.version == 2 {
            format!("echo 0 > {}", file("cgroup.freeze"))
        } else {
            format!("echo THAWED > {}", file("freezer.state"))
        });
    } else if !state.children.is_empty() {
        let children: Vec<String> = state.children.iter().map(|c| word(format!("{dir}/{c}").as_bytes())).collect();
        steps.push(format!("rmdir {}", children.join(" ")));
    }
    steps.join(" && ")
}

impl CgroupBusy {
    fn decide(a: &mut Attempts, review: &mut Review<'_>) -> Option<Finding> {
        let node = &mut *review.node;
        let path = a.path.clone();
        let mounts = node.host_mounts().ok()?;
        if !mount_containing(&mounts, &path).is_some_and(is_cgroupfs) {
            return None;
        }
        let mut f = Finding::new(Kind::CgroupBusy, &shown(&path), Severity::Critical, a.first);
        a.stamp(&mut f);
        let rhythm = a.rhythm_words();
        f.evidence("trace", a.trace_words());
        let whose = a.pod.as_ref().map(|p| format!("the cgroup of pod {p}")).unwrap_or_else(|| "the cgroup".into());
        let failed = format!("{}{rhythm}", a.failed_words());
        let state = match node.cgroup(&path) {
            Ok(state) => state,
            Err(why) => {
                f.evidence("cgroupfs", format!("{}: {why}", shown(&path)));
                f.summary = format!("{} cannot remove {whose} {}: it is busy. {failed}.", a.actor.description, shown(&path));
                f.fix = format!("cat {}", word(format!("{}/cgroup.procs", String::from_utf8_lossy(&path)).as_bytes()));
                return Some(f);
            }
        };
        if let Some(populated) = state.populated {
            f.evidence("cgroup.events", format!("populated {}", populated as u8));
        }
        if state.frozen == Some(true) {
            f.evidence(if state.version == 2 { "cgroup.freeze" } else { "freezer.state" }, "frozen");
        }
        for t in state.tasks.iter().take(TASKS_NAMED) {
            f.evidence("cgroup.procs", task_words(t));
            if let Some(top) = t.stack.first() {
                f.evidence(format!("/proc/{}/stack", t.tid), format!("waits in {top}"));
            }
        }
        if state.tasks.len() > TASKS_NAMED {
            f.evidence("cgroup.procs", format!("and {} more tasks", state.tasks.len() - TASKS_NAMED));
        }
        if !state.children.is_empty() {
            f.evidence("cgroupfs", format!("child cgroups: {}", state.children.join(", ")));
        }
        f.detail("tasks", state.tasks.len());
        f.detail("children", state.children.len());
        let what = format!("{} cannot remove {whose} {}", a.actor.description, shown(&path));
        let stuck = state.tasks.iter().filter(|t| t.state == 'D').count();
        if !state.tasks.is_empty() {
            f.confidence = Confidence::Confirmed;
            let named: Vec<String> = state.tasks.iter().take(TASKS_NAMED).map(task_words).collect();
            let frozen = if state.frozen == Some(true) { ", frozen" } else { "" };
            f.summary = format!("{what}: {} task(s) still live in it{frozen}: {}. {failed}.", state.tasks.len(), named.join(", "));
            if stuck > 0 {
                f.advice.push(format!("{stuck} task(s) are in D state: they die only when their I/O returns (see any hung-call finding)"));
            }
        } else if state.frozen == Some(true) {
            f.confidence = Confidence::Confirmed;
            f.summary = format!("{what}: it is frozen. {failed}.");
        } else if !state.children.is_empty() {
            f.confidence = Confidence::Confirmed;
            f.summary = format!("{what}: child cgroups remain: {}. {failed}.", state.children.join(", "));
        } else {
            f.confidence = Confidence::Possible;
            f.summary = format!("{what}: {failed}, but it is empty now: the next retry should succeed.");
            f.fix = format!("rmdir {}", word(&path));
            return Some(f);
        }
        f.fix = fix(&path, &state);
        Some(f)
    }
}

impl Detector for CgroupBusy {
    fn observe(&mut self, event: &CallEvent, identity: &Identity) {
        if !removes(event) {
            return;
        }
        let Ok(path) = &identity.abs_path else { return };
        match event.errno() {
            None => self.failures.succeeded(path, event.time),
            // Whether the path is on a cgroup filesystem is read at review.
            Some(libc::EBUSY) if removes_dir(event) => self.failures.failed(path, event, identity),
            Some(_) => {}
        }
    }

    fn review(&mut self, review: &mut Review<'_>) -> Vec<Finding> {
        self.failures.review(review.now, |a| Self::decide(a, review))
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::*;
    use super::*;

    const CG: &str = "/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod5f1c2a9e_0000_4000_8000_000000000001.slice";

    fn node_with(state: CgroupState) -> FakeNode {
        let mut node = FakeNode::with_mounts(&["70 /sys/fs/cgroup cgroup2"]);
        node.cgroups.insert(CG.into(), state);
        node
    }

    fn housekeeping() -> Vec<Call> {
        [0.0, 2.0, 4.0, 6.0].iter().map(|s| rmdir(*s, "kubelet", CG, -libc::EBUSY)).collect()
    }

    #[test]
    fn a_live_task_keeps_the_pod_cgroup_on_kubelets_two_second_housekeeping() {
        let mut d = CgroupBusy::default();
        let mut node = node_with(CgroupState {
            version: 2,
            tasks: vec![task(999, "sleep", 'S')],
            children: vec![],
            populated: Some(true),
            frozen: Some(false),
            has_kill: true,
        });
        let f = &run(&mut d, &mut node, &housekeeping(), 6.5)[0];
        assert_eq!(f.kind, Kind::CgroupBusy);
        assert_eq!(f.confidence, Confidence::Confirmed);
        assert_eq!(f.pod_uid, Some(pod()));
        assert_eq!(f.fix, format!("echo 1 > {CG}/cgroup.kill"));
        assert!(f.rhythm.as_deref().unwrap().contains("every 2 s"));
        assert!(f.evidence.iter().any(|e| e.fact.contains("pid 999 (sleep, S (sleeping))")), "{:?}", f.evidence);
    }

    #[test]
    fn v1_frozen_tasks_are_thawed_before_the_kill_and_children_are_removed() {
        let mut d = CgroupBusy::default();
        let mut node = node_with(CgroupState {
            version: 1,
            tasks: vec![task(5, "app", 'D')],
            children: vec![],
            populated: None,
            frozen: Some(true),
            has_kill: false,
        });
        let f = &run(&mut d, &mut node, &housekeeping(), 6.5)[0];
        assert_eq!(f.fix, format!("echo THAWED > {CG}/freezer.state && kill -9 5"));
        assert!(f.advice[0].contains("D state"));
        let mut d = CgroupBusy::default();
        let mut node = node_with(CgroupState { version: 2, tasks: vec![], children: vec!["c1".into()], populated: Some(false), frozen: Some(false), has_kill: true });
        let f = &run(&mut d, &mut node, &housekeeping(), 6.5)[0];
        assert_eq!(f.fix, format!("rmdir {CG}/c1"));
    }

    #[test]
    fn ebusy_outside_a_cgroup_filesystem_is_not_cgroup_busy() {
        let mut d = CgroupBusy::default();
        let mut node = FakeNode::with_mounts(&["70 /sys/fs/cgroup cgroup2"]);
        let calls = [rmdir(0.0, "containerd", "/run/x/rootfs", -libc::EBUSY), rmdir(1.0, "containerd", "/run/x/rootfs", -libc::EBUSY)];
        assert!(run(&mut d, &mut node, &calls, 5.0).is_empty());
    }
}
