//! One traced call, decoded: what the kernel programs sent in a ring-buffer
//! record, turned into names a person reads (syscall, flags, errno) and a
//! wall-clock time. Pure: no I/O, so it is tested on hand-made records.

use std::time::{Duration, SystemTime};

use podstuck_common::{path_status, CallRecord, Syscall, CALL_RECORD_BYTES};

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
    pub mntns: u32,
    pub syscall: Syscall,
    pub flags: u64,
    pub dfd: i32,
    /// The path argument exactly as passed: bytes, not necessarily UTF-8.
    pub path: Vec<u8>,
    pub path_status: PathStatus,
    pub ret: i64,
    pub latency_ns: u64,
}

impl CallEvent {
    /// The errno of a failed call (`ret` < 0).
    pub fn errno(&self) -> Option<i32> {
        (self.ret < 0).then(|| (-self.ret) as i32)
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
    PathLengthMismatch { declared: usize, present: usize },
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::TooShort(n) => write!(f, "record of {n} bytes is shorter than its header"),
            DecodeError::UnknownSyscall(s) => write!(f, "record names unknown syscall {s}"),
            DecodeError::PathLengthMismatch { declared, present } => {
                write!(f, "record declares a {declared}-byte path but carries {present} bytes")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

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

fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
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
    let declared = record.path_len as usize;
    // The ring buffer pads records to 8 bytes, so extra bytes may follow.
    if path_bytes.len() < declared {
        return Err(DecodeError::PathLengthMismatch { declared, present: path_bytes.len() });
    }
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
        mntns: record.mntns,
        syscall,
        flags: record.flags,
        dfd: record.dfd,
        path: path_bytes[..declared].to_vec(),
        path_status,
        ret: record.ret,
        latency_ns: record.exit_ns.saturating_sub(record.enter_ns),
    })
}

/// The flag names of `unlinkat(2)` and `umount2(2)`.
const UNLINKAT_FLAGS: &[(u64, &str)] = &[(0x200, "AT_REMOVEDIR")];
const UMOUNT2_FLAGS: &[(u64, &str)] = &[
    (0x1, "MNT_FORCE"),
    (0x2, "MNT_DETACH"),
    (0x4, "MNT_EXPIRE"),
    (0x8, "UMOUNT_NOFOLLOW"),
];

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
            comm,
            pcomm,
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
        assert_eq!(decode_flags(Syscall::Umount2, 0xf), vec!["MNT_FORCE", "MNT_DETACH", "MNT_EXPIRE", "UMOUNT_NOFOLLOW"]);
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
