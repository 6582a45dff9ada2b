//! The kubectl plugin under test and the cluster it talks to: the
//! `kubectl-podstuck` binary, and a [`KubectlStandIn`] (the `kubectl`
//! binary of src/bin/kubectl.rs on a PATH of the test's own, with its
//! state directory) that answers as kubectl would and logs every call.

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

/// A hand-written `kubectl get pod -o json` of a pod (tests/fixtures/NAME).
pub fn pod_fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

/// The kubectl stand-in's state, in `dir`, and a PATH holding it alone.
pub struct KubectlStandIn {
    dir: PathBuf,
}

impl KubectlStandIn {
    /// A stand-in with no pods, its state and PATH below `dir`.
    pub fn new(dir: &Path) -> KubectlStandIn {
        let standin = KubectlStandIn { dir: dir.to_path_buf() };
        std::fs::create_dir_all(standin.bin()).unwrap();
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
