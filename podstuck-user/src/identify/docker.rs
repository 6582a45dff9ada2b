//! Tells which docker container a `/var/lib/docker/overlay2/<layer>` path
//! belongs to, from docker's own layer metadata, for nodes that run pods on
//! dockerd (cri-dockerd).
//!
//! An overlay2 directory is named by a random layer id that says nothing
//! about the container; docker records the link in
//! `<docker_root>/image/overlay2/layerdb/mounts/<container id>/mount-id`.
//! This module only reads that metadata; it does not talk to dockerd (which
//! may be the very thing that is stuck) and does not map containers to pods
//! (that is `cgroups`' job).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::pod::ContainerId;
use super::RescanLimit;

/// Where docker keeps its state unless `--data-root` says otherwise.
pub const DEFAULT_DOCKER_ROOT: &str = "/var/lib/docker";

/// Maps docker overlay2 layer ids to the container that mounts them, from
/// docker's layer metadata: `<docker_root>/image/overlay2/layerdb/mounts/<container id>/mount-id`
/// holds the layer id of the container's read-write layer (its `-init`
/// sibling belongs to the same container).
#[derive(Debug)]
pub struct DockerLayers {
    docker_root: PathBuf,
    by_layer: HashMap<String, ContainerId>,
    rescans: RescanLimit,
}

impl DockerLayers {
    /// An empty map over docker's state at `docker_root` (usually
    /// [`DEFAULT_DOCKER_ROOT`]); the first lookup fills it.
    pub fn new(docker_root: PathBuf) -> DockerLayers {
        DockerLayers { docker_root, by_layer: HashMap::new(), rescans: RescanLimit::default() }
    }

    /// How often a lookup miss may rescan (default 1 s): layers of removed
    /// containers miss forever, and each miss would otherwise re-read the
    /// metadata of every container.
    pub fn set_min_rescan_interval(&mut self, interval: Duration) {
        self.rescans.set_min_interval(interval);
    }

    /// Re-reads the layer metadata now. Containers without a readable,
    /// well-formed `mount-id` are skipped.
    pub fn rescan(&mut self) {
        self.rescans.scanned();
        self.by_layer.clear();
        let mounts = self.docker_root.join("image/overlay2/layerdb/mounts");
        let Ok(entries) = std::fs::read_dir(&mounts) else {
            return;
        };
        for entry in entries.flatten() {
            let Some(container) = entry.file_name().to_str().and_then(ContainerId::parse) else {
                continue;
            };
            if let Some(layer) = read_layer_id(&entry.path().join("mount-id")) {
                self.by_layer.insert(layer, container);
            }
        }
    }

    /// The container whose read-write layer (or its `-init` sibling) is
    /// `layer`; on a miss, rescans at most once per interval and looks again,
    /// since containers are created all the time.
    pub fn container_of_layer(&mut self, layer: &str) -> Option<ContainerId> {
        let layer = layer.strip_suffix("-init").unwrap_or(layer);
        if let Some(container) = self.by_layer.get(layer) {
            return Some(container.clone());
        }
        let due = self.rescans.due();
        if !due {
            return None;
        }
        self.rescan();
        self.by_layer.get(layer).cloned()
    }
}

/// docker writes the id without a newline, but a hand-edited or future file
/// may have one. Anything that is not a layer id is ignored rather than
/// trusted.
fn read_layer_id(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let id = text.trim();
    let ok = id.len() == 64 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    ok.then(|| id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CID: &str = "4f2a1c0d9e8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a29";
    const CID2: &str = "99999c0d9e8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a29";
    const LAYER: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";
    const LAYER2: &str = "0000c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";

    use crate::test_support::TempDir;

    /// What docker records for a container's read-write layer and its
    /// `-init` sibling.
    fn add_mount(root: &TempDir, container: &str, mount_id: &str) {
        let dir = root.0.join("image/overlay2/layerdb/mounts").join(container);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("mount-id"), mount_id).unwrap();
        std::fs::write(dir.join("init-id"), format!("{mount_id}-init")).unwrap();
    }

    #[test]
    fn finds_the_container_of_a_layer_and_of_its_init_sibling() {
        let root = TempDir::new("found");
        add_mount(&root, CID, LAYER);
        let mut layers = DockerLayers::new(root.0.clone());
        let cid = ContainerId::parse(CID).unwrap();
        assert_eq!(layers.container_of_layer(LAYER), Some(cid.clone()));
        assert_eq!(layers.container_of_layer(&format!("{LAYER}-init")), Some(cid));
    }

    #[test]
    fn unknown_layers_and_malformed_metadata_name_no_container() {
        let root = TempDir::new("malformed");
        add_mount(&root, "not-a-container-id", LAYER);
        add_mount(&root, &CID.to_uppercase(), LAYER);
        add_mount(&root, CID, "garbage");
        add_mount(&root, CID2, &LAYER2.to_uppercase());
        let mut layers = DockerLayers::new(root.0.clone());
        for layer in [LAYER, LAYER2, "garbage", "", &LAYER[1..], &format!("{LAYER}-old")] {
            assert_eq!(layers.container_of_layer(layer), None, "{layer}");
        }
        let mut nothing = DockerLayers::new(root.0.join("no-such-root"));
        assert_eq!(nothing.container_of_layer(LAYER), None);
    }

    #[test]
    fn a_trailing_newline_in_mount_id_is_tolerated() {
        let root = TempDir::new("newline");
        add_mount(&root, CID, &format!("{LAYER}\n"));
        let mut layers = DockerLayers::new(root.0.clone());
        assert_eq!(layers.container_of_layer(LAYER), ContainerId::parse(CID));
    }

    #[test]
    fn misses_rescan_at_most_once_per_interval() {
        let root = TempDir::new("rate");
        let mut layers = DockerLayers::new(root.0.clone());
        layers.set_min_rescan_interval(Duration::from_secs(3600));
        assert_eq!(layers.container_of_layer(LAYER), None); // first scan
        add_mount(&root, CID, LAYER);
        assert_eq!(layers.container_of_layer(LAYER), None, "rescanned too soon");
        layers.set_min_rescan_interval(Duration::ZERO);
        assert_eq!(layers.container_of_layer(LAYER), ContainerId::parse(CID));
        // An explicit rescan ignores the interval and forgets removed containers.
        layers.set_min_rescan_interval(Duration::from_secs(3600));
        std::fs::remove_dir_all(root.0.join("image/overlay2/layerdb/mounts").join(CID)).unwrap();
        layers.rescan();
        assert_eq!(layers.container_of_layer(LAYER), None);
    }

    #[test]
    fn the_default_root_is_docker_s() {
        assert_eq!(DEFAULT_DOCKER_ROOT, "/var/lib/docker");
    }
}
