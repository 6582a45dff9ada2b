//! P12, sandbox-teardown-failing: the runtime runs the pod's CNI plugin
//! with `CNI_COMMAND=DEL` to tear its network down, the plugin fails, and
//! the runtime (for kubelet's `KillPodSandbox`) tries again on its sync
//! rhythm, for as long as it takes. No removal ever fails, so nothing else
//! in podstuck sees it. Seen here as the plugin's exec (its `CNI_*`
//! variables name the sandbox and the pod) and its exit status; a plugin
//! run by a plugin (an IPAM plugin such as host-local, a chained one) is
//! told as the outer one's cause. `ADD` and `CHECK` runs are not this.

mod plugin_said;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::shell::{files_naming, no_sandbox_removal, remove_sandbox, runtime_log, word};
use super::{human_duration, rhythm, Confidence, Detector, Finding, FindingActor, Kind, Review, Severity, Status};
use crate::event::ProcessStart;
use crate::identify::pod::PodUid;
use crate::identify::Actor;
use crate::identify::LifecycleIdentity;
use crate::lifecycle::{status_words, CniRun, Lifecycle, LifecycleEvent, PluginWrote};
use plugin_said::{Hint, PluginSaid};

/// DEL runs waiting for their exit, at most (a plugin lives milliseconds).
const RUNS_MAX: usize = 1024;
/// Sandboxes followed at most; past this the quietest are forgotten.
const SANDBOXES_MAX: usize = 256;
/// Failed runs in a row before it is told: one failure may be a restart.
const FAILURES_TOLD: u64 = 2;
/// Attempt times kept per sandbox, for the rhythm.
const TIMES_KEPT: usize = 16;
/// A sandbox nobody has tried to tear down for this long is forgotten
/// (the pod was force-deleted, or the node's runtime gave up).
const FORGET_AFTER: Duration = Duration::from_secs(30 * 60);

/// A DEL run between its exec and its exit.
struct Run {
    /// When its process started: with its pid, the run.
    start: Option<ProcessStart>,
    /// When it was seen, to forget the oldest first.
    seen: SystemTime,
    plugin: String,
    path: Vec<u8>,
    cni: CniRun,
    pod: Option<PodUid>,
    actor: Actor,
    /// The run of the plugin that exec'd this one (its IPAM or chained
    /// plugin), if any.
    outer: Option<u32>,
    /// The plugins this run ran that failed, with their status.
    inner: BTreeMap<String, i32>,
    /// What it wrote on its stdout (read only while a DEL is failing).
    said: Option<PluginSaid>,
}

/// One sandbox's teardown, as its DEL runs went.
struct Sandbox {
    pod: Option<PodUid>,
    cni: CniRun,
    plugin: String,
    path: Vec<u8>,
    actor: Actor,
    pid: u32,
    /// Failed runs since the last success.
    failures: u64,
    last_status: i32,
    /// Plugins run by the outer one that failed too, with their status.
    inner: BTreeMap<String, i32>,
    /// What the outer plugin said of its latest failure that said any.
    said: Option<PluginSaid>,
    times: Vec<SystemTime>,
    first_seen: SystemTime,
    last_seen: SystemTime,
    /// A DEL succeeded after the failures: told once as resolved.
    succeeded: bool,
    told_resolved: bool,
}

pub struct SandboxTeardownFailing {
    runs: BTreeMap<u32, Run>,
    sandboxes: BTreeMap<String, Sandbox>,
    /// This node's name, for the daemon pod to restart.
    node_name: String,
    /// A failing DEL made a sandbox's failures enough to tell, or ended
    /// them: told at the next review, asked for at once.
    news: bool,
}

impl SandboxTeardownFailing {
    pub fn new(node_name: String) -> SandboxTeardownFailing {
        SandboxTeardownFailing { runs: BTreeMap::new(), sandboxes: BTreeMap::new(), node_name, news: false }
    }
}

/// The daemon behind a CNI plugin that has one, and how to restart the
/// node's.
#[derive(Debug, PartialEq, Eq)]
pub struct Daemon {
    /// The plugin's file name.
    plugin: &'static str,
    /// The daemon's executable's file name, to see it running.
    exe: &'static str,
    namespace: &'static str,
    selector: &'static str,
    what: &'static str,
    /// What restarting it interrupts on the node.
    interrupts: &'static str,
}

const DAEMONS: [Daemon; 6] = [
    Daemon {
        plugin: "calico",
        exe: "calico-node",
        namespace: "kube-system",
        selector: "k8s-app=calico-node",
        what: "calico-node",
        interrupts: "while it restarts (a minute or so) no pod on this node is set up or torn down, and policy and route updates for the node wait; pods running keep their network",
    },
    Daemon {
        plugin: "cilium-cni",
        exe: "cilium-agent",
        namespace: "kube-system",
        selector: "k8s-app=cilium",
        what: "the cilium agent",
        interrupts: "while it restarts no pod on this node is set up or torn down and policy updates wait; the datapath keeps forwarding for pods running",
    },
    Daemon {
        plugin: "flannel",
        exe: "flanneld",
        namespace: "kube-flannel",
        selector: "app=flannel",
        what: "flanneld",
        interrupts: "while it restarts no pod on this node is set up and routes to nodes added meanwhile wait; pods running keep their network",
    },
    Daemon {
        plugin: "aws-cni",
        exe: "aws-k8s-agent",
        namespace: "kube-system",
        selector: "k8s-app=aws-node",
        what: "aws-node (ipamd)",
        interrupts: "while it restarts no pod on this node gets or gives back an IP address; pods running keep theirs",
    },
    Daemon {
        plugin: "weave-net",
        exe: "weaver",
        namespace: "kube-system",
        selector: "name=weave-net",
        what: "weave",
        interrupts: "while it restarts no pod on this node is set up or torn down, and traffic between nodes through weave pauses",
    },
    Daemon {
        plugin: "azure-vnet",
        exe: "azure-cns",
        namespace: "kube-system",
        selector: "k8s-app=azure-cns",
        what: "azure-cns",
        interrupts: "while it restarts no pod on this node gets or gives back an IP address; pods running keep theirs",
    },
];

/// Where runtimes create the network namespaces they hand their plugins
/// (containerd and CRI-O: `/var/run/netns`; dockerd: `.../docker/netns`).
const NETNS_DIRS: [&str; 4] = ["/var/run/netns/", "/run/netns/", "/var/run/docker/netns/", "/run/docker/netns/"];

fn base_name(path: &[u8]) -> String {
    let name = path.rsplit(|b| *b == b'/').next().unwrap_or(path);
    crate::words::safe_text(name)
}

impl SandboxTeardownFailing {
    fn exec(&mut self, event: &LifecycleEvent, identity: &LifecycleIdentity, filename: &[u8], cni: &CniRun) {
        if cni.command != "DEL" {
            return;
        }
        if self.runs.len() >= RUNS_MAX {
            let oldest = self.runs.iter().min_by_key(|(_, r)| r.seen).map(|(pid, _)| *pid);
            oldest.map(|pid| self.runs.remove(&pid));
        }
        let outer = self
            .runs
            .get(&event.ppid)
            .filter(|r| ProcessStart::may_be_same(r.start, event.parent_start))
            .map(|_| event.ppid);
        self.runs.insert(
            event.pid,
            Run {
                start: event.start,
                seen: event.time,
                plugin: base_name(filename),
                path: filename.to_vec(),
                cni: cni.clone(),
                pod: identity.pod_uid.clone(),
                actor: identity.actor.clone(),
                outer,
                inner: BTreeMap::new(),
                said: None,
            },
        );
    }

    /// A write of a plugin on its stdout: its words, if it is a DEL run
    /// (the same process, by its start) that has said nothing yet.
    fn wrote(&mut self, event: &LifecycleEvent, wrote: &PluginWrote) {
        let Some(run) = self.runs.get_mut(&event.pid).filter(|r| ProcessStart::may_be_same(r.start, event.start))
        else {
            return;
        };
        if run.said.is_none() {
            run.said = plugin_said::read(&wrote.bytes, wrote.total);
        }
    }

    fn exit(&mut self, event: &LifecycleEvent, status: Option<i32>) {
        if !self.runs.get(&event.pid).is_some_and(|r| ProcessStart::may_be_same(r.start, event.start)) {
            return;
        }
        let Some(run) = self.runs.remove(&event.pid) else { return };
        // Under lockdown the kernel reads no exit status: nothing to judge.
        let Some(status) = status else { return };
        if let Some(outer) = run.outer {
            // An IPAM or chained plugin, which exits before the plugin that
            // ran it: its failure is told as the outer run's cause.
            if let Some(outer) = self.runs.get_mut(&outer).filter(|_| status != 0) {
                outer.inner.insert(run.plugin, status);
            }
            return;
        }
        let key = run.cni.container_id.clone();
        if status == 0 {
            if let Some(sandbox) = self.sandboxes.get_mut(&key) {
                sandbox.succeeded = sandbox.failures >= FAILURES_TOLD;
                self.news |= sandbox.succeeded;
                sandbox.last_seen = event.time;
                if !sandbox.succeeded {
                    self.sandboxes.remove(&key);
                }
            }
            return;
        }
        if !self.sandboxes.contains_key(&key) && self.sandboxes.len() >= SANDBOXES_MAX {
            let quietest = self.sandboxes.iter().min_by_key(|(_, s)| s.last_seen).map(|(k, _)| k.clone());
            quietest.map(|k| self.sandboxes.remove(&k));
        }
        let sandbox = self.sandboxes.entry(key).or_insert_with(|| Sandbox {
            pod: run.pod.clone(),
            cni: run.cni.clone(),
            plugin: run.plugin.clone(),
            path: run.path.clone(),
            actor: run.actor.clone(),
            pid: event.pid,
            failures: 0,
            last_status: status,
            inner: BTreeMap::new(),
            said: None,
            times: Vec::new(),
            first_seen: event.time,
            last_seen: event.time,
            succeeded: false,
            told_resolved: false,
        });
        if sandbox.succeeded {
            // A new round of failures after a success: counted afresh.
            sandbox.failures = 0;
            sandbox.first_seen = event.time;
            sandbox.times.clear();
        }
        sandbox.failures += 1;
        // The failing DEL that proves it: its finding follows at once.
        self.news |= sandbox.failures == FAILURES_TOLD;
        sandbox.last_status = status;
        sandbox.pid = event.pid;
        sandbox.last_seen = event.time;
        sandbox.succeeded = false;
        sandbox.told_resolved = false;
        sandbox.inner.extend(run.inner);
        if run.said.is_some() {
            sandbox.said = run.said;
        }
        if sandbox.times.len() >= TIMES_KEPT {
            sandbox.times.remove(0);
        }
        sandbox.times.push(event.time);
    }

    fn finding(&self, sandbox: &Sandbox, key: &str, node: &mut dyn crate::inspect::NodeInspector) -> Finding {
        self.tell(sandbox, key, &judge(sandbox, node))
    }

    /// The verdict in words: the finding, its evidence, its fix.
    fn tell(&self, sandbox: &Sandbox, key: &str, verdict: &Verdict) -> Finding {
        let mut f = Finding::new(Kind::SandboxTeardownFailing, key, Severity::Critical, sandbox.first_seen);
        f.last_seen = sandbox.last_seen;
        f.pod_uid = sandbox.pod.clone();
        f.pods = sandbox.pod.iter().cloned().collect();
        f.actor = Some(FindingActor::of(sandbox.pid, &sandbox.actor));
        f.count = sandbox.failures;
        f.paths = vec![sandbox.path.clone()];
        let pod = match sandbox.cni.pod_words() {
            words if words.is_empty() => "a pod".to_string(),
            words => format!("pod {words}"),
        };
        let runtime = if sandbox.actor.parent.is_empty() { "the runtime".into() } else { sandbox.actor.parent.clone() };
        let inner: Vec<String> = sandbox
            .inner
            .iter()
            .map(|(plugin, status)| format!("{plugin} ({})", status_words(Some(*status))))
            .collect();
        let cause = match inner.is_empty() {
            true => String::new(),
            false => format!(", failing in the plugin it runs, {}", inner.join(", ")),
        };
        let rhythm = rhythm::recognise(&sandbox.times);
        f.rhythm = rhythm.map(|r| r.describe());
        let spread = sandbox.last_seen.duration_since(sandbox.first_seen).unwrap_or_default();
        let said = match &sandbox.said {
            Some(said) => format!(" It said: \"{}\".", said.text),
            None => String::new(),
        };
        f.summary = format!(
            "The network of {pod}'s sandbox cannot be torn down: {runtime} ran the CNI plugin {} with DEL {} times in {}, and it failed each time ({}{cause}).{said} Until a DEL succeeds, the sandbox stays and the pod stays Terminating.",
            sandbox.plugin,
            sandbox.failures,
            human_duration(spread),
            status_words(Some(sandbox.last_status)),
        );
        f.evidence(
            "exec",
            format!(
                "{} CNI_COMMAND=DEL CNI_CONTAINERID={} CNI_NETNS={} CNI_IFNAME={}",
                crate::words::escape_path(&sandbox.path),
                sandbox.cni.container_id,
                sandbox.cni.netns,
                sandbox.cni.ifname
            ),
        );
        f.evidence(
            "exit",
            format!(
                "{} {} time(s) in a row, the last {}",
                sandbox.plugin,
                sandbox.failures,
                status_words(Some(sandbox.last_status))
            ),
        );
        for line in &inner {
            f.evidence("exit", format!("run by {}: {line}", sandbox.plugin));
        }
        if let Some(said) = &sandbox.said {
            f.evidence("write", format!("{} wrote on its stdout: {}", sandbox.plugin, said.text));
            f.detail("plugin_said", said.text.clone());
            if let Some(hint) = said.hint {
                f.detail("plugin_said_kind", hint.name());
            }
        }
        f.confidence = verdict.confidence();
        match &verdict.netns {
            Netns::There => {
                f.evidence(
                    "statfs",
                    format!("the sandbox's network namespace {} is still there (nsfs)", sandbox.cni.netns),
                );
            }
            Netns::Gone(why) => {
                f.evidence("statfs", format!("the sandbox's network namespace {} is gone ({why}): a plugin that fails DEL on a missing namespace breaks the CNI spec, which asks DEL to succeed then", sandbox.cni.netns));
            }
            Netns::NoProof(why) => f.evidence("statfs", format!("{}: {why}", sandbox.cni.netns)),
        }
        f.detail("plugin", sandbox.plugin.clone());
        f.detail("sandbox", sandbox.cni.container_id.clone());
        f.detail("exit_code", (sandbox.last_status >> 8) & 0xff);
        f.detail("failures", sandbox.failures);
        self.fix(&mut f, sandbox, &verdict.remedy);
        f
    }

    /// The fix and the advice the remedy calls for; a sandbox id in a
    /// command only if it looks like one.
    fn fix(&self, f: &mut Finding, sandbox: &Sandbox, remedy: &Remedy) {
        let id = &sandbox.cni.container_id;
        let logs = runtime_log(id);
        if let Some(advice) =
            sandbox.said.as_ref().and_then(|s| s.hint).map(|h| hint_advice(h, sandbox, &self.node_name))
        {
            f.advice.push(advice);
        }
        match remedy {
            Remedy::RestartDaemon { daemon: d, running } => {
                f.fix = crate::words::CommandLine::new("kubectl -n")
                    .value(d.namespace)
                    .own("delete pod -l")
                    .value(d.selector)
                    .own("--field-selector")
                    .value(format!("spec.nodeName={}", self.node_name))
                    .into();
                let pids: Vec<String> = running.iter().map(u32::to_string).collect();
                f.evidence("/proc", format!("{} runs on this node (pid {})", d.exe, pids.join(", ")));
                f.advice.push(format!("{} answers the plugin's DEL: the command restarts this node's; {}. Check it first: kubectl -n {} get pods -l {} -o wide", d.what, d.interrupts, d.namespace, d.selector));
                f.advice.push(format!("the plugin's own error is in the runtime's log: {logs}"));
            }
            Remedy::DaemonNotRunning(d) | Remedy::DaemonUnconfirmed(d) => {
                f.fix = logs;
                let seen = match remedy {
                    Remedy::DaemonNotRunning(_) => {
                        format!("{} is not running on this node, which may be why DEL fails", d.exe)
                    }
                    _ => "the failure is not confirmed on the node".to_string(),
                };
                f.advice.push(format!("{} answers the plugin's DEL, and {seen}: kubectl -n {} get pods -l {} -o wide --field-selector spec.nodeName={} shows its pod", d.what, d.namespace, d.selector, self.node_name));
                f.advice.push("the runtime's log quotes the plugin's error (\"failed to destroy network for sandbox\"): fix what it names, and the next DEL succeeds".into());
            }
            Remedy::RuntimeLog { stale_host_local } => {
                f.fix = logs;
                f.advice.push(match &sandbox.said {
                    Some(_) => "fix what the plugin said, and the next DEL succeeds; the runtime's log has its whole error (\"failed to destroy network for sandbox\")".into(),
                    None => "the runtime's log quotes the plugin's error (\"failed to destroy network for sandbox\"): fix what it names, and the next DEL succeeds".into(),
                });
                if *stale_host_local {
                    f.advice.push(format!("host-local keeps its allocations as files under /var/lib/cni/networks/<network>/ (or its dataDir): the one naming {} is the stale entry to release ({}), and the directory must be a writable directory", word(id.as_bytes()), files_naming(id, "/var/lib/cni/networks")));
                }
            }
        }
        match remove_sandbox(id) {
            Some(rmp) => f.advice.push(format!("last resort, once the network is known gone: {rmp}")),
            None => f.evidence("exec", no_sandbox_removal(id)),
        }
    }
}

/// What to do about the failure the plugin's words name.
fn hint_advice(hint: Hint, sandbox: &Sandbox, node_name: &str) -> String {
    let daemon = DAEMONS.iter().find(|d| d.plugin == sandbox.plugin);
    let restart = match daemon {
        Some(d) => format!("restarting {} on this node makes it write a fresh one", d.what),
        None => "the plugin's node daemon writes a fresh one when it restarts".to_string(),
    };
    match hint {
        Hint::Unauthorized => format!("the plugin says the API server refuses its credentials: the token in its kubeconfig (for calico, /etc/cni/net.d/calico-kubeconfig) has expired or was revoked; {restart}"),
        Hint::NetnsGone => format!("the plugin fails on the sandbox's network namespace {}, which it cannot find (after a reboot, or the runtime's restart): the CNI spec asks DEL to succeed then, so a newer plugin release does; meanwhile removing the sandbox ends the retries", sandbox.cni.netns),
        Hint::AgentUnreachable => match daemon {
            Some(d) => format!("the plugin cannot reach its agent's socket: {} on this node is down or restarting (kubectl -n {} get pods -l {} -o wide --field-selector spec.nodeName={node_name})", d.what, d.namespace, d.selector),
            None => "the plugin cannot reach its agent's socket: the node agent it talks to (its DaemonSet's pod on this node) is down or restarting".to_string(),
        },
    }
}

/// What sandbox-teardown-failing decides of a sandbox whose DEL keeps
/// failing, before a word of it is said.
#[derive(Debug, PartialEq, Eq)]
pub struct Verdict {
    /// How the sandbox's network namespace stands: there, it proves the
    /// failure on the node.
    pub netns: Netns,
    /// What is to be done.
    pub remedy: Remedy,
}

impl Verdict {
    pub fn confidence(&self) -> Confidence {
        match self.netns {
            Netns::There => Confidence::Confirmed,
            Netns::Gone(_) | Netns::NoProof(_) => Confidence::Likely,
        }
    }
}

/// What is to be done about a failing DEL.
#[derive(Debug, PartialEq, Eq)]
pub enum Remedy {
    /// Restart the node's daemon that answers the plugin: only for a
    /// failure proven on the node with the daemon seen running here (its
    /// pids), since a restart interrupts the node's networking.
    RestartDaemon { daemon: &'static Daemon, running: Vec<u32> },
    /// The plugin's daemon is not running on this node.
    DaemonNotRunning(&'static Daemon),
    /// The daemon runs, but the failure is not proven on the node.
    DaemonUnconfirmed(&'static Daemon),
    /// A plugin of no daemon: the runtime's log says why; a host-local
    /// entry may be left to release.
    RuntimeLog { stale_host_local: bool },
}

/// Reads what proves the failure on the node (the sandbox's namespace,
/// the plugin's daemon running) and decides.
fn judge(sandbox: &Sandbox, node: &mut dyn crate::inspect::NodeInspector) -> Verdict {
    let netns = netns_standing(node, &sandbox.cni.netns);
    let remedy = match DAEMONS.iter().find(|d| d.plugin == sandbox.plugin) {
        Some(daemon) => {
            let running: Vec<u32> = node.processes_running(daemon.exe.as_bytes()).iter().map(|t| t.pid).collect();
            match (&netns, running.is_empty()) {
                (_, true) => Remedy::DaemonNotRunning(daemon),
                (Netns::There, false) => Remedy::RestartDaemon { daemon, running },
                _ => Remedy::DaemonUnconfirmed(daemon),
            }
        }
        None => Remedy::RuntimeLog { stale_host_local: sandbox.inner.contains_key("host-local") },
    };
    Verdict { netns, remedy }
}

/// How a sandbox's `CNI_NETNS` stands on the node.
#[derive(Debug, PartialEq, Eq)]
pub enum Netns {
    /// A network namespace (nsfs) where runtimes make them.
    There,
    /// Gone, and why.
    Gone(String),
    /// Something that proves nothing: a `/proc` path names whichever
    /// process has that pid now; a file that is no namespace; a place no
    /// runtime uses.
    NoProof(String),
}

fn netns_standing(node: &mut dyn crate::inspect::NodeInspector, netns: &str) -> Netns {
    if netns.is_empty() {
        return Netns::NoProof("no CNI_NETNS".into());
    }
    if netns.starts_with("/proc/") {
        return Netns::NoProof(
            "a /proc path names whichever process holds that pid now: no proof of the sandbox".into(),
        );
    }
    let in_netns_dir = |p: &[u8]| {
        !p.split(|b| *b == b'/').any(|c| c == b"..") && NETNS_DIRS.iter().any(|d| p.starts_with(d.as_bytes()))
    };
    if !in_netns_dir(netns.as_bytes()) {
        return Netns::NoProof("not where runtimes make network namespaces: no proof of the sandbox".into());
    }
    // `/var/run` is a link to `/run` on most nodes, and the node's read
    // follows no link: the node's own links are followed first, and
    // where they lead must still be where runtimes make namespaces.
    let resolved =
        node.resolved_path(crate::inspect::NODE_ROOT, netns.as_bytes()).unwrap_or_else(|_| netns.as_bytes().to_vec());
    if !in_netns_dir(&resolved) {
        return Netns::NoProof(format!(
            "a link to {}, not where runtimes make network namespaces: no proof of the sandbox",
            crate::words::safe_text(&resolved)
        ));
    }
    match node.fs_usage(&resolved, crate::inspect::NODE_ROOT) {
        Ok(usage) if usage.fstype == "nsfs" => Netns::There,
        Ok(usage) => Netns::NoProof(format!("a file on {}, not a network namespace", usage.fstype)),
        Err(why) if why.is_gone() => Netns::Gone(why.to_string()),
        Err(why) => Netns::NoProof(why.said()),
    }
}

impl Detector for SandboxTeardownFailing {
    fn wants_review(&self) -> bool {
        self.news
    }

    fn wants_plugin_words(&self) -> bool {
        self.sandboxes.values().any(|s| s.failures > 0 && !s.succeeded)
    }

    fn lifecycle(&mut self, event: &LifecycleEvent, identity: &LifecycleIdentity) {
        match &event.what {
            Lifecycle::Exec { filename, cni: Some(cni), .. } => self.exec(event, identity, filename, cni),
            Lifecycle::Exit { status, .. } => self.exit(event, *status),
            Lifecycle::PluginWrote(wrote) => self.wrote(event, wrote),
            _ => {}
        }
    }

    fn review(&mut self, review: &mut Review<'_>) -> Vec<Finding> {
        let mut out = Vec::new();
        let now = review.now;
        self.news = false;
        self.sandboxes.retain(|_, s| {
            let quiet = now.duration_since(s.last_seen).unwrap_or_default() >= FORGET_AFTER;
            !(quiet || s.told_resolved)
        });
        for (key, sandbox) in &self.sandboxes {
            if sandbox.succeeded {
                let mut f = self.finding(sandbox, key, review.node);
                f.status = Status::Resolved;
                out.push(f);
            } else if sandbox.failures >= FAILURES_TOLD {
                out.push(self.finding(sandbox, key, review.node));
            }
        }
        self.sandboxes.values_mut().filter(|s| s.succeeded).for_each(|s| s.told_resolved = true);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::fake::{pod, t, FakeNode};
    use crate::identify::actor::Role;

    const NETNS: &str = "/var/run/netns/cni-1";
    /// A sandbox id as runtimes make them: 64 lowercase hex digits.
    const SANDBOX_ID: &str = "abc1230000000000000000000000000000000000000000000000000000000000";

    fn plugin(comm: &str) -> LifecycleIdentity {
        let actor = Actor {
            comm: comm.into(),
            exe: None,
            parent: "containerd".into(),
            role: Role::Other,
            description: format!("{comm} (child of containerd)"),
        };
        let mut identity = LifecycleIdentity::of(Some(pod()), actor);
        identity.runner = Some("containerd".into());
        identity
    }

    /// The sandbox's network namespace, where containerd makes them.
    fn nsfs() -> crate::inspect::FsUsage {
        crate::inspect::FsUsage {
            fstype: "nsfs".into(),
            total_bytes: 0,
            free_bytes: 0,
            total_inodes: 0,
            free_inodes: 0,
            read_only: false,
        }
    }

    fn exec(at: f64, pid: u32, ppid: u32, name: &str, command: &str) -> LifecycleEvent {
        let cni = CniRun {
            command: command.into(),
            container_id: SANDBOX_ID.into(),
            netns: NETNS.into(),
            ifname: "eth0".into(),
            pod_uid: Some(pod()),
            pod_namespace: "shop".into(),
            pod_name: "web-0".into(),
        };
        LifecycleEvent {
            time: t(at),
            pid,
            start: Some(ProcessStart(u64::from(pid))),
            ppid,
            parent_start: Some(ProcessStart(u64::from(ppid))),
            comm: name.into(),
            cgroup_id: 0,
            v1_cgroup_id: 0,
            v1_hierarchy: 0,
            what: Lifecycle::Exec {
                filename: format!("/usr/lib/cni/{name}").into_bytes(),
                cni: Some(cni),
                file: podstuck_common::PluginFile::default(),
                mntns: 0,
                env_cut: false,
            },
        }
    }

    fn exit(at: f64, pid: u32, status: i32) -> LifecycleEvent {
        LifecycleEvent {
            time: t(at),
            pid,
            start: Some(ProcessStart(u64::from(pid))),
            ppid: 1,
            parent_start: None,
            comm: "x".into(),
            cgroup_id: 0,
            v1_cgroup_id: 0,
            v1_hierarchy: 0,
            what: Lifecycle::Exit { status: Some(status), last_thread: true },
        }
    }

    /// bridge runs host-local; host-local fails, then bridge.
    fn failing_del(d: &mut SandboxTeardownFailing, at: f64, pid: u32) {
        d.lifecycle(&exec(at, pid, 10, "bridge", "DEL"), &plugin("bridge"));
        d.lifecycle(&exec(at + 0.01, pid + 1, pid, "host-local", "DEL"), &plugin("host-local"));
        d.lifecycle(&exit(at + 0.02, pid + 1, 0x100), &plugin("host-local"));
        d.lifecycle(&exit(at + 0.03, pid, 0x100), &plugin("bridge"));
    }

    fn review(d: &mut SandboxTeardownFailing, node: &mut FakeNode, at: f64) -> Vec<Finding> {
        d.review(&mut Review { now: t(at), in_flight: &[], node })
    }

    #[test]
    fn a_del_that_keeps_failing_names_the_plugin_its_ipam_and_the_pod_and_ends_when_one_succeeds() {
        let mut d = SandboxTeardownFailing::new("node-1".into());
        let mut node = FakeNode::default();
        node.usage.insert(NETNS.as_bytes().to_vec(), nsfs());
        failing_del(&mut d, 0.0, 100);
        assert!(!d.wants_review());
        assert!(review(&mut d, &mut node, 0.5).is_empty(), "one failure may be a restart");
        failing_del(&mut d, 2.0, 200);
        // The second failing DEL proves it: told at once, not at the next tick.
        assert!(d.wants_review());
        assert_eq!(review(&mut d, &mut node, 2.06).len(), 1);
        assert!(!d.wants_review());
        failing_del(&mut d, 4.0, 300);
        assert!(!d.wants_review(), "a third failure changes a count, not the answer");
        let told = review(&mut d, &mut node, 4.5);
        let [f] = &told[..] else { panic!("{told:?}") };
        assert_eq!(
            (f.kind, f.severity, f.confidence),
            (Kind::SandboxTeardownFailing, Severity::Critical, Confidence::Confirmed)
        );
        assert_eq!(f.pod_uid, Some(pod()));
        assert_eq!(f.count, 3);
        assert!(f.summary.starts_with("The network of pod shop/web-0's sandbox cannot be torn down: containerd ran the CNI plugin bridge with DEL 3 times"), "{}", f.summary);
        assert!(f.summary.contains("failing in the plugin it runs, host-local (exit code 1)"), "{}", f.summary);
        assert!(f.evidence.iter().any(|e| e.fact.contains("network namespace /var/run/netns/cni-1 is still there")));
        assert!(f.fix.starts_with("journalctl -u containerd"), "{}", f.fix);
        assert!(f.advice.iter().any(|a| a.contains("/var/lib/cni/networks")));
        assert!(f.advice.iter().any(|a| a.ends_with(&format!("crictl rmp --force -- {SANDBOX_ID}"))), "{:?}", f.advice);
        // A DEL that succeeds ends it, told once.
        d.lifecycle(&exec(6.0, 400, 10, "bridge", "DEL"), &plugin("bridge"));
        d.lifecycle(&exit(6.1, 400, 0), &plugin("bridge"));
        let over = review(&mut d, &mut node, 6.5);
        assert!(matches!(&over[..], [f] if f.status == Status::Resolved), "{over:?}");
        assert!(review(&mut d, &mut node, 7.0).is_empty());
    }

    /// `pid`'s write on its stdout, by the process that started at `start`.
    fn wrote(at: f64, pid: u32, start: u64, said: &str) -> LifecycleEvent {
        let mut event = exit(at, pid, 0);
        event.start = Some(ProcessStart(start));
        event.what = Lifecycle::PluginWrote(PluginWrote { bytes: said.as_bytes().to_vec(), total: said.len() as u32 });
        event
    }

    #[test]
    fn what_a_failing_plugin_wrote_is_said_with_the_advice_it_names_and_only_while_a_del_fails() {
        let mut d = SandboxTeardownFailing::new("node-1".into());
        let mut node = FakeNode::default();
        node.usage.insert(NETNS.as_bytes().to_vec(), nsfs());
        node.running.push(("calico-node", crate::diagnose::fake::task(77, "calico-node", 'S')));
        assert!(!d.wants_plugin_words(), "nothing failing: the kernel reads no write");
        let unauthorized =
            r#"{"code":999,"msg":"error getting ClusterInformation: connection is unauthorized: Unauthorized"}"#;
        for (i, at) in [0.0, 2.0].into_iter().enumerate() {
            let pid = 100 + i as u32;
            d.lifecycle(&exec(at, pid, 10, "calico", "DEL"), &plugin("calico"));
            // A write of another process that had this pid is not the run's.
            d.lifecycle(&wrote(at + 0.05, pid, 9999, r#"{"msg":"forged by a reused pid"}"#), &plugin("calico"));
            d.lifecycle(&wrote(at + 0.06, pid, u64::from(pid), unauthorized), &plugin("calico"));
            d.lifecycle(&exit(at + 0.1, pid, 0x100), &plugin("calico"));
            assert!(d.wants_plugin_words(), "a DEL failing: its next run's words are wanted");
        }
        let told = review(&mut d, &mut node, 2.5);
        let [f] = &told[..] else { panic!("{told:?}") };
        assert!(
            f.summary
                .contains(r#" It said: "error getting ClusterInformation: connection is unauthorized: Unauthorized"."#),
            "{}",
            f.summary
        );
        assert_eq!(f.details["plugin_said_kind"], "unauthorized");
        assert!(
            f.evidence.iter().any(|e| e.fact.starts_with("calico wrote on its stdout: error getting")),
            "{:?}",
            f.evidence
        );
        assert!(!format!("{f:?}").contains("forged"), "{f:?}");
        assert!(
            f.advice[0].contains("calico-kubeconfig") && f.advice[0].contains("restarting calico-node"),
            "{:?}",
            f.advice
        );
        // The severity, the confidence and the fix are the kernel's facts', as without words.
        assert_eq!((f.severity, f.confidence), (Severity::Critical, Confidence::Confirmed));
        assert!(f.fix.starts_with("kubectl -n kube-system delete pod -l k8s-app=calico-node"), "{}", f.fix);
        // A failure that wrote nothing keeps the last words said.
        d.lifecycle(&exec(4.0, 300, 10, "calico", "DEL"), &plugin("calico"));
        d.lifecycle(&exit(4.1, 300, 0x100), &plugin("calico"));
        let told = review(&mut d, &mut node, 4.5);
        assert_eq!(told[0].details["plugin_said_kind"], "unauthorized");
        // A DEL that succeeds: nothing more is wanted.
        d.lifecycle(&exec(6.0, 400, 10, "calico", "DEL"), &plugin("calico"));
        d.lifecycle(&exit(6.1, 400, 0), &plugin("calico"));
        assert!(!d.wants_plugin_words());
    }

    /// What the detector decides of every sandbox it follows, on `node`.
    fn verdicts(d: &SandboxTeardownFailing, node: &mut FakeNode) -> Vec<Verdict> {
        d.sandboxes.values().map(|sandbox| judge(sandbox, node)).collect()
    }

    /// Two failed DELs of calico at `at` and `at` + 2 s.
    fn calico_fails(d: &mut SandboxTeardownFailing, at: f64, pid: u32) {
        for (i, at) in [at, at + 2.0].into_iter().enumerate() {
            d.lifecycle(&exec(at, pid + i as u32, 10, "calico", "DEL"), &plugin("calico"));
            d.lifecycle(&exit(at + 0.1, pid + i as u32, 0x100), &plugin("calico"));
        }
    }

    #[test]
    fn adds_that_fail_and_dels_that_succeed_give_nothing_and_a_known_daemon_is_restarted_only_when_seen_running() {
        let mut d = SandboxTeardownFailing::new("node-1".into());
        let mut node = FakeNode::default();
        for (i, at) in [0.0, 1.0, 2.0].into_iter().enumerate() {
            d.lifecycle(&exec(at, 100 + i as u32, 10, "bridge", "ADD"), &plugin("bridge"));
            d.lifecycle(&exit(at + 0.1, 100 + i as u32, 0x100), &plugin("bridge"));
            d.lifecycle(&exec(at + 0.2, 200 + i as u32, 10, "bridge", "DEL"), &plugin("bridge"));
            d.lifecycle(&exit(at + 0.3, 200 + i as u32, 0), &plugin("bridge"));
        }
        assert!(review(&mut d, &mut node, 3.0).is_empty());
        // The netns gone, calico-node not running: no restart, the logs.
        calico_fails(&mut d, 4.0, 300);
        let [v] = &verdicts(&d, &mut node)[..] else { panic!("one sandbox") };
        assert!(matches!(v.netns, Netns::Gone(_)), "{v:?}");
        assert!(matches!(v.remedy, Remedy::DaemonNotRunning(Daemon { plugin: "calico", .. })), "{v:?}");
        let told = review(&mut d, &mut node, 7.0);
        let [f] = &told[..] else { panic!("{told:?}") };
        assert_eq!(f.confidence, Confidence::Likely, "the netns is gone");
        assert!(f.fix.starts_with("journalctl "), "{}", f.fix);
        assert!(f.advice.iter().any(|a| a.contains("calico-node is not running on this node")), "{:?}", f.advice);
        // Confirmed, and the daemon seen running: its restart, and what it interrupts.
        let mut d = SandboxTeardownFailing::new("node-1".into());
        node.usage.insert(NETNS.as_bytes().to_vec(), nsfs());
        node.running.push(("calico-node", crate::diagnose::fake::task(77, "calico-node", 'S')));
        calico_fails(&mut d, 10.0, 400);
        let [v] = &verdicts(&d, &mut node)[..] else { panic!("one sandbox") };
        assert_eq!(v.netns, Netns::There);
        assert!(
            matches!(&v.remedy, Remedy::RestartDaemon { daemon, running } if daemon.exe == "calico-node" && running == &[77])
        );
        // The daemon running but the namespace gone: nothing proves the
        // failure here, so no restart.
        let mut unproven = FakeNode { running: node.running.clone(), ..FakeNode::default() };
        let [v] = &verdicts(&d, &mut unproven)[..] else { panic!("one sandbox") };
        assert!(matches!(v.remedy, Remedy::DaemonUnconfirmed(Daemon { plugin: "calico", .. })), "{v:?}");
        let told = review(&mut d, &mut node, 13.0);
        let [f] = &told[..] else { panic!("{told:?}") };
        assert_eq!(
            f.fix,
            "kubectl -n kube-system delete pod -l k8s-app=calico-node --field-selector spec.nodeName=node-1"
        );
        assert!(f.advice.iter().any(|a| a.contains("no pod on this node is set up or torn down")), "{:?}", f.advice);
        assert!(f.evidence.iter().any(|e| e.fact == "calico-node runs on this node (pid 77)"), "{:?}", f.evidence);
    }

    #[test]
    fn a_sandbox_id_or_netns_a_workload_could_choose_proves_nothing_and_goes_in_no_command() {
        let mut node = FakeNode::default();
        node.usage.insert(b"/proc/self/ns/net".to_vec(), nsfs());
        let mut d = SandboxTeardownFailing::new("node-1".into());
        for (i, at) in [0.0, 2.0].into_iter().enumerate() {
            let mut e = exec(at, 500 + i as u32, 10, "bridge", "DEL");
            if let Lifecycle::Exec { cni: Some(cni), .. } = &mut e.what {
                cni.container_id = "--all".into();
                cni.netns = "/proc/self/ns/net".into();
            }
            d.lifecycle(&e, &plugin("bridge"));
            d.lifecycle(&exit(at + 0.1, 500 + i as u32, 0x100), &plugin("bridge"));
        }
        let told = review(&mut d, &mut node, 3.0);
        let [f] = &told[..] else { panic!("{told:?}") };
        assert_eq!(f.confidence, Confidence::Likely, "a /proc path proves nothing");
        let all = format!("{} {}", f.fix, f.advice.join(" "));
        assert!(!all.contains("rmp"), "{all}");
        // A pattern of journalctl's --grep=, never an option of its own.
        assert!(f.fix.contains("--grep=") && !f.fix.split_whitespace().any(|w| w == "--all"), "{}", f.fix);
    }
}
