//! Builds podstuck's kernel programs (`podstuck-ebpf`) for
//! `bpfel-unknown-none` and leaves the object in OUT_DIR, where
//! `collect.rs` embeds it: `podstuck` ships as one self-contained binary.
//!
//! The toolchain and its environment are podstuck-common's `build`
//! module's, the one declaration xtask's clippy on the kernel programs uses
//! too; here is only what is this build's: the architecture it builds for
//! (the kernel programs read `pt_regs` by its layout) and where the object
//! goes.

use std::env;
use std::path::PathBuf;

use podstuck_common::build::{Toolchain, TARGET, TOOLCHAIN_VARS};
use podstuck_common::program::Arch;

fn fail(message: &str) -> ! {
    eprintln!("\nerror: {message}\n");
    panic!("{message}");
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
    for var in TOOLCHAIN_VARS {
        println!("cargo:rerun-if-env-changed={var}");
    }

    let toolchain = Toolchain::find().unwrap_or_else(|why| fail(&why));
    // The architecture of the podstuck being built, not of this machine.
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap();
    let Some(arch) = Arch::of_name(&arch) else {
        fail(&format!("podstuck runs on x86_64 and aarch64 nodes, not {arch}"));
    };
    let target_dir = out_dir.join("ebpf-target");
    let mut build = toolchain.cargo(&ebpf_dir, &["build"], arch, &target_dir);
    let status = build.status().unwrap_or_else(|e| fail(&format!("cannot run {build:?}: {e}")));
    if !status.success() {
        fail("building podstuck-ebpf failed (its compiler output is above)");
    }
    let object = target_dir.join(TARGET).join("release/podstuck");
    std::fs::copy(&object, out_dir.join("podstuck.bpf.o"))
        .unwrap_or_else(|e| fail(&format!("copying {}: {e}", object.display())));
}
