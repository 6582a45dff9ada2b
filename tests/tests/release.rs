//! What users download (`cargo xtask release`), checked as they use it:
//! the sums with `sha256sum -c`; each tarball's files; the binaries read
//! with binutils (static: no loader, no library, no glibc symbol version);
//! `podstuck --version` and `podstuck check`, and the plugin's
//! `--version`, run inside a Debian 11 root (glibc 2.31, older than the
//! build machine's 2.36), the arm64 ones under QEMU's user emulator; the
//! plugin found and run by Debian's own kubectl where krew installs it;
//! the krew manifest against krew's rules; the SBOMs against the crates
//! the binaries carry and Cargo.lock; and the forge's workflow that makes
//! and signs them on a tag (.github/workflows/release.yml), linted by
//! actionlint with shellcheck on its scripts.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};

use podstuck_tests::harness::ScratchDir;
use podstuck_tests::kernel_test;
use podstuck_tests::krew as krew_rules;
use podstuck_tests::release::{dist, embedded_crates, locked_crates, tarball, unpack, OldRoot, ARCHES, VERSION};
use serde_json::Value;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn said(out: &Output) -> String {
    format!("exit {:?}\nstdout:\n{}\nstderr:\n{}", out.status.code(), text(&out.stdout), text(&out.stderr))
}

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// The release workflow is one actionlint (and shellcheck, on each `run:`)
/// finds nothing in, and it makes what README's Install makes by hand,
/// signs every file and the image, and publishes both on a tag.
#[test]
fn the_release_workflow_passes_actionlint_and_makes_what_install_says() {
    let test = podstuck_tests::prerequisite::this_test();
    let Some(actionlint) = podstuck_tests::kubectl::actionlint(&test) else { return };
    let shellcheck = Path::new("/usr/bin/shellcheck");
    if !shellcheck.is_file() {
        return podstuck_tests::prerequisite::missing(
            &test,
            "/usr/bin/shellcheck, which actionlint runs on each run: script",
            "apt-get install shellcheck, or run `cargo xtask test`, which does",
        );
    }
    let workflow = workspace().join(".github/workflows/release.yml");
    let out = Command::new(&actionlint)
        .arg("-shellcheck")
        .arg(shellcheck)
        .arg("-pyflakes=")
        .arg(&workflow)
        .current_dir(workspace())
        .output()
        .expect("run actionlint");
    assert!(out.status.success(), "actionlint .github/workflows/release.yml: {}", said(&out));
    // And it lints for real: a workflow with a mistake fails.
    let scratch = ScratchDir::new("workflow-lint");
    let broken = scratch.path().join("broken.yml");
    let text = std::fs::read_to_string(&workflow).unwrap();
    std::fs::write(&broken, text.replace("${{ github.ref_name }}", "${{ github.ref_nam }}")).unwrap();
    let out = Command::new(&actionlint).arg("-shellcheck=").arg(&broken).output().unwrap();
    assert!(!out.status.success() && text_of(&out).contains("ref_nam"), "{}", said(&out));
    // What it does: on a tag, README's one command, every file signed,
    // the release published, the image pushed for both architectures and
    // signed by digest.
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    assert!(readme.contains("cargo xtask release && cargo xtask image"), "README's Install command");
    for said in [
        "tags: [\"v*\"]",
        "cargo xtask release --download-url",
        "cargo xtask image",
        "cosign sign-blob",
        "gh release create",
        "skopeo copy --all",
        "cosign sign --yes",
        "id-token: write",
    ] {
        assert!(text.contains(said), ".github/workflows/release.yml does not say {said}");
    }
}

fn text_of(out: &Output) -> String {
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

#[test]
fn sha256sum_checks_every_file_of_the_release() {
    let Some(dist) = dist("sha256sum_checks_every_file_of_the_release") else { return };
    let out =
        Command::new("sha256sum").args(["--check", "--strict", "SHA256SUMS"]).current_dir(&dist).output().unwrap();
    assert!(out.status.success(), "sha256sum -c: {}", said(&out));
    let checked: BTreeSet<String> =
        text(&out.stdout).lines().filter_map(|l| l.strip_suffix(": OK")).map(str::to_string).collect();
    let files: BTreeSet<String> = std::fs::read_dir(&dist)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "SHA256SUMS")
        .collect();
    assert_eq!(checked, files, "SHA256SUMS covers every file of the release but itself");
    let mut expected: BTreeSet<String> = ["podstuck.yaml".to_string()].into();
    for (arch, ..) in ARCHES {
        expected.insert(format!("podstuck-{VERSION}-linux-{arch}.tar.gz"));
        for bin in ["podstuck", "kubectl-podstuck"] {
            expected.insert(format!("podstuck-{VERSION}-linux-{arch}.{bin}.cdx.json"));
        }
    }
    assert_eq!(files, expected);
}

#[test]
fn each_tarball_holds_both_binaries_the_license_texts_and_a_readme_owned_by_root() {
    let Some(dist) = dist("each_tarball_holds_both_binaries_the_license_texts_and_a_readme_owned_by_root") else {
        return;
    };
    for (arch, ..) in ARCHES {
        let out = Command::new("tar").arg("-tvzf").arg(tarball(&dist, arch)).arg("--numeric-owner").output().unwrap();
        assert!(out.status.success(), "tar -t: {}", said(&out));
        let listing = text(&out.stdout);
        let entries: Vec<(&str, &str, &str)> = listing
            .lines()
            .map(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                (words[0], words[1], *words.last().unwrap())
            })
            .collect();
        let names: Vec<&str> = entries.iter().map(|e| e.2).collect();
        assert_eq!(
            names,
            ["LICENSE", "LICENSE-APACHE", "LICENSE-GPL2", "LICENSE-MIT", "README.md", "kubectl-podstuck", "podstuck"],
            "linux/{arch}"
        );
        for (mode, owner, name) in &entries {
            assert_eq!(*owner, "0/0", "{name} in linux/{arch}");
            let want = if name.starts_with("LICENSE") || *name == "README.md" { "-rw-r--r--" } else { "-rwxr-xr-x" };
            assert_eq!(*mode, want, "{name} in linux/{arch}");
        }
        let scratch = ScratchDir::new("release-tarball-texts");
        unpack(&tarball(&dist, arch), scratch.path());
        for license in ["LICENSE", "LICENSE-APACHE", "LICENSE-GPL2", "LICENSE-MIT"] {
            assert_eq!(
                std::fs::read(scratch.path().join(license)).unwrap(),
                std::fs::read(workspace().join(license)).unwrap(),
                "{license}"
            );
        }
        let readme = std::fs::read_to_string(scratch.path().join("README.md")).unwrap();
        assert!(readme.starts_with(&format!("# podstuck {VERSION} for linux/{arch}\n")), "{readme}");
    }
}

/// readelf's answer about `binary`: (`-h`, `-l`, `-d`, `-V`).
fn readelf(binary: &Path) -> [String; 4] {
    ["-hW", "-lW", "-dW", "-VW"].map(|flag| {
        let out = Command::new("readelf").arg(flag).arg(binary).output().expect("run readelf (binutils)");
        assert!(out.status.success(), "readelf {flag}: {}", said(&out));
        text(&out.stdout)
    })
}

#[test]
fn the_binaries_are_static_with_no_loader_no_library_and_no_glibc_version() {
    let scratch = ScratchDir::new("release-static");
    let Some(dist) = dist("the_binaries_are_static_with_no_loader_no_library_and_no_glibc_version") else { return };
    for (arch, machine, elf_machine) in ARCHES {
        let dir = scratch.path().join(arch);
        unpack(&tarball(&dist, arch), &dir);
        for bin in ["podstuck", "kubectl-podstuck"] {
            let [header, program, dynamic, versions] = readelf(&dir.join(bin));
            let about = format!("linux/{arch} {bin}");
            let machine_line = header.lines().find_map(|l| l.trim().strip_prefix("Machine:")).map(str::trim);
            assert_eq!(machine_line, Some(elf_machine), "{about}: {header}");
            assert!(!program.contains("INTERP"), "{about} asks for a loader:\n{program}");
            assert!(!dynamic.contains("(NEEDED)"), "{about} needs a library:\n{dynamic}");
            assert!(!versions.contains("GLIBC_"), "{about} needs a glibc symbol version:\n{versions}");
            if machine == std::env::consts::ARCH {
                // bpftool's release check, in the words of this machine's ldd.
                let out = Command::new("ldd").arg(dir.join(bin)).output().unwrap();
                let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
                assert!(
                    said.contains("not a dynamic executable") || said.contains("statically linked"),
                    "{about}: {said}"
                );
            }
        }
    }
}

/// `podstuck --version`, `podstuck check` and `kubectl-podstuck --version`
/// of `arch`'s tarball inside the Debian 11 root of that architecture.
fn runs_in_debian_11(test: &str, arch: &str) {
    let scratch = ScratchDir::new(test);
    let Some(dist) = dist(test) else { return };
    let Some(root) = OldRoot::of(test, arch) else { return };
    assert_eq!(root.glibc(), "2.31", "Debian 11's glibc");
    let dir = scratch.path().join("podstuck");
    unpack(&tarball(&dist, arch), &dir);
    let out = root.run(&dir, "podstuck", &["--version"], 120);
    assert!(out.status.success(), "podstuck --version in Debian 11 ({arch}): {}", said(&out));
    assert_eq!(text(&out.stdout), format!("podstuck {VERSION}\n"));
    let out = root.run(&dir, "kubectl-podstuck", &["--version"], 120);
    assert!(out.status.success(), "kubectl-podstuck --version in Debian 11 ({arch}): {}", said(&out));
    assert_eq!(text(&out.stdout), format!("kubectl podstuck {VERSION}\n"));
    check_in_debian_11(&root, &dir, arch);
}

/// `podstuck check` in the old root: it starts, reads the kernel and the
/// node through the mounted /proc and /sys, and says its whole verdict,
/// one line each, to its last ("other podstuck"). Natively (amd64 here) it
/// may trace: every kernel line is ok. Under QEMU's user emulator no
/// program loads (the emulator does not pass bpf(2) on), which check says
/// in its privileges line, with exit 2.
fn check_in_debian_11(root: &OldRoot, dir: &Path, arch: &str) {
    let out = root.run(dir, "podstuck", &["check"], 300);
    let output = said(&out);
    let stdout = text(&out.stdout);
    assert!(!text(&out.stderr).contains("GLIBC"), "{output}");
    assert!(stdout.lines().last().is_some_and(|l| l.contains("other podstuck")), "check did not finish: {output}");
    let native = ARCHES.iter().any(|a| a.0 == arch && a.1 == std::env::consts::ARCH);
    if native {
        assert_eq!(out.status.code(), Some(0), "podstuck check in Debian 11 ({arch}): {output}");
        for line in ["privileges", "kernel", "ring buffer", "BTF", "tracefs", "plan"] {
            assert!(
                stdout.lines().any(|l| l.starts_with("ok") && l[5..].trim_start().starts_with(line)),
                "no ok {line}: {output}"
            );
        }
    } else {
        assert!(matches!(out.status.code(), Some(0) | Some(2)), "podstuck check in Debian 11 ({arch}): {output}");
        assert!(stdout.lines().any(|l| l[5..].trim_start().starts_with("privileges")), "{output}");
    }
}

kernel_test! {
    fn the_amd64_podstuck_runs_version_and_check_in_a_debian_11_root(test) {
        runs_in_debian_11(test.name(), "amd64");
    }
}

kernel_test! {
    fn the_arm64_podstuck_runs_version_and_check_in_a_debian_11_root_under_qemu(test) {
        runs_in_debian_11(test.name(), "arm64");
    }
}

kernel_test! {
    /// The API client's name lookup in the static glibc build reads /etc/hosts and DNS only: Debian 11's
    /// libnss_hesiod.so.2 (glibc 2.31) named first in nsswitch.conf is never loaded, where a static glibc
    /// that loaded it would abort (docs/building.md).
    fn the_static_podstuck_looks_up_the_api_server_without_the_nodes_nss_modules(test) {
        let scratch = test.scratch();
        let Some(dist) = dist(test.name()) else { return };
        let Some(root) = OldRoot::of(test.name(), "amd64") else { return };
        let dir = scratch.path().join("podstuck");
        unpack(&tarball(&dist, "amd64"), &dir);
        let nsswitch = scratch.path().join("nsswitch.conf");
        std::fs::write(&nsswitch, "hosts: hesiod files dns\n").unwrap();
        // A CA of its own: the minbase root has no system CA certificates, and rustls wants one.
        let server = format!("localhost:1\n    certificate-authority-data: {TEST_CA}");
        std::fs::write(dir.join("kubeconfig"), KUBECONFIG.replace("127.0.0.1:1", &server)).unwrap();
        let args = ["explain", "web-0", "-n", "shop", "--kubeconfig", "/mnt/kubeconfig"];
        let out = root.run_with(&dir, &[(nsswitch.as_path(), "/etc/nsswitch.conf")], "podstuck", &args, 120);
        assert!(out.status.code().is_some_and(|c| c != 0 && c != 124), "podstuck explain: {}", said(&out));
        let stderr = text(&out.stderr);
        assert!(!stderr.contains("Assertion") && !stderr.contains("libc"), "{}", said(&out));
        assert!(stderr.contains("localhost:1"), "the server looked up and refused: {}", said(&out));
    }
}

kernel_test! {
    fn kubectl_finds_the_plugin_where_krew_installs_it_and_runs_it(test) {
        let scratch = test.scratch();
        let Some(dist) = dist(test.name()) else { return };
        let Some(kubectl) = podstuck_tests::kubectl::real_kubectl(test.name()) else { return };
        let host = ARCHES.iter().find(|a| a.1 == std::env::consts::ARCH).expect("amd64 or arm64").0;
        let manifest = krew_rules::read_manifest(&dist.join("podstuck.yaml"));
        let unpacked = scratch.path().join("download");
        unpack(&tarball(&dist, host), &unpacked);
        let krew_root = scratch.path().join("krew");
        let plugin = krew_rules::install_as_krew_does(&manifest, "linux", host, &unpacked, &krew_root);
        // The plugin calls kubectl by name: the real one, first on PATH.
        let kubectl_bin = scratch.path().join("kubectl-bin");
        std::fs::create_dir_all(&kubectl_bin).unwrap();
        std::os::unix::fs::symlink(&kubectl, kubectl_bin.join("kubectl")).unwrap();
        let path = format!("{}:{}:/usr/sbin:/usr/bin:/sbin:/bin", krew_root.join("bin").display(), kubectl_bin.display());
        // A cluster that is not there: nothing listens on port 1.
        let config = scratch.path().join("kubeconfig");
        std::fs::write(&config, KUBECONFIG).unwrap();
        let kubectl_run = |args: &[&str]| {
            Command::new(&kubectl).args(args).env_clear().env("PATH", &path).env("HOME", scratch.path()).env("KUBECONFIG", &config).output().unwrap()
        };
        let out = kubectl_run(&["plugin", "list"]);
        assert!(out.status.success(), "kubectl plugin list: {}", said(&out));
        assert!(text(&out.stdout).lines().any(|l| Path::new(l.trim()) == plugin), "kubectl plugin list: {}", said(&out));
        let out = kubectl_run(&["podstuck", "--version"]);
        assert!(out.status.success(), "kubectl podstuck --version: {}", said(&out));
        assert_eq!(text(&out.stdout), format!("kubectl podstuck {VERSION}\n"));
        // The plugin asks kubectl back for the pod, and says in its own words that no cluster answered.
        let out = kubectl_run(&["podstuck", "web-0", "-n", "shop", "--image", "registry.example/podstuck:0.1.0"]);
        assert!(!out.status.success(), "kubectl podstuck web-0 without a cluster: {}", said(&out));
        let stderr = text(&out.stderr);
        assert!(stderr.contains("kubectl podstuck: error: cannot reach the cluster: kubectl get pod found no API server answering"), "{}", said(&out));
        assert!(stderr.contains("127.0.0.1:1"), "kubectl's words: {}", said(&out));
    }
}

/// A throwaway self-signed CA certificate (P-256, CN=podstuck-test-ca; no
/// key is kept), base64 as a kubeconfig carries it.
const TEST_CA: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJqVENDQVRPZ0F3SUJBZ0lVUnNQVWc3RERZcFhSK01zayt0cTM2UVNheExvd0NnWUlLb1pJemowRUF3SXcKR3pFWk1CY0dBMVVFQXd3UWNHOWtjM1IxWTJzdGRHVnpkQzFqWVRBZ0Z3MHlOakV4TWpZeE5EUTBNamhhR0E4eQpNVEkyTVRFd01qRTBORFF5T0Zvd0d6RVpNQmNHQTFVRUF3d1FjRzlrYzNSMVkyc3RkR1Z6ZEMxallUQlpNQk1HCkJ5cUdTTTQ5QWdFR0NDcUdTTTQ5QXdFSEEwSUFCSzF3YW9sRmpkY2ZrZWVZYldvZkIvRUlybTh2bmRqbnJLRmYKVit6OEh3TS9iUUZkQkVjc1AzZ2VuclYxMlJGbzFmSEVGQ09uSjdPY205UjJjYkFnd2w2alV6QlJNQjBHQTFVZApEZ1FXQkJUKzFCNTRwUEhTZGplMGQvUWlvQVc0a3BOZnpqQWZCZ05WSFNNRUdEQVdnQlQrMUI1NHBQSFNkamUwCmQvUWlvQVc0a3BOZnpqQVBCZ05WSFJNQkFmOEVCVEFEQVFIL01Bb0dDQ3FHU000OUJBTUNBMGdBTUVVQ0lRRE4KaU5vTGovd2wxTTlGNG54Rzc4VG9wWUUwcmV5TzZBTllUZ2k5NVZwNzd3SWdiZ01vODYxS1M0MENFNzMxMEZ6aAo1NUoyekI4YTNrOVMrdG5sNDMwdzZmZz0KLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=";

/// A kubeconfig of a cluster at a port nothing listens on, with a token:
/// without credentials kubectl 1.20 asks for a user name on its stdin.
const KUBECONFIG: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: gone\n  cluster:\n    server: https://127.0.0.1:1\n\
contexts:\n- name: gone\n  context:\n    cluster: gone\n    user: nobody\ncurrent-context: gone\nusers:\n- name: nobody\n  user: {token: not-a-token}\n";

#[test]
fn the_krew_manifest_follows_krews_rules_and_installs_each_platform() {
    let scratch = ScratchDir::new("release-krew");
    let Some(dist) = dist("the_krew_manifest_follows_krews_rules_and_installs_each_platform") else { return };
    let file = dist.join("podstuck.yaml");
    let manifest = krew_rules::read_manifest(&file);
    let problems = krew_rules::problems(&file, &manifest, &dist);
    assert!(problems.is_empty(), "podstuck.yaml breaks krew's rules:\n{}", problems.join("\n"));
    assert_eq!(manifest["spec"]["version"], format!("v{VERSION}"));
    for (arch, ..) in ARCHES {
        let unpacked = scratch.path().join(arch);
        unpack(&tarball(&dist, arch), &unpacked);
        let plugin = krew_rules::install_as_krew_does(
            &manifest,
            "linux",
            arch,
            &unpacked,
            &scratch.path().join(format!("krew-{arch}")),
        );
        assert!(plugin.is_file(), "{}", plugin.display());
    }
}

/// A change that breaks a manifest.
type Breaking = fn(&mut Value);

#[test]
fn the_krew_rules_catch_a_manifest_that_breaks_them() {
    let Some(dist) = dist("the_krew_rules_catch_a_manifest_that_breaks_them") else { return };
    let file = dist.join("podstuck.yaml");
    let good = krew_rules::read_manifest(&file);
    let broken: [(&str, Breaking); 6] = [
        ("plugin should be named", |m| m["metadata"]["name"] = "pod-stuck".into()),
        ("not starting with 'v'", |m| m["spec"]["version"] = VERSION.into()),
        ("does not match the sha256", |m| m["spec"]["platforms"][0]["sha256"] = "0".repeat(64).into()),
        ("key \"distro\" not supported", |m| {
            m["spec"]["platforms"][1]["selector"]["matchLabels"]["distro"] = "debian".into()
        }),
        ("overlapping selectors", |m| {
            m["spec"]["platforms"][1]["selector"] = m["spec"]["platforms"][0]["selector"].clone()
        }),
        ("is not in the archive", |m| m["spec"]["platforms"][0]["bin"] = "kubectl-pod-stuck".into()),
    ];
    for (says, breaking) in broken {
        let mut manifest = good.clone();
        breaking(&mut manifest);
        let problems = krew_rules::problems(&file, &manifest, &dist);
        assert!(problems.iter().any(|p| p.contains(says)), "no problem saying {says:?}: {problems:?}");
    }
}

#[test]
fn each_sbom_lists_every_crate_its_binary_carries_all_from_cargo_lock() {
    let scratch = ScratchDir::new("release-sbom");
    let Some(dist) = dist("each_sbom_lists_every_crate_its_binary_carries_all_from_cargo_lock") else { return };
    let mut locked: BTreeSet<(String, String)> = locked_crates(&workspace().join("Cargo.lock")).into_iter().collect();
    let kernel_side: BTreeSet<(String, String)> =
        locked_crates(&workspace().join("podstuck-ebpf/Cargo.lock")).into_iter().collect();
    locked.extend(kernel_side.iter().cloned());
    for (arch, ..) in ARCHES {
        let dir = scratch.path().join(arch);
        unpack(&tarball(&dist, arch), &dir);
        for bin in ["podstuck", "kubectl-podstuck"] {
            let sbom: Value = serde_json::from_slice(
                &std::fs::read(dist.join(format!("podstuck-{VERSION}-linux-{arch}.{bin}.cdx.json"))).unwrap(),
            )
            .unwrap();
            let about = format!("the SBOM of linux/{arch} {bin}");
            assert_eq!(sbom["bomFormat"], "CycloneDX", "{about}");
            assert!(sbom["serialNumber"].as_str().is_some_and(|s| s.starts_with("urn:uuid:")), "{about}");
            assert_eq!(sbom["metadata"]["component"]["name"], bin, "{about}");
            let listed: BTreeSet<(String, String)> = sbom["components"]
                .as_array()
                .unwrap_or_else(|| panic!("{about} has no components"))
                .iter()
                .map(|c| (c["name"].as_str().unwrap().to_string(), c["version"].as_str().unwrap().to_string()))
                .collect();
            let not_locked: Vec<_> = listed.difference(&locked).collect();
            assert!(not_locked.is_empty(), "{about} lists crates Cargo.lock does not: {not_locked:?}");
            let carried: BTreeSet<(String, String)> =
                embedded_crates(&dir.join(bin), scratch.path()).into_iter().collect();
            let unlisted: Vec<_> = carried.iter().filter(|c| c.0 != "podstuck-user" && !listed.contains(*c)).collect();
            assert!(unlisted.is_empty(), "{about} misses crates the binary carries: {unlisted:?}");
            assert!(
                carried.len() > 100 || bin == "kubectl-podstuck",
                "{about}: cargo auditable embedded {} crates",
                carried.len()
            );
            if bin == "podstuck" {
                // The kernel programs inside podstuck, and the crates compiled into them, at their
                // locked versions (podstuck-ebpf's build-dependencies, such as aya-build, are not).
                let inside = ["podstuck-ebpf", "aya-ebpf", "aya-ebpf-bindings", "aya-ebpf-cty", "aya-ebpf-macros"];
                let missing: Vec<_> =
                    kernel_side.iter().filter(|c| inside.contains(&c.0.as_str()) && !listed.contains(*c)).collect();
                assert!(missing.is_empty(), "{about} misses the kernel programs' crates: {missing:?}");
                assert_eq!(kernel_side.iter().filter(|c| inside.contains(&c.0.as_str())).count(), inside.len());
            }
        }
    }
}
