//! What users download, as they get it: the release directory of `cargo
//! xtask release` (`$PODSTUCK_DIST`), its tarballs unpacked by the
//! system's `tar`, run inside an old distribution's root, and read with
//! binutils, as a user's tools would.
//!
//! - [`dist`]: the release directory, its tarballs by architecture;
//! - [`unpack`]: a tarball unpacked into a directory of the test's own;
//! - [`OldRoot`]: a Debian 11 root (`$PODSTUCK_DEBIAN11_AMD64`, `..._ARM64`,
//!   made by `cargo xtask test`), a binary run in it by `chroot` with
//!   /proc and /sys mounted, all of it in a mount namespace of its own that
//!   dies with the command, so nothing stays mounted whatever happens;
//! - [`embedded_crates`]: the crate list `cargo auditable` put in a binary.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use crate::prerequisite::missing;

/// How `cargo xtask test` is asked for what these tests need.
const HOW: &str =
    "run `cargo xtask test` (it runs `cargo xtask release` and makes the Debian 11 roots), or set the variable";

/// A path from the environment variable `var`, which must exist.
fn from_env(test: &str, var: &str, what: &str) -> Option<PathBuf> {
    match std::env::var_os(var).map(PathBuf::from) {
        Some(path) if path.exists() => Some(path),
        Some(path) => missing(test, &format!("{what} ({var}={} does not exist)", path.display()), HOW),
        None => missing(test, &format!("{what} ({var} is not set)"), HOW),
    }
}

/// The release directory under test.
pub fn dist(test: &str) -> Option<PathBuf> {
    from_env(test, "PODSTUCK_DIST", "the release directory of cargo xtask release")
}

/// The architectures of a release as Kubernetes and krew name them, each
/// with `uname -m`'s name and its ELF machine as readelf prints it.
pub const ARCHES: [(&str, &str, &str); 2] =
    [("amd64", "x86_64", "Advanced Micro Devices X86-64"), ("arm64", "aarch64", "AArch64")];

/// The workspace's version, which the release carries.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The tarball of `arch` in `dist`.
pub fn tarball(dist: &Path, arch: &str) -> PathBuf {
    dist.join(format!("podstuck-{VERSION}-linux-{arch}.tar.gz"))
}

/// `tarball` unpacked by the system's tar into `dir` (made first).
pub fn unpack(tarball: &Path, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let out = Command::new("tar").arg("-xzf").arg(tarball).arg("-C").arg(dir).output().expect("run tar");
    assert!(out.status.success(), "tar -xzf {}: {}", tarball.display(), String::from_utf8_lossy(&out.stderr));
}

/// A Debian 11 root of one architecture.
pub struct OldRoot {
    root: PathBuf,
    /// `qemu-<arch>-static`, for a root of the other architecture.
    emulator: Option<PathBuf>,
}

impl OldRoot {
    /// The Debian 11 root of `arch` (amd64 or arm64).
    pub fn of(test: &str, arch: &str) -> Option<OldRoot> {
        let var = format!("PODSTUCK_DEBIAN11_{}", arch.to_uppercase());
        let root = from_env(test, &var, &format!("a Debian 11 {arch} root"))?;
        let (_, machine, _) = ARCHES.iter().find(|a| a.0 == arch).expect("amd64 or arm64");
        let emulator = if *machine == std::env::consts::ARCH {
            None
        } else {
            let qemu = PathBuf::from(format!("/usr/bin/qemu-{machine}-static"));
            if !qemu.is_file() {
                return missing(
                    test,
                    &format!("{} to run {arch} binaries", qemu.display()),
                    "install qemu-user-static",
                );
            }
            Some(qemu)
        };
        Some(OldRoot { root, emulator })
    }

    /// Its C library's version, from the loader's file name
    /// (`lib/<gnu>/libc-2.31.so` in bullseye).
    pub fn glibc(&self) -> String {
        let lib = std::fs::read_dir(self.root.join("lib"))
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_dir())
            .flat_map(|e| std::fs::read_dir(e.path()).into_iter().flatten().flatten())
            .filter_map(|e| e.file_name().into_string().ok())
            .find_map(|n| n.strip_prefix("libc-")?.strip_suffix(".so").map(str::to_string));
        lib.unwrap_or_else(|| panic!("no lib/*/libc-*.so in {}", self.root.display()))
    }

    /// `/mnt/<program> ARGS` run in the root, `dir` (the unpacked tarball,
    /// the test's own) seen at /mnt, with /proc mounted and /sys bound in,
    /// as root; within `timeout_s` seconds. The root itself is bound
    /// read-only (a test changes nothing of it), and each of `binds`, a
    /// file of the test's (here, in the root) over one of the root's. The
    /// mounts are made in a mount namespace of the command's own
    /// (`unshare`), private, which ends with it: nothing is mounted on this
    /// machine before or after, whatever happens.
    pub fn run_with(
        &self,
        dir: &Path,
        binds: &[(&Path, &str)],
        program: &str,
        args: &[&str],
        timeout_s: u32,
    ) -> Output {
        let stage = dir.with_extension("root");
        std::fs::create_dir_all(&stage).unwrap();
        let mut inner = String::from("set -e; mount --bind \"$1\" \"$2\"; mount -o remount,bind,ro \"$2\"; ");
        inner.push_str(
            "mount -t proc proc \"$2/proc\"; mount --rbind /sys \"$2/sys\"; mount --bind \"$3\" \"$2/mnt\"; ",
        );
        inner.push_str(
            "root=$2; shift 3; while [ \"$1\" != -- ]; do mount --bind \"$1\" \"$root$2\"; shift 2; done; shift; ",
        );
        inner.push_str("exec chroot \"$root\" \"$@\"");
        let mut command = Command::new("timeout");
        command
            .arg(timeout_s.to_string())
            .args(["unshare", "--mount", "--propagation", "private", "sh", "-c", &inner, "sh"])
            .arg(&self.root)
            .arg(&stage)
            .arg(dir);
        for (file, at) in binds {
            command.arg(file).arg(at);
        }
        command.arg("--");
        if let Some(qemu) = &self.emulator {
            std::fs::copy(qemu, dir.join("qemu")).expect("copy QEMU's user emulator beside the binaries");
            command.arg("/mnt/qemu");
        }
        let out = command
            .arg(format!("/mnt/{program}"))
            .args(args)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .stdin(Stdio::null())
            .output()
            .expect("run unshare and chroot");
        let _ = std::fs::remove_file(dir.join("qemu"));
        out
    }

    /// [`OldRoot::run_with`] with no file bound over the root's.
    pub fn run(&self, dir: &Path, program: &str, args: &[&str], timeout_s: u32) -> Output {
        self.run_with(dir, &[], program, args, timeout_s)
    }
}

/// The crates `cargo auditable` embedded in `binary` that are in it at run
/// time (its `.dep-v0` section: zlib-compressed JSON; build scripts' and
/// proc macros' crates are `"kind": "build"`), as (name, version), read
/// with binutils' objcopy (told the ELF's class, so this machine's objcopy
/// reads the other architecture's too).
pub fn embedded_crates(binary: &Path, scratch: &Path) -> Vec<(String, String)> {
    let section = scratch.join("dep-v0");
    let out = Command::new("objcopy")
        .args(["-I", "elf64-little", "--dump-section"])
        .arg(format!(".dep-v0={}", section.display()))
        .arg(binary)
        .arg(scratch.join("objcopy-out"))
        .output()
        .expect("run objcopy (binutils)");
    assert!(
        out.status.success(),
        "objcopy of {}'s .dep-v0: {}",
        binary.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut json = String::new();
    flate2::read::ZlibDecoder::new(std::fs::File::open(&section).unwrap()).read_to_string(&mut json).unwrap();
    let value: Value = serde_json::from_str(&json).unwrap();
    value["packages"]
        .as_array()
        .expect("the audit data lists packages")
        .iter()
        .filter(|p| p["kind"] != "build")
        .map(|p| (p["name"].as_str().unwrap().to_string(), p["version"].as_str().unwrap().to_string()))
        .collect()
}

/// The crates of a `Cargo.lock`, as (name, version).
pub fn locked_crates(lock: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(lock).unwrap_or_else(|e| panic!("{}: {e}", lock.display()));
    let mut crates = Vec::new();
    for package in text.split("[[package]]").skip(1) {
        let field = |key: &str| {
            package.lines().find_map(|l| {
                l.strip_prefix(key)?.trim().strip_prefix('=')?.trim().strip_prefix('"')?.strip_suffix('"')
            })
        };
        if let (Some(name), Some(version)) = (field("name"), field("version")) {
            crates.push((name.to_string(), version.to_string()));
        }
    }
    crates
}
