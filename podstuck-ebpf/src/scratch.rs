//! The per-CPU scratch buffer where a record is made: its header, the path
//! and the base directory side by side (far bigger than the 512-byte
//! stack), so one ring buffer output sends exactly the bytes filled.
//!
//! Two writers share it: the record writer (`record`) and the path walk
//! (`path_walk`, a subprogram of its own, which looks the buffer up again at
//! each step). A `&mut` held by one while the other writes would alias, so
//! neither gets one: they hold a [`Scratch`], a raw pointer that only this
//! module dereferences, through the few reads and writes they need, every
//! index masked so the verifier sees it in bounds.

use core::ffi::c_void;

use aya_ebpf::{
    helpers::generated::{bpf_probe_read_kernel_str, bpf_probe_read_user_str},
    macros::map,
    maps::{PerCpuArray, RingBuf},
};
use podstuck_common::{CallRecord, BASE_DIR_MAX, CALL_RECORD_BYTES, PATH_MAX};

/// Longest name of one path component (NAME_MAX + NUL).
pub const NAME_MAX: usize = 256;
/// `data` holds the path, then the base directory right after it; every
/// index into it is masked with this so the verifier sees it in bounds.
const DATA_MASK: usize = PATH_MAX + BASE_DIR_MAX - 1;

/// The record under construction. `data` has NAME_MAX bytes past
/// DATA_MASK, so a name copied at any masked index fits.
#[repr(C)]
struct Buffer {
    record: CallRecord,
    data: [u8; PATH_MAX + BASE_DIR_MAX + NAME_MAX],
    /// Bytes of the base directory written so far, past the path: kept
    /// here, not on the stack, so each step of the walk reads a value the
    /// verifier does not know. It then sees the same state at every step,
    /// whatever the step and the path that led there, instead of walking
    /// each one apart (~80,000 instructions verified per exit program, a
    /// quarter of that now, and start waits for them).
    walked: u64,
}

/// One per CPU, so a program has it to itself while it runs: a tracepoint
/// program is never nested on its CPU. An fexit program on a fully
/// preemptible kernel can be preempted, and another exit on that CPU fill
/// the buffer meanwhile: a garbled record, never memory out of bounds,
/// since every index into it is masked.
#[map]
static SCRATCH: PerCpuArray<Buffer> = PerCpuArray::with_max_entries(1, 0);

/// This CPU's scratch buffer. Only [`Scratch::this_cpu`] makes one, so the
/// pointer inside is always a map lookup's: valid and aligned for the whole
/// run of the program.
#[derive(Clone, Copy)]
pub struct Scratch(*mut Buffer);

impl Scratch {
    /// None when the lookup fails (it does not, for index 0 of a per-CPU
    /// array, but the verifier wants the check).
    #[inline(always)]
    #[allow(
        clippy::question_mark,
        reason = "`?` or `.map(Scratch)` lays the walk step's blocks out the other way round, \
                  and the verifier then walks 456 more instructions of each exit program"
    )]
    pub fn this_cpu() -> Option<Scratch> {
        let Some(buffer) = SCRATCH.get_ptr_mut(0) else {
            return None;
        };
        Some(Scratch(buffer))
    }

    /// The header, to fill field by field.
    ///
    /// # Safety
    /// Nothing else may read or write the header while the reference
    /// lives: no other `header`, no `path_len`, `set_path` or the like, no
    /// path walk (it reads the path's length).
    #[inline(always)]
    pub unsafe fn header<'a>(self) -> &'a mut CallRecord {
        // SAFETY: a valid, aligned Buffer (see Scratch); the caller keeps
        // every other access to the header away while the reference lives.
        unsafe { &mut (*self.0).record }
    }

    /// Copies the caller's path (a user string) to the start of `data`:
    /// `bpf_probe_read_user_str`'s result, the bytes copied with the NUL,
    /// or a negative error.
    #[inline(always)]
    pub fn copy_path(self, path_ptr: u64) -> i64 {
        // SAFETY: at most PATH_MAX bytes at the start of `data`, which is
        // longer, of a valid Buffer; the user memory is read through the
        // fault-safe path. No reference to the buffer is made.
        unsafe {
            bpf_probe_read_user_str(
                (&raw mut (*self.0).data) as *mut c_void,
                PATH_MAX as u32,
                path_ptr as *const c_void,
            )
        }
    }

    /// Copies a name (a kernel string) to `data` at `at` (masked with
    /// DATA_MASK): the result of `bpf_probe_read_kernel_str`, the bytes
    /// copied with the NUL, or a negative error.
    #[inline(always)]
    pub fn copy_name(self, at: usize, name: u64) -> i64 {
        // SAFETY: at most NAME_MAX bytes at `at & DATA_MASK`, inside `data`
        // (PATH_MAX + BASE_DIR_MAX + NAME_MAX bytes) of a valid Buffer; the
        // name is read through the kernel's fault-safe path.
        unsafe {
            bpf_probe_read_kernel_str(
                ((&raw mut (*self.0).data) as *mut u8).wrapping_add(at & DATA_MASK) as *mut c_void,
                NAME_MAX as u32,
                name as *const c_void,
            )
        }
    }

    /// The path's first byte, `/` for an absolute path.
    #[inline(always)]
    pub fn path_first_byte(self) -> u8 {
        // SAFETY: a byte of `data` of a valid Buffer, read through the
        // pointer, no reference made.
        unsafe { (*self.0).data[0] }
    }

    /// The path's length and `path_status`, in the header.
    #[inline(always)]
    pub fn set_path(self, len: u16, status: u8) {
        // SAFETY: fields of a valid Buffer, written through the pointer.
        unsafe {
            (*self.0).record.path_len = len;
            (*self.0).record.path_status = status;
        }
    }

    /// The base directory's length and `base_status`, in the header.
    #[inline(always)]
    pub fn set_base(self, len: u16, status: u8) {
        // SAFETY: fields of a valid Buffer, written through the pointer.
        unsafe {
            (*self.0).record.base_len = len;
            (*self.0).record.base_status = status;
        }
    }

    // The reads below are volatile: the compiler would otherwise reuse the
    // value just stored, and the verifier then carries on with one state
    // per way it was computed instead of one.

    #[inline(always)]
    pub fn path_len(self) -> u16 {
        // SAFETY: an aligned field of a valid Buffer, read through the pointer.
        unsafe { core::ptr::read_volatile(&raw const (*self.0).record.path_len) }
    }

    #[inline(always)]
    pub fn path_status(self) -> u8 {
        // SAFETY: a field of a valid Buffer, read through the pointer.
        unsafe { core::ptr::read_volatile(&raw const (*self.0).record.path_status) }
    }

    #[inline(always)]
    pub fn base_len(self) -> u16 {
        // SAFETY: an aligned field of a valid Buffer, read through the pointer.
        unsafe { core::ptr::read_volatile(&raw const (*self.0).record.base_len) }
    }

    /// Bytes of the base directory written so far (see `Buffer::walked`).
    #[inline(always)]
    pub fn walked(self) -> u64 {
        // SAFETY: an aligned field of a valid Buffer, read through the pointer.
        unsafe { (*self.0).walked }
    }

    #[inline(always)]
    pub fn set_walked(self, walked: u64) {
        // SAFETY: an aligned field of a valid Buffer, written through the pointer.
        unsafe { (*self.0).walked = walked };
    }

    /// Sends the header and the first `data_len` bytes of `data` (masked
    /// with DATA_MASK) as one record.
    #[inline(always)]
    pub fn output(self, ring: &RingBuf, data_len: usize, flags: u64) -> Result<(), i32> {
        // SAFETY: the start of a valid Buffer: CALL_RECORD_BYTES of header,
        // then at most DATA_MASK bytes of `data`, which is longer. The
        // slice lives for the helper's copy, while nothing writes the buffer.
        let bytes =
            unsafe { core::slice::from_raw_parts(self.0 as *const u8, CALL_RECORD_BYTES + (data_len & DATA_MASK)) };
        ring.output::<[u8]>(bytes, flags)
    }
}
