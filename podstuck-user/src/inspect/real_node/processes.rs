//! The node's processes as /proc lists them: which there are (podstuck's
//! own and its container's left out), the mount namespace each lives in
//! and a member to read a namespace's mount table through, their names,
//! and a task's state (what it waits on in the kernel). Only /proc text
//! files and magic links: nothing here calls into a filesystem that may
//! hang, so it runs inline, not on a reader.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::identify::process::{parse_stat, process_start, TaskStat};
use crate::inspect::mounts::parse_mountinfo;
use crate::inspect::{namespace_gone, Mount, MountNamespace, Probe, ProcessState, TaskState, Unreadable, THREADS_KEPT};

use super::{read_link, unreadable, RealNode};

/// Threads of one process whose state is read, at most (a JVM may have
/// thousands; the one in D is among the first few hundred read).
const THREADS_READ: usize = 4096;

/// Mount namespaces whose member is remembered; past this the memory
/// starts again (a node has a few hundred namespaces, not thousands).
const MEMBERS_KEPT: usize = 1024;

impl RealNode {
    pub(super) fn proc_file(&self, pid: u32, name: &str) -> PathBuf {
        self.proc_root.join(pid.to_string()).join(name)
    }

    /// The node's own /proc entry: podstuck's, or PID 1's where podstuck
    /// reads the node from a container's mount namespace.
    pub(super) fn node_entry(&self) -> PathBuf {
        self.proc_root.join(self.node.node_proc_entry())
    }

    pub(super) fn host_table(&self) -> io::Result<Vec<Mount>> {
        Ok(parse_mountinfo(&fs::read(self.node_entry().join("mountinfo"))?))
    }

    pub(super) fn table_of(&self, pid: u32) -> io::Result<Vec<Mount>> {
        Ok(parse_mountinfo(&fs::read(self.proc_file(pid, "mountinfo"))?))
    }

    /// Every process id in /proc, podstuck's own left out, and every
    /// process of its own container (they hold the copies of every mount
    /// a `kubectl debug node` pod is made with, and go with podstuck).
    pub(super) fn pids(&self) -> Vec<u32> {
        let Ok(entries) = fs::read_dir(&self.proc_root) else {
            return Vec::new();
        };
        let mut pids: Vec<u32> = entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .filter(|pid| *pid != self.self_pid)
            .filter(|pid| self.podstuck_mntns.is_none() || self.mntns_of(*pid) != self.podstuck_mntns)
            .collect();
        pids.sort_unstable();
        pids
    }

    pub(super) fn mntns_of_link(&self, link: &Path) -> Option<u64> {
        parse_ns_link(&read_link(link).ok()?)
    }

    pub(super) fn mntns_of(&self, pid: u32) -> Option<u64> {
        self.mntns_of_link(&self.proc_file(pid, "ns/mnt"))
    }

    /// The node's mount namespace: podstuck's own unless it reads the
    /// node from its container's.
    pub(super) fn own_mntns(&self) -> Option<u64> {
        self.mntns_of_link(&self.node_entry().join("ns/mnt"))
    }

    /// A process living in mount namespace `ns`: the one remembered while
    /// it still lives there, else kubelet where it lives there, else the
    /// oldest (lowest pid: a container's init), which outlives the others.
    pub(super) fn member_of(&mut self, ns: u64) -> Option<u32> {
        if let Some(&pid) = self.members.get(&ns) {
            if self.mntns_of(pid) == Some(ns) {
                return Some(pid);
            }
        }
        let members: Vec<u32> = self.pids().into_iter().filter(|pid| self.mntns_of(*pid) == Some(ns)).collect();
        let pid =
            members.iter().copied().find(|pid| self.comm_of(*pid) == "kubelet").or_else(|| members.first().copied())?;
        if self.members.len() >= MEMBERS_KEPT {
            self.members.clear();
        }
        self.members.insert(ns, pid);
        Some(pid)
    }

    pub(super) fn comm_of(&self, pid: u32) -> String {
        fs::read(self.proc_file(pid, "comm"))
            .map(|b| crate::words::safe_text(b.strip_suffix(b"\n").unwrap_or(&b)))
            .unwrap_or_default()
    }

    pub(super) fn unreadable_proc(&self, e: io::Error) -> Unreadable {
        if e.kind() == io::ErrorKind::NotFound {
            Unreadable::Gone("no such process".into())
        } else {
            unreadable(e)
        }
    }

    /// The mount table of namespace `mntns`, read through a process living
    /// there (0: the node's own).
    pub(super) fn namespace(&mut self, mntns: u64) -> Probe<MountNamespace> {
        if mntns == 0 || Some(mntns) == self.own_mntns() {
            let mounts = self.host_table().map_err(unreadable)?;
            return Ok(MountNamespace {
                mntns,
                host: true,
                member: self.self_pid,
                member_start: process_start(&self.proc_root, self.self_pid),
                member_comm: self.comm_of(self.self_pid),
                owner: None,
                mounts,
            });
        }
        // The member may leave between being found and being read: one more try.
        for _ in 0..2 {
            let member = self.member_of(mntns).ok_or_else(|| namespace_gone(mntns))?;
            match self.table_of(member) {
                Ok(mounts) if self.mntns_of(member) == Some(mntns) => {
                    let owner = self.runtimes.owner_of(&self.proc_root, member);
                    return Ok(MountNamespace {
                        mntns,
                        host: false,
                        member,
                        member_start: process_start(&self.proc_root, member),
                        member_comm: self.comm_of(member),
                        owner,
                        mounts,
                    });
                }
                _ => {
                    self.members.remove(&mntns);
                }
            }
        }
        Err(namespace_gone(mntns))
    }

    /// A task's state, name and kernel stack from /proc.
    pub(super) fn task_of(&self, tid: u32) -> Probe<TaskState> {
        let stat = fs::read(self.proc_file(tid, "stat")).map_err(|e| self.unreadable_proc(e))?;
        let TaskStat { comm, state, .. } =
            parse_stat(&stat).ok_or_else(|| Unreadable::Other(format!("cannot parse /proc/{tid}/stat")))?;
        // Bytes, not text: the Name line above holds what the process chose.
        let pid = fs::read(self.proc_file(tid, "status"))
            .ok()
            .and_then(|s| {
                s.split(|b| *b == b'\n')
                    .find_map(|l| std::str::from_utf8(l.strip_prefix(b"Tgid:")?).ok()?.trim().parse().ok())
            })
            .unwrap_or(tid);
        let wchan = fs::read_to_string(self.proc_file(tid, "wchan"))
            .ok()
            .map(|w| w.trim().to_string())
            .filter(|w| !w.is_empty() && w != "0");
        let stack = fs::read_to_string(self.proc_file(tid, "stack"))
            .map(|s| s.lines().filter_map(frame_name).collect())
            .unwrap_or_default();
        Ok(TaskState { tid, pid, comm, state, wchan, stack })
    }

    /// Process `pid` with its threads and signal dispositions, if it is
    /// still the process that started at `start` (0: any); Ok(None) when
    /// it is gone. Only a missing entry is "gone": any other error (too
    /// many open files, permission denied) is said as such, never taken
    /// for an exit.
    pub(super) fn process_of(&self, pid: u32, start: u64) -> Probe<Option<ProcessState>> {
        let gone = |e: &io::Error| e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH);
        let stat = match fs::read(self.proc_file(pid, "stat")) {
            Ok(stat) => stat,
            Err(e) if gone(&e) => return Ok(None),
            Err(e) => return Err(unreadable(e)),
        };
        let now = parse_stat(&stat).and_then(|s| s.start).map(|s| s.ticks());
        let Some(now) = now else { return Err(Unreadable::Other(format!("cannot parse /proc/{pid}/stat"))) };
        if start != 0 && now != start {
            return Ok(None);
        }
        let status = match fs::read(self.proc_file(pid, "status")) {
            Ok(status) => status,
            Err(e) if gone(&e) => return Ok(None),
            Err(e) => return Err(unreadable(e)),
        };
        let field = |name: &[u8]| {
            status
                .split(|b| *b == b'\n')
                .find_map(|l| l.strip_prefix(name))
                .map(|v| String::from_utf8_lossy(v).trim().to_string())
        };
        let mask = |name: &[u8]| field(name).and_then(|v| u64::from_str_radix(&v, 16).ok()).unwrap_or(0);
        let thread_count = field(b"Threads:").and_then(|v| v.parse().ok()).unwrap_or(0);
        let ns_pid = field(b"NSpid:").and_then(|v| v.split_whitespace().last()?.parse().ok());
        let mut tids: Vec<u32> = match fs::read_dir(self.proc_file(pid, "task")) {
            Ok(entries) => {
                entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).take(THREADS_READ).collect()
            }
            Err(e) if gone(&e) => return Ok(None),
            Err(e) => return Err(unreadable(e)),
        };
        tids.sort_unstable();
        // The leader, then threads in D, then the others.
        let task_dir = |tid: u32| self.proc_root.join(pid.to_string()).join("task").join(tid.to_string());
        let mut states: Vec<(u32, char, String)> = tids
            .iter()
            .filter_map(|tid| {
                let stat = parse_stat(&fs::read(task_dir(*tid).join("stat")).ok()?)?;
                Some((*tid, stat.state, stat.comm))
            })
            .collect();
        states.sort_by_key(|(tid, state, _)| (*tid != pid, *state != 'D', *tid));
        let threads = states
            .into_iter()
            .take(THREADS_KEPT)
            .map(|(tid, state, comm)| {
                let (wchan, stack) = match tid == pid || state == 'D' {
                    true => (
                        fs::read_to_string(task_dir(tid).join("wchan"))
                            .ok()
                            .map(|w| w.trim().to_string())
                            .filter(|w| !w.is_empty() && w != "0"),
                        fs::read_to_string(task_dir(tid).join("stack"))
                            .map(|s| s.lines().filter_map(frame_name).collect())
                            .unwrap_or_default(),
                    ),
                    false => (None, Vec::new()),
                };
                TaskState { tid, pid, comm, state, wchan, stack }
            })
            .collect::<Vec<_>>();
        if threads.is_empty() {
            // Its threads went while they were listed.
            return Ok(None);
        }
        // A zombie leader has left its namespaces: a live thread's says.
        let mntns = self.mntns_of(pid).or_else(|| {
            threads
                .iter()
                .filter(|t| !matches!(t.state, 'Z' | 'X'))
                .find_map(|t| self.mntns_of_link(&task_dir(t.tid).join("ns/mnt")))
        });
        Ok(Some(ProcessState {
            pid,
            start: now,
            threads,
            thread_count,
            ns_pid,
            sig_ignored: mask(b"SigIgn:"),
            sig_caught: mask(b"SigCgt:"),
            mntns,
        }))
    }

    /// The processes whose executable's file name is `name`.
    pub(super) fn processes_named(&self, name: &[u8]) -> Vec<TaskState> {
        let mut found = Vec::new();
        for pid in self.pids() {
            let Ok(exe) = read_link(&self.proc_file(pid, "exe")) else { continue };
            let exe = exe.strip_suffix(b" (deleted)").unwrap_or(&exe);
            if exe.rsplit(|b| *b == b'/').next() == Some(name) {
                if let Ok(task) = self.task_of(pid) {
                    found.push(task);
                }
            }
        }
        found
    }

    /// The processes with /dev/fuse open: the servers of FUSE mounts.
    /// How many requests of FUSE connection `connection` wait for an
    /// answer: fusectl's `waiting`, the kernel's count of the requests
    /// still in flight (a control file: reading it never calls the
    /// connection's server).
    pub(super) fn fuse_connection_waiting(&self, connection: u32) -> Probe<u64> {
        let file = self.node.path(format!("/sys/fs/fuse/connections/{connection}/waiting"));
        let text = fs::read_to_string(&file).map_err(unreadable)?;
        text.trim().parse().map_err(|_| Unreadable::Other(format!("cannot parse {}", file.display())))
    }

    /// The init of `pid`'s PID namespace (see the question): the process
    /// in the same namespace (`ns/pid`, the kernel's inode) whose pid
    /// there is 1 (`NSpid:`'s last).
    pub(super) fn pid_namespace_init_of(&self, pid: u32) -> Option<TaskState> {
        let pidns = |p: u32| read_link(&self.proc_file(p, "ns/pid")).ok();
        let ns_pids = |p: u32| -> Vec<u32> {
            let status = fs::read(self.proc_file(p, "status")).unwrap_or_default();
            status
                .split(|b| *b == b'\n')
                .find_map(|l| l.strip_prefix(b"NSpid:"))
                .map(|v| String::from_utf8_lossy(v).split_whitespace().filter_map(|n| n.parse().ok()).collect())
                .unwrap_or_default()
        };
        let ours = pidns(pid)?;
        let levels = ns_pids(pid);
        // The node's own namespace, or the init itself.
        if levels.len() < 2 || levels.last() == Some(&1) {
            return None;
        }
        let init = self
            .pids()
            .into_iter()
            .find(|p| *p != pid && pidns(*p).as_ref() == Some(&ours) && ns_pids(*p).last() == Some(&1))?;
        self.task_of(init).ok()
    }

    pub(super) fn fuse_server_tasks(&self) -> Vec<TaskState> {
        let mut servers = Vec::new();
        for pid in self.pids() {
            let Ok(fds) = fs::read_dir(self.proc_file(pid, "fd")) else { continue };
            let serves = fds.flatten().any(|e| read_link(&e.path()).is_ok_and(|t| t == b"/dev/fuse"));
            if serves {
                if let Ok(task) = self.task_of(pid) {
                    servers.push(task);
                }
            }
        }
        servers
    }

    /// The processes whose /proc/PID/ns, fd, cwd and root the kernel's
    /// ptrace access check refuses podstuck (EACCES, EPERM): under an
    /// AppArmor profile such as docker-default, which lets a process read
    /// only those of its own profile, all of the node's but its own.
    pub(super) fn denied_tasks(&self) -> Vec<TaskState> {
        let mut denied = Vec::new();
        for pid in self.pids() {
            let refused = fs::read_link(self.proc_file(pid, "ns/mnt"))
                .is_err_and(|e| matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)));
            // Kernel threads (kthreadd and its children) hold no file, cwd
            // or root of a pod's mount: not worth a line of anyone's.
            let kernel_thread = || {
                pid == 2
                    || fs::read(self.proc_file(pid, "stat"))
                        .ok()
                        .and_then(|stat| parse_stat(&stat))
                        .is_some_and(|stat| stat.ppid == Some(2))
            };
            if refused && !kernel_thread() {
                // stat and status stay readable to all: the process is named.
                if let Ok(task) = self.task_of(pid) {
                    denied.push(task);
                }
            }
        }
        denied
    }
}

/// "mnt:[4026531841]" -> 4026531841.
pub(super) fn parse_ns_link(link: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(link).ok()?;
    s.strip_prefix("mnt:[")?.strip_suffix(']')?.parse().ok()
}

/// "[<0>] fuse_simple_request+0x1a0/0x2c0 [fuse]" -> "fuse_simple_request".
fn frame_name(line: &str) -> Option<String> {
    let rest = line.find("] ").map_or(line, |i| &line[i + 2..]);
    let name = rest.trim_start().split(|c: char| c == '+' || c.is_whitespace()).next()?;
    (!name.is_empty()).then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::mounts::mount_at;
    use crate::inspect::real_node::tests::{fake_proc, WAIT};
    use crate::inspect::NodeInspector;
    use crate::node_access::Node;
    use crate::test_support::{is_root, missing, this_test, TempDir};
    use podstuck_tests::{poll_until, Process};
    use std::process::Command;

    #[test]
    fn task_from_a_fake_proc_with_an_awkward_comm() {
        let tmp = TempDir::new("faketask");
        let dir = tmp.0.join("4242");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("stat"), "4242 (we) ird (x) D 1 4242 4242 0 -1 4194560 0 0\n").unwrap();
        fs::write(dir.join("status"), "Name:\twe) ird (x\nState:\tD (disk sleep)\nTgid:\t4240\nPid:\t4242\n").unwrap();
        fs::write(dir.join("wchan"), "0").unwrap();
        fs::write(
            dir.join("stack"),
            "[<0>] fuse_simple_request+0x1a0/0x2c0 [fuse]\n[<0>] fuse_lookup_name+0xe8/0x200 [fuse]\n",
        )
        .unwrap();
        let mut node = RealNode::with_proc_root(Node::direct(), tmp.0.clone());
        let task = node.task(4242).unwrap();
        assert_eq!(
            task,
            TaskState {
                tid: 4242,
                pid: 4240,
                comm: "we) ird (x".into(),
                state: 'D',
                wchan: None,
                stack: vec!["fuse_simple_request".into(), "fuse_lookup_name".into()],
            }
        );
    }

    /// Why the /proc files of other processes are read here and not with
    /// the procfs crate. A process chooses its own name, bytes that are
    /// not UTF-8 included, and the kernel writes them raw into status:
    /// procfs refuses that status whole (its Tgid with it). And procfs's
    /// stat reader slices by the parentheses it finds, so a line cut short
    /// panics it, where a diagnosis must go on; podstuck's reader takes
    /// any bytes (the property tests below): what a cut line still says,
    /// or None for a line with no name or no state.
    #[test]
    fn procfs_refuses_a_hostile_status_and_panics_on_a_cut_stat_where_podstuck_reads_what_is_there() {
        use procfs::{FromBufRead, FromRead};
        let status = b"Name:\tx\xff\nUmask:\t0022\nState:\tD (disk sleep)\nTgid:\t4240\nNgid:\t0\nPid:\t4242\nPPid:\t1\nTracerPid:\t0\n\
Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nFDSize:\t64\nGroups:\t\n";
        assert!(procfs::process::Status::from_buf_read(&status[..]).is_err(), "procfs refuses the whole status");
        let tmp = TempDir::new("utf8comm");
        let dir = tmp.0.join("4242");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("stat"), b"4242 (x\xff) D 1 4242 4242 0 -1 4194560 0 0\n").unwrap();
        fs::write(dir.join("status"), status).unwrap();
        let task = RealNode::with_proc_root(Node::direct(), tmp.0.clone()).task(4242).unwrap();
        assert_eq!((task.pid, task.comm.as_str(), task.state), (4240, crate::words::safe_text(b"x\xff").as_str(), 'D'));

        let read = |comm: &str, state, ppid| Some(TaskStat { comm: comm.into(), state, ppid, start: None });
        let cuts = [(&b"4242 (x)"[..], None), (&b"(x) R"[..], read("x", 'R', None)), (&b"4242 )x( R"[..], None)];
        for (cut, ours) in cuts {
            assert_eq!(parse_stat(cut), ours, "podstuck's reading of {:?}", String::from_utf8_lossy(cut));
            let theirs = std::panic::catch_unwind(|| procfs::process::Stat::from_read(cut));
            assert!(theirs.is_err(), "procfs's stat reader panics on {:?}", String::from_utf8_lossy(cut));
        }
    }

    #[test]
    fn task_of_a_sleeping_child_and_of_a_thread() {
        if !is_root() {
            return;
        }
        let kid = Process::spawn(Command::new("sleep").arg("30"));
        let mut node = RealNode::new(Node::direct());
        // Right after exec it may sleep briefly elsewhere (loading, page
        // faults) and run in between, when wchan reads "0".
        let task = poll_until("the child asleep in nanosleep with a wchan", WAIT, || {
            node.task(kid.pid()).ok().filter(|t| t.state == 'S' && t.comm == "sleep" && t.wchan.is_some())
        });
        assert_eq!((task.tid, task.pid), (kid.pid(), kid.pid()));
        assert_eq!(task.state_words(), "S (sleeping)");
        assert!(task.wchan.as_deref().is_some_and(|w| w.contains("sleep")), "{task:?}");
        assert!(task.stack.iter().all(|f| !f.is_empty() && !f.contains(['+', '[', ' '])), "{:?}", task.stack);

        let tid = nix::unistd::gettid().as_raw() as u32;
        assert_eq!(node.task(tid).unwrap().pid, std::process::id());
        assert_eq!(node.task(u32::MAX).unwrap_err().why(), "no such process");
    }

    #[test]
    fn fuse_servers_are_processes_with_dev_fuse_open() {
        if !is_root() {
            return;
        }
        if !Path::new("/dev/fuse").exists() {
            return missing(&this_test(), "/dev/fuse", "modprobe fuse (or run on a machine with FUSE)");
        }
        let kid = Process::spawn(Command::new("sh").args(["-c", "exec 3<>/dev/fuse; exec sleep 30"]));
        let mut node = RealNode::new(Node::direct());
        let server = poll_until("the child as a FUSE server", WAIT, || {
            node.fuse_servers().into_iter().find(|t| t.pid == kid.pid() && t.comm == "sleep")
        });
        assert_eq!(server.tid, server.pid);
    }

    #[test]
    fn the_host_mount_table_is_podstucks_own_namespace() {
        let mut node = RealNode::new(Node::direct());
        let host = node.host_mounts().unwrap();
        assert!(host.iter().any(|m| m.mount_point == b"/"));
        let own = node.own_mntns().unwrap();
        for asked in [0, own] {
            let ns = node.mount_namespace(asked).unwrap();
            assert!(ns.host);
            assert_eq!(ns.words(), "the host's mount namespace");
            assert!(ns.mounts.iter().any(|m| m.mount_point == b"/"));
        }
    }

    #[test]
    fn namespace_links_and_stack_frames() {
        assert_eq!(parse_ns_link(b"mnt:[4026531841]"), Some(4026531841));
        assert_eq!(parse_ns_link(b"net:[1]"), None);
        assert_eq!(frame_name("[<0>] do_nanosleep+0x67/0x190"), Some("do_nanosleep".into()));
    }

    #[test]
    fn a_namespace_is_read_through_a_member_and_never_replaced_by_the_hosts() {
        use std::os::unix::fs::symlink;
        let tmp = TempDir::new("fakeproc-ns");
        fake_proc(&tmp.0);
        // Kubelet in a container: it lives in the namespace beside its
        // init, whose pid is lower; the volume is mounted there only.
        let put = |rel: &str, text: &str| {
            let p = tmp.0.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        };
        for (pid, comm) in [(500, "systemd"), (600, "kubelet")] {
            fs::create_dir_all(tmp.0.join(format!("{pid}/ns"))).unwrap();
            symlink("mnt:[4000]", tmp.0.join(format!("{pid}/ns/mnt"))).unwrap();
            put(&format!("{pid}/comm"), &format!("{comm}\n"));
        }
        let table =
            "9 8 0:60 / / rw - overlay overlay rw\n90 9 0:61 / /var/lib/kubelet/pods/p/volumes/v rw - tmpfs tmpfs rw\n";
        put("500/mountinfo", table);
        put("600/mountinfo", table);
        let mut node = RealNode::with_proc_root(Node::direct(), tmp.0.clone());
        let ns = node.mount_namespace(4000).unwrap();
        assert!(!ns.host);
        assert_eq!((ns.member, ns.member_comm.as_str()), (600, "kubelet"));
        assert_eq!(ns.words(), "kubelet's mount namespace mnt:[4000]");
        assert!(mount_at(&ns.mounts, b"/var/lib/kubelet/pods/p/volumes/v").is_some());
        // The mount's holders are judged against its own namespace.
        link_cwd(&tmp.0, 500, "/var/lib/kubelet/pods/p/volumes/v/data");
        let mount = mount_at(&ns.mounts, b"/var/lib/kubelet/pods/p/volumes/v").cloned().unwrap();
        let holders = node.mount_holders(&mount, 4000);
        assert!(holders.iter().any(|h| h.pid == 500 && !h.other_namespace), "{holders:?}");
        // Kubelet gone: its init still keeps the namespace readable.
        fs::remove_dir_all(tmp.0.join("600")).unwrap();
        let ns = node.mount_namespace(4000).unwrap();
        assert_eq!((ns.member, ns.words().as_str()), (500, "mount namespace mnt:[4000] of pid 500 (systemd)"));
        // Nobody left: said as such, not the host's table.
        fs::remove_dir_all(tmp.0.join("500")).unwrap();
        assert_eq!(node.mount_namespace(4000), Err(namespace_gone(4000)));
        assert_eq!(
            node.mount_namespace(4242).unwrap_err().why(),
            "no process is left in mount namespace mnt:[4242], so its mounts cannot be read"
        );
    }

    fn link_cwd(proc: &Path, pid: u32, to: &str) {
        std::os::unix::fs::symlink(to, proc.join(pid.to_string()).join("cwd")).unwrap();
        std::os::unix::fs::symlink("/", proc.join(pid.to_string()).join("root")).unwrap();
    }
}
