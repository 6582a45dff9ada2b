//! The base directory of a relative path: walked from the dirfd's file (or
//! the caller's cwd) up `d_parent` and across mounts to the caller's root,
//! writing each name into the scratch buffer right after the path. Two
//! walks of one step: `bpf_loop` runs it on 5.17+, a bounded loop of plain
//! calls elsewhere; a program names one or the other, never both.

use core::ffi::c_void;

use aya_ebpf::helpers::{bpf_get_current_task, generated::bpf_loop};
use podstuck_common::{base_status, BASE_DIR_MAX, BASE_DIR_MAX_DEPTH, BASE_DIR_UNROLLED_DEPTH};

use crate::{
    args::AT_FDCWD,
    kernel_reads, read_kernel,
    scratch::{Scratch, NAME_MAX},
};

/// How the walk of a relative path's base directory loops. A constant in
/// each exit program, so the other walk is compiled out of it: the `_w`
/// programs never name `bpf_loop`, which 5.10's verifier refuses outright.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum WalkLoop {
    /// One verified step run by `bpf_loop` (5.17+), up to `BASE_DIR_MAX_DEPTH`.
    BpfLoop,
    /// The step called at most `BASE_DIR_UNROLLED_DEPTH` times in a plain
    /// bounded loop, which the verifier unrolls (it walks every
    /// iteration), for kernels without `bpf_loop`.
    Unrolled,
}

/// The `struct path` (vfsmount, dentry) a relative path starts from: the
/// caller's cwd for AT_FDCWD, else the file behind `dfd`.
#[inline(always)]
fn base_path(task: *const u8, dfd: i32) -> Result<(*const u8, *const u8), u8> {
    let path: *const u8 = if dfd == AT_FDCWD {
        let fs = read_kernel::<*const u8>(task, patched!(OFFSETS.task_fs)).ok_or(base_status::UNREADABLE)?;
        fs.wrapping_add(patched!(OFFSETS.fs_pwd) as usize)
    } else {
        let files = read_kernel::<*const u8>(task, patched!(OFFSETS.task_files)).ok_or(base_status::UNREADABLE)?;
        let fdt = read_kernel::<*const u8>(files, patched!(OFFSETS.files_fdt)).ok_or(base_status::UNREADABLE)?;
        let max_fds = read_kernel::<u32>(fdt, patched!(OFFSETS.fdt_max_fds)).ok_or(base_status::UNREADABLE)?;
        if dfd < 0 || dfd as u32 >= max_fds {
            return Err(base_status::BAD_FD);
        }
        let fds = read_kernel::<*const u8>(fdt, patched!(OFFSETS.fdt_fd)).ok_or(base_status::UNREADABLE)?;
        let file = read_kernel::<*const u8>(fds, (dfd as u64) * 8).ok_or(base_status::UNREADABLE)?;
        if file.is_null() {
            return Err(base_status::BAD_FD);
        }
        file.wrapping_add(patched!(OFFSETS.file_f_path) as usize)
    };
    let mnt = read_kernel::<*const u8>(path, patched!(OFFSETS.path_mnt)).ok_or(base_status::UNREADABLE)?;
    let dentry = read_kernel::<*const u8>(path, patched!(OFFSETS.path_dentry)).ok_or(base_status::UNREADABLE)?;
    Ok((mnt, dentry))
}

/// Where a base-directory walk stands between two steps; lives on the
/// stack of `walk_base_dir` and is handed to each `walk_step`.
#[repr(C)]
struct Walk {
    vfsmnt: u64,
    dentry: u64,
    root_mnt: u64,
    root_dentry: u64,
    status: u64,
}

/// Reads a kernel pointer; null when it cannot be read (the helper zeroes
/// its destination on failure), which keeps the verifier's paths few.
#[inline(always)]
fn read_ptr(base: u64, offset: u64) -> u64 {
    let mut value: u64 = 0;
    // SAFETY: the destination is `value`, 8 bytes; the source is read
    // through the kernel's fault-safe path, whatever address it is.
    unsafe {
        aya_ebpf::helpers::generated::bpf_probe_read_kernel(
            &mut value as *mut u64 as *mut c_void,
            8,
            base.wrapping_add(offset) as *const c_void,
        )
    };
    value
}

/// Status of a walk still going.
const WALKING: u64 = 0xff;

/// One step up the tree: write the current directory's name, or cross to
/// the mount it sits on, or stop at the caller's root. A subprogram of its
/// own: `bpf_loop`'s callback, verified once whatever the depth (a plain
/// loop of 64 steps exceeds the verifier's budget), or the bounded loop's
/// callee.
#[inline(never)]
extern "C" fn walk_step(_index: u64, ctx: *mut c_void) -> i64 {
    const STOP: i64 = 1;
    const GO_ON: i64 = 0;
    // SAFETY: `ctx` is the `Walk` on walk_base_dir's stack, handed over by
    // bpf_loop or by the bounded loop; nothing else touches it meanwhile.
    let walk = unsafe { &mut *(ctx as *mut Walk) };
    if walk.dentry == walk.root_dentry && walk.vfsmnt == walk.root_mnt {
        walk.status = base_status::RESOLVED as u64;
        return STOP;
    }
    let mount = walk.vfsmnt.wrapping_sub(patched!(OFFSETS.mount_mnt));
    if walk.dentry == read_ptr(walk.vfsmnt, patched!(OFFSETS.vfsmount_root)) {
        // At the root of a mount: go on from where it is mounted.
        let parent = read_ptr(mount, patched!(OFFSETS.mount_parent));
        if parent == 0 || parent == mount {
            walk.status = base_status::RESOLVED as u64;
            return STOP;
        }
        walk.dentry = read_ptr(mount, patched!(OFFSETS.mount_mountpoint));
        walk.vfsmnt = parent.wrapping_add(patched!(OFFSETS.mount_mnt));
        return GO_ON;
    }
    let parent = read_ptr(walk.dentry, patched!(OFFSETS.dentry_parent));
    if parent == 0 || parent == walk.dentry {
        // The root of a filesystem the caller's root cannot reach (a
        // detached mount): what was walked is all there is.
        walk.status = base_status::RESOLVED as u64;
        return STOP;
    }
    let Some(scratch) = Scratch::this_cpu() else {
        walk.status = base_status::UNREADABLE as u64;
        return STOP;
    };
    let written = scratch.walked() as usize & (BASE_DIR_MAX - 1);
    if written + NAME_MAX >= BASE_DIR_MAX {
        walk.status = base_status::TOO_DEEP as u64;
        return STOP;
    }
    // Right after the path, whose length was set before the walk began.
    let at = scratch.path_len() as usize + written;
    let copied = scratch.copy_name(at, read_ptr(walk.dentry, patched!(OFFSETS.dentry_name)));
    if copied <= 0 {
        walk.status = base_status::UNREADABLE as u64;
        return STOP;
    }
    scratch.set_walked((written + (copied as usize & (2 * NAME_MAX - 1))) as u64 & (BASE_DIR_MAX as u64 - 1));
    walk.dentry = parent;
    GO_ON
}

/// Writes the base directory's names, leaf first, each NUL-terminated,
/// right after the path in the scratch buffer, walking `d_parent` and
/// crossing mounts up to the caller's root (its chroot, or its namespace's
/// root). Returns (bytes written, base_status).
#[inline(always)]
pub fn walk_base_dir(dfd: i32, how: WalkLoop) -> (usize, u8) {
    if !kernel_reads() {
        return (0, base_status::FORBIDDEN);
    }
    if patched!(OFFSETS.valid) == 0 {
        return (0, base_status::NO_OFFSETS);
    }
    // SAFETY: a helper without arguments; the task is only read through
    // fault-safe helpers.
    let task = unsafe { bpf_get_current_task() } as *const u8;
    let (vfsmnt, dentry) = match base_path(task, dfd) {
        Ok(p) => p,
        Err(status) => return (0, status),
    };
    let Some(scratch) = Scratch::this_cpu() else {
        return (0, base_status::UNREADABLE);
    };
    scratch.set_walked(0);
    let fs = read_ptr(task as u64, patched!(OFFSETS.task_fs));
    let root = fs.wrapping_add(patched!(OFFSETS.fs_root));
    let mut walk = Walk {
        vfsmnt: vfsmnt as u64,
        dentry: dentry as u64,
        root_mnt: read_ptr(root, patched!(OFFSETS.path_mnt)),
        root_dentry: read_ptr(root, patched!(OFFSETS.path_dentry)),
        status: WALKING,
    };
    let ctx = &mut walk as *mut Walk as *mut c_void;
    match how {
        WalkLoop::BpfLoop => {
            // SAFETY: walk_step has the callback's signature, and `ctx`
            // points to `walk`, alive until bpf_loop returns after the last step.
            unsafe { bpf_loop(BASE_DIR_MAX_DEPTH, walk_step as *mut c_void, ctx, 0) };
        }
        WalkLoop::Unrolled => {
            // A bounded loop over a real call (a BPF subprogram): the
            // verifier walks each iteration, so the bound stays small.
            for index in 0..BASE_DIR_UNROLLED_DEPTH as u64 {
                if walk_step(index, ctx) != 0 {
                    break;
                }
            }
        }
    }
    let status = if walk.status == WALKING { base_status::TOO_DEEP } else { walk.status as u8 };
    (scratch.walked() as usize & (BASE_DIR_MAX - 1), status)
}
