//! Builds podstuck's kernel programs (`podstuck-ebpf`) for
//! `bpfel-unknown-none` and leaves the object in OUT_DIR, where
//! `collect.rs` embeds it: `podstuck` ships as one self-contained binary.
//!
//! The chain is the one in docs/building.md: Debian's rustc-web (it has a
//! prebuilt `core` for the BPF target, which rustup cannot provide here) and
//! bpf-linker. `cargo xtask build` installs both; without them this script
//! stops with a message that says so.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "bpfel-unknown-none";

fn fail(message: &str) -> ! {
    eprintln!("\nerror: {message}\n");
    panic!("{message}");
}

fn bpf_linker_dir() -> Option<PathBuf> {
    let cargo_home = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")));
    let path = env::var_os("PATH").unwrap_or_default();
    env::split_paths(&path).chain(cargo_home.map(|h| h.join("bin"))).find(|dir| dir.join("bpf-linker").is_file())
}

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    let ebpf_dir = manifest_dir.join("../podstuck-ebpf");
    let common_dir = manifest_dir.join("../podstuck-common");
    for watched in [
        ebpf_dir.join("src"),
        ebpf_dir.join("Cargo.toml"),
        ebpf_dir.join("Cargo.lock"),
        common_dir.join("src"),
        common_dir.join("Cargo.toml"),
    ] {
        println!("cargo:rerun-if-changed={}", watched.display());
    }
    for var in ["PODSTUCK_BPF_RUSTC", "PODSTUCK_BPF_CARGO"] {
        println!("cargo:rerun-if-env-changed={var}");
    }

    let rustc = env::var("PODSTUCK_BPF_RUSTC").unwrap_or_else(|_| "/usr/bin/rustc".into());
    let cargo = env::var("PODSTUCK_BPF_CARGO").unwrap_or_else(|_| "/usr/bin/cargo".into());
    let setup = "run `cargo xtask build` once: it installs Debian's rustc-web, cargo-web, \
                 libstd-rust-web-dev-bpf and llvm-22-dev, and bpf-linker (see docs/building.md)";
    if !Path::new(&rustc).is_file() || !Path::new(&cargo).is_file() {
        fail(&format!("the eBPF compiler {rustc} (with {cargo}) is missing: {setup}"));
    }
    let sysroot = Command::new(&rustc)
        .arg("--print=sysroot")
        .output()
        .ok()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if !sysroot.is_some_and(|s| s.join("lib/rustlib").join(TARGET).is_dir()) {
        fail(&format!("{rustc} has no prebuilt core for {TARGET}: {setup}"));
    }
    let Some(linker_dir) = bpf_linker_dir() else {
        fail(&format!("bpf-linker is not on PATH nor in $CARGO_HOME/bin: {setup}"));
    };

    let target_dir = out_dir.join("ebpf-target");
    let mut build = Command::new(&cargo);
    build
        .current_dir(&ebpf_dir)
        .args(["build", "--release", "--locked", "--target", TARGET, "--target-dir"])
        .arg(&target_dir);
    // Nothing of the outer build may leak into the inner one: its flags,
    // rustc and profile are for the host, not for BPF.
    for (key, _) in env::vars_os() {
        let key = key.to_string_lossy();
        let outer = (key.starts_with("CARGO") && key != "CARGO_HOME")
            || key.starts_with("RUST")
            || ["TARGET", "HOST", "OUT_DIR", "PROFILE", "OPT_LEVEL", "DEBUG", "NUM_JOBS"].contains(&key.as_ref());
        if outer {
            build.env_remove(key.as_ref());
        }
    }
    let path = env::var_os("PATH").unwrap_or_default();
    let path = env::join_paths(std::iter::once(linker_dir).chain(env::split_paths(&path))).unwrap();
    // The bytecode is the same on every architecture; aya's macros read
    // `pt_regs` by the layout of the one podstuck runs on.
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap();
    if !["x86_64", "aarch64"].contains(&arch.as_str()) {
        fail(&format!("podstuck runs on x86_64 and aarch64 nodes, not {arch}"));
    }
    let arch_cfg = format!("--cfg=bpf_target_arch=\"{arch}\"");
    let rustflags = [arch_cfg.as_str(), "-Cdebuginfo=2", "-Clink-arg=--btf", "-Clinker=bpf-linker"].join("\x1f");
    build
        .env("PATH", path)
        .env("RUSTC", &rustc)
        // Only aya-ebpf and our programs (an atomic add) need unstable
        // features (asm_experimental_arch); a global RUSTC_BOOTSTRAP=1
        // would make aya-build ask for build-std.
        .env("RUSTC_BOOTSTRAP", "aya_ebpf,podstuck")
        .env("CARGO_ENCODED_RUSTFLAGS", rustflags);
    let status = build.status().unwrap_or_else(|e| fail(&format!("cannot run {cargo}: {e}")));
    if !status.success() {
        fail("building podstuck-ebpf failed (its compiler output is above)");
    }
    let object = target_dir.join(TARGET).join("release/podstuck");
    std::fs::copy(&object, out_dir.join("podstuck.bpf.o"))
        .unwrap_or_else(|e| fail(&format!("copying {}: {e}", object.display())));
}
