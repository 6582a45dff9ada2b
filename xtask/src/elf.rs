//! What the loader reads of an ELF binary (its machine, the loader it asks
//! for, the libraries it needs), and the libraries a binary loads: listed
//! by `ldd` for this machine's architecture, found by following those
//! links where `ldd` cannot run it (a binary of the other architecture),
//! for the VM guests' tools; and what the image checks a binary is
//! static by.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use object::read::elf::{FileHeader, ProgramHeader};

use crate::cross::Arch;

/// An ELF file's machine, its loader (`PT_INTERP`) and the libraries it
/// needs (`DT_NEEDED`), in order.
pub(crate) struct ElfLinks {
    pub machine: u16,
    pub interpreter: Option<String>,
    pub needed: Vec<String>,
}

/// Reads [`ElfLinks`] from a 64-bit ELF file (both architectures are).
pub(crate) fn elf_links(bytes: &[u8]) -> Result<ElfLinks> {
    let header = object::elf::FileHeader64::<object::Endianness>::parse(bytes).context("not a 64-bit ELF file")?;
    let endian = header.endian()?;
    let mut interpreter = None;
    for segment in header.program_headers(endian, bytes)? {
        if let Some(path) = segment.interpreter(endian, bytes)? {
            interpreter = Some(String::from_utf8(path.to_vec()).context("a loader path that is not UTF-8")?);
        }
    }
    let dynamic = header.sections(endian, bytes)?.dynamic_table(endian, bytes)?;
    let mut needed = Vec::new();
    for entry in &dynamic {
        if entry.tag == object::elf::DT_NEEDED {
            let name = dynamic.string(entry)?;
            needed.push(String::from_utf8(name.to_vec()).context("a library name that is not UTF-8")?);
        }
    }
    Ok(ElfLinks { machine: header.e_machine(endian), interpreter, needed })
}

/// The [`ElfLinks`] of `file`, which must be built for `target`.
fn links_of(file: &Path, target: Arch) -> Result<ElfLinks> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let links = elf_links(&bytes).with_context(|| format!("reading {} as ELF", file.display()))?;
    if links.machine != target.elf_machine() {
        bail!("{} is not built for {} (e_machine {})", file.display(), target.triple(), links.machine);
    }
    Ok(links)
}

/// The loader and every library `binary` (built for `target`) loads, and
/// those they load in turn: (the file here, its path where it runs). Each
/// is looked up in the architecture's multiarch directories
/// (`lib/<gnu>`, `usr/lib/<gnu>`, where the loader searches with no
/// `ld.so.cache`) under each of `roots` in turn, and keeps that directory
/// where it runs. A library found nowhere, or built for another
/// architecture, is an error naming it; none for a static binary.
pub(crate) fn libraries(target: Arch, roots: &[&Path], binary: &Path) -> Result<Vec<(PathBuf, PathBuf)>> {
    let gnu = target.gnu_triple();
    let multiarch = [PathBuf::from(format!("lib/{gnu}")), PathBuf::from(format!("usr/lib/{gnu}"))];
    let first = links_of(binary, target)?;
    let Some(loader) = first.interpreter else { return Ok(Vec::new()) };
    if !Path::new(&loader).is_file() {
        bail!("{}'s loader {loader} is missing here: install libc6:{}", binary.display(), target.debian_arch());
    }
    let loader_name = Path::new(&loader).file_name().context("a loader path without a file name")?.to_owned();
    let mut out = vec![(PathBuf::from(&loader), PathBuf::from(&loader))];
    let mut seen = BTreeSet::new();
    let mut wanted: Vec<(String, PathBuf)> = first.needed.into_iter().map(|n| (n, binary.to_path_buf())).collect();
    while let Some((name, by)) = wanted.pop() {
        // libc.so.6 names the loader, which is in place already.
        if name.as_str() == loader_name || !seen.insert(name.clone()) {
            continue;
        }
        let found = roots
            .iter()
            .flat_map(|root| multiarch.iter().map(|dir| (*root, dir.join(&name))).collect::<Vec<_>>())
            .find(|(root, at)| root.join(at).is_file());
        let Some((root, at)) = found else {
            let places: Vec<String> = roots
                .iter()
                .flat_map(|root| multiarch.iter().map(move |dir| root.join(dir).display().to_string()))
                .collect();
            bail!(
                "{} needs {name}, which is in none of {}: install the {arch} package that has it \
                 (the cross build installs libc6:{arch} and libgcc-s1:{arch})",
                by.display(),
                places.join(", "),
                arch = target.debian_arch()
            );
        };
        let file = root.join(&at);
        wanted.extend(links_of(&file, target)?.needed.into_iter().map(|n| (n, file.clone())));
        out.push((file, Path::new("/").join(at)));
    }
    Ok(out)
}

/// The shared libraries `binary` loads, the loader included; none for a
/// static binary. `ldd` lists them for a binary of this machine's
/// architecture; for the other, [`libraries`] finds them by
/// following the ELF's own links, where the image's loader will look.
pub(crate) fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    let bytes = std::fs::read(binary).with_context(|| format!("read {}", binary.display()))?;
    let machine = elf_links(&bytes).with_context(|| format!("reading {} as an ELF binary", binary.display()))?.machine;
    match Arch::of_elf_machine(machine) {
        Some(target) if target != Arch::HOST => {
            return Ok(libraries(target, &[Path::new("/")], binary)?.into_iter().map(|(here, _)| here).collect())
        }
        Some(_) => {}
        None => bail!("{} is built for e_machine {machine}, neither x86_64 nor aarch64", binary.display()),
    }
    let out = Command::new("ldd").arg(binary).output().context("run ldd")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        if String::from_utf8_lossy(&out.stderr).contains("not a dynamic executable")
            || text.contains("statically linked")
        {
            return Ok(Vec::new());
        }
        bail!("ldd {} failed: {}", binary.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    parse_ldd(&text)
}

/// The library paths of `ldd`'s lines: `libc.so.6 => /lib/.../libc.so.6
/// (0x...)` and the loader's `/lib64/ld-linux-x86-64.so.2 (0x...)`; the
/// vDSO is the kernel's, in no file.
fn parse_ldd(text: &str) -> Result<Vec<PathBuf>> {
    let mut libraries = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let path = match line.split_once("=>") {
            Some((name, target)) => {
                let target = target.trim();
                if target.starts_with("not found") {
                    bail!("ldd: {} not found", name.trim());
                }
                target
            }
            None => line,
        };
        let path = path.split(" (").next().unwrap_or_default().trim();
        if path.starts_with('/') {
            libraries.push(PathBuf::from(path));
        } else if !line.starts_with("linux-vdso")
            && !line.starts_with("linux-gate")
            && !line.contains("statically linked")
        {
            bail!("ldd printed a line not understood: {line}");
        }
    }
    Ok(libraries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_lines_give_the_libraries_and_the_loader() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        let libs = parse_ldd(text).unwrap();
        assert_eq!(
            libs,
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
        assert!(parse_ldd("\tlibfoo.so.1 => not found\n").is_err());
    }

    /// The ELF walk, which finds the other architecture's libraries, finds
    /// on a binary of this machine exactly what `ldd` lists for it.
    #[test]
    fn following_dt_needed_finds_what_ldd_lists() {
        let binary = std::env::current_exe().unwrap();
        let mut by_ldd = shared_libraries(&binary).unwrap();
        let mut by_elf: Vec<PathBuf> =
            libraries(Arch::HOST, &[Path::new("/")], &binary).unwrap().into_iter().map(|(l, _)| l).collect();
        by_ldd.sort();
        by_elf.sort();
        assert!(by_elf.iter().any(|l| l.ends_with("libc.so.6")), "{by_elf:?}");
        assert_eq!(by_elf, by_ldd);
    }
}
