//! The two architectures podstuck runs on, and release builds for either
//! from this machine.
//!
//! The machine's own architecture builds with the cargo running xtask
//! (rustup's, into `target/release/`). The other one builds with Debian's
//! cargo and rustc 1.96 (`/usr/bin/cargo`, the compiler the kernel
//! programs already use), into `target/<triple>/release/`: rustup's
//! toolchains cannot add a target here (no download), while Debian ships
//! that rustc's standard library for every architecture
//! (`libstd-rust-web-dev:<arch>`, after `dpkg --add-architecture`), and the
//! cross linker and C library (`gcc-<gnu triple>`, `libc6-dev-<arch>-cross`).
//! The first such build installs them, saying so, and builds every
//! dependency (some ten minutes on two cores); later ones are incremental.
//! podstuck-user/build.rs takes `bpf_target_arch` from the target, so the
//! embedded kernel programs fit the architecture without anything here.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Result};

use crate::host::{install, is_root, run, say, workspace_root};
pub use podstuck_common::program::Arch;

/// `--target`/`--arch`'s reading of an architecture: its Rust triple,
/// Debian's name or `uname -m`'s (`aarch64-unknown-linux-gnu`, `arm64`,
/// `aarch64`).
pub fn parse_arch(text: &str) -> std::result::Result<Arch, String> {
    let names = |arch: Arch| [arch.triple(), arch.debian_arch(), arch.name()];
    Arch::ALL.into_iter().find(|&arch| names(arch).contains(&text)).ok_or_else(|| {
        let known: Vec<&str> = Arch::ALL.into_iter().flat_map(names).collect();
        format!("podstuck builds for {}", known.join(", "))
    })
}

/// Where a release build for `arch` lands.
pub fn release_dir(arch: Arch) -> PathBuf {
    if arch == Arch::HOST {
        workspace_root().join("target/release")
    } else {
        workspace_root().join("target").join(arch.triple()).join("release")
    }
}

/// The Debian packages a cross build for `arch` needs: Debian rustc's
/// standard library of that architecture, the linker and the C library
/// it links against; and the C runtime the image ships for it
/// (`image.rs`), the architecture's own libc6 and libgcc-s1, in the
/// multiarch directory its loader searches and with Debian's security
/// updates (the `-cross` copy is for linking, and is not updated).
fn cross_packages(arch: Arch) -> Vec<String> {
    let debian = arch.debian_arch();
    vec![
        format!("libstd-rust-web-dev:{debian}"),
        format!("gcc-{}", arch.gnu_triple().replace('_', "-")),
        format!("libc6-dev-{debian}-cross"),
        format!("libc6:{debian}"),
        format!("libgcc-s1:{debian}"),
    ]
}

/// Builds `bins` of `package` in release for `target` and returns their
/// paths, in the order of `bins`.
pub fn build_release_for(target: Arch, package: &str, bins: &[&str]) -> Result<Vec<PathBuf>> {
    let host = target == Arch::HOST;
    let mut command = if host { crate::host::cargo() } else { cross_cargo(target)? };
    command.args(["build", "--release", "--package", package]);
    if !host {
        command.args(["--target", target.triple()]);
    }
    for bin in bins {
        command.args(["--bin", bin]);
    }
    run(&mut command)?;
    let dir = release_dir(target);
    Ok(bins.iter().map(|bin| dir.join(bin)).collect())
}

/// Debian's cargo with Debian's rustc (the kernel programs' toolchain,
/// podstuck_common::build), and nothing of the cargo running xtask
/// (rustup's toolchain, its flags, its target directory) leaking in.
fn debian_cargo() -> Result<Command> {
    let mut command = podstuck_common::build::Toolchain::find().map_err(anyhow::Error::msg)?.host_cargo();
    command.current_dir(workspace_root());
    Ok(command)
}

/// Debian's cargo set to link for `target` from this machine, its
/// packages installed first where missing.
fn cross_cargo(target: Arch) -> Result<Command> {
    install_cross(target)?;
    let mut command = debian_cargo()?;
    let linker_var = format!("CARGO_TARGET_{}_LINKER", target.triple().to_uppercase().replace('-', "_"));
    command.env(linker_var, format!("{}-gcc", target.gnu_triple()));
    say(&format!(
        "building for {} with Debian's cargo and rustc (/usr/bin), linked by {}-gcc, into {}",
        target.triple(),
        target.gnu_triple(),
        release_dir(target).display()
    ));
    Ok(command)
}

/// Adds the architecture to dpkg (so its Rust standard library can be
/// installed) and installs the cross packages, where not done yet.
pub fn install_cross(target: Arch) -> Result<()> {
    let arch = target.debian_arch();
    let foreign = Command::new("dpkg").arg("--print-foreign-architectures").output()?;
    let native = Command::new("dpkg").arg("--print-architecture").output()?;
    let known = String::from_utf8_lossy(&foreign.stdout)
        .lines()
        .chain(String::from_utf8_lossy(&native.stdout).lines())
        .any(|a| a.trim() == arch);
    if !known {
        if !is_root() {
            bail!(
                "building for {} needs Debian's {arch} packages: run this task as root (sudo -E cargo xtask ...) \
                 so it can add the architecture (dpkg --add-architecture {arch}) and install them",
                target.triple()
            );
        }
        say(&format!("adding the {arch} architecture to dpkg, for Debian rustc's {arch} standard library"));
        run(Command::new("dpkg").args(["--add-architecture", arch]))?;
    }
    let packages = cross_packages(target);
    install(&packages.iter().map(String::as_str).collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_architecture_is_read_by_any_of_its_names() {
        for arch in Arch::ALL {
            for name in [arch.triple(), arch.debian_arch(), arch.name()] {
                assert_eq!(parse_arch(name), Ok(arch));
            }
        }
        assert!(parse_arch("riscv64").unwrap_err().contains("aarch64-unknown-linux-gnu"));
    }

    /// podstuck-common writes the ELF numbers out; the ELF reader's names agree.
    #[test]
    fn elf_machines_are_the_elf_readers() {
        assert_eq!(Arch::X86_64.elf_machine(), object::elf::EM_X86_64);
        assert_eq!(Arch::Aarch64.elf_machine(), object::elf::EM_AARCH64);
    }
}
