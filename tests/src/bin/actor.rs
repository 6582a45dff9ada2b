//! A stand-in for the node components that tear pods down, for the
//! end-to-end tests: it takes a command name (`--comm kubelet`), optionally
//! moves itself into a cgroup (`--cgroup DIR`), then makes exactly the calls
//! it is told to, the way kubelet, containerd or dockerd make them.
//!
//! Usage: actor [FLAGS] OP ARGS...
//! Flags:
//!   --comm NAME            the command name podstuck sees (PR_SET_NAME)
//!   --cgroup DIR           join this cgroup v2 directory first
//!   --as-uid UID           drop root: run as UID (gid UID, no supplementary groups)
//!   --repeat N             make the call N times (0: until killed)
//!   --every-ms MS          wait MS between attempts (kubelet housekeeping: 2000;
//!                          containerd's unmount retries: 50)
//!   --backoff-ms MS        wait MS before the 2nd attempt, doubling after each,
//!                          capped at 122 s (kubelet's volume backoff: 500)
//!   --calls-per-s N        remove-all and churn-unlink make at most N removal
//!                          calls a second: the pace of a remover on a real
//!                          disk, when the test tree sits on a much faster
//!                          tmpfs (and a storm that lasts as long as a test
//!                          needs it to)
//! Ops (each attempt prints one line: the op and "ok", "errno N" or a count):
//!   rmdir-at DIR NAME      open DIR, unlinkat(fd, NAME, AT_REMOVEDIR)
//!   rmdir PATH             rmdir(2), the raw syscall (arm64 has none: unlinkat
//!                          with AT_REMOVEDIR, as kubelet's Go removes there)
//!   rmdirs PATH...         rmdir(2) of each PATH in turn, as kubelet removes a
//!                          pod's cgroups (containers first, then the pod, in
//!                          every v1 hierarchy); one word per PATH: "ok",
//!                          "gone" (ENOENT: already removed, as kubelet takes
//!                          it) or "errno N", joined by ", "
//!   umount PATH            umount2(PATH, 0), the raw syscall
//!   unlink-in DIR NAME     chdir DIR, unlink(NAME) (cwd-relative, like C tools)
//!   unlink PATH            unlink(2), the raw syscall (arm64: unlinkat)
//!   connect SOCKET         connect(2) a new unix stream socket to the path
//!                          SOCKET, as kubelet dials a CSI plugin; closed at once
//!   remove-all DIR         Go's os.RemoveAll: openat each directory, unlinkat
//!                          children relative to it, then the directory itself;
//!                          prints "done" or "left: errno N at PATH" (the first
//!                          failure, PATH starting with DIR's own name)
//!   unlink-many DIR N      create N files in DIR, then unlink(2) each: exactly
//!                          N successful unlink calls
//!   mkdirs DIR N           create N empty subdirectories of DIR (setup, not
//!                          removal: mkdir is not traced)
//!   churn-unlink DIR N     a removal storm in constant space: N times, create
//!                          DIR/f (not traced) and unlink(2) it; prints
//!                          "N unlinked, M failed"
//!   cni-del PLUGIN UID [ARG...]  as a runtime tears a sandbox's network down:
//!                          runs PLUGIN (with the ARGs, none for a real
//!                          plugin) as its child with CNI_COMMAND=DEL and the
//!                          CNI_* variables of pod UID's sandbox (id: the
//!                          UID's hex digits, padded to 64); prints "exit N"
//!                          (the plugin's stdout dropped)
//!   cni-fail MESSAGE       as a CNI plugin whose DEL fails: writes the CNI
//!                          error {"code":999,"msg":MESSAGE} on its stdout in
//!                          one write(2), exits 1
//!   fork-kill N            a fork/exec storm: N children, each exec'ing
//!                          `sleep 600` and killed by SIGKILL at once, all
//!                          reaped; prints "N killed" (each kill and each
//!                          exit is a lifecycle record of the kernel's)
//! Ops that hold something and never return (print "ready", then sleep until
//! killed; a test uses them as the "someone else" of a pathology):
//!   hold-cwd DIR           chdir DIR
//!   hold-open FILE         keep FILE open
//!   hold-in-namespace DIR  a mount namespace of its own whose mounts still
//!                          receive the host's unmounts (MS_SLAVE|MS_REC), cwd
//!                          DIR in it: the host's umount2 of a mount whose
//!                          parent mount is shared then fails EBUSY
//!   hold-stat-in-thread PATH  a second thread stats PATH (on a FUSE mount
//!                          whose server never answers, it waits there in D),
//!                          the leader sleeps: a process of several threads,
//!                          as every Go or Java program is
//!   sleep                  nothing (a live task, e.g. in --cgroup DIR)

use std::ffi::{CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use podstuck_tests::calls::{raw_rmdir, raw_unlink};

/// kubelet's exponential backoff stops doubling here (2m2s).
const BACKOFF_CAP: Duration = Duration::from_millis(122_000);

/// `--calls-per-s`: when the pacing started and the rate; unset, no pacing.
static PACE: std::sync::OnceLock<(std::time::Instant, u64)> = std::sync::OnceLock::new();
static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Sleeps as needed to hold the removal calls to `--calls-per-s`.
fn pace() {
    let Some(&(start, per_s)) = PACE.get() else {
        return;
    };
    let calls = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    // Checking every call would cost more than the calls themselves.
    if !calls.is_multiple_of(64) {
        return;
    }
    let due = start + Duration::from_secs_f64(calls as f64 / per_s as f64);
    if let Some(wait) = due.checked_duration_since(std::time::Instant::now()) {
        std::thread::sleep(wait);
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn outcome(ret: libc::c_long) -> String {
    if ret == 0 {
        "ok".into()
    } else {
        format!("errno {}", errno())
    }
}

fn c(s: &[u8]) -> CString {
    CString::new(s).expect("no NUL in paths")
}

fn path(s: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(s))
}

fn number<T: std::str::FromStr>(s: &[u8], what: &str) -> T {
    String::from_utf8_lossy(s).parse().unwrap_or_else(|_| panic!("actor: {what} needs a number"))
}

/// Go's RemoveAll, reduced to what matters for tracing: children are
/// unlinked relative to their directory's fd; a child that may be a
/// directory (EISDIR; EPERM too, POSIX's answer, which Go also accepts) is
/// opened with openat and emptied first. Returns the first call that really failed
/// (errno, path below the top), the way RemoveAll's error names it.
fn remove_all_at(parent: libc::c_int, name: &CStr, below: &Path) -> Option<(i32, std::path::PathBuf)> {
    let here = below.join(OsStr::from_bytes(name.to_bytes()));
    // SAFETY: plain syscalls on fds and C strings this function owns.
    unsafe {
        pace();
        if libc::unlinkat(parent, name.as_ptr(), 0) == 0 {
            return None;
        }
        let first = errno();
        if first != libc::EISDIR && first != libc::EPERM {
            return Some((first, here));
        }
        let fd = libc::openat(parent, name.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW);
        if fd < 0 {
            return Some((first, here));
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
        let mut failure = None;
        for child in &children {
            let failed = remove_all_at(fd, child, &here);
            failure = failure.or(failed);
        }
        libc::close(fd);
        pace();
        if libc::unlinkat(parent, name.as_ptr(), libc::AT_REMOVEDIR) != 0 {
            return failure.or(Some((errno(), here)));
        }
        None
    }
}

/// connect(2) of a new unix stream socket to the path `socket`, as kubelet
/// dials a CSI plugin; closed at once.
fn connect_unix(socket: &[u8]) -> String {
    // SAFETY: a socket of our own, an address filled within its size.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket");
        let mut addr: libc::sockaddr_un = std::mem::zeroed();
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        assert!(socket.len() < addr.sun_path.len(), "a socket path fits sun_path");
        for (to, from) in addr.sun_path.iter_mut().zip(socket) {
            *to = *from as libc::c_char;
        }
        // As Go passes it: the family, the path and its NUL.
        let len = (size_of::<libc::sa_family_t>() + socket.len() + 1) as libc::socklen_t;
        let out = outcome(libc::connect(fd, &addr as *const libc::sockaddr_un as *const libc::sockaddr, len).into());
        libc::close(fd);
        out
    }
}

/// rmdir(2) of each path in turn; a word each ("gone": ENOENT).
fn rmdir_each(paths: &[Vec<u8>]) -> String {
    let words: Vec<String> = paths
        .iter()
        // SAFETY: a raw syscall with a valid C string.
        .map(|p| match outcome(unsafe { raw_rmdir(c(p).as_ptr()) }) {
            o if o == format!("errno {}", libc::ENOENT) => "gone".to_string(),
            o => o,
        })
        .collect();
    words.join(", ")
}

/// Fails as a CNI plugin does: its error on stdout in one write, exit 1.
fn cni_fail(message: &[u8]) -> ! {
    let error = format!(r#"{{"code":999,"msg":"{}"}}"#, String::from_utf8_lossy(message));
    // SAFETY: one write of a buffer of ours to fd 1.
    unsafe { libc::write(1, error.as_ptr().cast(), error.len()) };
    std::process::exit(1)
}

/// Runs `plugin` as a runtime runs a CNI plugin for DEL of pod `uid`'s
/// sandbox; its exit status.
fn cni_del(plugin: &[u8], uid: &[u8], args: &[Vec<u8>]) -> String {
    let uid = String::from_utf8_lossy(uid);
    let id = format!("{:0<64}", uid.replace('-', ""));
    let status = std::process::Command::new(path(plugin))
        .args(args.iter().map(|a| OsStr::from_bytes(a)))
        .env_clear()
        .env("CNI_COMMAND", "DEL")
        .env("CNI_CONTAINERID", id)
        .env("CNI_NETNS", "/var/run/netns/podstuck-gone")
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", "/opt/cni/bin")
        .env("CNI_ARGS", format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0;K8S_POD_UID={uid}"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run the plugin");
    format!("exit {}", status.code().unwrap_or(-1))
}

/// Tells the test the hold is in place, then stays until killed: the test,
/// not this process, decides when the pathology ends.
fn ready_then_sleep() -> ! {
    println!("ready");
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn drop_root(uid: libc::uid_t) {
    // SAFETY: plain credential syscalls; group first, while still allowed.
    unsafe {
        assert_eq!(libc::setgroups(0, std::ptr::null()), 0, "setgroups");
        assert_eq!(libc::setresgid(uid, uid, uid), 0, "setresgid {uid}");
        assert_eq!(libc::setresuid(uid, uid, uid), 0, "setresuid {uid}");
    }
}

/// One attempt of a repeatable op; returns what it printed after the op name.
fn attempt(args: &[Vec<u8>]) -> String {
    // SAFETY (all arms): raw syscalls with valid C strings and fds opened here.
    match args[0].as_slice() {
        b"rmdir-at" => unsafe {
            let fd = libc::open(c(&args[1]).as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
            let out = outcome(libc::unlinkat(fd, c(&args[2]).as_ptr(), libc::AT_REMOVEDIR).into());
            libc::close(fd);
            out
        },
        b"rmdir" => outcome(unsafe { raw_rmdir(c(&args[1]).as_ptr()) }),
        b"rmdirs" => rmdir_each(&args[1..]),
        b"umount" => outcome(unsafe { libc::syscall(libc::SYS_umount2, c(&args[1]).as_ptr(), 0) }),
        b"unlink-in" => unsafe {
            assert_eq!(libc::chdir(c(&args[1]).as_ptr()), 0, "chdir");
            outcome(libc::unlink(c(&args[2]).as_ptr()).into())
        },
        b"unlink" => outcome(unsafe { raw_unlink(c(&args[1]).as_ptr()) }),
        b"connect" => connect_unix(&args[1]),
        b"cni-del" => cni_del(&args[1], &args[2], &args[3..]),
        b"cni-fail" => cni_fail(&args[1]),
        b"remove-all" => {
            let target = path(&args[1]);
            let parent = c(target.parent().unwrap().as_os_str().as_bytes());
            let name = c(target.file_name().unwrap().as_bytes());
            let failure = unsafe {
                let fd = libc::open(parent.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
                let failure = remove_all_at(fd, &name, Path::new(""));
                libc::close(fd);
                failure
            };
            match failure {
                None => "done".into(),
                Some((errno, at)) => format!("left: errno {errno} at {}", at.display()),
            }
        }
        b"unlink-many" => {
            let dir = path(&args[1]);
            let n: usize = number(&args[2], "unlink-many DIR N");
            let paths: Vec<CString> = (0..n)
                .map(|i| {
                    let path = dir.join(format!("f{i:07}"));
                    std::fs::write(&path, b"").expect("create file");
                    c(path.as_os_str().as_bytes())
                })
                .collect();
            let failed = paths
                .iter()
                // The raw syscall, so it is unlink(2) for sure (unlinkat on arm64).
                .filter(|p| unsafe { raw_unlink(p.as_ptr()) } != 0)
                .count();
            format!("{} unlinked, {failed} failed", n - failed)
        }
        b"mkdirs" => {
            let dir = path(&args[1]);
            let n: usize = number(&args[2], "mkdirs DIR N");
            let mut made = 0;
            for i in 0..n {
                let sub = c(dir.join(format!("d{i:08}")).as_os_str().as_bytes());
                if unsafe { libc::mkdir(sub.as_ptr(), 0o755) } == 0 {
                    made += 1;
                }
            }
            format!("{made} made")
        }
        b"churn-unlink" => {
            let file = c(path(&args[1]).join("f").as_os_str().as_bytes());
            let n: usize = number(&args[2], "churn-unlink DIR N");
            let mut failed = 0;
            for _ in 0..n {
                pace();
                // SAFETY: a valid C string; the fd is closed at once.
                unsafe {
                    let fd = libc::open(file.as_ptr(), libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC, 0o644);
                    if fd >= 0 {
                        libc::close(fd);
                    }
                    if raw_unlink(file.as_ptr()) != 0 {
                        failed += 1;
                    }
                }
            }
            format!("{} unlinked, {failed} failed", n - failed)
        }
        b"fork-kill" => {
            let n: usize = number(&args[1], "fork-kill N");
            let sleep = c(b"sleep");
            let seconds = c(b"600");
            let mut killed = 0;
            for _ in 0..n {
                // SAFETY: the child only execs (async-signal-safe) or leaves.
                let pid = unsafe { libc::fork() };
                if pid == 0 {
                    let argv = [sleep.as_ptr(), seconds.as_ptr(), std::ptr::null()];
                    // SAFETY: a NULL-terminated argv of valid C strings.
                    unsafe {
                        libc::execvp(sleep.as_ptr(), argv.as_ptr());
                        libc::_exit(127);
                    }
                }
                if pid > 0 {
                    // SAFETY: our own child; reaped right after.
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                        libc::waitpid(pid, std::ptr::null_mut(), 0);
                    }
                    killed += 1;
                }
            }
            format!("{killed} killed")
        }
        _ => panic!("actor: unknown op; see the module doc"),
    }
}

fn hold(args: &[Vec<u8>]) -> ! {
    // SAFETY (all arms): raw syscalls with valid C strings.
    match args[0].as_slice() {
        b"hold-cwd" => {
            assert_eq!(unsafe { libc::chdir(c(&args[1]).as_ptr()) }, 0, "chdir: {}", std::io::Error::last_os_error());
        }
        b"hold-open" => {
            let fd = unsafe { libc::open(c(&args[1]).as_ptr(), libc::O_RDONLY) };
            assert!(fd >= 0, "open: {}", std::io::Error::last_os_error());
        }
        b"hold-in-namespace" => unsafe {
            assert_eq!(libc::unshare(libc::CLONE_NEWNS), 0, "unshare: {}", std::io::Error::last_os_error());
            // Slave, not private: the host's unmount must still reach this
            // copy, which is what makes the host's umount2 fail while it is busy.
            let root = c(b"/");
            let flags = libc::MS_SLAVE | libc::MS_REC;
            let ret = libc::mount(std::ptr::null(), root.as_ptr(), std::ptr::null(), flags, std::ptr::null());
            assert_eq!(ret, 0, "make / slave: {}", std::io::Error::last_os_error());
            assert_eq!(libc::chdir(c(&args[1]).as_ptr()), 0, "chdir: {}", std::io::Error::last_os_error());
        },
        b"hold-stat-in-thread" => {
            let target = path(&args[1]).to_path_buf();
            std::thread::spawn(move || {
                let _ = std::fs::metadata(target);
            });
        }
        b"sleep" => {}
        _ => unreachable!(),
    }
    ready_then_sleep()
}

fn main() {
    let mut args: Vec<Vec<u8>> = std::env::args_os().skip(1).map(|a| a.as_bytes().to_vec()).collect();
    let mut repeat = 1u32;
    let mut every = Duration::ZERO;
    let mut backoff = false;
    while let Some(flag) = args.first().cloned() {
        match flag.as_slice() {
            b"--comm" => {
                let name = c(&args[1]);
                // SAFETY: PR_SET_NAME with a NUL-terminated string.
                unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
            }
            b"--cgroup" => {
                let procs = path(&args[1]).join("cgroup.procs");
                std::fs::write(&procs, std::process::id().to_string()).expect("join the cgroup");
            }
            b"--as-uid" => drop_root(number(&args[1], "--as-uid UID")),
            b"--repeat" => repeat = number(&args[1], "--repeat N"),
            b"--every-ms" => every = Duration::from_millis(number(&args[1], "--every-ms MS")),
            b"--calls-per-s" => {
                let per_s: u64 = number(&args[1], "--calls-per-s N");
                PACE.set((std::time::Instant::now(), per_s.max(1))).expect("one --calls-per-s");
            }
            b"--backoff-ms" => {
                every = Duration::from_millis(number(&args[1], "--backoff-ms MS"));
                backoff = true;
            }
            _ => break,
        }
        args.drain(..2);
    }
    assert!(!args.is_empty(), "actor: no op; see the module doc");
    if args[0].starts_with(b"hold-") || args[0] == b"sleep" {
        hold(&args);
    }
    let mut round = 0u32;
    while repeat == 0 || round < repeat {
        if round > 0 {
            std::thread::sleep(every);
            if backoff {
                every = (every * 2).min(BACKOFF_CAP);
            }
        }
        let line = attempt(&args);
        println!("{} {line}", String::from_utf8_lossy(&args[0]));
        round += 1;
    }
}
