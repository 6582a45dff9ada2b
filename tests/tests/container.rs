//! podstuck's container image (`cargo xtask image`), run the ways SREs run
//! node tools, against the same pathologies as the node-side tests
//! (tests/tests/causes/): a volume left mounted (P1), an immutable file
//! (P3), a mount held by a process (P4), a removal storm (P2).
//!
//! - as `kubectl debug node` runs its pod ([`kubectl_debug_node`]):
//!   privileged, the host's PID namespace, the node's `/` at `/host` with
//!   no propagation, so the container holds a private copy of every mount
//!   the node had when it started. podstuck must reach the same findings as
//!   on the node, spelled with the node's paths (never `/host/...`), and
//!   must never call its own container a holder of the stuck mount;
//! - without the host's PID namespace: a clear refusal;
//! - as a DaemonSet with least privilege ([`daemonset`]): the capability
//!   sets of [`ENTER_NODE_CAPABILITIES`] and
//!   [`HOST_ROOT_CAPABILITIES`] (why each is needed is said
//!   there), each getting P1, the second P4 as well;
//! - the node's `/` as the plugin's debug pod and the DaemonSet mount it
//!   (their manifests' own volumeMount, bound as containerd's CRI binds
//!   it, in a busybox task): a volume the node unmounts while they run
//!   leaves no copy in their mount namespace, as a private bind (the
//!   control: `kubectl debug node`'s pod) does;
//! - the same tarball imported by `ctr images import` into containerd;
//! - the tarball itself: one index of linux/amd64 and linux/arm64, each
//!   image all of its own architecture and runnable from its layer alone,
//!   read by skopeo and by ctr with every platform.
//!
//! Each test runs a private dockerd (or containerd) of its own, loads the
//! image of the binary under test (`$PODSTUCK_IMAGE`, made by `cargo xtask
//! test`) and runs podstuck with `--concurrent`, so they run beside the
//! others. Root; see `kernel_test!` for the skip rule, and
//! `podstuck_image` for the image's.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::mount::{umount2, MntFlags};
use podstuck_tests::container::{
    cri_bind, daemonset, daemonset_in_containerd, elf_files, host_root_mount, kubectl_debug_node,
    manifest_capabilities, pid1_out_of_reach, podstuck_image, privileged, untar, ImageLayout, NodeContainerd,
    NodeDocker, ENTER_NODE_CAPABILITIES, HOST_ROOT_CAPABILITIES,
};
use podstuck_tests::findings::apply_fix;
use podstuck_tests::node::make_shared;
use podstuck_tests::runtimes::{stderr_text, stdout_text};
use podstuck_tests::*;
use serde_json::Value;

/// As on the node: a finding may need several of kubelet's attempts.
const FINDING_TIMEOUT: Duration = Duration::from_secs(60);

/// What the node-side storm removes, at the node-side pace (see
/// tests/tests/causes/removal_storm.rs): 200k directories at 16k calls a
/// second.
const STORM_DIRS: &str = "200000";
const STORM_CALLS_PER_S: &str = "16000";

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// `--findings --hung-after 2s --kubelet-root ROOT EXTRA...`, podstuck's
/// arguments in every scenario here, as on the node.
fn finding_args<'a>(root: &'a KubeletRoot, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--findings", "--hung-after", "2s", "--kubelet-root", root.arg()];
    args.extend_from_slice(extra);
    args
}

/// Whether a finding is about the test's own directory.
fn about(scratch: &Path) -> impl Fn(&Value) -> bool + '_ {
    move |f| f["paths"][0].as_str().is_some_and(|p| p.starts_with(text(scratch)))
}

/// What holds for every finding podstuck printed from its container: the
/// node's paths, never the container's view of them under /host.
fn assert_node_paths(findings: &[Value]) {
    for finding in findings {
        for path in finding["paths"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            assert!(!path.starts_with("/host/"), "a path as the container sees it, not the node's: {finding}");
        }
        let fix = finding["fix"].as_str().unwrap_or_default();
        assert!(!fix.contains(" /host/"), "a fix with the container's path: {finding}");
    }
}

/// Stops the containerised podstuck (SIGINT through the docker CLI) and
/// checks it ended well, with the node's paths.
fn stop(watch: Watch) -> Finished {
    let done = watch.stop(libc::SIGINT);
    assert!(done.status.success(), "podstuck in its container failed ({}): {}", done.status, done.stderr);
    assert!(done.events.is_empty(), "--findings printed call events: {:?}", &done.events[..done.events.len().min(3)]);
    assert_node_paths(&done.findings);
    done
}

/// Every attempt printed `want` (and there was one).
fn all_say(lines: &[String], want: &str) {
    assert!(
        !lines.is_empty() && lines.iter().all(|l| l == want),
        "want every attempt to print {want:?}, got {lines:?}"
    );
}

/// Runs a finding's fix on the node, as pasted into a shell. A fix printed
/// in a container enters PID 1's mount namespace first (`nsenter -t 1 -m
/// -- CMD`); where PID 1's namespaces are out of reach even to root (a
/// sandboxed test machine), CMD is run as is, from this, the node's mount
/// namespace, said loudly.
fn apply_node_fix(finding: &Value) {
    let fix = finding["fix"].as_str().expect("a fix");
    match fix.split_once(" -- ") {
        Some((nsenter, cmd)) if nsenter == "nsenter -t 1 -m" && pid1_out_of_reach() => {
            eprintln!("note: PID 1's mount namespace is out of reach here: running `{cmd}` of the fix `{fix}` in this, the node's, namespace");
            let mut plain = finding.clone();
            plain["fix"] = Value::from(cmd);
            apply_fix(&plain);
        }
        _ => apply_fix(finding),
    }
}

/// A fix printed in a container may enter the node's namespaces first
/// (`nsenter -t 1 -m -- CMD`); what it runs is `cmd` either way.
fn fix_runs(e: &mut Expect, cmd: &str) {
    let fix = e.text("/fix");
    e.that(fix == cmd || fix.ends_with(&format!(" -- {cmd}")), format!("/fix ({fix}) should run `{cmd}`"));
}

/// P1's fixture: a pod's CSI volume that its driver left mounted, and
/// kubelet retrying the removal of its directory on its backoff.
struct LeftMounted {
    root: KubeletRoot,
    pod: Pod,
    pv: PathBuf,
    mount: PathBuf,
}

impl LeftMounted {
    fn new(scratch: &Path) -> LeftMounted {
        let root = KubeletRoot::new(scratch.join("kubelet"));
        let pod = root.new_pod();
        let pv = pod.create_csi_volume("pvc-p1");
        let mount = pv.join("mount");
        LeftMounted { root, pod, pv, mount }
    }

    /// The volume, mounted until dropped.
    fn mounted(&self) -> TmpfsMount {
        TmpfsMount::new(&self.mount, "size=1m")
    }

    /// podstuck's arguments: findings about this pod.
    fn podstuck_args(&self) -> Vec<&str> {
        finding_args(&self.root, &["--pod", self.pod.uid()])
    }

    /// kubelet's retries, once the first three failed with EBUSY.
    fn kubelet(&self) -> Process {
        let kubelet = start_actor([
            "--comm",
            "kubelet",
            "--backoff-ms",
            "500",
            "--repeat",
            "0",
            "rmdir-at",
            text(&self.pv),
            "mount",
        ]);
        all_say(&kubelet.wait_for_lines(3, secs(10)), &format!("rmdir-at errno {}", libc::EBUSY));
        kubelet
    }

    /// What the finding says on the node, too.
    fn expect(&self, e: &mut Expect, kubelet: &Process) {
        e.eq("/pod_uid", self.pod.uid());
        e.eq("/actor/comm", "kubelet");
        e.eq("/actor/pid", kubelet.pid());
        e.eq("/errno", "EBUSY");
        e.eq("/status", "active");
        e.eq("/paths/0", text(&self.mount));
        e.eq("/confidence", "confirmed");
        fix_runs(e, &format!("umount -- {}", shell_word(&self.mount)));
    }

    /// Waits for the finding, runs its fix, and checks the volume is unmounted.
    fn finding_and_fix(&self, watch: &mut Watch, kubelet: &Process) -> Value {
        let finding =
            watch.await_finding(FINDING_TIMEOUT, |f| f["kind"] == "volume-still-mounted", |e| self.expect(e, kubelet));
        apply_node_fix(&finding);
        assert!(!is_mountpoint(&self.mount), "the fix should unmount {}", self.mount.display());
        finding
    }
}

/// P4's fixture: a container's rootfs, and a log shipper on the node that
/// still has its log open (started before podstuck, as on a node).
struct HeldOpen {
    root: KubeletRoot,
    rootfs: PathBuf,
    // Field order is drop order: the holder before the mount it holds.
    shipper: Process,
    _mount: TmpfsMount,
}

impl HeldOpen {
    fn new(scratch: &Path) -> HeldOpen {
        let root = KubeletRoot::empty(scratch.join("kubelet"));
        let rootfs = scratch.join("run/containerd/io.containerd.runtime.v2.task/k8s.io/c1/rootfs");
        let mount = TmpfsMount::new(&rootfs, "size=1m");
        std::fs::write(rootfs.join("server.log"), "started\n").unwrap();
        let shipper = start_actor(["--comm", "log-shipper", "hold-open", text(&rootfs.join("server.log"))]);
        shipper.wait_ready(secs(10));
        HeldOpen { root, rootfs, shipper, _mount: mount }
    }

    /// containerd's unmount retries, once the first three failed with EBUSY.
    fn containerd_retries(&self) -> Process {
        let containerd =
            start_actor(["--comm", "containerd", "--repeat", "0", "--every-ms", "50", "umount", text(&self.rootfs)]);
        all_say(&containerd.wait_for_lines(3, secs(10)), &format!("umount errno {}", libc::EBUSY));
        containerd
    }

    /// The finding names the rootfs and its holder, and kills it.
    fn expect(&self, e: &mut Expect) {
        let pid = self.shipper.pid();
        e.eq("/paths/0", text(&self.rootfs));
        e.that(e.mentions_number("/evidence", pid.into()), format!("evidence should name the holder, pid {pid}"));
        e.contains("/fix", &format!("/proc/{pid}/stat"));
        e.contains("/fix", &format!("] && kill -TERM {pid}"));
    }
}

// The image -------------------------------------------------------------

kernel_test! {
    fn docker_loads_the_image_and_runs_it_without_a_shell(test) {
        let scratch = test.scratch();
        let Some(node) = NodeDocker::start(scratch.path(), test.name()) else { return };
        assert_eq!(node.image, format!("podstuck:{}", env!("CARGO_PKG_VERSION")));
        let inspect = |format: &str| node.dockerd.inspect(&node.image, format);
        assert_eq!(inspect("{{json .Config.Entrypoint}}"), r#"["/usr/local/bin/podstuck"]"#);
        assert_eq!(inspect("{{json .Config.Cmd}}"), r#"["watch"]"#);
        assert_eq!(inspect(r#"{{index .Config.Labels "org.opencontainers.image.title"}}"#), "podstuck");
        assert_eq!(inspect(r#"{{index .Config.Labels "org.opencontainers.image.version"}}"#), env!("CARGO_PKG_VERSION"));
        let out = node.run(&["--network", "none"], &["--version"]).stdin(Stdio::null()).output().expect("docker run");
        assert!(out.status.success(), "podstuck --version in its image: {}", stderr_text(&out));
        assert!(stdout_text(&out).starts_with("podstuck "), "{}", stdout_text(&out));
        // Nothing but podstuck: no shell to exec into.
        let out = node.run(&["--network", "none", "--entrypoint", "/bin/sh"], &["-c", "true"]).stdin(Stdio::null()).output().unwrap();
        assert!(!out.status.success(), "the image has a shell");
    }
}

kernel_test! {
    fn ctr_imports_the_same_tarball(test) {
        let scratch = test.scratch();
        let Some(node) = NodeContainerd::start(scratch.path(), test.name()) else { return };
        let name = format!("docker.io/library/podstuck:{}", env!("CARGO_PKG_VERSION"));
        assert_eq!(node.image, name);
        let listed = stdout_text(&node.containerd.ctr(&["images", "ls", "-q"]));
        assert!(listed.lines().any(|l| l == name), "ctr images ls lists {listed:?}, not {name}");
        // Every blob present for this platform.
        let check = stdout_text(&node.containerd.ctr(&["images", "check"]));
        let line = check.lines().find(|l| l.starts_with(&name)).unwrap_or_else(|| panic!("ctr images check: {check}"));
        assert!(line.contains("complete"), "ctr images check: {line}");
        // And containerd runs it.
        let id = format!("podstuck-{}", runtimes::short_name());
        let out = node.containerd.run_command(&[], &node.image, &id, &["/usr/local/bin/podstuck", "--version"]).stdin(Stdio::null()).output().unwrap();
        assert!(out.status.success(), "ctr run podstuck --version: {}", stderr_text(&out));
        assert!(stdout_text(&out).starts_with("podstuck "), "{}", stdout_text(&out));
    }
}

/// The image's architectures as its index lists them, each with its ELF
/// `e_machine` and QEMU's name of it (`qemu-NAME-static` runs its
/// binaries on a machine of the other).
const PLATFORMS: [(&str, u16, &str); 2] = [("amd64", 62, "x86_64"), ("arm64", 183, "aarch64")];

/// Whether the ELF file at `path` asks for a loader (has a `PT_INTERP`
/// program header): read from its 64-bit little-endian headers.
fn asks_for_a_loader(path: &Path) -> bool {
    let bytes = std::fs::read(path).unwrap();
    let word =
        |at: usize, n: usize| bytes[at..at + n].iter().rev().fold(0u64, |v, b| (v << 8) | u64::from(*b)) as usize;
    let (phoff, phentsize, phnum) = (word(0x20, 8), word(0x36, 2), word(0x38, 2));
    (0..phnum).any(|i| word(phoff + i * phentsize, 4) == 3)
}

/// `podstuck --version` run from an unpacked layer alone (chroot), through
/// QEMU's user emulator when the layer is of the other architecture; None
/// where that emulator is missing and skips are allowed.
fn version_in_rootfs(test: &str, rootfs: &Path, qemu: &str) -> Option<String> {
    let mut command = std::process::Command::new("chroot");
    command.arg(rootfs);
    if qemu != std::env::consts::ARCH {
        let emulator = PathBuf::from(format!("/usr/bin/qemu-{qemu}-static"));
        if !emulator.is_file() {
            return missing(
                test,
                &format!("{} (to run the {qemu} image's binary)", emulator.display()),
                "install qemu-user-static (cargo xtask setup does)",
            );
        }
        std::fs::copy(&emulator, rootfs.join("qemu")).expect("copy QEMU into the layer");
        command.arg("/qemu");
    }
    let out = command.args(["/usr/local/bin/podstuck", "--version"]).stdin(Stdio::null()).output().expect("run chroot");
    assert!(out.status.success(), "podstuck --version in its {qemu} layer alone: {}", stderr_text(&out));
    Some(stdout_text(&out))
}

kernel_test! {
    fn the_image_is_one_index_of_linux_amd64_and_linux_arm64_each_all_of_its_own_architecture(test) {
        let Some(archive) = podstuck_image(test.name()) else { return };
        let scratch = test.scratch();
        let layout = ImageLayout::unpack(&archive, &scratch.path().join("layout"));
        // One image, an index of platforms, as a registry's multi-architecture image is.
        let index = layout.json("index.json");
        let entries = index["manifests"].as_array().expect("index.json lists manifests");
        assert_eq!(entries.len(), 1, "index.json names one image: {index}");
        assert_eq!(entries[0]["mediaType"], "application/vnd.oci.image.index.v1+json", "{index}");
        let name = format!("docker.io/library/podstuck:{}", env!("CARGO_PKG_VERSION"));
        assert_eq!(entries[0]["annotations"]["io.containerd.image.name"], name.as_str(), "{index}");
        let image_index = layout.blob(&entries[0]["digest"]);
        let manifests = image_index["manifests"].as_array().expect("the image index lists manifests");
        let platform = |m: &Value| format!("{}/{}", m["platform"]["os"].as_str().unwrap_or("?"), m["platform"]["architecture"].as_str().unwrap_or("?"));
        assert_eq!(manifests.iter().map(platform).collect::<Vec<_>>(), ["linux/amd64", "linux/arm64"]);
        let mut configs = Vec::new();
        for (entry, (arch, machine, qemu)) in manifests.iter().zip(PLATFORMS) {
            let manifest = layout.blob(&entry["digest"]);
            assert_eq!(layout.blob(&manifest["config"]["digest"])["architecture"], arch);
            configs.push(manifest["config"]["digest"].as_str().unwrap().replacen("sha256:", "blobs/sha256/", 1));
            let rootfs = scratch.path().join(arch);
            untar(&layout.blob_path(&manifest["layers"][0]["digest"]), &rootfs);
            // The static binary of this architecture, and no other program, loader or library.
            let elves = elf_files(&rootfs);
            assert_eq!(elves, [("usr/local/bin/podstuck".to_string(), machine)], "linux/{arch}");
            assert!(!asks_for_a_loader(&rootfs.join("usr/local/bin/podstuck")), "linux/{arch}'s podstuck asks for a loader");
            for license in ["LICENSE", "LICENSE-APACHE", "LICENSE-GPL2", "LICENSE-MIT"] {
                let text = std::fs::read(rootfs.join("usr/share/doc/podstuck").join(license));
                assert!(text.is_ok_and(|t| !t.is_empty()), "linux/{arch} has no {license} text");
            }
            // And that layer alone runs it: nothing of this machine's is borrowed.
            let Some(version) = version_in_rootfs(test.name(), &rootfs, qemu) else { return };
            assert!(version.starts_with("podstuck "), "linux/{arch}: {version}");
        }
        // docker load reads manifest.json alone, which has no platforms: it names this machine's image.
        let docker = layout.json("manifest.json");
        let here = PLATFORMS.iter().position(|p| p.2 == std::env::consts::ARCH).expect("a machine of either architecture");
        assert_eq!(docker[0]["Config"], configs[here].as_str(), "manifest.json: {docker}");
        assert_eq!(docker[0]["RepoTags"][0], format!("podstuck:{}", env!("CARGO_PKG_VERSION")), "{docker}");
    }
}

/// The node's runtime picks its architecture's image from the index: the
/// DaemonSet names one image and selects no architecture.
#[test]
fn the_daemonset_names_one_image_for_every_architecture() {
    let manifest = harness::deploy_manifest("base/podstuck-daemonset.yaml");
    let daemonset = manifest.iter().find(|d| d["kind"] == "DaemonSet").expect("a DaemonSet in the manifest");
    let spec = &daemonset["spec"]["template"]["spec"];
    let containers = ["containers", "initContainers"].iter().filter_map(|k| spec[k].as_array()).flatten();
    let mut images: Vec<&str> = containers.map(|c| c["image"].as_str().expect("a container's image")).collect();
    images.sort();
    images.dedup();
    assert_eq!(images.len(), 1, "one image for every container: {images:?}");
    assert!(!spec.to_string().contains("kubernetes.io/arch"), "the DaemonSet selects an architecture: {spec}");
}

kernel_test! {
    fn skopeo_reads_the_index_and_copies_both_platforms(test) {
        let Some(archive) = podstuck_image(test.name()) else { return };
        if !Path::new("/usr/bin/skopeo").is_file() {
            return missing(test.name(), "/usr/bin/skopeo", "install skopeo (cargo xtask setup does)");
        }
        let scratch = test.scratch();
        let source = format!("oci-archive:{}", text(&archive));
        let skopeo = |args: &[&str]| {
            let out = std::process::Command::new("skopeo").args(args).stdin(Stdio::null()).output().expect("run skopeo");
            assert!(out.status.success(), "skopeo {}: {}", args.join(" "), stderr_text(&out));
            stdout_text(&out)
        };
        let raw: Value = serde_json::from_str(&skopeo(&["inspect", "--raw", &source])).expect("skopeo inspect --raw: JSON");
        assert_eq!(raw["mediaType"], "application/vnd.oci.image.index.v1+json", "{raw}");
        let arches: Vec<&str> = raw["manifests"].as_array().unwrap().iter().map(|m| m["platform"]["architecture"].as_str().unwrap()).collect();
        assert_eq!(arches, ["amd64", "arm64"], "{raw}");
        for (arch, ..) in PLATFORMS {
            let inspected: Value = serde_json::from_str(&skopeo(&["inspect", "--override-arch", arch, &source])).unwrap();
            assert_eq!((inspected["Os"].as_str(), inspected["Architecture"].as_str()), (Some("linux"), Some(arch)), "{inspected}");
        }
        // Every blob of both images, its digest and size checked on the way,
        // as a push of both to a registry would (`docker://` for `dir:`).
        let copy = scratch.path().join("copy");
        skopeo(&["copy", "--all", &source, &format!("dir:{}", text(&copy))]);
        let instances = std::fs::read_dir(&copy).unwrap().filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".manifest.json")).count();
        assert_eq!(instances, 2, "skopeo copy --all wrote {instances} platform manifests");
    }
}

kernel_test! {
    fn ctr_imports_both_platforms(test) {
        let Some(archive) = podstuck_image(test.name()) else { return };
        let scratch = test.scratch();
        let Some(containerd) = Containerd::start(scratch.path(), test.name()) else { return };
        containerd.ctr(&["images", "import", "--all-platforms", "--snapshotter", "overlayfs", text(&archive)]);
        let name = format!("docker.io/library/podstuck:{}", env!("CARGO_PKG_VERSION"));
        let listed = stdout_text(&containerd.ctr(&["images", "ls"]));
        let row = listed.lines().find(|l| l.starts_with(&name)).unwrap_or_else(|| panic!("ctr images ls: {listed}"));
        assert!(row.contains("linux/amd64,linux/arm64"), "ctr images ls names both platforms: {row}");
        // Every blob of the tarball, both images', is in containerd's store.
        untar(&archive, &scratch.path().join("layout"));
        let content = stdout_text(&containerd.ctr(&["content", "ls", "-q"]));
        let blobs = std::fs::read_dir(scratch.path().join("layout/blobs/sha256")).unwrap();
        for blob in blobs.map(|b| b.unwrap().file_name().to_string_lossy().into_owned()) {
            assert!(content.lines().any(|l| l == format!("sha256:{blob}")), "sha256:{blob} not imported: {content}");
        }
    }
}

// How it is run ---------------------------------------------------------

kernel_test! {
    fn without_the_host_pid_namespace_it_refuses_clearly(test) {
        let scratch = test.scratch();
        let Some(node) = NodeDocker::start(scratch.path(), test.name()) else { return };
        // The image's default command (`watch`), privileged and with the
        // node's / but in a PID namespace of its own.
        let mut flags = privileged();
        flags.extend(["-v", "/:/host"].map(String::from));
        let started = Instant::now();
        let out = node.run(&flags, &[]).stdin(Stdio::null()).output().expect("docker run");
        let stderr = stderr_text(&out);
        assert!(!out.status.success(), "podstuck ran without the host's PID namespace: {stderr}");
        assert!(started.elapsed() < secs(30), "refused only after {:?}", started.elapsed());
        assert!(stderr.contains("--pid=host"), "the refusal should say how to run it (--pid=host): {stderr}");
        assert!(stdout_text(&out).is_empty(), "nothing on stdout: {}", stdout_text(&out));
    }
}

// The pathologies, from kubectl debug node's container -------------------

kernel_test! {
    fn p1_in_a_container_a_volume_left_mounted_is_named_with_its_umount(test) {
        let scratch = test.scratch();
        let Some(node) = NodeDocker::start(scratch.path(), test.name()) else { return };
        let volume = LeftMounted::new(scratch.path());
        // podstuck's container starts first: the mount is the node's alone.
        let mut watch = node.watch(&kubectl_debug_node(), &volume.podstuck_args());
        let _mounted = volume.mounted();
        let kubelet = volume.kubelet();
        volume.finding_and_fix(&mut watch, &kubelet);
        stop(watch);
    }
}

kernel_test! {
    fn p1_in_a_container_holding_a_copy_of_the_mount_names_the_mount_not_itself(test) {
        let scratch = test.scratch();
        let Some(node) = NodeDocker::start(scratch.path(), test.name()) else { return };
        let volume = LeftMounted::new(scratch.path());
        // Mounted before the container starts: `-v /:/host` (rprivate)
        // gives podstuck's container a private copy of it.
        let _mounted = volume.mounted();
        let mut watch = node.watch(&kubectl_debug_node(), &volume.podstuck_args());
        let container = node.container_pid();
        let kubelet = volume.kubelet();
        volume.finding_and_fix(&mut watch, &kubelet);
        let watching = watch.pid() as u32;
        let done = stop(watch);
        for f in done.findings.iter().filter(|f| about(scratch.path())(f)) {
            let e = Expect::new(f);
            for pid in [container, watching] {
                assert!(!e.mentions_number("/evidence", pid.into()) && !e.mentions_number("/fix", pid.into()), "podstuck's own container (pid {pid}) named: {f}");
            }
            assert_ne!(f["kind"], "mount-held", "podstuck's own copy called a holder: {f}");
        }
    }
}

kernel_test! {
    fn p3_in_a_container_an_immutable_file_is_named_with_chattr(test) {
        let scratch = test.scratch();
        let Some(node) = NodeDocker::start(scratch.path(), test.name()) else { return };
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let layer = scratch.path().join("lib/docker/overlay2").join(new_pod_uid().replace('-', ""));
        let etc = layer.join("diff/etc");
        std::fs::create_dir_all(&etc).unwrap();
        let file = etc.join("resolv.conf");
        std::fs::write(&file, "nameserver 10.96.0.10\n").unwrap();
        let _immutable = Immutable::set(&file);
        let mut watch = node.watch(&kubectl_debug_node(), &finding_args(&root, &[]));
        let dockerd = start_actor(["--comm", "dockerd", "--every-ms", "1000", "--repeat", "0", "remove-all", text(&layer)]);
        let layer_name = layer.file_name().unwrap().to_str().unwrap();
        let eperm = format!("remove-all left: errno {} at {layer_name}/diff/etc/resolv.conf", libc::EPERM);
        all_say(&dockerd.wait_for_lines(2, secs(10)), &eperm);
        let finding = watch.await_finding(
            FINDING_TIMEOUT,
            |f| f["kind"] == "immutable-file" && about(scratch.path())(f),
            |e| {
                e.eq("/paths/0", text(&file));
                e.eq("/errno", "EPERM");
                e.eq("/actor/comm", "dockerd");
                e.eq("/actor/pid", dockerd.pid());
                fix_runs(e, &format!("chattr -i -- {}", shell_word(&file)));
            },
        );
        apply_node_fix(&finding);
        assert!(dockerd.wait_for_line("remove-all done", secs(5)), "after the fix: {:?}", dockerd.lines());
        stop(watch);
    }
}

kernel_test! {
    fn p4_in_a_container_a_mount_held_by_an_open_file_is_named_with_kill(test) {
        let scratch = test.scratch();
        let Some(node) = NodeDocker::start(scratch.path(), test.name()) else { return };
        let held = HeldOpen::new(scratch.path());
        let mut watch = node.watch(&kubectl_debug_node(), &finding_args(&held.root, &[]));
        let containerd = held.containerd_retries();
        let finding = watch.await_finding(FINDING_TIMEOUT, |f| f["kind"] == "mount-held" && about(scratch.path())(f), |e| {
            held.expect(e);
            e.eq("/actor/comm", "containerd");
            e.eq("/syscall", "umount2");
            e.eq("/errno", "EBUSY");
        });
        drop(containerd);
        apply_node_fix(&finding);
        // containerd's next try goes through.
        wait_until("umount2 to work after the fix", secs(5), || sys_umount2(&cstring(&held.rootfs), 0) == 0);
        stop(watch);
    }
}

kernel_test! {
    fn p2_in_a_container_a_removal_storm_is_caught_while_it_lasts(test) {
        let scratch = test.scratch();
        let Some(node) = NodeDocker::start(scratch.path(), test.name()) else { return };
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        // Not scratch/docker: that is the private dockerd's data root.
        let docker = scratch.path().join("lib/docker");
        let _disk = TmpfsMount::new(&docker, "size=64m,nr_inodes=1m");
        let volume = docker.join("volumes/build-cache");
        let data = volume.join("_data");
        std::fs::create_dir_all(&data).unwrap();
        let mut watch = node.watch(&kubectl_debug_node(), &finding_args(&root, &[]));
        let (status, lines) = start_actor(["mkdirs", text(&data), STORM_DIRS]).finish(secs(120));
        assert!(status.success(), "mkdirs: {lines:?}");
        let dockerd = start_actor(["--comm", "dockerd", "--calls-per-s", STORM_CALLS_PER_S, "remove-all", text(&volume)]);
        let finding = watch.await_finding(
            FINDING_TIMEOUT,
            |f| f["kind"] == "removal-storm" && about(scratch.path())(f),
            |e| {
                let key = PathBuf::from(e.text("/paths/0"));
                e.that(
                    key == data || (volume.starts_with(&key) && key != scratch.path()),
                    format!("/paths/0 ({}) should be {} or a directory above it in the test's tree", key.display(), volume.display()),
                );
                e.eq("/actor/comm", "dockerd");
                e.eq("/actor/pid", dockerd.pid());
                e.eq("/status", "active");
                e.that(e.at("/details/remaining").as_u64().is_some_and(|r| r > 0), "/details/remaining > 0 while it lasts");
                e.that(e.at("/details/eta_s").as_f64().is_some_and(|s| s > 0.0), "/details/eta_s > 0 while it lasts");
                e.contains("/fix", "kubectl drain");
            },
        );
        eprintln!("storm finding: {}", finding["details"]);
        stop(watch);
        drop(dockerd);
    }
}

// Least privilege ---------------------------------------------------------

/// P1 seen from a DaemonSet-shaped podstuck that `start` runs (given
/// podstuck's arguments): the volume mounted before it starts, as on a node
/// where it was left mounted long ago. `while_tracing` looks at the node
/// once the finding is in, before podstuck stops.
fn p1_from_a_daemonset(scratch: &ScratchDir, start: impl FnOnce(&[&str]) -> Watch, while_tracing: impl FnOnce()) {
    let volume = LeftMounted::new(scratch.path());
    let _mounted = volume.mounted();
    let mut watch = start(&volume.podstuck_args());
    let kubelet = volume.kubelet();
    let finding = volume.finding_and_fix(&mut watch, &kubelet);
    eprintln!("finding: {finding}");
    while_tracing();
    stop(watch);
}

/// The pids holding a flock on the node's tracer lock whose command line
/// mentions `word`, from /proc/locks.
fn tracer_lock_holders(word: &str) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(TRACER_LOCK).expect("the tracer lock exists");
    let id = format!("{:02x}:{:02x}:{}", libc::major(meta.dev()), libc::minor(meta.dev()), meta.ino());
    let locks = std::fs::read_to_string("/proc/locks").unwrap();
    locks
        .lines()
        .filter(|l| l.contains(" FLOCK ") && !l.contains("->") && l.split_whitespace().any(|f| f == id))
        .filter_map(|l| l.split_whitespace().nth(4)?.parse().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains(word))
        })
        .collect()
}

/// Where every podstuck on a node takes its tracer lock (check.rs).
const TRACER_LOCK: &str = "/run/podstuck.lock";

kernel_test! {
    fn a_daemonset_with_least_privilege_names_a_volume_left_mounted(test) {
        let scratch = test.scratch();
        let Some(node) = NodeDocker::start(scratch.path(), test.name()) else { return };
        p1_from_a_daemonset(&scratch, |args| node.watch(&daemonset(&ENTER_NODE_CAPABILITIES), args), || ());
    }
}

kernel_test! {
    fn a_daemonset_without_sys_admin_reads_the_node_through_host(test) {
        let scratch = test.scratch();
        let Some(node) = NodeContainerd::start(scratch.path(), test.name()) else { return };
        p1_from_a_daemonset(&scratch, |args| node.watch(&daemonset_in_containerd(&HOST_ROOT_CAPABILITIES), args), || ());
    }
}

kernel_test! {
    fn the_manifests_daemonset_reads_the_node_and_shares_the_tracer_lock(test) {
        // The capabilities deploy/base/podstuck-daemonset.yaml adds, as written
        // there, with the node's / read-only at /host as it mounts it.
        let manifest = harness::deploy_manifest("base/podstuck-daemonset.yaml");
        // Its seccomp profile is the runtime's default, which this test runs
        // it under (ctr --seccomp: containerd's default profile).
        let daemonset = manifest.iter().find(|d| d["kind"] == "DaemonSet").expect("a DaemonSet");
        let security = &daemonset["spec"]["template"]["spec"]["containers"][0]["securityContext"];
        assert_eq!(security["seccompProfile"]["type"], "RuntimeDefault", "{security}");
        assert!(daemonset_in_containerd(&[]).contains(&"--seccomp".to_string()));
        let caps = manifest_capabilities(&manifest);
        let caps: Vec<&str> = caps.iter().map(String::as_str).collect();
        let scratch = test.scratch();
        let Some(node) = NodeContainerd::start(scratch.path(), test.name()) else { return };
        // What the manifest's FileOrCreate hostPath does on a node where no podstuck ran yet.
        std::fs::OpenOptions::new().create(true).append(true).open(TRACER_LOCK).unwrap();
        let word = text(scratch.path()).to_string();
        p1_from_a_daemonset(&scratch, |args| node.watch(&daemonset_in_containerd(&caps), args), || {
            let holders = tracer_lock_holders(&word);
            let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
            assert!(!holders.is_empty(), "the DaemonSet's podstuck should hold {TRACER_LOCK} (shared) through its read-only /host; /proc/locks:\n{locks}");
        });
    }
}

kernel_test! {
    fn p4_from_a_daemonset_without_sys_admin_names_the_holder_with_node_paths(test) {
        let scratch = test.scratch();
        let Some(node) = NodeContainerd::start(scratch.path(), test.name()) else { return };
        let held = HeldOpen::new(scratch.path());
        let flags = daemonset_in_containerd(&HOST_ROOT_CAPABILITIES);
        let mut watch = node.watch(&flags, &finding_args(&held.root, &[]));
        let containerd = held.containerd_retries();
        watch.await_finding(FINDING_TIMEOUT, |f| f["kind"] == "mount-held" && about(scratch.path())(f), |e| held.expect(e));
        drop(containerd);
        stop(watch);
    }
}

// The node's mounts, as the debug pod and the DaemonSet see them -----------

/// What a task with the node's `/` bound in saw of two volumes: one
/// mounted on the node before the task started (a stuck pod's volume when
/// the debug pod comes), one after; both then unmounted on the node, as
/// kubelet unmounts a pod's volume.
struct VolumesSeen {
    /// Whether the volume mounted after the task started came in.
    came_in: bool,
    /// The task's mounts of either volume's filesystem left once the node
    /// unmounted both (its mountinfo's lines).
    left: Vec<String>,
}

/// Runs a busybox task `id` with the node stand-in `node` bound in by
/// `bind` (`ctr run --mount`), mounts and unmounts two volumes (tmpfs
/// named `<id>-before` and `<id>-after`) on the node around it, and reads
/// its /proc/PID/mountinfo. The task is removed at the end; every volume
/// is detached on the way out, pass or fail.
fn volumes_seen(containerd: &Containerd, node: &Path, bind: &[String], id: &str) -> VolumesSeen {
    let before = TmpfsMount::new(&node.join(format!("{id}-before")), "size=1m");
    containerd.run_detached_with(bind, id, &["sleep", "1000"]);
    containerd.wait_task_status(id, "RUNNING", secs(30));
    let pid = containerd.task_pid(id).expect("the task's pid").to_string();
    let after = TmpfsMount::new(&node.join(format!("{id}-after")), "size=1m");
    // mount(2) propagates before it returns: what came in is there now.
    let host = Path::new("/host");
    let came_in = mountinfo::at_in(&pid, &host.join(format!("{id}-after"))).is_some();
    let devices: Vec<(u32, u32)> =
        [&before, &after].iter().map(|v| mountinfo::at(&v.0).expect("the volume on the node").device).collect();
    // As kubelet unmounts a pod's volume: a plain umount2, no MNT_DETACH.
    for volume in [&before, &after] {
        umount2(&volume.0, MntFlags::empty())
            .unwrap_or_else(|e| panic!("umount {} on the node: {e}", volume.0.display()));
    }
    let table = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).expect("the task's mountinfo");
    let left = table
        .lines()
        .filter(|line| mountinfo::Mount::parse(line).is_some_and(|m| devices.contains(&m.device)))
        .map(String::from)
        .collect();
    containerd.ctr(&["task", "kill", "-s", "SIGKILL", id]);
    containerd.wait_task_status(id, "STOPPED", secs(30));
    containerd.ctr(&["task", "rm", id]);
    containerd.ctr(&["containers", "rm", id]);
    VolumesSeen { came_in, left }
}

kernel_test! {
    /// Issue 61: podstuck never holds what it diagnoses. The debug pod
    /// `kubectl podstuck` makes and the DaemonSet mount the node's `/` at
    /// `/host` with HostToContainer propagation, read here from their own
    /// manifests (the plugin's `kubectl create` input, the DaemonSet's
    /// YAML) and bound as containerd's CRI binds it for kubelet: a volume
    /// the node mounts after the task started comes in, and once the node
    /// unmounts it, and one it had mounted before (the stuck pod's volume
    /// when the debug pod comes), no copy of either is left in the task's
    /// mount namespace to keep its device busy. The control: the same
    /// bind with no propagation (`kubectl debug node`'s pod) keeps the
    /// copy of the volume it started with, and never sees the later one.
    ///
    /// This machine's `/` is a private mount, and sharing it would change
    /// every other test's mounts: the node's `/` is a directory of the
    /// test's, bound on itself and made shared as systemd makes `/` on a
    /// node, bound in as the manifests bind `/`.
    fn a_volume_the_node_unmounts_leaves_no_copy_in_the_debug_pod_nor_the_daemonset(test) {
        let scratch = test.scratch();
        let Some(containerd) = Containerd::start(scratch.path(), test.name()) else { return };
        let node = scratch.path().join("node");
        let _node_root = BindMount::onto_itself(&node);
        make_shared(&node);

        let debug_pod = kubectl::debug_pod_manifest(&scratch.path().join("cluster"));
        let manifest = harness::deploy_manifest("base/podstuck-daemonset.yaml");
        let daemonset = manifest.iter().find(|d| d["kind"] == "DaemonSet").expect("a DaemonSet");
        let mounts = [
            ("the debug pod", host_root_mount(&debug_pod["spec"])),
            ("the DaemonSet", host_root_mount(&daemonset["spec"]["template"]["spec"])),
        ];
        for (i, (who, mount)) in mounts.iter().enumerate() {
            assert_eq!(mount["mountPath"], "/host", "{who}: {mount}");
            let seen = volumes_seen(&containerd, &node, &cri_bind(mount, &node), &format!("v{i}"));
            assert!(seen.came_in, "{who} ({mount}) does not see a volume the node mounted after it started");
            assert!(seen.left.is_empty(), "{who} ({mount}) keeps a copy of a volume the node unmounted:\n{}", seen.left.join("\n"));
        }

        let private = serde_json::json!({"name": "host-root", "mountPath": "/host"});
        let seen = volumes_seen(&containerd, &node, &cri_bind(&private, &node), "control");
        assert!(!seen.came_in, "a private bind saw a volume mounted after it started: the control proves nothing");
        let kept: Vec<&String> = seen.left.iter().filter(|l| l.contains(" /host/control-before ")).collect();
        assert_eq!(kept.len(), 1, "a private bind should keep its copy of the volume it started with: {:?}", seen.left);
    }
}
