//! podstuck's kernel programs on `unlinkat`, `unlink`, `rmdir` and
//! `umount2`: fentry/fexit on the syscall functions (`__x64_sys_unlinkat`,
//! `__arm64_sys_unlinkat`...), or the syscall enter/exit tracepoints where
//! trampolines are missing (the umount2 tracepoints are named `umount`).
//! The bytecode is the same on x86_64 and arm64; arm64 has no `unlink` and
//! no `rmdir`, so user space loads only its `unlinkat` and `umount2`
//! programs there (`program::Arch`). Never kprobes: hardened nodes have
//! none. BENCHMARKS.md has the figures behind the choice.
//!
//! At entry the arguments and the time are kept per thread. At exit every
//! call is counted in its series (process, cgroup, syscall, outcome) with an
//! exact latency histogram, added atomically in the `SERIES` map, so totals
//! stay exact whatever the ring buffer does. Only what the detectors need
//! one by one is streamed: the first calls of each series in every window,
//! slow calls, and, past the window's budget, nothing until the next window,
//! whose first record carries the count of the calls skipped.
//!
//! Small and bounded by design: the one loop (the base-directory walk) is
//! `bpf_loop`'s, or bounded at `BASE_DIR_UNROLLED_DEPTH` steps where the
//! kernel lacks it; strings go through a per-CPU scratch buffer instead of
//! the 512-byte stack; and every read of kernel or user memory, past the
//! program's own context and maps, goes through a helper that cannot fault
//! (where lockdown=confidentiality forbids reading kernel memory,
//! `KERNEL_READS` turns every kernel read off).
//!
//! By concern: `programs` (the tracer's programs, by name), `args` (a
//! call's arguments), `calls` (entry to exit), `accounting` (series,
//! budget, counters), `record` (what is streamed), `path_walk` (the base
//! directory), `scratch` (the per-CPU buffer both of those write, through
//! raw pointers only), `cost` (the attach-cost programs). Imports go one
//! way: `record` uses `path_walk`, both use `scratch`. User space finds
//! every program, map and global by name: the programs' names are
//! `podstuck_common::program`'s, checked at compile time (`named_as!`);
//! renaming a map or a global breaks loading.
#![no_std]
#![no_main]
// `core`'s atomics are single-threaded on the BPF target (plain loads and
// stores, no read-modify-write): the one atomic add is written in asm.
#![feature(asm_experimental_arch)]

/// One field of a global as user space set it at load, e.g.
/// `patched!(OFFSETS.task_fs)`. Reading the whole global (`patched`)
/// copies every field, 27 loads for OFFSETS, on every traced call; most
/// calls need one or two fields.
macro_rules! patched {
    ($global:ident . $field:ident) => {
        // SAFETY: a field of a static, aligned, never written while the
        // programs run (user space writes it before load). Volatile, as in
        // `patched`, so the defaults written here are not folded in.
        unsafe { core::ptr::read_volatile(&raw const $crate::$global.$field) }
    };
}

/// Fails the build unless the program `fn` is named as `name`, a constant
/// of `podstuck_common::program` by which user space loads it: aya names
/// the program after the fn, and its attributes take no constant.
macro_rules! named_as {
    ($program:ident, $name:expr) => {
        const _: () = {
            // The fn itself, so a check of a name no program has fails too.
            let _ = $program;
            assert!(
                podstuck_common::program::same_name(stringify!($program), $name),
                concat!("the program `", stringify!($program), "` is not named as podstuck_common::program says")
            );
        };
    };
}

mod accounting;
mod args;
mod calls;
mod cost;
mod lifecycle;
mod path_walk;
mod programs;
mod record;
mod scratch;

use aya_ebpf::helpers::bpf_probe_read_kernel;
use podstuck_common::{KernelFilter, KernelOffsets};

/// Filled in by user space from the kernel's BTF before load.
#[no_mangle]
static OFFSETS: KernelOffsets = KernelOffsets {
    valid: 0,
    task_real_parent: 0,
    task_tgid: 0,
    task_comm: 0,
    task_nsproxy: 0,
    nsproxy_mnt_ns: 0,
    mnt_ns_inum: 0,
    task_fs: 0,
    task_files: 0,
    fs_pwd: 0,
    fs_root: 0,
    path_mnt: 0,
    path_dentry: 0,
    files_fdt: 0,
    fdt_max_fds: 0,
    fdt_fd: 0,
    file_f_path: 0,
    dentry_parent: 0,
    dentry_name: 0,
    vfsmount_root: 0,
    mount_mnt: 0,
    mount_parent: 0,
    mount_mountpoint: 0,
    regs_arg: [0; 3],
    regs_nr: 0,
    task_cgroups: 0,
    css_set_subsys: 0,
    css_cgroup: 0,
    css_parent: 0,
    cgroup_kn: 0,
    kernfs_node_id: 0,
    v1_subsys: [0; podstuck_common::V1_HIERARCHIES],
    task_mm: 0,
    mm_env_start: 0,
    mm_env_end: 0,
    task_exit_code: 0,
    task_group_leader: 0,
    task_start_boottime: 0,
    task_signal: 0,
    signal_live: 0,
    task_pid: 0,
    signal_flags: 0,
    signal_group_exit_code: 0,
    binprm_file: 0,
    binprm_filename: 0,
    file_f_inode: 0,
    inode_ino: 0,
    inode_sb: 0,
    sb_dev: 0,
};

/// Filled in by user space before load; the default streams everything.
#[no_mangle]
static FILTER: KernelFilter = KernelFilter {
    syscalls: 0xf,
    errors_only: 0,
    every_call: 0,
    window_budget: 50,
    window_ns: 100_000_000,
    slow_ns: 10_000_000,
    own_tgid: 0,
    _pad: 0,
};

/// 1 where BPF may read kernel memory, 0 under lockdown=confidentiality
/// (set by user space before load). A read-only global, so the verifier
/// knows its value and never visits a read it forbids: Linux 5.13+ refuses
/// at load any program that reaches `bpf_probe_read_kernel` there.
#[no_mangle]
static KERNEL_READS: u8 = 1;

#[inline(always)]
fn kernel_reads() -> bool {
    patched(&KERNEL_READS) != 0
}

/// A global as user space set it at load. The read must be volatile: the
/// compiler would otherwise fold in the defaults written here.
#[inline(always)]
fn patched<T>(global: &'static T) -> T {
    // SAFETY: a reference to a static: valid, aligned, and never written
    // while the programs run (user space writes it before load).
    unsafe { core::ptr::read_volatile(global) }
}

/// A `T` at `base + offset` in kernel memory; None where it cannot be read.
/// `T` is a plain integer, pointer or byte array: any bytes are a value.
#[inline(always)]
fn read_kernel<T>(base: *const u8, offset: u64) -> Option<T> {
    if !kernel_reads() {
        return None;
    }
    // SAFETY: the helper copies through the kernel's fault-safe path into
    // a local `T`: an unmapped or bad address is an error, never a fault.
    unsafe { bpf_probe_read_kernel(base.wrapping_add(offset as usize) as *const T) }.ok()
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

/// The license the kernel reads from the object: "Dual MIT/GPL" (the
/// crate is MIT OR GPL-2.0-only) is GPL-compatible to the kernel, which is
/// what lets the programs call its GPL-only helpers.
#[link_section = "license"]
#[no_mangle]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
