//! A minimal FUSE filesystem for the end-to-end tests, speaking the raw
//! /dev/fuse protocol (no libfuse): it exists so that a test can make a
//! FUSE daemon stop answering (SIGSTOP) and watch a removal hang in the
//! kernel, the way a dead s3fs or gcsfuse CSI driver hangs kubelet.
//!
//! Usage: fuse_server [--root-attr-valid SECONDS] [--stall-first-statfs] MOUNTPOINT
//!
//! It mounts itself at MOUNTPOINT (source `podstuck-fuse`, type
//! `fuse.podstuck`), prints "ready" once the kernel's INIT is answered, and
//! serves until the mount goes away. The tree never changes: a root
//! directory with regular files `a`, `b`, `c`, an empty directory `d`, a
//! directory `full` holding a file `x` and a directory `ro`; UNLINK and
//! RMDIR of those succeed (but RMDIR of `full`, which fails with
//! ENOTEMPTY, as a volume directory something was written into does, and
//! of `ro`, which fails with EROFS, as on a volume its server keeps
//! read-only) and they are still there afterwards, so a test may remove
//! the same name as often as it likes.
//! Stopped (SIGSTOP) and continued (SIGCONT), it is a server that stalls
//! and then answers again: the requests queued meanwhile are answered.
//!
//! A LOOKUP of `never` in the root is read and never answered (the server
//! keeps serving everything else; it prints "held UNIQUE" once it has read
//! it): the caller waits for the answer, and
//! once a request is read by the daemon even SIGKILL cannot end that wait
//! (fuse's request_wait_answer waits uninterruptibly for a request already
//! in userspace); only an abort of the connection frees it. A daemon stopped
//! with SIGSTOP is not the same: its requests are still pending, and a
//! killed caller takes its own back.
//!
//! `--stall-first-statfs`: the first STATFS is read and left unanswered
//! until the server gets SIGUSR1 (then answered as any other); every other
//! request, later STATFSes included, is answered at once: a server that
//! answers statfs while a caller's earlier one is still stuck on it.
//!
//! Entry and attribute timeouts are 0, so every path walk into the mount
//! asks this server again (LOOKUP, GETATTR): once it is stopped, the next
//! call through the mount waits for it. `--root-attr-valid SECONDS` lets
//! the kernel keep the root's attributes that long: a stat of the root
//! then needs no answer, and what waits is the lookup below it (a test
//! that wants a caller asleep on the root's lock, not on the server).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const FUSE_KERNEL_VERSION: u32 = 7;
/// The protocol this server is written against; the kernel adapts to it.
const FUSE_KERNEL_MINOR_VERSION: u32 = 31;
const FUSE_ROOT_ID: u64 = 1;

const FUSE_LOOKUP: u32 = 1;
const FUSE_FORGET: u32 = 2;
const FUSE_GETATTR: u32 = 3;
const FUSE_UNLINK: u32 = 10;
const FUSE_RMDIR: u32 = 11;
const FUSE_STATFS: u32 = 17;
const FUSE_GETXATTR: u32 = 22;
const FUSE_INIT: u32 = 26;
const FUSE_OPENDIR: u32 = 27;
const FUSE_READDIR: u32 = 28;
const FUSE_RELEASEDIR: u32 = 29;
const FUSE_ACCESS: u32 = 34;
const FUSE_INTERRUPT: u32 = 36;
const FUSE_DESTROY: u32 = 38;
const FUSE_BATCH_FORGET: u32 = 42;

/// sizeof(struct fuse_in_header)
const IN_HEADER: usize = 40;
/// sizeof(struct fuse_out_header)
const OUT_HEADER: usize = 16;

/// The whole filesystem: (node id, parent's node id, name, is a directory).
const NODES: [(u64, u64, &[u8], bool); 7] = [
    (2, FUSE_ROOT_ID, b"a", false),
    (3, FUSE_ROOT_ID, b"b", false),
    (4, FUSE_ROOT_ID, b"c", false),
    (5, FUSE_ROOT_ID, b"d", true),
    (6, FUSE_ROOT_ID, b"full", true),
    (7, 6, b"x", false),
    (8, FUSE_ROOT_ID, READ_ONLY, true),
];

/// The directory whose RMDIR fails with EROFS.
const READ_ONLY: &[u8] = b"ro";

/// The name in the root whose LOOKUP is read and never answered.
const NEVER: &[u8] = b"never";

/// Little-endian field writer for the kernel's C structs.
#[derive(Default)]
struct Out(Vec<u8>);

impl Out {
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }
    fn zeros(&mut self, n: usize) -> &mut Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(buf[at..at + 4].try_into().unwrap())
}

fn u64_at(buf: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(buf[at..at + 8].try_into().unwrap())
}

fn is_dir(node: u64) -> bool {
    node == FUSE_ROOT_ID || NODES.iter().any(|&(id, _, _, dir)| id == node && dir)
}

fn exists(node: u64) -> bool {
    node == FUSE_ROOT_ID || NODES.iter().any(|&(id, _, _, _)| id == node)
}

fn has_children(node: u64) -> bool {
    NODES.iter().any(|&(_, parent, _, _)| parent == node)
}

/// struct fuse_attr (88 bytes).
fn attr(out: &mut Out, node: u64) {
    let (mode, nlink) = if is_dir(node) { (libc::S_IFDIR | 0o755, 2) } else { (libc::S_IFREG | 0o644, 1) };
    out.u64(node).u64(0).u64(0); // ino, size, blocks
    out.u64(0).u64(0).u64(0); // atime, mtime, ctime
    out.u32(0).u32(0).u32(0); // their nanoseconds
    out.u32(mode).u32(nlink).u32(0).u32(0); // mode, nlink, uid, gid
    out.u32(0).u32(4096).u32(0); // rdev, blksize, flags
}

/// struct fuse_entry_out (128 bytes), every timeout 0.
fn entry(node: u64) -> Out {
    let mut out = Out::default();
    out.u64(node).u64(0).u64(0).u64(0).u32(0).u32(0);
    attr(&mut out, node);
    out
}

fn name_arg(body: &[u8]) -> &[u8] {
    body.split(|&b| b == 0).next().unwrap_or_default()
}

fn child(parent: u64, name: &[u8]) -> Option<u64> {
    NODES.iter().find(|&&(_, p, n, _)| p == parent && n == name).map(|&(id, _, _, _)| id)
}

/// READDIR's answer for directory `dir`: `struct fuse_dirent`s from
/// `offset`, as many as fit.
fn dirents(dir: u64, offset: u64, size: usize) -> Out {
    let mut all: Vec<(u64, &[u8], bool)> = vec![(dir, b".", true), (FUSE_ROOT_ID, b"..", true)];
    all.extend(NODES.iter().filter(|&&(_, parent, _, _)| parent == dir).map(|&(id, _, name, d)| (id, name, d)));
    let mut out = Out::default();
    for (i, (ino, name, dir)) in all.into_iter().enumerate().skip(offset as usize) {
        let len = (24 + name.len()).next_multiple_of(8);
        if out.0.len() + len > size {
            break;
        }
        let start = out.0.len();
        let kind = if dir { libc::DT_DIR } else { libc::DT_REG };
        out.u64(ino).u64(i as u64 + 1).u32(name.len() as u32).u32(kind.into());
        out.0.extend_from_slice(name);
        out.0.resize(start + len, 0);
    }
    out
}

/// What to send back for one request: Ok(body) or Err(errno); None: no reply.
fn answer(opcode: u32, node: u64, body: &[u8]) -> Option<Result<Out, i32>> {
    Some(match opcode {
        FUSE_INIT => {
            let (major, max_readahead) = (u32_at(body, 0), u32_at(body, 8));
            if major < FUSE_KERNEL_VERSION {
                Err(libc::EPROTO)
            } else {
                let mut out = Out::default();
                out.u32(FUSE_KERNEL_VERSION).u32(FUSE_KERNEL_MINOR_VERSION).u32(max_readahead).u32(0);
                out.u16(0).u16(0).u32(4096).u32(1); // max_background, congestion_threshold, max_write, time_gran
                out.u16(0).u16(0).u32(0).zeros(28); // max_pages, map_alignment, flags2, unused: 64 bytes
                Ok(out)
            }
        }
        FUSE_GETATTR if exists(node) => {
            let mut out = Out::default();
            // attr_valid 0: ask again every time (the root: as asked).
            let valid = if node == FUSE_ROOT_ID { ROOT_ATTR_VALID.load(Ordering::Relaxed) } else { 0 };
            out.u64(valid).u32(0).u32(0);
            attr(&mut out, node);
            Ok(out)
        }
        FUSE_GETATTR => Err(libc::ENOENT),
        FUSE_LOOKUP if node == FUSE_ROOT_ID && name_arg(body) == NEVER => return None,
        FUSE_LOOKUP => child(node, name_arg(body)).map(entry).ok_or(libc::ENOENT),
        FUSE_OPENDIR if is_dir(node) => {
            let mut out = Out::default();
            out.u64(0).u32(0).u32(0);
            Ok(out)
        }
        FUSE_OPENDIR => Err(libc::ENOTDIR),
        FUSE_READDIR if is_dir(node) => Ok(dirents(node, u64_at(body, 8), u32_at(body, 16) as usize)),
        FUSE_READDIR => Err(libc::ENOTDIR),
        FUSE_RELEASEDIR | FUSE_ACCESS => Ok(Out::default()),
        FUSE_UNLINK => match child(node, name_arg(body)) {
            Some(id) if is_dir(id) => Err(libc::EISDIR),
            Some(_) => Ok(Out::default()),
            None => Err(libc::ENOENT),
        },
        FUSE_RMDIR => match child(node, name_arg(body)) {
            Some(id) if is_dir(id) && has_children(id) => Err(libc::ENOTEMPTY),
            Some(_) if name_arg(body) == READ_ONLY => Err(libc::EROFS),
            Some(id) if is_dir(id) => Ok(Out::default()),
            Some(_) => Err(libc::ENOTDIR),
            None => Err(libc::ENOENT),
        },
        FUSE_STATFS => {
            let mut out = Out::default();
            out.u64(1024).u64(512).u64(512).u64(64).u64(32); // blocks, bfree, bavail, files, ffree
            out.u32(4096).u32(255).u32(4096).u32(0).zeros(24); // bsize, namelen, frsize, padding, spare
            Ok(out)
        }
        FUSE_FORGET | FUSE_BATCH_FORGET | FUSE_INTERRUPT => return None,
        FUSE_GETXATTR => Err(libc::ENOSYS),
        _ => Err(libc::ENOSYS),
    })
}

fn reply(fd: i32, unique: u64, result: Result<Out, i32>) {
    let (error, body) = match result {
        Ok(body) => (0, body.0),
        Err(errno) => (-errno, Vec::new()),
    };
    let mut msg = Out::default();
    msg.u32((OUT_HEADER + body.len()) as u32).u32(error as u32).u64(unique);
    msg.0.extend_from_slice(&body);
    // SAFETY: writing our own buffer to our own fd.
    let n = unsafe { libc::write(fd, msg.0.as_ptr().cast(), msg.0.len()) };
    // ENOENT: the request was interrupted and is gone; nothing to do.
    if n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOENT) {
        eprintln!("fuse_server: reply to {unique}: {}", std::io::Error::last_os_error());
    }
}

/// Seconds the kernel may keep the root's attributes (`--root-attr-valid`).
static ROOT_ATTR_VALID: AtomicU64 = AtomicU64::new(0);

/// Set by SIGUSR1: the STATFS held (`--stall-first-statfs`) is answered.
static ANSWER_HELD: AtomicBool = AtomicBool::new(false);

extern "C" fn answer_held(_signal: libc::c_int) {
    ANSWER_HELD.store(true, Ordering::Relaxed);
}

/// SIGUSR1 answers the STATFS held. Without SA_RESTART: the server's
/// read of /dev/fuse ends with EINTR, so the answer goes at once, not
/// with the next request.
fn answer_held_on_sigusr1() {
    // SAFETY: a zeroed sigaction is a valid empty one; the handler only
    // stores to an atomic, which is async-signal-safe.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = answer_held as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut action.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()), 0, "sigaction SIGUSR1");
    }
}

fn main() {
    const USAGE: &str = "usage: fuse_server [--root-attr-valid SECONDS] [--stall-first-statfs] MOUNTPOINT";
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    // The unique of the STATFS held, once one is; `stall`: one is to be.
    let (mut stall, mut held) = (false, None);
    loop {
        match args.first().and_then(|a| a.to_str()) {
            Some("--root-attr-valid") => {
                let seconds = args.get(1).and_then(|s| s.to_str()?.parse().ok()).expect(USAGE);
                ROOT_ATTR_VALID.store(seconds, Ordering::Relaxed);
                args.drain(..2);
            }
            Some("--stall-first-statfs") => {
                stall = true;
                answer_held_on_sigusr1();
                args.remove(0);
            }
            _ => break,
        }
    }
    let mountpoint = args.into_iter().next().expect(USAGE);
    let mountpoint = CString::new(mountpoint.as_bytes()).unwrap();
    // SAFETY: opening a device node.
    let fd = unsafe { libc::open(c"/dev/fuse".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    assert!(fd >= 0, "open /dev/fuse: {}", std::io::Error::last_os_error());
    let data = CString::new(format!("fd={fd},rootmode=40000,user_id=0,group_id=0,allow_other")).unwrap();
    // SAFETY: valid C strings; the kernel checks the rest.
    let ret = unsafe {
        libc::mount(
            c"podstuck-fuse".as_ptr(),
            mountpoint.as_ptr(),
            c"fuse.podstuck".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            data.as_ptr().cast(),
        )
    };
    assert_eq!(ret, 0, "mount fuse at {mountpoint:?}: {}", std::io::Error::last_os_error());

    // The kernel refuses reads into buffers smaller than a full WRITE
    // request could need; 1 MiB covers any max_write it may pick.
    let mut buf = vec![0u8; 1 << 20];
    loop {
        if ANSWER_HELD.swap(false, Ordering::Relaxed) {
            if let Some(unique) = held.take() {
                reply(fd, unique, answer(FUSE_STATFS, FUSE_ROOT_ID, &[]).expect("STATFS is answered"));
            }
        }
        // SAFETY: reading into our own buffer.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR | libc::EAGAIN | libc::ENOENT) => continue,
                // Unmounted or aborted: the filesystem is gone, so are we.
                Some(libc::ENODEV | libc::ECONNABORTED) => return,
                _ => panic!("fuse_server: read /dev/fuse: {}", std::io::Error::last_os_error()),
            }
        }
        let msg = &buf[..n as usize];
        if msg.len() < IN_HEADER {
            continue;
        }
        let (opcode, unique, node) = (u32_at(msg, 4), u64_at(msg, 8), u64_at(msg, 16));
        let body = &msg[IN_HEADER..u32_at(msg, 0) as usize];
        if opcode == FUSE_STATFS && stall {
            // Read, and left unanswered until SIGUSR1.
            stall = false;
            held = Some(unique);
            continue;
        }
        match answer(opcode, node, body) {
            Some(result) => reply(fd, unique, result),
            // The request is out of the kernel's pending list now: from
            // here on a SIGKILLed caller waits uninterruptibly (D). Before,
            // it takes its request back and dies; a test that kills it
            // waits for this line first.
            None => println!("held {unique}"),
        }
        if opcode == FUSE_INIT {
            println!("ready");
        }
        if opcode == FUSE_DESTROY {
            return;
        }
    }
}
