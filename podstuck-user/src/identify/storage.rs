//! Tells which container a path of containers/storage belongs to: the
//! storage library of CRI-O, podman and buildah, for nodes that run pods
//! on CRI-O (OpenShift, many on-prem clusters).
//!
//! A container's root filesystem is `<root>/overlay/<layer id>/merged`,
//! and the layer id is not the container id: the store records the link
//! in `<root>/overlay-containers/containers.json` (each container's `id`,
//! `names` and read-write `layer`). Its other state is under
//! `overlay-containers/<container id>/userdata` (`shm`, `config.json`), in
//! the store's root and in its run root.
//!
//! Which roots: CRI-O's and podman's default (`/var/lib/containers/storage`),
//! and every root whose layers a mount table shows mounted (an overlay at
//! `<root>/overlay/<layer id>/merged`): the node's, each mount namespace's
//! at start, and the calling runtime's own on a miss (a runtime in a mount
//! namespace of its own mounts its layers there only). So a store
//! configured elsewhere (`crio.conf` `root`, `storage.conf` `graphroot`)
//! is found by what the kernel says is mounted, never by reading where a
//! path a caller chose points; a root without an index is not kept.
//!
//! When: the index is read at start and again whenever it changes (a stat
//! at every review), because the runtime drops a container from it as its
//! layer's removal begins: by the time that removal fails, only what was
//! read before names the container, and it is kept while calls ask. This
//! module only reads the store's metadata (bounded, never following a link
//! out of the root); it does not talk to the runtime, which may be the very
//! thing that is stuck, and does not map containers to pods (that is
//! `cgroups`' job).

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::pod::ContainerId;
use super::RescanLimit;
use crate::mountinfo::parse_mountinfo;

/// Where CRI-O and podman keep their store unless configured otherwise.
pub const DEFAULT_STORAGE_ROOT: &str = "/var/lib/containers/storage";

/// Stores podstuck reads at most: a node has one or two.
const ROOTS_KEPT: usize = 8;
/// Mount namespaces whose last rescan is remembered: the runtimes of a
/// node (a handful) with room to spare.
const NAMESPACES_KEPT: usize = 64;
/// Rescans at most, in all, per interval of one namespace's.
const RESCANS_PER_INTERVAL: u32 = 4;
/// The largest `containers.json` read: some 600 bytes a container.
const INDEX_LIMIT: u64 = 16 << 20;
/// How long a container gone from its store's index is still named after
/// the last call that asked for it: a failed removal is retried for as
/// long as it is stuck, and each retry names the same container.
const GONE_KEPT: Duration = Duration::from_secs(3600);
/// Containers gone from one store's index kept at most.
const GONE_KEPT_MAX: usize = 1024;
/// Mount namespaces whose tables are read at start: one a container, and
/// a node's few of its own.
const NAMESPACES_READ: usize = 2048;

/// A container of the store, as `containers.json` records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredContainer {
    pub id: ContainerId,
    /// Its first name (podman's `--name`, CRI-O's `k8s_<container>_<pod>_<namespace>_<uid>_<attempt>`),
    /// made safe for a terminal.
    pub name: Option<String>,
}

/// One line of `containers.json`; everything else in it is ignored.
#[derive(serde::Deserialize)]
struct IndexEntry {
    id: String,
    #[serde(default)]
    names: Vec<String>,
    #[serde(default)]
    layer: String,
}

/// Maps containers/storage layer ids to their containers, per store root.
#[derive(Debug)]
pub struct StorageLayers {
    /// What the roots are read under (`/` on the node, the host's root
    /// from a container).
    node_root: PathBuf,
    /// The node's mountinfo, where mounted layers say where stores are.
    mountinfo: PathBuf,
    /// The /proc a caller's own mountinfo is read under.
    proc_root: PathBuf,
    /// The stores found, in the order they were found.
    stores: Vec<Store>,
    rescans: Rescans,
}

/// One store: its root as the node spells it, and the containers its
/// index listed, by read-write layer id.
#[derive(Debug)]
struct Store {
    root: PathBuf,
    /// The index as last read; None before the first read or while absent.
    read: Option<IndexStamp>,
    layers: HashMap<String, Known>,
}

/// A container the index listed. containers/storage drops a container
/// from its index while it removes the container's layer, not after
/// (podman rm, CRI-O's RemoveContainer): when that removal fails, the
/// index no longer names the container whose layer is stuck. So a
/// container is remembered past its index entry, from the last read that
/// listed it, for as long as calls keep asking for it.
#[derive(Debug)]
struct Known {
    container: StoredContainer,
    /// When it left the index, or was last asked for since: None while listed.
    gone: Option<Instant>,
}

/// What says an index changed: a rewrite is a new file renamed in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IndexStamp {
    modified: Option<std::time::SystemTime>,
    len: u64,
    inode: u64,
}

impl IndexStamp {
    fn of(file: &Path) -> Option<IndexStamp> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(file).ok()?;
        Some(IndexStamp { modified: meta.modified().ok(), len: meta.len(), inode: meta.ino() })
    }
}

impl Store {
    fn new(root: PathBuf) -> Store {
        Store { root, read: None, layers: HashMap::new() }
    }

    fn index(&self, node_root: &Path) -> PathBuf {
        node_root.join(self.root.strip_prefix("/").unwrap_or(&self.root)).join("overlay-containers/containers.json")
    }

    /// Reads the index again if it changed since the last read: its
    /// containers listed, those it no longer lists marked gone.
    fn refresh(&mut self, node_root: &Path) {
        self.forget_gone();
        let file = self.index(node_root);
        let stamp = IndexStamp::of(&file);
        if stamp.is_some() && stamp == self.read {
            return;
        }
        let listed = match stamp {
            Some(_) => read_index(&file),
            None => HashMap::new(),
        };
        self.read = stamp;
        let now = Instant::now();
        for (layer, known) in &mut self.layers {
            if known.gone.is_none() && !listed.contains_key(layer) {
                known.gone = Some(now);
            }
        }
        for (layer, container) in listed {
            self.layers.insert(layer, Known { container, gone: None });
        }
    }

    /// Drops the gone containers nobody asked for within [`GONE_KEPT`],
    /// and the least recently asked past [`GONE_KEPT_MAX`].
    fn forget_gone(&mut self) {
        self.layers.retain(|_, k| k.gone.is_none_or(|at| at.elapsed() < GONE_KEPT));
        if self.layers.values().filter(|k| k.gone.is_some()).count() > GONE_KEPT_MAX {
            let mut gone: Vec<(Instant, String)> =
                self.layers.iter().filter_map(|(layer, k)| Some((k.gone?, layer.clone()))).collect();
            // Many leave at one read (a node drained): ties are cut too.
            gone.sort_unstable();
            for (_, layer) in &gone[..gone.len() - GONE_KEPT_MAX] {
                self.layers.remove(layer);
            }
        }
    }

    /// The container of `layer`; a gone one's clock starts again.
    fn container_of_layer(&mut self, layer: &str) -> Option<StoredContainer> {
        let known = self.layers.get_mut(layer)?;
        if known.gone.is_some() {
            known.gone = Some(Instant::now());
        }
        Some(known.container.clone())
    }
}

/// When a miss may rescan: once an interval per caller's mount namespace,
/// and [`RESCANS_PER_INTERVAL`] times an interval in all. A store is found
/// in the mount table of its runtime's namespace, so one limit for the
/// whole node let another runtime's misses (its image layers, never in
/// any `containers.json`) use up every turn, and a container's layer went
/// unnamed for as long as they lasted.
#[derive(Debug)]
struct Rescans {
    all: RescanLimit,
    by_namespace: HashMap<u32, Instant>,
    interval: Duration,
}

impl Default for Rescans {
    fn default() -> Rescans {
        let mut rescans =
            Rescans { all: RescanLimit::default(), by_namespace: HashMap::new(), interval: Duration::ZERO };
        rescans.set_interval(Duration::from_secs(1));
        rescans
    }
}

impl Rescans {
    fn set_interval(&mut self, interval: Duration) {
        self.interval = interval;
        self.all.set_min_interval(interval / RESCANS_PER_INTERVAL);
    }

    fn due(&self, mntns: u32) -> bool {
        self.all.due() && self.by_namespace.get(&mntns).is_none_or(|at| at.elapsed() >= self.interval)
    }

    fn scanned(&mut self, mntns: u32) {
        self.all.scanned();
        if self.by_namespace.len() >= NAMESPACES_KEPT {
            // One whose interval has passed is due anyway: forgetting it changes nothing.
            let interval = self.interval;
            self.by_namespace.retain(|_, at| at.elapsed() < interval);
        }
        if self.by_namespace.len() < NAMESPACES_KEPT {
            self.by_namespace.insert(mntns, Instant::now());
        }
    }
}

impl StorageLayers {
    /// An empty map over the stores of the node reached under `node_root`,
    /// whose mount table is `mountinfo` and processes are under
    /// `proc_root`; [`StorageLayers::discover`] or the first lookup fills it.
    pub fn new(node_root: PathBuf, mountinfo: PathBuf, proc_root: PathBuf) -> StorageLayers {
        StorageLayers { node_root, mountinfo, proc_root, stores: Vec::new(), rescans: Rescans::default() }
    }

    /// How often a lookup miss may rescan for callers of one mount
    /// namespace (default 1 s; four times as often in all).
    pub fn set_min_rescan_interval(&mut self, interval: Duration) {
        self.rescans.set_interval(interval);
    }

    /// Finds the stores at start: the default root, and the roots of the
    /// layers mounted in the node's table and in each mount namespace's
    /// (a runtime in a namespace of its own mounts its layers there only).
    /// Read now, their containers are named when a removal fails later,
    /// after the index dropped them.
    pub fn discover(&mut self) {
        let mut tables = vec![self.mountinfo.clone()];
        tables.extend(namespace_tables(&self.proc_root));
        self.find_stores(&tables);
    }

    /// Reads again each store's index that changed since its last read
    /// (a stat each, at every review), so a container is known before its
    /// removal begins; forgets what expired.
    pub fn refresh(&mut self) {
        for store in &mut self.stores {
            store.refresh(&self.node_root);
        }
        self.stores.retain(|s| s.read.is_some() || !s.layers.is_empty());
    }

    /// Finds the stores again (the default root, the roots of the layers
    /// mounted now in the node's mount table and in process `pid`'s, and
    /// those found before) and re-reads each changed index. `mntns` is the
    /// namespace `pid` was in at its call.
    pub fn rescan(&mut self, pid: u32, mntns: u32) {
        self.rescans.scanned(mntns);
        let tables = [self.proc_root.join(pid.to_string()).join("mountinfo"), self.mountinfo.clone()];
        self.find_stores(&tables);
    }

    /// Adds the stores whose layers `tables` show mounted, and the default
    /// one, if their index is there; the ones known before stay (their gone
    /// containers with them), first found first, [`ROOTS_KEPT`] at most.
    fn find_stores(&mut self, tables: &[PathBuf]) {
        let mut found = vec![PathBuf::from(DEFAULT_STORAGE_ROOT)];
        for table in tables {
            let mountinfo = std::fs::read(table).unwrap_or_default();
            found.extend(parse_mountinfo(&mountinfo).iter().filter_map(store_of_mount));
        }
        self.refresh();
        for root in found {
            if self.stores.iter().any(|s| s.root == root) {
                continue;
            }
            let mut store = Store::new(root);
            // A root that has no index is no store to read: a mount table
            // a workload made cannot fill the list with them.
            if !store.index(&self.node_root).is_file() {
                continue;
            }
            if self.stores.len() >= ROOTS_KEPT {
                // A store whose index went away keeps only what it once
                // listed: a store in use takes its place.
                let Some(gone) = self.stores.iter().position(|s| s.read.is_none()) else { break };
                self.stores.remove(gone);
            }
            store.refresh(&self.node_root);
            self.stores.push(store);
        }
    }

    /// The container whose read-write layer holds `path`
    /// (`<root>/overlay/<layer id>/...` of a store), or whose state it is
    /// (`<root>/overlay-containers/<id>/...`), for a call by process `pid`
    /// in mount namespace `mntns`; on a miss, rescans (see [`Rescans`]),
    /// since containers are created all the time.
    pub fn container_of_path(&mut self, path: &[u8], pid: u32, mntns: u32) -> Option<StoredContainer> {
        if let Some(found) = self.lookup(path) {
            return Some(found);
        }
        // Only a path shaped like a store's is worth reading the mount
        // table and the stores again for: most calls on a node are not.
        if !store_shaped(path) || !self.rescans.due(mntns) {
            return None;
        }
        self.rescan(pid, mntns);
        self.lookup(path)
    }

    fn lookup(&mut self, path: &[u8]) -> Option<StoredContainer> {
        let path = Path::new(std::ffi::OsStr::from_bytes(path));
        self.stores.iter_mut().find_map(|store| {
            let rest = path.strip_prefix(&store.root).ok()?;
            let mut parts = rest.components().filter_map(|c| c.as_os_str().to_str());
            match (parts.next()?, parts.next()?) {
                ("overlay", layer) => store.container_of_layer(layer),
                ("overlay-containers", id) => {
                    let id = ContainerId::parse(id)?;
                    let known = store.layers.values().find(|k| k.container.id == id).map(|k| k.container.clone());
                    Some(known.unwrap_or(StoredContainer { id, name: None }))
                }
                _ => None,
            }
        })
    }
}

/// The mount tables of the node's mount namespaces under `proc_root`,
/// one a namespace (its first process's), [`NAMESPACES_READ`] at most.
fn namespace_tables(proc_root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(proc_root) else { return Vec::new() };
    let mut seen = std::collections::HashSet::new();
    let mut tables = Vec::new();
    for entry in entries.flatten() {
        if !entry.file_name().as_bytes().iter().all(u8::is_ascii_digit) {
            continue;
        }
        let Ok(namespace) = std::fs::read_link(entry.path().join("ns/mnt")) else { continue };
        if seen.insert(namespace) {
            tables.push(entry.path().join("mountinfo"));
            if tables.len() >= NAMESPACES_READ {
                break;
            }
        }
    }
    tables
}

/// Whether a path has a store's shape: `.../overlay/<layer id>/...` or
/// `.../overlay-containers/<container id>/...`.
fn store_shaped(path: &[u8]) -> bool {
    let segments: Vec<&[u8]> = path.split(|b| *b == b'/').filter(|s| !s.is_empty()).collect();
    segments.windows(2).any(|pair| {
        matches!(pair[0], b"overlay" | b"overlay-containers")
            && std::str::from_utf8(pair[1]).ok().and_then(ContainerId::parse).is_some()
    })
}

/// The store a mount is of: a layer mounted at `<root>/overlay/<layer
/// id>/merged`, a container's `<root>/overlay-containers/<id>/userdata/shm`,
/// or the store's own bind of `<root>/overlay` on itself, which the
/// overlay driver makes private and keeps while the store is in use (so
/// the store is found even once its layers are unmounted).
fn store_of_mount(m: &crate::mountinfo::Mount) -> Option<PathBuf> {
    let path = Path::new(std::ffi::OsStr::from_bytes(&m.mount_point));
    if m.fstype == "overlay" {
        // Mounted where the store mounts it, or anywhere else (a copy
        // bound elsewhere, a view of it that outlives the store's own
        // unmount): its upper directory, which the kernel reports, is
        // `<root>/overlay/<layer id>/diff`.
        return store_of_layer_mount(&m.mount_point).or_else(|| store_of_upper_dir(&m.super_options));
    }
    if path.ends_with("userdata/shm") {
        let container = path.parent()?.parent()?;
        ContainerId::parse(container.file_name()?.to_str()?)?;
        let index = container.parent()?;
        return (index.file_name()? == "overlay-containers").then(|| index.parent().map(Path::to_path_buf))?;
    }
    let own_bind = path.file_name()? == "overlay" && m.root.ends_with(b"/overlay");
    own_bind.then(|| path.parent().map(Path::to_path_buf))?
}

/// `<root>` of a layer's mount point `<root>/overlay/<layer id>/merged`.
fn store_of_layer_mount(mount_point: &[u8]) -> Option<PathBuf> {
    let path = Path::new(std::ffi::OsStr::from_bytes(mount_point));
    if path.file_name()? != "merged" {
        return None;
    }
    let layer = path.parent()?;
    ContainerId::parse(layer.file_name()?.to_str()?)?;
    let overlay = layer.parent()?;
    if overlay.file_name()? != "overlay" {
        return None;
    }
    Some(overlay.parent()?.to_path_buf())
}

/// `<root>` of an overlay whose options name `upperdir=<root>/overlay/<layer id>/diff`.
fn store_of_upper_dir(options: &str) -> Option<PathBuf> {
    let upper = options.split(',').find_map(|o| o.strip_prefix("upperdir="))?;
    let path = Path::new(upper);
    if path.file_name()? != "diff" {
        return None;
    }
    let layer = path.parent()?;
    ContainerId::parse(layer.file_name()?.to_str()?)?;
    let overlay = layer.parent()?;
    (overlay.file_name()? == "overlay").then(|| overlay.parent().map(Path::to_path_buf))?
}

/// A store's `containers.json`: read-write layer id to container. A file
/// that cannot be read, or is not the store's JSON, maps nothing.
fn read_index(file: &Path) -> HashMap<String, StoredContainer> {
    use std::io::Read;
    let Ok(opened) = crate::files::open_regular(file) else { return HashMap::new() };
    let mut text = Vec::new();
    if opened.take(INDEX_LIMIT + 1).read_to_end(&mut text).is_err() || text.len() as u64 > INDEX_LIMIT {
        return HashMap::new();
    }
    let entries: Vec<IndexEntry> = serde_json::from_slice(&text).unwrap_or_default();
    entries
        .into_iter()
        .filter_map(|e| {
            let id = ContainerId::parse(&e.id)?;
            // A layer id is 64 lowercase hex, like a container's.
            ContainerId::parse(&e.layer)?;
            let name = e.names.first().map(|n| crate::words::terminal_safe(n).into_owned());
            Some((e.layer, StoredContainer { id, name }))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TempDir;

    const CID: &str = "4f2a1c0d9e8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a29";
    const LAYER: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";
    const OTHER: &str = "0000c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";

    /// A node whose store is at `root` (relative to the node's `/`), with
    /// `layer` mounted when `mounted`, and `json` as containers.json.
    fn node(name: &str, root: &str, json: &str, mounted: bool) -> (TempDir, StorageLayers) {
        let tmp = TempDir::new(name);
        let store = tmp.0.join("node").join(root.trim_start_matches('/'));
        std::fs::create_dir_all(store.join("overlay-containers")).unwrap();
        std::fs::write(store.join("overlay-containers/containers.json"), json).unwrap();
        let mountinfo = match mounted {
            true => format!("90 1 0:60 / {root}/overlay/{LAYER}/merged rw - overlay overlay rw,lowerdir=/x\n"),
            false => String::new(),
        };
        std::fs::write(tmp.0.join("mountinfo"), mountinfo).unwrap();
        std::fs::create_dir_all(tmp.0.join("proc/7")).unwrap();
        let layers = StorageLayers::new(tmp.0.join("node"), tmp.0.join("mountinfo"), tmp.0.join("proc"));
        (tmp, layers)
    }

    fn index(id: &str, name: &str, layer: &str) -> String {
        format!(r#"[{{"id":"{id}","names":["{name}"],"image":"{OTHER}","layer":"{layer}","metadata":"{{}}"}}]"#)
    }

    #[test]
    fn a_layer_of_a_store_found_by_its_mount_names_its_container() {
        let (_tmp, mut layers) = node("found", "/srv/store", &index(CID, "web", LAYER), true);
        let want = StoredContainer { id: ContainerId::parse(CID).unwrap(), name: Some("web".into()) };
        let merged = format!("/srv/store/overlay/{LAYER}/merged");
        assert_eq!(layers.container_of_path(merged.as_bytes(), 7, 1), Some(want.clone()));
        assert_eq!(
            layers.container_of_path(format!("/srv/store/overlay/{LAYER}/diff/etc").as_bytes(), 7, 1),
            Some(want.clone())
        );
        let shm = format!("/srv/store/overlay-containers/{CID}/userdata/shm");
        assert_eq!(layers.container_of_path(shm.as_bytes(), 7, 1), Some(want));
        assert_eq!(layers.container_of_path(format!("/srv/store/overlay/{OTHER}/merged").as_bytes(), 7, 1), None);
        assert_eq!(layers.container_of_path(b"/srv/other/overlay/x/merged", 7, 1), None);
    }

    #[test]
    fn the_default_store_is_read_unmounted_and_a_store_elsewhere_only_once_mounted() {
        let (_tmp, mut layers) = node("default", DEFAULT_STORAGE_ROOT, &index(CID, "web", LAYER), false);
        let merged = format!("{DEFAULT_STORAGE_ROOT}/overlay/{LAYER}/merged");
        assert_eq!(
            layers.container_of_path(merged.as_bytes(), 7, 1).map(|c| c.id.as_str().to_string()),
            Some(CID.into())
        );
        let (_tmp, mut layers) = node("elsewhere", "/srv/store", &index(CID, "web", LAYER), false);
        assert_eq!(layers.container_of_path(format!("/srv/store/overlay/{LAYER}/merged").as_bytes(), 7, 1), None);
    }

    #[test]
    fn a_damaged_or_hostile_index_names_nothing_and_names_are_made_safe() {
        for json in ["", "{}", "[{\"id\":\"x\",\"layer\":\"y\"}]", &index(CID, "web", "not-a-layer")] {
            let (_tmp, mut layers) = node("damaged", "/srv/store", json, true);
            let merged = format!("/srv/store/overlay/{LAYER}/merged");
            assert_eq!(layers.container_of_path(merged.as_bytes(), 7, 1), None, "{json}");
        }
        let (_tmp, mut layers) = node("hostile", "/srv/store", &index(CID, "web\\u001b[2J", LAYER), true);
        let merged = format!("/srv/store/overlay/{LAYER}/merged");
        let name = layers.container_of_path(merged.as_bytes(), 7, 1).unwrap().name.unwrap();
        assert!(!name.contains('\u{1b}'), "{name:?}");
    }

    /// podman rm unmounted the layer, but a view of it bound elsewhere
    /// keeps a copy of its overlay (what holds the removal): the store is
    /// found by the upper directory the kernel reports for that copy.
    #[test]
    fn a_store_is_found_by_the_upper_directory_of_a_copy_mounted_elsewhere() {
        let (tmp, mut layers) = node("view", "/srv/store", &index(CID, "web", LAYER), false);
        let merged = format!("/srv/store/overlay/{LAYER}/merged");
        let copy = format!(
            "91 1 0:60 / /backup/view/merged rw - overlay overlay rw,lowerdir=/srv/store/overlay/l/ABC,upperdir=/srv/store/overlay/{LAYER}/diff,workdir=/srv/store/overlay/{LAYER}/work\n"
        );
        std::fs::write(tmp.0.join("proc/7/mountinfo"), copy).unwrap();
        assert_eq!(
            layers.container_of_path(merged.as_bytes(), 7, 1).map(|c| c.id.as_str().to_string()),
            Some(CID.into())
        );
        // An upper directory of another shape names no store.
        assert_eq!(store_of_upper_dir("rw,upperdir=/srv/x/diff,workdir=/srv/x/work"), None);
        assert_eq!(store_of_upper_dir(&format!("rw,upperdir=/srv/store/layers/{LAYER}/diff")), None);
    }

    /// A runtime in a mount namespace of its own (a node container, or
    /// podman with cgroup2 hidden): its layers are mounted in its table
    /// only, and the store is found there.
    #[test]
    fn a_store_mounted_in_the_callers_namespace_only_is_found_there() {
        let (tmp, mut layers) = node("namespace", "/srv/store", &index(CID, "web", LAYER), false);
        let merged = format!("/srv/store/overlay/{LAYER}/merged");
        std::fs::write(tmp.0.join("proc/7/mountinfo"), format!("90 1 0:60 / {merged} rw - overlay overlay rw\n"))
            .unwrap();
        assert_eq!(layers.container_of_path(merged.as_bytes(), 8, 2), None, "another process's table shows nothing");
        layers.set_min_rescan_interval(Duration::ZERO);
        assert!(layers.container_of_path(merged.as_bytes(), 7, 1).is_some());
        // Once found, kept while another caller's rescan does not see it.
        assert!(layers
            .container_of_path(format!("/srv/store/overlay-containers/{CID}/userdata").as_bytes(), 8, 2)
            .is_some());
    }

    /// podman rm and CRI-O drop the container from the index as its
    /// layer's removal begins: a store read before still names it.
    #[test]
    fn a_container_the_index_dropped_is_still_named_while_asked_for() {
        let (tmp, mut layers) = node("dropped", "/srv/store", &index(CID, "web", LAYER), true);
        layers.discover();
        let file = tmp.0.join("node/srv/store/overlay-containers/containers.json");
        std::fs::write(&file, "[]").unwrap();
        layers.refresh();
        let merged = format!("/srv/store/overlay/{LAYER}/merged");
        let named = layers.container_of_path(merged.as_bytes(), 7, 1).map(|c| c.id.as_str().to_string());
        assert_eq!(named, Some(CID.into()));
        let store = &mut layers.stores[0];
        assert!(store.layers[LAYER].gone.is_some(), "marked gone");
        // Unasked for past the time kept, forgotten.
        store.layers.get_mut(LAYER).unwrap().gone = Instant::now().checked_sub(GONE_KEPT);
        layers.refresh();
        layers.rescans.set_interval(Duration::from_secs(3600));
        layers.rescans.scanned(1);
        assert_eq!(layers.container_of_path(merged.as_bytes(), 7, 1), None);
    }

    #[test]
    fn gone_containers_kept_are_bounded_the_least_recently_asked_forgotten_first() {
        let mut store = Store::new(PathBuf::from("/srv/store"));
        let long_ago = Instant::now().checked_sub(Duration::from_secs(60)).unwrap();
        for n in 0..GONE_KEPT_MAX + 10 {
            let container = StoredContainer { id: ContainerId::parse(CID).unwrap(), name: None };
            let asked = if n < 10 { long_ago } else { Instant::now() };
            store.layers.insert(format!("{n:064x}"), Known { container, gone: Some(asked) });
        }
        let listed = StoredContainer { id: ContainerId::parse(CID).unwrap(), name: None };
        store.layers.insert(LAYER.into(), Known { container: listed, gone: None });
        store.forget_gone();
        assert_eq!(store.layers.len(), GONE_KEPT_MAX + 1);
        let at_once = Instant::now();
        for known in store.layers.values_mut() {
            known.gone = known.gone.map(|_| at_once);
        }
        for n in 0..10 {
            let container = StoredContainer { id: ContainerId::parse(CID).unwrap(), name: None };
            store.layers.insert(format!("{:064x}", 5000 + n), Known { container, gone: Some(at_once) });
        }
        store.forget_gone();
        assert_eq!(store.layers.len(), GONE_KEPT_MAX + 1, "ties are cut too");
        assert!(store.layers.contains_key(LAYER));
        assert!(store.layers.contains_key(LAYER), "a listed container is never forgotten");
        assert!((0..10).all(|n| !store.layers.contains_key(&format!("{n:064x}"))), "the oldest asked went first");
    }

    /// A runtime in a mount namespace of its own, running before podstuck
    /// starts: its store is found in that namespace's table at start.
    #[test]
    fn stores_mounted_in_any_namespace_are_found_at_start() {
        let (tmp, mut layers) = node("at-start", "/srv/store", &index(CID, "web", LAYER), false);
        let merged = format!("/srv/store/overlay/{LAYER}/merged");
        std::fs::create_dir_all(tmp.0.join("proc/9/ns")).unwrap();
        std::fs::create_dir_all(tmp.0.join("proc/7/ns")).unwrap();
        std::os::unix::fs::symlink("mnt:[1]", tmp.0.join("proc/7/ns/mnt")).unwrap();
        std::os::unix::fs::symlink("mnt:[2]", tmp.0.join("proc/9/ns/mnt")).unwrap();
        std::fs::write(tmp.0.join("proc/9/mountinfo"), format!("90 1 0:60 / {merged} rw - overlay overlay rw\n"))
            .unwrap();
        layers.discover();
        assert_eq!(layers.stores.len(), 1);
        std::fs::write(tmp.0.join("node/srv/store/overlay-containers/containers.json"), "[]").unwrap();
        layers.refresh();
        layers.rescans.set_interval(Duration::from_secs(3600));
        layers.rescans.scanned(5);
        assert!(layers.container_of_path(merged.as_bytes(), 8, 5).is_some(), "named without a rescan");
    }

    /// A store removed (a test's, a runtime's scratch) keeps what it
    /// listed while asked for, but gives its place to a store in use.
    #[test]
    fn a_removed_stores_place_goes_to_a_store_in_use() {
        let (tmp, mut layers) = node("removed", "/srv/store", &index(CID, "web", LAYER), true);
        layers.discover();
        let mut table = String::new();
        for n in 0..ROOTS_KEPT {
            let store = tmp.0.join(format!("node/srv/s{n}/overlay-containers"));
            std::fs::create_dir_all(&store).unwrap();
            std::fs::write(store.join("containers.json"), "[]").unwrap();
            table.push_str(&format!("{} 1 0:60 / /srv/s{n}/overlay/{LAYER}/merged rw - overlay overlay rw\n", 100 + n));
        }
        std::fs::remove_dir_all(tmp.0.join("node/srv/store")).unwrap();
        std::fs::write(tmp.0.join("mountinfo"), table).unwrap();
        layers.discover();
        let roots: Vec<String> = layers.stores.iter().map(|s| s.root.display().to_string()).collect();
        assert_eq!(roots.len(), ROOTS_KEPT);
        assert!(!roots.contains(&"/srv/store".to_string()), "{roots:?}");
        assert!(roots.contains(&format!("/srv/s{}", ROOTS_KEPT - 1)), "{roots:?}");
    }

    /// Mount tables a workload can write (its own namespace's) naming
    /// roots that hold no index do not crowd the real store out.
    #[test]
    fn roots_without_an_index_are_not_kept() {
        let (tmp, mut layers) = node("crowd", "/srv/store", &index(CID, "web", LAYER), false);
        let mut table: String = (0..2 * ROOTS_KEPT)
            .map(|n| format!("{} 1 0:60 / /fake{n}/overlay/{LAYER}/merged rw - overlay overlay rw\n", 100 + n))
            .collect();
        table.push_str(&format!("90 1 0:60 / /srv/store/overlay/{LAYER}/merged rw - overlay overlay rw\n"));
        std::fs::write(tmp.0.join("mountinfo"), table).unwrap();
        layers.discover();
        let roots: Vec<&Path> = layers.stores.iter().map(|s| s.root.as_path()).collect();
        assert_eq!(roots, [Path::new("/srv/store")]);
    }

    #[test]
    fn only_paths_shaped_like_a_store_rescan() {
        assert!(store_shaped(format!("/x/overlay/{LAYER}/merged").as_bytes()));
        assert!(store_shaped(format!("/x/overlay-containers/{CID}/userdata/shm").as_bytes()));
        assert!(!store_shaped(b"/var/lib/kubelet/pods/x/volumes/a"));
        assert!(!store_shaped(format!("/x/overlay2/{LAYER}/merged").as_bytes()));
    }

    #[test]
    fn a_stores_own_bind_and_a_containers_shm_name_the_store_too() {
        let text = format!(
            "58 44 254:0 /srv/store/overlay /srv/store/overlay rw - ext4 /dev/vda rw\n\
             65 44 0:39 / /run/s/overlay-containers/{CID}/userdata/shm rw - tmpfs shm rw\n\
             66 44 254:0 /data /srv/other/overlay rw - ext4 /dev/vda rw\n"
        );
        let mounts = parse_mountinfo(text.as_bytes());
        let stores: Vec<Option<PathBuf>> = mounts.iter().map(store_of_mount).collect();
        assert_eq!(stores, [Some(PathBuf::from("/srv/store")), Some(PathBuf::from("/run/s")), None]);
    }

    #[test]
    fn only_a_layer_mount_point_names_a_store() {
        let store = |p: &str| store_of_layer_mount(p.as_bytes());
        assert_eq!(store(&format!("/a/b/overlay/{LAYER}/merged")), Some(PathBuf::from("/a/b")));
        assert_eq!(store(&format!("/a/b/overlay/{LAYER}/diff")), None);
        assert_eq!(store("/a/b/overlay/short/merged"), None);
        assert_eq!(store(&format!("/a/b/overlay2/{LAYER}/merged")), None);
    }

    #[test]
    fn misses_rescan_at_most_once_per_interval() {
        let (tmp, mut layers) = node("rate", "/srv/store", "[]", true);
        layers.set_min_rescan_interval(Duration::from_secs(3600));
        let merged = format!("/srv/store/overlay/{LAYER}/merged");
        assert_eq!(layers.container_of_path(merged.as_bytes(), 7, 1), None);
        std::fs::write(tmp.0.join("node/srv/store/overlay-containers/containers.json"), index(CID, "web", LAYER))
            .unwrap();
        assert_eq!(layers.container_of_path(merged.as_bytes(), 7, 1), None, "rescanned too soon");
        layers.set_min_rescan_interval(Duration::ZERO);
        assert!(layers.container_of_path(merged.as_bytes(), 7, 1).is_some());
    }

    /// Another runtime's misses (its image layers, in no containers.json)
    /// come every moment: they must not use up the turn of the runtime
    /// whose namespace shows the store.
    #[test]
    fn another_namespaces_misses_leave_a_callers_rescan_its_turn() {
        let (tmp, mut layers) = node("turns", "/srv/store", &index(CID, "web", LAYER), false);
        layers.set_min_rescan_interval(Duration::from_secs(3600));
        let merged = format!("/srv/store/overlay/{LAYER}/merged");
        std::fs::write(tmp.0.join("proc/7/mountinfo"), format!("90 1 0:60 / {merged} rw - overlay overlay rw\n"))
            .unwrap();
        let image_layer = format!("/var/lib/other/overlay/{OTHER}/diff/etc/x");
        assert_eq!(layers.container_of_path(image_layer.as_bytes(), 8, 2), None);
        assert_eq!(layers.container_of_path(image_layer.as_bytes(), 8, 2), None);
        // The global floor is a quarter of the interval: wait it out as a node would.
        layers.rescans.all = RescanLimit::default();
        assert!(layers.container_of_path(merged.as_bytes(), 7, 1).is_some(), "namespace 1's first miss rescans");
        // Past the cap of namespaces kept, each still gets its turn.
        layers.rescans.set_interval(Duration::from_secs(3600));
        layers.rescans.all.set_min_interval(Duration::ZERO);
        for ns in 100..100 + 2 * NAMESPACES_KEPT as u32 {
            assert!(layers.rescans.due(ns));
            layers.rescans.scanned(ns);
        }
        assert!(layers.rescans.by_namespace.len() <= NAMESPACES_KEPT);
    }
}
