//! `cargo xtask setup`: the eBPF toolchain of docs/building.md (Debian's
//! rustc-web with its prebuilt BPF `core`, LLVM 22, bpf-linker) and the
//! tools the tests drive, installed where missing. Every task that builds
//! or tests runs it first.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Result;

use crate::host::{install, run, say};

/// Debian packages of the eBPF build chain (docs/building.md), the tools the
/// end-to-end tests drive (chattr, unshare, mount; tmux, the terminal the
/// live view is tested in), the Java HdrHistogram reader the tests
/// check latency.hlog with, the real container runtimes the runtime
/// scenarios (tests/tests/runtimes.rs) run a private daemon of: docker.io
/// (dockerd and the docker CLI), containerd (and ctr), runc, and
/// busybox-static, the one binary their test image is made of; the
/// image tests' other readers; and the CNI plugins.
const APT_PACKAGES: [&str; 20] = [
    "rustc-web",
    "cargo-web",
    "libstd-rust-web-dev-bpf",
    "llvm-22-dev",
    // Clippy for rustc-web: the kernel programs are linted for the BPF
    // target they are built for (`lint_ebpf`).
    "rust-web-clippy",
    "e2fsprogs",
    "util-linux",
    "default-jre-headless",
    "libhdrhistogram-java",
    "python3-venv",
    "tmux",
    "docker.io",
    "containerd",
    "runc",
    "busybox-static",
    // The real Prometheus that scrapes `podstuck watch --listen` in tests/tests/listen.rs
    // and alerts.rs (each test starts its own, on ports of its own), and its promtool,
    // which checks and unit-tests deploy/monitoring/prometheus-rules.yaml in alerts.rs.
    "prometheus",
    // Readers of the image's multi-architecture index in tests/tests/container.rs:
    // skopeo inspects and copies both platforms; qemu-user-static runs the
    // other architecture's binary from its layer alone (qemu-aarch64-static here).
    "skopeo",
    "qemu-user-static",
    // Debian's real CNI plugins (bridge, host-local) that tests/tests/lifecycle.rs and the
    // demo run as containerd runs them, and iproute2's `ip netns` for the sandbox's netns.
    "containernetworking-plugins",
    "iproute2",
];
const BPF_LINKER_VERSION: &str = "0.13";
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";

fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(&std::env::var_os("HOME").unwrap_or_default()).join(".cargo"))
}

fn bpf_linker_version() -> Option<String> {
    let linker = cargo_home().join("bin/bpf-linker");
    let program = if linker.is_file() { linker.into_os_string() } else { "bpf-linker".into() };
    let out = Command::new(program).arg("--version").output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Installs the eBPF toolchain where it is missing; does nothing otherwise.
pub fn setup() -> Result<()> {
    install(&APT_PACKAGES)?;
    match bpf_linker_version() {
        Some(v) if v.contains(&format!("bpf-linker {BPF_LINKER_VERSION}")) => {}
        found => {
            say(&format!(
                "installing bpf-linker {BPF_LINKER_VERSION} against LLVM 22 (cargo install, about 2 minutes){}",
                found.map(|v| format!("; found {v}")).unwrap_or_default()
            ));
            let path = std::env::var_os("PATH").unwrap_or_default();
            let path = std::env::join_paths(
                std::iter::once(Path::new(LLVM_PREFIX).join("bin")).chain(std::env::split_paths(&path)),
            )?;
            run(Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
                .args([
                    "install",
                    "bpf-linker",
                    "--locked",
                    "--force",
                    "--no-default-features",
                    "--features",
                    "llvm-22",
                ])
                .args(["--version", &format!("~{BPF_LINKER_VERSION}")])
                .env("LLVM_PREFIX", LLVM_PREFIX)
                .env("PATH", path))?;
        }
    }
    Ok(())
}
