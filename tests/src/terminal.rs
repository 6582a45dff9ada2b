//! A real terminal for the end-to-end tests: tmux servers of the tests'
//! own, and what runs in them (the podstuck under a pane's shell, the BPF
//! programs a process holds).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::wait::poll_until_else;

/// A tmux server of the test's own (its own socket, in the test's scratch
/// directory: a user's tmux, or the other test's, is never touched),
/// running one session; killed on drop with whatever runs in it.
pub struct Tmux {
    socket: PathBuf,
    session: String,
    /// The podstuck under it, once known: killed on drop in case the
    /// hangup does not reach it.
    pub podstuck: Option<u32>,
}

impl Tmux {
    /// A terminal of 200 x 50: room for everything.
    pub fn start(scratch: &Path, name: &str, command: &str) -> Tmux {
        Tmux::start_sized(scratch, name, command, 80 + 120, 50)
    }

    /// A terminal of `width` x `height` running `command`. Its tmux takes
    /// OSC 52 from the program into a paste buffer (`set-clipboard on`),
    /// so [`Tmux::buffer`] reads what the program copied.
    pub fn start_sized(scratch: &Path, name: &str, command: &str, width: u16, height: u16) -> Tmux {
        let tmux = Tmux { socket: scratch.join("tmux.sock"), session: name.to_string(), podstuck: None };
        let (width, height) = (width.to_string(), height.to_string());
        let status = tmux
            .command()
            .args(["new-session", "-d", "-s", name, "-x", &width, "-y", &height, command])
            .status()
            .expect("run tmux: install it (apt-get install tmux; cargo xtask test installs it)");
        assert!(status.success(), "tmux new-session failed: {status}");
        // Set before any key is sent, so before anything is copied.
        tmux.output(&["set-option", "-s", "set-clipboard", "on"]);
        tmux
    }

    /// The newest paste buffer (what the program last copied with OSC 52),
    /// if there is one.
    pub fn buffer(&self) -> Option<String> {
        let out = self.command().args(["show-buffer"]).output().expect("run tmux");
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub fn command(&self) -> Command {
        let mut command = Command::new("tmux");
        command.arg("-S").arg(&self.socket);
        command
    }

    pub fn output(&self, args: &[&str]) -> String {
        let out = self.command().args(args).output().expect("run tmux");
        assert!(out.status.success(), "tmux {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The pane as a user sees it; lines wrapped by the terminal are joined.
    pub fn screen(&self) -> String {
        self.output(&["capture-pane", "-p", "-J", "-t", &self.session])
    }

    /// A tmux format of the pane (`#{alternate_on}`...).
    pub fn pane(&self, format: &str) -> String {
        self.output(&["display-message", "-p", "-t", &self.session, format]).trim().to_string()
    }

    pub fn keys(&self, keys: &str) {
        self.output(&["send-keys", "-t", &self.session, keys]);
    }

    /// Waits until the screen satisfies `ready`; returns it. Panics after
    /// `timeout` with the last screen and what was awaited.
    pub fn wait_for(&self, what: &str, timeout: Duration, ready: impl Fn(&str) -> bool) -> String {
        poll_until_else(what, timeout, || {
            let screen = self.screen();
            match ready(&screen) {
                true => Ok(screen),
                false => Err(format!("the screen:\n{screen}")),
            }
        })
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command().arg("kill-server").status();
        if let Some(pid) = self.podstuck {
            // SAFETY: kill(2); the pid was read while podstuck ran under
            // this test's own shell, and is checked to still be podstuck.
            if std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "podstuck") {
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
        }
    }
}

/// The child of `parent` named `comm`, if there is one.
pub fn child_named(parent: u32, comm: &str) -> Option<u32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // pid (comm) state ppid ...: the comm may hold spaces, so split after ')'.
        let Some((head, rest)) = stat.rsplit_once(')') else { continue };
        let ppid = rest.split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) && head.ends_with(&format!("({comm}")) {
            return Some(pid);
        }
    }
    None
}

/// Ids of the BPF programs a process holds, from its fds' fdinfo.
pub fn programs_held(pid: u32) -> Vec<u32> {
    let mut ids = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).into_iter().flatten().flatten() {
        let info = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in info.lines() {
            if let Some(id) = line.strip_prefix("prog_id:").and_then(|v| v.trim().parse::<u32>().ok()) {
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
    }
    ids
}
