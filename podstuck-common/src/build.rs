//! How podstuck's kernel programs (`podstuck-ebpf`) are compiled: the one
//! declaration of their build environment, for podstuck-user's build
//! script (which embeds them, for the architecture it builds for) and for
//! xtask (clippy on them; its cross builds of podstuck take the same
//! compiler, [`Toolchain::host_cargo`]). Only with the `build` feature, on the host: the
//! kernel side never sees it.
//!
//! The chain is the one in docs/building.md: Debian's rustc-web and
//! cargo-web (a prebuilt `core` for `bpfel-unknown-none`, which rustup
//! cannot provide here) and bpf-linker. `cargo xtask build` installs them;
//! without them [`Toolchain::find`] says what is missing and how to get it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::string::String;
use std::vec::Vec;
use std::{env, format};

use crate::program::Arch;

/// The target the kernel programs are built for.
pub const TARGET: &str = "bpfel-unknown-none";

/// The variables that choose another compiler than Debian's (a build
/// script reruns when they change).
pub const TOOLCHAIN_VARS: [&str; 2] = ["PODSTUCK_BPF_RUSTC", "PODSTUCK_BPF_CARGO"];

/// What to run once when the toolchain is missing.
const SETUP: &str = "run `cargo xtask build` once: it installs Debian's rustc-web, cargo-web, \
                     libstd-rust-web-dev-bpf and llvm-22-dev, and bpf-linker (see docs/building.md)";

/// The compiler, cargo and linker that build the kernel programs.
pub struct Toolchain {
    rustc: PathBuf,
    cargo: PathBuf,
    linker_dir: PathBuf,
}

impl Toolchain {
    /// Debian's rustc and cargo (or `$PODSTUCK_BPF_RUSTC`,
    /// `$PODSTUCK_BPF_CARGO`), which must have `core` for [`TARGET`], and
    /// bpf-linker on PATH or in `$CARGO_HOME/bin`; what is missing, and
    /// how to set it up, if not.
    pub fn find() -> Result<Toolchain, String> {
        let chosen = |var: &str, default: &str| PathBuf::from(env::var_os(var).unwrap_or_else(|| default.into()));
        let rustc = chosen(TOOLCHAIN_VARS[0], "/usr/bin/rustc");
        let cargo = chosen(TOOLCHAIN_VARS[1], "/usr/bin/cargo");
        if !rustc.is_file() || !cargo.is_file() {
            return Err(format!(
                "the eBPF compiler {} (with {}) is missing: {SETUP}",
                rustc.display(),
                cargo.display()
            ));
        }
        let sysroot = Command::new(&rustc)
            .arg("--print=sysroot")
            .output()
            .ok()
            .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
        if !sysroot.is_some_and(|s| s.join("lib/rustlib").join(TARGET).is_dir()) {
            return Err(format!("{} has no prebuilt core for {TARGET}: {SETUP}", rustc.display()));
        }
        let Some(linker_dir) = bpf_linker_dir() else {
            return Err(format!("bpf-linker is not on PATH nor in $CARGO_HOME/bin: {SETUP}"));
        };
        Ok(Toolchain { rustc, cargo, linker_dir })
    }

    /// This toolchain's cargo with its rustc, nothing of the cargo run it
    /// is started from, and its own tools (cargo-clippy, clippy-driver,
    /// `rustc` run by name) before rustup's proxies of the same names,
    /// bpf-linker's directory (often ~/.cargo/bin, where those proxies are)
    /// after them: for xtask's cross builds of podstuck, which need the
    /// standard library Debian ships for this rustc, and under
    /// [`Toolchain::cargo`].
    pub fn host_cargo(&self) -> Command {
        let mut command = Command::new(&self.cargo);
        without_outer_build(&mut command);
        let tools = self.cargo.parent().map(Path::to_path_buf);
        let path = env::var_os("PATH").unwrap_or_default();
        let dirs = [tools, Some(self.linker_dir.clone())].into_iter().flatten().chain(env::split_paths(&path));
        let path = env::join_paths(dirs).unwrap_or(path);
        command.env("PATH", path).env("RUSTC", &self.rustc);
        command
    }

    /// `cargo ARGS` on the kernel programs in `ebpf_dir` for [`TARGET`],
    /// release, into `target_dir`, their bytecode for a node of `arch`:
    /// aya's macros read `pt_regs` by the layout of the architecture
    /// podstuck runs on, though the bytecode is the same on every one.
    /// ARGS is `build`, or `clippy` and its own.
    pub fn cargo(&self, ebpf_dir: &Path, args: &[&str], arch: Arch, target_dir: &Path) -> Command {
        let mut command = self.host_cargo();
        command.current_dir(ebpf_dir).args(args).args(["--release", "--locked", "--target", TARGET, "--target-dir"]);
        command
            .arg(target_dir)
            // Only aya-ebpf and our programs (an atomic add) need unstable
            // features (asm_experimental_arch); a global RUSTC_BOOTSTRAP=1
            // would make aya-build ask for build-std.
            .env("RUSTC_BOOTSTRAP", "aya_ebpf,podstuck")
            .env("CARGO_ENCODED_RUSTFLAGS", with_remapped_workspace(rustflags(arch), ebpf_dir));
        command
    }
}

/// The kernel programs' rustc flags for a node of `arch`, joined as
/// `CARGO_ENCODED_RUSTFLAGS` wants them (by 0x1f).
pub fn rustflags(arch: Arch) -> String {
    let arch_cfg = format!("--cfg=bpf_target_arch=\"{}\"", arch.name());
    [arch_cfg.as_str(), "-Cdebuginfo=2", "-Clink-arg=--btf", "-Clinker=bpf-linker"].join("\x1f")
}

/// `flags` and the remapping of the workspace holding `ebpf_dir` to
/// `/podstuck`: the programs' debug info and BTF name their source files,
/// and the object is embedded in podstuck, so without it a clone elsewhere
/// would build other bytes (the release is the same bytes from the same
/// tree, wherever it is cloned).
fn with_remapped_workspace(flags: String, ebpf_dir: &Path) -> String {
    match ebpf_dir.canonicalize().ok().as_deref().and_then(Path::parent) {
        Some(workspace) => format!("{flags}\x1f--remap-path-prefix={}=/podstuck", workspace.display()),
        None => flags,
    }
}

/// Removes from `command` everything of the cargo run it is started from
/// (its flags, rustc, profile, target directory, a build script's
/// variables): they are for another compiler and another target, and a
/// `RUSTC` or `RUSTFLAGS` of rustup's would build with a compiler that has
/// no standard library but its own host's. `CARGO_HOME` stays.
fn without_outer_build(command: &mut Command) {
    let build_script = ["TARGET", "HOST", "OUT_DIR", "PROFILE", "OPT_LEVEL", "DEBUG", "NUM_JOBS"];
    let outer: Vec<OsString> = env::vars_os()
        .map(|(key, _)| key)
        .filter(|key| {
            let key = key.to_string_lossy();
            (key.starts_with("CARGO") && key != "CARGO_HOME")
                || key.starts_with("RUST")
                || build_script.contains(&key.as_ref())
        })
        .collect();
    for key in outer {
        command.env_remove(key);
    }
}

/// The directory holding bpf-linker: on PATH, else `$CARGO_HOME/bin`
/// (`~/.cargo/bin`), where `cargo install` puts it.
fn bpf_linker_dir() -> Option<PathBuf> {
    let cargo_home = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")));
    let path = env::var_os("PATH").unwrap_or_default();
    env::split_paths(&path).chain(cargo_home.map(|h| h.join("bin"))).find(|dir| dir.join("bpf-linker").is_file())
}

#[cfg(test)]
mod tests {
    use std::string::ToString;

    use super::*;

    #[test]
    fn the_flags_name_the_architecture_the_programs_run_on() {
        let flags = rustflags(Arch::Aarch64);
        let flags: Vec<&str> = flags.split('\x1f').collect();
        assert_eq!(flags[0], "--cfg=bpf_target_arch=\"aarch64\"");
        assert!(flags.contains(&"-Clink-arg=--btf"));
        assert!(rustflags(Arch::X86_64).starts_with("--cfg=bpf_target_arch=\"x86_64\""));
    }

    #[test]
    fn the_workspace_is_remapped_so_a_clone_anywhere_builds_the_same_object() {
        let ebpf_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../podstuck-ebpf");
        let flags = with_remapped_workspace(rustflags(Arch::X86_64), &ebpf_dir);
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().canonicalize().unwrap();
        assert!(flags.ends_with(&format!("\x1f--remap-path-prefix={}=/podstuck", workspace.display())), "{flags}");
    }

    #[test]
    fn nothing_of_the_outer_cargo_leaks_in() {
        let mut command = Command::new("true");
        without_outer_build(&mut command);
        let removed: Vec<String> =
            command.get_envs().filter(|(_, v)| v.is_none()).map(|(k, _)| k.to_string_lossy().to_string()).collect();
        // `cargo test` sets these for the test binary.
        assert!(removed.iter().any(|k| k == "CARGO_MANIFEST_DIR"), "{removed:?}");
        assert!(!removed.iter().any(|k| k == "CARGO_HOME"));
    }
}
