//! The machine xtask runs on, as every task uses it: where the workspace
//! is, running a command and saying what happens, root or not, and
//! installing the Debian packages a task needs. Below every task module;
//! it imports none of them.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The workspace's root: xtask is one of its members.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

/// When this xtask started (`started` sets it at the top of main).
static STARTED: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// Starts the clock `say` stamps its lines with.
pub fn started() {
    STARTED.get_or_init(std::time::Instant::now);
}

/// A line of what xtask does, on stderr (stdout is the tests' and tools'),
/// stamped with the minutes and seconds since xtask started: a CI log then
/// says where a whole run's time went.
pub fn say(message: &str) {
    let elapsed = STARTED.get_or_init(std::time::Instant::now).elapsed().as_secs();
    eprintln!("xtask [{:02}:{:02}]: {message}", elapsed / 60, elapsed % 60);
}

/// Runs `command`, failing with it as written when it fails.
pub fn run(command: &mut Command) -> Result<()> {
    let shown = format!("{command:?}");
    let status = command.status().with_context(|| format!("cannot run {shown}"))?;
    if !status.success() {
        bail!("{shown} failed ({status})");
    }
    Ok(())
}

/// Whether xtask may install packages, load programs and mount.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn package_installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        .unwrap_or(false)
}

/// Where `cargo install` puts tools: `$CARGO_HOME`, else `~/.cargo`.
pub fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(&std::env::var_os("HOME").unwrap_or_default()).join(".cargo"))
}

/// The cargo running xtask, in the workspace.
pub fn cargo() -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    command.current_dir(workspace_root());
    command
}

/// Installs the Debian packages of `packages` that are missing (apt-get,
/// as root); does nothing when none is.
pub fn install(packages: &[&str]) -> Result<()> {
    let missing: Vec<&str> = packages.iter().copied().filter(|p| !package_installed(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "missing Debian packages {}: run this task as root (sudo -E cargo xtask ...) so it can install them",
            missing.join(" ")
        );
    }
    say(&format!("installing Debian packages {} (apt-get)", missing.join(" ")));
    run(Command::new("apt-get").arg("update").arg("-q"))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}
