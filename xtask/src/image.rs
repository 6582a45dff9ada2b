//! `cargo xtask image`: podstuck's container image, written here as one
//! tarball that both `docker load` and `ctr images import` accept, with no
//! registry, no Dockerfile and no container engine at build time.
//!
//! The image is one layer: the podstuck binary at /usr/local/bin/podstuck,
//! exactly the shared libraries `ldd` says it loads (at the paths the
//! loader looks them up, the loader itself at its own), an empty /tmp
//! (1777), /run, and /host, where the node's root is mounted. No shell, no
//! package manager: nothing in it but what podstuck runs on.
//!
//! The tarball holds one set of blobs under two indexes:
//!
//! - the OCI image layout (`oci-layout`, `index.json`, `blobs/sha256/...`),
//!   what `ctr images import` (containerd 1.6) reads; the index entry
//!   carries the `io.containerd.image.name` annotation (the image's full
//!   name) and the platform, which ctr's default platform filter needs;
//! - docker's `manifest.json` (Config, Layers, RepoTags), the only index
//!   `docker load` of Debian's docker.io 20.10 reads, pointing at the same
//!   config and layer blobs.
//!
//! It is reproducible: the same binary (and the same libraries on the
//! machine) gives a byte-identical tarball. Entries are sorted, owned by
//! 0:0 with fixed modes, their mtime `$SOURCE_DATE_EPOCH` (else 0), and the
//! layer's gzip header has no timestamp or file name.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::{say, workspace_root};

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
    /// The podstuck binary to put in the image [default: the release build, built now].
    #[arg(long)]
    pub binary: Option<PathBuf>,
    /// The image's name and tag [default: podstuck:<workspace version>].
    #[arg(long)]
    pub tag: Option<String>,
}

/// Builds the image of `binary` (or of the release build) and returns the
/// tarball's path.
pub fn image(args: &ImageArgs) -> Result<PathBuf> {
    let binary = match &args.binary {
        Some(binary) => binary.clone(),
        None => crate::build_release()?,
    };
    let version = workspace_version()?;
    let tag = args.tag.clone().unwrap_or_else(|| format!("podstuck:{version}"));
    let out = args.out.clone().unwrap_or_else(|| workspace_root().join(format!("target/image/podstuck-{version}.tar")));
    write_image(&binary, &tag, &version, &out)?;
    Ok(out)
}

/// Writes the image tarball of `binary`, named `tag`, to `out`.
pub fn write_image(binary: &Path, tag: &str, version: &str, out: &Path) -> Result<()> {
    let mtime = source_date_epoch()?;
    let layer_tar = layer(binary, mtime)?;
    let diff_id = sha256(&layer_tar);
    let layer_gz = gzip(&layer_tar)?;
    let config = image_config(&diff_id, version, mtime);
    let config = serde_json::to_vec(&config)?;

    let layer = Blob::new("application/vnd.oci.image.layer.v1.tar+gzip", layer_gz);
    let config = Blob::new("application/vnd.oci.image.config.v1+json", config);
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config.descriptor(),
        "layers": [layer.descriptor()],
    });
    let manifest = Blob::new("application/vnd.oci.image.manifest.v1+json", serde_json::to_vec(&manifest)?);
    let (name, reference) = split_tag(tag);
    let mut entry = manifest.descriptor();
    entry["annotations"] = json!({
        // containerd names the image from this, docker.io/library/ and all.
        "io.containerd.image.name": full_name(tag),
        "org.opencontainers.image.ref.name": reference,
    });
    entry["platform"] = json!({"architecture": oci_arch(), "os": "linux"});
    let index =
        json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [entry]});
    let docker_manifest = json!([{
        "Config": config.path(),
        "RepoTags": [format!("{name}:{reference}")],
        "Layers": [layer.path()],
    }]);

    let mut files: Vec<(String, Vec<u8>)> = vec![
        ("oci-layout".into(), br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec()),
        ("index.json".into(), serde_json::to_vec(&index)?),
        ("manifest.json".into(), serde_json::to_vec(&docker_manifest)?),
    ];
    for blob in [layer, config, manifest] {
        files.push((blob.path(), blob.bytes));
    }
    let mut archive = Archive::new(mtime);
    archive.dir("blobs")?;
    archive.dir("blobs/sha256")?;
    files.sort();
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
        "image {tag} ({} bytes, layer sha256:{diff_id}) written to {}; `docker load -i` or `ctr images import` it",
        bytes.len(),
        out.display()
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

/// The shared libraries `binary` loads, as `ldd` lists them, the loader
/// included; none for a static binary.
pub(crate) fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
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
fn image_config(diff_id: &str, version: &str, mtime: u64) -> Value {
    let created = rfc3339(mtime);
    json!({
        "created": created,
        "architecture": oci_arch(),
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

/// The OCI name of this machine's architecture.
fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
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
