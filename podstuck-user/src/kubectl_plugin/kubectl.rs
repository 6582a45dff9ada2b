//! The `kubectl` on PATH, run with the user's `--context` and
//! `--kubeconfig` (and so their current context, kubeconfig and
//! credentials): every call the plugin makes to the cluster goes through
//! it, so the plugin needs no client library and sees exactly what
//! `kubectl` would show the user.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use anyhow::{anyhow, Context, Result};

use crate::words::terminal_safe_lines;

/// Whether a call may be stopped by the user's Ctrl-C along with the plugin.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// In the terminal's foreground group: Ctrl-C stops it too. For the
    /// first call, before anything exists in the cluster (and where a
    /// credential plugin may want the terminal).
    Foreground,
    /// In a process group of its own: the terminal's Ctrl-C reaches only
    /// the plugin, which finishes what it started (a create is followed
    /// by its delete, a trace stopped cleanly) instead of losing kubectl
    /// halfway.
    Own,
}

/// How kubectl is run.
pub struct Kubectl {
    /// Flags given before every verb: `--context`, `--kubeconfig`.
    global: Vec<OsString>,
    /// The context asked for, to name it when the cluster cannot be reached.
    context: Option<String>,
}

impl Kubectl {
    pub fn new(context: Option<&str>, kubeconfig: Option<&PathBuf>) -> Kubectl {
        let mut global = Vec::new();
        if let Some(context) = context {
            global.extend(["--context".into(), context.into()]);
        }
        if let Some(kubeconfig) = kubeconfig {
            global.extend(["--kubeconfig".into(), kubeconfig.clone().into_os_string()]);
        }
        Kubectl { global, context: context.map(str::to_string) }
    }

    /// `kubectl GLOBAL ARGS...`, not yet started.
    pub fn command<S: AsRef<std::ffi::OsStr>>(&self, args: impl IntoIterator<Item = S>, group: Group) -> Command {
        let mut command = Command::new("kubectl");
        command.args(&self.global).args(args);
        if group == Group::Own {
            command.process_group(0);
        }
        command
    }

    /// Runs `kubectl ARGS...` to its end with `input` on its standard
    /// input; its standard output, or an error in kubectl's own words.
    pub fn run<S: AsRef<std::ffi::OsStr>>(
        &self,
        args: impl IntoIterator<Item = S>,
        input: Option<&[u8]>,
        group: Group,
    ) -> Result<String> {
        let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_os_string()).collect();
        let mut command = self.command(&args, group);
        command
            .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = spawn(&mut command)?;
        if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin.write_all(input).context("writing to kubectl")?;
        }
        let Output { status, stdout, stderr } = child.wait_with_output().context("waiting for kubectl")?;
        if !status.success() {
            let said = String::from_utf8_lossy(&stderr);
            let said = said.trim();
            let verb = args.iter().take(2).map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ");
            if let Some(unreachable) = no_cluster(&verb, said, self.context.as_deref()) {
                return Err(anyhow!("{}", terminal_safe_lines(&unreachable)));
            }
            return Err(anyhow!(
                "kubectl {verb}: {}",
                if said.is_empty() { format!("failed ({status})") } else { terminal_safe_lines(said).into_owned() }
            ));
        }
        String::from_utf8(stdout).context("kubectl printed text that is not UTF-8")
    }
}

/// When kubectl's `stderr` says it could not reach the cluster: one line
/// in podstuck's words (what failed, the context tried, what to check),
/// with kubectl's last line quoted as the reason. kubectl itself repeats
/// its discovery error (klog lines from memcache.go) once per retry
/// before saying it in a line of its own: passed through, that is the
/// same failure five times over.
fn no_cluster(verb: &str, stderr: &str, context: Option<&str>) -> Option<String> {
    const SIGNS: [&str; 4] = [
        "memcache.go",
        "couldn't get current server API group list",
        "The connection to the server",
        "Unable to connect to the server",
    ];
    if !SIGNS.iter().any(|sign| stderr.contains(sign)) {
        return None;
    }
    let lines: Vec<&str> = stderr.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    // A klog line: severity letter, MMDD, a space, the time.
    let klog = |line: &str| {
        let b = line.as_bytes();
        b.len() > 6
            && matches!(b[0], b'E' | b'W' | b'I' | b'F')
            && b[1..5].iter().all(u8::is_ascii_digit)
            && b[5] == b' '
    };
    let reason = match lines.iter().rev().find(|l| !klog(l)) {
        Some(line) => line.to_string(),
        // Only klog lines: the message of the last, without its header.
        None => lines.last().map(|l| l.split_once("] ").map_or(*l, |(_, m)| m).to_string()).unwrap_or_default(),
    };
    let context = match context {
        Some(name) => format!("context {name}"),
        None => "the current context (kubectl config current-context)".to_string(),
    };
    Some(format!(
        "cannot reach the cluster: kubectl {verb} found no API server answering for {context} (kubectl said: \"{reason}\"); check that this is the cluster meant (--context NAME, --kubeconfig FILE) and that its API server is up and reachable from here (kubectl cluster-info)"
    ))
}

/// Starts `command`, saying plainly when kubectl is not there.
pub fn spawn(command: &mut Command) -> Result<std::process::Child> {
    command.spawn().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => anyhow!(
            "kubectl not found on PATH: kubectl podstuck drives kubectl with your current context; install kubectl (https://kubernetes.io/docs/tasks/tools/) or put it on PATH"
        ),
        _ => anyhow!("cannot run kubectl: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What kubectl 1.30 prints with no cluster: its discovery error once
    /// per retry, then its own line.
    const NO_CLUSTER: &str = "E1125 10:00:00.000000    4242 memcache.go:265] couldn't get current server API group list: Get \"http://localhost:8080/api?timeout=32s\": dial tcp 127.0.0.1:8080: connect: connection refused
E1125 10:00:00.001000    4242 memcache.go:265] couldn't get current server API group list: Get \"http://localhost:8080/api?timeout=32s\": dial tcp 127.0.0.1:8080: connect: connection refused
E1125 10:00:00.002000    4242 memcache.go:265] couldn't get current server API group list: Get \"http://localhost:8080/api?timeout=32s\": dial tcp 127.0.0.1:8080: connect: connection refused
E1125 10:00:00.003000    4242 memcache.go:265] couldn't get current server API group list: Get \"http://localhost:8080/api?timeout=32s\": dial tcp 127.0.0.1:8080: connect: connection refused
E1125 10:00:00.004000    4242 memcache.go:265] couldn't get current server API group list: Get \"http://localhost:8080/api?timeout=32s\": dial tcp 127.0.0.1:8080: connect: connection refused
The connection to the server localhost:8080 was refused - did you specify the right host or port?
";

    #[test]
    fn a_cluster_that_does_not_answer_is_said_once_in_podstucks_words() {
        let said = no_cluster("get pod", NO_CLUSTER, Some("prod")).unwrap();
        assert_eq!(
            said,
            "cannot reach the cluster: kubectl get pod found no API server answering for context prod (kubectl said: \"The connection to the server localhost:8080 was refused - did you specify the right host or port?\"); check that this is the cluster meant (--context NAME, --kubeconfig FILE) and that its API server is up and reachable from here (kubectl cluster-info)"
        );
        assert!(!said.contains("memcache.go") && !said.contains('\n'), "{said}");
        let said = no_cluster("get pod", NO_CLUSTER, None).unwrap();
        assert!(said.contains("for the current context (kubectl config current-context)"), "{said}");
    }

    #[test]
    fn only_klog_lines_give_the_last_ones_message() {
        let klog_only: String = NO_CLUSTER.lines().take(5).map(|l| format!("{l}\n")).collect();
        let said = no_cluster("get pod", &klog_only, None).unwrap();
        assert!(said.contains("(kubectl said: \"couldn't get current server API group list: Get"), "{said}");
    }

    #[test]
    fn other_failures_are_not_taken_for_a_missing_cluster() {
        assert_eq!(no_cluster("get pod", "Error from server (NotFound): pods \"web-0\" not found", None), None);
    }
}
