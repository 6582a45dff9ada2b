//! Struct member offsets read from the running kernel's BTF
//! (`/sys/kernel/btf/vmlinux`).
//!
//! Rust eBPF has no CO-RE relocations yet, so the kernel programs cannot ask
//! the loader to patch `task->real_parent` and friends. Instead user space
//! reads the offsets here, once, and hands them to the programs as the
//! `OFFSETS` global before load. This is a reader for exactly that: find a
//! struct by name and walk a member path, looking through anonymous
//! structs and unions. It is not a general BTF library.

use std::path::Path;

use anyhow::{bail, Context, Result};
use podstuck_common::KernelOffsets;

/// Where the running kernel publishes its own type information.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

const BTF_MAGIC: u16 = 0xeb9f;

// BTF kinds (include/uapi/linux/btf.h) that this reader needs to tell apart.
const KIND_INT: u32 = 1;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// A member of a struct or union; its name is an offset in the string
/// section, compared in place: vmlinux names some 190,000 types and
/// members, and podstuck needs a few dozen of them.
#[derive(Debug, Clone, Copy)]
struct Member {
    name: u32,
    type_id: u32,
    bit_offset: u32,
}

#[derive(Debug, Clone)]
struct Type {
    kind: u32,
    name: u32,
    /// Referenced type for typedef/const/volatile/restrict/type-tag.
    ref_type: u32,
    /// Its members, `members[first..first + count]` of the `Btf`.
    first_member: u32,
    member_count: u32,
}

/// The types of one BTF blob, indexed by id (id 0 is `void`). Names stay
/// in the blob's string section, which it keeps (a few MB), instead of a
/// `String` allocated per name.
pub struct Btf {
    strings: Vec<u8>,
    types: Vec<Type>,
    /// Members of structs and unions only, the one kind searched.
    members: Vec<Member>,
    /// Complete structs and unions by name: ids sorted by name, the first
    /// definition of a name before the others.
    structs_by_name: Vec<u32>,
    /// The enumerators of `enum cgroup_subsys_id` (`memory_cgrp_id`, ...):
    /// which slot of `css_set.subsys` a v1 controller's state is in. The
    /// one enum read; the others are skipped.
    cgroup_subsys: Vec<(String, u32)>,
}

fn u16_at(data: &[u8], at: usize) -> Result<u16> {
    let bytes = data.get(at..at + 2).context("BTF truncated")?;
    Ok(u16::from_le_bytes([bytes[0], bytes[1]]))
}

fn u32_at(data: &[u8], at: usize) -> Result<u32> {
    let bytes = data.get(at..at + 4).context("BTF truncated")?;
    Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

/// The longest name the kernel accepts in BTF (KSYM_NAME_LEN).
const MAX_NAME_BYTES: usize = 512;

/// A kernel's BTF is a few MB (5 MB for Debian's); a file many times that
/// is not one, and is not read whole.
const MAX_BTF_BYTES: u64 = 256 << 20;

/// Anonymous structs and unions nest a few deep in the kernel; a type that
/// holds itself (damaged BTF) must not send the search round for ever.
const MAX_ANONYMOUS_DEPTH: u32 = 16;

/// Members a search looks at: task_struct, the largest, has some 250 with
/// its anonymous parts.
const MAX_MEMBERS_LOOKED_AT: usize = 100_000;

/// The name at `off` in the string section, without its NUL (empty where
/// `off` is past the end).
fn name_at(strings: &[u8], off: u32) -> Result<&[u8]> {
    let tail = strings.get(off as usize..).unwrap_or(&[]);
    let end = tail.iter().take(MAX_NAME_BYTES + 1).position(|&b| b == 0).unwrap_or(tail.len().min(MAX_NAME_BYTES + 1));
    if end > MAX_NAME_BYTES {
        bail!("a BTF name longer than {MAX_NAME_BYTES} bytes");
    }
    Ok(&tail[..end])
}

impl Btf {
    /// Reads a BTF file: a regular file (not a FIFO or a device, which
    /// would be read for ever) of at most 256 MiB.
    pub fn from_file(path: &Path) -> Result<Btf> {
        use std::io::Read;
        let reading = || format!("reading {}", path.display());
        let kind = std::fs::metadata(path).with_context(reading)?.file_type();
        if !kind.is_file() {
            bail!("{} is not a regular file", path.display());
        }
        let file = std::fs::File::open(path).with_context(reading)?;
        let mut data = Vec::new();
        file.take(MAX_BTF_BYTES + 1).read_to_end(&mut data).with_context(reading)?;
        if data.len() as u64 > MAX_BTF_BYTES {
            bail!("{} is larger than {} MiB: not a kernel's BTF", path.display(), MAX_BTF_BYTES >> 20);
        }
        Btf::parse(&data).with_context(|| format!("parsing BTF in {}", path.display()))
    }

    pub fn parse(data: &[u8]) -> Result<Btf> {
        if u16_at(data, 0)? != BTF_MAGIC {
            bail!("not little-endian BTF (bad magic)");
        }
        let hdr_len = u32_at(data, 4)? as usize;
        let type_off = u32_at(data, 8)? as usize;
        let type_len = u32_at(data, 12)? as usize;
        let str_off = u32_at(data, 16)? as usize;
        let str_len = u32_at(data, 20)? as usize;
        let types_data =
            data.get(hdr_len + type_off..hdr_len + type_off + type_len).context("BTF type section out of bounds")?;
        let strings =
            data.get(hdr_len + str_off..hdr_len + str_off + str_len).context("BTF string section out of bounds")?;

        let mut types = vec![Type { kind: 0, name: 0, ref_type: 0, first_member: 0, member_count: 0 }];
        let mut members = Vec::new();
        let mut cgroup_subsys = Vec::new();
        let mut at = 0usize;
        while at < types_data.len() {
            let name_off = u32_at(types_data, at)?;
            let info = u32_at(types_data, at + 4)?;
            let size_or_type = u32_at(types_data, at + 8)?;
            at += 12;
            let vlen = (info & 0xffff) as usize;
            let kind = (info >> 24) & 0x1f;
            let kind_flag = info >> 31 == 1;
            let first_member = members.len() as u32;
            let trailing = match kind {
                KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
                KIND_ARRAY => 12,
                KIND_STRUCT | KIND_UNION => {
                    for i in 0..vlen {
                        let m = at + i * 12;
                        let offset = u32_at(types_data, m + 8)?;
                        let name = u32_at(types_data, m)?;
                        name_at(strings, name)?;
                        members.push(Member {
                            name,
                            type_id: u32_at(types_data, m + 4)?,
                            // With kind_flag the top 8 bits hold a bitfield size.
                            bit_offset: if kind_flag { offset & 0x00ff_ffff } else { offset },
                        });
                    }
                    vlen * 12
                }
                KIND_ENUM if name_at(strings, name_off)? == b"cgroup_subsys_id" => {
                    for i in 0..vlen {
                        let e = at + i * 8;
                        let name = String::from_utf8_lossy(name_at(strings, u32_at(types_data, e)?)?).into_owned();
                        cgroup_subsys.push((name, u32_at(types_data, e + 4)?));
                    }
                    vlen * 8
                }
                KIND_ENUM | KIND_FUNC_PROTO => vlen * 8,
                KIND_DATASEC | KIND_ENUM64 => vlen * 12,
                _ => 0,
            };
            at += trailing;
            let ref_type = match kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => size_or_type,
                _ => 0,
            };
            name_at(strings, name_off)?;
            let member_count = members.len() as u32 - first_member;
            types.push(Type { kind, name: name_off, ref_type, first_member, member_count });
        }

        // Forward declarations are a different kind; the first complete
        // definition of a name wins (a stable sort keeps it first).
        let mut structs_by_name: Vec<u32> = (0..types.len() as u32)
            .filter(|&id| {
                let ty = &types[id as usize];
                (ty.kind == KIND_STRUCT || ty.kind == KIND_UNION)
                    && ty.member_count > 0
                    && strings.get(ty.name as usize).is_some_and(|&b| b != 0)
            })
            .collect();
        let strings = strings.to_vec();
        let name = |id: &u32| name_at(&strings, types[*id as usize].name).unwrap_or_default();
        structs_by_name.sort_by(|a, b| name(a).cmp(name(b)));
        Ok(Btf { strings, types, members, structs_by_name, cgroup_subsys })
    }

    /// A name of this BTF (checked at parse).
    fn name(&self, off: u32) -> &[u8] {
        name_at(&self.strings, off).unwrap_or_default()
    }

    /// The first complete struct or union called `name`.
    fn struct_named(&self, name: &str) -> Option<u32> {
        let at = self.structs_by_name.partition_point(|id| self.name(self.types[*id as usize].name) < name.as_bytes());
        self.structs_by_name.get(at).copied().filter(|id| self.name(self.types[*id as usize].name) == name.as_bytes())
    }

    /// The members of type `id` (none but a struct's or a union's).
    fn members_of(&self, ty: &Type) -> &[Member] {
        let first = ty.first_member as usize;
        self.members.get(first..first + ty.member_count as usize).unwrap_or_default()
    }

    /// Follows typedefs and qualifiers to the type they name.
    fn resolve(&self, mut id: u32) -> u32 {
        for _ in 0..32 {
            match self.types.get(id as usize) {
                Some(t) if t.ref_type != 0 => id = t.ref_type,
                _ => break,
            }
        }
        id
    }

    /// Byte offset of `member` in the struct or union `id`, searching
    /// anonymous members too; returns (bit offset, member's type id).
    fn find_member(&self, id: u32, member: &str) -> Option<(u32, u32)> {
        let mut looked_at = 0;
        self.find_member_within(id, member, MAX_ANONYMOUS_DEPTH, &mut looked_at)
    }

    /// The search of [`Btf::find_member`], at most `depth` anonymous
    /// members deep and [`MAX_MEMBERS_LOOKED_AT`] members in all (damaged
    /// BTF can make a type of many anonymous members that hold itself).
    fn find_member_within(&self, id: u32, member: &str, depth: u32, looked_at: &mut usize) -> Option<(u32, u32)> {
        let ty = self.types.get(self.resolve(id) as usize)?;
        for m in self.members_of(ty) {
            *looked_at += 1;
            if *looked_at > MAX_MEMBERS_LOOKED_AT {
                return None;
            }
            let name = self.name(m.name);
            if name == member.as_bytes() {
                return Some((m.bit_offset, m.type_id));
            }
            if name.is_empty() && depth > 0 {
                if let Some((inner, type_id)) = self.find_member_within(m.type_id, member, depth - 1, looked_at) {
                    return Some((m.bit_offset.checked_add(inner)?, type_id));
                }
            }
        }
        None
    }

    /// Offset in bytes of `path` (e.g. `["ns", "inum"]`) inside `struct name`.
    pub fn offset_of(&self, name: &str, path: &[&str]) -> Result<u64> {
        let mut id = self.struct_named(name).with_context(|| format!("struct {name} not found in kernel BTF"))?;
        let mut bits = 0u64;
        for member in path {
            let (offset, type_id) = self
                .find_member(id, member)
                .with_context(|| format!("member {member} of struct {name} not found in kernel BTF"))?;
            bits += offset as u64;
            id = type_id;
        }
        if !bits.is_multiple_of(8) {
            bail!("{name}.{} is a bitfield", path.join("."));
        }
        Ok(bits / 8)
    }

    /// The offsets the kernel programs need (see `KernelOffsets`).
    pub fn kernel_offsets(&self) -> Result<KernelOffsets> {
        Ok(KernelOffsets {
            valid: 1,
            task_real_parent: self.offset_of("task_struct", &["real_parent"])?,
            task_tgid: self.offset_of("task_struct", &["tgid"])?,
            task_comm: self.offset_of("task_struct", &["comm"])?,
            task_nsproxy: self.offset_of("task_struct", &["nsproxy"])?,
            nsproxy_mnt_ns: self.offset_of("nsproxy", &["mnt_ns"])?,
            mnt_ns_inum: self.offset_of("mnt_namespace", &["ns", "inum"])?,
            task_fs: self.offset_of("task_struct", &["fs"])?,
            task_files: self.offset_of("task_struct", &["files"])?,
            fs_pwd: self.offset_of("fs_struct", &["pwd"])?,
            fs_root: self.offset_of("fs_struct", &["root"])?,
            path_mnt: self.offset_of("path", &["mnt"])?,
            path_dentry: self.offset_of("path", &["dentry"])?,
            files_fdt: self.offset_of("files_struct", &["fdt"])?,
            fdt_max_fds: self.offset_of("fdtable", &["max_fds"])?,
            fdt_fd: self.offset_of("fdtable", &["fd"])?,
            file_f_path: self.offset_of("file", &["f_path"])?,
            dentry_parent: self.offset_of("dentry", &["d_parent"])?,
            dentry_name: self.offset_of("dentry", &["d_name", "name"])?,
            vfsmount_root: self.offset_of("vfsmount", &["mnt_root"])?,
            mount_mnt: self.offset_of("mount", &["mnt"])?,
            mount_parent: self.offset_of("mount", &["mnt_parent"])?,
            mount_mountpoint: self.offset_of("mount", &["mnt_mountpoint"])?,
            regs_arg: self.syscall_arg_registers()?,
            regs_nr: self.syscall_nr_register()?,
            task_cgroups: self.offset_of("task_struct", &["cgroups"])?,
            css_set_subsys: self.offset_of("css_set", &["subsys"])?,
            css_cgroup: self.offset_of("cgroup_subsys_state", &["cgroup"])?,
            css_parent: self.offset_of("cgroup_subsys_state", &["parent"])?,
            cgroup_kn: self.offset_of("cgroup", &["kn"])?,
            kernfs_node_id: self.offset_of("kernfs_node", &["id"])?,
            // Which hierarchies is the node's to say: see `with_v1_hierarchies`.
            v1_subsys: [0; podstuck_common::V1_HIERARCHIES],
            task_mm: self.offset_of("task_struct", &["mm"])?,
            mm_env_start: self.offset_of("mm_struct", &["env_start"])?,
            mm_env_end: self.offset_of("mm_struct", &["env_end"])?,
            task_exit_code: self.offset_of("task_struct", &["exit_code"])?,
            task_group_leader: self.offset_of("task_struct", &["group_leader"])?,
            // Named real_start_time before 5.5.
            task_start_boottime: self
                .offset_of("task_struct", &["start_boottime"])
                .or_else(|_| self.offset_of("task_struct", &["real_start_time"]))?,
            task_signal: self.offset_of("task_struct", &["signal"])?,
            signal_live: self.offset_of("signal_struct", &["live"])?,
            task_pid: self.offset_of("task_struct", &["pid"])?,
            signal_flags: self.offset_of("signal_struct", &["flags"])?,
            signal_group_exit_code: self.offset_of("signal_struct", &["group_exit_code"])?,
            binprm_file: self.offset_of("linux_binprm", &["file"])?,
            binprm_filename: self.offset_of("linux_binprm", &["filename"])?,
            file_f_inode: self.offset_of("file", &["f_inode"])?,
            inode_ino: self.offset_of("inode", &["i_ino"])?,
            inode_sb: self.offset_of("inode", &["i_sb"])?,
            sb_dev: self.offset_of("super_block", &["s_dev"])?,
        })
    }

    /// The slot of v1 controller `controller` ("memory", "pids") in
    /// `css_set.subsys`: its `<controller>_cgrp_id` in `enum cgroup_subsys_id`.
    pub fn cgroup_subsys_id(&self, controller: &str) -> Option<u32> {
        let name = format!("{controller}_cgrp_id");
        self.cgroup_subsys.iter().find(|(n, _)| *n == name).map(|(_, id)| *id)
    }

    /// `offsets` made to read the caller's cgroup in the v1 hierarchies of
    /// `controllers` (one controller each), tried in that order: slot `i`
    /// is `controllers[i]`'s, or reads nothing where this kernel has no
    /// such controller, so the slots stay those user space maps back by.
    pub fn with_v1_hierarchies(&self, mut offsets: KernelOffsets, controllers: &[&str]) -> KernelOffsets {
        for (slot, wanted) in
            offsets.v1_subsys.iter_mut().zip(controllers.iter().map(Some).chain(std::iter::repeat(None)))
        {
            *slot = wanted.and_then(|c| self.cgroup_subsys_id(c)).map_or(0, |id| u64::from(id) + 1);
        }
        offsets
    }

    /// Offsets in `struct pt_regs` of a syscall's first three arguments.
    #[cfg(target_arch = "x86_64")]
    fn syscall_arg_registers(&self) -> Result<[u64; 3]> {
        Ok([
            self.offset_of("pt_regs", &["di"])?,
            self.offset_of("pt_regs", &["si"])?,
            self.offset_of("pt_regs", &["dx"])?,
        ])
    }

    #[cfg(target_arch = "aarch64")]
    fn syscall_arg_registers(&self) -> Result<[u64; 3]> {
        // The user_pt_regs at the start: regs[31], 8 bytes each.
        let regs = self.offset_of("pt_regs", &["regs"])?;
        Ok([regs, regs + 8, regs + 16])
    }

    #[cfg(target_arch = "x86_64")]
    fn syscall_nr_register(&self) -> Result<u64> {
        self.offset_of("pt_regs", &["orig_ax"])
    }

    #[cfg(target_arch = "aarch64")]
    fn syscall_nr_register(&self) -> Result<u64> {
        self.offset_of("pt_regs", &["syscallno"])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a BTF blob by hand: struct outer { int a; union { int b; struct inner c; }; }
    /// with struct inner { int x; int y; }, to check anonymous-member lookup.
    fn sample() -> Vec<u8> {
        let strings = b"\0int\0outer\0a\0b\0c\0inner\0x\0y\0".to_vec();
        let s = |name: &str| -> u32 {
            let needle = format!("\0{name}\0");
            strings.windows(needle.len()).position(|w| w == needle.as_bytes()).unwrap() as u32 + 1
        };
        let mut types = Vec::new();
        let mut push = |words: &[u32]| {
            for w in words {
                types.extend_from_slice(&w.to_le_bytes());
            }
        };
        // 1: int
        push(&[s("int"), KIND_INT << 24, 4, 32]);
        // 2: struct inner { int x @0; int y @32 }
        push(&[s("inner"), (KIND_STRUCT << 24) | 2, 8, s("x"), 1, 0, s("y"), 1, 32]);
        // 3: anonymous union { int b; struct inner c; }
        push(&[0, (KIND_UNION << 24) | 2, 8, s("b"), 1, 0, s("c"), 2, 0]);
        // 4: struct outer { int a @0; union @64 }
        push(&[s("outer"), (KIND_STRUCT << 24) | 2, 16, s("a"), 1, 0, 0, 3, 64]);
        let mut blob = Vec::new();
        blob.extend_from_slice(&BTF_MAGIC.to_le_bytes());
        blob.extend_from_slice(&[1, 0]);
        for w in [24u32, 0, types.len() as u32, types.len() as u32, strings.len() as u32] {
            blob.extend_from_slice(&w.to_le_bytes());
        }
        blob.extend_from_slice(&types);
        blob.extend_from_slice(&strings);
        blob
    }

    #[test]
    fn finds_members_through_anonymous_unions() {
        let btf = Btf::parse(&sample()).unwrap();
        assert_eq!(btf.offset_of("outer", &["a"]).unwrap(), 0);
        assert_eq!(btf.offset_of("outer", &["b"]).unwrap(), 8);
        assert_eq!(btf.offset_of("outer", &["c", "y"]).unwrap(), 12);
        assert!(btf.offset_of("outer", &["nope"]).is_err());
        assert!(btf.offset_of("missing", &["a"]).is_err());
    }

    #[test]
    fn an_anonymous_member_of_its_own_type_is_no_endless_search() {
        // struct outer's anonymous union (type 3) made to hold itself: its
        // member b (name at byte 88, type at 92) anonymous, of type 3.
        let mut blob = sample();
        blob[88..92].copy_from_slice(&0u32.to_le_bytes());
        blob[92..96].copy_from_slice(&3u32.to_le_bytes());
        let btf = Btf::parse(&blob).unwrap();
        assert!(btf.offset_of("outer", &["nope"]).is_err());
    }

    #[test]
    fn rejects_garbage() {
        assert!(Btf::parse(b"not btf at all, really not").is_err());
        assert!(Btf::parse(&[]).is_err());
    }

    /// This kernel's BTF, read once; None where there is none.
    /// This kernel's BTF; without it the test fails, unless skips are
    /// allowed (then None).
    fn vmlinux() -> Option<Vec<u8>> {
        thread_local! {
            static DATA: Option<Vec<u8>> = std::fs::read(VMLINUX_BTF).ok();
        }
        DATA.with(Clone::clone).or_else(|| {
            crate::test_support::missing(
                &crate::test_support::this_test(),
                &format!("the kernel's BTF ({VMLINUX_BTF})"),
                "run the tests on a kernel built with CONFIG_DEBUG_INFO_BTF=y, as podstuck needs anyway",
            )
        })
    }

    #[test]
    fn a_name_without_its_end_or_a_file_that_is_no_btf_is_refused() {
        let mut blob = sample();
        // The string section made one long name with no NUL.
        let strings_at = blob.len() - b"\0int\0outer\0a\0b\0c\0inner\0x\0y\0".len();
        let long = vec![b'n'; 2 * MAX_NAME_BYTES];
        blob.truncate(strings_at);
        blob.extend_from_slice(&long);
        blob[20..24].copy_from_slice(&(long.len() as u32).to_le_bytes());
        assert!(Btf::parse(&blob).err().unwrap().to_string().contains("longer than 512 bytes"));
        let fifo = std::env::temp_dir().join(format!("podstuck-btf-fifo-{}", std::process::id()));
        let _ = std::fs::remove_file(&fifo);
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let err = Btf::from_file(&fifo).err().unwrap().to_string();
        let _ = std::fs::remove_file(&fifo);
        assert!(err.contains("is not a regular file"), "{err}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 1024, failure_persistence: None, ..Default::default() })]

        /// Any bytes: an error (or, rarely, some types), never a panic, and
        /// a search through them ends.
        #[test]
        fn any_bytes_are_parsed_without_a_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2048), magic in proptest::prelude::any::<bool>()) {
            let mut bytes = bytes;
            if magic && bytes.len() >= 2 {
                bytes[..2].copy_from_slice(&BTF_MAGIC.to_le_bytes());
            }
            if let Ok(btf) = Btf::parse(&bytes) {
                let _ = btf.kernel_offsets();
            }
        }

        /// The hand-made sample with words changed: types of any kind,
        /// members of any type (themselves too), offsets of any size.
        #[test]
        fn a_damaged_sample_is_parsed_and_searched_without_a_panic(words in proptest::collection::vec((0usize..40, proptest::prelude::any::<u32>()), 1..8)) {
            let mut blob = sample();
            for (word, value) in words {
                let at = 24 + 4 * word;
                if at + 4 <= blob.len() {
                    blob[at..at + 4].copy_from_slice(&(value % 8).to_le_bytes());
                }
            }
            if let Ok(btf) = Btf::parse(&blob) {
                for path in [&["a"][..], &["b"], &["c", "y"], &["nope"]] {
                    let _ = btf.offset_of("outer", path);
                }
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 24, failure_persistence: None, ..Default::default() })]

        /// This kernel's BTF cut short: an error, never a panic.
        #[test]
        fn the_kernels_btf_cut_short_is_refused(at in proptest::prelude::any::<proptest::sample::Index>()) {
            let Some(data) = vmlinux() else { return Ok(()) };
            let cut = at.index(data.len());
            proptest::prop_assert!(Btf::parse(&data[..cut]).is_err());
        }

        /// This kernel's BTF with bytes changed: read or refused, never a
        /// panic, and the offsets searched for in bounded work.
        #[test]
        fn the_kernels_btf_damaged_is_read_without_a_panic(flips in proptest::collection::vec((proptest::prelude::any::<proptest::sample::Index>(), 1u8..=255), 1..64)) {
            let Some(mut data) = vmlinux() else { return Ok(()) };
            for (at, x) in &flips {
                let i = at.index(data.len());
                data[i] ^= x;
            }
            if let Ok(btf) = Btf::parse(&data) {
                let _ = btf.kernel_offsets();
            }
        }
    }

    #[test]
    fn reads_this_kernels_offsets() {
        let Some(data) = vmlinux() else { return };
        let offsets = Btf::parse(&data).unwrap().kernel_offsets().unwrap();
        assert_eq!(offsets.valid, 1);
        assert!(offsets.task_comm > 0 && offsets.task_real_parent > 0 && offsets.task_tgid > 0);
        // css_set.subsys is its first member: offset 0.
        assert!(offsets.task_cgroups > 0 && offsets.cgroup_kn > 0 && offsets.kernfs_node_id > 0);
        assert_eq!(offsets.v1_subsys, [0; 4], "no v1 hierarchy is read unless the node has one");
        assert!(offsets.css_parent > 0, "cgroup_subsys_state.parent follows .cgroup and .ss");
        // What the lifecycle programs prove a process and an exec by.
        assert!(offsets.task_group_leader > 0 && offsets.task_start_boottime > 0 && offsets.task_signal > 0);
        // What the signal program reads of its target, at the signal.
        assert!(offsets.task_pid > 0 && offsets.task_pid != offsets.task_tgid);
        assert!(offsets.signal_flags > 0 && offsets.signal_flags != offsets.signal_live);
        assert!(offsets.signal_group_exit_code > 0 && offsets.signal_group_exit_code != offsets.signal_flags);
        assert!(offsets.binprm_file > 0 && offsets.binprm_filename > 0 && offsets.inode_ino > 0);
        assert!(offsets.inode_sb > 0 && offsets.sb_dev > 0 && offsets.file_f_inode > 0);
    }

    #[test]
    fn finds_this_kernels_v1_controllers_in_enum_cgroup_subsys_id() {
        let Some(data) = vmlinux() else { return };
        let btf = Btf::parse(&data).unwrap();
        let memory = btf.cgroup_subsys_id("memory").expect("memory_cgrp_id");
        let pids = btf.cgroup_subsys_id("pids").expect("pids_cgrp_id");
        assert!(memory != pids && memory < 16 && pids < 16, "memory {memory}, pids {pids}");
        assert_eq!(btf.cgroup_subsys_id("no-such-controller"), None);
        let offsets = btf.with_v1_hierarchies(btf.kernel_offsets().unwrap(), &["memory"]);
        assert_eq!(offsets.v1_subsys, [u64::from(memory) + 1, 0, 0, 0]);
        // A controller this kernel lacks keeps its slot, reading nothing.
        let offsets = btf.with_v1_hierarchies(offsets, &["no-such-controller", "pids", "memory", "pids", "memory"]);
        assert_eq!(offsets.v1_subsys, [0, u64::from(pids) + 1, u64::from(memory) + 1, u64::from(pids) + 1]);
        assert_eq!(btf.with_v1_hierarchies(offsets, &[]).v1_subsys, [0; 4]);
    }
}
