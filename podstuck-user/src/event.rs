//! One traced call, decoded: what the kernel programs sent in a ring-buffer
//! record, turned into names a person reads (syscall, flags, errno) and a
//! wall-clock time. Pure: no I/O, so it is tested on hand-made records.

use std::time::{Duration, SystemTime};

use podstuck_common::{base_status, path_status, CallRecord, Syscall, CALL_RECORD_BYTES};

/// `AT_FDCWD`: the dirfd meaning "relative to the current directory".
pub const AT_FDCWD: i32 = -100;

/// The name users know a traced call by (`umount2`, not the tracepoint's
/// `umount`).
pub fn syscall_name(syscall: Syscall) -> &'static str {
    match syscall {
        Syscall::Unlinkat => "unlinkat",
        Syscall::Unlink => "unlink",
        Syscall::Rmdir => "rmdir",
        Syscall::Umount2 => "umount2",
    }
}

/// How much of the path argument arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathStatus {
    Whole,
    /// PATH_MAX bytes or more: only the first PATH_MAX - 1 are kept.
    TooLong,
    Unreadable,
}

impl PathStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            PathStatus::Whole => "whole",
            PathStatus::TooLong => "too-long",
            PathStatus::Unreadable => "unreadable",
        }
    }
}

/// The directory a relative path argument starts from (the caller's cwd,
/// or the directory behind `dfd`), read in the kernel during the call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BaseDir {
    /// The path is absolute (or was unreadable): nothing to resolve.
    NotNeeded,
    /// The absolute directory, as the caller sees it in its mount namespace.
    Resolved(Vec<u8>),
    /// Why it could not be read.
    Unresolved(NoPath),
}

impl BaseDir {
    /// `path` as an absolute path: itself if absolute, else joined to this
    /// base; cleaned either way. Err says why it is unknown.
    pub fn absolute(&self, path: &[u8]) -> Result<Vec<u8>, NoPath> {
        if path.first() == Some(&b'/') {
            return Ok(clean(path));
        }
        match self {
            BaseDir::Resolved(dir) => {
                let mut joined = dir.clone();
                joined.push(b'/');
                joined.extend_from_slice(path);
                Ok(clean(&joined))
            }
            BaseDir::Unresolved(why) => Err(why.clone()),
            BaseDir::NotNeeded => Err(NoPath::NoBaseDir),
        }
    }
}

/// Why a call's absolute path is not known. podstuck's own reasons are
/// variants; a reason read from a record that this podstuck does not write
/// (a newer podstuck's) is kept as its text, within [`NoPath::MAX_TEXT`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoPath {
    /// The path argument could not be read from the caller's memory.
    PathUnreadable,
    /// A relative path with no base directory read.
    NoBaseDir,
    BadFd,
    TooDeep,
    NoOffsets,
    Forbidden,
    BaseUnreadable,
    /// A call in flight: its caller's cwd or dirfd link could not be read.
    CallerDirUnreadable,
    Other(String),
}

impl NoPath {
    /// The longest reason kept from a record: podstuck's are a line of words.
    pub const MAX_TEXT: usize = 512;
    const KNOWN: [NoPath; 8] = [
        NoPath::PathUnreadable,
        NoPath::NoBaseDir,
        NoPath::BadFd,
        NoPath::TooDeep,
        NoPath::NoOffsets,
        NoPath::Forbidden,
        NoPath::BaseUnreadable,
        NoPath::CallerDirUnreadable,
    ];

    pub fn as_str(&self) -> &str {
        match self {
            NoPath::PathUnreadable => "the path argument could not be read",
            NoPath::NoBaseDir => "no base directory was read for a relative path",
            NoPath::BadFd => "the dirfd is not an open file of the caller",
            NoPath::TooDeep => "the base directory is deeper than the walk reaches (64 levels; 24 on kernels without bpf_loop) or longer than 4096 bytes",
            NoPath::NoOffsets => "kernel struct offsets unknown (BTF)",
            NoPath::Forbidden => "lockdown=confidentiality: BPF may not read kernel memory, so the base directory cannot be walked",
            NoPath::BaseUnreadable => "a kernel structure of the base directory could not be read",
            NoPath::CallerDirUnreadable => "the caller's directory could not be read",
            NoPath::Other(text) => text,
        }
    }

    /// A reason as a record wrote it: podstuck's own by its words, any
    /// other kept as text, or said to be unknown past [`NoPath::MAX_TEXT`].
    pub fn from_text(text: &str) -> NoPath {
        if let Some(known) = Self::KNOWN.iter().find(|k| k.as_str() == text) {
            return known.clone();
        }
        if text.len() > Self::MAX_TEXT {
            return NoPath::Other(UNKNOWN_REASON.to_string());
        }
        NoPath::Other(text.to_string())
    }
}

/// What a reason too long to be podstuck's becomes when read from a record.
pub const UNKNOWN_REASON: &str =
    "a reason this podstuck does not know (the record holds a longer one than a podstuck writes)";

impl std::fmt::Display for NoPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One completed call of a traced syscall.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallEvent {
    /// Wall-clock time of the call's return.
    pub time: SystemTime,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub ppid: u32,
    pub pcomm: String,
    pub cgroup_id: u64,
    /// The caller's cgroup in a v1 hierarchy podstuck reads (kernfs id); 0 when not read.
    pub v1_cgroup_id: u64,
    /// Which of the v1 hierarchies asked for (`NodeLayout::cgroup_v1`) it is of.
    pub v1_hierarchy: u8,
    pub mntns: u32,
    /// The caller's real uid.
    pub uid: u32,
    pub syscall: Syscall,
    pub flags: u64,
    pub dfd: i32,
    /// The path argument exactly as passed: bytes, not necessarily UTF-8.
    pub path: Vec<u8>,
    pub path_status: PathStatus,
    pub base: BaseDir,
    pub ret: i64,
    pub latency_ns: u64,
    /// How many calls of its series this one stands for (itself included):
    /// under a storm the kernel streams a few calls per series and counts
    /// the rest, which the next streamed call carries. 1 when every call
    /// was streamed.
    pub represents: u64,
}

impl CallEvent {
    /// The errno of a failed call (`ret` < 0).
    pub fn errno(&self) -> Option<i32> {
        // The ring's bytes are not trusted: a ret of i64::MIN must not
        // overflow its negation (found by the call_records fuzz target).
        (self.ret < 0).then(|| i32::try_from(self.ret.unsigned_abs()).unwrap_or(i32::MAX))
    }

    /// The absolute path the call acted on: the argument if absolute, else
    /// joined to the base directory. Err says why it is unknown.
    pub fn abs_path(&self) -> Result<Vec<u8>, NoPath> {
        if self.path_status == PathStatus::Unreadable {
            return Err(NoPath::PathUnreadable);
        }
        self.base.absolute(&self.path)
    }

    /// Names of the set flag bits, unknown bits last as one hex number.
    pub fn flag_names(&self) -> Vec<String> {
        decode_flags(self.syscall, self.flags)
    }
}

/// Why a ring-buffer record could not be decoded. Never expected from our
/// own programs; reported and counted rather than crashing the collector.
#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    TooShort(usize),
    UnknownSyscall(u8),
    PathLengthMismatch {
        declared: usize,
        present: usize,
    },
    /// A lifecycle record of a kind this podstuck does not know.
    UnknownLifecycle(u8),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::TooShort(n) => write!(f, "record of {n} bytes is shorter than its header"),
            DecodeError::UnknownSyscall(s) => write!(f, "record names unknown syscall {s}"),
            DecodeError::PathLengthMismatch { declared, present } => {
                write!(f, "record declares a {declared}-byte path but carries {present} bytes")
            }
            DecodeError::UnknownLifecycle(k) => write!(f, "lifecycle record of unknown kind {k}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// When a process started, in clock ticks since boot: `/proc/<pid>/stat`'s
/// `starttime`, and the kernel's `start_boottime` of its leader in the
/// same unit. A pid alone names whichever process holds it now (pids are
/// reused within minutes on a busy node); a pid and its start name one
/// process for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct ProcessStart(pub u64);

impl ProcessStart {
    /// `USER_HZ`, the unit of /proc's times: 100 on every architecture
    /// podstuck runs on (x86_64 and arm64 alike; `sysconf(_SC_CLK_TCK)`).
    pub const TICKS_PER_SECOND: u64 = 100;

    /// The kernel's nanoseconds since boot, in /proc's unit (the kernel's
    /// own `nsec_to_clock_t`).
    pub fn from_boot_ns(ns: u64) -> ProcessStart {
        ProcessStart(ns / (1_000_000_000 / Self::TICKS_PER_SECOND))
    }

    pub fn ticks(self) -> u64 {
        self.0
    }

    /// Whether two starts read of one pid may be one process: equal, or
    /// one of them unread (lockdown, a record of an older podstuck).
    pub fn may_be_same(a: Option<ProcessStart>, b: Option<ProcessStart>) -> bool {
        match (a, b) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        }
    }
}

/// Converts the kernel's CLOCK_MONOTONIC nanoseconds to wall-clock time,
/// using one (realtime, monotonic) pair sampled when tracing starts.
#[derive(Clone, Copy, Debug)]
pub struct WallClock {
    realtime_at_origin: SystemTime,
    monotonic_ns_at_origin: u64,
}

impl WallClock {
    pub fn new(realtime_at_origin: SystemTime, monotonic_ns_at_origin: u64) -> WallClock {
        WallClock { realtime_at_origin, monotonic_ns_at_origin }
    }

    /// Samples both clocks now.
    pub fn now() -> WallClock {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: valid pointer to a timespec; CLOCK_MONOTONIC always exists.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        let mono = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
        WallClock::new(SystemTime::now(), mono)
    }

    pub fn to_wall(&self, monotonic_ns: u64) -> SystemTime {
        if monotonic_ns >= self.monotonic_ns_at_origin {
            self.realtime_at_origin + Duration::from_nanos(monotonic_ns - self.monotonic_ns_at_origin)
        } else {
            self.realtime_at_origin - Duration::from_nanos(self.monotonic_ns_at_origin - monotonic_ns)
        }
    }
}

/// Drops empty and "." components; keeps "..", which only the kernel can
/// resolve (a component before it may be a symlink).
fn clean(path: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(path.len());
    for part in path.split(|&b| b == b'/') {
        if part.is_empty() || part == b"." {
            continue;
        }
        out.push(b'/');
        out.extend_from_slice(part);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    out
}

/// Turns the kernel's leaf-first, NUL-terminated names into "/a/b/c".
fn base_dir_from_names(names: &[u8]) -> Vec<u8> {
    let parts: Vec<&[u8]> = names.split(|&b| b == 0).filter(|p| !p.is_empty()).collect();
    let mut dir = Vec::with_capacity(names.len() + 1);
    for part in parts.iter().rev() {
        dir.push(b'/');
        dir.extend_from_slice(part);
    }
    if dir.is_empty() {
        dir.push(b'/');
    }
    dir
}

/// A task name: chosen by the process itself (prctl), so made safe for a
/// terminal here, once, for every output.
fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    crate::words::safe_text(&bytes[..end])
}

/// Decodes one ring-buffer record: a `CallRecord` followed by the path.
pub fn decode(bytes: &[u8], clock: &WallClock) -> Result<CallEvent, DecodeError> {
    if bytes.len() < CALL_RECORD_BYTES {
        return Err(DecodeError::TooShort(bytes.len()));
    }
    // SAFETY: length checked above; CallRecord is repr(C) plain data and the
    // ring buffer gives no alignment promise, hence the unaligned read.
    let record: CallRecord = unsafe { std::ptr::read_unaligned(bytes.as_ptr() as *const CallRecord) };
    let syscall = Syscall::from_u8(record.syscall).ok_or(DecodeError::UnknownSyscall(record.syscall))?;
    let path_bytes = &bytes[CALL_RECORD_BYTES..];
    let declared = record.path_len as usize + record.base_len as usize;
    // The ring buffer pads records to 8 bytes, so extra bytes may follow.
    if path_bytes.len() < declared {
        return Err(DecodeError::PathLengthMismatch { declared, present: path_bytes.len() });
    }
    let (path, names) = path_bytes[..declared].split_at(record.path_len as usize);
    let base = match record.base_status {
        base_status::NOT_NEEDED => BaseDir::NotNeeded,
        base_status::RESOLVED => BaseDir::Resolved(base_dir_from_names(names)),
        base_status::BAD_FD => BaseDir::Unresolved(NoPath::BadFd),
        base_status::TOO_DEEP => BaseDir::Unresolved(NoPath::TooDeep),
        base_status::NO_OFFSETS => BaseDir::Unresolved(NoPath::NoOffsets),
        base_status::FORBIDDEN => BaseDir::Unresolved(NoPath::Forbidden),
        _ => BaseDir::Unresolved(NoPath::BaseUnreadable),
    };
    let path_status = match record.path_status {
        path_status::WHOLE => PathStatus::Whole,
        path_status::TOO_LONG => PathStatus::TooLong,
        _ => PathStatus::Unreadable,
    };
    Ok(CallEvent {
        time: clock.to_wall(record.exit_ns),
        pid: record.pid,
        tid: record.tid,
        comm: c_string(&record.comm),
        ppid: record.ppid,
        pcomm: c_string(&record.pcomm),
        cgroup_id: record.cgroup_id,
        v1_cgroup_id: record.v1_cgroup_id,
        v1_hierarchy: record.v1_hierarchy,
        mntns: record.mntns,
        uid: record.uid,
        syscall,
        flags: record.flags,
        dfd: record.dfd,
        path: path.to_vec(),
        path_status,
        base,
        ret: record.ret,
        latency_ns: record.exit_ns.saturating_sub(record.enter_ns),
        represents: record.represents.max(1) as u64,
    })
}

/// The flag names of `unlinkat(2)` and `umount2(2)`.
const UNLINKAT_FLAGS: &[(u64, &str)] = &[(0x200, "AT_REMOVEDIR")];
const UMOUNT2_FLAGS: &[(u64, &str)] =
    &[(0x1, "MNT_FORCE"), (0x2, "MNT_DETACH"), (0x4, "MNT_EXPIRE"), (0x8, "UMOUNT_NOFOLLOW")];

pub fn decode_flags(syscall: Syscall, flags: u64) -> Vec<String> {
    let known = match syscall {
        Syscall::Unlinkat => UNLINKAT_FLAGS,
        Syscall::Umount2 => UMOUNT2_FLAGS,
        Syscall::Unlink | Syscall::Rmdir => &[],
    };
    let mut names = Vec::new();
    let mut rest = flags;
    for &(bit, name) in known {
        if flags & bit != 0 {
            names.push(name.to_string());
            rest &= !bit;
        }
    }
    if rest != 0 {
        names.push(format!("{rest:#x}"));
    }
    names
}

/// The symbolic name of an errno as the kernel returns it at syscall exit,
/// including the restart codes a signal can leave there.
pub fn errno_name(errno: i32) -> String {
    match errno {
        512 => return "ERESTARTSYS".into(),
        513 => return "ERESTARTNOINTR".into(),
        514 => return "ERESTARTNOHAND".into(),
        516 => return "ERESTART_RESTARTBLOCK".into(),
        _ => {}
    }
    match nix::errno::Errno::from_raw(errno) {
        nix::errno::Errno::UnknownErrno => format!("E{errno}"),
        known => format!("{known:?}"),
    }
}

/// A call in flight as the kernel keeps it, with its path argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flight {
    pub tid: u32,
    pub pid: u32,
    pub syscall: Syscall,
    pub flags: u64,
    pub dfd: i32,
    pub started: SystemTime,
    /// The path argument as passed (may be relative), when readable.
    pub path: Option<Vec<u8>>,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A record as the kernel programs would write it.
    pub(crate) fn record_bytes(syscall: Syscall, ret: i64, flags: u64, path: &[u8]) -> Vec<u8> {
        let mut comm = [0u8; 16];
        comm[..4].copy_from_slice(b"rmrf");
        let mut pcomm = [0u8; 16];
        pcomm[..4].copy_from_slice(b"bash");
        let record = CallRecord {
            enter_ns: 1_000,
            exit_ns: 6_000,
            cgroup_id: 42,
            v1_cgroup_id: 0,
            ret,
            flags,
            pid: 10,
            tid: 11,
            ppid: 9,
            mntns: 4026531841,
            dfd: AT_FDCWD,
            path_len: path.len() as u16,
            syscall: syscall as u8,
            path_status: path_status::WHOLE,
            base_len: 0,
            base_status: base_status::NOT_NEEDED,
            v1_hierarchy: 0,
            uid: 1000,
            comm,
            pcomm,
            represents: 1,
            _pad: 0,
        };
        let mut bytes = vec![0u8; CALL_RECORD_BYTES];
        // SAFETY: bytes has room for exactly one CallRecord.
        unsafe { std::ptr::write_unaligned(bytes.as_mut_ptr() as *mut CallRecord, record) };
        bytes.extend_from_slice(path);
        bytes
    }

    #[test]
    fn decodes_a_record() {
        let clock = WallClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(100), 0);
        let event = decode(&record_bytes(Syscall::Rmdir, -16, 0, b"/mnt/x"), &clock).unwrap();
        assert_eq!(event.syscall, Syscall::Rmdir);
        assert_eq!(event.path, b"/mnt/x");
        assert_eq!(event.comm, "rmrf");
        assert_eq!(event.pcomm, "bash");
        assert_eq!(event.errno(), Some(16));
        assert_eq!(event.latency_ns, 5_000);
        assert_eq!(event.time, SystemTime::UNIX_EPOCH + Duration::from_secs(100) + Duration::from_nanos(6_000));
    }

    /// Found by the call_records fuzz target: a record's ret is the
    /// ring's bytes, and the least i64 has no negation.
    #[test]
    fn any_ret_a_record_holds_gives_an_errno_without_overflow() {
        let clock = WallClock::now();
        let event = decode(&record_bytes(Syscall::Rmdir, i64::MIN, 0, b"/x"), &clock).unwrap();
        assert_eq!(event.errno(), Some(i32::MAX));
    }

    #[test]
    fn tolerates_ring_buffer_padding_but_not_short_records() {
        let clock = WallClock::now();
        let mut bytes = record_bytes(Syscall::Unlink, 0, 0, b"abc");
        bytes.extend_from_slice(&[0; 5]);
        assert_eq!(decode(&bytes, &clock).unwrap().path, b"abc");
        assert_eq!(decode(&bytes[..10], &clock), Err(DecodeError::TooShort(10)));
        let cut = record_bytes(Syscall::Unlink, 0, 0, b"abcdef");
        assert!(matches!(decode(&cut[..cut.len() - 2], &clock), Err(DecodeError::PathLengthMismatch { .. })));
        let mut bad = record_bytes(Syscall::Unlink, 0, 0, b"a");
        bad[std::mem::offset_of!(CallRecord, syscall)] = 9;
        assert_eq!(decode(&bad, &clock), Err(DecodeError::UnknownSyscall(9)));
    }

    /// A record for a relative path with the kernel's leaf-first names.
    fn relative_record(path: &[u8], names: &[u8], status: u8) -> Vec<u8> {
        let mut bytes = record_bytes(Syscall::Unlinkat, 0, 0, path);
        let mut record: CallRecord = unsafe { std::ptr::read_unaligned(bytes.as_ptr() as *const CallRecord) };
        record.base_len = names.len() as u16;
        record.base_status = status;
        unsafe { std::ptr::write_unaligned(bytes.as_mut_ptr() as *mut CallRecord, record) };
        bytes.extend_from_slice(names);
        bytes
    }

    #[test]
    fn joins_relative_paths_to_the_base_directory() {
        let clock = WallClock::now();
        let e =
            decode(&relative_record(b"mount", b"pvc-1\0kubernetes.io~csi\0volumes\0", base_status::RESOLVED), &clock)
                .unwrap();
        assert_eq!(e.path, b"mount");
        assert_eq!(e.base, BaseDir::Resolved(b"/volumes/kubernetes.io~csi/pvc-1".to_vec()));
        assert_eq!(e.abs_path().unwrap(), b"/volumes/kubernetes.io~csi/pvc-1/mount");
        let e = decode(&relative_record(b"./a//b/", b"", base_status::RESOLVED), &clock).unwrap();
        assert_eq!(e.abs_path().unwrap(), b"/a/b");
        let e = decode(&relative_record(b"x", b"", base_status::BAD_FD), &clock).unwrap();
        assert!(e.abs_path().unwrap_err().as_str().contains("dirfd"));
        let e = decode(&record_bytes(Syscall::Rmdir, 0, 0, b"/var//lib/./kubelet/"), &clock).unwrap();
        assert_eq!(e.abs_path().unwrap(), b"/var/lib/kubelet");
        let mut unreadable = e.clone();
        unreadable.path_status = PathStatus::Unreadable;
        assert!(unreadable.abs_path().is_err());
    }

    #[test]
    fn names_errnos() {
        assert_eq!(errno_name(16), "EBUSY");
        assert_eq!(errno_name(1), "EPERM");
        assert_eq!(errno_name(22), "EINVAL");
        assert_eq!(errno_name(39), "ENOTEMPTY");
        assert_eq!(errno_name(28), "ENOSPC");
        assert_eq!(errno_name(30), "EROFS");
        assert_eq!(errno_name(512), "ERESTARTSYS");
        assert_eq!(errno_name(4000), "E4000");
    }

    #[test]
    fn names_flags() {
        assert_eq!(decode_flags(Syscall::Unlinkat, 0x200), vec!["AT_REMOVEDIR"]);
        assert!(decode_flags(Syscall::Unlinkat, 0).is_empty());
        assert_eq!(decode_flags(Syscall::Umount2, 0x2), vec!["MNT_DETACH"]);
        assert_eq!(
            decode_flags(Syscall::Umount2, 0xf),
            vec!["MNT_FORCE", "MNT_DETACH", "MNT_EXPIRE", "UMOUNT_NOFOLLOW"]
        );
        assert_eq!(decode_flags(Syscall::Umount2, 0x11), vec!["MNT_FORCE", "0x10"]);
    }

    #[test]
    fn wall_clock_goes_both_ways() {
        let origin = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let clock = WallClock::new(origin, 5_000_000_000);
        assert_eq!(clock.to_wall(6_000_000_000), origin + Duration::from_secs(1));
        assert_eq!(clock.to_wall(4_000_000_000), origin - Duration::from_secs(1));
    }
}
