//! What differs between an amd64 and an arm64 guest of `cargo xtask
//! vm-test`: QEMU's binary and machine, the console, Debian's kernel
//! package names, the plan podstuck should choose there, and where the
//! guest's programs and their shared libraries come from.
//!
//! An amd64 guest (this machine's architecture) gets this machine's own
//! busybox, mkfs.ext4, chattr, GNU rm and bpftool, their libraries named by
//! `ldd`. An arm64 guest gets the same tools from Debian's arm64 packages
//! of this machine's release, unpacked into a sysroot under
//! `target/vm/userland-arm64/`, their libraries found by the ELF's
//! `DT_NEEDED` there (`ldd` cannot run a foreign binary), and the C runtime
//! (loader, libc, libgcc_s) the cross build installed on this machine
//! (`libc6:arm64`), which the Rust binaries and the image use too: one libc
//! in the guest for all of them.
//! Real GNU rm, mkfs.ext4 and bpftool rather than busybox's stand-ins: the
//! storm needs GNU rm's walk (`unlinkat` relative to each directory),
//! /var/tmp needs an ext4 with inode flags for `chattr +i`, and the
//! scenarios list programs with bpftool, which busybox has no stand-in for.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use super::debian;
use super::KernelSpec;
use crate::cross::Arch;
use crate::host::say;

/// What the host needs for a guest of this architecture: QEMU, cpio for
/// the initramfs, xz to unpack compressed modules, and for an amd64 guest
/// the host's own tools that go into it (an arm64 guest's come from
/// Debian's arm64 packages, its C runtime with the cross build).
pub(super) fn host_packages(target: Arch) -> &'static [&'static str] {
    match target {
        Arch::X86_64 => &["qemu-system-x86", "cpio", "busybox-static", "e2fsprogs", "bpftool", "xz-utils", "dmsetup"],
        Arch::Aarch64 => &["qemu-system-arm", "cpio", "xz-utils"],
    }
}

/// How a kernel, its console log and its initramfs are named under
/// target/vm: the series alone for amd64 (as before arm64 came), with the
/// architecture in front for arm64.
pub(super) fn tag(target: Arch, name: &str) -> String {
    match target {
        Arch::X86_64 => name.to_string(),
        Arch::Aarch64 => format!("arm64-{name}"),
    }
}

/// The serial console the guest kernel writes to: the PC's UART, or the
/// PL011 of QEMU's `virt` board.
pub(super) fn console(target: Arch) -> &'static str {
    match target {
        Arch::X86_64 => "ttyS0",
        Arch::Aarch64 => "ttyAMA0",
    }
}

/// `apt-cache search --names-only` pattern of the cloud kernel packages of
/// a series.
pub(super) fn kernel_pattern(spec: &KernelSpec, target: Arch) -> String {
    format!(r"^linux-image-{}\.[0-9.+~a-z-]*{}$", spec.series, kernel_suffix(target))
}

/// How the names of those packages end.
pub(super) fn kernel_suffix(target: Arch) -> String {
    format!("-cloud-{}-unsigned", target.debian_arch())
}

/// Where podstuck should attach on this kernel: fentry/fexit on arm64
/// need BPF trampolines with direct calls (mainline 6.4), which Debian's
/// arm64 5.10 and 6.1 lack: there the syscall tracepoints.
pub(super) fn expect_attach(spec: &KernelSpec, target: Arch) -> &'static str {
    match target {
        Arch::X86_64 => spec.expect_attach,
        Arch::Aarch64 => spec.expect_attach_arm64,
    }
}

/// QEMU for this guest, with its machine, CPU and accelerator.
///
/// amd64: the suite's `-accel` (see `Suite::accel`) and `QEMU_CPU`.
/// arm64: the `virt` board, one host thread per vCPU (x86's threaded-TCG
/// crashes, a stale `int3` of text_poke_bp, have no arm64 counterpart:
/// arm64 patches one instruction at a time, and the architecture lets
/// another CPU run the old or the new one), and TCG's `max` CPU, which
/// has pointer authentication as Graviton 3 and 4 do, signing with
/// QEMU's cheap implementation-defined algorithm (`pauth-impdef`) rather
/// than QARMA5: the kernel signs return addresses in every function, and
/// emulating QARMA5 made 6.12's whole suite take 409 s instead of 140 s
/// (`mkdirs` of 100,000 directories: 124 s instead of 28 s). Neoverse N1
/// (Graviton 2, no pointer authentication) ran as fast as `pauth-impdef`.
pub(super) fn qemu(target: Arch, accel: &str) -> Command {
    let mut command = Command::new(qemu_binary(target));
    match target {
        Arch::X86_64 => command.args(["-accel", accel, "-cpu", super::QEMU_CPU]),
        Arch::Aarch64 => command.args(["-M", "virt", "-cpu", "max,pauth-impdef=on", "-accel", "tcg,thread=multi"]),
    };
    command.args(["-m", "2048", "-smp", "2", "-nographic", "-no-reboot", "-nic", "none"]);
    command
}

pub(super) fn qemu_binary(target: Arch) -> &'static str {
    match target {
        Arch::X86_64 => "qemu-system-x86_64",
        Arch::Aarch64 => "qemu-system-aarch64",
    }
}

/// Debian packages whose programs an arm64 guest runs (with what they
/// depend on, which apt resolves).
const FOREIGN_PACKAGES: [&str; 4] = ["busybox-static", "e2fsprogs", "coreutils", "bpftool"];

/// Where the guest's programs and their libraries come from.
pub(super) enum Userland {
    /// This machine's own (the guest is its architecture).
    Host,
    /// Debian's packages of another architecture unpacked under `root`.
    Foreign { target: Arch, root: PathBuf },
}

impl Userland {
    /// This machine's programs for its own architecture; for another, its
    /// Debian packages, unpacked the first time.
    pub(super) fn prepare(target: Arch) -> Result<Userland> {
        if target == Arch::HOST {
            return Ok(Userland::Host);
        }
        Ok(Userland::Foreign { target, root: foreign_sysroot(target)? })
    }

    /// A program by name: on the host's PATH (plus the sbin directories),
    /// or in the sysroot's bin and sbin directories.
    pub(super) fn program(&self, name: &str) -> Result<PathBuf> {
        let dirs: Vec<PathBuf> = match self {
            Userland::Host => {
                let path = std::env::var_os("PATH").unwrap_or_default();
                std::env::split_paths(&path)
                    .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
                    .collect()
            }
            Userland::Foreign { root, .. } => {
                ["usr/sbin", "sbin", "usr/bin", "bin"].iter().map(|d| root.join(d)).collect()
            }
        };
        let place = match self {
            Userland::Host => "on this machine".to_string(),
            Userland::Foreign { root, .. } => format!("in {}", root.display()),
        };
        dirs.iter().map(|d| d.join(name)).find(|p| p.is_file()).with_context(|| format!("{name} not found {place}"))
    }

    /// A configuration file (`/etc/...`) of these programs, if there is one.
    pub(super) fn config_file(&self, path: &str) -> Option<PathBuf> {
        let file = match self {
            Userland::Host => PathBuf::from(path),
            Userland::Foreign { root, .. } => root.join(path.trim_start_matches('/')),
        };
        file.is_file().then_some(file)
    }

    /// The shared libraries a binary loads, the loader among them: (the
    /// file here, its path in the guest). Fails on a binary of another
    /// architecture than the guest's.
    pub(super) fn libraries(&self, binary: &Path) -> Result<Vec<(PathBuf, PathBuf)>> {
        match self {
            Userland::Host => Ok(crate::elf::shared_libraries(binary)?.into_iter().map(|l| (l.clone(), l)).collect()),
            // The C runtime the cross build installed here first (the
            // image's too), then the unpacked packages': one libc for all.
            Userland::Foreign { target, root } => crate::elf::libraries(*target, &[Path::new("/"), root], binary),
        }
    }
}

/// Debian's AppArmor policy compiler (`apparmor_parser`, of the
/// `apparmor` package of this machine's release: it links libc alone),
/// unpacked once under target/vm/apparmor, for the amd64 guests' AppArmor
/// scenario; `None` for other guests, which do not run it. Unpacked, not
/// installed: its maintainer scripts would load profiles on this machine.
pub(super) fn apparmor_parser(target: Arch) -> Result<Option<PathBuf>> {
    if target != Arch::X86_64 {
        return Ok(None);
    }
    let dir = super::vm_dir().join("apparmor");
    let root = dir.join("root");
    let parser = root.join("sbin/apparmor_parser");
    if !parser.is_file() {
        let options = debian::suite_view(&debian::host_release()?, target)?;
        say("apparmor_parser for the AppArmor scenario: downloading Debian's apparmor package");
        debian::unpack(&options, &["apparmor".to_string()], &dir, &root)?;
    }
    Ok(Some(parser).filter(|p| p.is_file()))
}

/// Debian's packages of `FOREIGN_PACKAGES` and their dependencies for
/// `target`, of this machine's release (so the C library the cross build
/// installed here, the guest's one libc, is the one they were built for),
/// unpacked once under target/vm/userland-<arch>/root.
fn foreign_sysroot(target: Arch) -> Result<PathBuf> {
    let arch = target.debian_arch();
    let dir = super::vm_dir().join(format!("userland-{arch}"));
    let root = dir.join("root");
    let list = dir.join("packages");
    if list.is_file() && root.is_dir() {
        say(&format!("{arch} userland: cached in {}", root.display()));
        return Ok(root);
    }
    let suite = debian::host_release()?;
    let options = debian::suite_view(&suite, target)?;
    let found = Command::new("apt-cache")
        .args(&options)
        .args(["depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts", "--no-breaks"])
        .args(["--no-replaces", "--no-enhances"])
        .args(FOREIGN_PACKAGES)
        .output()
        .context("running apt-cache depends")?;
    if !found.status.success() {
        bail!("apt-cache depends {}: {}", FOREIGN_PACKAGES.join(" "), String::from_utf8_lossy(&found.stderr).trim());
    }
    let packages = depends_closure(&String::from_utf8_lossy(&found.stdout));
    say(&format!("{arch} userland: downloading {} packages of Debian {suite}: {}", packages.len(), packages.join(" ")));
    let names = debian::unpack(&options, &packages, &dir, &root)?;
    std::fs::write(&list, names.join("\n") + "\n")?;
    say(&format!("{arch} userland: unpacked in {}", root.display()));
    Ok(root)
}

/// The packages `apt-cache depends --recurse` lists (its unindented
/// lines), without the virtual ones (`<name>`), sorted.
fn depends_closure(text: &str) -> Vec<String> {
    let names: BTreeSet<&str> = text
        .lines()
        .filter(|l| !l.starts_with(char::is_whitespace) && !l.starts_with('<'))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    names.into_iter().map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closure_is_apts_unindented_real_packages() {
        let text = "bpftool\n  Depends: libc6\n  Depends: libelf1\ne2fsprogs\n  PreDepends: libblkid1\nlibc6\n<debconf-2.0>\nlibelf1\n";
        assert_eq!(depends_closure(text), ["bpftool", "e2fsprogs", "libc6", "libelf1"]);
    }

    #[test]
    fn arm64_kernels_are_named_and_tagged_apart_from_amd64() {
        let spec = &super::super::KERNELS[1];
        assert_eq!(kernel_pattern(spec, Arch::Aarch64), r"^linux-image-6\.1\.[0-9.+~a-z-]*-cloud-arm64-unsigned$");
        assert_eq!(kernel_pattern(spec, Arch::X86_64), r"^linux-image-6\.1\.[0-9.+~a-z-]*-cloud-amd64-unsigned$");
        assert_eq!((tag(Arch::X86_64, "6.1"), tag(Arch::Aarch64, "6.1")), ("6.1".into(), "arm64-6.1".into()));
        assert_eq!(expect_attach(spec, Arch::Aarch64), "tracepoint");
        assert_eq!(expect_attach(&super::super::KERNELS[2], Arch::Aarch64), "fentry");
    }
}
