//! The krew manifest of the release (`podstuck.yaml`), as krew's index
//! takes a plugin: `krew.googlecontainertools.github.com/v1alpha2`, kind
//! Plugin, named as its file, a `v`-prefixed semantic version, one
//! platform per tarball selected by `os` and `arch`, each with its
//! download URL, the tarball's sha256 and the plugin's binary. krew copies
//! only the plugin and the license texts out of the tarball (the node's
//! `podstuck` stays out of a laptop's plugin directory). Written as text:
//! the document is small and fixed, and its order is the one krew's own
//! manifests use.

use std::path::Path;

use anyhow::{bail, Context, Result};

use super::{sha256_hex, Built};

/// The manifest's file name: krew requires it to be the plugin's name.
pub const MANIFEST: &str = "podstuck.yaml";

/// What `kubectl krew search` shows, on one line.
const SHORT_DESCRIPTION: &str = "Explain why a pod is stuck in Terminating, from its node's kernel";

/// The manifest of `built`'s tarballs in `dir`, their URLs made from
/// `download_url` (`{version}` and `{file}` replaced).
pub fn manifest(built: &[Built], dir: &Path, version: &str, download_url: &str) -> Result<String> {
    if !download_url.contains("{file}") {
        bail!("--download-url {download_url:?} has no {{file}}: each tarball needs its own URL");
    }
    let mut text = format!(
        "apiVersion: krew.googlecontainertools.github.com/v1alpha2\n\
         kind: Plugin\n\
         metadata:\n  name: podstuck\n\
         spec:\n  version: v{version}\n\
         \x20 shortDescription: {SHORT_DESCRIPTION}\n\
         \x20 description: |\n\
         \x20   Why is this pod stuck in Terminating? kubectl podstuck POD finds the pod's node,\n\
         \x20   starts a debug pod there with the podstuck image, traces the node's unmounts and\n\
         \x20   removals and the pod's process lifecycle with eBPF, and streams back what blocks the\n\
         \x20   pod: a volume still mounted, an immutable file, a held mount, a removal storm, a hung\n\
         \x20   unmount, with the evidence and the command that fixes it. It never changes the node.\n\
         \x20   kubectl podstuck --all lists every stuck pod of the cluster by node and cause.\n\
         \x20 caveats: |\n\
         \x20   kubectl podstuck POD starts a privileged debug pod on the pod's node (as\n\
         \x20   kubectl debug node --profile=sysadmin does) and deletes it when it ends: it needs\n\
         \x20   the rights to create pods there, and the nodes must pull the podstuck image\n\
         \x20   (--image REGISTRY/podstuck:{version}).\n\
         \x20 platforms:\n"
    );
    for part in built {
        let bytes = std::fs::read(dir.join(&part.tarball)).with_context(|| format!("read {}", part.tarball))?;
        let uri = download_url.replace("{version}", version).replace("{file}", &part.tarball);
        text.push_str(&format!(
            "  - selector:\n      matchLabels:\n        os: linux\n        arch: {arch}\n\
             \x20   uri: {uri}\n\
             \x20   sha256: {sha256}\n\
             \x20   bin: kubectl-podstuck\n\
             \x20   files:\n\
             \x20   - from: kubectl-podstuck\n      to: .\n\
             \x20   - from: LICENSE*\n      to: .\n",
            arch = part.arch.debian_arch(),
            sha256 = sha256_hex(&bytes),
        ));
    }
    Ok(text)
}
