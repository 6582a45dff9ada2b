//! Container image tarballs, written in memory with no registry, no
//! Dockerfile and no container engine: the one writer of podstuck's own
//! image (`cargo xtask image`) and of the busybox image the runtime tests
//! import into their private dockerd and containerd ([`crate::runtimes`]).
//!
//! A tarball holds one set of blobs under two indexes:
//!
//! - the OCI image layout (`oci-layout`, `index.json`, `blobs/sha256/...`),
//!   its manifests, configs and indexes the `oci-spec` crate's types.
//!   `index.json` names one image index, as a registry's multi-architecture
//!   image is: its entry carries the `io.containerd.image.name` annotation
//!   (the image's full name) and `org.opencontainers.image.ref.name` (the
//!   tag), and the index lists one manifest per architecture. `ctr images
//!   import` (containerd 1.6) unpacks the node's platform of it
//!   (`--all-platforms` keeps every one) and `skopeo` reads it as
//!   `oci-archive:`. Manifests side by side in `index.json` would not do:
//!   skopeo takes the first entry of a name and never sees the second;
//! - docker's `manifest.json` (Config, Layers, RepoTags), the only index
//!   `docker load` of Debian's docker.io 20.10 reads. It has no platforms,
//!   so it names the image of this machine's architecture; docker on
//!   another gets its image through a registry (`skopeo copy --all
//!   oci-archive:TARBALL docker://REGISTRY/...` pushes every one), or from
//!   `ctr` as containerd's nodes do.
//!
//! It is reproducible: the same files give a byte-identical tarball.
//! Entries are in a fixed order, owned by 0:0, their mtime the one given
//! (`$SOURCE_DATE_EPOCH`, else 0); JSON keys are sorted (`oci-spec` keeps
//! labels and annotations in hash maps, whose order changes from run to
//! run); the layers' gzip headers have no timestamp or file name.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use oci_spec::image::{
    Descriptor, DescriptorBuilder, HistoryBuilder, ImageConfigurationBuilder, ImageIndexBuilder, ImageManifestBuilder,
    MediaType, OciLayoutBuilder, Os, PlatformBuilder, RootFsBuilder, Sha256Digest,
};
use podstuck_common::program::Arch;
use serde::Serialize;
use sha2::{Digest as _, Sha256};

/// How an image runs (entrypoint, command, environment, labels): the
/// OCI type, for the callers that say.
pub use oci_spec::image::{Config, ConfigBuilder};

/// A tar written in memory, every entry owned by 0:0 with the same mtime.
pub struct Tar {
    builder: tar::Builder<Vec<u8>>,
    mtime: u64,
}

impl Tar {
    pub fn new(mtime: u64) -> Tar {
        Tar { builder: tar::Builder::new(Vec::new()), mtime }
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

    pub fn dir(&mut self, path: &str, mode: u32) -> Result<()> {
        let mut header = self.header(tar::EntryType::Directory, mode, 0);
        self.builder
            .append_data(&mut header, format!("{path}/"), std::io::empty())
            .with_context(|| format!("tar {path}/"))
    }

    pub fn file(&mut self, path: &str, mode: u32, bytes: &[u8]) -> Result<()> {
        let mut header = self.header(tar::EntryType::Regular, mode, bytes.len() as u64);
        self.builder.append_data(&mut header, path, bytes).with_context(|| format!("tar {path}"))
    }

    /// A symbolic link at `path` to `target` (busybox's applets).
    pub fn symlink(&mut self, path: &str, target: &str) -> Result<()> {
        let mut header = self.header(tar::EntryType::Symlink, 0o777, 0);
        self.builder.append_link(&mut header, path, target).with_context(|| format!("tar {path} -> {target}"))
    }

    pub fn finish(self) -> Result<Vec<u8>> {
        Ok(self.builder.into_inner()?)
    }
}

/// A content-addressed blob of the layout.
struct Blob {
    descriptor: Descriptor,
    bytes: Vec<u8>,
}

impl Blob {
    fn new(media_type: MediaType, bytes: Vec<u8>) -> Result<Blob> {
        let descriptor = DescriptorBuilder::default()
            .media_type(media_type)
            .digest(sha256(&bytes)?)
            .size(bytes.len() as u64)
            .build()?;
        Ok(Blob { descriptor, bytes })
    }

    /// A JSON document (a manifest, a config, an index) as a blob.
    fn json(media_type: MediaType, document: &impl Serialize) -> Result<Blob> {
        Blob::new(media_type, canonical_json(document)?)
    }

    /// Its path in the tarball, for both indexes.
    fn path(&self) -> String {
        format!("blobs/sha256/{}", self.descriptor.digest().digest())
    }
}

/// One architecture's image: its one layer, its config and its manifest.
pub struct Image {
    arch: Arch,
    layer: Blob,
    config: Blob,
    manifest: Blob,
}

impl Image {
    /// The image of `layer` (an uncompressed tar of its root filesystem)
    /// for `arch`, run as `run` says, made by `created_by` at `mtime`.
    pub fn new(arch: Arch, layer: &[u8], run: Config, created_by: &str, mtime: u64) -> Result<Image> {
        let created = rfc3339(mtime);
        let diff_id = sha256(layer)?;
        let layer = Blob::new(MediaType::ImageLayerGzip, gzip(layer)?)?;
        let rootfs = RootFsBuilder::default().typ("layers").diff_ids(vec![format!("sha256:{diff_id}")]).build()?;
        let history = HistoryBuilder::default().created(created.clone()).created_by(created_by).build()?;
        let config = ImageConfigurationBuilder::default()
            .created(created)
            .architecture(arch.debian_arch())
            .os(Os::Linux)
            .config(run)
            .rootfs(rootfs)
            .history(vec![history])
            .build()?;
        let config = Blob::json(MediaType::ImageConfig, &config)?;
        let manifest = ImageManifestBuilder::default()
            .schema_version(2u32)
            .media_type(MediaType::ImageManifest)
            .config(config.descriptor.clone())
            .layers(vec![layer.descriptor.clone()])
            .build()?;
        let manifest = Blob::json(MediaType::ImageManifest, &manifest)?;
        Ok(Image { arch, layer, config, manifest })
    }

    /// The size of its gzipped layer.
    pub fn layer_bytes(&self) -> usize {
        self.layer.bytes.len()
    }
}

/// The tarball of `images` (one per architecture, in the index's order),
/// named `tag`, with every entry's mtime `mtime`.
pub fn archive(images: Vec<Image>, tag: &str, mtime: u64) -> Result<Vec<u8>> {
    let mut manifests = Vec::new();
    for image in &images {
        let mut entry = image.manifest.descriptor.clone();
        entry.set_platform(Some(
            PlatformBuilder::default().architecture(image.arch.debian_arch()).os(Os::Linux).build()?,
        ));
        manifests.push(entry);
    }
    let image_index = ImageIndexBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageIndex)
        .manifests(manifests)
        .build()?;
    let image_index = Blob::json(MediaType::ImageIndex, &image_index)?;
    let (name, reference) = split_tag(tag);
    let mut entry = image_index.descriptor.clone();
    entry.set_annotations(Some(
        [
            // containerd names the image from this, docker.io/library/ and all.
            ("io.containerd.image.name".to_string(), full_name(tag)),
            ("org.opencontainers.image.ref.name".to_string(), reference.to_string()),
        ]
        .into(),
    ));
    let index = ImageIndexBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageIndex)
        .manifests(vec![entry])
        .build()?;
    let docker_image = images.iter().find(|image| image.arch == Arch::HOST).with_context(|| {
        format!("docker's manifest.json names this machine's image, and there is none for {}", Arch::HOST.triple())
    })?;
    let docker_manifest = serde_json::json!([{
        "Config": docker_image.config.path(),
        "RepoTags": [format!("{name}:{reference}")],
        "Layers": [docker_image.layer.path()],
    }]);
    let layout = OciLayoutBuilder::default().image_layout_version("1.0.0").build()?;

    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::from([
        ("oci-layout".into(), canonical_json(&layout)?),
        ("index.json".into(), canonical_json(&index)?),
        ("manifest.json".into(), canonical_json(&docker_manifest)?),
    ]);
    for image in images {
        for blob in [image.layer, image.config, image.manifest] {
            files.insert(blob.path(), blob.bytes);
        }
    }
    files.insert(image_index.path(), image_index.bytes);
    let mut tar = Tar::new(mtime);
    tar.dir("blobs", 0o755)?;
    tar.dir("blobs/sha256", 0o755)?;
    for (path, bytes) in &files {
        tar.file(path, 0o644, bytes)?;
    }
    tar.finish()
}

/// Writes `bytes` to `out` whole or not at all: a reader never finds half
/// an image.
pub fn write_whole(out: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let partial = out.with_extension("tar.partial");
    std::fs::write(&partial, bytes).with_context(|| format!("write {}", partial.display()))?;
    std::fs::rename(&partial, out).with_context(|| format!("rename to {}", out.display()))
}

/// JSON with its keys sorted: serde_json's map is ordered, so a document
/// read back as a value and written again has one spelling.
fn canonical_json(document: &impl Serialize) -> Result<Vec<u8>> {
    Ok(serde_json::to_vec(&serde_json::to_value(document)?)?)
}

fn sha256(bytes: &[u8]) -> Result<Sha256Digest> {
    Ok(format!("{:x}", Sha256::digest(bytes)).parse()?)
}

/// Gzip with nothing of the moment in its header (mtime 0, no name).
fn gzip(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut encoder = flate2::GzBuilder::new().mtime(0).write(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes)?;
    Ok(encoder.finish()?)
}

/// Seconds since the epoch as RFC 3339 UTC, as OCI's `created` wants it.
fn rfc3339(secs: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs)).to_string()
}

/// `name:tag` split at the tag's colon (a registry's port is not a tag);
/// `latest` when there is none.
pub fn split_tag(tag: &str) -> (&str, &str) {
    match tag.rsplit_once(':') {
        Some((name, reference)) if !reference.contains('/') => (name, reference),
        _ => (tag, "latest"),
    }
}

/// The full name containerd gives `podstuck:0.1.0`:
/// `docker.io/library/podstuck:0.1.0`, as docker's short names mean.
pub fn full_name(tag: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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

    fn tarball(label: &str) -> Vec<u8> {
        let mut layer = Tar::new(0);
        layer.dir("bin", 0o755).unwrap();
        layer.file("bin/true", 0o755, b"#!/bin/true\n").unwrap();
        layer.symlink("bin/false", "true").unwrap();
        let run = ConfigBuilder::default()
            .cmd(vec!["true".to_string()])
            .labels([("a".to_string(), label.to_string()), ("b".to_string(), "2".to_string())])
            .build()
            .unwrap();
        let image = Image::new(Arch::HOST, &layer.finish().unwrap(), run, "a test", 0).unwrap();
        archive(vec![image], "t:1", 0).unwrap()
    }

    /// Labels and annotations live in hash maps; the bytes do not change.
    #[test]
    fn the_same_image_gives_the_same_bytes() {
        assert_eq!(tarball("1"), tarball("1"));
        assert_ne!(tarball("1"), tarball("2"));
    }

    /// What the tarball holds, read back with the `tar` crate's reader:
    /// both indexes name blobs that are there, with their digests.
    #[test]
    fn every_blob_named_is_in_the_tarball_under_its_digest() {
        let bytes = tarball("1");
        let mut files = BTreeMap::new();
        for entry in tar::Archive::new(&bytes[..]).entries().unwrap() {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().to_string_lossy().into_owned();
            let mut content = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut content).unwrap();
            files.insert(path, content);
        }
        for (path, content) in files.iter().filter(|(p, _)| p.starts_with("blobs/sha256/") && !p.ends_with('/')) {
            assert_eq!(format!("blobs/sha256/{}", sha256(content).unwrap()), *path);
        }
        let docker: serde_json::Value = serde_json::from_slice(&files["manifest.json"]).unwrap();
        assert_eq!(docker[0]["RepoTags"][0], "t:1");
        for blob in [&docker[0]["Config"], &docker[0]["Layers"][0]] {
            assert!(files.contains_key(blob.as_str().unwrap()), "{blob}");
        }
        let index: serde_json::Value = serde_json::from_slice(&files["index.json"]).unwrap();
        let entry = &index["manifests"][0];
        assert_eq!(entry["annotations"]["io.containerd.image.name"], "docker.io/library/t:1");
        let digest = entry["digest"].as_str().unwrap().strip_prefix("sha256:").unwrap();
        let image_index: serde_json::Value = serde_json::from_slice(&files[&format!("blobs/sha256/{digest}")]).unwrap();
        assert_eq!(image_index["manifests"][0]["platform"]["architecture"], Arch::HOST.debian_arch());
    }
}
