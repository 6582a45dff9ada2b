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

use crate::{install, is_root, run, say, workspace_root};

/// A Linux architecture podstuck is built for, by its Rust target triple.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    #[value(name = "x86_64-unknown-linux-gnu", alias = "amd64", alias = "x86_64")]
    X86_64,
    #[value(name = "aarch64-unknown-linux-gnu", alias = "arm64", alias = "aarch64")]
    Aarch64,
}

impl Target {
    /// Both, in the order the image index lists them.
    pub const ALL: [Target; 2] = [Target::X86_64, Target::Aarch64];

    /// The architecture xtask itself was built for, the one `cargo()` builds.
    pub fn host() -> Result<Target> {
        match std::env::consts::ARCH {
            "x86_64" => Ok(Target::X86_64),
            "aarch64" => Ok(Target::Aarch64),
            other => bail!("podstuck builds on x86_64 and aarch64 machines, not {other}"),
        }
    }

    pub fn triple(self) -> &'static str {
        match self {
            Target::X86_64 => "x86_64-unknown-linux-gnu",
            Target::Aarch64 => "aarch64-unknown-linux-gnu",
        }
    }

    /// Debian's name of the architecture, which is also OCI's
    /// (`platform.architecture` of an image).
    pub fn debian_arch(self) -> &'static str {
        match self {
            Target::X86_64 => "amd64",
            Target::Aarch64 => "arm64",
        }
    }

    /// The GNU triple: the cross tools' prefix, the multiarch library
    /// directory (`/lib/<gnu>/`) and the cross sysroot (`/usr/<gnu>/`).
    pub fn gnu_triple(self) -> &'static str {
        match self {
            Target::X86_64 => "x86_64-linux-gnu",
            Target::Aarch64 => "aarch64-linux-gnu",
        }
    }

    /// The ELF header's `e_machine` of its binaries.
    pub fn elf_machine(self) -> u16 {
        match self {
            Target::X86_64 => object::elf::EM_X86_64,
            Target::Aarch64 => object::elf::EM_AARCH64,
        }
    }

    /// The target whose binaries have this `e_machine`.
    pub fn of_elf_machine(machine: u16) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.elf_machine() == machine)
    }

    /// Where a release build for it lands.
    pub fn release_dir(self) -> Result<PathBuf> {
        Ok(if self == Target::host()? {
            workspace_root().join("target/release")
        } else {
            workspace_root().join("target").join(self.triple()).join("release")
        })
    }

    /// The Debian packages a cross build for it needs: Debian rustc's
    /// standard library of that architecture, the linker and the C library
    /// it links against; and the C runtime the image ships for it
    /// (`image.rs`), the architecture's own libc6 and libgcc-s1, in the
    /// multiarch directory its loader searches and with Debian's security
    /// updates (the `-cross` copy is for linking, and is not updated).
    fn cross_packages(self) -> Vec<String> {
        let arch = self.debian_arch();
        vec![
            format!("libstd-rust-web-dev:{arch}"),
            format!("gcc-{}", self.gnu_triple().replace('_', "-")),
            format!("libc6-dev-{arch}-cross"),
            format!("libc6:{arch}"),
            format!("libgcc-s1:{arch}"),
        ]
    }
}

/// Builds `bins` of `package` in release for `target` and returns their
/// paths, in the order of `bins`.
pub fn build_release_for(target: Target, package: &str, bins: &[&str]) -> Result<Vec<PathBuf>> {
    let host = target == Target::host()?;
    let mut command = if host { crate::cargo() } else { cross_cargo(target)? };
    command.args(["build", "--release", "--package", package]);
    if !host {
        command.args(["--target", target.triple()]);
    }
    for bin in bins {
        command.args(["--bin", bin]);
    }
    run(&mut command)?;
    let dir = target.release_dir()?;
    Ok(bins.iter().map(|bin| dir.join(bin)).collect())
}

/// Debian's cargo with Debian's rustc, and nothing of the cargo running
/// xtask (rustup's toolchain, its flags, its target directory) leaking in:
/// a `RUSTC` or `RUSTFLAGS` of rustup's would build with a compiler that
/// has no standard library but its own host's.
pub fn debian_cargo() -> Result<Command> {
    let mut command = Command::new("/usr/bin/cargo");
    command.current_dir(workspace_root());
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if (key.starts_with("CARGO") && key != "CARGO_HOME") || key.starts_with("RUST") {
            command.env_remove(key.as_ref());
        }
    }
    // Debian's tools before rustup's proxies of the same names in
    // ~/.cargo/bin (a build script that runs `rustc` or `cargo` by name).
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path = std::env::join_paths(std::iter::once(PathBuf::from("/usr/bin")).chain(std::env::split_paths(&path)))?;
    command.env("PATH", path).env("RUSTC", "/usr/bin/rustc");
    Ok(command)
}

/// Debian's cargo set to link for `target` from this machine, its
/// packages installed first where missing.
fn cross_cargo(target: Target) -> Result<Command> {
    install_cross(target)?;
    let mut command = debian_cargo()?;
    let linker_var = format!("CARGO_TARGET_{}_LINKER", target.triple().to_uppercase().replace('-', "_"));
    command.env(linker_var, format!("{}-gcc", target.gnu_triple()));
    say(&format!(
        "building for {} with Debian's cargo and rustc (/usr/bin), linked by {}-gcc, into {}",
        target.triple(),
        target.gnu_triple(),
        target.release_dir()?.display()
    ));
    Ok(command)
}

/// Adds the architecture to dpkg (so its Rust standard library can be
/// installed) and installs the cross packages, where not done yet.
pub fn install_cross(target: Target) -> Result<()> {
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
    let packages = target.cross_packages();
    install(&packages.iter().map(String::as_str).collect::<Vec<_>>())
}
