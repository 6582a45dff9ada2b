//! The node's cgroupfs: a cgroup's state (its tasks below it, its
//! children, populated and frozen, v1 or v2) and, on v1, the freezer
//! hierarchy's levels above a cgroup, parents first; a container's cgroup
//! found by its id, and the processes in it. Read where podstuck
//! reaches the node's cgroupfs ([`Node::path`](crate::node_access::Node::path)):
//! in a container its own /sys/fs/cgroup is its cgroup namespace's.
//! cgroupfs never hangs, so it is read inline.

use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::event::ProcessStart;

use crate::identify::process::parse_stat;
use crate::inspect::mounts::freezer_twin;
use crate::inspect::{
    CgroupState, ContainerCgroup, ContainerProcess, FreezerLevel, Probe, Unreadable, ARGV_KEPT, ARGV_WORD_MAX,
    CONTAINER_PROCESSES_KEPT, RUNTIME_PIPES_KEPT,
};
use crate::pod::{clues_from_cgroup, ContainerId};
use crate::words::io_words as words;
use crate::words::safe_text;

use super::{path_of, unreadable, RealNode};

impl RealNode {
    /// What cgroupfs says of the cgroup at `path` and everything below it.
    pub(super) fn cgroup_state(&mut self, path: &[u8]) -> Probe<CgroupState> {
        // The node's cgroupfs, reached from here: in a container read
        // through --host-root, its own /sys/fs/cgroup is its cgroup
        // namespace's, which holds none of the pods' cgroups.
        let reached = self.node.path(path_of(path));
        let dir = reached.as_path();
        let meta = fs::metadata(dir).map_err(unreadable)?;
        if !meta.is_dir() {
            return Err(Unreadable::Other("not a directory".into()));
        }
        let has = |name: &str| dir.join(name).exists();
        let version = if has("cgroup.events") || (has("cgroup.procs") && has("cgroup.controllers")) {
            2
        } else if has("tasks") || has("cgroup.procs") {
            1
        } else {
            return Err(Unreadable::Other("not a cgroup directory: no cgroup.procs or tasks file".into()));
        };
        let list = if version == 2 { "cgroup.procs" } else { "tasks" };

        let mut ids: Vec<u32> = cgroup_tree(dir).iter().flat_map(|d| listed_ids(&d.join(list))).collect();
        ids.sort_unstable();
        ids.dedup();
        // A task may exit between the list and its /proc entry.
        let tasks = ids.into_iter().filter_map(|id| self.task_of(id).ok()).collect();

        let mut children: Vec<String> = fs::read_dir(dir)
            .map_err(unreadable)?
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        children.sort();

        let events = fs::read_to_string(dir.join("cgroup.events")).ok();
        let event = |key: &str| events.as_deref().and_then(|t| key_value(t, key)).map(|v| v == "1");
        let (populated, frozen) = if version == 2 {
            let freeze = fs::read_to_string(dir.join("cgroup.freeze")).ok().map(|t| t.trim() == "1");
            let frozen = match (event("frozen"), freeze) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(false) || b.unwrap_or(false)),
            };
            (event("populated"), frozen)
        } else {
            // freezer.state exists only in the freezer hierarchy: a memory
            // or pids cgroup is frozen when its freezer twin is.
            let state = fs::read_to_string(dir.join("freezer.state")).ok().or_else(|| {
                let twin = freezer_twin(&self.host_table().ok()?, path)?;
                fs::read_to_string(self.node.path(path_of(&twin)).join("freezer.state")).ok()
            });
            (None, state.map(|s| matches!(s.trim(), "FROZEN" | "FREEZING")))
        };
        Ok(CgroupState { version, tasks, children, populated, frozen, has_kill: has("cgroup.kill") })
    }

    /// The v1 freezer's levels of the cgroup at `path`, parents first.
    pub(super) fn freezer_levels(&mut self, path: &[u8]) -> Probe<Vec<FreezerLevel>> {
        let mounts = self.host_table().map_err(unreadable)?;
        let Some(twin) = freezer_twin(&mounts, path) else {
            return Err(Unreadable::Other("no v1 freezer hierarchy mounted, or not a v1 cgroup".into()));
        };
        let mut levels = Vec::new();
        // Parents first: a thaw must start at the top, where a freeze
        // applied to a parent holds its children. Read where podstuck
        // reaches the node's freezer, named as the node spells it: the
        // fix that thaws them runs there.
        let mut pending = std::collections::VecDeque::from([self.node.path(path_of(&twin))]);
        while let Some(dir) = pending.pop_front() {
            let shown = self.node.shown(&dir);
            let state = match fs::read_to_string(dir.join("freezer.state")) {
                Ok(state) => state.trim().to_string(),
                Err(e) if levels.is_empty() => {
                    return Err(Unreadable::io(&e).said_as(format!("{}: {}", shown.display(), words(&e))))
                }
                // A child removed meanwhile.
                Err(_) => continue,
            };
            let pids = listed_ids(&dir.join("cgroup.procs"));
            pending.extend(child_cgroups(&dir));
            levels.push(FreezerLevel { dir: shown.into_os_string().into_vec(), state, pids });
        }
        Ok(levels)
    }
}

/// How many cgroup directories a search for a container's may read: a
/// node's kubepods tree is a few thousand at most; the bound only stops a
/// pathological tree.
const CONTAINER_SEARCH_MAX: usize = 50_000;

/// Container cgroups remembered, so a container asked about every review
/// is not searched for again.
const CONTAINER_DIRS_KEPT: usize = 256;

impl RealNode {
    /// The cgroup of container `id` and its processes: the directory
    /// remembered from the last search if it is still there, else searched
    /// for in each whole cgroup hierarchy (v2 first).
    pub(super) fn container_cgroup(&mut self, id: &ContainerId) -> Probe<Option<ContainerCgroup>> {
        let remembered = self.container_dirs.get(id).filter(|d| d.join("cgroup.procs").exists()).cloned();
        let dir = match remembered {
            Some(dir) => dir,
            None => {
                let mounts = self.host_table().map_err(unreadable)?;
                let mut hierarchies: Vec<_> =
                    mounts.iter().filter(|m| m.whole() && matches!(m.fstype.as_str(), "cgroup2" | "cgroup")).collect();
                hierarchies.sort_by_key(|m| m.fstype != "cgroup2");
                let found = hierarchies.iter().find_map(|m| {
                    let top = self.node.path(path_of(&m.mount_point));
                    find_container(&top, id)
                });
                let Some(dir) = found else { return Ok(None) };
                if self.container_dirs.len() >= CONTAINER_DIRS_KEPT {
                    self.container_dirs.clear();
                }
                self.container_dirs.insert(id.clone(), dir.clone());
                dir
            }
        };
        // Ticks since boot on the wall clock: boot's time, read once.
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes the timespec it is given, nothing else.
        unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
        let since_boot = Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
        let booted = SystemTime::now() - since_boot;
        let mut pids: Vec<u32> = cgroup_tree(&dir).iter().flat_map(|d| listed_ids(&d.join("cgroup.procs"))).collect();
        pids.sort_unstable();
        pids.dedup();
        let mut processes: Vec<ContainerProcess> = pids
            .iter()
            .filter_map(|pid| {
                let stat = parse_stat(&fs::read(self.proc_file(*pid, "stat")).ok()?)?;
                let ppid = stat.ppid?;
                let cmdline = fs::read(self.proc_file(*pid, "cmdline")).unwrap_or_default();
                let argv = cmdline
                    .split(|b| *b == 0)
                    .filter(|w| !w.is_empty())
                    .take(ARGV_KEPT)
                    .map(|w| safe_text(&w[..w.len().min(ARGV_WORD_MAX)]))
                    .collect();
                let start = stat.start?.ticks();
                let ticks = ProcessStart::TICKS_PER_SECOND;
                Some(ContainerProcess {
                    pid: *pid,
                    start,
                    started: booted + Duration::from_millis(start * 1000 / ticks),
                    ppid,
                    comm: stat.comm,
                    state: stat.state,
                    parent_outside: pids.binary_search(&ppid).is_err(),
                    stdio_pipes: (0..3).filter_map(|fd| self.pipe_at(*pid, fd)).collect(),
                    argv,
                })
            })
            .collect();
        processes.sort_by_key(|p| (p.start, p.pid));
        processes.truncate(CONTAINER_PROCESSES_KEPT);
        // The init: the oldest the runtime started; its parent, the runtime.
        let runtime = processes.iter().find(|p| p.parent_outside).map(|init| init.ppid);
        let runtime_pipes = runtime.map(|pid| self.pipes_of(pid)).unwrap_or_default();
        let shown = self.node.shown(&dir);
        Ok(Some(ContainerCgroup { dir: shown.into_os_string().into_vec(), processes, runtime_pipes }))
    }

    /// The pipe or FIFO file descriptor `fd` of process `pid` is, as
    /// (device, inode): `stat` follows the /proc link to the file without
    /// opening it, so a FIFO nobody writes to never blocks the read.
    fn pipe_at(&self, pid: u32, fd: u32) -> Option<(u64, u64)> {
        let link = self.proc_file(pid, "fd").join(fd.to_string());
        let meta = fs::metadata(link).ok()?;
        meta.file_type().is_fifo().then(|| (meta.dev(), meta.ino()))
    }

    /// Every pipe and FIFO process `pid` has open, at most [`RUNTIME_PIPES_KEPT`].
    fn pipes_of(&self, pid: u32) -> Vec<(u64, u64)> {
        let fds = fs::read_dir(self.proc_file(pid, "fd")).into_iter().flatten().flatten();
        let fds = fds.filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok());
        let mut pipes: Vec<(u64, u64)> = fds.filter_map(|fd| self.pipe_at(pid, fd)).collect();
        pipes.sort_unstable();
        pipes.dedup();
        pipes.truncate(RUNTIME_PIPES_KEPT);
        pipes
    }
}

/// The cgroup below `top` (breadth first) whose path names container
/// `id`, as [`clues_from_cgroup`] reads kubelet's and the runtimes' names.
fn find_container(top: &Path, id: &ContainerId) -> Option<PathBuf> {
    let mut pending = std::collections::VecDeque::from([top.to_path_buf()]);
    let mut read = 0;
    while let Some(dir) = pending.pop_front() {
        read += 1;
        if read > CONTAINER_SEARCH_MAX {
            return None;
        }
        for child in child_cgroups(&dir) {
            let named = child.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.contains(id.as_str()));
            if named {
                let relative = child.strip_prefix(top).ok()?.to_string_lossy().into_owned();
                if clues_from_cgroup(&format!("/{relative}")).1.as_ref() == Some(id) {
                    return Some(child);
                }
            }
            pending.push_back(child);
        }
    }
    None
}

/// The cgroups right below `dir`, in name order; none once it is removed.
fn child_cgroups(dir: &Path) -> Vec<PathBuf> {
    let mut children: Vec<PathBuf> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    children.sort();
    children
}

/// `dir` and every cgroup below it, parents first (the order a cleanup
/// reverses: a cgroup is removed only once its children are).
pub fn cgroup_tree(dir: &Path) -> Vec<PathBuf> {
    let mut all = vec![dir.to_path_buf()];
    let mut next = 0;
    while let Some(d) = all.get(next) {
        let children = child_cgroups(d);
        all.extend(children);
        next += 1;
    }
    all
}

/// The ids a `cgroup.procs` or `tasks` file lists; none once it is removed.
pub fn listed_ids(file: &Path) -> Vec<u32> {
    let text = fs::read_to_string(file).unwrap_or_default();
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// The value of `key` in a "key value" per line file (cgroup.events).
pub fn key_value<'t>(text: &'t str, key: &str) -> Option<&'t str> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::real_node::tests::{b, WAIT};
    use crate::inspect::NodeInspector;
    use crate::node_access::Node;
    use crate::test_support::{is_root, missing, this_test, TempDir};
    use nix::mount::{mount, umount2, MntFlags, MsFlags};
    use podstuck_tests::{poll_until, CgroupDirs, Process};
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;
    use std::process::Command;

    /// The cgroup2 mount point, found from the mount table as on any node.
    fn cgroup_mount(node: &mut RealNode, fstype: &str, option: Option<&str>) -> Option<PathBuf> {
        node.host_mounts().ok()?.into_iter().find_map(|m| {
            let fits = m.fstype == fstype && option.is_none_or(|o| m.super_options.split(',').any(|x| x == o));
            fits.then(|| PathBuf::from(OsStr::from_bytes(&m.mount_point)))
        })
    }

    /// A container's cgroup below `root` (a hierarchy's mount), found by
    /// its id below a pod's (kubelet's cgroupfs driver's names), with its
    /// init (a child of this test: its parent is outside) and the init's
    /// own child; a container with no cgroup is none.
    fn container_found_by_its_id_below(node: &mut RealNode, root: &Path, salt: u8) {
        // Both versions' tests run at once in this process: ids of their own.
        let id = ContainerId::parse(&format!("{salt:056x}{:08x}", std::process::id())).unwrap();
        let pod = "pod5f1c2a9e-0000-4000-8000-000000000001";
        let top = root.join(format!("podstuck-test-{}-{salt}", std::process::id()));
        let dir = top.join("kubepods/besteffort").join(pod).join(id.as_str());
        let _dirs = CgroupDirs::create(&dir);
        let init = Process::spawn(Command::new("sh").args(["-c", "sleep 30 & wait"]));
        fs::write(dir.join("cgroup.procs"), init.pid().to_string()).unwrap();
        // Its child once it runs sleep (forked, it is sh until its exec).
        let child = poll_until("sh's child, sleeping", WAIT, || {
            let children = fs::read_to_string(format!("/proc/{0}/task/{0}/children", init.pid())).ok()?;
            let child = children.split_whitespace().next()?.parse::<u32>().ok()?;
            (fs::read_to_string(format!("/proc/{child}/comm")).ok()?.trim() == "sleep").then_some(child)
        });
        // Forked before the move, the child moves too: a container's are there from the start.
        fs::write(dir.join("cgroup.procs"), child.to_string()).unwrap();
        // SAFETY: plain kill(2) of this test's grandchild, pass or fail, so the cgroup empties.
        let _end = scopeguard_kill(child);

        let found = node.container_processes(&id).unwrap().expect("the container's cgroup");
        assert_eq!(found.dir, b(&dir).to_vec());
        let of = |pid: u32| found.processes.iter().find(|p| p.pid == pid).cloned().expect("listed");
        let (sh, sleep) = (of(init.pid()), of(child));
        assert!(sh.parent_outside && !sleep.parent_outside, "{found:?}");
        assert_eq!(sleep.ppid, init.pid());
        assert_eq!(sh.argv, ["sh", "-c", "sleep 30 & wait"]);
        assert_eq!(sleep.argv, ["sleep", "30"]);
        let age = SystemTime::now().duration_since(sh.started).unwrap();
        assert!(age < Duration::from_secs(60), "started on the wall clock: {age:?} ago");
        assert_eq!(found.processes[0].pid, init.pid(), "oldest first");

        let other = ContainerId::parse(&"ab".repeat(32)).unwrap();
        assert_eq!(node.container_processes(&other).unwrap(), None);
    }

    /// Kills process `pid` when dropped.
    fn scopeguard_kill(pid: u32) -> impl Drop {
        struct Kill(u32);
        impl Drop for Kill {
            fn drop(&mut self) {
                // SAFETY: plain kill(2) of a process the test made.
                unsafe { libc::kill(self.0 as i32, libc::SIGKILL) };
            }
        }
        Kill(pid)
    }

    /// The v1 freezer hierarchy's mount: the node's, else one mounted
    /// here (kept in `own`, unmounted when it drops). None when there is
    /// none and none can be mounted: said as a missing prerequisite.
    fn freezer_v1(node: &mut RealNode, own: &mut Option<OwnHierarchy>) -> Option<PathBuf> {
        if let Some(root) = cgroup_mount(node, "cgroup", Some("freezer")) {
            return Some(root);
        }
        let dir = TempDir::new("freezer-v1");
        if let Err(e) = mount(Some("podstuck-test"), &dir.0, Some("cgroup"), MsFlags::empty(), Some("freezer")) {
            return missing(
                &this_test(),
                &format!("a cgroup v1 freezer hierarchy (none mounted, and mounting one failed: {e})"),
                "run it on a cgroup v1 or hybrid node, where the freezer is a v1 controller",
            );
        }
        Some(own.insert(OwnHierarchy(dir)).0 .0.clone())
    }

    #[test]
    fn a_containers_cgroup_is_found_by_its_id_on_cgroup_v2() {
        if !is_root() {
            return;
        }
        let mut node = RealNode::new(Node::direct());
        let Some(root) = cgroup_mount(&mut node, "cgroup2", None) else {
            return missing(&this_test(), "a cgroup2 mount", "run on a cgroup v2 node");
        };
        container_found_by_its_id_below(&mut node, &root, 2);
    }

    /// On a v1 hierarchy (the freezer's, mounted here when the node has
    /// none), where the v2 tree has no such container.
    #[test]
    fn a_containers_cgroup_is_found_by_its_id_on_cgroup_v1() {
        if !is_root() {
            return;
        }
        let mut node = RealNode::new(Node::direct());
        let mut own = None;
        let Some(root) = freezer_v1(&mut node, &mut own) else { return };
        container_found_by_its_id_below(&mut node, &root, 1);
    }

    #[test]
    fn cgroup_v2_with_a_task_in_a_child_cgroup() {
        if !is_root() {
            return;
        }
        let mut node = RealNode::new(Node::direct());
        let Some(root) = cgroup_mount(&mut node, "cgroup2", None) else {
            return missing(
                &this_test(),
                "a cgroup2 mount",
                "mount -t cgroup2 none /sys/fs/cgroup/unified (or run on a cgroup v2 node)",
            );
        };
        let cg = root.join(format!("podstuck-test-{}", std::process::id()));
        let sub = cg.join("sub");
        let _dirs = CgroupDirs::create(&sub);
        let kid = Process::spawn(Command::new("sleep").arg("30"));
        fs::write(sub.join("cgroup.procs"), kid.pid().to_string()).unwrap();

        let state = node.cgroup(b(&cg)).unwrap();
        assert_eq!(state.version, 2);
        let task = state.tasks.iter().find(|t| t.pid == kid.pid()).expect("the child, found below");
        assert_eq!(task.comm, "sleep");
        assert_eq!(state.children, vec!["sub".to_string()]);
        assert_eq!(state.populated, Some(true));
        assert_eq!(state.frozen, Some(false));
        assert!(state.has_kill, "kernel 5.14+ has cgroup.kill");

        let inner = node.cgroup(b(&sub)).unwrap();
        assert!(inner.children.is_empty());
        assert_eq!(inner.tasks.iter().map(|t| t.pid).collect::<Vec<_>>(), vec![kid.pid()]);

        let err = node.cgroup(b(&std::env::temp_dir())).unwrap_err();
        assert!(err.why().starts_with("not a cgroup directory"), "{err}");
        drop(kid);
        let empty =
            poll_until("the cgroup to empty", WAIT, || node.cgroup(b(&cg)).ok().filter(|s| s.populated == Some(false)));
        assert!(empty.tasks.is_empty());
    }

    /// A v1 hierarchy mounted for a test where the node mounts none with
    /// the freezer (a cgroup v2 node still offers the v1 freezer), detached
    /// on drop.
    struct OwnHierarchy(TempDir);

    impl Drop for OwnHierarchy {
        fn drop(&mut self) {
            let _ = umount2(&self.0 .0, MntFlags::MNT_DETACH);
        }
    }

    /// A v1 freezer cgroup thawed on drop, also when the test fails: a
    /// frozen task is neither killed nor its cgroup removed.
    struct Thaw(PathBuf);

    impl Drop for Thaw {
        fn drop(&mut self) {
            let _ = fs::write(self.0.join("freezer.state"), "THAWED");
        }
    }

    #[test]
    fn cgroup_v1_freezer_says_frozen_and_thawed() {
        if !is_root() {
            return;
        }
        let mut node = RealNode::new(Node::direct());
        let mut own = None;
        let Some(root) = freezer_v1(&mut node, &mut own) else { return };
        let cg = root.join(format!("podstuck-test-{}", std::process::id()));
        let _dirs = CgroupDirs::create(&cg);
        let kid = Process::spawn(Command::new("sleep").arg("30"));
        let _thaw = Thaw(cg.clone());
        fs::write(cg.join("cgroup.procs"), kid.pid().to_string()).unwrap();

        let state = node.cgroup(b(&cg)).unwrap();
        assert_eq!(state.version, 1);
        assert!(state.tasks.iter().any(|t| t.tid == kid.pid()));
        assert_eq!(state.frozen, Some(false));
        assert_eq!(state.populated, None);
        assert!(!state.has_kill);

        fs::write(cg.join("freezer.state"), "FROZEN").unwrap();
        let frozen = poll_until("the freezer to say FROZEN", WAIT, || {
            node.cgroup(b(&cg)).ok().filter(|s| s.frozen == Some(true))
        });
        assert!(frozen.tasks.iter().any(|t| t.tid == kid.pid()), "a frozen task is still a member");
        fs::write(cg.join("freezer.state"), "THAWED").unwrap();
        poll_until("the freezer to say THAWED", WAIT, || node.cgroup(b(&cg)).ok().filter(|s| s.frozen == Some(false)));
        drop(kid);
    }

    #[test]
    fn a_v1_cgroup_outside_the_freezer_reads_frozen_from_its_freezer_twin() {
        if !is_root() {
            return;
        }
        let mut node = RealNode::new(Node::direct());
        let (Some(memory), Some(freezer)) =
            (cgroup_mount(&mut node, "cgroup", Some("memory")), cgroup_mount(&mut node, "cgroup", Some("freezer")))
        else {
            return missing(
                &this_test(),
                "cgroup v1 memory and freezer hierarchies",
                "run it on a cgroup v1 or hybrid node (EKS AL2, RHEL 8; or mount -t cgroup -o memory and -o freezer)",
            );
        };
        let name = format!("podstuck-test-twin-{}", std::process::id());
        let (pod, pod_f) = (memory.join(&name), freezer.join(&name));
        let (ctr, ctr_f) = (pod.join("c"), pod_f.join("c"));
        let _dirs = (CgroupDirs::create(&ctr), CgroupDirs::create(&ctr_f));
        let kid = Process::spawn(Command::new("sleep").arg("30"));
        let _thaw = Thaw(ctr_f.clone());
        for dir in [&ctr, &ctr_f] {
            fs::write(dir.join("cgroup.procs"), kid.pid().to_string()).unwrap();
        }
        assert_eq!(node.cgroup(b(&pod)).unwrap().frozen, Some(false));
        fs::write(ctr_f.join("freezer.state"), "FROZEN").unwrap();
        // FREEZING reads as frozen too: the levels below want it done.
        poll_until("the freezer to say FROZEN", WAIT, || {
            (fs::read_to_string(ctr_f.join("freezer.state")).ok()?.trim() == "FROZEN").then_some(())
        });
        let frozen = poll_until("the memory twin to read FROZEN", WAIT, || {
            node.cgroup(b(&ctr)).ok().filter(|s| s.frozen == Some(true))
        });
        let task = frozen.tasks.iter().find(|t| t.pid == kid.pid()).expect("the frozen task");
        // Sleeping on 5.10 (the report of issue 27), D on kernels whose
        // freezer parks tasks in TASK_FROZEN (6.1+): never "frozen".
        assert!(matches!(task.state, 'S' | 'D'), "a v1-frozen task reads as {}", task.state);
        let levels = node.v1_freezer(b(&pod)).unwrap();
        assert_eq!(
            levels,
            vec![
                FreezerLevel { dir: b(&pod_f).to_vec(), state: "THAWED".into(), pids: vec![] },
                FreezerLevel { dir: b(&ctr_f).to_vec(), state: "FROZEN".into(), pids: vec![kid.pid()] },
            ]
        );
        assert!(node.v1_freezer(b(&memory.join("no-such-cgroup"))).is_err());
        // Dropped in reverse: thawed, then killed (a frozen task ignores
        // SIGKILL, and waiting for it would hang), then removed.
    }

    /// The node as a container sees it through `--host-root` (setns
    /// refused): its `/` at a directory of its own. Its cgroups and v1
    /// freezer are read under that root, never in podstuck's own
    /// /sys/fs/cgroup (its cgroup namespace's, which holds none of the
    /// pods'), and the freezer's directories are named as the node spells
    /// them, where the fix that thaws them runs. Plain files stand for
    /// cgroupfs: the readers only read.
    #[test]
    fn through_a_host_root_cgroups_and_the_v1_freezer_are_read_under_it() {
        let host = TempDir::new("host-root-cgroups");
        let proc = TempDir::new("host-root-proc");
        let own = std::process::id();
        // The node's mount table, read as PID 1's; this process's entry as itself.
        fs::create_dir_all(proc.0.join("1")).unwrap();
        fs::write(
            proc.0.join("1/mountinfo"),
            "25 1 0:20 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n\
             26 25 0:21 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n\
             27 25 0:22 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n\
             28 25 0:23 / /sys/fs/cgroup/freezer rw,nosuid - cgroup cgroup rw,freezer\n",
        )
        .unwrap();
        std::os::unix::fs::symlink(format!("/proc/{own}"), proc.0.join(own.to_string())).unwrap();
        let files = |dir: &str, entries: &[(&str, String)]| {
            let dir = host.0.join(dir.trim_start_matches('/'));
            fs::create_dir_all(&dir).unwrap();
            for (name, text) in entries {
                fs::write(dir.join(name), text).unwrap();
            }
        };
        let pod = format!("kubepods/podstuck-test-{own}");
        let v2 = format!("/sys/fs/cgroup/unified/{pod}");
        files(
            &v2,
            &[
                ("cgroup.procs", format!("{own}\n")),
                ("cgroup.controllers", String::new()),
                ("cgroup.events", "populated 1\nfrozen 0\n".into()),
                ("cgroup.freeze", "0\n".into()),
                ("cgroup.kill", String::new()),
            ],
        );
        files(&format!("{v2}/c1"), &[("cgroup.procs", String::new()), ("cgroup.controllers", String::new())]);
        let memory = format!("/sys/fs/cgroup/memory/{pod}");
        files(&memory, &[("tasks", format!("{own}\n")), ("cgroup.procs", format!("{own}\n"))]);
        let freezer = format!("/sys/fs/cgroup/freezer/{pod}");
        files(&freezer, &[("freezer.state", "FROZEN\n".into()), ("cgroup.procs", format!("{own}\n"))]);
        files(&format!("{freezer}/c1"), &[("freezer.state", "FROZEN\n".into()), ("cgroup.procs", String::new())]);
        for raw in [&v2, &memory, &freezer] {
            assert!(!Path::new(raw).exists(), "{raw} must exist only under the host root");
        }
        let view: &'static Node = Box::leak(Box::new(Node::through(&host.0, 1)));
        let mut node = RealNode::with_proc_root(view, proc.0.clone());

        let state = node.cgroup(v2.as_bytes()).unwrap();
        assert_eq!(state.version, 2);
        assert_eq!(state.tasks.iter().map(|t| t.pid).collect::<Vec<_>>(), vec![own]);
        assert_eq!(state.children, vec!["c1".to_string()]);
        assert_eq!((state.populated, state.frozen, state.has_kill), (Some(true), Some(false), true));

        // A v1 memory cgroup is frozen when its freezer twin is, read under the root too.
        let state = node.cgroup(memory.as_bytes()).unwrap();
        assert_eq!((state.version, state.frozen), (1, Some(true)));
        assert_eq!(state.tasks.iter().map(|t| t.tid).collect::<Vec<_>>(), vec![own]);
        let levels = node.v1_freezer(memory.as_bytes()).unwrap();
        assert_eq!(
            levels,
            vec![
                FreezerLevel { dir: freezer.clone().into_bytes(), state: "FROZEN".into(), pids: vec![own] },
                FreezerLevel { dir: format!("{freezer}/c1").into_bytes(), state: "FROZEN".into(), pids: vec![] },
            ]
        );
        let gone = node.v1_freezer(b"/sys/fs/cgroup/memory/kubepods/no-such-pod").unwrap_err();
        assert!(gone.why().starts_with("/sys/fs/cgroup/freezer/kubepods/no-such-pod: "), "the node's spelling: {gone}");
    }

    #[test]
    fn cgroup_events_keys() {
        assert_eq!(key_value("populated 1\nfrozen 0\n", "frozen"), Some("0"));
    }
}
