//! Calls known only by their process: a call still in flight (the kernel
//! holds its arguments, not an event) and calls the kernel counted without
//! streaming them. Dressed as events from what `/proc` says of the thread,
//! so [`super::Identifier::identify`] names their actor and pod the same
//! way as for any call.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::SystemTime;

use podstuck_common::Syscall;

use crate::event::Flight;
use crate::event::{BaseDir, CallEvent, NoPath, PathStatus, AT_FDCWD};

/// A call in flight dressed as an event: comm and parent from /proc, a
/// relative path's base from the caller's cwd or dirfd (readlink of /proc
/// links never touches the filesystem behind them, which may be the one
/// that hangs).
pub fn event_of_flight(flight: &Flight, proc_root: &Path) -> CallEvent {
    let path = flight.path.clone().unwrap_or_default();
    let base = if path.first() == Some(&b'/') || flight.path.is_none() {
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
    CallEvent {
        syscall: flight.syscall,
        flags: flight.flags,
        dfd: flight.dfd,
        path_status: if flight.path.is_some() { PathStatus::Whole } else { PathStatus::Unreadable },
        path,
        base,
        ..process_event(flight.pid, flight.tid, 0, proc_root)
    }
}

/// A call with no path, dressed with what /proc says of its thread: enough
/// for identify to name the actor (and the pod, by cgroup).
pub fn process_event(pid: u32, tid: u32, cgroup_id: u64, proc_root: &Path) -> CallEvent {
    let proc_text = |id: u32, file: &str| {
        std::fs::read_to_string(proc_root.join(id.to_string()).join(file)).map(|s| s.trim_end().to_string()).unwrap_or_default()
    };
    let stat = proc_text(pid, "stat");
    let ppid: u32 = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok()).unwrap_or(0);
    CallEvent {
        time: SystemTime::now(),
        pid,
        tid,
        comm: proc_text(tid, "comm"),
        ppid,
        pcomm: proc_text(ppid, "comm"),
        cgroup_id,
        v1_cgroup_id: 0,
        mntns: 0,
        uid: 0,
        syscall: Syscall::Unlinkat,
        flags: 0,
        dfd: AT_FDCWD,
        path: Vec::new(),
        path_status: PathStatus::Unreadable,
        base: BaseDir::NotNeeded,
        ret: 0,
        latency_ns: 0,
        represents: 1,
    }
}

/// The node's mount namespace inode: podstuck's own, unless it reads the
/// node from a container's namespace.
pub fn own_mount_namespace(node: &crate::node_access::Node) -> u32 {
    std::fs::metadata(node.node_proc_file("ns/mnt")).map(|m| std::os::unix::fs::MetadataExt::ino(&m) as u32).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TempDir;

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
        Flight { tid: 42, pid: 40, syscall: Syscall::Umount2, flags: 2, dfd, started: SystemTime::UNIX_EPOCH, path: path.map(<[u8]>::to_vec) }
    }

    #[test]
    fn a_call_in_flight_is_named_from_proc_and_its_relative_path_based_there() {
        let proc = fake_proc();
        let event = event_of_flight(&flight(AT_FDCWD, Some(b"x/vol")), &proc.0);
        assert_eq!((event.pid, event.tid, event.ppid), (40, 42, 1));
        assert_eq!((event.comm.as_str(), event.pcomm.as_str()), ("umount-worker", "kubelet"));
        assert_eq!((event.syscall, event.flags), (Syscall::Umount2, 2));
        assert_eq!(event.base, BaseDir::Resolved(b"/var/lib/kubelet/pods".to_vec()));
        assert_eq!(event.abs_path().unwrap(), b"/var/lib/kubelet/pods/x/vol");
        assert_eq!(event_of_flight(&flight(7, Some(b"vol")), &proc.0).abs_path().unwrap(), b"/mnt/vol");
        assert_eq!(event_of_flight(&flight(9, Some(b"vol")), &proc.0).base, BaseDir::Unresolved(NoPath::CallerDirUnreadable));
        assert_eq!(event_of_flight(&flight(7, Some(b"/abs")), &proc.0).base, BaseDir::NotNeeded);
        let unreadable = event_of_flight(&flight(7, None), &proc.0);
        assert_eq!((unreadable.path_status, unreadable.base), (PathStatus::Unreadable, BaseDir::NotNeeded));
    }

    #[test]
    fn a_process_gone_from_proc_is_still_an_event() {
        let proc = fake_proc();
        let event = process_event(99, 99, 7, &proc.0);
        assert_eq!((event.comm.as_str(), event.ppid, event.cgroup_id), ("", 0, 7));
    }
}
