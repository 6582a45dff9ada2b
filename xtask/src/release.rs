//! `cargo xtask release`: what a user downloads, in `target/dist/`:
//!
//! - `podstuck-<version>-linux-{amd64,arm64}.tar.gz`, each holding the
//!   static `podstuck` and `kubectl-podstuck` of that architecture
//!   (`cross::build_release_for`: the files the image and the VM matrix
//!   run too), the license texts and a short README, at the archive's root
//!   as Inspektor Gadget's and Tetragon's tarballs are;
//! - an SBOM per binary, CycloneDX JSON (`sbom`), beside the dependency
//!   list `cargo auditable` embedded in the binary itself;
//! - `podstuck.yaml`, the krew manifest of the plugin (`krew`), its
//!   download URLs made from `--download-url`;
//! - `SHA256SUMS` over every other file, as `sha256sum -c` reads it.
//!
//! The same tree gives the same bytes: the binaries' paths are remapped,
//! every archive entry is owned by 0:0 with the mtime
//! `$SOURCE_DATE_EPOCH` (else the last commit's time), the gzip headers
//! carry no time or name, and the SBOMs' serial number and timestamp come
//! from their content and that time. A binary that is not static is
//! refused before anything is written.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use flate2::{Compression, GzBuilder};
use podstuck_tests::oci::Tar;
use sha2::{Digest as _, Sha256};

use crate::cross::{build_release_for, Arch};
use crate::host::{say, workspace_root};
use crate::image::{license_texts, source_date_epoch, static_binary, workspace_version};

mod krew;
mod sbom;

/// The binaries of a release, in each tarball.
pub const BINARIES: [&str; 2] = ["podstuck", "kubectl-podstuck"];

/// Where the tarballs will be downloaded from when `--download-url` is not
/// given: the reserved `.invalid` domain, which never resolves, so a krew
/// manifest published without the real place fails at once instead of
/// fetching from a stranger's.
const UNSET_DOWNLOAD_URL: &str = "https://podstuck.invalid/releases/v{version}/{file}";

#[derive(clap::Args, Clone, Debug)]
pub struct ReleaseArgs {
    /// Where to write the release [default: target/dist].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Where each tarball will be downloaded from, for the krew manifest: a URL in which `{version}`
    /// (0.1.0) and `{file}` (the tarball's name) are replaced, e.g.
    /// https://github.com/OWNER/podstuck/releases/download/v{version}/{file}.
    #[arg(long, default_value = UNSET_DOWNLOAD_URL)]
    pub download_url: String,
}

impl Default for ReleaseArgs {
    fn default() -> ReleaseArgs {
        ReleaseArgs { out: None, download_url: UNSET_DOWNLOAD_URL.to_string() }
    }
}

/// One architecture's part of a release.
pub struct Built {
    pub arch: Arch,
    /// The static binaries, in the order of [`BINARIES`].
    pub binaries: Vec<PathBuf>,
    /// Its tarball's name in the release directory.
    pub tarball: String,
}

/// Builds both architectures and writes the release; returns its directory.
pub fn release(args: &ReleaseArgs) -> Result<PathBuf> {
    crate::setup::setup()?;
    let version = workspace_version()?;
    let mtime = source_date_epoch()?;
    let out = args.out.clone().unwrap_or_else(|| workspace_root().join("target/dist"));
    let mut built = Vec::new();
    for arch in Arch::ALL {
        let binaries = build_for(arch)?;
        built.push(Built { arch, binaries, tarball: tarball_name(&version, arch) });
    }
    // A fresh directory: nothing of an older release is listed in SHA256SUMS.
    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("remove {}", out.display()))?;
    }
    std::fs::create_dir_all(&out).with_context(|| format!("create {}", out.display()))?;
    for part in &built {
        let bytes = tarball(part, &version, mtime)?;
        write(&out.join(&part.tarball), &bytes)?;
    }
    for part in &built {
        for (file, bytes) in sbom::sboms(part, &version, mtime)? {
            write(&out.join(file), &bytes)?;
        }
    }
    let manifest = krew::manifest(&built, &out, &version, &args.download_url)?;
    write(&out.join(krew::MANIFEST), manifest.as_bytes())?;
    write(&out.join("SHA256SUMS"), sha256sums(&out)?.as_bytes())?;
    let sizes: Vec<String> = built
        .iter()
        .map(|p| Ok(format!("{} ({} bytes)", p.tarball, std::fs::metadata(out.join(&p.tarball))?.len())))
        .collect::<Result<_>>()?;
    say(&format!("release {version} written to {}: {}", out.display(), sizes.join(", ")));
    if args.download_url == UNSET_DOWNLOAD_URL {
        say("the krew manifest's URLs are placeholders (podstuck.invalid): give --download-url where the tarballs will be published");
    }
    Ok(out)
}

/// The release's binaries for `arch`, built and checked static, in the
/// order of [`BINARIES`].
pub fn build_for(arch: Arch) -> Result<Vec<PathBuf>> {
    let binaries = build_release_for(arch, "podstuck-user", &BINARIES)?;
    for binary in &binaries {
        static_binary(binary, arch)?;
    }
    Ok(binaries)
}

/// `podstuck-<version>-linux-<arch>.tar.gz`, arch as Kubernetes and krew
/// name it (amd64, arm64).
pub fn tarball_name(version: &str, arch: Arch) -> String {
    format!("podstuck-{version}-linux-{}.tar.gz", arch.debian_arch())
}

/// The tarball of one architecture: the binaries, the license texts, the
/// README, sorted by name, gzipped without a time or a name in the header.
fn tarball(part: &Built, version: &str, mtime: u64) -> Result<Vec<u8>> {
    let mut files: Vec<(String, u32, Vec<u8>)> = Vec::new();
    for (name, path) in BINARIES.iter().zip(&part.binaries) {
        files.push((name.to_string(), 0o755, std::fs::read(path).with_context(|| format!("read {}", path.display()))?));
    }
    for (name, bytes) in license_texts()? {
        files.push((name.to_string(), 0o644, bytes));
    }
    files.push(("README.md".to_string(), 0o644, readme(version, part.arch).into_bytes()));
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let mut tar = Tar::new(mtime);
    for (name, mode, bytes) in &files {
        tar.file(name, *mode, bytes)?;
    }
    gzip(&tar.finish()?)
}

/// gzip at the best compression, with no mtime and no file name in its
/// header (GzBuilder writes neither unless told), so the bytes depend on
/// the content alone.
fn gzip(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut encoder = GzBuilder::new().mtime(0).write(Vec::new(), Compression::best());
    std::io::Write::write_all(&mut encoder, bytes)?;
    Ok(encoder.finish()?)
}

/// The README in each tarball: what the files are and the first commands.
fn readme(version: &str, arch: Arch) -> String {
    format!(
        "# podstuck {version} for linux/{arch}\n\n\
         Why is this pod stuck in Terminating? podstuck answers from the kernel: it traces the node's\n\
         umount2, unlinkat, unlink and rmdir calls and the pods' process lifecycle (eBPF), recognises\n\
         why a pod will not finish dying, and prints the evidence and the command that fixes it. It\n\
         only reads the node: it never unmounts, deletes or kills anything.\n\n\
         - `podstuck`: run it on the node, as root. A static binary: it needs no library and starts on\n\
           any Linux node's libc (glibc or musl, old or new), kernels 5.10 and later.\n\
         - `kubectl-podstuck`: the kubectl plugin, for your machine (Linux; from macOS or Windows, run\n\
           it in the image or under WSL, see the manual). Put it on PATH: `kubectl podstuck POD -n NS`.\n\n\
         On the node:\n\n\
         ```sh\n\
         sudo ./podstuck check                 # can podstuck trace here? one line each, ok or what to do\n\
         sudo ./podstuck watch --pod POD_UID   # one pod, live; q or Ctrl-C: stop and print a summary\n\
         ```\n\n\
         Licenses: LICENSE says which covers what (user space MIT OR Apache-2.0, the kernel programs\n\
         MIT OR GPL-2.0-only); the SBOM beside this tarball names every crate inside.\n",
        arch = arch.debian_arch()
    )
}

/// `SHA256SUMS` of every file in `dir` but itself, by name, in the form
/// `sha256sum -c` reads: "<hex>  <name>".
fn sha256sums(dir: &Path) -> Result<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .map(|e| e?.file_name().into_string().map_err(|n| anyhow::anyhow!("a file name not UTF-8: {n:?}")))
        .collect::<Result<_>>()?;
    names.retain(|n| n != "SHA256SUMS");
    names.sort();
    let mut text = String::new();
    for name in names {
        let bytes = std::fs::read(dir.join(&name))?;
        text.push_str(&format!("{}  {name}\n", sha256_hex(&bytes)));
    }
    Ok(text)
}

/// The sha256 of `bytes`, in lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// Writes `bytes` to `path` whole (a reader never finds half a file).
fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    podstuck_tests::oci::write_whole(path, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gzip_header_holds_no_time_and_no_name() {
        let bytes = gzip(b"podstuck").unwrap();
        // RFC 1952: ID1 ID2 CM FLG MTIME(4) XFL OS; FLG bit 3 is FNAME.
        assert_eq!(&bytes[..3], [0x1f, 0x8b, 8]);
        assert_eq!(bytes[3] & 0x08, 0, "a file name in the header");
        assert_eq!(&bytes[4..8], [0, 0, 0, 0], "a time in the header");
        assert_eq!(gzip(b"podstuck").unwrap(), bytes);
    }

    #[test]
    fn sums_are_as_sha256sum_writes_them_and_leave_themselves_out() {
        let dir = std::env::temp_dir().join(format!("xtask-sums-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("b"), b"").unwrap();
        std::fs::write(dir.join("a"), b"abc").unwrap();
        std::fs::write(dir.join("SHA256SUMS"), b"old").unwrap();
        let text = sha256sums(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            text,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  a\n\
             e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  b\n"
        );
    }

    #[test]
    fn tarballs_are_named_by_kubernetes_architectures() {
        assert_eq!(tarball_name("0.1.0", Arch::X86_64), "podstuck-0.1.0-linux-amd64.tar.gz");
        assert_eq!(tarball_name("0.1.0", Arch::Aarch64), "podstuck-0.1.0-linux-arm64.tar.gz");
    }
}
