//! Calls known only by their process: a call still in flight (the kernel
//! holds its arguments, not an event) and calls the kernel counted without
//! streaming them. What `/proc` says of the thread names the caller, so
//! [`super::Identifier`] names their actor and pod the same way as for any
//! call. The one reader of a `/proc/<pid>/stat` line ([`parse_stat`]) is
//! here too; the node inspector reads a task's state with it.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::event::Flight;
use crate::event::{BaseDir, NoPath, ProcessStart, AT_FDCWD};

/// What `/proc` says of a thread: its name, its parent and the parent's
/// name; empty names and parent 0 when the thread is gone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessFacts {
    pub pid: u32,
    pub comm: String,
    pub ppid: u32,
    pub pcomm: String,
}

impl ProcessFacts {
    /// Thread `tid` of process `pid`. Read as bytes: the names are what
    /// the processes chose, UTF-8 or not, and a name that is not must not
    /// cost the parent.
    pub fn read(pid: u32, tid: u32, proc_root: &Path) -> ProcessFacts {
        let read = |id: u32, file: &str| std::fs::read(proc_root.join(id.to_string()).join(file)).unwrap_or_default();
        let comm = |id: u32| {
            let line = read(id, "comm");
            crate::words::safe_text(line.strip_suffix(b"\n").unwrap_or(&line))
        };
        let ppid = parse_stat(&read(pid, "stat")).and_then(|stat| stat.ppid).unwrap_or(0);
        ProcessFacts { pid, comm: comm(tid), ppid, pcomm: comm(ppid) }
    }
}

/// What podstuck reads of a `/proc/<pid>/stat` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskStat {
    /// The name, as safe text.
    pub comm: String,
    /// `R`, `S`, `D`...
    pub state: char,
    /// The parent, when the line goes on that far.
    pub ppid: Option<u32>,
    /// When its process started (`starttime`), when the line goes on that far.
    pub start: Option<ProcessStart>,
}

/// A `/proc/<pid>/stat` line, any bytes: the name may hold spaces, `)` and
/// bytes that are not UTF-8 (the process chose it), so it runs from the
/// first `(` to the last `)`, and the fields after it are split there.
/// None when there is no name or no state.
pub fn parse_stat(stat: &[u8]) -> Option<TaskStat> {
    let open = stat.iter().position(|b| *b == b'(')?;
    let close = stat.iter().rposition(|b| *b == b')')?;
    if close < open {
        return None;
    }
    let mut fields = stat[close + 1..].split(|b| *b == b' ').filter(|f| !f.is_empty());
    let state = *fields.next()?.first()? as char;
    let number = |f: &[u8]| std::str::from_utf8(f).ok()?.parse::<u64>().ok();
    let ppid = fields.next().and_then(number).map(|p| p as u32);
    // starttime is the 22nd field, the 18th after the parent.
    let start = fields.nth(17).and_then(number).map(ProcessStart);
    Some(TaskStat { comm: crate::words::safe_text(&stat[open + 1..close]), state, ppid, start })
}

/// When process `pid` started, by `/proc/<pid>/stat`; None when it is
/// gone (or unreadable).
pub fn process_start(proc_root: &Path, pid: u32) -> Option<ProcessStart> {
    parse_stat(&std::fs::read(proc_root.join(pid.to_string()).join("stat")).ok()?)?.start
}

/// The absolute path a call in flight acts on: its argument, based on the
/// caller's cwd or dirfd when relative (readlink of /proc links never
/// touches the filesystem behind them, which may be the one that hangs).
pub fn flight_path(flight: &Flight, proc_root: &Path) -> Result<Vec<u8>, NoPath> {
    let path = flight.path.as_deref().ok_or(NoPath::PathUnreadable)?;
    let base = if path.first() == Some(&b'/') {
        BaseDir::NotNeeded
    } else {
        let link = if flight.dfd == AT_FDCWD {
            proc_root.join(flight.tid.to_string()).join("cwd")
        } else {
            proc_root.join(flight.pid.to_string()).join("fd").join(flight.dfd.to_string())
        };
        match std::fs::read_link(link) {
            Ok(dir) => BaseDir::Resolved(dir.as_os_str().as_bytes().to_vec()),
            Err(_) => BaseDir::Unresolved(NoPath::CallerDirUnreadable),
        }
    };
    base.absolute(path)
}

/// The node's mount namespace inode: podstuck's own, unless it reads the
/// node from a container's namespace.
pub fn own_mount_namespace(node: &crate::node_access::Node) -> u32 {
    std::fs::metadata(node.node_proc_file("ns/mnt"))
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m) as u32)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TempDir;
    use podstuck_common::Syscall;
    use std::time::SystemTime;

    /// A /proc with one thread 42 of process 40 (child of 1, "kubelet"),
    /// its cwd in /var/lib/kubelet/pods and fd 7 open on /mnt.
    fn fake_proc() -> TempDir {
        let root = TempDir::new("proc");
        for (id, comm) in [(1, "kubelet"), (40, "umount"), (42, "umount-worker")] {
            std::fs::create_dir_all(root.0.join(format!("{id}/fd"))).unwrap();
            std::fs::write(root.0.join(format!("{id}/comm")), format!("{comm}\n")).unwrap();
        }
        std::fs::write(root.0.join("40/stat"), "40 (umount) S 1 40 40 0 -1").unwrap();
        std::os::unix::fs::symlink("/var/lib/kubelet/pods", root.0.join("42/cwd")).unwrap();
        std::os::unix::fs::symlink("/mnt", root.0.join("40/fd/7")).unwrap();
        root
    }

    fn flight(dfd: i32, path: Option<&[u8]>) -> Flight {
        Flight {
            tid: 42,
            pid: 40,
            syscall: Syscall::Umount2,
            flags: 2,
            dfd,
            started: SystemTime::UNIX_EPOCH,
            path: path.map(<[u8]>::to_vec),
        }
    }

    #[test]
    fn a_call_in_flight_is_named_from_proc_and_its_relative_path_based_there() {
        let proc = fake_proc();
        let facts = ProcessFacts::read(40, 42, &proc.0);
        assert_eq!(facts, ProcessFacts { pid: 40, comm: "umount-worker".into(), ppid: 1, pcomm: "kubelet".into() });
        assert_eq!(flight_path(&flight(AT_FDCWD, Some(b"x/vol")), &proc.0).unwrap(), b"/var/lib/kubelet/pods/x/vol");
        assert_eq!(flight_path(&flight(7, Some(b"vol")), &proc.0).unwrap(), b"/mnt/vol");
        assert_eq!(flight_path(&flight(9, Some(b"vol")), &proc.0), Err(NoPath::CallerDirUnreadable));
        assert_eq!(flight_path(&flight(9, Some(b"/abs/./x")), &proc.0).unwrap(), b"/abs/x", "absolute: no base read");
        assert_eq!(flight_path(&flight(7, None), &proc.0), Err(NoPath::PathUnreadable));
    }

    #[test]
    fn a_name_that_is_not_utf8_is_shown_safely_and_keeps_the_parent() {
        let proc = fake_proc();
        std::fs::write(proc.0.join("40/stat"), b"40 (x\xff) y) S 1 40 40 0 -1").unwrap();
        std::fs::write(proc.0.join("42/comm"), b"x\xff\x1b]0;\n").unwrap();
        let facts = ProcessFacts::read(40, 42, &proc.0);
        assert_eq!((facts.ppid, facts.pcomm.as_str()), (1, "kubelet"));
        assert_eq!(facts.comm, crate::words::safe_text(b"x\xff\x1b]0;"));
        assert_eq!(
            parse_stat(b"40 (x\xff) y) S 1 40"),
            Some(TaskStat { comm: crate::words::safe_text(b"x\xff) y"), state: 'S', ppid: Some(1), start: None })
        );
        assert_eq!(parse_stat(b"(x) R").map(|s| (s.state, s.ppid)), Some(('R', None)));
        assert_eq!(parse_stat(b"4242 (x)"), None);
        // A whole line: its start time, past a name that holds ") " itself.
        let line =
            b"4242 (a) b) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100 18446744073709551615";
        assert_eq!(parse_stat(line).and_then(|s| s.start), Some(ProcessStart(987654)));
        let me = process_start(Path::new("/proc"), std::process::id());
        assert!(me.is_some_and(|s| s.ticks() > 0), "this process's own start: {me:?}");
    }

    #[test]
    fn a_process_gone_from_proc_has_no_names() {
        let proc = fake_proc();
        assert_eq!(ProcessFacts::read(99, 99, &proc.0), ProcessFacts { pid: 99, ..ProcessFacts::default() });
    }
}
