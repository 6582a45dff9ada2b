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
//! The tarball holds one set of blobs under two indexes:
//!
//! - the OCI image layout (`oci-layout`, `index.json`, `blobs/sha256/...`).
//!   `index.json` names one image index, as a registry's multi-architecture
//!   image is: its entry carries the `io.containerd.image.name` annotation
//!   (the image's full name) and `org.opencontainers.image.ref.name` (the
//!   tag), and the index lists one manifest for linux/amd64 and one for
//!   linux/arm64. `ctr images import` (containerd 1.6) unpacks the node's
//!   platform of it (`--all-platforms` keeps both) and `skopeo` reads it as
//!   `oci-archive:`. Two manifests side by side in `index.json` would not
//!   do: skopeo takes the first entry of a name and never sees the second;
//! - docker's `manifest.json` (Config, Layers, RepoTags), the only index
//!   `docker load` of Debian's docker.io 20.10 reads. It has no platforms,
//!   so it names the image of the architecture this tarball was built on
//!   (linux/amd64 here); docker on an arm64 node gets its image through a
//!   registry (`skopeo copy --all oci-archive:TARBALL docker://REGISTRY/...`
//!   pushes both), or from `ctr` as containerd's nodes do.
//!
//! It is reproducible: the same binaries (and the same libraries on the
//! machine) give a byte-identical tarball. Entries are sorted, owned by
//! 0:0 with fixed modes, their mtime `$SOURCE_DATE_EPOCH` (else 0), and the
//! layers' gzip headers have no timestamp or file name.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::cross::Arch;
use crate::elf::{elf_links, libraries};
use crate::{say, workspace_root};

/// Where the binary goes in the image.
pub const BINARY_IN_IMAGE: &str = "usr/local/bin/podstuck";
/// The PATH of the image's config (Debian's default, for a root user).
const PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// What the image is, for its description label.
const DESCRIPTION: &str =
    "podstuck: explains why a Kubernetes pod is stuck in Terminating, from eBPF probes on the node's unmounts and removals";
const INDEX_TYPE: &str = "application/vnd.oci.image.index.v1+json";
const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";

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

/// One architecture's image: its manifest and the blobs it names.
struct PlatformImage {
    target: Arch,
    layer: Blob,
    config: Blob,
    manifest: Blob,
}

/// The image of `binary`, built for `target`.
fn platform_image(target: Arch, binary: &Path, version: &str, mtime: u64) -> Result<PlatformImage> {
    let machine = elf_links(&std::fs::read(binary).with_context(|| format!("read {}", binary.display()))?)
        .with_context(|| format!("reading {} as an ELF binary", binary.display()))?
        .machine;
    if machine != target.elf_machine() {
        let built_for = Arch::of_elf_machine(machine).map_or(format!("e_machine {machine}"), |t| t.triple().into());
        bail!(
            "{} is built for {built_for}, not for {} (linux/{})",
            binary.display(),
            target.triple(),
            target.debian_arch()
        );
    }
    let layer_tar = layer(binary, mtime)?;
    let diff_id = sha256(&layer_tar);
    let layer = Blob::new("application/vnd.oci.image.layer.v1.tar+gzip", gzip(&layer_tar)?);
    let config = image_config(&diff_id, version, mtime, target);
    let config = Blob::new("application/vnd.oci.image.config.v1+json", serde_json::to_vec(&config)?);
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": config.descriptor(),
        "layers": [layer.descriptor()],
    });
    let manifest = Blob::new(MANIFEST_TYPE, serde_json::to_vec(&manifest)?);
    Ok(PlatformImage { target, layer, config, manifest })
}

/// Writes the image tarball of `binaries` (one for each architecture of
/// the index, in its order), named `tag`, to `out`.
pub fn write_image(binaries: &[(Arch, PathBuf)], tag: &str, version: &str, out: &Path) -> Result<()> {
    let mtime = source_date_epoch()?;
    let images: Vec<PlatformImage> = binaries
        .iter()
        .map(|(target, binary)| platform_image(*target, binary, version, mtime))
        .collect::<Result<_>>()?;
    let manifests: Vec<Value> = images
        .iter()
        .map(|image| {
            let mut entry = image.manifest.descriptor();
            entry["platform"] = json!({"architecture": image.target.debian_arch(), "os": "linux"});
            entry
        })
        .collect();
    let image_index = json!({"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": manifests});
    let image_index = Blob::new(INDEX_TYPE, serde_json::to_vec(&image_index)?);
    let (name, reference) = split_tag(tag);
    let mut entry = image_index.descriptor();
    entry["annotations"] = json!({
        // containerd names the image from this, docker.io/library/ and all.
        "io.containerd.image.name": full_name(tag),
        "org.opencontainers.image.ref.name": reference,
    });
    let index = json!({"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": [entry]});
    let host = Arch::HOST;
    let docker_image = images.iter().find(|image| image.target == host).with_context(|| {
        format!("docker's manifest.json names this machine's image, and there is none for {}", host.triple())
    })?;
    let docker_manifest = json!([{
        "Config": docker_image.config.path(),
        "RepoTags": [format!("{name}:{reference}")],
        "Layers": [docker_image.layer.path()],
    }]);

    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::from([
        ("oci-layout".into(), br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec()),
        ("index.json".into(), serde_json::to_vec(&index)?),
        ("manifest.json".into(), serde_json::to_vec(&docker_manifest)?),
    ]);
    let sizes: Vec<String> = images
        .iter()
        .map(|image| format!("linux/{} {} bytes gzipped", image.target.debian_arch(), image.layer.bytes.len()))
        .collect();
    for image in images {
        for blob in [image.layer, image.config, image.manifest] {
            files.insert(blob.path(), blob.bytes);
        }
    }
    files.insert(image_index.path(), image_index.bytes);
    let mut archive = Archive::new(mtime);
    archive.dir("blobs")?;
    archive.dir("blobs/sha256")?;
    for (path, bytes) in &files {
        archive.file(path, 0o644, bytes)?;
    }
    let bytes = archive.finish()?;

    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    // Whole or not at all: a reader never finds half an image.
    let partial = out.with_extension("tar.partial");
    std::fs::write(&partial, &bytes).with_context(|| format!("write {}", partial.display()))?;
    std::fs::rename(&partial, out).with_context(|| format!("rename to {}", out.display()))?;
    say(&format!(
        "image {tag} ({} bytes: {}) written to {}; `ctr images import` or `skopeo copy --all oci-archive:...` it, \
         or `docker load -i` it for linux/{}",
        bytes.len(),
        sizes.join(", "),
        out.display(),
        host.debian_arch()
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
    let mut archive = Archive::new(mtime);
    for (path, mode, bytes) in entries {
        match bytes {
            None => archive.dir_with_mode(&path, mode)?,
            Some(bytes) => archive.file(&path, mode, &bytes)?,
        }
    }
    archive.finish()
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

/// The image config: how to run it, and the layer's uncompressed digest.
fn image_config(diff_id: &str, version: &str, mtime: u64, target: Arch) -> Value {
    let created = rfc3339(mtime);
    json!({
        "created": created,
        "architecture": target.debian_arch(),
        "os": "linux",
        "config": {
            "Entrypoint": [format!("/{BINARY_IN_IMAGE}")],
            "Cmd": ["watch"],
            "Env": [PATH_ENV],
            "Labels": {
                "org.opencontainers.image.title": "podstuck",
                "org.opencontainers.image.version": version,
                "org.opencontainers.image.description": DESCRIPTION,
            },
        },
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{diff_id}")]},
        "history": [{"created": created, "created_by": "cargo xtask image"}],
    })
}

/// Seconds since the epoch as RFC 3339 UTC, as OCI's `created` wants it.
fn rfc3339(secs: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs)).to_string()
}

/// `name:tag` split at the tag's colon (a registry's port is not a tag);
/// `latest` when there is none.
fn split_tag(tag: &str) -> (&str, &str) {
    match tag.rsplit_once(':') {
        Some((name, reference)) if !reference.contains('/') => (name, reference),
        _ => (tag, "latest"),
    }
}

/// The full name containerd gives `podstuck:0.1.0`:
/// `docker.io/library/podstuck:0.1.0`, as docker's short names mean.
fn full_name(tag: &str) -> String {
    let (name, reference) = split_tag(tag);
    let first = name.split('/').next().unwrap_or_default();
    let has_registry = name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let name = match (has_registry, name.contains('/')) {
        (true, _) => name.to_string(),
        (false, true) => format!("docker.io/{name}"),
        (false, false) => format!("docker.io/library/{name}"),
    };
    format!("{name}:{reference}")
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Gzip with nothing of the moment in its header (mtime 0, no name).
fn gzip(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut encoder = flate2::GzBuilder::new().mtime(0).write(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes)?;
    Ok(encoder.finish()?)
}

/// A content-addressed blob of the layout.
struct Blob {
    media_type: &'static str,
    digest: String,
    bytes: Vec<u8>,
}

impl Blob {
    fn new(media_type: &'static str, bytes: Vec<u8>) -> Blob {
        Blob { media_type, digest: sha256(&bytes), bytes }
    }

    fn descriptor(&self) -> Value {
        json!({"mediaType": self.media_type, "digest": format!("sha256:{}", self.digest), "size": self.bytes.len()})
    }

    /// Its path in the tarball, for both indexes.
    fn path(&self) -> String {
        format!("blobs/sha256/{}", self.digest)
    }
}

/// A tar written in memory, every entry owned by 0:0 with the same mtime.
struct Archive {
    builder: tar::Builder<Vec<u8>>,
    mtime: u64,
}

impl Archive {
    fn new(mtime: u64) -> Archive {
        Archive { builder: tar::Builder::new(Vec::new()), mtime }
    }

    fn header(&self, kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(self.mtime);
        header.set_size(size);
        header
    }

    fn dir(&mut self, path: &str) -> Result<()> {
        self.dir_with_mode(path, 0o755)
    }

    fn dir_with_mode(&mut self, path: &str, mode: u32) -> Result<()> {
        let mut header = self.header(tar::EntryType::Directory, mode, 0);
        self.builder
            .append_data(&mut header, format!("{path}/"), std::io::empty())
            .with_context(|| format!("tar {path}/"))
    }

    fn file(&mut self, path: &str, mode: u32, bytes: &[u8]) -> Result<()> {
        let mut header = self.header(tar::EntryType::Regular, mode, bytes.len() as u64);
        self.builder.append_data(&mut header, path, bytes).with_context(|| format!("tar {path}"))
    }

    fn finish(self) -> Result<Vec<u8>> {
        Ok(self.builder.into_inner()?)
    }
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

    #[test]
    fn short_names_are_docker_hub_names() {
        assert_eq!(full_name("podstuck:0.1.0"), "docker.io/library/podstuck:0.1.0");
        assert_eq!(full_name("me/podstuck:1"), "docker.io/me/podstuck:1");
        assert_eq!(full_name("registry.local:5000/podstuck"), "registry.local:5000/podstuck:latest");
        assert_eq!(split_tag("localhost:5000/p"), ("localhost:5000/p", "latest"));
    }

    #[test]
    fn dates_are_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }
}
