//! The `podstuck` command: argument parsing and exit codes only; the work
//! is in the library.

use std::process::ExitCode;
use std::time::Duration;

use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand, ValueEnum};
use podstuck::exit;
use podstuck::explain::{KubeOptions, PodRef};
use podstuck::identify::pod::PodUid;
use podstuck::identify::DEFAULT_KUBELET_ROOT;
use podstuck::kernel_features::{AttachPoint, PathWalk};
use podstuck::node_access::Node;
use podstuck::print::stderr_line;
use podstuck::watch::{watch, NodeNotReady, WatchOptions};
use podstuck_common::program::Arch;
use podstuck_common::Syscall;

#[derive(Parser)]
#[command(
    name = "podstuck",
    version,
    about = "Why is this pod stuck in Terminating? Traces unlinkat, unlink, rmdir and umount2 on a Kubernetes node, in the kernel.",
    long_about = None
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// In a container that may not enter the node's mount namespace: where the node's / is
    /// mounted (default: /host when it looks like a root, else /proc/1/root).
    #[arg(long, global = true, value_name = "DIR")]
    host_root: Option<PathBuf>,
    /// The process whose namespaces are the node's (end-to-end tests).
    #[arg(long, global = true, default_value_t = 1, hide = true)]
    node_pid: u32,
}

#[derive(Subcommand)]
enum Command {
    /// Trace every unlinkat, unlink, rmdir and umount2 on the node and say why pods are stuck:
    /// a live view on a terminal (q or Ctrl-C: stop and print a summary), a block per finding otherwise.
    #[command(
        after_help = "Exit codes: 0 traced (stopped by Ctrl-C, q or SIGTERM, or --duration ran with no critical finding left); \
                            1 podstuck could not trace (kernel, I/O); 2 the arguments were wrong (a bad duration, a --pod that cannot be \
                            resolved, a refused --histograms DIR); 3 --duration ran and a critical finding is still active. See docs/exit-codes.md."
    )]
    Watch(WatchArgs),
    /// Trace like watch, and save what the diagnosis saw to FILE (compressed, never overwritten),
    /// to diagnose it again anywhere, without root, with podstuck replay.
    Record {
        /// Where to save the record; refused if it exists.
        file: PathBuf,
        #[command(flatten)]
        watch: WatchArgs,
    },
    /// Diagnose a saved record again, without root or a kernel: what the record is, then the findings.
    Replay {
        /// A file written by podstuck record.
        file: PathBuf,
        /// Findings as JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// The main job on a built-in default: a throwaway node with pods stuck in every common way, traced and diagnosed live, then removed.
    Demo {
        /// JSON lines (start, findings, end) instead of the live view.
        #[arg(long)]
        json: bool,
        /// How long to trace the demo node before printing the diagnosis and cleaning up.
        #[arg(long, value_parser = demo_length, default_value = "30s", allow_hyphen_values = true)]
        duration: Duration,
        /// Where the kernel programs attach, as for `watch`: the tracepoint plan is the one arm64 nodes
        /// before 6.4 and kernels without BPF trampolines take.
        #[arg(long, value_enum, default_value = "auto")]
        attach: AttachPoint,
    },
    /// What attaching alone costs, per mechanism (run by `cargo xtask bench`).
    #[command(hide = true)]
    AttachCost {
        #[arg(value_enum)]
        mechanism: podstuck::attach_cost::Mechanism,
        #[arg(long)]
        kernel_cost: bool,
    },
    /// Prints the kernel lockdown mode from a private mount namespace (run by the probes).
    #[command(name = "__read-lockdown", hide = true)]
    ReadLockdown,
    /// One of the demo's stand-in daemons (run by `podstuck demo`).
    #[command(hide = true)]
    DemoActor { comm: String, op: String, path: PathBuf },
    /// The kubectl plugin's debug pod idling until SIGTERM.
    #[command(name = "__pause", hide = true)]
    Pause,
    /// `podstuck ARGS`, stopped cleanly when standard input closes (run by the kubectl plugin).
    #[command(name = "__session", hide = true)]
    Session {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// The files at PATH as a tar archive on standard output (run by the kubectl plugin).
    #[command(name = "__pack", hide = true)]
    Pack { path: PathBuf },
    /// The node's own /bin/sh in the node's namespaces (run by `kubectl podstuck --shell`).
    #[command(name = "__host-shell", hide = true)]
    HostShell,
    /// What the Kubernetes API says about a pod stuck in Terminating: finalizers, its node
    /// NotReady, volumes that do not detach, kubelet's warnings; each with its evidence and a
    /// safe fix. Reads through a kubeconfig, in-cluster, or on the node the kubelet's own kubeconfig.
    Explain {
        /// The pod: NAME, NAMESPACE/NAME or its UID (with --from: optional when the files hold one pod).
        #[arg(required_unless_present_any = ["from", "all"])]
        pod: Option<String>,
        /// The pod's namespace (default: the kubeconfig context's); with --all, this namespace's pods only.
        #[arg(short = 'n', long)]
        namespace: Option<String>,
        /// Read JSON saved with kubectl instead of the API (get pod/events/node/volumeattachment -o json; Lists too).
        #[arg(long, value_name = "FILE", num_args = 1..)]
        from: Vec<PathBuf>,
        /// Every pod stuck in Terminating past its grace period (all namespaces, or -n's), in one table
        /// grouped by node and cause: the API's causes joined with the findings of the podstuck DaemonSet
        /// on each pod's node (read through the API server's pod proxy).
        #[arg(long, conflicts_with_all = ["pod", "from"])]
        all: bool,
        /// With --all: the namespace the podstuck DaemonSet runs in, the one your install chose.
        #[arg(long, value_name = "NAMESPACE", env = "PODSTUCK_NAMESPACE", default_value = "podstuck")]
        podstuck_namespace: String,
        /// The findings as JSON lines, after one line saying what was read; with --all, one JSON document.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        kube: KubeArgs,
    },
    /// Can podstuck run here? One line each: privileges, kernel, BTF, tracefs, cgroups, kubelet root, runtime.
    Check {
        /// kubelet's root directory (its --root-dir).
        #[arg(long, value_name = "DIR", default_value = DEFAULT_KUBELET_ROOT)]
        kubelet_root: PathBuf,
        /// The kernel's BTF as a file, for kernels without /sys/kernel/btf/vmlinux.
        #[arg(long, value_name = "FILE", value_parser = btf_file)]
        btf: Option<PathBuf>,
    },
    /// Read the histogram files of a run back: percentiles and a log2 histogram per series.
    Report {
        /// The --histograms DIR of a run.
        dir: PathBuf,
        /// One JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// What watch (and record) are told.
#[derive(Args)]
struct WatchArgs {
    /// One JSON object per line (type "start", then "event"s and "finding"s, then "end").
    #[arg(long)]
    json: bool,
    /// One plain line per call as it completes (and findings as blocks), instead of the live view.
    #[arg(long, conflicts_with = "json")]
    calls: bool,
    /// Stop by itself after this long (e.g. 30s, 5m); default: until Ctrl-C or SIGTERM.
    #[arg(long, value_parser = podstuck::words::run_length_arg, allow_hyphen_values = true)]
    duration: Option<Duration>,
    /// Follow this pod only: its UID, or NAMESPACE/NAME or NAME with -n (resolved through the
    /// Kubernetes API, and what the API says of the pod joined to the findings; a pod that cannot
    /// be resolved stops the run); repeatable. Default: the whole node.
    #[arg(long = "pod", value_name = "UID|NS/NAME", value_parser = pod_arg)]
    pods: Vec<PodArg>,
    /// The namespace of a --pod given as a bare NAME, as explain's -n (default: the kubeconfig
    /// context's); NAMESPACE/NAME names its own.
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    namespace: Option<String>,
    #[command(flatten)]
    kube: KubeArgs,
    /// kubelet's root directory (its --root-dir); a symlink is followed.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_KUBELET_ROOT)]
    kubelet_root: PathBuf,
    /// One more directory of CNI plugins, beside /opt/cni/bin, /usr/lib/cni, /usr/libexec/cni,
    /// /var/lib/cni/bin, /home/kubernetes/bin, k3s' and those containerd's and CRI-O's
    /// configurations name; repeatable.
    #[arg(long = "cni-plugin-dir", value_name = "DIR")]
    cni_plugin_dirs: Vec<PathBuf>,
    /// Failed calls only (filtered in the kernel; every call is still counted).
    #[arg(short = 'x', long)]
    errors_only: bool,
    /// These syscalls only (filtered in the kernel); repeatable. Default: all of them (arm64 has
    /// only unlinkat and umount2).
    #[arg(long = "syscall", value_name = "NAME")]
    syscalls: Vec<SyscallArg>,
    /// Keep latency histograms and write them to DIR, refreshed every interval:
    /// latency.hlog, summary.json, latency.svg, metrics.prom.
    #[arg(long, value_name = "DIR")]
    histograms: Option<PathBuf>,
    /// Mode of the files in the --histograms DIR, in octal (default 600: they name processes and
    /// paths of the node). 644 lets a non-root node exporter read metrics.prom.
    #[arg(long, value_name = "OCTAL", value_parser = file_mode, default_value = "600", requires = "histograms")]
    file_mode: u32,
    /// Overwrite the files of an earlier run in the --histograms DIR.
    #[arg(long, requires = "histograms")]
    force: bool,
    /// How often histogram files are refreshed (e.g. 5s, 1m).
    #[arg(long, value_parser = interval, default_value = "5s", allow_hyphen_values = true)]
    interval: Duration,
    /// With --json or --calls: print findings only (the diagnosis), not every call.
    #[arg(long)]
    findings: bool,
    /// A call that has not returned after this long is reported as hung (e.g. 5s, 1m).
    #[arg(long, value_parser = hung_after, default_value = "5s", allow_hyphen_values = true)]
    hung_after: Duration,
    /// Trace even if another podstuck already traces this node (each adds its own cost).
    #[arg(long)]
    concurrent: bool,
    /// Stream every call one by one, as strace would. By default a process streams up to 50 calls
    /// per outcome every 100 ms and the kernel counts the rest (counts and histograms are exact either way).
    #[arg(long)]
    every_call: bool,
    /// Where the kernel programs attach: fentry/fexit on the syscall functions (cheapest), the syscall
    /// tracepoints, or auto (fentry where the kernel has BPF trampolines).
    #[arg(long, value_enum, default_value = "auto")]
    attach: AttachPoint,
    /// The kernel's BTF as a file, for kernels without /sys/kernel/btf/vmlinux (e.g. from BTFHub):
    /// where podstuck reads the struct layouts its programs need.
    #[arg(long, value_name = "FILE", value_parser = btf_file)]
    btf: Option<PathBuf>,
    /// How a relative path's base directory is walked in the kernel: what the kernel offers
    /// (auto), the unrolled walk of kernels without bpf_loop, or none (lockdown=confidentiality),
    /// for testing them anywhere.
    #[arg(long, value_enum, default_value = "auto", hide = true)]
    path_walk: PathWalkArg,
    /// End-to-end tests only: each call record waits this long before the pipeline takes it (e.g.
    /// 500us), as a slow identify or diagnosis would, so that a test can make the loop fall behind
    /// a storm on purpose and see what the rings' reader does then.
    #[arg(long, value_name = "DURATION", value_parser = slow_pipeline, hide = true)]
    slow_pipeline: Option<Duration>,
    /// Size of the ring buffer that carries calls to podstuck, in KiB (a power of two, at least 4;
    /// default 4096, or 16384 with --every-call).
    #[arg(long, value_name = "KIB", value_parser = ring_buffer_kib)]
    ring_buffer_kib: Option<u32>,
    /// Measure what each kernel program costs per call (turns on the kernel's BPF run-time
    /// statistics while podstuck runs) and print it at the end.
    #[arg(long)]
    kernel_cost: bool,
    /// Also serve, read-only, GET /metrics (Prometheus) and GET /findings (JSON) while tracing.
    /// PORT alone is 127.0.0.1:PORT (this node only); IP:PORT as given, e.g. 0.0.0.0:9464 for a
    /// DaemonSet scraped by the cluster's Prometheus. No TLS.
    #[arg(long, value_name = "ADDR", value_parser = podstuck::serve::ListenAddr::parse)]
    listen: Option<podstuck::serve::ListenAddr>,
    /// With --listen: on a node podstuck cannot trace (kernel lockdown, no BTF, no privileges), keep
    /// serving and say why (podstuck_up 0 and podstuck_cannot_trace{reason} on /metrics, /findings, the
    /// log) until stopped, instead of exiting 2: a DaemonSet's pod then stays up rather than crash-looping.
    #[arg(long, requires = "listen")]
    stay_up: bool,
    /// The node's name as Kubernetes knows it, on findings and metrics (a DaemonSet sets NODE_NAME
    /// from spec.nodeName). Default: the kernel's node name (uname -n).
    #[arg(long, value_name = "NAME", env = "NODE_NAME")]
    node_name: Option<String>,
    /// Also post each finding as a Kubernetes Event on its pod (a node's own findings on the Node),
    /// for kubectl describe pod: needs --node-name (or NODE_NAME) and the API credentials of
    /// --kubeconfig, in-cluster or the kubelet's (RBAC: deploy/base/podstuck-events-rbac.yaml).
    #[arg(long)]
    events: bool,
}

/// How to reach the Kubernetes API.
#[derive(Args)]
struct KubeArgs {
    /// The kubeconfig to use (default: KUBECONFIG, ~/.kube/config, in-cluster, then the kubelet's own).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
}

impl From<KubeArgs> for KubeOptions {
    fn from(args: KubeArgs) -> KubeOptions {
        KubeOptions { kubeconfig: args.kubeconfig, context: args.context, ..Default::default() }
    }
}

/// A pod `--pod` names: its UID, or NAMESPACE/NAME.
#[derive(Clone)]
enum PodArg {
    Uid(PodUid),
    Named(PodRef),
}

fn pod_arg(value: &str) -> Result<PodArg, String> {
    if let Ok(uid) = PodUid::parse(value) {
        return Ok(PodArg::Uid(uid));
    }
    match PodRef::parse(value, None) {
        Ok(named @ PodRef::Name { .. }) => Ok(PodArg::Named(named)),
        _ => Err(format!("{value}: give a pod UID (kubectl get pod NAME -o jsonpath='{{.metadata.uid}}'), NAMESPACE/NAME, or NAME with -n NAMESPACE")),
    }
}

/// The `--pod` values checked against this node (issue 42), before any
/// tracing: a UID of 32 hex digits without dashes is a static pod's only if
/// the kubelet tree or a cgroup names it (else it is the dashes left out of
/// one: the UID with them if that pod is here, said; else refused, not
/// watched for "anyway"); a name of hex digits only, with no namespace, is
/// taken for a shortened UID (the live view's `pod 81f52ff3`) when one pod
/// here has a UID that starts with it, said, and refused when several do.
fn settle_pods(node: &Node, kubelet_root: &Path, pods: Vec<PodArg>, namespaced: bool) -> Result<Vec<PodArg>, String> {
    let here = podstuck::check::pods_under(node, kubelet_root);
    let mut settled = Vec::with_capacity(pods.len());
    for pod in pods {
        match pod {
            PodArg::Uid(uid) if !uid.as_str().contains('-') => {
                let hex = uid.as_str();
                if here.iter().any(|p| p == hex) || podstuck::check::cgroup_names_pod(node, &uid) {
                    settled.push(PodArg::Uid(uid));
                    continue;
                }
                let dashed = format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..]);
                if let Some(found) = PodUid::parse(&dashed).ok().filter(|d| here.iter().any(|p| p == d.as_str())) {
                    eprintln!("podstuck: --pod {hex}: taken as pod UID {found} (the same digits with their dashes)");
                    settled.push(PodArg::Uid(found));
                    continue;
                }
                return Err(format!(
                    "--pod {hex}: no pod with this UID on this node: no {}/pods/{hex} and no cgroup names it. 32 hex digits without dashes are a static pod's UID; any other pod's has dashes (8-4-4-4-12): kubectl get pod NAME -n NAMESPACE -o jsonpath='{{.metadata.uid}}', or give NAMESPACE/NAME",
                    kubelet_root.display()
                ));
            }
            PodArg::Named(PodRef::Name { namespace: None, name })
                if !namespaced
                    && (4..32).contains(&name.len())
                    && name.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') =>
            {
                let prefix = name.to_ascii_lowercase();
                let matching: Vec<&String> = here.iter().filter(|p| p.starts_with(&prefix)).collect();
                match matching.as_slice() {
                    [one] => {
                        let uid = PodUid::parse(one).map_err(|e| format!("--pod {name}: {e}"))?;
                        eprintln!("podstuck: --pod {name}: a shortened UID: taken as pod {uid}, the one pod on this node whose UID starts with it");
                        settled.push(PodArg::Uid(uid));
                    }
                    // As long as the view shows one: said as what it looks like.
                    [] if name.len() >= 8 => {
                        return Err(format!(
                            "--pod {name}: no pod on this node has a UID that starts with it, as a shortened UID from the live view would; give the whole UID, or for a pod named so, NAMESPACE/NAME (or -n NAMESPACE)"
                        ))
                    }
                    [] => settled.push(PodArg::Named(PodRef::Name { namespace: None, name })),
                    several => {
                        let several: Vec<&str> = several.iter().map(|s| s.as_str()).collect();
                        return Err(format!(
                            "--pod {name}: a shortened UID that names {} pods on this node ({}): give more of it",
                            several.len(),
                            several.join(", ")
                        ));
                    }
                }
            }
            other => settled.push(other),
        }
    }
    Ok(settled)
}

/// `--duration` of demo.
fn demo_length(value: &str) -> Result<Duration, String> {
    podstuck::words::duration_arg(value, "the demo would end before its pods got stuck")
}

/// `--interval`.
fn interval(value: &str) -> Result<Duration, String> {
    podstuck::words::duration_arg(value, "the histogram files would be rewritten without a pause")
}

/// `--slow-pipeline` (tests only).
fn slow_pipeline(value: &str) -> Result<Duration, String> {
    podstuck::words::duration_arg(value, "the pipeline would not be slowed")
}

/// `--hung-after`.
fn hung_after(value: &str) -> Result<Duration, String> {
    podstuck::words::duration_arg(value, "every call would be reported hung as it started")
}

/// An octal file mode that gives no one else write access.
fn file_mode(value: &str) -> Result<u32, String> {
    let mode = u32::from_str_radix(value.trim_start_matches("0o"), 8)
        .map_err(|_| format!("{value} is not an octal file mode (e.g. 600 or 644)"))?;
    if mode > 0o777 || mode & 0o022 != 0 {
        return Err(format!("{value}: histogram files must stay writable by root alone (e.g. 600 or 644)"));
    }
    Ok(mode)
}

/// A BTF file podstuck can read the struct layouts from: checked before
/// anything loads, so a bad one leaves nothing half-done.
fn btf_file(value: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(value);
    podstuck::btf::Btf::from_file(&path)
        .and_then(|btf| btf.kernel_offsets())
        .map_err(|e| format!("{value} is no usable kernel BTF file ({e:#}); give the BTF of this very kernel (uname -r), e.g. from BTFHub"))?;
    Ok(path)
}

/// A ring buffer size the kernel accepts: a power of two of whole pages.
fn ring_buffer_kib(value: &str) -> Result<u32, String> {
    let kib: u32 = value.parse().map_err(|_| format!("{value} is not a number of KiB (e.g. 16384)"))?;
    if kib < 4 || !kib.is_power_of_two() || kib > 1 << 21 {
        return Err(format!("{kib} KiB: the ring buffer must be a power of two between 4 KiB and 2 GiB (e.g. 16384)"));
    }
    Ok(kib)
}

impl WatchArgs {
    /// The options, or the exit code of a value that makes no sense.
    fn options(mut self, node: &'static Node, record: Option<PathBuf>) -> Result<WatchOptions, ExitCode> {
        let pods = std::mem::take(&mut self.pods);
        self.pods = match settle_pods(node, &self.kubelet_root, pods, self.namespace.is_some()) {
            Ok(pods) => pods,
            Err(e) => {
                stderr_line(format_args!("podstuck: error: {e}"));
                return Err(ExitCode::from(exit::BAD_INPUT));
            }
        };
        let syscalls: Vec<Syscall> = self.syscalls.iter().map(|&s| Syscall::from(s)).collect();
        if let Some(why) = podstuck::run::refuse_absent(Arch::HOST, &syscalls) {
            stderr_line(format_args!("podstuck: error: {why}"));
            return Err(ExitCode::from(exit::BAD_INPUT));
        }
        let node_name = self.node_name.filter(|name| !name.trim().is_empty());
        if self.events && node_name.is_none() {
            // uname in a pod is the pod's name: Events need the node's own.
            eprintln!("podstuck: error: --events needs the node's name as Kubernetes knows it: give --node-name NAME (a DaemonSet sets NODE_NAME from spec.nodeName)");
            return Err(ExitCode::from(exit::BAD_INPUT));
        }
        Ok(WatchOptions {
            json: self.json,
            duration: self.duration,
            pods: self
                .pods
                .iter()
                .filter_map(|p| match p {
                    PodArg::Uid(uid) => Some(uid.clone()),
                    PodArg::Named(_) => None,
                })
                .collect(),
            named_pods: self
                .pods
                .into_iter()
                .filter_map(|p| match p {
                    PodArg::Named(PodRef::Name { namespace: None, name }) => {
                        Some(PodRef::Name { namespace: self.namespace.clone(), name })
                    }
                    PodArg::Named(named) => Some(named),
                    PodArg::Uid(_) => None,
                })
                .collect(),
            kube: KubeOptions { node, ..KubeOptions::from(self.kube) },
            kubelet_root: self.kubelet_root,
            cni_plugin_dirs: self.cni_plugin_dirs,
            errors_only: self.errors_only,
            syscalls,
            histograms: self.histograms,
            force: self.force,
            interval: self.interval,
            findings_only: self.findings,
            calls: self.calls,
            hung_after: self.hung_after,
            concurrent: self.concurrent,
            record,
            every_call: self.every_call,
            attach: self.attach,
            btf: self.btf,
            walk: match self.path_walk {
                PathWalkArg::Auto => None,
                PathWalkArg::Unrolled => Some(PathWalk::Unrolled),
                PathWalkArg::None => Some(PathWalk::Forbidden),
            },
            file_mode: self.file_mode,
            ring_buffer_bytes: self.ring_buffer_kib.map(|kib| kib * 1024),
            kernel_cost: self.kernel_cost,
            slow_pipeline: self.slow_pipeline,
            listen: self.listen,
            // NODE_NAME set but empty (a downward API field missing) is no name.
            node_name,
            events: self.events,
            stay_up: self.stay_up,
            says_verdict: true,
            node,
        })
    }
}

impl Command {
    /// Paths the user named, as podstuck reaches them from where it runs:
    /// node paths in the node's spelling, files to write in the user's place.
    fn reach_from_here(&mut self, node: &Node) {
        match self {
            Command::Watch(args) => args.reach_from_here(node),
            Command::Record { file, watch } => {
                *file = node.user_file(&*file);
                watch.reach_from_here(node);
            }
            Command::Check { kubelet_root, btf } => {
                *kubelet_root = node.user_node_path(&*kubelet_root);
                *btf = btf.as_deref().map(|b| node.user_file(b));
            }
            _ => {}
        }
    }
}

impl WatchArgs {
    fn reach_from_here(&mut self, node: &Node) {
        self.kubelet_root = node.user_node_path(&self.kubelet_root);
        self.cni_plugin_dirs = self.cni_plugin_dirs.iter().map(|d| node.user_node_path(d)).collect();
        self.histograms = self.histograms.as_deref().map(|h| node.user_file(h));
        self.btf = self.btf.as_deref().map(|b| node.user_file(b));
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum PathWalkArg {
    Auto,
    Unrolled,
    /// No kernel reads at all, on the tracepoints: what a lockdown=confidentiality
    /// kernel that still loads the read helper gets.
    None,
}

#[derive(Clone, Copy, ValueEnum)]
enum SyscallArg {
    Unlinkat,
    Unlink,
    Rmdir,
    Umount2,
}

impl From<SyscallArg> for Syscall {
    fn from(arg: SyscallArg) -> Syscall {
        match arg {
            SyscallArg::Unlinkat => Syscall::Unlinkat,
            SyscallArg::Unlink => Syscall::Unlink,
            SyscallArg::Rmdir => Syscall::Rmdir,
            SyscallArg::Umount2 => Syscall::Umount2,
        }
    }
}

/// The errors of podstuck's own that end a run as a refusal of what was
/// asked ([`exit::BAD_INPUT`]): another podstuck traces the node, the
/// address to listen on is taken, the node cannot be traced.
const REFUSALS: [exit::Refusal; 3] = [
    exit::refused_as::<podstuck::tracer_lock::AlreadyTracing>,
    exit::refused_as::<podstuck::serve::CannotListen>,
    exit::refused_as::<NodeNotReady>,
];

/// glibc's malloc raises its mmap threshold to the largest block freed,
/// up to 32 MB: after the kernel's BTF is parsed at start (blocks of
/// 10 MB), every later block below that comes from the heap, where the
/// latency histograms' regrowth and the findings fragment it: the soak
/// with demos beside it grew 30 -> 37 MB in 6 minutes. A fixed threshold
/// (glibc's own default) keeps large blocks mapped and given back when
/// freed: the soak with demos beside it stays flat
/// (BENCHMARKS.md, Soak).
fn keep_freed_memory_returned() {
    #[cfg(target_env = "gnu")]
    // SAFETY: sets one malloc parameter, before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

fn main() -> ExitCode {
    keep_freed_memory_returned();
    let mut cli = Cli::parse();
    // Before any thread starts: entering the node's mount namespace needs a process alone.
    // explain reaches the node only for the kubelet's kubeconfig: where it
    // cannot (a laptop, another container), it reads the API as it is.
    let mut node = Node::direct();
    if matches!(&cli.command, Command::Explain { from, .. } if from.is_empty()) {
        node = podstuck::node_access::discover(cli.host_root.as_deref(), cli.node_pid).unwrap_or(node);
    }
    if matches!(cli.command, Command::Watch(_) | Command::Record { .. } | Command::Check { .. }) {
        match podstuck::node_access::discover(cli.host_root.as_deref(), cli.node_pid) {
            Ok(found) => node = found,
            Err(e) => {
                stderr_line(format_args!("podstuck: error: {e}"));
                return ExitCode::from(exit::BAD_INPUT);
            }
        }
        cli.command.reach_from_here(node);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("podstuck: error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::FAILED);
        }
    };
    let result = match cli.command {
        Command::Report { dir, json } => podstuck::report::report(&dir, json),
        Command::ReadLockdown => podstuck::kernel_features::print_lockdown_in_private_namespace().map_err(Into::into),
        Command::Demo { json, duration, attach } => {
            runtime.block_on(podstuck::demo::demo(&podstuck::demo::DemoOptions { json, duration, attach }))
        }
        Command::AttachCost { mechanism, kernel_cost } => {
            runtime.block_on(podstuck::attach_cost::run(mechanism, kernel_cost))
        }
        Command::DemoActor { comm, op, path } => podstuck::demo::actor(&comm, &op, &path),
        Command::Pause => podstuck::kubectl_plugin::remote::pause(),
        Command::Session { args } => match podstuck::kubectl_plugin::remote::session(&args) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Command::Pack { path } => podstuck::kubectl_plugin::remote::pack(&path),
        Command::HostShell => podstuck::kubectl_plugin::remote::host_shell(cli.node_pid),
        Command::Check { kubelet_root, btf } => match podstuck::check::check(node, &kubelet_root, btf.as_deref()) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(exit::BAD_INPUT),
            Err(e) => Err(e),
        },
        Command::Watch(args) => match args.options(node, None).map(|options| runtime.block_on(watch(&options))) {
            Ok(Ok(verdict)) => return ExitCode::from(verdict.exit_code()),
            Ok(Err(e)) => Err(e),
            Err(code) => return code,
        },
        Command::Record { file, watch: args } => {
            match args.options(node, Some(file)).map(|options| runtime.block_on(watch(&options))) {
                Ok(Ok(verdict)) => return ExitCode::from(verdict.exit_code()),
                Ok(Err(e)) => Err(e),
                Err(code) => return code,
            }
        }
        Command::Replay { file, json } => podstuck::record::replay(&file, json),
        Command::Explain { pod, namespace, from, all, podstuck_namespace, json, kube } => {
            let options = podstuck::explain::ExplainOptions {
                pod,
                namespace,
                from,
                json,
                kube: KubeOptions { node, ..KubeOptions::from(kube) },
                all,
                podstuck_namespace: Some(podstuck_namespace),
            };
            runtime.block_on(podstuck::explain::explain(&options))
        }
    };
    match result {
        Ok(()) => ExitCode::from(exit::SUCCESS),
        Err(e) => {
            stderr_line(format_args!("podstuck: error: {e:#}"));
            ExitCode::from(exit::code_of(&e, &REFUSALS))
        }
    }
}
