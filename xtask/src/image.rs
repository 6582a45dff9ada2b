//! `cargo xtask image`: podstuck's container image for x86_64 and arm64
//! nodes, written here as one tarball that `ctr images import`, `skopeo`
//! and `docker load` accept, with no registry, no Dockerfile and no
//! container engine at build time.
//!
//! Each architecture's image is one layer: its podstuck binary at
//! /usr/local/bin/podstuck, exactly the shared libraries it loads (at the
//! paths its loader looks them up, the loader itself at its own), an empty
//! /tmp (1777), /run, and /host, where the node's root is mounted. No
//! shell, no package manager: nothing in it but what podstuck runs on. For
//! this machine's architecture the libraries are those `ldd` lists. `ldd`
//! cannot run the other architecture's loader ("not a dynamic
//! executable"), so there they are found by following the binary's ELF
//! `DT_NEEDED` entries through Debian's multiarch directory of that
//! architecture (`/lib/aarch64-linux-gnu/`, libc6:arm64, which the cross
//! build installs), the loader taken at the binary's `PT_INTERP`.
//!
//! The tarball is written by the tests' own writer
//! ([`podstuck_tests::oci`], which says what it holds), the one the
//! runtime tests' busybox image comes from too: one set of blobs under an
//! OCI layout whose image index lists linux/amd64 and linux/arm64, and
//! docker's `manifest.json` for this machine's. It is reproducible: the
//! same binaries (and the same libraries on the machine) give a
//! byte-identical tarball, every entry's mtime `$SOURCE_DATE_EPOCH` (else 0).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use podstuck_tests::oci::{self, Image, Tar};

use crate::cross::Arch;
use crate::elf::{elf_links, libraries};
use crate::host::{say, workspace_root};

/// Where the binary goes in the image.
pub const BINARY_IN_IMAGE: &str = "usr/local/bin/podstuck";
/// The PATH of the image's config (Debian's default, for a root user).
const PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// What the image is, for its description label.
const DESCRIPTION: &str =
    "podstuck: explains why a Kubernetes pod is stuck in Terminating, from eBPF probes on the node's unmounts and removals";

#[derive(clap::Args, Clone, Debug)]
pub struct ImageArgs {
    /// Where to write the image tarball [default: target/image/podstuck-<version>.tar].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The x86_64 podstuck binary, for linux/amd64 [default: the release build, built now].
    #[arg(long)]
    pub binary: Option<PathBuf>,
    /// The aarch64 podstuck binary, for linux/arm64 [default: the release build for
    /// aarch64-unknown-linux-gnu, cross-built now as `cargo xtask build --target` does].
    #[arg(long)]
    pub arm64_binary: Option<PathBuf>,
    /// The image's name and tag [default: podstuck:<workspace version>].
    #[arg(long)]
    pub tag: Option<String>,
}

/// Builds the image of the given binaries (the release builds of those
/// not given) and returns the tarball's path.
pub fn image(args: &ImageArgs) -> Result<PathBuf> {
    let mut binaries = Vec::new();
    for target in Arch::ALL {
        let given = match target {
            Arch::X86_64 => &args.binary,
            Arch::Aarch64 => &args.arm64_binary,
        };
        let binary = match given {
            Some(binary) => binary.clone(),
            None => crate::cross::build_release_for(target, "podstuck-user", &["podstuck"])?.remove(0),
        };
        binaries.push((target, binary));
    }
    let version = workspace_version()?;
    let tag = args.tag.clone().unwrap_or_else(|| format!("podstuck:{version}"));
    let out = args.out.clone().unwrap_or_else(|| workspace_root().join(format!("target/image/podstuck-{version}.tar")));
    write_image(&binaries, &tag, &version, &out)?;
    Ok(out)
}

/// The image of `binary`, built for `arch`.
fn platform_image(arch: Arch, binary: &Path, version: &str, mtime: u64) -> Result<Image> {
    let machine = elf_links(&std::fs::read(binary).with_context(|| format!("read {}", binary.display()))?)
        .with_context(|| format!("reading {} as an ELF binary", binary.display()))?
        .machine;
    if machine != arch.elf_machine() {
        let built_for = Arch::of_elf_machine(machine).map_or(format!("e_machine {machine}"), |a| a.triple().into());
        bail!(
            "{} is built for {built_for}, not for {} (linux/{})",
            binary.display(),
            arch.triple(),
            arch.debian_arch()
        );
    }
    Image::new(arch, &layer(binary, mtime)?, run_config(version)?, "cargo xtask image", mtime)
}

/// Writes the image tarball of `binaries` (one for each architecture of
/// the index, in its order), named `tag`, to `out`.
pub fn write_image(binaries: &[(Arch, PathBuf)], tag: &str, version: &str, out: &Path) -> Result<()> {
    let mtime = source_date_epoch()?;
    let images: Vec<Image> =
        binaries.iter().map(|(arch, binary)| platform_image(*arch, binary, version, mtime)).collect::<Result<_>>()?;
    let sizes: Vec<String> = binaries
        .iter()
        .zip(&images)
        .map(|((arch, _), image)| format!("linux/{} {} bytes gzipped", arch.debian_arch(), image.layer_bytes()))
        .collect();
    let bytes = oci::archive(images, tag, mtime)?;
    oci::write_whole(out, &bytes)?;
    say(&format!(
        "image {tag} ({} bytes: {}) written to {}; `ctr images import` or `skopeo copy --all oci-archive:...` it, \
         or `docker load -i` it for linux/{}",
        bytes.len(),
        sizes.join(", "),
        out.display(),
        Arch::HOST.debian_arch()
    ));
    Ok(())
}

/// The version of `[workspace.package]` in the workspace's Cargo.toml.
pub fn workspace_version() -> Result<String> {
    let manifest = workspace_root().join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).with_context(|| format!("read {}", manifest.display()))?;
    let mut in_section = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_section = line == "[workspace.package]";
        } else if let Some(value) = line.strip_prefix("version").map(str::trim_start).and_then(|l| l.strip_prefix('='))
        {
            if in_section {
                return Ok(value.trim().trim_matches('"').to_string());
            }
        }
    }
    bail!("no version in [workspace.package] of {}", manifest.display())
}

/// The entries' mtime: `$SOURCE_DATE_EPOCH` (the reproducible-builds
/// convention), else 0.
fn source_date_epoch() -> Result<u64> {
    match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(text) => {
            text.trim().parse().with_context(|| format!("SOURCE_DATE_EPOCH={text:?} is not a number of seconds"))
        }
        Err(_) => Ok(0),
    }
}

/// The image's one layer, an uncompressed tar.
fn layer(binary: &Path, mtime: u64) -> Result<Vec<u8>> {
    let program = std::fs::read(binary).with_context(|| format!("read {}", binary.display()))?;
    let mut files: Vec<(String, u32, Vec<u8>)> = vec![(BINARY_IN_IMAGE.to_string(), 0o755, program)];
    for library in shared_libraries(binary)? {
        let bytes = std::fs::read(&library).with_context(|| format!("read {}", library.display()))?;
        let path = library
            .strip_prefix("/")
            .unwrap_or(&library)
            .to_str()
            .context("a library path that is not UTF-8")?
            .to_string();
        // The loader is run by the kernel (PT_INTERP): it must be executable.
        files.push((path, 0o755, bytes));
    }
    let mut dirs: Vec<(String, u32)> = vec![("tmp".into(), 0o1777), ("run".into(), 0o755), ("host".into(), 0o755)];
    for (path, ..) in &files {
        for parent in Path::new(path).ancestors().skip(1).filter(|p| !p.as_os_str().is_empty()) {
            let parent = parent.to_str().expect("made of UTF-8 parts").to_string();
            if !dirs.iter().any(|(d, _)| *d == parent) {
                dirs.push((parent, 0o755));
            }
        }
    }
    // Sorted by path, a directory comes before what is in it.
    let mut entries: Vec<(String, u32, Option<Vec<u8>>)> =
        dirs.into_iter().map(|(p, m)| (p, m, None)).chain(files.into_iter().map(|(p, m, b)| (p, m, Some(b)))).collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut tar = Tar::new(mtime);
    for (path, mode, bytes) in entries {
        match bytes {
            None => tar.dir(&path, mode)?,
            Some(bytes) => tar.file(&path, mode, &bytes)?,
        }
    }
    tar.finish()
}

/// The shared libraries `binary` loads, the loader included; none for a
/// static binary. `ldd` lists them for a binary of this machine's
/// architecture; for the other, [`crate::elf::libraries`] finds them by
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

/// How the image runs: podstuck's `watch`, with a root user's PATH, and
/// what it is in its labels.
fn run_config(version: &str) -> Result<oci::Config> {
    let labels = [
        ("org.opencontainers.image.title", "podstuck"),
        ("org.opencontainers.image.version", version),
        ("org.opencontainers.image.description", DESCRIPTION),
    ];
    Ok(oci::ConfigBuilder::default()
        .entrypoint(vec![format!("/{BINARY_IN_IMAGE}")])
        .cmd(vec!["watch".to_string()])
        .env(vec![PATH_ENV.to_string()])
        .labels(labels.map(|(k, v)| (k.to_string(), v.to_string())))
        .build()?)
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
