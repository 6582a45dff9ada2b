//! One podstuck tracing a node at a time: the lock every tracing run
//! holds, who holds it (for `check` and for the refusal), and the refusal
//! itself. Two tracers would double the cost of every traced call on a
//! node that is already in trouble.

use nix::fcntl::{Flock, FlockArg};

use crate::node_access::Node;

/// Another podstuck process tracing this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtherPodstuck {
    pub pid: u32,
    pub command: String,
}

/// The lock every tracing podstuck holds while it traces: exclusive for
/// one that wants to be alone, shared with `--concurrent`. A lock, not a
/// process name: a process of any user may call itself podstuck, and two
/// started at once would both find the other missing.
pub const TRACER_LOCK: &str = "/run/podstuck.lock";

/// The tracer lock, held until dropped (or the process ends, however).
#[derive(Debug)]
pub struct TracerLock(#[allow(dead_code, reason = "held for its lock")] Flock<std::fs::File>);

impl TracerLock {
    /// Takes the lock: exclusive unless `concurrent`. Refused with the
    /// holders when another podstuck traces (and this one wants to be
    /// alone). A lock file that exists is taken read-only where it cannot
    /// be written (the node's / read-only at /host in a DaemonSet): flock
    /// needs no write access. Where there is none and it cannot be made,
    /// no lock is taken: tracing is never refused for that.
    pub fn take(node: &Node, concurrent: bool) -> Result<Option<TracerLock>, AlreadyTracing> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = node.path(TRACER_LOCK);
        let open = |write: bool| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(write)
                .create(write)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&path)
        };
        let Ok(file) = open(true).or_else(|_| open(false)) else {
            return Ok(None);
        };
        let how = if concurrent { FlockArg::LockSharedNonblock } else { FlockArg::LockExclusiveNonblock };
        if let Ok(locked) = Flock::lock(file, how) {
            return Ok(Some(TracerLock(locked)));
        }
        match (concurrent, other_podstucks(node).into_iter().next()) {
            // Alongside an exclusive one, as asked: without the lock.
            (true, _) => Ok(None),
            (false, Some(other)) => Err(AlreadyTracing(other)),
            (false, None) => Err(AlreadyTracing(OtherPodstuck {
                pid: 0,
                command: "a process holding the lock (see /proc/locks)".into(),
            })),
        }
    }
}

/// The processes that hold the tracer lock (from /proc/locks), with their
/// command lines.
pub fn other_podstucks(node: &Node) -> Vec<OtherPodstuck> {
    use std::os::unix::fs::MetadataExt;
    let me = std::process::id();
    let Ok(meta) = std::fs::metadata(node.path(TRACER_LOCK)) else { return Vec::new() };
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let mut pids = lock_holders(&locks, libc::major(meta.dev()), libc::minor(meta.dev()), meta.ino());
    pids.retain(|pid| *pid != me);
    pids.dedup();
    pids.into_iter()
        .map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let words: Vec<String> =
                cmdline.split(|b| *b == 0).filter(|w| !w.is_empty()).map(crate::words::safe_text).collect();
            OtherPodstuck { pid, command: words.join(" ") }
        })
        .collect()
}

/// Pids holding a lock on the file (device, inode) in a /proc/locks text:
/// "1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF".
fn lock_holders(locks: &str, major: u32, minor: u32, ino: u64) -> Vec<u32> {
    let mut pids: Vec<u32> = locks
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // A blocked waiter is listed after "->": not a holder.
            if fields.get(1) == Some(&"->") {
                return None;
            }
            let at = fields.iter().position(|f| *f == "FLOCK")?;
            let pid: u32 = fields.get(at + 3)?.parse().ok()?;
            let mut id = fields.get(at + 4)?.split(':');
            let (maj, min, inode) = (
                u32::from_str_radix(id.next()?, 16).ok()?,
                u32::from_str_radix(id.next()?, 16).ok()?,
                id.next()?.parse::<u64>().ok()?,
            );
            (maj == major && min == minor && inode == ino).then_some(pid)
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// `watch` refuses to be a second tracer: on a node already under stress,
/// two podstucks double the cost of every traced call.
#[derive(Debug)]
pub struct AlreadyTracing(pub OtherPodstuck);

impl std::fmt::Display for AlreadyTracing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "another podstuck is already tracing this node (pid {}: {}, holding {TRACER_LOCK}); stop it (kill {}) or watch its output, \
             or pass --concurrent to run both (each adds its own cost to every traced call)",
            self.0.pid, self.0.command, self.0.pid
        )
    }
}

impl std::error::Error for AlreadyTracing {}

#[cfg(test)]
mod tests {
    use super::lock_holders;

    #[test]
    fn lock_holders_are_read_from_proc_locks() {
        let locks = "1: FLOCK  ADVISORY  WRITE 4242 00:1a:5678 0 EOF\n\
                     2: FLOCK  ADVISORY  READ  77 fd:01:5678 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 99 00:1a:5678 0 EOF\n\
                     3: POSIX  ADVISORY  WRITE 5 00:1a:5678 0 EOF\n\
                     4: FLOCK  ADVISORY  READ  66 00:1a:5678 0 EOF\n";
        assert_eq!(lock_holders(locks, 0, 0x1a, 5678), vec![66, 4242]);
        assert_eq!(lock_holders(locks, 0xfd, 1, 5678), vec![77]);
        assert!(lock_holders(locks, 0, 0x1a, 1).is_empty());
    }
}
