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
        Kubectl { global }
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
    pub fn run<S: AsRef<std::ffi::OsStr>>(&self, args: impl IntoIterator<Item = S>, input: Option<&[u8]>, group: Group) -> Result<String> {
        let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_os_string()).collect();
        let mut command = self.command(&args, group);
        command.stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() }).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = spawn(&mut command)?;
        if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin.write_all(input).context("writing to kubectl")?;
        }
        let Output { status, stdout, stderr } = child.wait_with_output().context("waiting for kubectl")?;
        if !status.success() {
            let said = String::from_utf8_lossy(&stderr);
            let said = said.trim();
            let verb = args.iter().take(2).map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ");
            return Err(anyhow!("kubectl {verb}: {}", if said.is_empty() { format!("failed ({status})") } else { terminal_safe_lines(said).into_owned() }));
        }
        String::from_utf8(stdout).context("kubectl printed text that is not UTF-8")
    }
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
