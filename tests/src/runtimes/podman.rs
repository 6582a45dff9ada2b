//! A private podman for one test: Debian's podman driving Debian's conmon
//! (the per-container monitor CRI-O uses too) and crun (the OCI runtime
//! CRI-O runs on OpenShift), over a containers/storage store of its own,
//! the layout CRI-O keeps at /var/lib/containers/storage.
//!
//! Every container runs with `--cgroup-parent` a pod's cgroup of the
//! cgroupfs driver (`kubepods/besteffort/pod<uid>`), so crun puts it at
//! `.../pod<uid>/libpod-<id>` and podman its conmon at `.../pod<uid>/conmon`
//! in every v1 hierarchy, as CRI-O's cgroupfs manager puts `crio-<id>` and
//! `crio-conmon-<id>` there.
//!
//! crun refuses a hybrid cgroup layout whose cgroup2 has controllers
//! enabled ("cgroups in hybrid mode not supported, drop all controllers
//! from cgroupv2"), and this machine kind's cgroup2 at
//! /sys/fs/cgroup/unified holds hugetlb, which no v1 hierarchy mounts.
//! Rather than move a controller on a machine other work shares, podman,
//! conmon and crun then run in a mount namespace of their own (a copy of
//! the host's, held by a `sleep`, every podman command entering it with
//! `nsenter`) where cgroup2's mount is hidden: crun sees a v1 node and
//! makes its cgroups in the v1 hierarchies, which are the host's. Their
//! mounts (the containers' root filesystems, shm) live in that namespace,
//! as a runtime's do in a node container (kind, Talos); podstuck reads them
//! there. Where cgroup2 has no controllers (v1 or v2-only nodes), podman
//! runs in the host's namespace.
//!
//! Dropped, it removes every container (`podman rm -f`) and volume, stops
//! what survived (conmon, the containers' processes, the namespace), undoes
//! every mount under its directories, removes the pod cgroups its
//! containers ran in (and `kubepods/besteffort` where it made them), and
//! its run directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use super::{
    busybox_image, cannot_start, cgroup_hierarchies, kill_mentioning, must, remove_run_dir, short_name, spellings,
    stdout_text, stop_child, unmount_below, Cli, TopCgroups, BUSYBOX, COMMAND_TIMEOUT,
};
use crate::wait::within;

pub const PODMAN: &str = "/usr/bin/podman";
pub const CONMON: &str = "/usr/bin/conmon";
pub const CRUN: &str = "/usr/bin/crun";

/// podman lowers its own RLIMIT_NPROC to this at start (podman 4.3), and
/// crun may not raise a container's back above it without
/// CAP_SYS_RESOURCE, which this machine kind does not grant.
const PODMAN_NPROC: u64 = 32768;

/// A private podman, its store in the test's scratch directory.
pub struct Podman {
    name: String,
    /// The store's graph root: `overlay/<layer>/merged`, `overlay-containers/containers.json`.
    root: PathBuf,
    /// `/var/run/podstuck-<short>-p`: podman's run root and tmp dir.
    run: PathBuf,
    volumes: PathBuf,
    /// The pod whose cgroup every container of this podman runs in.
    pod_uid: String,
    /// `podman` with its configuration, entering the namespace if there is one.
    cli: Cli,
    /// The `sleep` holding podman's mount namespace, where it has one.
    namespace: Option<Child>,
    log: PathBuf,
    scratch: PathBuf,
    image: Mutex<Option<String>>,
    /// Dropped after the pod's cgroups: then `kubepods/besteffort` and
    /// `kubepods`, where the first claim made them and nothing else uses them.
    _besteffort: TopCgroups,
    _kubepods: TopCgroups,
}

impl Podman {
    /// Starts one for `test`, its containers in pod `pod_uid`'s cgroups.
    /// A podman that cannot run fails the test; `None` where skips are allowed.
    pub fn start(scratch: &Path, test: &str, pod_uid: &str) -> Option<Podman> {
        let log = scratch.join("podman.log");
        for needed in [PODMAN, CONMON, CRUN, BUSYBOX, "/usr/bin/nsenter", "/usr/bin/unshare"] {
            if !Path::new(needed).is_file() {
                let why = format!("{needed} is missing: install podman, conmon, crun, busybox-static, util-linux");
                cannot_start(test, "podman", &why, &log);
                return None;
            }
        }
        let name = short_name();
        let root = scratch.join("containers-storage");
        let run = PathBuf::from(format!("/var/run/podstuck-{name}-p"));
        let volumes = scratch.join("podman-volumes");
        for dir in [&root, &run, &volumes] {
            std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        }
        let files = write_configuration(scratch, &root, &run, &volumes);
        std::fs::File::create(&log).expect("create podman.log");
        // Claimed before a container may make them.
        let kubepods = TopCgroups::claim("kubepods");
        let besteffort = TopCgroups::claim("kubepods/besteffort");
        let namespace = match controllers_on_cgroup2() {
            true => match namespace_without_cgroup2() {
                Ok(child) => Some(child),
                Err(why) => {
                    remove_run_dir(&run);
                    cannot_start(test, "podman", &why, &log);
                    return None;
                }
            },
            false => None,
        };
        let mut prefix: Vec<std::ffi::OsString> = Vec::new();
        if let Some(holder) = &namespace {
            prefix.extend(["-t".into(), holder.id().to_string().into(), "-m".into(), "--".into(), PODMAN.into()]);
        }
        prefix.extend(["--log-level".into(), "warning".into()]);
        let program = if namespace.is_some() { "/usr/bin/nsenter" } else { PODMAN };
        let podman = Podman {
            name,
            root,
            run,
            volumes,
            pod_uid: pod_uid.to_string(),
            cli: Cli { program, prefix, env: files },
            namespace,
            log,
            scratch: scratch.to_path_buf(),
            image: Mutex::new(None),
            _besteffort: besteffort,
            _kubepods: kubepods,
        };
        let info = podman.podman_may_fail(&["info", "--format", "{{.Store.GraphRoot}} {{.Host.OCIRuntime.Name}}"]);
        if !info.status.success() {
            let why = format!("`podman info` failed: {}", super::stderr_text(&info));
            cannot_start(test, "podman", &why, &podman.log);
            return None;
        }
        eprintln!(
            "{test}: private podman: {} ({}), run root {}{}",
            podman.root.display(),
            stdout_text(&info),
            podman.run.display(),
            match &podman.namespace {
                Some(holder) => format!(", in the mount namespace of pid {} (cgroup2 hidden)", holder.id()),
                None => String::new(),
            }
        );
        Some(podman)
    }

    /// `podman ARGS`; panics with its stderr unless it succeeds.
    pub fn podman(&self, args: &[&str]) -> Output {
        must(&format!("podman {}", args.join(" ")), self.cli.run(COMMAND_TIMEOUT, args))
    }

    /// `podman ARGS`, whatever comes out.
    pub fn podman_may_fail(&self, args: &[&str]) -> Output {
        self.cli.run(COMMAND_TIMEOUT, args)
    }

    /// `sh -c SCRIPT ARGS...` where podman's containers are mounted: in
    /// podman's mount namespace where it has one. Started, not waited for.
    pub fn shell(&self, script: &str, args: &[&Path]) -> Command {
        let mut command = match &self.namespace {
            Some(holder) => {
                let mut c = Command::new("nsenter");
                c.args(["-t", &holder.id().to_string(), "-m", "--", "sh"]);
                c
            }
            None => Command::new("sh"),
        };
        command.args(["-c", script, "sh"]).args(args);
        command
    }

    /// The process whose mount namespace podman's mounts are in (the
    /// namespace's holder, or the test itself).
    pub fn namespace_member(&self) -> u32 {
        self.namespace.as_ref().map_or(std::process::id(), Child::id)
    }

    /// Whether podman runs in a mount namespace of its own.
    pub fn in_own_namespace(&self) -> bool {
        self.namespace.is_some()
    }

    /// The busybox image, loaded on first use; its full name.
    pub fn image(&self) -> String {
        let mut image = self.image.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(name) = image.as_ref() {
            return name.clone();
        }
        let archive = busybox_image(&self.scratch);
        let out = self.podman(&["load", "-i", archive.to_str().expect("UTF-8 scratch path")]);
        // "Loaded image: docker.io/library/podstuck-busybox:1"
        let said = stdout_text(&out);
        let name = said
            .lines()
            .find_map(|l| l.split_once(": ").map(|(_, n)| n.trim().to_string()))
            .unwrap_or_else(|| panic!("podman load named no image: {said}"));
        *image = Some(name.clone());
        name
    }

    /// `podman run -d` of `command` as container `name`, in the pod's
    /// cgroup, without a network; returns its id.
    pub fn run_detached(&self, name: &str, extra: &[&str], command: &[&str]) -> String {
        let image = self.image();
        let limits = ulimits();
        let parent = self.cgroup_parent();
        let mut args = vec!["run", "-d", "--name", name, "--network", "none", "--pull", "never"];
        args.extend(["--cgroup-parent", &parent]);
        args.extend(limits.iter().map(String::as_str));
        args.extend_from_slice(extra);
        args.push(&image);
        args.extend_from_slice(command);
        stdout_text(&self.podman(&args))
    }

    /// `podman inspect -f FORMAT THING`, trimmed.
    pub fn inspect(&self, thing: &str, format: &str) -> String {
        stdout_text(&self.podman(&["inspect", "-f", format, thing]))
    }

    /// The pod cgroup every container runs below, as `--cgroup-parent` takes it.
    pub fn cgroup_parent(&self) -> String {
        format!("/kubepods/besteffort/pod{}", self.pod_uid)
    }

    /// The short name unique to this podman.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The store's graph root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where its named volumes are.
    pub fn volumes(&self) -> &Path {
        &self.volumes
    }

    /// Every directory this podman owns, in every spelling.
    pub fn dirs(&self) -> Vec<PathBuf> {
        spellings(&[&self.root, &self.run, &self.volumes])
    }

    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The pod's cgroup in every hierarchy.
    fn pod_cgroups(&self) -> Vec<PathBuf> {
        let parent = self.cgroup_parent();
        cgroup_hierarchies().into_iter().map(|h| h.join(parent.trim_start_matches('/'))).collect()
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let dirs = self.dirs();
        // 1. Containers and volumes, through podman.
        let ids = self.cli.list(&["ps", "-aq"]);
        if !ids.is_empty() {
            let mut args = vec!["rm", "-f", "-t", "0"];
            args.extend(ids.iter().map(String::as_str));
            if let Some(out) = self.cli.quietly(&args) {
                if !out.status.success() {
                    eprintln!("cleanup: podman rm -f: {}", super::stderr_text(&out));
                }
            }
        }
        let _ = self.cli.quietly(&["volume", "rm", "-a", "-f"]);
        // 2. What survived it (conmon and the containers' processes name
        // the store and the run root), the namespace (its mounts go with
        // its last process), and whatever is still mounted here.
        kill_mentioning(&dirs);
        if let Some(holder) = self.namespace.as_mut() {
            stop_child(holder, Duration::from_secs(5));
        }
        unmount_below(&dirs);
        // 3. The pod's cgroups, deepest first, once their tasks are gone.
        for pod in self.pod_cgroups().iter().filter(|p| p.exists()) {
            let mut tree: Vec<PathBuf> = walk_dirs(pod);
            tree.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
            for dir in tree {
                let gone = within(Duration::from_secs(5), || {
                    (std::fs::remove_dir(&dir).is_ok() || !dir.exists()).then_some(())
                });
                if gone.is_none() {
                    eprintln!("cleanup: cannot remove cgroup {}", dir.display());
                }
            }
        }
        remove_run_dir(&self.run);
    }
}

/// `dir` and every directory below it (a cgroup tree: no links, no mounts).
fn walk_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut all = vec![dir.to_path_buf()];
    let mut at = 0;
    while at < all.len() {
        if let Ok(entries) = std::fs::read_dir(&all[at]) {
            for entry in entries.filter_map(Result::ok) {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    all.push(entry.path());
                }
            }
        }
        at += 1;
    }
    all
}

/// containers.conf, storage.conf and registries.conf of this podman alone
/// (nothing of /etc/containers), as the environment podman reads them from.
fn write_configuration(scratch: &Path, root: &Path, run: &Path, volumes: &Path) -> Vec<(String, PathBuf)> {
    let storage = scratch.join("storage.conf");
    let containers = scratch.join("containers.conf");
    let registries = scratch.join("registries.conf");
    let text = format!(
        "[storage]\ndriver = \"overlay\"\ngraphroot = \"{}\"\nrunroot = \"{}\"\n",
        root.display(),
        run.join("storage").display()
    );
    std::fs::write(&storage, text).expect("write storage.conf");
    let text = format!(
        r#"[containers]
netns = "none"
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{events}"
runtime = "crun"
conmon_path = ["/usr/bin/conmon"]
tmp_dir = "{tmp}"
static_dir = "{static_dir}"
volume_path = "{volumes}"
[network]
network_backend = "cni"
network_config_dir = "{networks}"
"#,
        events = scratch.join("podman-events.log").display(),
        tmp = run.join("tmp").display(),
        static_dir = scratch.join("libpod").display(),
        volumes = volumes.display(),
        networks = scratch.join("podman-networks").display(),
    );
    std::fs::write(&containers, text).expect("write containers.conf");
    std::fs::write(&registries, "unqualified-search-registries = []\n").expect("write registries.conf");
    vec![
        ("CONTAINERS_STORAGE_CONF".into(), storage),
        ("CONTAINERS_CONF".into(), containers),
        ("CONTAINERS_REGISTRIES_CONF".into(), registries),
    ]
}

/// `--ulimit` flags that ask crun for no more than podman runs with:
/// without CAP_SYS_RESOURCE crun may not raise a limit, and podman asks
/// for 1048576 open files and its own process limit unless told.
fn ulimits() -> Vec<String> {
    let limit = |resource| {
        let mut now = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes the struct it is given.
        unsafe { libc::getrlimit(resource, &mut now) };
        now.rlim_max
    };
    let files = limit(libc::RLIMIT_NOFILE);
    let processes = limit(libc::RLIMIT_NPROC).min(PODMAN_NPROC);
    vec![
        "--ulimit".into(),
        format!("nofile={files}:{files}"),
        "--ulimit".into(),
        format!("nproc={processes}:{processes}"),
    ]
}

/// Whether this node's cgroup2, mounted beside v1 hierarchies, has
/// controllers enabled, which crun refuses.
fn controllers_on_cgroup2() -> bool {
    let hybrid = crate::mountinfo::here().iter().any(|m| m.fstype == "cgroup")
        && crate::mountinfo::here().iter().any(|m| m.fstype == "cgroup2");
    let unified = crate::node::cgroup2_root().join("cgroup.controllers");
    hybrid && std::fs::read_to_string(unified).is_ok_and(|c| !c.trim().is_empty())
}

/// A mount namespace like the host's without cgroup2's mount, held by a
/// `sleep` that says "ready" once it is.
fn namespace_without_cgroup2() -> Result<Child, String> {
    let unified = crate::node::cgroup2_root();
    let mut holder = Command::new("unshare")
        .args([
            "-m",
            "--propagation",
            "unchanged",
            "sh",
            "-c",
            r#"umount -l "$1" && echo ready && exec sleep 100000"#,
            "sh",
        ])
        .arg(&unified)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run unshare: {e}"))?;
    let mut line = String::new();
    let stdout = holder.stdout.take().expect("piped");
    let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line);
    if line.trim() != "ready" {
        let _ = holder.kill();
        let out = holder.wait_with_output().map(|o| super::stderr_text(&o)).unwrap_or_default();
        return Err(format!("cannot make a mount namespace without {}: {out}", unified.display()));
    }
    Ok(holder)
}
