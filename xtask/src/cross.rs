//! The two architectures podstuck runs on, and the release build for
//! either from this machine: the one build the release tarballs, the
//! image, `cargo xtask build` and the VM matrix all take their binaries
//! from, so every route runs the same file.
//!
//! Both architectures build with Debian's cargo and rustc 1.96
//! (`/usr/bin/cargo`, the compiler the kernel programs already use), each
//! with an explicit `--target`, into `target/<triple>/release/`: rustup's
//! toolchains cannot add a target here (no download), while Debian ships
//! that rustc's standard library for every architecture
//! (`libstd-rust-web-dev:<arch>`, after `dpkg --add-architecture`), and the
//! linker and C library (`gcc-<gnu triple>`, `libc6-dev-<arch>-cross`;
//! this machine's own `gcc` and `libc6-dev`). One compiler for both
//! tarballs.
//!
//! The binaries are fully static (`-C target-feature=+crt-static`, glibc's
//! `libc.a`): no loader, no shared library, no `GLIBC_` symbol version, so
//! they start on any node's libc and the image holds them alone
//! (docs/building.md says why this route and not musl or a zig-linked
//! glibc floor, with the measurements). `cargo auditable` embeds the
//! dependency list in each binary. The first build for an architecture installs what it
//! needs, saying so, and builds every dependency (some ten minutes on two
//! cores); later ones are incremental. podstuck-user/build.rs takes
//! `bpf_target_arch` from the target, so the embedded kernel programs fit
//! the architecture without anything here.

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
    workspace_root().join("target").join(arch.triple()).join("release")
}

/// The Debian packages a release build for `arch` needs: Debian rustc's
/// standard library of that architecture, the linker and the C library it
/// links statically (`libc.a`); for the other architecture also its own
/// libc6 and libgcc-s1, the C runtime of the arm64 VM guest's tools
/// (`vm::guest`), in the multiarch directory its loader searches.
fn release_packages(arch: Arch) -> Vec<String> {
    let debian = arch.debian_arch();
    if arch == Arch::HOST {
        return vec![format!("libstd-rust-web-dev:{debian}"), "gcc".into(), "libc6-dev".into()];
    }
    vec![
        format!("libstd-rust-web-dev:{debian}"),
        format!("gcc-{}", arch.gnu_triple().replace('_', "-")),
        format!("libc6-dev-{debian}-cross"),
        format!("libc6:{debian}"),
        format!("libgcc-s1:{debian}"),
    ]
}

/// Builds `bins` of `package` in release for `target`, static, and
/// returns their paths, in the order of `bins`.
pub fn build_release_for(target: Arch, package: &str, bins: &[&str]) -> Result<Vec<PathBuf>> {
    build(target, package, bins, &[])
}

/// The test helpers the VM guests run, `actor` and `fuse_server`, in
/// release for `target`, static, without the rest of the suite
/// (podstuck-tests' `suite` feature): they need libc alone, and the suite's
/// dependencies (the Kubernetes types the most) cost minutes of each
/// architecture's release build.
pub fn build_release_helpers(target: Arch) -> Result<Vec<PathBuf>> {
    build(target, "podstuck-tests", &["actor", "fuse_server"], &["--no-default-features"])
}

fn build(target: Arch, package: &str, bins: &[&str], more: &[&str]) -> Result<Vec<PathBuf>> {
    let mut command = release_cargo(target)?;
    command.args(["auditable", "build", "--release", "--locked", "--package", package, "--target", target.triple()]);
    command.args(more);
    for bin in bins {
        command.args(["--bin", bin]);
    }
    run(&mut command)?;
    let dir = release_dir(target);
    Ok(bins.iter().map(|bin| dir.join(bin)).collect())
}

/// The rustc flags of a release build: static. They apply to the
/// target's crates only, not to build scripts and proc macros, which run
/// here (`release_cargo`). No path needs remapping
/// for the same bytes from a clone elsewhere: cargo names the workspace's
/// sources by relative paths, the release profile writes no debug info,
/// and the crate registry is `$CARGO_HOME`'s (`strings` finds no path of
/// the clone in the binaries; docs/building.md).
pub const RELEASE_RUSTFLAGS: &str = "-Ctarget-feature=+crt-static";

/// Debian's cargo with Debian's rustc (the kernel programs' toolchain,
/// podstuck_common::build), and nothing of the cargo running xtask
/// (rustup's toolchain, its flags, its target directory) leaking in.
fn debian_cargo() -> Result<Command> {
    let mut command = podstuck_common::build::Toolchain::find().map_err(anyhow::Error::msg)?.host_cargo();
    command.current_dir(workspace_root());
    Ok(command)
}

/// Debian's cargo set to build and link `target` statically from this
/// machine, its packages and cargo-auditable installed first where missing.
fn release_cargo(target: Arch) -> Result<Command> {
    install_release_packages(target)?;
    crate::setup::install_cargo_tool(&crate::setup::CARGO_AUDITABLE)?;
    let mut command = debian_cargo()?;
    // RUSTFLAGS, not `target.<triple>.rustflags`: with an explicit
    // --target it reaches the target's crates only. The target's own
    // config would also reach the build scripts and proc macros when the
    // target is this machine's (cargo's target-applies-to-host), so the
    // two architectures' builds would rebuild those, and all that uses
    // them, each time the other ran. The same holds for the linker: set
    // for the other architecture only (this machine's cc links its own).
    command.env("RUSTFLAGS", RELEASE_RUSTFLAGS);
    if target != Arch::HOST {
        let triple = target.triple().to_uppercase().replace('-', "_");
        command.env(format!("CARGO_TARGET_{triple}_LINKER"), format!("{}-gcc", target.gnu_triple()));
    }
    say(&format!(
        "building for {} with Debian's cargo and rustc (/usr/bin), statically linked ({RELEASE_RUSTFLAGS}), into {}",
        target.triple(),
        release_dir(target).display()
    ));
    Ok(command)
}

/// Adds the architecture to dpkg where it is another (so its Rust standard
/// library can be installed) and installs the release packages, where not
/// done yet.
pub fn install_release_packages(target: Arch) -> Result<()> {
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
    let packages = release_packages(target);
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
