//! P19, prestop-hook-running and sidecar-waiting: SIGTERM never came,
//! because kubelet's shutdown order holds the container back. kubelet
//! runs a container's preStop hook first (the runtime execs it into the
//! container) and sends the container SIGTERM only once the hook returns,
//! or once the grace period is spent; and it stops sidecars (restartable
//! init containers) only after every main container has ended. A hook
//! that sleeps, or waits on something that never comes, holds its
//! container and the pod's sidecars for the whole grace period, and
//! nothing is signalled meanwhile: this is not "SIGTERM ignored", SIGTERM
//! was never sent.
//!
//! Read with `watch --pod NS/NAME` only: the API says the pod is being
//! deleted and since when, which container has a preStop exec hook and
//! which is a sidecar ([`PodShutdown`]). The node says the rest: the
//! container's cgroup and its processes (`container_processes`), a
//! process the runtime exec'd into it (its parent is outside the
//! container) since the deletion, and the SIGTERMs the kernel saw sent
//! to the pod's processes. The hook is told confirmed when its command
//! line is the hook's command of the spec, likely when it is an exec
//! since the deletion whose command differs (a `kubectl exec` at that
//! moment looks the same to the kernel). A hook can also return and
//! still hold kubelet: what it started in the background keeps the exec's
//! stdout, and the runtime reports the exec done only once every writer
//! has closed it (containerd #7832; for ever unless
//! `drain_exec_sync_io_timeout` is set): a process started since the
//! deletion whose stdio is a pipe the runtime (the container init's
//! parent) has open and the init does not hold, told likely, its kill the
//! fix. A pod can make a process of its
//! own look exec'd (a double fork in a pod with the host's PID
//! namespace reparents to the runtime's shim): the finding and its kill
//! then concern that pod's own container and no other.
//!
//! Fix: the start-checked kill of the hook's processes. The hook fails,
//! kubelet says FailedPreStopHook and sends SIGTERM at once, with what is
//! left of the grace period; whatever the hook was to do is cut short,
//! said plainly. A sidecar waiting has no fix of its own: its main
//! container's finding is the one to act on.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::pod_shutdown::{PodShutdown, ShutdownContainer};
use super::shell::{kill_if_same, one_after_another};
use super::signalled::Reached;
use super::{human_duration, Confidence, Detector, Finding, Kind, Review, Severity, Status};
use crate::event::ProcessStart;
use crate::identify::pod::PodUid;
use crate::identify::LifecycleIdentity;
use crate::inspect::{state_words, ContainerCgroup, ContainerProcess, NodeInspector};
use crate::lifecycle::{Lifecycle, LifecycleEvent};

/// A hook that has run this long is told as a warning: short hooks (a
/// load balancer's deregistration delay, `sleep 5`) are the normal case.
pub const HOOK_LONG: Duration = Duration::from_secs(30);

/// How much earlier than the API's deletion time an exec may start and
/// still be the hook: the API keeps times to the second, and the node's
/// clock and the API server's differ a little.
const START_SLACK: Duration = Duration::from_secs(2);

/// A container whose cgroup was not found is looked for again after this
/// (the search walks the cgroup tree).
const NOT_FOUND_AGAIN: Duration = Duration::from_secs(10);

/// Processes of a hook's tree killed by the fix, at most.
const TREE_MAX: usize = 8;

#[derive(Default)]
pub struct PrestopHookRunning {
    /// The deleted pods' shutdowns, as the API last said them.
    shutdowns: BTreeMap<PodUid, PodShutdown>,
    /// SIGTERMs sent to a pod's processes from outside the pod.
    sigterms: Reached,
    /// When the first review came: "no SIGTERM seen" means since then.
    watching_since: Option<SystemTime>,
    /// Containers whose cgroup was not found, and when that was.
    not_found: BTreeMap<String, SystemTime>,
    /// The findings told and still active, by id: each one's end is told once.
    active: BTreeMap<String, Finding>,
}

/// What the detector decides of a deleted pod's container, before a word
/// of it is said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The container's preStop hook runs: SIGTERM waits for it.
    HookRunning {
        /// The hook's process, then the processes it started, at most [`TREE_MAX`].
        tree: Vec<ContainerProcess>,
        /// Its command line is the spec's hook command.
        as_the_spec_says: bool,
    },
    /// The hook has returned, but processes it left hold its output open:
    /// the runtime waits for them before it reports the hook done.
    HookOutputHeld {
        /// The holders, oldest first, at most [`TREE_MAX`].
        holders: Vec<ContainerProcess>,
    },
    /// A sidecar not signalled while main containers still run.
    SidecarWaiting {
        /// Its oldest process (the one the runtime started).
        init: ContainerProcess,
        /// The main containers it waits for, each with what holds it.
        waits_for: Vec<(String, Holding)>,
    },
}

/// What keeps a main container a sidecar waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holding {
    /// Its preStop hook runs (this process).
    Hook(u32),
    /// Its preStop hook returned, and this process holds its output.
    HookOutput(u32),
    /// It got SIGTERM then and runs on.
    SigtermAt(SystemTime),
    /// It runs, and no SIGTERM to it was seen.
    Running,
}

/// A container's processes: the oldest the runtime started (its init),
/// and those it exec'd later.
fn init_of(cgroup: &ContainerCgroup) -> Option<&ContainerProcess> {
    cgroup.processes.iter().filter(|p| p.parent_outside).min_by_key(|p| (p.start, p.pid))
}

/// The start-checked kill of each of `processes`, one after another.
fn kill_each(processes: &[ContainerProcess]) -> String {
    let kills: Vec<String> = processes
        .iter()
        .map(|p| kill_if_same("KILL", p.pid, Some(ProcessStart(p.start))).unwrap_or_default())
        .collect();
    one_after_another(kills)
}

/// `root` and the processes below it in the container, root first.
fn tree_of(cgroup: &ContainerCgroup, root: &ContainerProcess) -> Vec<ContainerProcess> {
    let mut tree = vec![root.clone()];
    let mut next = 0;
    while next < tree.len() && tree.len() < TREE_MAX {
        let parent = tree[next].pid;
        let children = cgroup.processes.iter().filter(|p| !p.parent_outside && p.ppid == parent);
        tree.extend(children.take(TREE_MAX - tree.len()).cloned());
        next += 1;
    }
    tree
}

impl PrestopHookRunning {
    /// The cgroup of `container`, unless it was not found a moment ago.
    fn cgroup_of(
        &mut self,
        container: &ShutdownContainer,
        node: &mut dyn NodeInspector,
        now: SystemTime,
    ) -> Option<ContainerCgroup> {
        let id = container.id.as_ref()?;
        if self
            .not_found
            .get(id.as_str())
            .is_some_and(|at| now.duration_since(*at).unwrap_or_default() < NOT_FOUND_AGAIN)
        {
            return None;
        }
        match node.container_processes(id) {
            Ok(Some(cgroup)) => {
                self.not_found.remove(id.as_str());
                Some(cgroup)
            }
            Ok(None) => {
                self.not_found.insert(id.as_str().to_string(), now);
                None
            }
            Err(_) => None,
        }
    }

    /// Whether process `p` got a SIGTERM from outside its pod, and when.
    fn sigterm_of(&self, p: &ContainerProcess) -> Option<SystemTime> {
        self.sigterms.when(p.pid, Some(ProcessStart(p.start)))
    }

    /// The hook of a main container with a preStop exec hook, if one
    /// runs, its cgroup's init being `init`.
    fn judge_hook(
        &self,
        shutdown: &PodShutdown,
        c: &ShutdownContainer,
        (cgroup, init): (&ContainerCgroup, &ContainerProcess),
    ) -> Option<Verdict> {
        let hook = c.prestop.as_ref()?;
        let deleted_at = shutdown.deleted_at?;
        // Once its init got SIGTERM, the hook is over, whatever still runs.
        if self.sigterm_of(init).is_some() {
            return None;
        }
        let since = deleted_at.checked_sub(START_SLACK).unwrap_or(deleted_at);
        let execs: Vec<&ContainerProcess> = cgroup
            .processes
            .iter()
            .filter(|p| p.parent_outside && p.pid != init.pid && p.started >= since && !matches!(p.state, 'Z' | 'X'))
            .collect();
        let spec = execs.iter().find(|p| &p.argv == hook);
        match spec.or(execs.first()) {
            Some(root) => Some(Verdict::HookRunning { tree: tree_of(cgroup, root), as_the_spec_says: spec.is_some() }),
            None => Self::judge_output(cgroup, init, since),
        }
    }

    /// The hook has returned, but what it left in the background holds
    /// its output: processes started since the deletion whose stdio is a
    /// pipe the runtime copies from and the container's init does not
    /// hold (an exec's own, not the container's).
    fn judge_output(cgroup: &ContainerCgroup, init: &ContainerProcess, since: SystemTime) -> Option<Verdict> {
        let execs_pipe = |pipe: &(u64, u64)| cgroup.runtime_pipes.contains(pipe) && !init.stdio_pipes.contains(pipe);
        let holders: Vec<ContainerProcess> = cgroup
            .processes
            .iter()
            .filter(|p| p.pid != init.pid && p.started >= since && !matches!(p.state, 'Z' | 'X'))
            .filter(|p| p.stdio_pipes.iter().any(execs_pipe))
            .take(TREE_MAX)
            .cloned()
            .collect();
        (!holders.is_empty()).then_some(Verdict::HookOutputHeld { holders })
    }

    /// A sidecar not signalled, while main containers of its pod run.
    fn judge_sidecar(&self, cgroup: &ContainerCgroup, mains: &[(String, Option<Holding>)]) -> Option<Verdict> {
        let init = init_of(cgroup)?;
        if self.sigterm_of(init).is_some() {
            return None;
        }
        let waits_for: Vec<(String, Holding)> =
            mains.iter().filter_map(|(name, holding)| Some((name.clone(), holding.clone()?))).collect();
        (!waits_for.is_empty()).then(|| Verdict::SidecarWaiting { init: init.clone(), waits_for })
    }

    /// Every verdict on pod `pod`'s containers, with the container each is of.
    fn judge_pod(
        &mut self,
        pod: &PodUid,
        node: &mut dyn NodeInspector,
        now: SystemTime,
    ) -> Vec<(ShutdownContainer, Verdict)> {
        let Some(shutdown) = self.shutdowns.get(pod).cloned() else { return Vec::new() };
        let mut verdicts = Vec::new();
        let mut mains = Vec::new();
        let mut sidecars = Vec::new();
        for c in shutdown.containers.iter().filter(|c| c.running) {
            let Some(cgroup) = self.cgroup_of(c, node, now) else { continue };
            if c.sidecar {
                sidecars.push((c.clone(), cgroup));
                continue;
            }
            let init = init_of(&cgroup);
            let verdict = init.and_then(|init| self.judge_hook(&shutdown, c, (&cgroup, init)));
            let holding = match (&verdict, init) {
                (Some(Verdict::HookRunning { tree, .. }), _) => Some(Holding::Hook(tree[0].pid)),
                (Some(Verdict::HookOutputHeld { holders }), _) => Some(Holding::HookOutput(holders[0].pid)),
                (_, Some(init)) => Some(self.sigterm_of(init).map_or(Holding::Running, Holding::SigtermAt)),
                (_, None) => None,
            };
            mains.push((c.name.clone(), holding));
            verdicts.extend(verdict.map(|v| (c.clone(), v)));
        }
        for (c, cgroup) in sidecars {
            verdicts.extend(self.judge_sidecar(&cgroup, &mains).map(|v| (c, v)));
        }
        verdicts
    }

    fn tell(&self, pod: &PodUid, c: &ShutdownContainer, verdict: &Verdict, now: SystemTime) -> Finding {
        let shutdown = &self.shutdowns[pod];
        let (kind, first) = match verdict {
            Verdict::HookRunning { tree: first, .. } | Verdict::HookOutputHeld { holders: first } => {
                (Kind::PrestopHookRunning, first[0].started)
            }
            Verdict::SidecarWaiting { .. } => (Kind::SidecarWaiting, shutdown.deleted_at.unwrap_or(now)),
        };
        let mut f = Finding::new(kind, &format!("{pod}/{}", c.name), Severity::Info, first);
        f.last_seen = now;
        f.pod_uid = Some(pod.clone());
        f.pods = vec![pod.clone()];
        f.detail("container", c.name.clone());
        if let Some(id) = &c.id {
            f.detail("container_id", id.as_str());
        }
        let left = shutdown.grace_ends.duration_since(now).map(human_duration);
        let grace_words = match (shutdown.deleted_at, left) {
            (Some(at), Ok(left)) => format!(
                "of its grace period of {} ({left} left)",
                human_duration(shutdown.grace_ends.duration_since(at).unwrap_or_default())
            ),
            (_, Ok(left)) => format!("of its grace period ({left} left)"),
            (_, Err(_)) => "and its grace period is over".to_string(),
        };
        f.evidence(
            "api",
            format!(
                "the pod is being deleted{}; its grace period ends at {}",
                shutdown
                    .deleted_at
                    .map(|at| format!(" since {}", crate::words::rfc3339_seconds(at)))
                    .unwrap_or_default(),
                crate::words::rfc3339_seconds(shutdown.grace_ends)
            ),
        );
        match verdict {
            Verdict::HookRunning { tree, as_the_spec_says } => {
                let sidecars: Vec<&str> =
                    shutdown.containers.iter().filter(|s| s.sidecar && s.running).map(|s| s.name.as_str()).collect();
                Self::tell_hook(&mut f, (c, &sidecars), tree, *as_the_spec_says, &grace_words, now)
            }
            Verdict::HookOutputHeld { holders } => Self::tell_output(&mut f, c, holders, &grace_words, now),
            Verdict::SidecarWaiting { init, waits_for } => self.tell_sidecar(&mut f, c, init, waits_for, now),
        }
        f
    }

    fn tell_hook(
        f: &mut Finding,
        (c, sidecars): (&ShutdownContainer, &[&str]),
        tree: &[ContainerProcess],
        as_the_spec_says: bool,
        grace_words: &str,
        now: SystemTime,
    ) {
        let hook = &tree[0];
        let ran = Self::hook_head(f, c, hook, now);
        f.confidence = if as_the_spec_says { Confidence::Confirmed } else { Confidence::Likely };
        let command = hook.argv.join(" ");
        f.evidence(
            format!("/proc/{}", hook.pid),
            format!(
                "{} (pid {}) in container {}'s cgroup, started {} ago by pid {} outside the container (the runtime: an exec), since the deletion; its command line: {command}",
                hook.comm,
                hook.pid,
                c.name,
                human_duration(ran),
                hook.ppid
            ),
        );
        if !as_the_spec_says {
            f.evidence("api", format!("the spec's preStop hook: {}", c.prestop.clone().unwrap_or_default().join(" ")));
        }
        for p in &tree[1..] {
            f.evidence(
                format!("/proc/{}", p.pid),
                format!("{} (pid {}) started by the hook, {}", p.comm, p.pid, state_words(p.state)),
            );
        }
        let which = if as_the_spec_says {
            "its preStop hook"
        } else {
            "what looks like its preStop hook (an exec since the deletion; its command is not the spec's)"
        };
        let sidecar_words = match sidecars.is_empty() {
            true => String::new(),
            false => format!(" The pod's sidecar(s) {} are stopped only after {} ends.", sidecars.join(", "), c.name),
        };
        f.summary = format!(
            "Container {} has not been sent SIGTERM: {which}, {} (pid {}), has run {} {grace_words}, and kubelet sends SIGTERM only once the hook returns or the grace period is spent.{sidecar_words}",
            c.name,
            hook.comm,
            hook.pid,
            human_duration(ran)
        );
        f.fix = kill_each(tree);
        f.advice.push(format!(
            "the kill fails the hook: kubelet records FailedPreStopHook and sends {} SIGTERM at once, with what is left of the grace period (at least 2 s); whatever the hook was to do (drain connections, deregister, flush) is cut short",
            c.name
        ));
        f.advice.push("for good: bound the hook (a timeout in its command), or give the pod the terminationGracePeriodSeconds the hook needs; kubelet lets a hook run at most the grace period".into());
    }

    /// What a hook's finding says of its first process (the hook, or what
    /// holds its output): a warning once it has run [`HOOK_LONG`], its pid
    /// and start, the spec's hook command. How long it has run.
    fn hook_head(f: &mut Finding, c: &ShutdownContainer, first: &ContainerProcess, now: SystemTime) -> Duration {
        let ran = now.duration_since(first.started).unwrap_or_default();
        f.severity = if ran >= HOOK_LONG { Severity::Warning } else { Severity::Info };
        f.detail("pid", first.pid);
        f.detail("start", first.start);
        f.detail("hook_command", c.prestop.clone().unwrap_or_default());
        ran
    }

    fn tell_output(
        f: &mut Finding,
        c: &ShutdownContainer,
        holders: &[ContainerProcess],
        grace_words: &str,
        now: SystemTime,
    ) {
        let first = &holders[0];
        Self::hook_head(f, c, first, now);
        f.confidence = Confidence::Likely;
        for p in holders {
            f.evidence(
                format!("/proc/{}/fd", p.pid),
                format!(
                    "{} (pid {}), started {} ago since the deletion, {}: its stdio is a pipe the runtime (the parent of the container's init) reads and the init does not hold; its command line: {}",
                    p.comm,
                    p.pid,
                    human_duration(now.duration_since(p.started).unwrap_or_default()),
                    state_words(p.state),
                    p.argv.join(" ")
                ),
            );
        }
        f.summary = format!(
            "Container {} has not been sent SIGTERM: no exec of its preStop hook runs any more, but {} (pid {}), started since the deletion, still holds an exec's output open (what a hook that starts something in the background leaves), and the runtime waits for every writer to close it before it reports the exec done (containerd waits for ever unless drain_exec_sync_io_timeout is set); kubelet waits on the hook for up to the rest {grace_words}.",
            c.name, first.comm, first.pid
        );
        f.fix = kill_each(holders);
        f.advice.push(format!(
            "the kill closes the hook's output: the runtime reports the hook done, and kubelet sends {} SIGTERM with what is left of the grace period",
            c.name
        ));
        f.advice.push("for good: a hook that starts something in the background closes its output for it (`cmd >/dev/null 2>&1 &`); containerd's `drain_exec_sync_io_timeout` (its CRI plugin's configuration) bounds the wait".into());
    }

    fn tell_sidecar(
        &self,
        f: &mut Finding,
        c: &ShutdownContainer,
        init: &ContainerProcess,
        waits_for: &[(String, Holding)],
        now: SystemTime,
    ) {
        f.confidence = Confidence::Likely;
        f.detail("pid", init.pid);
        f.detail("start", init.start);
        let since = self.watching_since.unwrap_or(now);
        f.evidence(
            "signal_generate",
            format!(
                "no SIGTERM to {} (pid {}) seen since podstuck began watching at {}",
                init.comm,
                init.pid,
                crate::words::rfc3339_seconds(since)
            ),
        );
        let held: Vec<String> = waits_for
            .iter()
            .map(|(name, holding)| match holding {
                Holding::Hook(pid) => format!("{name}, whose preStop hook runs (pid {pid})"),
                Holding::HookOutput(pid) => format!("{name}, whose preStop hook's output pid {pid} holds open"),
                Holding::SigtermAt(at) => format!(
                    "{name}, which got SIGTERM {} ago",
                    human_duration(now.duration_since(*at).unwrap_or_default())
                ),
                Holding::Running => name.clone(),
            })
            .collect();
        let waits: Vec<serde_json::Value> = waits_for
            .iter()
            .map(|(name, holding)| match holding {
                Holding::Hook(pid) => serde_json::json!({"container": name, "holding": "prestop-hook", "pid": pid}),
                Holding::HookOutput(pid) => {
                    serde_json::json!({"container": name, "holding": "prestop-hook-output", "pid": pid})
                }
                Holding::SigtermAt(_) => serde_json::json!({"container": name, "holding": "sigterm"}),
                Holding::Running => serde_json::json!({"container": name, "holding": "running"}),
            })
            .collect();
        f.detail("waits_for", waits);
        f.summary = format!(
            "Sidecar {} has not been sent SIGTERM: kubelet stops sidecars (restartable init containers) only after every main container has ended, and these still run: {}.",
            c.name,
            held.join("; ")
        );
        f.advice.push(format!(
            "nothing to do to {} itself: it ends once the main containers do; act on what holds them (podstuck's finding on {})",
            c.name,
            waits_for.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
}

impl Detector for PrestopHookRunning {
    fn lifecycle(&mut self, event: &LifecycleEvent, identity: &LifecycleIdentity) {
        match &event.what {
            Lifecycle::Signal(sent) if sent.sig == libc::SIGTERM => {
                // A pod's own process signalling its own is no shutdown.
                let from_outside = identity.pod_uid.is_some() && identity.sender_pod != identity.pod_uid;
                if !from_outside {
                    return;
                }
                self.sigterms.add(sent.target_pid, identity.target_start, event.time);
            }
            Lifecycle::Exit { .. } => self.sigterms.exited(event.pid, event.start),
            _ => {}
        }
    }

    fn shutdowns(&mut self, shutdowns: &BTreeMap<PodUid, PodShutdown>) {
        self.shutdowns.clone_from(shutdowns);
    }

    fn review(&mut self, review: &mut Review<'_>) -> Vec<Finding> {
        let now = review.now;
        self.watching_since.get_or_insert(now);
        // Kept only as long as it says something: the map stays as small as the pods followed.
        self.not_found.retain(|_, at| now.duration_since(*at).unwrap_or_default() < NOT_FOUND_AGAIN);
        let pods: Vec<PodUid> = self.shutdowns.keys().cloned().collect();
        let mut told = Vec::new();
        let mut seen = BTreeMap::new();
        for pod in &pods {
            for (c, verdict) in self.judge_pod(pod, review.node, now) {
                let mut f = self.tell(pod, &c, &verdict, now);
                if let Some(before) = self.active.get(&f.id) {
                    f.first_seen = before.first_seen.min(f.first_seen);
                }
                seen.insert(f.id.clone(), f.clone());
                told.push(f);
            }
        }
        for (id, mut f) in std::mem::take(&mut self.active) {
            if !seen.contains_key(&id) {
                f.status = Status::Resolved;
                f.last_seen = now;
                told.push(f);
            }
        }
        self.active = seen;
        told
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::fake::{pod, FakeNode};
    use crate::diagnose::signalled::tests::{self as fixtures, sender};
    use crate::diagnose::signalled::FOLLOWED_MAX;
    use crate::identify::actor::Role;
    use crate::lifecycle::SignalResult;
    use crate::pod::ContainerId;

    const HOOK: [&str; 3] = ["sh", "-c", "sleep 3600"];

    /// The deletion's moment, seconds into the fake clock: the times below
    /// are relative to it.
    const DELETED: f64 = 1000.0;

    fn t(secs: f64) -> SystemTime {
        crate::diagnose::fake::t(DELETED + secs)
    }

    fn id(n: u8) -> ContainerId {
        ContainerId::parse(&format!("{n:02x}").repeat(32)).unwrap()
    }

    /// A process of a container, started `at` seconds (start ticks 100 a second).
    fn process(pid: u32, ppid: u32, outside: bool, at: f64, argv: &[&str]) -> ContainerProcess {
        ContainerProcess {
            pid,
            start: ((DELETED + at) * 100.0) as u64,
            started: t(at),
            ppid,
            comm: argv.first().map_or("?", |a| a.rsplit('/').next().unwrap()).to_string(),
            state: 'S',
            parent_outside: outside,
            stdio_pipes: vec![],
            argv: argv.iter().map(|a| a.to_string()).collect(),
        }
    }

    fn cgroup(processes: Vec<ContainerProcess>) -> ContainerCgroup {
        ContainerCgroup { dir: b"/sys/fs/cgroup/kubepods/pod/c".to_vec(), processes, runtime_pipes: vec![] }
    }

    /// Deleted at 0 s with a 300 s grace period: `app` (a preStop exec
    /// hook) and the sidecar `proxy`, both running.
    fn shutdown() -> BTreeMap<PodUid, PodShutdown> {
        let hook: Vec<String> = HOOK.iter().map(|w| w.to_string()).collect();
        let containers = vec![
            ShutdownContainer::new("proxy", Some(id(2)), true, true),
            ShutdownContainer::new("app", Some(id(1)), false, true).with_prestop(&hook),
        ];
        BTreeMap::from([(pod(), PodShutdown { grace_ends: t(300.0), deleted_at: Some(t(0.0)), containers })])
    }

    /// app: its init (started long before), and the hook exec'd at `hook_at`
    /// with `argv`, a child of the shim (pid 50); proxy: its init.
    fn node(hook: Option<(f64, &[&str])>) -> FakeNode {
        let mut app = vec![process(700, 50, true, -600.0, &["/app"])];
        if let Some((at, argv)) = hook {
            app.push(process(900, 50, true, at, argv));
            app.push(process(901, 900, false, at + 0.01, &["sleep", "3600"]));
        }
        let proxy = cgroup(vec![process(800, 51, true, -600.0, &["/proxy"])]);
        FakeNode { containers: vec![(id(1), cgroup(app)), (id(2), proxy)], ..Default::default() }
    }

    fn review(d: &mut PrestopHookRunning, node: &mut FakeNode, at: f64) -> Vec<Finding> {
        d.review(&mut Review { now: t(at), in_flight: &[], node })
    }

    fn of(told: &[Finding], kind: Kind) -> Vec<&Finding> {
        told.iter().filter(|f| f.kind == kind).collect()
    }

    fn sigterm(d: &mut PrestopHookRunning, at: f64, target: u32, start: u64) {
        let mut shim = sender("containerd-shim", "systemd", Role::Shim);
        shim.target_start = Some(ProcessStart(start));
        d.lifecycle(
            &fixtures::signal(
                DELETED + at,
                (50, "containerd-shim"),
                libc::SIGTERM,
                SignalResult::Delivered,
                (target, "x"),
            ),
            &shim,
        );
    }

    #[test]
    fn the_hook_exec_d_since_the_deletion_holds_the_container_and_its_sidecar() {
        let mut d = PrestopHookRunning::default();
        d.shutdowns(&shutdown());
        let mut node = node(Some((1.0, &HOOK)));
        let told = review(&mut d, &mut node, 61.0);
        let hook = of(&told, Kind::PrestopHookRunning);
        assert_eq!(hook.len(), 1, "{told:#?}");
        let f = hook[0];
        assert_eq!(f.confidence, Confidence::Confirmed, "its command is the spec's");
        assert_eq!(f.severity, Severity::Warning, "a minute is long for a hook");
        assert_eq!(f.details["pid"], 900);
        assert!(f.summary.contains("Container app has not been sent SIGTERM"), "{}", f.summary);
        assert!(f.summary.contains("has run 1m00s of its grace period of 5m00s (3m59s left)"), "{}", f.summary);
        assert!(f.summary.contains("sidecar(s) proxy are stopped only after app ends"), "{}", f.summary);
        // The hook and what it started, each checked by its start.
        assert_eq!(
            f.fix,
            format!(
                "{} && {}",
                kill_if_same("KILL", 900, Some(ProcessStart(100_100))).unwrap(),
                kill_if_same("KILL", 901, Some(ProcessStart(100_101))).unwrap()
            )
        );
        let sidecar = of(&told, Kind::SidecarWaiting);
        assert_eq!(sidecar.len(), 1, "{told:#?}");
        assert_eq!(sidecar[0].details["pid"], 800);
        assert!(
            sidecar[0].summary.contains("these still run: app, whose preStop hook runs (pid 900)."),
            "{}",
            sidecar[0].summary
        );
        assert!(sidecar[0].fix.is_empty(), "a sidecar waiting has no fix of its own");
        assert_eq!(sidecar[0].severity, Severity::Info);
    }

    #[test]
    fn a_short_hook_is_info_and_an_exec_that_is_not_the_specs_is_only_likely() {
        let mut d = PrestopHookRunning::default();
        d.shutdowns(&shutdown());
        let told = review(&mut d, &mut node(Some((1.0, &HOOK))), 6.0);
        assert_eq!(of(&told, Kind::PrestopHookRunning)[0].severity, Severity::Info);
        let mut d = PrestopHookRunning::default();
        d.shutdowns(&shutdown());
        let told = review(&mut d, &mut node(Some((1.0, &["bash"]))), 61.0);
        let f = of(&told, Kind::PrestopHookRunning)[0];
        assert_eq!(f.confidence, Confidence::Likely);
        assert!(f.summary.contains("what looks like its preStop hook"), "{}", f.summary);
    }

    #[test]
    fn near_misses_tell_nothing() {
        // An exec from before the deletion (a kubectl exec session).
        let mut d = PrestopHookRunning::default();
        d.shutdowns(&shutdown());
        assert!(of(&review(&mut d, &mut node(Some((-30.0, &HOOK))), 61.0), Kind::PrestopHookRunning).is_empty());
        // No exec at all: nothing runs the hook (it ended); the sidecar
        // waits for app, which runs.
        let mut d = PrestopHookRunning::default();
        d.shutdowns(&shutdown());
        let told = review(&mut d, &mut node(None), 61.0);
        assert!(of(&told, Kind::PrestopHookRunning).is_empty());
        assert!(of(&told, Kind::SidecarWaiting)[0].summary.contains("these still run: app."));
        // The pod is not being deleted: the API said nothing of it.
        let mut d = PrestopHookRunning::default();
        assert!(review(&mut d, &mut node(Some((1.0, &HOOK))), 61.0).is_empty());
        // A container without a hook: an exec into it is no hook.
        let mut d = PrestopHookRunning::default();
        let mut s = shutdown();
        s.get_mut(&pod()).unwrap().containers[1].prestop = None;
        d.shutdowns(&s);
        assert!(of(&review(&mut d, &mut node(Some((1.0, &HOOK))), 61.0), Kind::PrestopHookRunning).is_empty());
        // app's init got SIGTERM: the hook is over, the sidecar waits for
        // app's process to end, and says so.
        let mut d = PrestopHookRunning::default();
        d.shutdowns(&shutdown());
        sigterm(&mut d, 40.0, 700, 40_000);
        let told = review(&mut d, &mut node(Some((1.0, &HOOK))), 61.0);
        assert!(of(&told, Kind::PrestopHookRunning).is_empty(), "{told:#?}");
        let waiting = &of(&told, Kind::SidecarWaiting)[0].summary;
        assert!(waiting.contains("these still run: app, which got SIGTERM 21 s ago."), "{waiting}");
        // The sidecar got SIGTERM: it is signalled, nothing of it here.
        sigterm(&mut d, 50.0, 800, 40_000);
        let told = review(&mut d, &mut node(None), 62.0);
        assert!(of(&told, Kind::SidecarWaiting).iter().all(|f| f.status == Status::Resolved), "{told:#?}");
    }

    /// The hook returned, and the sleep it left in the background (now a
    /// child of the container's init) holds the exec's pipe the runtime
    /// reads: named, with its kill; a child holding only the init's own
    /// output, or one from before the deletion, is nothing.
    #[test]
    fn a_process_the_hook_left_holding_its_output_keeps_the_hook_from_ending() {
        let with = |pipe: (u64, u64), at: f64| {
            let mut node = node(None);
            let app = &mut node.containers.iter_mut().find(|(c, _)| *c == id(1)).unwrap().1;
            app.processes[0].stdio_pipes = vec![(9, 1)];
            let mut orphan = process(901, 700, false, at, &["sleep", "3600"]);
            orphan.stdio_pipes = vec![(9, 1), pipe];
            app.processes.push(orphan);
            app.runtime_pipes = vec![(9, 1), (9, 2)];
            let mut d = PrestopHookRunning::default();
            d.shutdowns(&shutdown());
            review(&mut d, &mut node, 61.0)
        };
        let told = with((9, 2), 1.0);
        let f = of(&told, Kind::PrestopHookRunning)[0];
        assert_eq!(f.details["pid"], 901);
        assert_eq!(f.confidence, Confidence::Likely);
        assert!(f.summary.contains("still holds an exec's output open"), "{}", f.summary);
        assert_eq!(f.fix, kill_if_same("KILL", 901, Some(ProcessStart(100_100))).unwrap());
        let sidecar = &of(&told, Kind::SidecarWaiting)[0].summary;
        assert!(sidecar.contains("app, whose preStop hook's output pid 901 holds open"), "{sidecar}");
        assert!(of(&with((9, 1), 1.0), Kind::PrestopHookRunning).is_empty(), "the init's own output");
        assert!(of(&with((9, 3), 1.0), Kind::PrestopHookRunning).is_empty(), "no pipe of the runtime's");
        assert!(of(&with((9, 2), -30.0), Kind::PrestopHookRunning).is_empty(), "from before the deletion");
    }

    /// The pod's own process, started by its init after the deletion with
    /// the hook's very command line: no exec of the runtime's, no hook.
    #[test]
    fn a_process_of_the_container_that_claims_the_hooks_command_is_no_hook() {
        let mut d = PrestopHookRunning::default();
        d.shutdowns(&shutdown());
        let mut node = node(None);
        let app = &mut node.containers.iter_mut().find(|(c, _)| *c == id(1)).unwrap().1;
        app.processes.push(process(905, 700, false, 1.0, &HOOK));
        let told = review(&mut d, &mut node, 61.0);
        assert!(of(&told, Kind::PrestopHookRunning).is_empty(), "{told:#?}");
    }

    #[test]
    fn a_reused_pid_is_no_sigterm_and_a_pods_own_signal_is_none_either() {
        let mut d = PrestopHookRunning::default();
        d.shutdowns(&shutdown());
        // SIGTERM to an earlier process that had pid 700.
        sigterm(&mut d, 40.0, 700, 7);
        // app's own process signalling its own init.
        let own = LifecycleIdentity { sender_pod: Some(pod()), ..sender("app", "app", Role::Other) };
        d.lifecycle(
            &fixtures::signal(DELETED + 41.0, (701, "app"), libc::SIGTERM, SignalResult::Delivered, (800, "x")),
            &own,
        );
        let told = review(&mut d, &mut node(Some((1.0, &HOOK))), 61.0);
        assert_eq!(of(&told, Kind::PrestopHookRunning).len(), 1, "{told:#?}");
        assert_eq!(of(&told, Kind::SidecarWaiting).len(), 1, "{told:#?}");
    }

    #[test]
    fn the_hooks_end_resolves_both_and_a_missing_container_is_searched_for_again_later() {
        let mut d = PrestopHookRunning::default();
        d.shutdowns(&shutdown());
        assert_eq!(review(&mut d, &mut node(Some((1.0, &HOOK))), 61.0).len(), 2);
        // The hook was killed and app ended: its cgroup is gone.
        let mut gone = node(None);
        gone.containers.retain(|(c, _)| *c != id(1));
        let told = review(&mut d, &mut gone, 62.0);
        assert_eq!(told.len(), 2, "{told:#?}");
        assert!(told.iter().all(|f| f.status == Status::Resolved), "{told:#?}");
        assert!(review(&mut d, &mut gone, 63.0).is_empty(), "told once");
        assert!(d.not_found.contains_key(id(1).as_str()));
        // Not asked again before NOT_FOUND_AGAIN: the fake would answer it.
        let mut back = node(Some((1.0, &HOOK)));
        assert!(of(&review(&mut d, &mut back, 64.0), Kind::PrestopHookRunning).is_empty());
        assert_eq!(of(&review(&mut d, &mut back, 73.0), Kind::PrestopHookRunning).len(), 1);
        // The pod gone from the API: what was told ends.
        d.shutdowns(&BTreeMap::new());
        assert!(review(&mut d, &mut back, 74.0).iter().all(|f| f.status == Status::Resolved));
        // What was not found is forgotten in time: nothing is kept of a pod the API no longer names.
        d.not_found.insert("x".into(), t(74.0));
        assert!(review(&mut d, &mut back, 75.0 + NOT_FOUND_AGAIN.as_secs_f64()).is_empty());
        assert!(d.not_found.is_empty() && d.active.is_empty());
    }

    #[test]
    fn what_is_kept_is_bounded() {
        let mut d = PrestopHookRunning::default();
        for pid in 0..(FOLLOWED_MAX as u32 + 10) {
            sigterm(&mut d, pid as f64, 10_000 + pid, 1);
        }
        assert_eq!(d.sigterms.count(), FOLLOWED_MAX);
        assert!(d.sigterms.when(10_000, None).is_none(), "the oldest forgotten");
        d.lifecycle(&fixtures::exit(2000.0, 10_500, "x"), &sender("x", "x", Role::Other));
        assert!(d.sigterms.when(10_500, None).is_none(), "forgotten at its exit");
    }
}
