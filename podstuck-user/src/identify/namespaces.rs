//! The node's mount namespaces, as [`super::path_proof`] asks about them:
//! which namespace holds a live kubelet or container runtime (in no pod's
//! cgroup), and a namespace's mount table, read through a process living
//! in it. Read from /proc only (links and text files, which never touch
//! the filesystems behind them), for calls made outside the node's own
//! namespace: most of a node's calls (kubelet and the runtimes on the
//! host) never ask.
//!
//! Bounded and fresh enough to decide on: a census of every process's
//! namespace is taken at most once a second, a namespace's table kept a
//! second at most, [`NAMESPACES_KEPT`] namespaces at most. A stale table
//! errs only one way that matters, and the way is safe: a pod's namespace
//! that does not hold the node's kubelet directory never shows it,
//! however old the copy.

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::actor::{exe_basename, RUNTIMES};
use super::path_proof::{NamespaceFacts, Unproven};
use super::pod::clues_from_cgroup;
use crate::mountinfo::{parse_mountinfo, Mount};

/// A mount table is read again once it is this old.
const TABLE_FRESH: Duration = Duration::from_secs(1);
/// The census of namespaces is taken again at most this often.
const CENSUS_EVERY: Duration = Duration::from_secs(1);
/// Namespaces whose tables are kept at most (a node runs a few hundred
/// containers; past this the cache starts again).
pub const NAMESPACES_KEPT: usize = 2048;
/// A table read is at most this long: a namespace of a workload's making
/// may hold any number of mounts.
const TABLE_BYTES: u64 = 8 << 20;

/// Who lives in one namespace, by the last census.
#[derive(Clone, Debug, Default)]
struct Living {
    /// A process living there.
    member: u32,
    /// A kubelet or runtime living there in no pod's cgroup: its pid and
    /// executable's name.
    runtime: Option<(u32, String)>,
}

/// The namespaces' facts, read from `proc_root`.
pub struct Namespaces {
    proc_root: PathBuf,
    node_mountinfo: PathBuf,
    node_mntns: u32,
    node_table: Option<(Instant, Vec<Mount>)>,
    tables: HashMap<u32, (Instant, Vec<Mount>)>,
    census: HashMap<u32, Living>,
    census_at: Option<Instant>,
}

impl Namespaces {
    /// The namespaces of the node whose processes `proc_root` lists, whose
    /// own namespace is `node_mntns` with its table at `node_mountinfo`.
    pub fn new(proc_root: PathBuf, node_mountinfo: PathBuf, node_mntns: u32) -> Namespaces {
        Namespaces {
            proc_root,
            node_mountinfo,
            node_mntns,
            node_table: None,
            tables: HashMap::new(),
            census: HashMap::new(),
            census_at: None,
        }
    }

    pub fn node_mntns(&self) -> u32 {
        self.node_mntns
    }

    pub fn node_mountinfo(&self) -> &Path {
        &self.node_mountinfo
    }

    fn proc_file(&self, pid: u32, name: &str) -> PathBuf {
        self.proc_root.join(pid.to_string()).join(name)
    }

    /// The namespace process `pid` lives in now.
    fn mntns_of(&self, pid: u32) -> Option<u32> {
        namespace_number(&self.proc_file(pid, "ns/mnt"))
    }

    /// Process `pid`'s executable's file name, when it is a runtime's and
    /// the process is in no pod's cgroup.
    fn runtime_of(&self, pid: u32) -> Option<String> {
        let exe = std::fs::read_link(self.proc_file(pid, "exe")).ok()?;
        let name = exe_basename(std::str::from_utf8(exe.as_os_str().as_bytes()).ok()?).to_string();
        if !RUNTIMES.contains(&name.as_str()) {
            return None;
        }
        let cgroups = std::fs::read(self.proc_file(pid, "cgroup")).ok()?;
        let in_a_pod = cgroups
            .split(|b| *b == b'\n')
            .filter_map(|line| line.splitn(3, |b| *b == b':').nth(2))
            .any(|path| clues_from_cgroup(&String::from_utf8_lossy(path)).0.is_some());
        (!in_a_pod).then_some(name)
    }

    /// Takes the census again when the last is older than [`CENSUS_EVERY`].
    fn census_if_due(&mut self) {
        if self.census_at.is_some_and(|at| at.elapsed() < CENSUS_EVERY) {
            return;
        }
        self.census_at = Some(Instant::now());
        let mut census: HashMap<u32, Living> = HashMap::new();
        let Ok(entries) = std::fs::read_dir(&self.proc_root) else {
            self.census = census;
            return;
        };
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            let Some(ns) = self.mntns_of(pid) else { continue };
            if ns == self.node_mntns || (!census.contains_key(&ns) && census.len() >= NAMESPACES_KEPT) {
                continue;
            }
            let living = census.entry(ns).or_insert_with(|| Living { member: pid, runtime: None });
            if living.runtime.is_none() {
                living.runtime = self.runtime_of(pid).map(|name| (pid, name));
            }
        }
        self.census = census;
    }

    /// A process living in `mntns` now: `caller` if it still does, else
    /// the census's member (taken again if it has left).
    fn member_of(&mut self, mntns: u32, caller: u32) -> Option<u32> {
        if self.mntns_of(caller) == Some(mntns) {
            return Some(caller);
        }
        let known = self.census.get(&mntns).map(|l| l.member);
        if let Some(member) = known.filter(|m| self.mntns_of(*m) == Some(mntns)) {
            return Some(member);
        }
        self.census_if_due();
        self.census.get(&mntns).map(|l| l.member).filter(|m| self.mntns_of(*m) == Some(mntns))
    }

    /// `mntns`'s table, read through `caller` or another member. A member
    /// that exits between being found and being read (a pod's last process,
    /// right after its last call) makes the read fail: then another is
    /// looked for once, and with none left the namespace is gone, not its
    /// table unreadable.
    fn read_table_of(&mut self, mntns: u32, caller: u32) -> Result<Vec<Mount>, Unproven> {
        for _ in 0..2 {
            let member = self.member_of(mntns, caller).ok_or(Unproven::NamespaceGone)?;
            let table = Self::read_table(&self.proc_file(member, "mountinfo"));
            // The member may have left (or its pid been reused) while it was read.
            if self.mntns_of(member) != Some(mntns) {
                continue;
            }
            return table.ok_or(Unproven::TableUnreadable);
        }
        Err(Unproven::NamespaceGone)
    }

    fn read_table(file: &Path) -> Option<Vec<Mount>> {
        use std::io::Read;
        let mut text = Vec::new();
        std::fs::File::open(file).ok()?.take(TABLE_BYTES).read_to_end(&mut text).ok()?;
        Some(parse_mountinfo(&text))
    }
}

/// The mount namespace task `tid` lives in now, by `proc_root`.
pub fn namespace_of(proc_root: &Path, tid: u32) -> Option<u32> {
    namespace_number(&proc_root.join(tid.to_string()).join("ns/mnt"))
}

/// `mnt:[4026531841]`'s number, from the link at `link`.
fn namespace_number(link: &Path) -> Option<u32> {
    let target = std::fs::read_link(link).ok()?;
    let text = target.to_str()?;
    text.strip_prefix("mnt:[")?.strip_suffix(']')?.parse().ok()
}

impl NamespaceFacts for Namespaces {
    fn node_table(&mut self) -> Option<&[Mount]> {
        if self.node_table.as_ref().is_none_or(|(at, _)| at.elapsed() >= TABLE_FRESH) {
            self.node_table = Self::read_table(&self.node_mountinfo).map(|t| (Instant::now(), t));
        }
        self.node_table.as_ref().map(|(_, t)| t.as_slice())
    }

    fn runtime_in(&mut self, mntns: u32, caller: u32) -> Option<String> {
        if self.mntns_of(caller) == Some(mntns) {
            if let Some(name) = self.runtime_of(caller) {
                return Some(name);
            }
        }
        let still = |n: &Namespaces, pid: u32, name: &str| {
            n.mntns_of(pid) == Some(mntns) && n.runtime_of(pid).as_deref() == Some(name)
        };
        if let Some((pid, name)) = self.census.get(&mntns).and_then(|l| l.runtime.clone()) {
            if still(self, pid, &name) {
                return Some(name);
            }
        }
        self.census_if_due();
        let (pid, name) = self.census.get(&mntns).and_then(|l| l.runtime.clone())?;
        still(self, pid, &name).then_some(name)
    }

    fn table_of(&mut self, mntns: u32, caller: u32) -> Result<&[Mount], Unproven> {
        let fresh = self.tables.get(&mntns).is_some_and(|(at, _)| at.elapsed() < TABLE_FRESH);
        if !fresh {
            let table = self.read_table_of(mntns, caller)?;
            if self.tables.len() >= NAMESPACES_KEPT {
                self.tables.clear();
            }
            self.tables.insert(mntns, (Instant::now(), table));
        }
        Ok(self.tables.get(&mntns).map(|(_, t)| t.as_slice()).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TempDir;

    const NODE_NS: u32 = 4026531841;
    const KUBELET_NS: u32 = 4026532500;
    const POD_NS: u32 = 4026532900;

    /// A fake /proc: each process its namespace link, executable, cgroups
    /// and mount table.
    struct FakeProc {
        tmp: TempDir,
    }

    impl FakeProc {
        fn new(name: &str) -> FakeProc {
            let tmp = TempDir::new(name);
            std::fs::write(tmp.0.join("node-mountinfo"), "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n").unwrap();
            FakeProc { tmp }
        }

        fn process(&self, pid: u32, mntns: u32, exe: &str, cgroup: &str, mountinfo: &str) {
            let dir = self.tmp.0.join("proc").join(pid.to_string());
            std::fs::create_dir_all(dir.join("ns")).unwrap();
            std::os::unix::fs::symlink(format!("mnt:[{mntns}]"), dir.join("ns/mnt")).unwrap();
            std::os::unix::fs::symlink(exe, dir.join("exe")).unwrap();
            std::fs::write(dir.join("cgroup"), format!("0::{cgroup}\n")).unwrap();
            std::fs::write(dir.join("mountinfo"), mountinfo).unwrap();
        }

        fn namespaces(&self) -> Namespaces {
            Namespaces::new(self.tmp.0.join("proc"), self.tmp.0.join("node-mountinfo"), NODE_NS)
        }
    }

    const POD_CGROUP: &str =
        "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1b2c3d4e_0000_4000_8000_00000000000a.slice/cri-containerd-x.scope";

    #[test]
    fn kubelet_in_a_container_is_found_by_its_executable_and_a_pods_impostor_is_not() {
        let proc = FakeProc::new("ns-kubelet");
        proc.process(1, NODE_NS, "/sbin/init", "/init.scope", "");
        proc.process(900, KUBELET_NS, "/usr/bin/kubelet", "/system.slice/docker-abc.scope/kubelet.slice", "");
        proc.process(950, KUBELET_NS, "/bin/umount", "/system.slice/docker-abc.scope", "");
        // A pod's process calling its own binary kubelet, in its own namespace.
        proc.process(2000, POD_NS, "/usr/local/bin/kubelet (deleted)", POD_CGROUP, "");
        let mut ns = proc.namespaces();
        assert_eq!(ns.runtime_in(KUBELET_NS, 950).as_deref(), Some("kubelet"));
        // The caller gone: found through the census all the same.
        assert_eq!(ns.runtime_in(KUBELET_NS, 31337).as_deref(), Some("kubelet"));
        assert_eq!(ns.runtime_in(POD_NS, 2000), None);
    }

    #[test]
    fn a_table_is_read_through_the_caller_or_a_member_and_a_namespace_nobody_lives_in_is_gone() {
        let proc = FakeProc::new("ns-table");
        proc.process(1, NODE_NS, "/sbin/init", "/", "");
        proc.process(2000, POD_NS, "/bin/sleep", POD_CGROUP, "500 400 0:80 / / rw - overlay overlay rw\n");
        let mut ns = proc.namespaces();
        assert_eq!(ns.table_of(POD_NS, 2000).unwrap().len(), 1);
        assert_eq!(ns.table_of(POD_NS, 77).unwrap()[0].fstype, "overlay");
        assert_eq!(ns.table_of(4026539999, 77).unwrap_err(), Unproven::NamespaceGone);
        assert_eq!(ns.node_table().unwrap()[0].fstype, "ext4");
    }

    #[test]
    fn a_table_that_cannot_be_read_from_a_member_still_there_is_unreadable_not_gone() {
        let proc = FakeProc::new("ns-unreadable");
        proc.process(1, NODE_NS, "/sbin/init", "/", "");
        proc.process(2000, POD_NS, "/bin/sleep", POD_CGROUP, "");
        std::fs::remove_file(proc.tmp.0.join("proc/2000/mountinfo")).unwrap();
        let mut ns = proc.namespaces();
        assert_eq!(ns.table_of(POD_NS, 2000).unwrap_err(), Unproven::TableUnreadable);
        // The member gone as well (it exited after its last call): gone.
        std::fs::remove_file(proc.tmp.0.join("proc/2000/ns/mnt")).unwrap();
        assert_eq!(ns.table_of(POD_NS, 2000).unwrap_err(), Unproven::NamespaceGone);
    }
}
