//! The release's SBOMs: one CycloneDX 1.5 JSON document per binary and
//! architecture, made by `cargo cyclonedx` (CycloneDX's own cargo plugin,
//! installed at a pinned version) from Cargo.lock for the binary's target,
//! without build-time dependencies. `podstuck`'s also lists the kernel
//! programs it embeds (podstuck-ebpf, a workspace of its own that
//! podstuck-user's build script compiles, which cargo's metadata of the
//! user side cannot see) and the crates they are built from, from
//! podstuck-ebpf/Cargo.lock.
//!
//! cargo-cyclonedx writes its documents beside each Cargo.toml; they are
//! read and removed at once. What would differ between two clones of the
//! same tree is made the same: the workspace's absolute path in the
//! `bom-ref`s becomes `/podstuck`, the timestamp is `$SOURCE_DATE_EPOCH`'s
//! (cargo-cyclonedx honours it), and the serial number, which CycloneDX
//! wants unique per document, is a UUID made from the document's own
//! sha256.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::{sha256_hex, Built, BINARIES};
use crate::host::{cargo, run, workspace_root};
use crate::setup::{install_cargo_tool, CargoTool};

/// CycloneDX's cargo plugin.
pub const CARGO_CYCLONEDX: CargoTool = CargoTool {
    name: "cargo-cyclonedx",
    version: "0.5.9",
    features: None,
    why: "which writes the release's SBOMs (about 3 minutes)",
};

/// The SBOMs of one architecture's binaries: (file name, bytes).
pub fn sboms(part: &Built, version: &str, mtime: u64) -> Result<Vec<(String, Vec<u8>)>> {
    install_cargo_tool(&CARGO_CYCLONEDX)?;
    let user = cyclonedx(&workspace_root().join("podstuck-user/Cargo.toml"), part.arch.triple(), &BINARIES, mtime)?;
    let kernel =
        cyclonedx(&workspace_root().join("podstuck-ebpf/Cargo.toml"), "bpfel-unknown-none", &["podstuck"], mtime)?
            .remove(0);
    let mut out = Vec::new();
    for (bin, mut document) in BINARIES.iter().zip(user) {
        if *bin == "podstuck" {
            add_kernel_programs(&mut document, &kernel)?;
        }
        let name = format!("podstuck-{version}-linux-{}.{bin}.cdx.json", part.arch.debian_arch());
        out.push((name, finish(document)?));
    }
    Ok(out)
}

/// `cargo cyclonedx` on the workspace of `manifest` for `target`: the
/// documents of `bins` (binaries of that manifest's package), read and
/// then removed with every other document it wrote.
fn cyclonedx(manifest: &Path, target: &str, bins: &[&str], mtime: u64) -> Result<Vec<Value>> {
    let mut command = cargo();
    command
        .args(["cyclonedx", "--manifest-path"])
        .arg(manifest)
        .args(["--format", "json", "--describe", "binaries", "--spec-version", "1.5", "--no-build-deps", "--quiet"])
        .args(["--target", target])
        .env("SOURCE_DATE_EPOCH", mtime.to_string());
    run(&mut command)?;
    let package_dir = manifest.parent().context("a manifest in a directory")?;
    let written = written_documents(manifest)?;
    let read = bins
        .iter()
        .map(|bin| {
            let file = package_dir.join(format!("{bin}_bin.cdx.json"));
            let text = std::fs::read(&file).with_context(|| format!("cargo cyclonedx wrote no {}", file.display()))?;
            serde_json::from_slice(&text).with_context(|| format!("{} is not JSON", file.display()))
        })
        .collect::<Result<Vec<Value>>>();
    for file in written {
        let _ = std::fs::remove_file(file);
    }
    read
}

/// The documents cargo-cyclonedx writes for the workspace of `manifest`:
/// `*_bin.cdx.json` beside each member's Cargo.toml.
fn written_documents(manifest: &Path) -> Result<Vec<PathBuf>> {
    let root = if manifest.starts_with(workspace_root().join("podstuck-ebpf")) {
        vec![workspace_root().join("podstuck-ebpf")]
    } else {
        ["podstuck-user", "podstuck-common", "tests", "xtask"].iter().map(|d| workspace_root().join(d)).collect()
    };
    let mut files = Vec::new();
    for dir in root {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with("_bin.cdx.json")) {
                files.push(path);
            }
        }
    }
    Ok(files)
}

/// Adds the kernel programs (the `kernel` document's own component and its
/// crates) to `podstuck`'s document: as a component the binary depends
/// on, its crates and their dependencies, each crate once.
fn add_kernel_programs(document: &mut Value, kernel: &Value) -> Result<()> {
    let mut programs = kernel["metadata"]["component"].clone();
    programs["name"] = "podstuck-ebpf".into();
    programs["type"] = "library".into();
    programs["description"] = "podstuck's kernel programs (eBPF), embedded in the podstuck binary".into();
    let programs_ref = programs["bom-ref"].clone();
    let root_ref = document["metadata"]["component"]["bom-ref"].clone();
    let Some(components) = document["components"].as_array_mut() else { bail!("an SBOM without components") };
    let known: Vec<Value> = components.iter().map(|c| c["bom-ref"].clone()).collect();
    components.push(programs);
    for component in kernel["components"].as_array().into_iter().flatten() {
        if !known.contains(&component["bom-ref"]) {
            components.push(component.clone());
        }
    }
    let Some(dependencies) = document["dependencies"].as_array_mut() else { bail!("an SBOM without dependencies") };
    let known: Vec<Value> = dependencies.iter().map(|d| d["ref"].clone()).collect();
    for dependency in kernel["dependencies"].as_array().into_iter().flatten() {
        let mut dependency = dependency.clone();
        if dependency["ref"] == kernel["metadata"]["component"]["bom-ref"] {
            dependency["ref"] = programs_ref.clone();
        }
        if !known.contains(&dependency["ref"]) {
            dependencies.push(dependency);
        }
    }
    if let Some(root) = dependencies.iter_mut().find(|d| d["ref"] == root_ref) {
        if let Some(depends_on) = root["dependsOn"].as_array_mut() {
            depends_on.push(programs_ref);
        }
    }
    Ok(())
}

/// The document as written to the release: the workspace's path made
/// `/podstuck`, a serial number from its own content, pretty JSON.
fn finish(document: Value) -> Result<Vec<u8>> {
    let here = format!("file://{}", workspace_root().display());
    let text = serde_json::to_string(&document)?.replace(&here, "file:///podstuck");
    let mut document: Value = serde_json::from_str(&text)?;
    let sum = sha256_hex(text.as_bytes());
    // A version 4 layout (random bits from the sum), as CycloneDX asks: urn:uuid.
    let uuid = format!(
        "{}-{}-4{}-{:x}{}-{}",
        &sum[0..8],
        &sum[8..12],
        &sum[13..16],
        0x8 | (u8::from_str_radix(&sum[16..17], 16)? & 0x3),
        &sum[17..20],
        &sum[20..32]
    );
    let Some(object) = document.as_object_mut() else { bail!("an SBOM that is not an object") };
    object.insert("serialNumber".into(), format!("urn:uuid:{uuid}").into());
    let mut bytes = serde_json::to_vec_pretty(&document)?;
    bytes.push(b'\n');
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_serial_number_is_a_uuid_of_the_content_and_no_path_is_left() {
        let here = format!("path+file://{}/podstuck-user#0.1.0", workspace_root().display());
        let document = serde_json::json!({"bomFormat": "CycloneDX", "metadata": {"component": {"bom-ref": here}}});
        let bytes = finish(document.clone()).unwrap();
        assert_eq!(bytes, finish(document).unwrap());
        let read: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(read["metadata"]["component"]["bom-ref"], "path+file:///podstuck/podstuck-user#0.1.0");
        let serial = read["serialNumber"].as_str().unwrap();
        let uuid = serial.strip_prefix("urn:uuid:").unwrap();
        let groups: Vec<usize> = uuid.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12], "{uuid}");
        assert!(uuid.as_bytes()[14] == b'4' && b"89ab".contains(&uuid.as_bytes()[19]), "{uuid}");
    }

    #[test]
    fn the_kernel_programs_join_the_binarys_document_once_each() {
        let mut document = serde_json::json!({
            "metadata": {"component": {"bom-ref": "user", "name": "podstuck"}},
            "components": [{"bom-ref": "common", "name": "podstuck-common"}],
            "dependencies": [{"ref": "user", "dependsOn": ["common"]}, {"ref": "common", "dependsOn": []}]
        });
        let kernel = serde_json::json!({
            "metadata": {"component": {"bom-ref": "ebpf", "name": "podstuck"}},
            "components": [{"bom-ref": "common", "name": "podstuck-common"}, {"bom-ref": "aya-ebpf", "name": "aya-ebpf"}],
            "dependencies": [{"ref": "ebpf", "dependsOn": ["common", "aya-ebpf"]}, {"ref": "common", "dependsOn": []}]
        });
        add_kernel_programs(&mut document, &kernel).unwrap();
        let names: Vec<&str> =
            document["components"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["podstuck-common", "podstuck-ebpf", "aya-ebpf"]);
        assert_eq!(document["dependencies"][0]["dependsOn"], serde_json::json!(["common", "ebpf"]));
        assert_eq!(document["dependencies"].as_array().unwrap().len(), 3);
    }
}
