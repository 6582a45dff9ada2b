//! The calls a test makes itself, raw (libc may route unlink() through
//! unlinkat()), so that it knows exactly which system call podstuck should
//! have seen (each `sys_*` returns the errno, or 0), and this thread's
//! identity as podstuck should report it.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use crate::wait::within;

/// A path as the C string a system call takes.
pub fn cstring(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

pub fn sys_unlinkat(dirfd: i32, path: &CString, flags: i32) -> i32 {
    // SAFETY: valid C string; the kernel checks the rest.
    errno_of(unsafe { libc::syscall(libc::SYS_unlinkat, dirfd, path.as_ptr(), flags) })
}

/// What podstuck names the calls of [`raw_unlink`]: arm64 has no unlink
/// system call, so there they are `unlinkat`, as every removal of libc and
/// Go is.
pub const UNLINK_CALL: &str = if cfg!(target_arch = "aarch64") { "unlinkat" } else { "unlink" };

/// unlink(2) as the raw system call (-1 and errno on failure); on arm64,
/// which has none, `unlinkat(AT_FDCWD, path, 0)`.
///
/// # Safety
/// `path` is given to the kernel as is: a bad pointer yields EFAULT.
pub unsafe fn raw_unlink(path: *const libc::c_char) -> libc::c_long {
    // SAFETY: the caller's; the kernel reads the pointer.
    #[cfg(target_arch = "aarch64")]
    return unsafe { libc::syscall(libc::SYS_unlinkat, libc::AT_FDCWD, path, 0) };
    #[cfg(not(target_arch = "aarch64"))]
    return unsafe { libc::syscall(libc::SYS_unlink, path) };
}

/// rmdir(2) as the raw system call; on arm64
/// `unlinkat(AT_FDCWD, path, AT_REMOVEDIR)`, as kubelet's Go makes it.
///
/// # Safety
/// As [`raw_unlink`].
pub unsafe fn raw_rmdir(path: *const libc::c_char) -> libc::c_long {
    // SAFETY: the caller's; the kernel reads the pointer.
    #[cfg(target_arch = "aarch64")]
    return unsafe { libc::syscall(libc::SYS_unlinkat, libc::AT_FDCWD, path, libc::AT_REMOVEDIR) };
    #[cfg(not(target_arch = "aarch64"))]
    return unsafe { libc::syscall(libc::SYS_rmdir, path) };
}

// The kernel, not this process, reads the pointer: a bad one is the point
// of some tests and yields EFAULT, never a crash.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn sys_unlink(path: *const libc::c_char) -> i32 {
    // SAFETY: the kernel validates the pointer (tests pass bad ones on purpose).
    errno_of(unsafe { raw_unlink(path) })
}

pub fn sys_rmdir(path: &CString) -> i32 {
    // SAFETY: valid C string.
    errno_of(unsafe { raw_rmdir(path.as_ptr()) })
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

/// In a child process that is `nobody` (uid and gid 65534, no groups),
/// unlink(2) each path, `pause` apart (so that each call is streamed with
/// its path, as in a flood that lasts); returns how many failed with
/// ENOENT. The paths are made before the fork: the child only makes
/// system calls.
pub fn unlink_as_nobody(paths: &[CString], pause: Duration) -> usize {
    let pause =
        libc::timespec { tv_sec: pause.as_secs() as libc::time_t, tv_nsec: pause.subsec_nanos() as libc::c_long };
    let pointers: Vec<*const libc::c_char> = paths.iter().map(|p| p.as_ptr()).collect();
    // SAFETY: the child makes only async-signal-safe calls (setgroups,
    // setgid, setuid, syscall, _exit) on memory made before the fork.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        unsafe {
            if libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                libc::_exit(255);
            }
            let mut enoent = 0usize;
            for p in &pointers {
                if raw_unlink(*p) < 0 && *libc::__errno_location() == libc::ENOENT {
                    enoent += 1;
                }
                libc::nanosleep(&pause, std::ptr::null_mut());
            }
            // How many did not fail with ENOENT, at most 254.
            libc::_exit((pointers.len() - enoent).min(254) as i32);
        }
    }
    let mut status = 0;
    // SAFETY: our own child.
    let done = within(Duration::from_secs(120), || {
        (unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid).then_some(())
    });
    if done.is_none() {
        // SAFETY: our own child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        panic!("the unlinking child did not finish within 120 s");
    }
    assert!(libc::WIFEXITED(status), "the child did not exit: {status}");
    let other = libc::WEXITSTATUS(status);
    assert_ne!(other, 255, "the child could not become nobody");
    paths.len() - other as usize
}
