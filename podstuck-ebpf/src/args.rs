//! A call's arguments as the entry programs find them: fields of a
//! `syscalls:sys_enter_*` record, or the caller's registers (`pt_regs`)
//! handed to the syscall function, at offsets user space found in BTF.
//! Both end up as the same `Args`.

use aya_ebpf::programs::TracePointContext;

use crate::read_kernel;

pub const AT_FDCWD: i32 = -100;

/// Offsets in the `syscalls:sys_enter_*` records (see their `format` files
/// in tracefs): every argument is 8 bytes wide, the first at offset 16.
const ARG0: usize = 16;
const ARG1: usize = 24;
const ARG2: usize = 32;
/// `long ret` in `syscalls:sys_exit_*`.
const RET: usize = 16;

/// A field of a tracepoint record, loaded directly: the verifier checks
/// the constant offset against the record, and a direct load costs a
/// fraction of a `bpf_probe_read` call (this runs on every traced call).
#[inline(always)]
fn ctx_u64(ctx: &TracePointContext, offset: usize) -> u64 {
    use aya_ebpf::EbpfContext;
    // SAFETY: the verifier checks every load from the context against the
    // tracepoint's record and refuses the program if one falls outside;
    // `offset` is one of the constants above, 8-byte aligned.
    unsafe { core::ptr::read_unaligned((ctx.as_ptr() as *const u8).add(offset) as *const u64) }
}

/// The return value in a `syscalls:sys_exit_*` record.
#[inline(always)]
pub fn tracepoint_ret(ctx: &TracePointContext) -> i64 {
    ctx_u64(ctx, RET) as i64
}

/// The first three arguments in a `syscalls:sys_enter_*` record.
#[inline(always)]
pub fn tracepoint_args(ctx: &TracePointContext) -> [u64; 3] {
    [ctx_u64(ctx, ARG0), ctx_u64(ctx, ARG1), ctx_u64(ctx, ARG2)]
}

/// The arguments podstuck keeps of a call.
pub struct Args {
    pub dfd: i32,
    pub path_ptr: u64,
    pub flags: u64,
}

/// Where a syscall's arguments are: which of its first three is the dirfd,
/// the path and the flags.
#[derive(Clone, Copy)]
pub struct Layout {
    dfd: Option<usize>,
    path: usize,
    flags: Option<usize>,
}

pub const UNLINKAT: Layout = Layout { dfd: Some(0), path: 1, flags: Some(2) };
pub const UNLINK: Layout = Layout { dfd: None, path: 0, flags: None };
pub const RMDIR: Layout = UNLINK;
pub const UMOUNT: Layout = Layout { dfd: None, path: 0, flags: Some(1) };

impl Layout {
    /// The arguments in a `syscalls:sys_enter_*` record, 8 bytes each.
    #[inline(always)]
    pub fn in_tracepoint(self, ctx: &TracePointContext) -> Args {
        const ARGS: [usize; 3] = [ARG0, ARG1, ARG2];
        self.read(|i| Some(ctx_u64(ctx, ARGS[i])))
    }

    /// The arguments in the caller's registers, handed to the syscall function.
    #[inline(always)]
    pub fn in_regs(self, regs: *const u8) -> Args {
        let at = patched!(OFFSETS.regs_arg);
        self.read(|i| read_kernel::<u64>(regs, at[i]))
    }

    /// The arguments, `read(i)` giving the i-th (None: unreadable).
    #[inline(always)]
    fn read(self, read: impl Fn(usize) -> Option<u64>) -> Args {
        Args {
            dfd: self.dfd.and_then(&read).map(|v| v as i64 as i32).unwrap_or(AT_FDCWD),
            path_ptr: read(self.path).unwrap_or(0),
            flags: self.flags.and_then(&read).unwrap_or(0),
        }
    }
}
