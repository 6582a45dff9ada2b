//! `podstuck check`: can podstuck run on this node, and what will it find
//! here? One line per question, ok or the problem and what to do:
//! privileges, what the kernel offers (each probe: ring buffer, bpf_loop,
//! BTF, fentry, tracefs, lockdown) and the plan made of it, the node's
//! shape (cgroup v2, hybrid or v1, which hierarchies and which of them
//! hold the pods; kubelet a host process or in a container), cgroup
//! driver, kubelet root, container runtime, another podstuck already
//! tracing, and where podstuck runs (on the node or in a container). The
//! shape decides what a finding can say: on v1 a pod's cgroups are one per
//! hierarchy, and a kubelet in a container mounts volumes in its own mount
//! namespace, where fixes must enter.
//!
//! Gathering reads the node ([`CheckFacts::gather`]); judging is pure
//! ([`judge`]) and unit-tested on made-up facts. The tracing prerequisites
//! are judged by [`crate::preflight`], the same code `watch` runs first.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::event::syscall_name;
use crate::identify::cgroups::{cgroup2_mount, v1_hierarchies};
use crate::inspect::mounts::{parse_mountinfo, v1_controllers};
use crate::kernel_features::{AttachPoint, BtfSource, Lockdown, PathWalk, Probed};
use crate::node_access::Node;
use crate::preflight::{plan, privileged, NodeFacts};
use crate::print::Out;
use crate::tracer_lock::{other_podstucks, OtherPodstuck};
use podstuck_common::program::Arch;

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    /// podstuck runs, but sees less (or this is not the node you think).
    Warn,
    /// podstuck cannot trace here.
    Fail,
}

/// One line of `podstuck check`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckLine {
    pub verdict: Verdict,
    pub topic: &'static str,
    pub says: String,
    /// What to do, for Warn and Fail.
    pub todo: Option<String>,
}

impl std::fmt::Display for CheckLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let word = match self.verdict {
            Verdict::Ok => "ok  ",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
        };
        write!(f, "{word}  {:<18} {}", self.topic, self.says)?;
        if let Some(todo) = &self.todo {
            write!(f, " -- {todo}")?;
        }
        Ok(())
    }
}

/// Everything `check` looks at.
#[derive(Clone, Debug)]
pub struct CheckFacts {
    pub node: NodeFacts,
    /// The cgroup hierarchies mounted.
    pub cgroups: CgroupShape,
    /// The hierarchies that hold a kubepods cgroup, by name.
    pub pods_in: Vec<String>,
    /// "systemd" (kubepods.slice) or "cgroupfs" (kubepods), where found.
    pub cgroup_driver: Option<(&'static str, PathBuf)>,
    /// Where kubelet runs.
    pub kubelet: KubeletPlace,
    pub kubelet_root: PathBuf,
    pub kubelet_root_present: bool,
    pub pods_on_node: usize,
    /// Runtimes found: name and how (socket path or pid).
    pub runtimes: Vec<(String, String)>,
    pub others: Vec<OtherPodstuck>,
    /// The node's CNI plugins, where `watch` looks for them.
    pub cni_plugins: CniPluginsFound,
}

/// The cgroup hierarchies a node mounts, read from its mount table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CgroupShape {
    /// The cgroup2 mount, if any.
    pub v2: Option<PathBuf>,
    /// Each v1 hierarchy: its controllers ("cpu,cpuacct", "name=systemd")
    /// and mount point, in mount order.
    pub v1: Vec<(String, PathBuf)>,
    /// The controllers of the v1 hierarchies the kernel programs read a
    /// caller's cgroup in, in the order they try them.
    pub read_in_kernel: Vec<&'static str>,
}

/// The cgroup shape of the node whose mountinfo this is. Pure text work.
pub fn cgroup_shape(mountinfo: &str) -> CgroupShape {
    use std::os::unix::ffi::OsStrExt;
    let v1 = parse_mountinfo(mountinfo.as_bytes())
        .into_iter()
        .filter(|m| m.fstype == "cgroup")
        .map(|m| (v1_controllers(&m), PathBuf::from(std::ffi::OsStr::from_bytes(&m.mount_point))))
        .collect();
    let read_in_kernel = v1_hierarchies(mountinfo).into_iter().map(|h| h.controller).collect();
    CgroupShape { v2: cgroup2_mount(mountinfo), v1, read_in_kernel }
}

impl CgroupShape {
    /// Every hierarchy's name and mount point: "unified" for v2, first.
    pub fn hierarchies(&self) -> Vec<(String, PathBuf)> {
        self.v2.iter().map(|p| ("unified".to_string(), p.clone())).chain(self.v1.iter().cloned()).collect()
    }

    /// "memory, pids, freezer (under /sys/fs/cgroup)".
    fn v1_words(&self) -> String {
        let names: Vec<&str> = self.v1.iter().map(|(n, _)| n.as_str()).collect();
        let parents: Vec<Option<&Path>> = self.v1.iter().map(|(_, p)| p.parent()).collect();
        let under = match parents.first() {
            Some(Some(first)) if parents.iter().all(|p| p == &Some(*first)) => format!(" (under {})", first.display()),
            _ => String::new(),
        };
        format!("{}{under}", names.join(", "))
    }
}

/// Where kubelet runs, as seen from its process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KubeletPlace {
    /// No process named kubelet.
    NotFound,
    /// In the node's own mount namespace.
    Host { pid: u32 },
    /// In a mount namespace of its own (kind, k3d, minikube, Talos, RKE1):
    /// the pod or container it belongs to, in words, where known.
    Container { pid: u32, owner: Option<String> },
}

impl KubeletPlace {
    /// The first process named kubelet, placed by its mount namespace
    /// against the node's.
    fn find(node: &Node) -> KubeletPlace {
        let mut kubelets: Vec<u32> =
            processes().into_iter().filter(|(_, comm)| comm == "kubelet").map(|(pid, _)| pid).collect();
        kubelets.sort_unstable();
        let Some(&pid) = kubelets.first() else { return KubeletPlace::NotFound };
        let node_ns = std::fs::read_link(node.node_proc_file("ns/mnt")).ok();
        let kubelet_ns = std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok();
        if node_ns.is_none() || kubelet_ns == node_ns {
            return KubeletPlace::Host { pid };
        }
        let owner = crate::identify::owner::RuntimeState::of_this_node(node)
            .owner_of(Path::new("/proc"), pid)
            .map(|o| o.words());
        KubeletPlace::Container { pid, owner }
    }
}

/// Runtime sockets, by runtime.
const RUNTIME_SOCKETS: [(&str, &str); 4] = [
    ("containerd", "/run/containerd/containerd.sock"),
    ("CRI-O", "/var/run/crio/crio.sock"),
    ("docker", "/var/run/docker.sock"),
    ("cri-dockerd", "/var/run/cri-dockerd.sock"),
];
/// Runtime processes, by command name.
const RUNTIME_COMMANDS: [&str; 4] = ["containerd", "crio", "dockerd", "podman"];

/// (pid, comm) of every process.
fn processes() -> Vec<(u32, String)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        Some((pid, crate::words::terminal_safe(comm.trim_end()).into_owned()))
    })
    .collect()
}

/// Pods named on the command line shown nowhere here: said, with the pods
/// this node does have, while watching goes on (the pod may yet appear, or
/// be known only by its cgroup).
pub fn pods_not_found(node: &Node, missing: &[crate::identify::pod::PodUid], kubelet_root: &Path) -> String {
    let names: Vec<String> = missing.iter().map(|p| p.to_string()).collect();
    let here = pods_under(node, kubelet_root);
    let shown: Vec<&str> = here.iter().take(20).map(String::as_str).collect();
    let more = if here.len() > shown.len() { format!(" and {} more", here.len() - shown.len()) } else { String::new() };
    let listing = if here.is_empty() {
        format!("no pod has a directory under {}/pods", kubelet_root.display())
    } else {
        format!("pods on this node: {}{more}", shown.join(", "))
    };
    format!(
        "podstuck: pod {} not found on this node (no {}/pods/<uid>): watching for it anyway; is it scheduled here (kubectl get pod -o wide)? {listing}",
        names.join(", "),
        kubelet_root.display()
    )
}

/// Whether a cgroup on the node names pod `uid` (`...pod<uid>...`, in the
/// cgroupfs or the systemd spelling), looked for under the kubepods trees.
pub fn cgroup_names_pod(node: &Node, uid: &crate::identify::pod::PodUid) -> bool {
    let wanted = [format!("pod{}", uid.as_str()), format!("pod{}", uid.systemd_form())];
    let mut dirs = vec![(node.path("/sys/fs/cgroup"), 0)];
    while let Some((dir, depth)) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if wanted.iter().any(|w| name.contains(w.as_str())) {
                return true;
            }
            // Depth 0 holds v1's controllers; below, only kubepods' own levels.
            let kube = depth == 0 || name.starts_with("kubepods") || name == "burstable" || name == "besteffort";
            if depth < 4 && kube && entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push((entry.path(), depth + 1));
            }
        }
    }
    false
}

/// The pod directories under a kubelet root, by UID.
pub fn pods_under(node: &Node, kubelet_root: &Path) -> Vec<String> {
    let mut pods: Vec<String> = std::fs::read_dir(node.path(kubelet_root.join("pods")))
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    pods.sort();
    pods
}

impl CheckFacts {
    pub fn gather(node: &Node, kubelet_root: &Path, btf: Option<&Path>) -> CheckFacts {
        let mountinfo = std::fs::read_to_string(node.mountinfo()).unwrap_or_default();
        let cgroups = cgroup_shape(&mountinfo);
        let mut cgroup_driver = None;
        let mut pods_in = Vec::new();
        for (name, root) in cgroups.hierarchies() {
            let reached = node.path(&root);
            let found = if reached.join("kubepods.slice").is_dir() {
                Some(("systemd", root.join("kubepods.slice")))
            } else if reached.join("kubepods").is_dir() {
                Some(("cgroupfs", root.join("kubepods")))
            } else {
                None
            };
            if let Some(found) = found {
                pods_in.push(name);
                cgroup_driver.get_or_insert(found);
            }
        }
        let mut runtimes: Vec<(String, String)> = RUNTIME_SOCKETS
            .iter()
            .filter(|(_, socket)| node.path(socket).exists())
            .map(|(name, socket)| (name.to_string(), socket.to_string()))
            .collect();
        for (pid, comm) in processes() {
            if RUNTIME_COMMANDS.contains(&comm.as_str()) && !runtimes.iter().any(|(n, _)| n.eq_ignore_ascii_case(&comm))
            {
                runtimes.push((comm, format!("pid {pid}")));
            }
        }
        CheckFacts {
            node: NodeFacts::gather(node, btf),
            cgroups,
            pods_in,
            cgroup_driver,
            kubelet: KubeletPlace::find(node),
            kubelet_root: kubelet_root.to_path_buf(),
            kubelet_root_present: node.path(kubelet_root).is_dir(),
            pods_on_node: pods_under(node, kubelet_root).len(),
            runtimes,
            others: other_podstucks(node),
            cni_plugins: CniPluginsFound::of(node),
        }
    }
}

/// The node's CNI plugins, as `watch` will know them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CniPluginsFound {
    pub files: usize,
    /// The places holding them, with where each was learnt.
    pub places: Vec<String>,
    /// Runtime configurations that could not be read, with why.
    pub unreadable: Vec<String>,
}

impl CniPluginsFound {
    fn of(node: &Node) -> CniPluginsFound {
        use crate::cni_plugins::{Place, PluginFiles, PluginPlaces, Source};
        let places = PluginPlaces::of_this_node(node, &[]);
        let files = PluginFiles::scan(node, &places);
        let present = places.places.iter().filter(|(place, _)| match place {
            Place::Dir(dir) => node.path(dir).is_dir(),
            Place::File(file) => node.path(file).is_file(),
        });
        let words = present
            .map(|(place, source)| {
                let path = match place {
                    Place::Dir(p) | Place::File(p) => p.display().to_string(),
                };
                match source {
                    Source::Default => path,
                    other => format!("{path} ({})", other.words()),
                }
            })
            .collect();
        CniPluginsFound { files: files.len(), places: words, unreadable: places.unreadable }
    }
}

fn line(verdict: Verdict, topic: &'static str, says: impl Into<String>, todo: Option<String>) -> CheckLine {
    CheckLine { verdict, topic, says: says.into(), todo }
}

/// The lines of `podstuck check` for these facts.
pub fn judge(facts: &CheckFacts) -> Vec<CheckLine> {
    let mut lines = Vec::new();
    lines.extend(kernel_lines(&facts.node));
    lines.push(layout_line(facts));
    lines.push(match &facts.cgroup_driver {
        Some((driver, at)) => line(Verdict::Ok, "cgroup driver", format!("{driver} ({})", at.display()), None),
        None => line(
            Verdict::Warn,
            "cgroup driver",
            "no kubepods cgroup: kubelet runs no pods here, or this is not a Kubernetes node",
            Some("run podstuck on the node that holds the stuck pod (kubectl get pod -o wide)".into()),
        ),
    });
    let root = facts.kubelet_root.display();
    lines.push(if facts.kubelet_root_present {
        line(Verdict::Ok, "kubelet root", format!("{root}: {} pod directories", facts.pods_on_node), None)
    } else {
        line(
            Verdict::Warn,
            "kubelet root",
            format!("{root} not found: pods are recognised by cgroup and container only"),
            Some("if kubelet runs with --root-dir, pass the same: --kubelet-root DIR".into()),
        )
    });
    lines.push(kubelet_line(&facts.kubelet));
    lines.push(if facts.runtimes.is_empty() {
        line(
            Verdict::Warn,
            "container runtime",
            "none found (no containerd, CRI-O or docker socket or process)",
            Some("run podstuck on a Kubernetes node".into()),
        )
    } else {
        let named: Vec<String> = facts.runtimes.iter().map(|(n, how)| format!("{n} ({how})")).collect();
        line(Verdict::Ok, "container runtime", named.join(", "), None)
    });
    let cni = &facts.cni_plugins;
    lines.push(if cni.files > 0 && cni.unreadable.is_empty() {
        line(Verdict::Ok, "CNI plugins", format!("{} plugin files in {}", cni.files, cni.places.join(", ")), None)
    } else if cni.files > 0 {
        line(
            Verdict::Warn,
            "CNI plugins",
            format!("{} plugin files in {}; cannot read {}", cni.files, cni.places.join(", "), cni.unreadable.join("; ")),
            Some("a plugin directory only that configuration names goes unwatched: name it with --cni-plugin-dir DIR".into()),
        )
    } else {
        line(
            Verdict::Warn,
            "CNI plugins",
            "none found where nodes keep them (/opt/cni/bin, /usr/lib/cni, /usr/libexec/cni, /var/lib/cni/bin, /home/kubernetes/bin, k3s', the runtime's configuration): a failing network teardown goes unseen",
            Some("name the directory the runtime runs plugins from: --cni-plugin-dir DIR".into()),
        )
    });
    lines.push(match facts.others.first() {
        None => line(Verdict::Ok, "other podstuck", "none running", None),
        Some(o) => line(
            Verdict::Warn,
            "other podstuck",
            format!("pid {} is already tracing: {}", o.pid, o.command),
            Some(format!("stop it (kill {}) before starting another, or pass --concurrent", o.pid)),
        ),
    });
    lines
}

/// The node's cgroup shape: v2, hybrid or v1, which hierarchies, and
/// which of them hold the pods.
fn layout_line(facts: &CheckFacts) -> CheckLine {
    let shape = &facts.cgroups;
    let pods = if facts.pods_in.is_empty() {
        String::new()
    } else {
        format!("; pods' cgroups in {}", facts.pods_in.join(", "))
    };
    match (&shape.v2, shape.v1.is_empty()) {
        (Some(v2), true) => line(Verdict::Ok, "cgroup layout", format!("v2 (unified) at {}{pods}", v2.display()), None),
        (Some(v2), false) => line(Verdict::Ok, "cgroup layout", format!("hybrid: v1 hierarchies {}, v2 at {}{pods}", shape.v1_words(), v2.display()), None),
        (None, false) if !shape.read_in_kernel.is_empty() => line(
            Verdict::Ok,
            "cgroup layout",
            format!(
                "v1 only: hierarchies {}{pods}; a pod has a cgroup in each, and each caller's is read in the kernel at its call ({}), so a short-lived caller is tied to its pod too",
                shape.v1_words(),
                match shape.read_in_kernel.as_slice() {
                    [one] => format!("in the {one} hierarchy"),
                    several => format!("in the first of the {} hierarchies where it has a cgroup of its own", several.join(", ")),
                }
            ),
            None,
        ),
        (None, false) => line(
            Verdict::Warn,
            "cgroup layout",
            format!("v1 only: hierarchies {}{pods}, none with a controller", shape.v1_words()),
            Some("a caller's cgroup is read from /proc after its call, so a short-lived caller in a pod may be tied to none: mount the v1 controllers as systemd does (memory, pids, cpu,cpuacct...)".into()),
        ),
        (None, true) => line(Verdict::Warn, "cgroup layout", "no cgroup filesystem mounted", Some("pods are recognised by path only".into())),
    }
}

/// Where kubelet runs: a kubelet in a container mounts pod volumes in its
/// own mount namespace, which the host's mount table does not show.
fn kubelet_line(place: &KubeletPlace) -> CheckLine {
    match place {
        KubeletPlace::Host { pid } => line(Verdict::Ok, "kubelet", format!("kubelet is a host process (pid {pid})"), None),
        KubeletPlace::Container { pid, owner } => line(
            Verdict::Ok,
            "kubelet",
            format!(
                "kubelet runs in a container: {} (pid {pid}, mount namespace not the node's: volumes are mounted there, and fixes enter it)",
                owner.as_deref().unwrap_or("not a pod or container the runtimes here know")
            ),
            None,
        ),
        KubeletPlace::NotFound => line(
            Verdict::Warn,
            "kubelet",
            "no process named kubelet",
            Some("run podstuck on the node of the stuck pod (kubectl get pod -o wide); from a container, with the host's PID namespace".into()),
        ),
    }
}

/// The lines about tracing: privileges, then each probe of the kernel,
/// then the plan made of them (or what is missing, as FAIL lines).
fn kernel_lines(node: &NodeFacts) -> Vec<CheckLine> {
    let mut lines = Vec::new();
    let planned = plan(node, AttachPoint::Auto);
    if !privileged(node.effective_caps) {
        for p in planned.err().unwrap_or_default() {
            lines.push(line(Verdict::Fail, "privileges", p.what, Some(p.fix)));
        }
        return lines;
    }
    lines.push(line(Verdict::Ok, "privileges", "may load kernel programs (root, or CAP_BPF and CAP_PERFMON)", None));
    let f = &node.features;
    lines.push(line(
        Verdict::Ok,
        "kernel",
        format!(
            "{} on {} (what it can do is probed, not read from the version)",
            node.kernel_release,
            Arch::HOST.name()
        ),
        None,
    ));
    let probe = |topic: &'static str, p: &Probed, yes: &str, no: Verdict, todo: &str| match p {
        Probed::Yes => line(Verdict::Ok, topic, yes.to_string(), None),
        other => line(no, topic, other.words(), Some(todo.to_string())),
    };
    lines.push(probe(
        "ring buffer",
        &f.ring_buffer,
        "BPF ring buffer maps load",
        Verdict::Fail,
        "podstuck needs the BPF ring buffer (Linux 5.8, or a backport)",
    ));
    lines.push(probe(
        "bpf_loop",
        &f.bpf_loop,
        "available: relative paths walked up to 64 levels",
        Verdict::Warn,
        &format!("nothing to do: relative paths are walked unrolled, up to {} levels", PathWalk::Unrolled.depth()),
    ));
    lines.push(match &f.btf {
        BtfSource::Kernel => line(Verdict::Ok, "BTF", format!("{} present", crate::btf::VMLINUX_BTF), None),
        BtfSource::File(p) => line(Verdict::Ok, "BTF", format!("from {} (--btf)", p.display()), None),
        BtfSource::Missing => line(
            Verdict::Fail,
            "BTF",
            format!("{} missing", crate::btf::VMLINUX_BTF),
            Some("pass this kernel's BTF with --btf FILE (BTFHub has files for distribution kernels)".into()),
        ),
    });
    lines.push(probe(
        "fentry",
        &f.fentry,
        "BPF tracing programs load and attach",
        Verdict::Warn,
        "nothing to do: the syscall tracepoints are used instead (they slow every syscall a little)",
    ));
    lines.push(match (&f.syscall_tracepoints, node.tracefs.as_ref()) {
        (Probed::Yes, Some(at)) => {
            line(Verdict::Ok, "tracefs", format!("mounted at {} with syscall tracepoints", at.display()), None)
        }
        (other, _) => line(
            if f.fentry.yes() { Verdict::Warn } else { Verdict::Fail },
            "tracefs",
            other.words(),
            Some(crate::node_access::tracefs_fix(
                node.in_container,
                "mount it: mount -t tracefs nodev /sys/kernel/tracing (kernels built with CONFIG_FTRACE_SYSCALLS=y)"
                    .into(),
            )),
        ),
    });
    lines.push(match f.lockdown {
        Lockdown::Confidentiality if matches!(f.kernel_read_helper, Probed::No(_)) => line(
            Verdict::Fail,
            "lockdown",
            "confidentiality: BPF may not read kernel memory, and this kernel refuses such programs at load",
            Some("boot with lockdown=integrity to trace here (see the plan line)".into()),
        ),
        Lockdown::Confidentiality => line(
            Verdict::Warn,
            "lockdown",
            "confidentiality: BPF may not read kernel memory",
            Some("relative paths get no absolute path and callers no parent; whole paths, errors, pids, cgroups and counts still work".into()),
        ),
        mode => line(Verdict::Ok, "lockdown", mode.as_str(), None),
    });
    // The calls this architecture has, each attached: arm64 has no unlink
    // and no rmdir, and its removals all go through unlinkat.
    let calls = Arch::HOST.syscalls().iter().map(|&s| syscall_name(s)).collect::<Vec<_>>().join(", ");
    match planned {
        Ok(p) => {
            let degraded = if p.degraded.is_empty() { String::new() } else { format!("; {}", p.degraded.join("; ")) };
            lines.push(line(
                Verdict::Ok,
                "plan",
                format!("attach: {}, path walk: {}, calls: {}{degraded}", p.attach.as_str(), p.walk.words(), calls),
                None,
            ));
        }
        Err(problems) => lines.extend(problems.into_iter().map(|p| line(Verdict::Fail, "plan", p.what, Some(p.fix)))),
    }
    lines
}

/// Runs `podstuck check`: prints the lines; Err when podstuck cannot trace here.
pub fn check(node: &Node, kubelet_root: &Path, btf: Option<&Path>) -> anyhow::Result<bool> {
    // Where podstuck runs comes first: every line after it is read from there.
    let runs = if node.assumed() { Verdict::Warn } else { Verdict::Ok };
    let mut lines = vec![line(runs, "runs", node.words(), None)];
    lines.extend(judge(&CheckFacts::gather(node, kubelet_root, btf)));
    // A reader gone (`podstuck check | head -1`) ends the output quietly.
    let mut out = Out::stdout();
    lines.iter().try_for_each(|l| out.line(&l.to_string())).and_then(|()| out.flush()).context("writing the check")?;
    Ok(lines.iter().all(|l| l.verdict != Verdict::Fail))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> CheckFacts {
        CheckFacts {
            node: NodeFacts {
                kernel_release: "6.18.44".into(),
                node_name: "node-1".into(),
                effective_caps: u64::MAX,
                tracefs: Some(PathBuf::from("/sys/kernel/tracing")),
                features: crate::kernel_features::KernelFeatures::all_present(),
                in_container: false,
            },
            cgroups: CgroupShape { v2: Some(PathBuf::from("/sys/fs/cgroup")), v1: vec![], read_in_kernel: vec![] },
            pods_in: vec!["unified".into()],
            cgroup_driver: Some(("systemd", PathBuf::from("/sys/fs/cgroup/kubepods.slice"))),
            kubelet: KubeletPlace::Host { pid: 812 },
            kubelet_root: PathBuf::from("/var/lib/kubelet"),
            kubelet_root_present: true,
            pods_on_node: 12,
            runtimes: vec![("containerd".into(), "/run/containerd/containerd.sock".into())],
            others: vec![],
            cni_plugins: CniPluginsFound { files: 21, places: vec!["/opt/cni/bin".into()], unreadable: vec![] },
        }
    }

    fn verdicts(facts: &CheckFacts) -> Vec<(&'static str, Verdict)> {
        judge(facts).iter().map(|l| (l.topic, l.verdict)).collect()
    }

    #[test]
    fn a_good_node_is_all_ok_one_line_each() {
        let lines = judge(&good());
        assert!(lines.iter().all(|l| l.verdict == Verdict::Ok), "{lines:?}");
        let topics: Vec<&str> = lines.iter().map(|l| l.topic).collect();
        assert_eq!(
            topics,
            [
                "privileges",
                "kernel",
                "ring buffer",
                "bpf_loop",
                "BTF",
                "fentry",
                "tracefs",
                "lockdown",
                "plan",
                "cgroup layout",
                "cgroup driver",
                "kubelet root",
                "kubelet",
                "container runtime",
                "CNI plugins",
                "other podstuck"
            ]
        );
        let calls =
            if cfg!(target_arch = "aarch64") { "unlinkat, umount2" } else { "unlinkat, unlink, rmdir, umount2" };
        assert_eq!(lines[8].says, format!("attach: fentry, path walk: bpf_loop (up to 64 levels), calls: {calls}"));
        assert_eq!(lines[11].to_string(), "ok    kubelet root       /var/lib/kubelet: 12 pod directories");
    }

    #[test]
    fn each_problem_says_what_to_do() {
        // A 5.10 node: no bpf_loop, still traced, the walk said.
        let mut f = good();
        f.node.kernel_release = "5.10.0".into();
        f.node.features.bpf_loop = Probed::No(String::new());
        let lines = judge(&f);
        assert!(lines.iter().all(|l| l.verdict != Verdict::Fail), "{lines:?}");
        let plan = lines.iter().find(|l| l.topic == "plan").unwrap();
        assert!(plan.says.starts_with("attach: fentry, path walk: unrolled (up to 24 levels)"), "{plan}");
        // No fentry and no tracefs: nothing to attach to.
        f.node.features.fentry = Probed::No("EPERM".into());
        f.node.features.syscall_tracepoints = Probed::No("tracefs is not mounted".into());
        f.node.tracefs = None;
        let lines = judge(&f);
        let tracefs = lines.iter().find(|l| l.topic == "tracefs").unwrap();
        assert_eq!(tracefs.verdict, Verdict::Fail);
        assert!(tracefs.to_string().contains("mount -t tracefs nodev /sys/kernel/tracing"), "{tracefs}");
        assert!(verdicts(&f).contains(&("plan", Verdict::Fail)));
        let mut f = good();
        f.node.effective_caps = 0;
        assert!(verdicts(&f).contains(&("privileges", Verdict::Fail)));
        // No CNI plugin where nodes keep them: said, with the option.
        let mut f = good();
        f.cni_plugins = CniPluginsFound::default();
        let cni = judge(&f).into_iter().find(|l| l.topic == "CNI plugins").unwrap();
        assert_eq!(cni.verdict, Verdict::Warn);
        assert!(cni.to_string().contains("--cni-plugin-dir DIR"), "{cni}");
    }

    #[test]
    fn a_missing_pod_is_said_with_the_pods_that_are_here() {
        let tmp = crate::test_support::TempDir::new("check-pods");
        for uid in ["b-pod", "a-pod"] {
            std::fs::create_dir_all(tmp.0.join("pods").join(uid)).unwrap();
        }
        let missing = [crate::identify::pod::PodUid::parse("1b2c3d4e-5f60-4a7b-8c9d-0e1f2a3b4c5d").unwrap()];
        let said = pods_not_found(Node::direct(), &missing, &tmp.0);
        assert!(said.contains("pod 1b2c3d4e-5f60-4a7b-8c9d-0e1f2a3b4c5d not found on this node"), "{said}");
        assert!(said.ends_with("pods on this node: a-pod, b-pod"), "{said}");
        let empty = crate::test_support::TempDir::new("check-nopods");
        assert!(pods_not_found(Node::direct(), &missing, &empty.0).contains("no pod has a directory under"));
    }

    #[test]
    fn layouts_drivers_roots_runtimes_and_other_podstucks() {
        let mut f = good();
        f.cgroups = cgroup_shape(HYBRID);
        assert!(judge(&f)[9].says.starts_with("hybrid"));
        f.cgroups.v2 = None;
        assert!(
            verdicts(&f).contains(&("cgroup layout", Verdict::Ok)),
            "v1 only: callers' cgroups are read in the kernel"
        );
        f.cgroups.v1.clear();
        assert!(verdicts(&f).contains(&("cgroup layout", Verdict::Warn)));
        let mut f = good();
        f.cgroup_driver = Some(("cgroupfs", PathBuf::from("/sys/fs/cgroup/kubepods")));
        assert!(judge(&f)[10].says.starts_with("cgroupfs"));
        f.cgroup_driver = None;
        f.kubelet = KubeletPlace::NotFound;
        f.kubelet_root_present = false;
        f.runtimes.clear();
        f.others.push(OtherPodstuck { pid: 77, command: "podstuck watch".into() });
        let v = verdicts(&f);
        for topic in ["cgroup driver", "kubelet root", "kubelet", "container runtime", "other podstuck"] {
            assert!(v.contains(&(topic, Verdict::Warn)), "{topic}: {v:?}");
        }
        assert!(judge(&f).last().unwrap().to_string().contains("kill 77"));
    }

    /// This project's machine: v1 controllers each mounted alone, v2 at unified.
    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    /// EKS AL2 or RHEL 8: v1 only, cpu and cpuacct together, no cgroup2.
    const V1_ONLY: &str = "\
25 18 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:6 - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:7 - cgroup cgroup rw,xattr,release_agent=/usr/lib/systemd/systemd-cgroups-agent,name=systemd
29 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:10 - cgroup cgroup rw,cpu,cpuacct
30 25 0:27 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,memory
31 25 0:28 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,pids
32 25 0:29 / /sys/fs/cgroup/freezer rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,freezer
";

    #[test]
    fn the_node_shape_is_read_from_its_mount_table() {
        let v2 = cgroup_shape("30 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
        assert_eq!(v2, CgroupShape { v2: Some(PathBuf::from("/sys/fs/cgroup")), v1: vec![], read_in_kernel: vec![] });
        let hybrid = cgroup_shape(HYBRID);
        assert_eq!(hybrid.v2, Some(PathBuf::from("/sys/fs/cgroup/unified")));
        assert_eq!(
            hybrid.v1.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            ["cpu", "memory", "freezer", "name=systemd"]
        );
        let v1 = cgroup_shape(V1_ONLY);
        assert_eq!(v1.v2, None);
        assert_eq!(v1.v1[1], ("cpu,cpuacct".to_string(), PathBuf::from("/sys/fs/cgroup/cpu,cpuacct")));
        assert_eq!(v1.hierarchies().len(), 5);

        let mut f = good();
        let layout = |f: &CheckFacts| judge(f).into_iter().find(|l| l.topic == "cgroup layout").unwrap();
        assert_eq!(layout(&f).says, "v2 (unified) at /sys/fs/cgroup; pods' cgroups in unified");
        f.cgroups = hybrid;
        f.pods_in = vec!["cpu".into(), "memory".into()];
        assert_eq!(
            layout(&f).says,
            "hybrid: v1 hierarchies cpu, memory, freezer, name=systemd (under /sys/fs/cgroup), v2 at /sys/fs/cgroup/unified; pods' cgroups in cpu, memory"
        );
        f.cgroups = v1;
        f.pods_in = vec!["name=systemd".into(), "cpu,cpuacct".into(), "memory".into(), "pids".into(), "freezer".into()];
        let l = layout(&f);
        assert_eq!(l.verdict, Verdict::Ok);
        assert!(
            l.says.starts_with("v1 only: hierarchies name=systemd, cpu,cpuacct, memory, pids, freezer (under /sys/fs/cgroup); pods' cgroups in name=systemd, cpu,cpuacct, memory, pids, freezer; a pod has a cgroup in each"),
            "{l}"
        );
        assert!(
            l.says.contains(
                "read in the kernel at its call (in the first of the memory, pids, cpu, freezer hierarchies where"
            ),
            "{l}"
        );
        // systemd's named hierarchy alone: nothing for the kernel to read by.
        f.cgroups = cgroup_shape(V1_ONLY.lines().take(2).map(|l| format!("{l}\n")).collect::<String>().as_str());
        let l = layout(&f);
        assert_eq!(l.verdict, Verdict::Warn, "{l}");
        assert!(l.to_string().contains("read from /proc after its call"), "{l}");
    }

    #[test]
    fn kubelet_is_said_a_host_process_in_a_container_or_missing() {
        let kubelet = |place: KubeletPlace| kubelet_line(&place).to_string();
        assert_eq!(
            kubelet(KubeletPlace::Host { pid: 812 }),
            "ok    kubelet            kubelet is a host process (pid 812)"
        );
        let kind =
            kubelet(KubeletPlace::Container { pid: 4242, owner: Some("docker container kind-control-plane".into()) });
        assert!(kind.contains("kubelet runs in a container: docker container kind-control-plane (pid 4242, mount namespace not the node's"), "{kind}");
        assert!(kubelet(KubeletPlace::Container { pid: 7, owner: None })
            .contains("kubelet runs in a container: not a pod or container the runtimes here know (pid 7"));
        let none = kubelet_line(&KubeletPlace::NotFound);
        assert_eq!((none.verdict, none.says.as_str()), (Verdict::Warn, "no process named kubelet"));
    }
}
