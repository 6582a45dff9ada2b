//! What `podstuck watch` (and `record`, and the demo) are told.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use podstuck_common::{KernelFilter, Syscall};

use crate::collect::kernel_filter;
use crate::explain::{KubeOptions, PodRef};
use crate::identify::pod::PodUid;
use crate::identify::DEFAULT_KUBELET_ROOT;
use crate::kernel_features::{AttachPoint, PathWalk};
use crate::node_access::Node;
use crate::preflight::NodeFacts;
use crate::print::OutputOptions;
use crate::run::{traced, RunFacts, VERSION};
use crate::serve::ListenAddr;

/// Everything a watch is told; the default is `podstuck watch` with no flag.
#[derive(Clone, Debug)]
pub struct WatchOptions {
    /// JSON lines instead of text.
    pub json: bool,
    /// Stop by itself after this long.
    pub duration: Option<Duration>,
    /// Follow these pods only; empty = the whole node.
    pub pods: Vec<PodUid>,
    /// Pods named NAMESPACE/NAME: resolved to UIDs through the Kubernetes
    /// API, and what the API says of them joined to the findings.
    pub named_pods: Vec<PodRef>,
    /// How to reach the Kubernetes API for `named_pods`.
    pub kube: KubeOptions,
    pub kubelet_root: PathBuf,
    /// More directories of CNI plugins than the node's defaults and
    /// runtime configurations name (`--cni-plugin-dir`), node spelling.
    pub cni_plugin_dirs: Vec<PathBuf>,
    /// Failed calls only (decided in the kernel).
    pub errors_only: bool,
    /// These syscalls only (decided in the kernel); empty = all four.
    pub syscalls: Vec<Syscall>,
    /// Where to keep latency histogram files, if anywhere.
    pub histograms: Option<PathBuf>,
    /// Overwrite an earlier run's files in `histograms`.
    pub force: bool,
    /// How often histogram files are refreshed (and interval histograms cut).
    pub interval: Duration,
    /// With `json` or `calls`: print findings only, not each call.
    pub findings_only: bool,
    /// One plain line per call instead of the live view (the text output
    /// of earlier versions).
    pub calls: bool,
    /// A call in flight longer than this is a hung call.
    pub hung_after: Duration,
    /// Trace even when another podstuck already traces this node.
    pub concurrent: bool,
    /// Save what the diagnosis sees to this file (`podstuck record`).
    pub record: Option<PathBuf>,
    /// Stream every call, past the per-series budget (costs user space a
    /// storm's worth of records; the counts are exact either way).
    pub every_call: bool,
    pub attach: AttachPoint,
    /// A BTF file for the struct layouts when the kernel has none (`--btf`).
    pub btf: Option<PathBuf>,
    /// The base-directory walk to use whatever the kernel offers (tests:
    /// the unrolled walk of kernels without bpf_loop, or none, as under
    /// lockdown=confidentiality).
    pub walk: Option<PathWalk>,
    /// The mode of the histogram files (`--file-mode`, default 0600).
    pub file_mode: u32,
    /// Ring buffer size in bytes; default 4 MiB, 16 with `--every-call`.
    pub ring_buffer_bytes: Option<u32>,
    /// Turn on the kernel's BPF run-time statistics and say what each
    /// program cost per run at the end.
    pub kernel_cost: bool,
    /// End-to-end tests only (`--slow-pipeline`, hidden): each call record
    /// waits this long before the pipeline takes it, as a slow identify or
    /// diagnosis would, so a test can make the loop fall behind a storm.
    pub slow_pipeline: Option<Duration>,
    /// Serve `/metrics` and `/findings` there while tracing (`--listen`).
    pub listen: Option<ListenAddr>,
    /// The node's name as the cluster knows it (`--node-name`, `NODE_NAME`);
    /// default: the kernel's (uname), which in a pod is the pod's.
    pub node_name: Option<String>,
    /// Post each finding as a Kubernetes Event on its pod (or the node)
    /// (`--events`); needs `node_name` and the API's credentials in `kube`.
    pub events: bool,
    /// `--stay-up` (with `listen`): on a node podstuck cannot trace, keep
    /// serving and say why instead of exiting (the DaemonSet's mode).
    pub stay_up: bool,
    /// Whether the end of a `--duration` with a critical finding active
    /// says "exit 3": not for the demo, whose critical findings are its
    /// lab's design and which exits 0, saying so itself.
    pub says_verdict: bool,
    /// How the node is reached from where podstuck runs.
    pub node: &'static Node,
}

impl Default for WatchOptions {
    fn default() -> WatchOptions {
        WatchOptions {
            json: false,
            duration: None,
            pods: Vec::new(),
            named_pods: Vec::new(),
            kube: KubeOptions::default(),
            kubelet_root: PathBuf::from(DEFAULT_KUBELET_ROOT),
            cni_plugin_dirs: Vec::new(),
            errors_only: false,
            syscalls: Vec::new(),
            histograms: None,
            force: false,
            interval: Duration::from_secs(5),
            findings_only: false,
            calls: false,
            hung_after: Duration::from_secs(5),
            concurrent: false,
            record: None,
            every_call: false,
            attach: AttachPoint::Auto,
            btf: None,
            walk: None,
            file_mode: 0o600,
            ring_buffer_bytes: None,
            kernel_cost: false,
            slow_pipeline: None,
            listen: None,
            node_name: None,
            events: false,
            stay_up: false,
            says_verdict: true,
            node: Node::direct(),
        }
    }
}

impl WatchOptions {
    /// What the kernel filters before anything reaches podstuck.
    pub(super) fn kernel_filter(&self) -> KernelFilter {
        let syscalls = traced(&self.syscalls).iter().fold(0, |mask, s| mask | 1 << *s as u32);
        kernel_filter(syscalls, self.errors_only, self.every_call)
    }

    /// How the run is to be shown.
    pub(super) fn output(&self) -> OutputOptions {
        OutputOptions { json: self.json, calls: self.calls, findings_only: self.findings_only }
    }

    /// The facts of a run with these options, started at `started` on the
    /// node `facts` describe.
    pub(super) fn run_facts(&self, facts: &NodeFacts, started: SystemTime) -> RunFacts {
        RunFacts {
            version: VERSION,
            node: self.node_name.clone().unwrap_or_else(|| facts.node_name.clone()),
            kernel: facts.kernel_release.clone(),
            started,
            pods: self.pods.clone(),
            kubelet_root: self.kubelet_root.clone(),
            syscalls: self.syscalls.clone(),
            errors_only: self.errors_only,
            every_call: self.every_call,
        }
    }
}
