//! `cargo xtask image`: podstuck's container image for x86_64 and arm64
//! nodes, written here as one tarball that `ctr images import`, `skopeo`
//! and `docker load` accept, with no registry, no Dockerfile and no
//! container engine at build time.
//!
//! Each architecture's image is one layer: the release's static podstuck
//! binary (`cross::build_release_for`, the very file of that
//! architecture's release tarball) at /usr/local/bin/podstuck, the license
//! texts at /usr/share/doc/podstuck/, an empty /tmp (1777), /run, and
//! /host, where the node's root is mounted. No loader, no library, no
//! shell, no package manager: a binary that needs a loader or a library is
//! refused, since the layer would not run it.
//!
//! The tarball is written by the tests' own writer
//! ([`podstuck_tests::oci`], which says what it holds), the one the
//! runtime tests' busybox image comes from too: one set of blobs under an
//! OCI layout whose image index lists linux/amd64 and linux/arm64, and
//! docker's `manifest.json` for this machine's. It is reproducible: the
//! same binaries give a byte-identical tarball, every entry's mtime
//! `$SOURCE_DATE_EPOCH` (else the last commit's time, else 0).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use podstuck_tests::oci::{self, Image, Tar};

use crate::cross::Arch;
use crate::elf::elf_links;
use crate::host::{say, workspace_root};

/// Where the binary goes in the image.
pub const BINARY_IN_IMAGE: &str = "usr/local/bin/podstuck";
/// Where the license texts go in the image.
const DOCS_IN_IMAGE: &str = "usr/share/doc/podstuck";
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
    /// The x86_64 podstuck binary, for linux/amd64, static [default: the release build for
    /// x86_64-unknown-linux-gnu, built now as `cargo xtask build` does].
    #[arg(long)]
    pub binary: Option<PathBuf>,
    /// The aarch64 podstuck binary, for linux/arm64, static [default: the release build for
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
    static_binary(binary, arch)?;
    Image::new(arch, &layer(binary, mtime)?, run_config(version)?, "cargo xtask image", mtime)
}

/// Fails unless `binary` is built for `arch` and static: no loader
/// (`PT_INTERP`), no library (`DT_NEEDED`), as the layer holds nothing else.
pub(crate) fn static_binary(binary: &Path, arch: Arch) -> Result<()> {
    let links = elf_links(&std::fs::read(binary).with_context(|| format!("read {}", binary.display()))?)
        .with_context(|| format!("reading {} as an ELF binary", binary.display()))?;
    if links.machine != arch.elf_machine() {
        let built_for =
            Arch::of_elf_machine(links.machine).map_or(format!("e_machine {}", links.machine), |a| a.triple().into());
        bail!(
            "{} is built for {built_for}, not for {} (linux/{})",
            binary.display(),
            arch.triple(),
            arch.debian_arch()
        );
    }
    if links.interpreter.is_some() || !links.needed.is_empty() {
        bail!(
            "{} needs a loader ({}) and libraries ({}): the image and the tarballs hold a static binary alone; \
             build it with `cargo xtask build --target {}` (target/{}/release/podstuck)",
            binary.display(),
            links.interpreter.as_deref().unwrap_or("none"),
            links.needed.join(", "),
            arch.triple(),
            arch.triple()
        );
    }
    Ok(())
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
/// convention), else the last commit's time, else 0: the same tree gives
/// the same bytes.
pub(crate) fn source_date_epoch() -> Result<u64> {
    if let Ok(text) = std::env::var("SOURCE_DATE_EPOCH") {
        return text.trim().parse().with_context(|| format!("SOURCE_DATE_EPOCH={text:?} is not a number of seconds"));
    }
    let commit = Command::new("git")
        .args(["log", "-1", "--format=%ct"])
        .current_dir(workspace_root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok());
    Ok(commit.unwrap_or(0))
}

/// The license texts, from the workspace's root: (name, bytes).
pub(crate) fn license_texts() -> Result<Vec<(&'static str, Vec<u8>)>> {
    LICENSE_FILES
        .iter()
        .map(|name| {
            let path = workspace_root().join(name);
            Ok((*name, std::fs::read(&path).with_context(|| format!("read {}", path.display()))?))
        })
        .collect()
}

/// The files of LICENSE, which says which license covers what.
pub(crate) const LICENSE_FILES: [&str; 4] = ["LICENSE", "LICENSE-APACHE", "LICENSE-GPL2", "LICENSE-MIT"];

/// The image's one layer, an uncompressed tar.
fn layer(binary: &Path, mtime: u64) -> Result<Vec<u8>> {
    let program = std::fs::read(binary).with_context(|| format!("read {}", binary.display()))?;
    let mut files: Vec<(String, u32, Vec<u8>)> = vec![(BINARY_IN_IMAGE.to_string(), 0o755, program)];
    for (name, bytes) in license_texts()? {
        files.push((format!("{DOCS_IN_IMAGE}/{name}"), 0o644, bytes));
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
    fn a_binary_that_needs_a_loader_or_a_library_is_refused() {
        // This test binary is built as every test is: dynamic.
        let binary = std::env::current_exe().unwrap();
        let why = format!("{:#}", static_binary(&binary, Arch::HOST).unwrap_err());
        assert!(why.contains("loader") && why.contains("cargo xtask build"), "{why}");
    }
}
