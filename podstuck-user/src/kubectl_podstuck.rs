//! The `kubectl-podstuck` command (`kubectl podstuck POD`): argument
//! parsing and exit codes only; the work is in the library's
//! `kubectl_plugin`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use podstuck::kubectl_plugin::{run, PluginOptions};
use podstuck::print::stderr_line;

#[derive(Parser)]
#[command(
    name = "kubectl podstuck",
    bin_name = "kubectl podstuck",
    version,
    about = "Why is this pod stuck in Terminating? Runs podstuck on the pod's node in a debug pod and streams its findings here.",
    long_about = "Why is this pod stuck in Terminating? Finds the pod's node, starts a privileged debug pod there with the podstuck image \
                  (as kubectl debug node --profile=sysadmin would) in podstuck's namespace (else kube-system), traces the pod's teardown \
                  and streams the findings here. Ctrl-C stops: podstuck prints its summary, the files asked for are copied back, \
                  --shell opens a root shell on the node for the fixes, the debug pod is deleted.",
    after_help = "Uses the kubectl on PATH with your current context and kubeconfig. Arguments after -- go to podstuck watch (e.g. -- --hung-after 10s).\n\
                  kubectl podstuck --all [-n NS]: every pod stuck in Terminating, in one table, from the API and the podstuck DaemonSet (no debug pod)."
)]
struct Cli {
    /// The pod stuck in Terminating.
    #[arg(required_unless_present = "all")]
    pod: Option<String>,
    /// The pod's namespace (default: the current context's); with --all, this namespace's pods only.
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// Every pod stuck in Terminating past its grace period (all namespaces, or -n's), in one table
    /// grouped by node and cause: what the API says joined with the findings of the podstuck DaemonSet
    /// on each pod's node, read through the API server's pod proxy (no debug pod); for nodes without
    /// it, the kubectl podstuck command to run for each pod. --json: one JSON document.
    #[arg(long, conflicts_with_all = ["pod", "histograms", "record", "duration", "watch_args", "shell", "namespace_for_debug"])]
    all: bool,
    /// The kubeconfig context to use.
    #[arg(long)]
    context: Option<String>,
    /// The kubeconfig file to use.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The podstuck image the debug pod runs, where you pushed it (cargo xtask image; docs/deploy.md);
    /// default: $KUBECTL_PODSTUCK_IMAGE. Required: no public registry holds podstuck.
    #[arg(long)]
    image: Option<String>,
    /// Where the debug pod runs: default podstuck's namespace (--podstuck-namespace; its install makes
    /// it, Pod Security privileged) when it exists, else kube-system; never a Terminating namespace.
    #[arg(long, value_name = "NAMESPACE")]
    namespace_for_debug: Option<String>,
    /// The namespace your install put podstuck in: the debug pod's first choice, and where --all
    /// finds the DaemonSet.
    #[arg(long, value_name = "NAMESPACE", env = "PODSTUCK_NAMESPACE", default_value = "podstuck")]
    podstuck_namespace: String,
    /// Once the trace ends, open a root shell on the node (its own /bin/sh, in its namespaces) to run
    /// the fixes; the debug pod is deleted when you exit it.
    #[arg(long)]
    shell: bool,
    /// podstuck's JSON lines (start, findings, end) instead of a block per finding.
    #[arg(long)]
    json: bool,
    /// Stop by itself after this long (e.g. 30s, 5m); default: until Ctrl-C.
    #[arg(long, value_parser = podstuck::words::run_length_arg, allow_hyphen_values = true)]
    duration: Option<Duration>,
    /// Keep latency histograms and copy their files into DIR at the end.
    #[arg(long, value_name = "DIR")]
    histograms: Option<PathBuf>,
    /// Record what the diagnosis saw and copy the record to FILE at the end (podstuck replay FILE).
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// How long the debug pod may take to start, image pull included.
    #[arg(long, value_parser = start_timeout, default_value = "2m", allow_hyphen_values = true)]
    start_timeout: Duration,
    /// The cluster ends the debug pod after this long, even if this command died (activeDeadlineSeconds).
    #[arg(long, value_parser = deadline, default_value = "1h", allow_hyphen_values = true)]
    deadline: Duration,
    /// More podstuck watch arguments.
    #[arg(last = true, value_name = "WATCH ARGS")]
    watch_args: Vec<OsString>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.all {
        return match podstuck::kubectl_plugin::all(
            cli.namespace,
            cli.podstuck_namespace,
            cli.context,
            cli.kubeconfig,
            cli.json,
        ) {
            Ok(()) => ExitCode::from(podstuck::exit::SUCCESS),
            Err(e) => {
                stderr_line(format_args!("kubectl podstuck: error: {e:#}"));
                ExitCode::from(podstuck::exit::code_of(&e, &[]))
            }
        };
    }
    let options = PluginOptions {
        pod: cli.pod.unwrap_or_default(),
        namespace: cli.namespace,
        context: cli.context,
        kubeconfig: cli.kubeconfig,
        image: cli.image,
        namespace_for_debug: cli.namespace_for_debug,
        podstuck_namespace: cli.podstuck_namespace,
        shell: cli.shell,
        json: cli.json,
        duration: cli.duration,
        histograms: cli.histograms,
        record: cli.record,
        start_timeout: cli.start_timeout,
        deadline: cli.deadline,
        watch_args: cli.watch_args,
    };
    match run(&options) {
        Ok(code) => code,
        // Stopped by the user: said as such, not as an error.
        Err(e) if podstuck::exit::code_of(&e, &[]) == podstuck::exit::INTERRUPTED => {
            stderr_line(format_args!("kubectl podstuck: {e}"));
            ExitCode::from(podstuck::exit::INTERRUPTED)
        }
        Err(e) => {
            stderr_line(format_args!("kubectl podstuck: error: {e:#}"));
            ExitCode::from(podstuck::exit::code_of(&e, &[]))
        }
    }
}

/// `--start-timeout`.
fn start_timeout(value: &str) -> Result<Duration, String> {
    podstuck::words::duration_arg(value, "the debug pod would have no time to start")
}

/// `--deadline`.
fn deadline(value: &str) -> Result<Duration, String> {
    podstuck::words::duration_arg(value, "the cluster would end the debug pod as it started")
}
