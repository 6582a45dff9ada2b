//! How the calls' two big maps are allocated, by plan and kernel: the
//! threads' entries (`CALLS_IN_FLIGHT`) and the series (`SERIES`) grow as
//! threads and series appear wherever the kernel allows it, and are
//! preallocated, smaller, where it does not.
//!
//! A preallocated hash map costs its whole size from the start, charged
//! (from Linux 5.11) to the memory cgroup of the process that made it: on
//! a DaemonSet, the pod's limit. One that grows costs what it holds. But
//! kernels 5.7 to 6.0 print a `WARNING` (a `panic_on_warn` node panics)
//! when a tracepoint program so much as names a hash map that is not
//! preallocated, whatever it does with it; fentry programs are exempt, and
//! from 6.1 the kernel allocates map elements safely in any context. So
//! the object declares both maps preallocated, and the loader sets
//! `BPF_F_NO_PREALLOC` in its copy of their definitions where that is safe:
//! aya's loader sizes a map but takes its flags from the object.

use anyhow::{bail, Context, Result};
use object::{Object, ObjectSection, ObjectSymbol};
use podstuck_common::{MAX_CALLS_IN_FLIGHT, MAX_CALLS_IN_FLIGHT_PREALLOCATED, MAX_SERIES, MAX_SERIES_PREALLOCATED};

use crate::kernel_features::AttachPoint;

/// The maps allocated one way or the other.
pub const CALLS_IN_FLIGHT: &str = "CALLS_IN_FLIGHT";
pub const SERIES: &str = "SERIES";

/// Their sizes for programs that never count a call (the probe of
/// fentry, `podstuck attach-cost`): one entry each, so the preallocated
/// maps cost nothing.
pub const UNUSED: [(&str, u32); 2] = [(CALLS_IN_FLIGHT, 1), (SERIES, 1)];

/// How the two maps are allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allocation {
    /// Entries made as they come: a quiet node costs a few KB.
    AsUsed,
    /// The whole map made at load, smaller.
    Preallocated,
}

impl Allocation {
    /// For the programs of `plan` (never `Auto`) on a kernel of `version`
    /// (major, minor; None when unknown: preallocated, the safe side).
    pub fn of(plan: AttachPoint, version: Option<(u32, u32)>) -> Allocation {
        match (plan, version) {
            (AttachPoint::Fentry, _) => Allocation::AsUsed,
            (_, Some(v)) if v >= (6, 1) => Allocation::AsUsed,
            _ => Allocation::Preallocated,
        }
    }

    /// On this machine's kernel.
    pub fn here(plan: AttachPoint) -> Allocation {
        let release = nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned());
        Allocation::of(plan, release.ok().as_deref().and_then(crate::kernel_features::kernel_version))
    }

    /// The object `elf` as loaded for this allocation: a copy whose two
    /// maps grow as used, or `elf` itself.
    pub fn object(self, elf: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>> {
        Ok(match self {
            Allocation::AsUsed => std::borrow::Cow::Owned(growing(elf, &[CALLS_IN_FLIGHT, SERIES])?),
            Allocation::Preallocated => std::borrow::Cow::Borrowed(elf),
        })
    }

    /// The maps' sizes, in entries.
    pub fn sizes(self) -> [(&'static str, u32); 2] {
        match self {
            Allocation::AsUsed => [(CALLS_IN_FLIGHT, MAX_CALLS_IN_FLIGHT), (SERIES, MAX_SERIES)],
            Allocation::Preallocated => {
                [(CALLS_IN_FLIGHT, MAX_CALLS_IN_FLIGHT_PREALLOCATED), (SERIES, MAX_SERIES_PREALLOCATED)]
            }
        }
    }
}

/// `BPF_F_NO_PREALLOC`, and where a legacy map definition (aya-ebpf's
/// `bpf_map_def`: type, key size, value size, max entries, flags, id,
/// pinning, each a u32) keeps its flags.
const BPF_F_NO_PREALLOC: u32 = 1;
const MAP_FLAGS_AT: u64 = 16;
const MAP_DEF_BYTES: u64 = 28;

/// A copy of the object `elf` whose maps `names` are made as they are used.
pub fn growing(elf: &[u8], names: &[&str]) -> Result<Vec<u8>> {
    let file = object::File::parse(elf).context("reading podstuck's kernel object")?;
    let mut patched = elf.to_vec();
    for name in names {
        let symbol = file
            .symbols()
            .find(|s| s.name() == Ok(name))
            .with_context(|| format!("the map {name} is not in podstuck's kernel object"))?;
        let index = symbol.section_index().with_context(|| format!("the map {name} has no section"))?;
        let section = file.section_by_index(index)?;
        if section.name() != Ok("maps") {
            bail!("{name} is not a map definition (in section {:?}, not maps)", section.name());
        }
        let (start, size) = section.file_range().with_context(|| format!("the map {name} has no bytes in the file"))?;
        let offset = symbol.address() - section.address();
        if offset + MAP_DEF_BYTES > size || symbol.size() != MAP_DEF_BYTES {
            bail!("the map {name}'s definition is not a bpf_map_def of {MAP_DEF_BYTES} bytes");
        }
        let at = (start + offset + MAP_FLAGS_AT) as usize;
        let flags = u32::from_le_bytes(patched[at..at + 4].try_into().expect("four bytes"));
        patched[at..at + 4].copy_from_slice(&(flags | BPF_F_NO_PREALLOC).to_le_bytes());
    }
    Ok(patched)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::EBPF_OBJECT;

    /// The flags of map `name` in object `elf`, read as aya reads them.
    fn flags(elf: &[u8], name: &str) -> u32 {
        let object = aya_obj::Object::parse(elf).expect("parses");
        object.maps.get(name).unwrap_or_else(|| panic!("{name} in the object")).map_flags()
    }

    #[test]
    fn growing_maps_lose_prealloc_and_nothing_else() {
        assert_eq!(flags(EBPF_OBJECT, SERIES), 0, "declared preallocated");
        assert_eq!(flags(EBPF_OBJECT, CALLS_IN_FLIGHT), 0, "declared preallocated");
        let patched = growing(EBPF_OBJECT, &[SERIES, CALLS_IN_FLIGHT]).unwrap();
        assert_eq!(flags(&patched, SERIES), BPF_F_NO_PREALLOC);
        assert_eq!(flags(&patched, CALLS_IN_FLIGHT), BPF_F_NO_PREALLOC);
        assert_eq!(flags(&patched, "COUNTERS"), 0, "other maps untouched");
        let before = aya_obj::Object::parse(EBPF_OBJECT).unwrap();
        let after = aya_obj::Object::parse(&patched).unwrap();
        for name in [SERIES, CALLS_IN_FLIGHT] {
            let (b, a) = (&before.maps[name], &after.maps[name]);
            assert_eq!(
                (b.map_type(), b.key_size(), b.value_size(), b.max_entries()),
                (a.map_type(), a.key_size(), a.value_size(), a.max_entries())
            );
        }
        let changed = EBPF_OBJECT.iter().zip(&patched).filter(|(a, b)| a != b).count();
        assert_eq!(changed, 2, "one byte of each map's flags");
    }

    #[test]
    fn a_name_that_is_no_map_is_refused() {
        assert!(growing(EBPF_OBJECT, &["NO_SUCH_MAP"]).is_err());
        assert!(growing(EBPF_OBJECT, &["OFFSETS"]).is_err(), "a global, not a map");
    }

    #[test]
    fn tracepoints_before_6_1_get_preallocated_maps() {
        assert_eq!(Allocation::of(AttachPoint::Tracepoint, Some((5, 10))), Allocation::Preallocated);
        assert_eq!(Allocation::of(AttachPoint::Tracepoint, Some((6, 0))), Allocation::Preallocated);
        assert_eq!(Allocation::of(AttachPoint::Tracepoint, None), Allocation::Preallocated);
        assert_eq!(Allocation::of(AttachPoint::Tracepoint, Some((6, 1))), Allocation::AsUsed);
        assert_eq!(Allocation::of(AttachPoint::Fentry, Some((5, 10))), Allocation::AsUsed);
        assert_eq!(Allocation::Preallocated.sizes()[1], (SERIES, MAX_SERIES_PREALLOCATED));
    }
}
