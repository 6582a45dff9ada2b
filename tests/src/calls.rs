//! The calls a test makes itself, raw (libc may route unlink() through
//! unlinkat()), so that it knows exactly which system call podstuck should
//! have seen (each `sys_*` returns the errno, or 0), and this thread's
//! identity as podstuck should report it.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// A path as the C string a system call takes.
pub fn cstring(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

pub fn sys_unlinkat(dirfd: i32, path: &CString, flags: i32) -> i32 {
    // SAFETY: valid C string; the kernel checks the rest.
    errno_of(unsafe { libc::syscall(libc::SYS_unlinkat, dirfd, path.as_ptr(), flags) })
}

// The kernel, not this process, reads the pointer: a bad one is the point
// of some tests and yields EFAULT, never a crash.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn sys_unlink(path: *const libc::c_char) -> i32 {
    // SAFETY: the kernel validates the pointer (tests pass bad ones on purpose).
    errno_of(unsafe { libc::syscall(libc::SYS_unlink, path) })
}

pub fn sys_rmdir(path: &CString) -> i32 {
    // SAFETY: valid C string.
    errno_of(unsafe { libc::syscall(libc::SYS_rmdir, path.as_ptr()) })
}

pub fn sys_umount2(path: &CString, flags: i32) -> i32 {
    // SAFETY: valid C string.
    errno_of(unsafe { libc::syscall(libc::SYS_umount2, path.as_ptr(), flags) })
}

fn errno_of(ret: libc::c_long) -> i32 {
    if ret < 0 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    } else {
        0
    }
}

/// This thread's kernel id and command name, as podstuck should report them.
pub fn this_thread() -> (i32, String) {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let comm = std::fs::read_to_string("/proc/thread-self/comm").unwrap().trim_end().to_string();
    (tid, comm)
}
