//! What runs inside the debug pod, as hidden `podstuck` subcommands:
//!
//! - `podstuck __pause`: the pod's main process; idles until SIGTERM (the
//!   pod deleted) or the pod's deadline, so the pod stays up while the
//!   plugin runs podstuck in it.
//! - `podstuck __session -- watch ARGS`: runs `podstuck watch ARGS` and
//!   stops it with SIGINT when its own standard input closes. The plugin
//!   holds that input (`kubectl exec -i`): closing it, or the plugin or
//!   its connection going away, stops the trace cleanly (last findings,
//!   summary, histogram files and record finished) whether or not there
//!   is a terminal, and without a second `kubectl exec` to find and signal
//!   the tracer.
//! - `podstuck __pack PATH`: the files at PATH as a tar archive on
//!   standard output (see [`super::tar`]).
//! - `podstuck __host-shell`: the node's own `/bin/sh`, as root in the
//!   node's namespaces (PID 1's mount, UTS, IPC, network and cgroup
//!   ones), for the fixes podstuck printed: the image has no shell, and a
//!   shell in the debug pod's mount namespace would unmount its private
//!   copy of a volume, not the node's. podstuck runs nothing there itself:
//!   it hands the terminal to the node's shell and is gone (exec).

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use nix::sys::signal::{kill, SigSet, Signal};
use nix::unistd::Pid;

use super::signals::StopSignals;

/// `podstuck __pause`: waits for SIGTERM, SIGINT or SIGHUP, then exits.
pub fn pause() -> Result<()> {
    let mut set = SigSet::empty();
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        set.add(signal);
    }
    // Blocked, then waited for: with hostPID this process is not PID 1
    // of a namespace of its own, and a signal's default would kill it
    // anyway; waiting for it makes the exit a clean 0.
    set.thread_block().context("blocking the stop signals")?;
    set.wait().context("waiting for a stop signal")?;
    Ok(())
}

/// `podstuck __session -- ARGS`: `podstuck ARGS`, stopped with SIGINT
/// when standard input closes (or on SIGTERM/SIGHUP/SIGINT here); its
/// exit code passed on.
pub fn session(args: &[std::ffi::OsString]) -> Result<ExitCode> {
    let stops = StopSignals::install()?;
    // This very binary, through the kernel's link to it: its path may be
    // out of this mount namespace's sight, or replaced since.
    let mut child = Command::new("/proc/self/exe")
        .arg0("podstuck")
        .args(args)
        .stdin(Stdio::null())
        .spawn()
        .context("starting podstuck")?;
    let input_closed = Arc::new(AtomicBool::new(false));
    let flag = input_closed.clone();
    std::thread::spawn(move || {
        // Whatever arrives is ignored: only the end of the input matters.
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        flag.store(true, Ordering::SeqCst);
    });
    let mut told = false;
    loop {
        if let Some(status) = child.try_wait().context("waiting for podstuck")? {
            return Ok(exit_code(status));
        }
        if !told && (input_closed.load(Ordering::SeqCst) || stops.count() > 0) {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGINT);
            told = true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The exit code to pass on for a child's status: its own, or 128 + the
/// signal that ended it, as a shell says it.
pub fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(code.clamp(0, 255) as u8),
        (None, Some(signal)) => ExitCode::from((128 + signal).clamp(0, 255) as u8),
        _ => ExitCode::from(crate::exit::FAILED),
    }
}

/// `podstuck __host-shell`: enters `node_pid`'s namespaces and becomes
/// the node's `/bin/sh` (returns only on failure).
pub fn host_shell(node_pid: u32) -> Result<()> {
    use nix::sched::{setns, CloneFlags};
    let open = |kind: &str| {
        std::fs::File::open(format!("/proc/{node_pid}/ns/{kind}"))
            .with_context(|| format!("cannot open the node's {kind} namespace (/proc/{node_pid}/ns/{kind}): the debug pod must be privileged with the host's PID namespace"))
    };
    let mount = open("mnt")?;
    // The others first: entering the mount namespace changes what /proc is.
    for (kind, flag) in [
        ("uts", CloneFlags::CLONE_NEWUTS),
        ("ipc", CloneFlags::CLONE_NEWIPC),
        ("net", CloneFlags::CLONE_NEWNET),
        ("cgroup", CloneFlags::CLONE_NEWCGROUP),
    ] {
        // A namespace already shared (hostNetwork, hostIPC) or absent on
        // this kernel (cgroup before 4.6) is no reason to refuse.
        if let Ok(fd) = open(kind) {
            let _ = setns(&fd, flag);
        }
    }
    setns(&mount, CloneFlags::CLONE_NEWNS).with_context(|| {
        "cannot enter the node's mount namespace (needs CAP_SYS_ADMIN: a privileged debug pod)".to_string()
    })?;
    std::env::set_current_dir("/").context("cannot change to the node's /")?;
    let shell = Path::new("/bin/sh");
    if !shell.exists() {
        anyhow::bail!("this node has no /bin/sh (Talos and Bottlerocket ship none by design): run the fixes through the node's own admin tooling");
    }
    // The node's own programs, wherever the container's PATH pointed.
    let err = Command::new(shell)
        .arg0("sh")
        .env("PS1", "node# ")
        .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .exec();
    Err(anyhow::Error::new(err).context("cannot run the node's /bin/sh"))
}

/// `podstuck __pack PATH`.
pub fn pack(path: &Path) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    super::tar::pack(path, &mut out)
}
