//! Where this node's CNI plugins are, and which files they are as the
//! kernel names them (superblock device and inode): the exec program
//! streams an exec only when the file the kernel runs is one of these, so
//! a workload's own `/opt/cni/bin/calico` in its own mount namespace, or a
//! path string that merely says so, is never taken for the node's plugin.
//!
//! The places: the directories real nodes use (the CNI project's
//! `/opt/cni/bin`, Debian's `/usr/lib/cni`, RHEL's and CRI-O's
//! `/usr/libexec/cni`, OpenShift and Multus' `/var/lib/cni/bin`, GKE's
//! `/home/kubernetes/bin`), those the node's containerd and CRI-O
//! configurations name, those the user names (`--cni-plugin-dir`), and
//! k3s' multi-call `cni` binary (its bin directory also holds runc and
//! the shims, whose every exec is none of this). Read again whenever a
//! directory changes, so a plugin installed after the start (a CNI
//! DaemonSet's installer) is known at the next review.
//!
//! Not this module's: deciding whether an exec of a plugin file is the
//! node's runtime at work (`lifecycle::provenance`).

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use podstuck_common::{lifecycle::PLUGIN_FILES_MAX, PluginFile};

use crate::mountinfo::{kernel_dev, parse_mountinfo};
use crate::node_access::Node;

/// The plugin directories of real nodes, in the node's spelling.
pub const DEFAULT_PLUGIN_DIRS: [&str; 5] =
    ["/opt/cni/bin", "/usr/lib/cni", "/usr/libexec/cni", "/var/lib/cni/bin", "/home/kubernetes/bin"];

/// k3s' CNI plugins: symlinks to one multi-call binary, `cni`, in the
/// directory of the running data (`current`) and, from v1.28, in `cni/`.
pub const K3S_CNI_BINARY: &str = "/var/lib/rancher/k3s/data/current/bin/cni";
pub const K3S_CNI_DIR: &str = "/var/lib/rancher/k3s/data/cni";

/// The runtimes' configuration files that name plugin directories.
const CONTAINERD_CONFIGS: [&str; 2] =
    ["/etc/containerd/config.toml", "/var/lib/rancher/k3s/agent/etc/containerd/config.toml"];
const CRIO_CONFIG: &str = "/etc/crio/crio.conf";
const CRIO_CONFIG_DIR: &str = "/etc/crio/crio.conf.d";

/// Files a plugin directory may hold that are no CNI plugin: a
/// configured bin directory shared with the runtime (k3s' data
/// directory) would otherwise stream every runc exec with its environment.
const NOT_PLUGINS: [&str; 10] =
    ["runc", "crun", "containerd", "ctr", "crictl", "k3s", "kubectl", "conntrack", "socat", "busybox"];

/// Files read from one directory at most: a directory of thousands is no
/// plugin directory, and the kernel's table is bounded.
const FILES_PER_DIR_MAX: usize = 512;

/// Where a plugin place was learnt, as `check` and the docs say it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    Default,
    Containerd(PathBuf),
    Crio(PathBuf),
    /// `--cni-plugin-dir`.
    User,
}

impl Source {
    pub fn words(&self) -> String {
        match self {
            Source::Default => "a default".into(),
            Source::Containerd(file) => format!("containerd's {}", file.display()),
            Source::Crio(file) => format!("CRI-O's {}", file.display()),
            Source::User => "--cni-plugin-dir".into(),
        }
    }
}

/// A directory (every plugin in it) or one file, in the node's spelling.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Place {
    Dir(PathBuf),
    File(PathBuf),
}

/// The places of this node's plugins, each with where it was learnt.
#[derive(Clone, Debug, Default)]
pub struct PluginPlaces {
    pub places: Vec<(Place, Source)>,
    /// Configuration files that could not be read as TOML, with why.
    pub unreadable: Vec<String>,
}

impl PluginPlaces {
    /// The defaults, the directories the node's containerd and CRI-O
    /// configurations name, and `extra` (the user's, in the node's spelling).
    pub fn of_this_node(node: &Node, extra: &[PathBuf]) -> PluginPlaces {
        let mut found = PluginPlaces::default();
        let add = |places: &mut PluginPlaces, place: Place, source: Source| {
            if !places.places.iter().any(|(p, _)| *p == place) {
                places.places.push((place, source));
            }
        };
        for dir in DEFAULT_PLUGIN_DIRS {
            add(&mut found, Place::Dir(dir.into()), Source::Default);
        }
        add(&mut found, Place::File(K3S_CNI_BINARY.into()), Source::Default);
        add(&mut found, Place::Dir(K3S_CNI_DIR.into()), Source::Default);
        for config in CONTAINERD_CONFIGS {
            let Some(text) = read_config(node, Path::new(config)) else { continue };
            match containerd_bin_dirs(&text) {
                Ok(dirs) => {
                    dirs.into_iter().for_each(|d| add(&mut found, Place::Dir(d), Source::Containerd(config.into())))
                }
                Err(e) => found.unreadable.push(format!("{config}: {e}")),
            }
        }
        let mut crio: Vec<PathBuf> = vec![CRIO_CONFIG.into()];
        if let Ok(dir) = std::fs::read_dir(node.path(CRIO_CONFIG_DIR)) {
            let mut drop_ins: Vec<PathBuf> = dir
                .flatten()
                .map(|e| Path::new(CRIO_CONFIG_DIR).join(e.file_name()))
                .filter(|p| p.extension().is_some_and(|x| x == "conf"))
                .collect();
            // CRI-O reads its drop-ins in lexical order, each over the last.
            drop_ins.sort();
            crio.extend(drop_ins);
        }
        for config in crio {
            let Some(text) = read_config(node, &config) else { continue };
            match crio_plugin_dirs(&text) {
                Ok(dirs) => dirs.into_iter().for_each(|d| add(&mut found, Place::Dir(d), Source::Crio(config.clone()))),
                Err(e) => found.unreadable.push(format!("{}: {e}", config.display())),
            }
        }
        for dir in extra {
            add(&mut found, Place::Dir(dir.clone()), Source::User);
        }
        found
    }
}

/// A configuration file, if there is one; at most 1 MiB of it.
fn read_config(node: &Node, path: &Path) -> Option<String> {
    use std::io::Read;
    let file = std::fs::File::open(node.path(path)).ok()?;
    let mut text = String::new();
    file.take(1 << 20).read_to_string(&mut text).ok()?;
    Some(text)
}

/// Absolute paths of a TOML value that is a string or a list of them.
fn paths_of(value: Option<&toml::Value>) -> Vec<PathBuf> {
    let strings: Vec<&str> = match value {
        Some(toml::Value::String(s)) => vec![s],
        Some(toml::Value::Array(list)) => list.iter().filter_map(|v| v.as_str()).collect(),
        _ => Vec::new(),
    };
    strings.into_iter().filter(|s| s.starts_with('/')).map(PathBuf::from).collect()
}

/// The plugin directories of a containerd configuration: the CRI
/// plugin's `cni.bin_dir` (containerd 1.x, `io.containerd.grpc.v1.cri`)
/// or `bin_dir`/`bin_dirs` (2.x, `io.containerd.cri.v1.runtime`).
pub fn containerd_bin_dirs(text: &str) -> Result<Vec<PathBuf>, String> {
    let config: toml::Table = text.parse().map_err(|e: toml::de::Error| e.message().to_string())?;
    let mut dirs = Vec::new();
    let plugins = config.get("plugins").and_then(|p| p.as_table());
    for plugin in ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "cri"] {
        let cni = plugins.and_then(|p| p.get(plugin)).and_then(|p| p.get("cni"));
        for key in ["bin_dir", "bin_dirs"] {
            dirs.extend(paths_of(cni.and_then(|c| c.get(key))));
        }
    }
    Ok(dirs)
}

/// The plugin directories of a CRI-O configuration: `[crio.network]`'s
/// `plugin_dirs` (and the older `plugin_dir`).
pub fn crio_plugin_dirs(text: &str) -> Result<Vec<PathBuf>, String> {
    let config: toml::Table = text.parse().map_err(|e: toml::de::Error| e.message().to_string())?;
    let network = config.get("crio").and_then(|c| c.get("network"));
    let mut dirs = paths_of(network.and_then(|n| n.get("plugin_dirs")));
    dirs.extend(paths_of(network.and_then(|n| n.get("plugin_dir"))));
    Ok(dirs)
}

/// A directory's stamp: a plugin added, removed or replaced (a rename
/// into it) moves its modification time.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.ino()))
}

/// The node's plugin files as the kernel names them, with their paths.
#[derive(Debug, Default)]
pub struct PluginFiles {
    files: BTreeMap<PluginFile, PathBuf>,
    stamps: Vec<(PathBuf, Stamp)>,
    /// Files left out: past a directory's or the kernel table's bound.
    pub left_out: usize,
}

impl PluginFiles {
    /// Reads every place of `places`.
    pub fn scan(node: &Node, places: &PluginPlaces) -> PluginFiles {
        let devices = KernelDevices::read();
        let mut files = BTreeMap::new();
        let mut stamps = Vec::new();
        let mut left_out = 0;
        for (place, _) in &places.places {
            match place {
                Place::File(path) => {
                    if let Some(id) = devices.id_of(&node.path(path)) {
                        files.insert(id, path.clone());
                    }
                    let dir = path.parent().unwrap_or(Path::new("/")).to_path_buf();
                    stamps.push((dir.clone(), stamp(&node.path(&dir))));
                }
                Place::Dir(dir) => {
                    stamps.push((dir.clone(), stamp(&node.path(dir))));
                    let Ok(entries) = std::fs::read_dir(node.path(dir)) else { continue };
                    let mut names: Vec<_> = entries.flatten().map(|e| e.file_name()).collect();
                    names.sort();
                    if names.len() > FILES_PER_DIR_MAX {
                        left_out += names.len() - FILES_PER_DIR_MAX;
                        names.truncate(FILES_PER_DIR_MAX);
                    }
                    for name in names {
                        let text = name.to_string_lossy();
                        if NOT_PLUGINS.contains(&text.as_ref()) || text.starts_with("containerd-shim") {
                            continue;
                        }
                        let path = dir.join(&name);
                        if let Some(id) = devices.id_of(&node.path(&path)) {
                            files.entry(id).or_insert(path);
                        }
                    }
                }
            }
        }
        while files.len() > PLUGIN_FILES_MAX as usize {
            files.pop_last();
            left_out += 1;
        }
        PluginFiles { files, stamps, left_out }
    }

    /// Whether a place changed since the scan: then scan again.
    pub fn stale(&self, node: &Node) -> bool {
        self.stamps.iter().any(|(dir, was)| stamp(&node.path(dir)) != *was)
    }

    pub fn ids(&self) -> impl Iterator<Item = &PluginFile> {
        self.files.keys()
    }

    /// The plugin file of this id: its path, in the node's spelling.
    pub fn get(&self, id: &PluginFile) -> Option<&Path> {
        self.files.get(id).map(PathBuf::as_path)
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The plugin file process `pid` runs, if it runs one (its executable
    /// as `/proc/<pid>/exe` opens it).
    pub fn file_of_process(&self, proc_root: &Path, pid: u32) -> Option<PluginFile> {
        let id = KernelDevices::read().id_of(&proc_root.join(pid.to_string()).join("exe"))?;
        self.files.contains_key(&id).then_some(id)
    }

    /// The ids in `self` and not in `before`, and those in `before` only.
    pub fn changes(&self, before: &PluginFiles) -> (Vec<PluginFile>, Vec<PluginFile>) {
        let now: BTreeSet<&PluginFile> = self.files.keys().collect();
        let was: BTreeSet<&PluginFile> = before.files.keys().collect();
        (now.difference(&was).map(|id| **id).collect(), was.difference(&now).map(|id| **id).collect())
    }
}

/// The kernel's device number of each mount podstuck sees (mountinfo's
/// `major:minor` is the superblock's `s_dev`, which `stat` does not say
/// on btrfs), by mount id.
struct KernelDevices(BTreeMap<u32, u32>);

impl KernelDevices {
    fn read() -> KernelDevices {
        let text = std::fs::read("/proc/self/mountinfo").unwrap_or_default();
        KernelDevices(parse_mountinfo(&text).into_iter().map(|m| (m.id, kernel_dev(m.dev))).collect())
    }

    /// The id of the regular file at `path` (symlinks followed, as exec
    /// follows them): its inode, and its mount's device by the mount id
    /// the kernel gives an `O_PATH` descriptor of it.
    fn id_of(&self, path: &Path) -> Option<PluginFile> {
        use std::os::unix::fs::OpenOptionsExt;
        let file =
            std::fs::OpenOptions::new().read(true).custom_flags(libc::O_PATH | libc::O_CLOEXEC).open(path).ok()?;
        let meta = file.metadata().ok()?;
        if !meta.is_file() || meta.mode() & 0o111 == 0 {
            return None;
        }
        use std::os::fd::AsRawFd;
        let fdinfo = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", file.as_raw_fd())).ok()?;
        let mount_id: u32 = fdinfo.lines().find_map(|l| l.strip_prefix("mnt_id:"))?.trim().parse().ok()?;
        let dev = *self.0.get(&mount_id)?;
        Some(PluginFile { ino: meta.ino(), dev, _pad: 0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containerd_configs_of_both_majors_name_their_plugin_directories() {
        let v1 = r#"
version = 2
[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/opt/cni/bin"
  conf_dir = "/etc/cni/net.d"
"#;
        assert_eq!(containerd_bin_dirs(v1).unwrap(), vec![PathBuf::from("/opt/cni/bin")]);
        let v2 = r#"
version = 3
[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["/usr/libexec/cni", "relative/ignored", "/var/lib/cni/bin"]
"#;
        assert_eq!(
            containerd_bin_dirs(v2).unwrap(),
            vec![PathBuf::from("/usr/libexec/cni"), PathBuf::from("/var/lib/cni/bin")]
        );
        assert_eq!(containerd_bin_dirs("version = 2\n").unwrap(), Vec::<PathBuf>::new());
        assert!(containerd_bin_dirs("[plugins\n").is_err(), "not TOML: said, not guessed");
    }

    #[test]
    fn crio_configs_name_their_plugin_directories() {
        let conf = r#"
[crio.network]
network_dir = "/etc/cni/net.d/"
plugin_dirs = [
  "/opt/cni/bin/",
  "/usr/libexec/cni/",
]
"#;
        assert_eq!(
            crio_plugin_dirs(conf).unwrap(),
            vec![PathBuf::from("/opt/cni/bin/"), PathBuf::from("/usr/libexec/cni/")]
        );
        assert_eq!(crio_plugin_dirs("[crio.network]\nplugin_dir = \"/x\"\n").unwrap(), vec![PathBuf::from("/x")]);
    }

    #[test]
    fn the_files_of_a_plugin_directory_are_named_as_the_kernel_names_them() {
        let dir = crate::test_support::TempDir::new("cni-plugins");
        let bin = dir.0.join("bin");
        std::fs::create_dir(&bin).unwrap();
        let write = |name: &str, mode: u32| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::write(bin.join(name), b"\x7fELF").unwrap();
            std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(mode)).unwrap();
        };
        write("bridge", 0o755);
        write("runc", 0o755);
        write("README", 0o644);
        std::os::unix::fs::symlink(bin.join("bridge"), bin.join("loopback")).unwrap();
        let places = PluginPlaces { places: vec![(Place::Dir(bin.clone()), Source::User)], unreadable: vec![] };
        let files = PluginFiles::scan(Node::direct(), &places);
        assert_eq!(files.len(), 1, "bridge (and its symlink, the same file); not runc, not a README: {files:?}");
        let meta = std::fs::metadata(bin.join("bridge")).unwrap();
        let id = files.ids().next().unwrap();
        assert_eq!(id.ino, meta.ino());
        // ext4, tmpfs, xfs: the superblock's device is stat's.
        assert_eq!(id.dev, kernel_dev((libc::major(meta.dev()), libc::minor(meta.dev()))));
        assert!(!files.stale(Node::direct()));
        write("calico", 0o755);
        assert!(files.stale(Node::direct()), "a plugin installed after the scan is seen");
        let again = PluginFiles::scan(Node::direct(), &places);
        let (added, removed) = again.changes(&files);
        assert_eq!((added.len(), removed.len()), (1, 0));
    }
}
