//! podstuck's container image (`cargo xtask image`) under test: the
//! tarball, loaded into a private dockerd ([`NodeDocker`]), and the ways
//! an SRE runs it on a node, in docker's words:
//!
//! - [`kubectl_debug_node`]: what `kubectl debug node/<node>
//!   --profile=sysadmin` gives its pod: privileged, the host's PID, network
//!   and IPC namespaces, the node's `/` at `/host` with the default
//!   (rprivate) propagation, so the container holds a private copy of
//!   every mount the node had when it started;
//! - [`daemonset`]: the least privilege a DaemonSet needs
//!   ([`ENTER_NODE_CAPABILITIES`]): no privileged, a read-only root, the
//!   node's `/` read-only with HostToContainer (rslave) propagation;
//! - [`host_root_mount`] and [`cri_bind`]: the node's `/` as a manifest
//!   (the plugin's debug pod, the DaemonSet) mounts it, bound as kubelet
//!   has containerd bind it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::podstuck::Watch;
use crate::runtimes::{short_name, stdout_text, Containerd, Dockerd, DOCKER};

/// The capabilities podstuck needs in a container that is not privileged
/// to enter the node's mount namespace, measured in docker (20.10, its
/// default seccomp profile on) by dropping each in turn (`podstuck check`
/// says which call failed); `tests/tests/container.rs` runs P1 with them:
///
/// - `SYS_ADMIN`: setns(2) into the node's mount namespace (without it:
///   "operation not permitted"), and bpf(2) and perf_event_open(2) where
///   CAP_BPF and CAP_PERFMON cannot be named (docker 20.10 knows neither;
///   its default seccomp profile lets both calls through only to
///   CAP_SYS_ADMIN);
/// - `SYS_CHROOT`: setns(2) into a mount namespace needs it beside
///   CAP_SYS_ADMIN (without it: EPERM, "needs CAP_SYS_ADMIN and
///   CAP_SYS_CHROOT");
/// - `SYS_PTRACE`: open /proc/1/ns/mnt (and read other processes'
///   /proc/PID/fd, cwd, root to name a mount's holder): PID 1 holds
///   capabilities the container lacks, so the ptrace access check refuses
///   ("PID 1's mount namespace is unreadable: permission denied").
///
/// Once in the node's mount namespace, the node's tracefs is there: no
/// /sys/kernel/tracing mount is needed. Not the DaemonSet's set: the
/// manifest under deploy/ takes the other route, [`HOST_ROOT_CAPABILITIES`]
/// and the two its node shapes need besides (its tests read the manifest's
/// own list).
pub const ENTER_NODE_CAPABILITIES: [&str; 3] = ["SYS_ADMIN", "SYS_CHROOT", "SYS_PTRACE"];

/// The set without CAP_SYS_ADMIN, measured with containerd (ctr 1.6 and
/// its default seccomp profile on; docker 20.10 cannot grant CAP_BPF):
/// podstuck cannot enter the node's mount namespace and reads the node
/// through `/host`, the node's tracefs mounted at /sys/kernel/tracing.
///
/// - `BPF`: bpf(2), the maps and programs (CAP_PERFMON alone: "lacks the
///   privileges to load kernel programs");
/// - `PERFMON`: perf_event_open(2) to attach to the tracepoints, and the
///   programs' reads of kernel memory (CAP_BPF alone: the same refusal);
/// - `SYS_PTRACE`: other processes' /proc/PID/{fd,cwd,root,ns}, to name who
///   holds a mount.
pub const HOST_ROOT_CAPABILITIES: [&str; 3] = ["BPF", "PERFMON", "SYS_PTRACE"];

/// The capabilities the manifest's DaemonSet adds, as written there
/// (`BPF`), but those this machine cannot grant at all (said loudly).
pub fn manifest_capabilities(documents: &[serde_json::Value]) -> Vec<String> {
    let daemonset = documents.iter().find(|d| d["kind"] == "DaemonSet").expect("a DaemonSet in the manifest");
    let added = &daemonset["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]["add"];
    let added =
        added.as_array().expect("capabilities.add").iter().map(|c| c.as_str().expect("a capability name").to_string());
    let missing = capabilities_not_grantable();
    added
        .filter(|cap| {
            let grantable = !missing.contains(&cap.as_str());
            if !grantable {
                eprintln!("note: this machine cannot grant CAP_{cap} (not in its bounding set): the manifest's DaemonSet runs here without it");
            }
            grantable
        })
        .collect()
}

/// The image tarball under test: `$PODSTUCK_IMAGE` (set by `cargo xtask
/// test`, the image of `$PODSTUCK_BIN`). Without it the test fails (see
/// [`crate::prerequisite`]).
pub fn podstuck_image(test: &str) -> Option<PathBuf> {
    let image = std::env::var_os("PODSTUCK_IMAGE").map(PathBuf::from);
    let why = match &image {
        Some(image) if image.is_file() => return image.clone().into(),
        Some(image) => format!("PODSTUCK_IMAGE={} is no file", image.display()),
        None => "PODSTUCK_IMAGE is not set".to_string(),
    };
    let how = "run `cargo xtask test`, or `cargo xtask image --binary target/debug/podstuck --out target/image/podstuck-test.tar` and set PODSTUCK_IMAGE to it";
    crate::missing(test, &format!("podstuck's image ({why})"), how)
}

/// An image tarball unpacked by the system's `tar` (a user's reader, not
/// the writer's library): its OCI layout and docker's `manifest.json`.
pub struct ImageLayout {
    dir: PathBuf,
}

impl ImageLayout {
    pub fn unpack(archive: &Path, dir: &Path) -> ImageLayout {
        untar(archive, dir);
        ImageLayout { dir: dir.to_path_buf() }
    }

    /// A JSON file of the layout (`index.json`, `manifest.json`).
    pub fn json(&self, file: &str) -> serde_json::Value {
        read_json(&self.dir.join(file))
    }

    /// The blob of a digest (`sha256:HEX`), where the layout keeps it.
    pub fn blob_path(&self, digest: &serde_json::Value) -> PathBuf {
        let digest = digest.as_str().unwrap_or_else(|| panic!("a digest, not {digest}"));
        let hex = digest.strip_prefix("sha256:").unwrap_or_else(|| panic!("a sha256 digest, not {digest}"));
        self.dir.join("blobs/sha256").join(hex)
    }

    /// A JSON blob (an index, a manifest, a config) by its digest.
    pub fn blob(&self, digest: &serde_json::Value) -> serde_json::Value {
        read_json(&self.blob_path(digest))
    }
}

fn read_json(path: &Path) -> serde_json::Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// `tar -xf ARCHIVE -C DIR` (gzip or not: GNU tar tells by itself).
pub fn untar(archive: &Path, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    let out = Command::new("tar").arg("-xf").arg(archive).arg("-C").arg(dir).output().expect("run tar");
    assert!(out.status.success(), "tar -xf {}: {}", archive.display(), String::from_utf8_lossy(&out.stderr));
}

/// Every ELF file below `dir` (symbolic links not followed), with its
/// header's `e_machine` (62 x86_64, 183 aarch64), by path from `dir`.
pub fn elf_files(dir: &Path) -> Vec<(String, u16)> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("read {}: {e}", d.display())) {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() {
                let mut header = [0u8; 20];
                let read = std::fs::File::open(entry.path()).and_then(|mut f| std::io::Read::read(&mut f, &mut header));
                if read.is_ok_and(|n| n == header.len()) && header.starts_with(b"\x7fELF") {
                    let path = entry.path().strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                    // e_machine, little-endian on both architectures.
                    found.push((path, u16::from_le_bytes([header[18], header[19]])));
                }
            }
        }
    }
    found.sort();
    found
}

/// The capabilities this machine may not grant at all: those below
/// `cap_last_cap` missing from our bounding set (a sandboxed test machine
/// may lack CAP_SYS_RESOURCE). `docker run --privileged` asks runc for all
/// of them and fails there ("unable to apply caps").
fn capabilities_not_grantable() -> Vec<&'static str> {
    const NAMES: [&str; 41] = [
        "CHOWN",
        "DAC_OVERRIDE",
        "DAC_READ_SEARCH",
        "FOWNER",
        "FSETID",
        "KILL",
        "SETGID",
        "SETUID",
        "SETPCAP",
        "LINUX_IMMUTABLE",
        "NET_BIND_SERVICE",
        "NET_BROADCAST",
        "NET_ADMIN",
        "NET_RAW",
        "IPC_LOCK",
        "IPC_OWNER",
        "SYS_MODULE",
        "SYS_RAWIO",
        "SYS_CHROOT",
        "SYS_PTRACE",
        "SYS_PACCT",
        "SYS_ADMIN",
        "SYS_BOOT",
        "SYS_NICE",
        "SYS_RESOURCE",
        "SYS_TIME",
        "SYS_TTY_CONFIG",
        "MKNOD",
        "LEASE",
        "AUDIT_WRITE",
        "AUDIT_CONTROL",
        "SETFCAP",
        "MAC_OVERRIDE",
        "MAC_ADMIN",
        "SYSLOG",
        "WAKE_ALARM",
        "BLOCK_SUSPEND",
        "AUDIT_READ",
        "PERFMON",
        "BPF",
        "CHECKPOINT_RESTORE",
    ];
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let bounding = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(u64::MAX);
    let last: usize = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(NAMES.len() - 1);
    (0..=last.min(NAMES.len() - 1)).filter(|&cap| bounding & (1 << cap) == 0).map(|cap| NAMES[cap]).collect()
}

/// `--privileged`, where this machine can grant it. Where its bounding set
/// lacks a capability, the nearest docker can do, said loudly: every
/// capability but those, no seccomp, no AppArmor, no masked /proc paths.
pub fn privileged() -> Vec<String> {
    let missing = capabilities_not_grantable();
    if missing.is_empty() {
        return vec!["--privileged".into()];
    }
    eprintln!(
        "note: this machine's capability bounding set lacks {missing:?}, so `docker run --privileged` cannot start here; \
         running with every other capability, seccomp, AppArmor and masked paths off instead"
    );
    let mut flags: Vec<String> = vec!["--cap-add".into(), "ALL".into()];
    for cap in missing {
        flags.extend(["--cap-drop".into(), cap.into()]);
    }
    for opt in ["seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"] {
        flags.extend(["--security-opt".into(), opt.into()]);
    }
    flags
}

/// How `kubectl debug node/<node> --profile=sysadmin` runs its pod:
/// privileged, the host's PID, network and IPC namespaces, and the node's
/// `/` at `/host` with docker's default propagation (rprivate: a private
/// copy of every mount the node has when the container starts).
pub fn kubectl_debug_node() -> Vec<String> {
    let mut flags = privileged();
    flags.extend(["--pid=host", "--network=host", "--ipc=host", "-v", "/:/host"].map(String::from));
    flags
}

/// A DaemonSet's least privilege: every capability dropped but `caps`, a
/// read-only root filesystem with a tmpfs at /tmp, the host's PID
/// namespace, the node's `/` read-only at `/host` with HostToContainer
/// propagation (rslave: the node's mounts and unmounts reach the
/// container, so it holds no private copies).
///
/// Without `SYS_ADMIN`, podstuck stays in its container: the node's tracefs
/// is mounted in, read-only (a container's /sys has none, and attaching
/// only reads it), and the default seccomp profile is off: docker's refuses
/// bpf(2) and perf_event_open(2) to a container without CAP_SYS_ADMIN,
/// whatever CAP_BPF and CAP_PERFMON say. With it, podstuck sees the
/// node's tracefs once in the node's mount namespace, and the default
/// profile lets both calls through and stays on.
///
/// Where this machine's `/` is a private mount (not a systemd node's
/// shared one) docker refuses rslave on it; the node's `/` is then bound
/// read-only without propagation, said loudly.
pub fn daemonset(caps: &[&str]) -> Vec<String> {
    let mut flags: Vec<String> = vec!["--cap-drop".into(), "ALL".into()];
    for cap in caps {
        flags.extend(["--cap-add".into(), (*cap).into()]);
    }
    if !caps.contains(&"SYS_ADMIN") {
        flags.extend(
            ["--security-opt", "seccomp=unconfined", "-v", "/sys/kernel/tracing:/sys/kernel/tracing:ro"]
                .map(String::from),
        );
    }
    let host = if root_propagates() {
        "/:/host:ro,rslave"
    } else {
        eprintln!("note: this machine's / is a private mount, where docker refuses rslave: binding it read-only without propagation");
        "/:/host:ro"
    };
    flags.extend(["--read-only", "--tmpfs", "/tmp", "--pid=host", "-v", host].map(String::from));
    flags
}

/// Whether `/` is a shared or slave mount here (a systemd node's is
/// shared), which docker's rslave binds need.
fn root_propagates() -> bool {
    crate::mountinfo::at(Path::new("/")).is_some_and(|root| root.propagates())
}

/// The volumeMount of the node's `/` in a pod spec (a Pod's `spec`, or a
/// DaemonSet's template's), as the manifest writes it: its first
/// container's mount of the hostPath volume of path `/`.
pub fn host_root_mount(spec: &serde_json::Value) -> serde_json::Value {
    let volumes = spec["volumes"].as_array().expect("the pod's volumes");
    let volume = volumes.iter().find(|v| v["hostPath"]["path"] == "/").expect("a hostPath volume of the node's /");
    let mounts = spec["containers"][0]["volumeMounts"].as_array().expect("the container's volumeMounts");
    let mount = mounts.iter().find(|m| m["name"] == volume["name"]);
    mount.unwrap_or_else(|| panic!("no volumeMount of {}", volume["name"])).clone()
}

/// `volume_mount` (a manifest's), its source `source`, as `ctr run
/// --mount` flags with the options containerd's CRI gives runc for it at
/// kubelet's asking: `rbind`, the propagation its `mountPropagation` says
/// (none given is `None`: `rprivate`, a private copy of every mount below
/// the source, taken at start; `HostToContainer`: `rslave`, the node's
/// mounts and unmounts follow in; `Bidirectional`: `rshared`), and `ro`
/// when `readOnly`.
pub fn cri_bind(volume_mount: &serde_json::Value, source: &Path) -> Vec<String> {
    let propagation = match volume_mount["mountPropagation"].as_str() {
        None | Some("None") => "rprivate",
        Some("HostToContainer") => "rslave",
        Some("Bidirectional") => "rshared",
        Some(other) => panic!("mountPropagation {other:?} is none of Kubernetes'"),
    };
    let mut options = vec!["rbind", propagation];
    if volume_mount["readOnly"] == true {
        options.push("ro");
    }
    let target = volume_mount["mountPath"].as_str().expect("the volumeMount's mountPath");
    let mount = format!("type=bind,src={},dst={target},options={}", source.display(), options.join(":"));
    vec!["--mount".into(), mount]
}

/// The capabilities `ctr run` gives a task by default (containerd's
/// default spec), each dropped by name: ctr 1.6 takes no `CAP_ALL`.
const CONTAINERD_DEFAULT_CAPABILITIES: [&str; 14] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FSETID",
    "FOWNER",
    "MKNOD",
    "NET_RAW",
    "SETGID",
    "SETUID",
    "SETFCAP",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
    "KILL",
    "AUDIT_WRITE",
];

/// The DaemonSet shape of [`daemonset`] for `ctr run`, as containerd runs
/// kubelet's pods: docker 20.10 knows no CAP_BPF or CAP_PERFMON, containerd
/// does. containerd's default seccomp profile stays on: it lets bpf(2) and
/// perf_event_open(2) through to CAP_BPF and CAP_PERFMON. The host's PID
/// namespace is the node pid's.
pub fn daemonset_in_containerd(caps: &[&str]) -> Vec<String> {
    let mut flags: Vec<String> = Vec::new();
    for cap in CONTAINERD_DEFAULT_CAPABILITIES.iter().filter(|c| !caps.contains(c)) {
        flags.extend(["--cap-drop".into(), format!("CAP_{cap}")]);
    }
    for cap in caps {
        flags.extend(["--cap-add".into(), format!("CAP_{cap}")]);
    }
    flags.extend([
        "--seccomp".into(),
        "--read-only".into(),
        "--with-ns".into(),
        format!("pid:/proc/{}/ns/pid", node_pid()),
    ]);
    for mount in
        ["src=/,dst=/host,options=rbind:ro", "src=/sys/kernel/tracing,dst=/sys/kernel/tracing,options=rbind:ro"]
    {
        flags.extend(["--mount".into(), format!("type=bind,{mount}")]);
    }
    flags
}

/// The process whose namespaces are the node's: PID 1, or this test where
/// PID 1's are out of reach (see [`NodeDocker::watch`]).
fn node_pid() -> u32 {
    if pid1_out_of_reach() {
        std::process::id()
    } else {
        1
    }
}

/// `--node-pid PID` where PID 1's namespaces are out of reach, said loudly.
fn node_pid_args() -> Vec<String> {
    if !pid1_out_of_reach() {
        return Vec::new();
    }
    let pid = node_pid();
    eprintln!(
        "note: PID 1's namespaces are out of reach here: podstuck enters this test's (--node-pid {pid}), the node's"
    );
    vec!["--node-pid".into(), pid.to_string()]
}

/// `watch --json --concurrent ARGS`, and `--node-pid` where needed.
fn watch_args(args: &[&str]) -> Vec<String> {
    let mut all: Vec<String> = ["watch", "--json", "--concurrent"].iter().chain(args).map(|a| a.to_string()).collect();
    all.extend(node_pid_args());
    all
}

/// A private containerd with podstuck's image imported in it.
pub struct NodeContainerd {
    pub containerd: Containerd,
    /// The name `ctr images import` gave the image
    /// (`docker.io/library/podstuck:0.1.0`).
    pub image: String,
}

impl NodeContainerd {
    /// Starts a private containerd and `ctr images import`s the image
    /// into it. Either missing fails the test (`None` where skips are allowed).
    pub fn start(scratch: &Path, test: &str) -> Option<NodeContainerd> {
        let archive = podstuck_image(test)?;
        let containerd = Containerd::start(scratch, test)?;
        let image = import(&containerd, &archive);
        Some(NodeContainerd { containerd, image })
    }

    /// `podstuck watch --json --concurrent ARGS` in a task run with `flags`.
    pub fn watch(&self, flags: &[String], args: &[&str]) -> Watch {
        let args = watch_args(args);
        let mut command = vec!["/usr/local/bin/podstuck"];
        command.extend(args.iter().map(String::as_str));
        let id = format!("podstuck-{}", short_name());
        Watch::spawn(&mut self.containerd.run_command(flags, &self.image, &id, &command))
    }
}

/// `ctr images import --snapshotter overlayfs ARCHIVE` (unpacked for the
/// snapshotter tasks run on); the name it imported.
pub fn import(containerd: &Containerd, archive: &Path) -> String {
    let out = containerd.ctr(&[
        "images",
        "import",
        "--snapshotter",
        "overlayfs",
        archive.to_str().expect("a UTF-8 image path"),
    ]);
    let text = stdout_text(&out);
    text.split_whitespace()
        .skip_while(|w| *w != "unpacking")
        .nth(1)
        .unwrap_or_else(|| panic!("ctr images import named no image: {text}"))
        .to_string()
}

/// A private dockerd with podstuck's image loaded in it.
pub struct NodeDocker {
    pub dockerd: Dockerd,
    /// The name `docker load` gave the image (`podstuck:0.1.0`).
    pub image: String,
}

impl NodeDocker {
    /// Starts a private dockerd and `docker load`s the image into it;
    /// either missing fails the test (`None` where skips are allowed).
    pub fn start(scratch: &Path, test: &str) -> Option<NodeDocker> {
        let archive = podstuck_image(test)?;
        let dockerd = Dockerd::start(scratch, test)?;
        let image = load(&dockerd, &archive);
        Some(NodeDocker { dockerd, image })
    }

    /// `docker run --rm --name podstuck-<short> FLAGS IMAGE ARGS`, not started.
    pub fn run<S: AsRef<str>>(&self, flags: &[S], args: &[&str]) -> Command {
        let host = format!("unix://{}", self.dockerd.exec_root().join("docker.sock").display());
        let mut command = Command::new(DOCKER);
        command.args(["-H", &host, "run", "--rm", "--name", &format!("podstuck-{}", short_name())]);
        command.args(flags.iter().map(AsRef::as_ref)).arg(&self.image).args(args);
        command
    }

    /// `podstuck watch --json --concurrent ARGS` in a container run with
    /// `flags`, attached: its findings read as a podstuck on the node's.
    ///
    /// Where PID 1's namespaces are out of reach even to root (a sandboxed
    /// test machine whose init holds capabilities we lack), podstuck is told
    /// that the node's namespaces are this test's (`--node-pid`, the
    /// hidden option for tests): this process runs in the node's mount
    /// namespace, as PID 1 does on a real node.
    pub fn watch<S: AsRef<str>>(&self, flags: &[S], args: &[&str]) -> Watch {
        let args = watch_args(args);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Watch::spawn(&mut self.run(flags, &args))
    }

    /// The host pid of the first process of the one container running.
    pub fn container_pid(&self) -> u32 {
        let id = stdout_text(&self.dockerd.docker(&["ps", "-q"]));
        assert_eq!(id.lines().count(), 1, "one container runs: {id}");
        self.dockerd.inspect(&id, "{{.State.Pid}}").parse().expect("a pid")
    }
}

/// Whether this machine's PID 1 keeps its namespaces from root (its
/// /proc/1/ns links cannot be read): a sandbox's init, not a node's.
pub fn pid1_out_of_reach() -> bool {
    std::fs::read_link("/proc/1/ns/mnt").is_err()
}

/// `docker load -i ARCHIVE`; the name it loaded.
pub fn load(dockerd: &Dockerd, archive: &Path) -> String {
    let out: Output = dockerd.docker(&["load", "-i", archive.to_str().expect("a UTF-8 image path")]);
    let text = stdout_text(&out);
    text.lines()
        .find_map(|l| l.strip_prefix("Loaded image: "))
        .unwrap_or_else(|| panic!("docker load named no image: {text}"))
        .to_string()
}
