//! A stand-in for the node components that tear pods down, for the
//! end-to-end tests: it takes a command name (`--comm kubelet`), optionally
//! moves itself into a cgroup (`--cgroup DIR`), then makes exactly the calls
//! it is told to, the way kubelet, containerd or dockerd make them.
//!
//! Usage: actor [--comm NAME] [--cgroup DIR] [--repeat N] [--every-ms MS] OP ARGS...
//!   rmdir-at DIR NAME      open DIR, unlinkat(fd, NAME, AT_REMOVEDIR)
//!   unlink-in DIR NAME     chdir DIR, unlink(NAME) (cwd-relative, like C tools)
//!   unlink PATH            unlink(PATH)
//!   remove-all DIR         Go's os.RemoveAll: openat each directory, unlinkat
//!                          children relative to it, then the directory itself
//!   unlink-many DIR N      create N files in DIR, then unlink(2) each: exactly
//!                          N successful unlink calls
//! Prints one line per call: the op, its argument and the errno name or "ok".

use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn outcome(ret: libc::c_int) -> String {
    if ret == 0 {
        "ok".into()
    } else {
        format!("errno {}", errno())
    }
}

fn c(s: &[u8]) -> CString {
    CString::new(s).expect("no NUL in paths")
}

/// Go's RemoveAll, reduced to what matters for tracing: children are
/// unlinked relative to their directory's fd; a child that is a directory
/// (EISDIR) is opened with openat and emptied first.
fn remove_all_at(parent: libc::c_int, name: &CStr) {
    // SAFETY: plain syscalls on fds and C strings this function owns.
    unsafe {
        if libc::unlinkat(parent, name.as_ptr(), 0) == 0 {
            return;
        }
        if errno() != libc::EISDIR && errno() != libc::EPERM {
            return;
        }
        let fd = libc::openat(parent, name.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW);
        if fd < 0 {
            return;
        }
        let dup = libc::dup(fd);
        let dir = libc::fdopendir(dup);
        let mut children = Vec::new();
        if !dir.is_null() {
            loop {
                let entry = libc::readdir(dir);
                if entry.is_null() {
                    break;
                }
                let child = CStr::from_ptr((*entry).d_name.as_ptr());
                if child.to_bytes() != b"." && child.to_bytes() != b".." {
                    children.push(child.to_owned());
                }
            }
            libc::closedir(dir);
        }
        for child in &children {
            remove_all_at(fd, child);
        }
        libc::close(fd);
        libc::unlinkat(parent, name.as_ptr(), libc::AT_REMOVEDIR);
    }
}

fn main() {
    let mut args: Vec<Vec<u8>> = std::env::args_os().skip(1).map(|a| a.as_bytes().to_vec()).collect();
    let mut repeat = 1u32;
    let mut every = Duration::ZERO;
    while let Some(flag) = args.first().cloned() {
        match flag.as_slice() {
            b"--comm" => {
                let name = c(&args[1]);
                // SAFETY: PR_SET_NAME with a NUL-terminated string.
                unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
                args.drain(..2);
            }
            b"--cgroup" => {
                let procs = std::path::Path::new(std::ffi::OsStr::from_bytes(&args[1])).join("cgroup.procs");
                std::fs::write(&procs, std::process::id().to_string()).expect("join the cgroup");
                args.drain(..2);
            }
            b"--repeat" => {
                repeat = String::from_utf8_lossy(&args[1]).parse().expect("--repeat N");
                args.drain(..2);
            }
            b"--every-ms" => {
                every = Duration::from_millis(String::from_utf8_lossy(&args[1]).parse().expect("--every-ms MS"));
                args.drain(..2);
            }
            _ => break,
        }
    }
    for round in 0..repeat {
        if round > 0 {
            std::thread::sleep(every);
        }
        // SAFETY: plain syscalls with valid C strings.
        let line = match args.first().map(Vec::as_slice) {
            Some(b"rmdir-at") => unsafe {
                let dir = c(&args[1]);
                let fd = libc::open(dir.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
                let ret = libc::unlinkat(fd, c(&args[2]).as_ptr(), libc::AT_REMOVEDIR);
                let out = outcome(ret);
                libc::close(fd);
                out
            },
            Some(b"unlink-in") => unsafe {
                assert_eq!(libc::chdir(c(&args[1]).as_ptr()), 0, "chdir");
                outcome(libc::unlink(c(&args[2]).as_ptr()))
            },
            Some(b"unlink") => unsafe { outcome(libc::unlink(c(&args[1]).as_ptr())) },
            Some(b"remove-all") => {
                let path = std::path::Path::new(std::ffi::OsStr::from_bytes(&args[1]));
                let parent = c(path.parent().unwrap().as_os_str().as_bytes());
                let name = c(path.file_name().unwrap().as_bytes());
                // SAFETY: as above.
                unsafe {
                    let fd = libc::open(parent.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
                    remove_all_at(fd, &name);
                    libc::close(fd);
                }
                "done".into()
            }
            Some(b"unlink-many") => {
                let dir = std::path::Path::new(std::ffi::OsStr::from_bytes(&args[1]));
                let n: usize = String::from_utf8_lossy(&args[2]).parse().expect("unlink-many DIR N");
                let paths: Vec<CString> = (0..n)
                    .map(|i| {
                        let path = dir.join(format!("f{i:07}"));
                        std::fs::write(&path, b"").expect("create file");
                        c(path.as_os_str().as_bytes())
                    })
                    .collect();
                let failed = paths
                    .iter()
                    // SAFETY: valid C strings; the raw syscall so it is unlink(2) for sure.
                    .filter(|p| unsafe { libc::syscall(libc::SYS_unlink, p.as_ptr()) } != 0)
                    .count();
                format!("{} unlinked, {failed} failed", n - failed)
            }
            _ => panic!("actor: unknown op; see the module doc"),
        };
        println!("{} {line}", String::from_utf8_lossy(&args[0]));
    }
}
