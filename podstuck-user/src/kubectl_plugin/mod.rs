//! `kubectl podstuck POD`: traces why one pod is stuck, from the user's
//! machine, through kubectl alone. It finds the pod's node and UID
//! (`kubectl get pod -o json`), picks a namespace for the debug pod where
//! privileged pods may run and new pods are taken (podstuck's own, else
//! kube-system; never a Terminating one), creates a privileged debug pod
//! on that node with the podstuck image ([`manifest`]; a refusal by the
//! namespace's policies said in one sentence with its fix, [`admission`]),
//! runs `podstuck watch --pod UID` in it with `kubectl exec -i` so the
//! findings stream to the user's terminal, stops it cleanly on Ctrl-C or
//! SIGTERM/SIGHUP by closing that exec's input ([`remote`]), copies the
//! `--histograms` and `--record` files back as a tar ([`tar`]), with
//! `--shell` opens the node's own shell for the fixes, and deletes the
//! debug pod however it ends (a deadline ends it in the cluster should the
//! plugin die first).
//!
//! `kubectl podstuck --all` ([`all`]) starts no debug pod: it is `podstuck
//! explain --all`, every stuck pod in one table.
//!
//! The debug pod is made with `kubectl create -f -` and a manifest rather
//! than `kubectl debug node/NODE`: the plugin names it (so it can wait
//! for it, exec into it and delete it without parsing kubectl's words),
//! labels it, and gives it a deadline, which `kubectl debug` offers only
//! on recent versions (`--custom`), if at all.

pub mod admission;
pub mod kubectl;
pub mod manifest;
pub mod pod_json;
pub mod remote;
pub mod signals;
pub mod tar;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::export::FILES;
use crate::words::CommandLine;
use kubectl::{Group, Kubectl};
use manifest::{debug_pod_name, DebugPod, CONTAINER};
use pod_json::{DebugPodState, TargetPod};
use signals::StopSignals;

/// Where podstuck writes the `--histograms` files in the debug pod (its
/// own writable /tmp).
pub const REMOTE_HISTOGRAMS: &str = "/tmp/podstuck-histograms";
/// Where podstuck writes the `--record` file in the debug pod.
pub const REMOTE_RECORD: &str = "/tmp/podstuck.record";

/// podstuck's namespace unless told otherwise (`--podstuck-namespace`,
/// `$PODSTUCK_NAMESPACE`): the one deploy/base makes (Pod Security:
/// privileged), where debug pods go when it exists, and where `--all`
/// looks for the DaemonSet. An install's overlay may choose another.
pub use crate::explain::all::read::{DAEMONSET_NAMESPACE as PODSTUCK_NAMESPACE, NAMESPACE_VARIABLE};
/// Where they go otherwise: every cluster has it, and its policies let
/// node agents run privileged.
pub const FALLBACK_NAMESPACE: &str = "kube-system";
/// The variable that names the podstuck image when `--image` does not.
pub const IMAGE_VARIABLE: &str = "KUBECTL_PODSTUCK_IMAGE";

/// What `kubectl podstuck` was asked.
#[derive(Debug, Clone)]
pub struct PluginOptions {
    pub pod: String,
    /// `-n`: the pod's namespace; kubectl's current one when not given.
    pub namespace: Option<String>,
    pub context: Option<String>,
    pub kubeconfig: Option<PathBuf>,
    /// The podstuck image the debug pod runs (`--image`, else
    /// `$KUBECTL_PODSTUCK_IMAGE`): no default, as no public registry
    /// holds one.
    pub image: Option<String>,
    /// `--namespace-for-debug`: where the debug pod goes.
    pub namespace_for_debug: Option<String>,
    /// `--podstuck-namespace` (or `$PODSTUCK_NAMESPACE`): where the install
    /// put podstuck, the debug pod's first choice.
    pub podstuck_namespace: String,
    /// `--shell`: once the trace ends, a root shell on the node.
    pub shell: bool,
    /// `--json`: podstuck's JSON lines instead of a block per finding.
    pub json: bool,
    /// `--duration`: stop by itself after this long.
    pub duration: Option<Duration>,
    /// `--histograms DIR`: copy the histogram files back into DIR.
    pub histograms: Option<PathBuf>,
    /// `--record FILE`: record in the pod and copy the record back to FILE.
    pub record: Option<PathBuf>,
    /// How long the debug pod may take to be ready (an image pull included).
    pub start_timeout: Duration,
    /// The debug pod's `activeDeadlineSeconds`.
    pub deadline: Duration,
    /// More `podstuck watch` arguments, given after `--`.
    pub watch_args: Vec<OsString>,
}

pub use crate::exit::Interrupted;

/// Said to the user, on stderr: the findings own stdout.
fn say(message: &str) {
    crate::print::stderr_line(format_args!("kubectl podstuck: {message}"));
}

/// Runs the plugin; the exit code is podstuck's in the debug pod.
pub fn run(options: &PluginOptions) -> Result<ExitCode> {
    let stops = StopSignals::install()?;
    check_destinations(options)?;
    let image = image(options)?;
    let kubectl = Kubectl::new(options.context.as_deref(), options.kubeconfig.as_ref());
    let target = target_pod(&kubectl, options)?;
    let Some(node) = target.node.clone() else {
        bail!(
            "pod {} is not scheduled on a node yet ({}): there is no node to trace; {} says why",
            target.full_name(),
            target.phase.as_deref().unwrap_or("no phase"),
            CommandLine::new("kubectl describe pod -n").value(&target.namespace).operands([&target.name])
        );
    };
    say(&target.described());
    if target.deleting_since.is_none() {
        say("the pod is not Terminating (no deletionTimestamp): tracing it anyway, its teardown may not have begun");
    }
    stopped_yet(&stops)?;
    let namespace = debug_namespace(&kubectl, options)?;
    let debug = DebugPod {
        name: debug_pod_name(&target.uid, &salt()),
        namespace,
        node,
        image: image.clone(),
        target_uid: target.uid.clone(),
        target: target.full_name(),
        deadline: deadline(options),
    };
    let created = Created::create(&kubectl, &debug, &options.podstuck_namespace)?;
    say(&format!(
        "debug pod {} on node {} (image {}); waiting for it to start",
        created.full_name(),
        debug.node,
        debug.image
    ));
    wait_ready(&kubectl, &created, options, &image, &stops)?;
    let status = trace(&created, &target, options, &stops)?;
    let copied = stops.count() < 2 && copy_back(&created, options);
    if options.shell && stops.count() < 2 {
        host_shell(&created, &debug.node);
    } else {
        say(&format!(
            "a root shell on node {} for the fixes: kubectl debug node/{} -n {} -it --profile=sysadmin --image={image} -- podstuck __host-shell (or kubectl podstuck ... --shell)",
            debug.node, debug.node, debug.namespace
        ));
    }
    drop(created);
    // Files asked for and not brought back fail the run podstuck
    // finished well: a script must not take them for there.
    let asked = options.histograms.is_some() || options.record.is_some();
    match status.success() && asked && !copied {
        true => Ok(ExitCode::from(crate::exit::FAILED)),
        false => Ok(remote::exit_code(status)),
    }
}

/// `kubectl podstuck --all`: the report of `podstuck explain --all`, made
/// by the same code in this process. It reads the API with the kubeconfig
/// kubectl would use (`--kubeconfig`, `KUBECONFIG`, `~/.kube/config`, and
/// `--context`; exec credential plugins included) rather than through the
/// kubectl binary: it starts no pod and needs nothing on the nodes, and
/// one code path, unit-tested, makes the table for both commands.
pub fn all(
    namespace: Option<String>,
    podstuck_namespace: String,
    context: Option<String>,
    kubeconfig: Option<PathBuf>,
    json: bool,
) -> Result<()> {
    let options = crate::explain::all::read::AllOptions {
        namespace,
        podstuck_namespace: Some(podstuck_namespace),
        json,
        kube: crate::explain::KubeOptions { kubeconfig, context, ..Default::default() },
    };
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")?;
    runtime.block_on(crate::explain::all::read::explain_all(&options))
}

/// The image asked for: `--image`, else `$KUBECTL_PODSTUCK_IMAGE`.
fn image(options: &PluginOptions) -> Result<String> {
    let from_env = std::env::var(IMAGE_VARIABLE).ok().filter(|i| !i.trim().is_empty());
    match options.image.clone().or(from_env) {
        Some(image) => Ok(image),
        None => Err(crate::exit::BadInput(format!(
            "which podstuck image should the debug pod run? No public registry holds one: push the image of `cargo xtask image` where your nodes pull from (docs/deploy.md), then give it with --image REGISTRY/podstuck:{v} or once for all with export {IMAGE_VARIABLE}=REGISTRY/podstuck:{v}",
            v = env!("CARGO_PKG_VERSION")
        ))
        .into()),
    }
}

/// Where the debug pod goes: `--namespace-for-debug` when it takes new
/// pods; else podstuck's namespace when it exists and is not being
/// deleted, else kube-system. A Terminating namespace (a common reason a
/// pod is stuck) accepts no pod: never chosen, and refused when asked for.
fn debug_namespace(kubectl: &Kubectl, options: &PluginOptions) -> Result<String> {
    let asked = |name: &str| kubectl.run(["get", "namespace", name, "-o", "json"], None, Group::Foreground);
    let podstuck = options.podstuck_namespace.as_str();
    if let Some(namespace) = &options.namespace_for_debug {
        return match asked(namespace) {
            Ok(json) if pod_json::namespace_terminating(&json)? => Err(crate::exit::BadInput(format!(
                "--namespace-for-debug {namespace}: the namespace is Terminating and takes no new pod; choose another ({podstuck}, podstuck's, or {FALLBACK_NAMESPACE})"
            ))
            .into()),
            Ok(_) => Ok(namespace.clone()),
            Err(e) if format!("{e}").contains("(NotFound)") => Err(crate::exit::BadInput(format!(
                "--namespace-for-debug {namespace}: no such namespace; choose one that exists ({podstuck}, podstuck's, or {FALLBACK_NAMESPACE})"
            ))
            .into()),
            // Not allowed to read namespaces: create will say whether the pod may go there.
            Err(_) => Ok(namespace.clone()),
        };
    }
    let why_not = match asked(podstuck) {
        Ok(json) => match pod_json::namespace_terminating(&json) {
            Ok(false) => return Ok(podstuck.to_string()),
            Ok(true) => "is Terminating".to_string(),
            Err(e) => format!("could not be read ({e})"),
        },
        Err(e) if format!("{e}").contains("(NotFound)") => format!(
            "does not exist (podstuck's install makes it; installed in another namespace: --podstuck-namespace or ${NAMESPACE_VARIABLE})"
        ),
        Err(e) => format!("could not be read ({e:#})"),
    };
    say(&format!(
        "namespace {podstuck} {why_not}: the debug pod goes to {FALLBACK_NAMESPACE} (--namespace-for-debug to choose)"
    ));
    Ok(FALLBACK_NAMESPACE.to_string())
}

/// The node's own shell, through the debug pod, until the user leaves it.
fn host_shell(pod: &Created<'_>, node: &str) {
    use std::io::IsTerminal;
    say(&format!(
        "a root shell on node {node} (its own /bin/sh, in its namespaces): run the fixes here; exit to leave, and the debug pod is deleted"
    ));
    let tty = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    let mut args: Vec<OsString> = vec!["exec".into(), if tty { "-it".into() } else { "-i".into() }];
    args.extend(
        [&pod.name, "-n", &pod.namespace, "-c", CONTAINER, "--", "podstuck", "__host-shell"].map(OsString::from),
    );
    // In the foreground: Ctrl-C belongs to the shell now.
    let mut command = pod.kubectl.command(args, Group::Foreground);
    command.stdin(Stdio::inherit()).stdout(Stdio::inherit()).stderr(Stdio::inherit());
    match kubectl::spawn(&mut command).and_then(|mut c| c.wait().context("waiting for the shell")) {
        Ok(status) if status.success() => {}
        Ok(status) => say(&format!("the node's shell ended: {status}")),
        Err(e) => say(&format!("could not open a shell on the node: {e:#}")),
    }
}

/// `Err(Interrupted)` once a stop signal arrived.
fn stopped_yet(stops: &StopSignals) -> Result<()> {
    match stops.last() {
        Some(signal) if stops.count() > 0 => Err(Interrupted(signal).into()),
        _ => Ok(()),
    }
}

/// Refuses, before anything is created, destinations the copies would
/// have to overwrite (as podstuck's own files are never overwritten).
fn check_destinations(options: &PluginOptions) -> Result<()> {
    if let Some(file) = &options.record {
        if std::fs::symlink_metadata(file).is_ok() {
            bail!("--record {}: exists; choose a new file name (a record is never overwritten)", file.display());
        }
        let parent = file.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if !parent.is_dir() {
            bail!("--record {}: {} is not a directory", file.display(), parent.display());
        }
    }
    if let Some(dir) = &options.histograms {
        match std::fs::symlink_metadata(dir) {
            Ok(meta) if !meta.is_dir() => bail!("--histograms {}: exists and is not a directory", dir.display()),
            Ok(_) => {
                if let Some(taken) = FILES.iter().find(|name| std::fs::symlink_metadata(dir.join(name)).is_ok()) {
                    bail!(
                        "--histograms {}: already holds {taken} (an earlier run's?); choose an empty or new directory",
                        dir.display()
                    );
                }
            }
            Err(_) => {}
        }
    }
    Ok(())
}

/// The pod asked about, from `kubectl get pod -o json`.
fn target_pod(kubectl: &Kubectl, options: &PluginOptions) -> Result<TargetPod> {
    let mut args: Vec<&str> = vec!["get", "pod", &options.pod, "-o", "json"];
    if let Some(namespace) = &options.namespace {
        args.extend(["-n", namespace]);
    }
    let json = kubectl.run(&args, None, Group::Foreground).map_err(|e| {
        // A pod that is not there was asked wrongly (exit 2), where a
        // cluster that cannot be reached failed podstuck (exit 1).
        if format!("{e}").contains("(NotFound)") {
            anyhow::Error::new(crate::exit::BadInput(format!(
                "{e}: pod {} is gone already (not stuck), or in another namespace than {} (-n NAMESPACE)",
                options.pod,
                options.namespace.as_deref().unwrap_or("the context's")
            )))
        } else {
            e
        }
    })?;
    TargetPod::parse(&json)
}

/// The debug pod's deadline: `--deadline`, stretched to outlast
/// `--duration` with time to start and to copy the files.
fn deadline(options: &PluginOptions) -> Duration {
    match options.duration {
        Some(duration) => options.deadline.max(duration + options.start_timeout + Duration::from_secs(300)),
        None => options.deadline,
    }
}

/// Five random characters that keep two debug pods for one pod apart.
fn salt() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut bytes = [0u8; 5];
    // SAFETY: getrandom fills the buffer it is given.
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if got != bytes.len() as isize {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
        bytes = (nanos ^ std::process::id())
            .to_le_bytes()
            .into_iter()
            .chain([0])
            .collect::<Vec<_>>()
            .try_into()
            .unwrap_or_default();
    }
    bytes.iter().map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()])).collect()
}

/// The debug pod, once created: deleted when dropped, however the plugin
/// ends (an error, a signal, a panic unwinding).
struct Created<'a> {
    kubectl: &'a Kubectl,
    name: String,
    namespace: String,
}

impl<'a> Created<'a> {
    fn create(kubectl: &'a Kubectl, debug: &DebugPod, podstuck_namespace: &str) -> Result<Created<'a>> {
        let manifest = serde_json::to_vec_pretty(&debug.manifest())?;
        kubectl.run(["create", "-f", "-", "-o", "name"], Some(&manifest), Group::Own).map_err(|e| {
            match admission::refusal(&format!("{e:#}"), &debug.namespace, podstuck_namespace) {
                Some(refused) => anyhow!("{refused}"),
                None => e.context("creating the debug pod"),
            }
        })?;
        Ok(Created { kubectl, name: debug.name.clone(), namespace: debug.namespace.clone() })
    }

    fn full_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// `kubectl exec [-i] POD -n NS -c podstuck -- podstuck ARGS...`.
    fn exec(&self, interactive: bool, podstuck_args: &[OsString]) -> std::process::Command {
        let mut args: Vec<OsString> = vec!["exec".into()];
        if interactive {
            args.push("-i".into());
        }
        args.extend([&self.name, "-n", &self.namespace, "-c", CONTAINER, "--", "podstuck"].map(OsString::from));
        args.extend(podstuck_args.iter().cloned());
        self.kubectl.command(args, Group::Own)
    }
}

impl Drop for Created<'_> {
    fn drop(&mut self) {
        let deleted = self.kubectl.run(
            ["delete", "pod", &self.name, "-n", &self.namespace, "--wait=false", "--ignore-not-found"],
            None,
            Group::Own,
        );
        match deleted {
            Ok(_) => say(&format!("deleted debug pod {}", self.full_name())),
            Err(e) => say(&format!(
                "could not delete debug pod {} ({e:#}); its deadline ends it, or: {}",
                self.full_name(),
                CommandLine::new("kubectl delete pod -n").value(&self.namespace).operands([&self.name])
            )),
        }
    }
}

/// Waits for the debug pod to be ready: polled, so a stop signal, a pod
/// that ended, or kubelet's reason (an image that cannot be pulled) is
/// said at once rather than after kubectl wait's timeout.
fn wait_ready(
    kubectl: &Kubectl,
    pod: &Created<'_>,
    options: &PluginOptions,
    image: &str,
    stops: &StopSignals,
) -> Result<()> {
    let deadline = Instant::now() + options.start_timeout;
    loop {
        stopped_yet(stops)?;
        let json = kubectl.run(["get", "pod", &pod.name, "-n", &pod.namespace, "-o", "json"], None, Group::Own)?;
        let why = match DebugPodState::parse(&json)? {
            DebugPodState::Ready => return Ok(()),
            DebugPodState::Ended(how) => bail!("debug pod {} ended before it was ready: {how}", pod.full_name()),
            DebugPodState::Starting(why) => why,
        };
        if Instant::now() >= deadline {
            return Err(anyhow!(
                "debug pod {} not ready after {} ({}); is image {} on the node or pullable? (--image, --start-timeout)",
                pod.full_name(),
                humantime::format_duration(options.start_timeout),
                crate::words::terminal_safe(&why.unwrap_or_else(|| "kubelet gave no reason".into())),
                image
            ));
        }
        let next = Instant::now() + Duration::from_secs(1);
        while Instant::now() < next.min(deadline) && stops.count() == 0 {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The `podstuck` command run in the debug pod.
pub fn podstuck_args(uid: &str, options: &PluginOptions) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["__session".into(), "--".into()];
    match options.record {
        Some(_) => args.extend(["record".into(), REMOTE_RECORD.into()]),
        None => args.push("watch".into()),
    }
    // --concurrent: a DaemonSet podstuck (or another session) may already
    // trace the node; the user asked about this pod now, and refusing for
    // that would leave them nothing. Two tracers cost two sets of probes.
    args.extend(["--pod".into(), uid.into(), "--concurrent".into()]);
    if options.json {
        args.push("--json".into());
    }
    if let Some(duration) = options.duration {
        args.extend(["--duration".into(), humantime::format_duration(duration).to_string().into()]);
    }
    if options.histograms.is_some() {
        args.extend(["--histograms".into(), REMOTE_HISTOGRAMS.into()]);
    }
    args.extend(options.watch_args.iter().cloned());
    args
}

/// Runs podstuck in the debug pod, its output straight to the user's, until
/// it ends by itself (`--duration`) or a stop signal: the first closes its
/// input (podstuck finishes cleanly), a second ends kubectl at once.
fn trace(pod: &Created<'_>, target: &TargetPod, options: &PluginOptions, stops: &StopSignals) -> Result<ExitStatus> {
    let mut exec = pod.exec(true, &podstuck_args(&target.uid, options));
    exec.stdin(Stdio::piped()).stdout(Stdio::inherit()).stderr(Stdio::inherit());
    let mut child = kubectl::spawn(&mut exec)?;
    let mut input = child.stdin.take();
    say(&format!("tracing pod {} in {}; Ctrl-C stops", target.full_name(), pod.full_name()));
    let mut seen = 0;
    loop {
        if let Some(status) = child.try_wait().context("waiting for kubectl exec")? {
            return Ok(status);
        }
        let received = stops.count();
        if received != seen {
            if seen == 0 {
                say("stopping: podstuck prints its summary and finishes its files (again: stop at once)");
                input.take();
            } else {
                say("stopping at once");
                let _ = child.kill();
            }
            seen = received;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Copies the histogram files and the record back, when asked; what
/// fails is said, the rest still copied. True when all came back.
fn copy_back(pod: &Created<'_>, options: &PluginOptions) -> bool {
    let wanted = [
        options
            .histograms
            .as_deref()
            .map(|dir| (REMOTE_HISTOGRAMS, tar::Destination::Directory(dir), "histogram files")),
        options.record.as_deref().map(|file| (REMOTE_RECORD, tar::Destination::File(file), "record")),
    ];
    let mut all = true;
    for (remote, destination, what) in wanted.into_iter().flatten() {
        match copy_one(pod, remote, destination) {
            Ok(written) => {
                let names: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
                say(&format!("copied the {what} to {}", names.join(", ")));
            }
            Err(e) => {
                say(&format!("could not copy the {what} back: {e:#}"));
                all = false;
            }
        }
    }
    all
}

/// `podstuck __pack REMOTE` in the pod, unpacked at `destination`.
fn copy_one(pod: &Created<'_>, remote: &str, destination: tar::Destination<'_>) -> Result<Vec<PathBuf>> {
    let mut exec = pod.exec(false, &["__pack".into(), remote.into()]);
    exec.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = kubectl::spawn(&mut exec)?;
    let mut stdout = child.stdout.take().expect("piped");
    let unpacked = tar::unpack(&mut stdout, destination);
    if unpacked.is_err() {
        let _ = child.kill();
    }
    drop(stdout);
    let output = child.wait_with_output().context("waiting for kubectl exec")?;
    let said = String::from_utf8_lossy(&output.stderr);
    match unpacked {
        // What podstuck or kubectl said is why the archive broke off.
        Err(e) if !output.status.success() && !said.trim().is_empty() => {
            Err(e.context(format!("kubectl exec said: {}", crate::words::terminal_safe_lines(said.trim()))))
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TempDir;

    fn options() -> PluginOptions {
        PluginOptions {
            pod: "web-0".into(),
            namespace: Some("shop".into()),
            context: None,
            kubeconfig: None,
            image: Some("podstuck:0.1.0".into()),
            namespace_for_debug: None,
            podstuck_namespace: PODSTUCK_NAMESPACE.into(),
            shell: false,
            json: false,
            duration: None,
            histograms: None,
            record: None,
            start_timeout: Duration::from_secs(120),
            deadline: Duration::from_secs(3600),
            watch_args: Vec::new(),
        }
    }

    const UID: &str = "8f14e45f-ceea-467f-a0e6-6b8d2c1f5b3a";

    #[test]
    fn podstuck_follows_the_pod_beside_any_other_tracer() {
        let args = podstuck_args(UID, &options());
        assert_eq!(args, ["__session", "--", "watch", "--pod", UID, "--concurrent"]);
    }

    #[test]
    fn files_asked_for_are_written_in_the_pods_tmp() {
        let asked = PluginOptions {
            json: true,
            duration: Some(Duration::from_secs(90)),
            histograms: Some("h".into()),
            record: Some("r".into()),
            watch_args: vec!["--hung-after".into(), "2s".into()],
            ..options()
        };
        let args = podstuck_args(UID, &asked);
        let want = [
            "__session",
            "--",
            "record",
            REMOTE_RECORD,
            "--pod",
            UID,
            "--concurrent",
            "--json",
            "--duration",
            "1m 30s",
            "--histograms",
            REMOTE_HISTOGRAMS,
            "--hung-after",
            "2s",
        ];
        assert_eq!(args, want);
    }

    #[test]
    fn the_deadline_outlasts_the_duration() {
        assert_eq!(deadline(&options()), Duration::from_secs(3600));
        let long = PluginOptions { duration: Some(Duration::from_secs(7200)), ..options() };
        assert_eq!(deadline(&long), Duration::from_secs(7200 + 120 + 300));
    }

    #[test]
    fn destinations_that_would_be_overwritten_are_refused_first() {
        let dir = TempDir::new("plugin-dest");
        let record = dir.0.join("incident.podstuck");
        std::fs::write(&record, b"").unwrap();
        let err = check_destinations(&PluginOptions { record: Some(record), ..options() }).unwrap_err().to_string();
        assert!(err.contains("exists"), "{err}");
        std::fs::write(dir.0.join("summary.json"), b"{}").unwrap();
        let err = check_destinations(&PluginOptions { histograms: Some(dir.0.clone()), ..options() })
            .unwrap_err()
            .to_string();
        assert!(err.contains("already holds summary.json"), "{err}");
        let fresh = PluginOptions {
            histograms: Some(dir.0.join("new")),
            record: Some(dir.0.join("new.podstuck")),
            ..options()
        };
        check_destinations(&fresh).unwrap();
    }

    #[test]
    fn salts_are_short_and_safe_in_a_pod_name() {
        let salt = salt();
        assert_eq!(salt.len(), 5);
        assert!(salt.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()), "{salt}");
    }
}
