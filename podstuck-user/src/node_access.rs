//! Where podstuck runs, and how it reaches the node from there: a
//! [`Node`] handle, found once at start and passed to every part that
//! reads the node, so a signature says which code reads the host.
//!
//! podstuck runs on the node itself, or in a container on it: a
//! `kubectl debug node` pod (privileged, the host's PID namespace, the
//! node's `/` at `/host` without propagation) or a DaemonSet (the host's
//! PID namespace, `/` at `/host`, capabilities instead of privileged). It
//! finds out which at the very start of `main` ([`discover`], before any
//! thread exists, as `setns(CLONE_NEWNS)` requires) and then:
//!
//! - on the node: nothing changes;
//! - in a container that may enter PID 1's mount (and cgroup, UTS)
//!   namespace: it enters them, so every path it reads is the node's own;
//! - in a container that may not (no CAP_SYS_ADMIN): it reads the node
//!   through a root prefix ([`Node::path`]): `--host-root DIR`, `/host`, else
//!   `/proc/1/root`, and the node's mount table from `/proc/1/mountinfo`.
//!
//! Paths shown to the user stay the node's own ([`Node::shown`]); files the
//! user names to write are the container's ([`Node::user_file`]), where
//! `kubectl cp` finds them. podstuck's own container namespace is never
//! a holder of anything ([`Node::podstuck_mntns`]), and fixes are
//! printed to work pasted in that container or on the node
//! ([`Node::in_container`]).

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sched::{setns, CloneFlags};
use nix::sys::stat::Mode;

/// Where a `kubectl debug node` pod and the usual DaemonSets mount the node's `/`.
pub const DEFAULT_HOST_ROOT: &str = "/host";

/// What podstuck tells a user who runs it in a container of its own PID namespace.
pub const NO_HOST_PID: &str = "podstuck runs in a container without the host's PID namespace, where the kernel's pids name nothing it can see: \
    run it with the host's PID namespace (kubectl debug node/<node> does; docker run --pid=host; a DaemonSet with hostPID: true)";

/// How podstuck reaches the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// On the node, in its mount namespace.
    Node,
    /// In a container, now in the node's mount namespace.
    Entered,
    /// In a container that may not enter the node's mount namespace: the
    /// node is read under `root`; `why` the namespace was not entered.
    Through { root: PathBuf, why: String },
}

/// Where podstuck runs and how it reads the node, found once at start
/// ([`discover`]), or [`Node::direct`] where podstuck runs on the node.
#[derive(Debug)]
pub struct Node {
    place: Place,
    /// podstuck's own mount namespace when that is not the node's (its
    /// container's, recorded before entering the node's).
    own_mntns: Option<u64>,
    /// The container's `/`, held from before entering the node's mount
    /// namespace: where the files the user names are written.
    container_root: Option<OwnedFd>,
    /// A host root the user's paths may be spelled under (`/host/var/lib/kubelet`).
    user_prefix: Option<PathBuf>,
    /// The process whose namespaces are the node's (PID 1; a test's own
    /// process in the end-to-end tests).
    node_pid: u32,
    /// What could not be told, said by `check` ("PID 1's mount namespace is unreadable").
    note: Option<String>,
}

/// The node as [`discover`] found it: kept for the whole process, as the
/// container's root it holds must stay open.
static DISCOVERED: OnceLock<Node> = OnceLock::new();

/// podstuck on the node itself: every path is the node's own.
static DIRECT: Node = Node::on_node();

impl Node {
    const fn on_node() -> Node {
        Node { place: Place::Node, own_mntns: None, container_root: None, user_prefix: None, node_pid: 1, note: None }
    }

    /// The node podstuck runs on, read directly: what `demo`, the tests and
    /// a run that never looked (`explain --from`) use.
    pub fn direct() -> &'static Node {
        &DIRECT
    }

    /// A container's view of a node whose `/` is at `root` and whose
    /// namespaces are `node_pid`'s, setns refused: what the unit tests of
    /// the readers give them to show they read under the root.
    #[cfg(test)]
    pub(crate) fn through(root: &Path, node_pid: u32) -> Node {
        Node {
            place: Place::Through { root: root.to_path_buf(), why: "a test".into() },
            user_prefix: Some(root.to_path_buf()),
            node_pid,
            ..Node::on_node()
        }
    }

    pub fn place(&self) -> &Place {
        &self.place
    }

    /// `node_path` (the node's own spelling) as podstuck reaches it from here.
    pub fn path(&self, node_path: impl AsRef<Path>) -> PathBuf {
        let node_path = node_path.as_ref();
        match &self.place {
            Place::Through { root, .. } => under_root(root, node_path),
            _ => node_path.to_path_buf(),
        }
    }

    /// A path podstuck reached, in the node's own spelling.
    pub fn shown(&self, reached: impl AsRef<Path>) -> PathBuf {
        let reached = reached.as_ref();
        match &self.place {
            Place::Through { root, .. } => node_spelling(root, reached),
            _ => reached.to_path_buf(),
        }
    }

    /// A node path the user gave, perhaps spelled under the host root
    /// (`--kubelet-root /host/var/lib/kubelet`): the node's own spelling.
    pub fn user_node_path(&self, given: impl AsRef<Path>) -> PathBuf {
        let given = given.as_ref();
        match &self.user_prefix {
            Some(prefix) if given.starts_with(prefix) => node_spelling(prefix, given),
            _ => given.to_path_buf(),
        }
    }

    /// A file or directory the user names (to write, or `--btf` to read):
    /// the container's, where `kubectl cp` finds it.
    pub fn user_file(&self, given: impl AsRef<Path>) -> PathBuf {
        let given = given.as_ref();
        match (&self.container_root, given.strip_prefix("/")) {
            // Relative paths need nothing: the working directory is the container's again.
            (Some(root), Ok(rest)) => {
                let mut out = PathBuf::from(format!("/proc/self/fd/{}", root.as_raw_fd()));
                // "/proc/self/fd/N" alone is a link: its last component must not be one.
                out.push(if rest.as_os_str().is_empty() { Path::new(".") } else { rest });
                out
            }
            _ => given.to_path_buf(),
        }
    }

    /// Where a process's entry in /proc is for the node's own tables:
    /// `self` where podstuck lives in the node's mount namespace, the
    /// node's PID otherwise.
    pub fn node_proc_entry(&self) -> String {
        match self.place {
            Place::Through { .. } => self.node_pid.to_string(),
            _ => "self".into(),
        }
    }

    /// Where the node's processes are listed: podstuck's own /proc, which
    /// shows them all wherever podstuck runs, as it shares the node's PID
    /// namespace (it refuses to run otherwise, [`NO_HOST_PID`]); never
    /// under the root prefix, which may hold no /proc of its own.
    pub fn proc_root(&self) -> PathBuf {
        PathBuf::from("/proc")
    }

    /// A file of the node's own /proc entry ("mountinfo", "ns/mnt").
    pub fn node_proc_file(&self, name: &str) -> PathBuf {
        self.proc_root().join(self.node_proc_entry()).join(name)
    }

    /// The node's mount table.
    pub fn mountinfo(&self) -> PathBuf {
        self.node_proc_file("mountinfo")
    }

    /// Whether `mntns` is podstuck's own container's mount namespace.
    pub fn is_podstuck_namespace(&self, mntns: u64) -> bool {
        self.own_mntns == Some(mntns)
    }

    /// podstuck's own container's mount namespace; None on the node.
    pub fn podstuck_mntns(&self) -> Option<u64> {
        self.own_mntns
    }

    pub fn in_container(&self) -> bool {
        self.place != Place::Node
    }

    /// Whether where podstuck runs was assumed, not seen (PID 1's mount
    /// namespace unreadable): `check` says it as a warning.
    pub fn assumed(&self) -> bool {
        self.note.is_some()
    }

    /// Where podstuck runs, for `check`.
    pub fn words(&self) -> String {
        let mut words = match &self.place {
            Place::Node => "on the node".to_string(),
            Place::Entered => "in a container: the node's mount namespace entered".to_string(),
            Place::Through { root, why } => {
                format!("in a container: reading the node through {} (setns refused: {why})", root.display())
            }
        };
        if let Some(note) = &self.note {
            words.push_str(&format!(" ({note})"));
        }
        words
    }
}

/// What a fix that mounts tracefs says more in a container: the mount
/// must be made in the container, from the node's.
pub const TRACEFS_IN_CONTAINER: &str =
    "; in a container, mount the node's tracefs into it: a hostPath volume /sys/kernel/tracing at /sys/kernel/tracing \
    (docker run -v /sys/kernel/tracing:/sys/kernel/tracing)";

/// `fix` as said where podstuck runs: one that mounts tracefs says how in a container.
pub fn tracefs_fix(in_container: bool, fix: String) -> String {
    match in_container && fix.contains("mount -t tracefs") {
        true => fix + TRACEFS_IN_CONTAINER,
        false => fix,
    }
}

fn under_root(root: &Path, node_path: &Path) -> PathBuf {
    match node_path.strip_prefix("/") {
        Ok(rest) if !rest.as_os_str().is_empty() => root.join(rest),
        Ok(_) => root.to_path_buf(),
        Err(_) => node_path.to_path_buf(),
    }
}

fn node_spelling(root: &Path, reached: &Path) -> PathBuf {
    match reached.strip_prefix(root) {
        Ok(rest) => Path::new("/").join(rest),
        Err(_) => reached.to_path_buf(),
    }
}

/// Whether `dir` looks like a system's root: an `etc` beside a `var` or `usr`.
pub fn looks_like_root(dir: &Path) -> bool {
    dir.join("etc").is_dir() && (dir.join("var").is_dir() || dir.join("usr").is_dir())
}

/// What podstuck read of where it runs, before deciding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// Entries of `NSpid:` in /proc/self/status: more than one in a
    /// PID namespace of its own.
    pub nspid_entries: usize,
    /// podstuck's PID namespace (`/proc/self/ns/pid`). NSpid counts only
    /// the namespaces below the one /proc was mounted for, and a
    /// container mounts its own: this tells where NSpid cannot.
    pub pid_ns: Option<u64>,
    pub own_mntns: Option<u64>,
    /// The node PID's mount namespace, or why it could not be read.
    pub node_mntns: Result<u64, String>,
    /// What says podstuck runs in a container ("/run/.containerenv").
    pub container_signs: Vec<String>,
    /// What says the PID namespace podstuck is in is a node's own, the
    /// node being a container (kind, k3d, minikube): "PID 1 is systemd",
    /// "kubelet runs here (pid 812)".
    pub node_signs: Vec<String>,
    /// The node's hostname: a kind node's container is named after it.
    pub hostname: String,
    /// `--host-root`, if given.
    pub explicit_root: Option<PathBuf>,
    /// Whether `/host` looks like a root.
    pub default_root_present: bool,
}

impl Seen {
    /// Where the node's `/` is mounted in here: `--host-root`, else `/host`
    /// when it looks like a root.
    fn host_root(&self) -> Option<PathBuf> {
        self.explicit_root.clone().or_else(|| self.default_root_present.then(|| PathBuf::from(DEFAULT_HOST_ROOT)))
    }
}

/// What to do about where podstuck runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// On the node; the note says what could not be told.
    Stay { note: Option<String> },
    /// In a container, with the host's PID namespace: enter the node's
    /// namespaces, or read it under `fallback` where refused.
    Enter { fallback: Option<PathBuf> },
    /// Read the node under this root at once (its namespace unreadable).
    Through { root: PathBuf, why: String },
    /// Cannot work from here: the sentence says why and what to do.
    Refuse(String),
}

/// Where podstuck runs, from what was read.
pub fn decide(seen: &Seen) -> Decision {
    if seen.nspid_entries > 1 || seen.pid_ns.is_some_and(|ns| ns != KERNEL_PID_NS) {
        return Decision::Refuse(match seen.node_signs.is_empty() {
            true => NO_HOST_PID.into(),
            false => node_is_a_container(seen),
        });
    }
    let root = seen.host_root();
    match &seen.node_mntns {
        Ok(node) if Some(*node) == seen.own_mntns => match seen.container_signs.is_empty() {
            true => Decision::Stay { note: None },
            // PID 1 shares our mount namespace in a container: it is the container's own init.
            false => Decision::Refuse(NO_HOST_PID.into()),
        },
        Ok(_) => Decision::Enter { fallback: root },
        Err(why) => match root {
            Some(root) => Decision::Through { root, why: format!("PID 1's mount namespace is unreadable: {why}") },
            None => Decision::Stay {
                note: Some(format!("PID 1's mount namespace is unreadable ({why}): taken to be this one")),
            },
        },
    }
}

/// The refusal inside a node that is itself a container (`docker exec`
/// into a kind node): eBPF names callers by the kernel's pids, which no
/// option of podstuck's can reach from there, and the host sees into the
/// node's namespaces, so the host is where podstuck runs.
fn node_is_a_container(seen: &Seen) -> String {
    format!(
        "podstuck runs inside a node that is itself a container (kind, k3d, minikube's docker driver: {}), in a PID namespace that is not the kernel's, so the kernel's pids name nothing it can see: \
         run it on the machine that runs the node's container, as root: `podstuck watch` there (kubelet's mounts inside the container are read from there; \
         kind names the container after the node: `docker ps --filter name={}`)",
        seen.node_signs.join(", "),
        crate::words::shell_word(seen.hostname.as_bytes()),
    )
}

/// What says this PID namespace is a node's whose node is a container:
/// an init as PID 1 (a container's own PID 1 is its program), kubelet.
fn node_signs() -> Vec<String> {
    let mut signs = Vec::new();
    let init = std::fs::read_to_string("/proc/1/comm").unwrap_or_default();
    if matches!(init.trim_end(), "systemd" | "init") {
        signs.push(format!("PID 1 is {}", init.trim_end()));
    }
    let kubelet = std::fs::read_dir("/proc").into_iter().flatten().flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        (std::fs::read_to_string(e.path().join("comm")).ok()?.trim_end() == "kubelet").then_some(pid)
    });
    signs.extend(kubelet.map(|pid| format!("kubelet runs here (pid {pid})")));
    signs
}

/// The kernel's own PID namespace's inode: fixed (`PROC_PID_INIT_INO`,
/// include/linux/proc_ns.h), the same on every kernel podstuck runs on.
pub const KERNEL_PID_NS: u64 = 0xEFFF_FFFC;

/// A namespace's inode, from its `/proc/.../ns/...` link.
fn ns_inode(link: &str) -> Result<u64, String> {
    let target = std::fs::read_link(link).map_err(|e| crate::words::io_words(&e))?;
    let text = target.to_string_lossy();
    text.split_once(":[")
        .and_then(|(_, rest)| rest.strip_suffix(']'))
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("{link} reads {text}"))
}

/// What says podstuck runs in a container though PID 1 shares its mount
/// namespace. A kind or minikube node is a container too, with systemd as
/// PID 1: only a PID 1 that is no init counts with docker's mark.
fn container_signs(node_pid: u32) -> Vec<String> {
    let mut signs = Vec::new();
    if std::process::id() == 1 {
        signs.push("podstuck is PID 1".into());
    }
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        signs.push("KUBERNETES_SERVICE_HOST is set".into());
    }
    if Path::new("/run/.containerenv").exists() {
        signs.push("/run/.containerenv".into());
    }
    let init = std::fs::read_to_string(format!("/proc/{node_pid}/comm")).unwrap_or_default();
    if Path::new("/.dockerenv").exists() && !matches!(init.trim_end(), "systemd" | "init" | "") {
        signs.push(format!("/.dockerenv, and PID 1 is {}", init.trim_end()));
    }
    signs
}

/// Reads where podstuck runs, without changing anything.
fn look(explicit_root: Option<&Path>, node_pid: u32) -> Seen {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let nspid_entries =
        status.lines().find_map(|l| l.strip_prefix("NSpid:")).map_or(1, |v| v.split_whitespace().count());
    let pid_ns = ns_inode("/proc/self/ns/pid").ok();
    let kernels = nspid_entries == 1 && pid_ns.is_none_or(|ns| ns == KERNEL_PID_NS);
    Seen {
        // Only said when refusing: a walk of /proc on the node is wasted.
        node_signs: if kernels { Vec::new() } else { node_signs() },
        pid_ns,
        // The node's own name, where PID 1's root is in reach (a debug
        // pod's hostname is its own), else this machine's.
        hostname: ["/proc/1/root/etc/hostname", "/proc/sys/kernel/hostname"]
            .iter()
            .find_map(|f| std::fs::read_to_string(f).ok().map(|h| h.trim().to_string()).filter(|h| !h.is_empty()))
            .unwrap_or_default(),
        nspid_entries,
        own_mntns: ns_inode("/proc/self/ns/mnt").ok(),
        node_mntns: ns_inode(&format!("/proc/{node_pid}/ns/mnt")),
        container_signs: container_signs(node_pid),
        explicit_root: explicit_root.map(Path::to_path_buf),
        default_root_present: looks_like_root(Path::new(DEFAULT_HOST_ROOT)),
    }
}

/// Why podstuck cannot work from where it runs, or a `--host-root` that
/// is no root: said before anything is traced.
#[derive(Debug)]
pub struct CannotReachNode(pub String);

impl std::fmt::Display for CannotReachNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CannotReachNode {}

fn open_path(path: &str, flags: OFlag) -> std::io::Result<OwnedFd> {
    Ok(nix::fcntl::open(path, flags | OFlag::O_CLOEXEC, Mode::empty())?)
}

/// Enters `node_pid`'s mount namespace (and its cgroup and UTS ones
/// where allowed); the working directory stays the container's.
fn enter(node_pid: u32) -> Result<OwnedFd, String> {
    let root = open_path("/", OFlag::O_PATH | OFlag::O_DIRECTORY)
        .map_err(|e| format!("cannot open /: {}", crate::words::io_words(&e)))?;
    let cwd = open_path(".", OFlag::O_PATH | OFlag::O_DIRECTORY).ok();
    let ns = |kind: &str| open_path(&format!("/proc/{node_pid}/ns/{kind}"), OFlag::O_RDONLY);
    let mnt = ns("mnt").map_err(|e| format!("/proc/{node_pid}/ns/mnt: {}", crate::words::io_words(&e)))?;
    let (cgroup, uts) = (ns("cgroup").ok(), ns("uts").ok());
    if let Err(e) = setns(&mnt, CloneFlags::CLONE_NEWNS) {
        let need = if e == Errno::EPERM { " (needs CAP_SYS_ADMIN and CAP_SYS_CHROOT)" } else { "" };
        return Err(format!("{}{need}", crate::words::io_words(&e.into())));
    }
    // Best effort: /proc/<pid>/cgroup and the node name read as the node's where allowed.
    for (fd, kind) in [(cgroup, CloneFlags::CLONE_NEWCGROUP), (uts, CloneFlags::CLONE_NEWUTS)] {
        if let Some(fd) = fd {
            let _ = setns(&fd, kind);
        }
    }
    if let Some(cwd) = cwd {
        // Relative paths the user gave keep meaning the container's.
        let _ = nix::unistd::fchdir(&cwd);
    }
    Ok(root)
}

/// Finds where podstuck runs and makes the node reachable from there.
/// Call once, first thing in `main`, before any thread starts; `explicit_root`
/// is `--host-root`, `node_pid` the process whose namespaces are the node's.
pub fn discover(explicit_root: Option<&Path>, node_pid: u32) -> Result<&'static Node, CannotReachNode> {
    if let Some(root) = explicit_root {
        if !root.is_dir() {
            return Err(CannotReachNode(format!("--host-root {}: no such directory", root.display())));
        }
        if !looks_like_root(root) {
            return Err(CannotReachNode(format!(
                "--host-root {}: not the node's root (no etc beside var or usr): give the directory the node's / is mounted at, e.g. /host",
                root.display()
            )));
        }
    }
    let seen = look(explicit_root, node_pid);
    let user_prefix = seen.host_root();
    let mut view = Node { user_prefix, node_pid, own_mntns: seen.own_mntns, ..Node::on_node() };
    match decide(&seen) {
        Decision::Refuse(why) => return Err(CannotReachNode(why)),
        Decision::Stay { note } => {
            view.own_mntns = None;
            view.note = note;
        }
        Decision::Through { root, why } => view.place = Place::Through { root, why },
        Decision::Enter { fallback } => match enter(node_pid) {
            Ok(root) => {
                view.place = Place::Entered;
                view.container_root = Some(root);
            }
            Err(why) => {
                let root = fallback.unwrap_or_else(|| PathBuf::from(format!("/proc/{node_pid}/root")));
                if !looks_like_root(&root) {
                    return Err(CannotReachNode(format!(
                        "podstuck runs in a container and cannot reach the node: entering its mount namespace was refused ({why}) and {} is not readable as the node's root; \
                         mount the node's / into the container (hostPath / at /host) and pass --host-root /host, or grant CAP_SYS_ADMIN",
                        root.display()
                    )));
                }
                view.place = Place::Through { root, why };
            }
        },
    }
    Ok(DISCOVERED.get_or_init(|| view))
}

/// `path` as one word, for messages; paths the user gave may not be UTF-8.
pub fn path_words(path: &Path) -> String {
    crate::words::safe_text(path.as_os_str().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TempDir;

    fn seen() -> Seen {
        Seen {
            nspid_entries: 1,
            pid_ns: Some(KERNEL_PID_NS),
            own_mntns: Some(4026531841),
            node_mntns: Ok(4026531841),
            container_signs: Vec::new(),
            node_signs: Vec::new(),
            hostname: "kind-worker".into(),
            explicit_root: None,
            default_root_present: false,
        }
    }

    #[test]
    fn inside_a_node_that_is_a_container_the_host_is_named_as_the_place_to_run() {
        let signs = vec!["PID 1 is systemd".to_string(), "kubelet runs here (pid 812)".to_string()];
        // docker exec into a kind node: /proc is the node's, so NSpid has one entry; the namespace tells.
        let Decision::Refuse(why) = decide(&Seen { pid_ns: Some(4026532600), node_signs: signs, ..seen() }) else {
            panic!("not refused")
        };
        assert!(why.contains("inside a node that is itself a container"), "{why}");
        assert!(why.contains("PID 1 is systemd, kubelet runs here (pid 812)"), "{why}");
        assert!(
            why.contains("run it on the machine that runs the node's container, as root: `podstuck watch` there"),
            "{why}"
        );
        assert!(why.contains("docker ps --filter name=kind-worker"), "{why}");
        assert!(!why.contains("kubectl debug node"), "a debug pod on such a node is in its PID namespace too: {why}");
    }

    #[test]
    fn on_the_node_nothing_changes() {
        assert_eq!(decide(&seen()), Decision::Stay { note: None });
    }

    #[test]
    fn a_pid_namespace_of_its_own_is_refused() {
        assert_eq!(
            decide(&Seen { nspid_entries: 2, node_mntns: Ok(7), ..seen() }),
            Decision::Refuse(NO_HOST_PID.into())
        );
        // PID 1 in our own mount namespace, in a container: the container's init.
        let alone = Seen { container_signs: vec!["KUBERNETES_SERVICE_HOST is set".into()], ..seen() };
        assert_eq!(decide(&alone), Decision::Refuse(NO_HOST_PID.into()));
        assert!(NO_HOST_PID.contains("hostPID: true") && NO_HOST_PID.contains("--pid=host"));
    }

    #[test]
    fn a_container_with_host_pids_enters_the_node_or_falls_back_to_its_root() {
        let debug_pod = Seen { node_mntns: Ok(4026531840), default_root_present: true, ..seen() };
        assert_eq!(decide(&debug_pod), Decision::Enter { fallback: Some(PathBuf::from("/host")) });
        let explicit = Seen { explicit_root: Some(PathBuf::from("/node")), ..debug_pod.clone() };
        assert_eq!(decide(&explicit), Decision::Enter { fallback: Some(PathBuf::from("/node")) });
        assert_eq!(decide(&Seen { default_root_present: false, ..debug_pod }), Decision::Enter { fallback: None });
    }

    #[test]
    fn an_unreadable_pid_1_is_read_through_the_host_root_or_taken_as_here() {
        let unreadable = Seen { node_mntns: Err("permission denied".into()), ..seen() };
        match decide(&unreadable) {
            Decision::Stay { note: Some(note) } => assert!(note.contains("permission denied"), "{note}"),
            other => panic!("{other:?}"),
        }
        match decide(&Seen { default_root_present: true, ..unreadable }) {
            Decision::Through { root, why } => {
                assert_eq!(root, PathBuf::from("/host"));
                assert!(why.contains("permission denied"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    fn through(root: &str) -> Node {
        Node {
            place: Place::Through { root: root.into(), why: "EPERM".into() },
            user_prefix: Some(root.into()),
            ..Node::on_node()
        }
    }

    #[test]
    fn through_a_root_paths_are_read_under_it_and_shown_as_the_node_spells_them() {
        let view = through("/host");
        assert_eq!(view.path(Path::new("/var/lib/kubelet")), PathBuf::from("/host/var/lib/kubelet"));
        assert_eq!(view.path(Path::new("/")), PathBuf::from("/host"));
        assert_eq!(view.shown(Path::new("/host/var/lib/kubelet/pods")), PathBuf::from("/var/lib/kubelet/pods"));
        assert_eq!(view.shown(Path::new("/host")), PathBuf::from("/"));
        assert_eq!(view.shown(Path::new("/hostile/x")), PathBuf::from("/hostile/x"));
        assert_eq!(view.user_node_path(Path::new("/host/var/lib/kubelet")), PathBuf::from("/var/lib/kubelet"));
        assert_eq!(view.user_node_path(Path::new("/var/lib/kubelet")), PathBuf::from("/var/lib/kubelet"));
        assert_eq!(view.mountinfo(), PathBuf::from("/proc/1/mountinfo"));
        assert!(view.in_container());
        assert!(view.words().contains("reading the node through /host (setns refused: EPERM)"), "{}", view.words());
    }

    #[test]
    fn on_the_node_paths_are_as_given_and_podstuck_is_no_holder() {
        let view = Node::on_node();
        assert_eq!(view.path(Path::new("/var/lib/kubelet")), PathBuf::from("/var/lib/kubelet"));
        assert_eq!(view.user_file(Path::new("/tmp/x")), PathBuf::from("/tmp/x"));
        assert_eq!(view.mountinfo(), PathBuf::from("/proc/self/mountinfo"));
        assert!(!view.is_podstuck_namespace(4026531840));
        assert_eq!(view.words(), "on the node");
    }

    #[test]
    fn entered_user_files_stay_the_containers() {
        let tmp = TempDir::new("node-view-out");
        let root = open_path(tmp.0.to_str().unwrap(), OFlag::O_PATH | OFlag::O_DIRECTORY).unwrap();
        let n = root.as_raw_fd();
        let view = Node { place: Place::Entered, container_root: Some(root), own_mntns: Some(9), ..Node::on_node() };
        assert_eq!(
            view.user_file(Path::new("/out/run.podstuck")),
            PathBuf::from(format!("/proc/self/fd/{n}/out/run.podstuck"))
        );
        assert_eq!(view.user_file(Path::new("/")), PathBuf::from(format!("/proc/self/fd/{n}/.")));
        assert_eq!(view.user_file(Path::new("here/h")), PathBuf::from("here/h"));
        // Written through the held root, the file lands in the container's tree.
        std::fs::write(view.user_file(Path::new("/written")), b"x").unwrap();
        assert!(tmp.0.join("written").exists());
        assert!(view.is_podstuck_namespace(9) && !view.is_podstuck_namespace(10));
        assert_eq!(view.words(), "in a container: the node's mount namespace entered");
    }

    #[test]
    fn a_root_looks_like_one() {
        let tmp = TempDir::new("node-view-root");
        assert!(!looks_like_root(&tmp.0));
        std::fs::create_dir_all(tmp.0.join("etc")).unwrap();
        std::fs::create_dir_all(tmp.0.join("var")).unwrap();
        assert!(looks_like_root(&tmp.0));
        assert!(looks_like_root(Path::new("/")));
    }
}
