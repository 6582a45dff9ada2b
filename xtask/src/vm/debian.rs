//! Debian's archive through a private view of apt: one sources list,
//! lists and cache per suite and architecture under target/vm/apt/, so the
//! machine's own apt state is left alone. The VM test takes its kernels
//! from it, an arm64 guest its programs, and the release tests Debian's
//! kubectl and the mirror their Debian 11 roots come from (`trial`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result};

use crate::cross::Arch;
use crate::host::{run, say};

/// The Debian mirror this machine's apt uses (its `.../debian` URI), so the
/// private sources list goes where the system's does.
pub(crate) fn debian_mirror() -> String {
    let mut texts = Vec::new();
    texts.extend(std::fs::read_to_string("/etc/apt/sources.list").ok());
    if let Ok(dir) = std::fs::read_dir("/etc/apt/sources.list.d") {
        let mut files: Vec<PathBuf> = dir
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "sources" || e == "list"))
            .collect();
        files.sort();
        texts.extend(files.iter().filter_map(|p| std::fs::read_to_string(p).ok()));
    }
    for text in &texts {
        for line in text.lines().map(str::trim).filter(|l| !l.starts_with('#')) {
            // deb822 ("URIs: a b") or one-line ("deb [opts] URI suite ...").
            let uris: Vec<&str> = if let Some(rest) = line.strip_prefix("URIs:") {
                rest.split_whitespace().collect()
            } else if line.starts_with("deb ") {
                line.split_whitespace().filter(|w| w.contains("://")).take(1).collect()
            } else {
                Vec::new()
            };
            if let Some(uri) = uris.into_iter().find(|u| u.trim_end_matches('/').ends_with("/debian")) {
                return uri.trim_end_matches('/').to_string();
            }
        }
    }
    "http://deb.debian.org/debian".to_string()
}

/// apt's options for a private view of one suite: its own sources list,
/// lists and cache, no translations or AppStream metadata, and only the
/// packages of `target`'s architecture (not those of every architecture
/// dpkg on this machine knows).
fn apt_options(dir: &Path, target: Arch) -> Vec<String> {
    let arch = target.debian_arch();
    [
        format!("Dir::Etc::sourcelist={}", dir.join("sources.list").display()),
        "Dir::Etc::sourceparts=-".into(),
        format!("Dir::State::Lists={}", dir.join("lists").display()),
        format!("Dir::Cache={}", dir.join("cache").display()),
        format!("APT::Architecture={arch}"),
        format!("APT::Architectures={arch}"),
        "APT::Sandbox::User=root".into(),
        "Acquire::Languages=none".into(),
        "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false".into(),
        "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false".into(),
        "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false".into(),
        "Acquire::IndexTargets::deb::DEP-11-icons-hidpi::DefaultEnabled=false".into(),
    ]
    .into_iter()
    .flat_map(|o| ["-o".to_string(), o])
    .collect()
}

/// The apt options of `suite` for `target`'s architecture, its package
/// list read (`apt-get update`) into target/vm/apt/<suite> (amd64) or
/// <suite>-<arch>.
pub(crate) fn suite_view(suite: &str, target: Arch) -> Result<Vec<String>> {
    let name = match target {
        Arch::X86_64 => suite.to_string(),
        _ => format!("{suite}-{}", target.debian_arch()),
    };
    let apt = super::vm_dir().join("apt").join(name);
    for sub in ["lists/partial", "cache/archives/partial"] {
        std::fs::create_dir_all(apt.join(sub))?;
    }
    std::fs::write(
        apt.join("sources.list"),
        format!("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {} {suite} main\n", debian_mirror()),
    )?;
    let options = apt_options(&apt, target);
    say(&format!("reading Debian {suite}'s {} package list", target.debian_arch()));
    run(Command::new("apt-get").args(&options).args(["update", "-q"]).stdout(Stdio::null()))?;
    Ok(options)
}

/// Downloads `packages` into a fresh `dir`; returns the .deb files.
fn download(options: &[String], packages: &[String], dir: &Path) -> Result<Vec<PathBuf>> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    run(Command::new("apt-get")
        .args(options)
        .args(["download", "-q"])
        .args(packages)
        .current_dir(dir)
        .stdout(Stdio::null()))?;
    let mut debs: Vec<PathBuf> = std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "deb"))
        .collect();
    debs.sort();
    if debs.len() != packages.len() {
        anyhow::bail!(
            "apt-get download of {} packages left {} .deb files in {}",
            packages.len(),
            debs.len(),
            dir.display()
        );
    }
    Ok(debs)
}

/// This machine's Debian release (`VERSION_CODENAME` of /etc/os-release):
/// the cross toolchain's C library is that release's, so a foreign guest's
/// programs come from it too.
pub(crate) fn host_release() -> Result<String> {
    let text = std::fs::read_to_string("/etc/os-release").context("reading /etc/os-release")?;
    text.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim_matches('"').to_string())
        .filter(|v| !v.is_empty())
        .context("/etc/os-release names no VERSION_CODENAME: which Debian release is this?")
}

/// Downloads `packages` and unpacks them all into `root` (replacing it,
/// only once every one is unpacked, so an interrupted run leaves no half
/// tree where a cache is expected), working in `dir`; returns the .deb
/// files' names (`name_version_arch.deb`).
pub(crate) fn unpack(options: &[String], packages: &[String], dir: &Path, root: &Path) -> Result<Vec<String>> {
    let downloads = dir.join("download");
    let debs = download(options, packages, &downloads)?;
    let unpacking = root.with_extension("partial");
    let _ = std::fs::remove_dir_all(&unpacking);
    for deb in &debs {
        run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&unpacking))?;
    }
    let _ = std::fs::remove_dir_all(root);
    std::fs::rename(&unpacking, root)?;
    let names = debs.iter().filter_map(|d| Some(d.file_name()?.to_str()?.to_string())).collect();
    std::fs::remove_dir_all(&downloads)?;
    Ok(names)
}
