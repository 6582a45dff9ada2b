//! What the loader reads of an ELF binary (its machine, the loader it asks
//! for, the libraries it needs), and the libraries a binary loads found by
//! following those, where `ldd` cannot run it (a binary of the other
//! architecture): for the image's layers and the arm64 VM guest alike.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

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
