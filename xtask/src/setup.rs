//! `cargo xtask setup`: the eBPF toolchain of docs/building.md (Debian's
//! rustc-web with its prebuilt BPF `core`, LLVM 22, bpf-linker) and the
//! tools the tests drive, installed where missing. Every task that builds
//! or tests runs it first.

use std::path::Path;
use std::process::Command;

use anyhow::Result;

use crate::host::{cargo_home, install, run, say};

/// Debian packages of the eBPF build chain (docs/building.md), the tools the
/// end-to-end tests drive (chattr, unshare, mount; tmux, the terminal the
/// live view is tested in), the Java HdrHistogram reader the tests
/// check latency.hlog with, the real container runtimes the runtime
/// scenarios (tests/tests/runtimes.rs) run a private daemon of: docker.io
/// (dockerd and the docker CLI), containerd (and ctr), runc, and
/// busybox-static, the one binary their test image is made of; podman
/// with conmon and crun, CRI-O's monitor and runtime (tests/tests/podman.rs);
/// the image tests' other readers; and the CNI plugins.
const APT_PACKAGES: [&str; 25] = [
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
    // A CRI-O-like runtime for real (tests/tests/podman.rs): podman 4.3 over
    // containers/storage, conmon 2.1, crun 1.8, as OpenShift's nodes run them.
    "podman",
    "conmon",
    "crun",
    // The real Prometheus that scrapes `podstuck watch --listen` in tests/tests/listen.rs
    // and alerts.rs (each test starts its own, on ports of its own), and its promtool,
    // which checks and unit-tests deploy/monitoring/prometheus-rules.yaml in alerts.rs.
    "prometheus",
    // Readers of the image's multi-architecture index in tests/tests/container.rs:
    // skopeo inspects and copies both platforms; qemu-user-static runs the
    // other architecture's binary from its layer alone (qemu-aarch64-static here).
    "skopeo",
    "qemu-user-static",
    // Debian's real CNI plugins (bridge, host-local) that the demo and
    // tests/tests/causes/sandbox_teardown_failing.rs run as containerd runs them, and
    // iproute2's `ip netns` for the sandbox's netns.
    "containernetworking-plugins",
    "iproute2",
    // The shell linter actionlint runs on each script of the release
    // workflow (.github/workflows/release.yml, tests/tests/release.rs).
    "shellcheck",
    // A real FUSE filesystem whose server a test stalls and lets answer again
    // (tests/tests/healing.rs, and the soak's faults): Debian's bindfs.
    "bindfs",
];
/// A tool of the crate registry that xtask installs with `cargo install`
/// (into `$CARGO_HOME/bin`), at a pinned version.
pub struct CargoTool {
    /// The crate, and the name of its binary.
    pub name: &'static str,
    /// The version installed, exactly (`--locked`, the crate's own lock file).
    pub version: &'static str,
    /// `--no-default-features --features ...`, if not the defaults.
    pub features: Option<&'static str>,
    /// Why it is here, and how long it builds, for the line said before.
    pub why: &'static str,
}

/// Links the kernel programs, built against Debian's LLVM 22.
const BPF_LINKER: CargoTool = CargoTool {
    name: "bpf-linker",
    version: "0.13.0",
    features: Some("llvm-22"),
    why: "against LLVM 22, the kernel programs' linker (about 2 minutes)",
};

/// `cargo auditable build`: every release binary carries its crates' list
/// (a `.dep-v0` section), which scanners (trivy, grype, `cargo audit bin`)
/// read from the binary itself.
pub const CARGO_AUDITABLE: CargoTool = CargoTool {
    name: "cargo-auditable",
    version: "0.7.7",
    features: None,
    why: "which embeds the dependency list in the release binaries (about 1 minute)",
};

const LLVM_PREFIX: &str = "/usr/lib/llvm-22";

/// The version of `tool` that `cargo install` put in `$CARGO_HOME/bin`,
/// if it is there (`cargo install --list`: "NAME vVERSION:").
fn installed_version(tool: &CargoTool) -> Option<String> {
    if !cargo_home().join("bin").join(tool.name).is_file() {
        return None;
    }
    let out = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["install", "--list"])
        .output()
        .ok()?;
    let list = String::from_utf8_lossy(&out.stdout).into_owned();
    list.lines().find_map(|l| l.strip_prefix(tool.name)?.strip_prefix(" v")?.strip_suffix(':').map(str::to_string))
}

/// Installs `tool` at its version where it is missing or another version;
/// does nothing otherwise. Built by the cargo running xtask, with Debian's
/// LLVM 22 first on PATH (bpf-linker links it).
pub fn install_cargo_tool(tool: &CargoTool) -> Result<()> {
    let found = installed_version(tool);
    if found.as_deref() == Some(tool.version) {
        return Ok(());
    }
    say(&format!(
        "installing {} {} {}{}",
        tool.name,
        tool.version,
        tool.why,
        found.map(|v| format!("; found {v}")).unwrap_or_default()
    ));
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path =
        std::env::join_paths(std::iter::once(Path::new(LLVM_PREFIX).join("bin")).chain(std::env::split_paths(&path)))?;
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    command.args(["install", tool.name, "--locked", "--force", "--version", tool.version]);
    if let Some(features) = tool.features {
        command.args(["--no-default-features", "--features", features]);
    }
    run(command.env("LLVM_PREFIX", LLVM_PREFIX).env("PATH", path))
}

/// Installs the eBPF toolchain where it is missing; does nothing otherwise.
pub fn setup() -> Result<()> {
    install(&APT_PACKAGES)?;
    install_cargo_tool(&BPF_LINKER)
}
