//! P17, csi-plugin-gone: kubelet cannot reach a CSI driver's node plugin.
//! To tear a pod's CSI volume down kubelet calls the plugin
//! (NodeUnpublishVolume, NodeUnstageVolume) over its unix socket; when the
//! plugin's pod has crashed, was evicted, or has not registered again
//! since kubelet restarted, every call fails before it starts, kubelet
//! retries on its backoff for as long as it takes, and the volume, and
//! the pod, stay. No removal ever fails, so nothing else in podstuck sees
//! it; seen here as kubelet's own failing `connect()` to the socket
//! (`identify::kubelet_connect` proves the caller is kubelet and names
//! the pods whose volumes the socket's driver serves).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use super::{
    human_duration, Confidence, Detector, DiagnoseOptions, Finding, FindingActor, Kind, Review, Severity, Status,
};
use crate::event::errno_name;
use crate::identify::kubelet_connect::CsiVolume;
use crate::identify::{Actor, LifecycleIdentity};
use crate::inspect::{Unreadable, NODE_ROOT};
use crate::lifecycle::{ConnectFailed, Lifecycle, LifecycleEvent};

/// Sockets followed at most; past this the quietest are forgotten.
const SOCKETS_MAX: usize = 64;
/// Volumes named per socket at most.
const VOLUMES_MAX: usize = 64;
/// Told once kubelet has failed for this long: a plugin restarting (a
/// rollout) is back within seconds, and kubelet's first retries come
/// within this.
const TOLD_AFTER: Duration = Duration::from_secs(5);
/// No failing connect for this long, kubelet reaches the plugin again (or
/// has nothing left to ask it): longer than kubelet's longest backoff
/// between two tries of one operation (2m2s).
const QUIET_AFTER: Duration = Duration::from_secs(150);

/// kubelet's failures to reach one socket.
struct Socket {
    path: Vec<u8>,
    driver: String,
    volumes: BTreeSet<CsiVolume>,
    first_seen: SystemTime,
    last_seen: SystemTime,
    /// Failing connects the kernel streamed (at most one a second).
    failures: u64,
    /// The latest errno, and each errno seen.
    errno: i32,
    errnos: BTreeSet<i32>,
    /// kubelet: its pid, mount namespace and actor.
    pid: u32,
    mntns: u32,
    actor: Actor,
    told: bool,
}

pub struct CsiPluginGone {
    sockets: BTreeMap<Vec<u8>, Socket>,
    node_name: String,
    host_mntns: u32,
}

impl CsiPluginGone {
    pub fn new(options: &DiagnoseOptions) -> CsiPluginGone {
        CsiPluginGone { sockets: BTreeMap::new(), node_name: options.node_name.clone(), host_mntns: options.host_mntns }
    }

    fn failed(&mut self, event: &LifecycleEvent, identity: &LifecycleIdentity, failed: &ConnectFailed) {
        let Some(driver) = identity.csi_volumes.first().map(|v| v.driver.clone()) else { return };
        if !self.sockets.contains_key(&failed.socket) && self.sockets.len() >= SOCKETS_MAX {
            let quietest = self.sockets.iter().min_by_key(|(_, s)| s.last_seen).map(|(k, _)| k.clone());
            quietest.map(|k| self.sockets.remove(&k));
        }
        let socket = self.sockets.entry(failed.socket.clone()).or_insert_with(|| Socket {
            path: failed.socket.clone(),
            driver,
            volumes: BTreeSet::new(),
            first_seen: event.time,
            last_seen: event.time,
            failures: 0,
            errno: failed.errno,
            errnos: BTreeSet::new(),
            pid: event.pid,
            mntns: failed.mntns,
            actor: identity.actor.clone(),
            told: false,
        });
        socket.last_seen = socket.last_seen.max(event.time);
        socket.failures += 1;
        socket.errno = failed.errno;
        socket.errnos.insert(failed.errno);
        (socket.pid, socket.mntns) = (event.pid, failed.mntns);
        for volume in &identity.csi_volumes {
            if socket.volumes.len() < VOLUMES_MAX {
                socket.volumes.insert(volume.clone());
            }
        }
    }

    /// What the socket's path holds now, read in kubelet's own mount
    /// namespace: through the root of a process the inspector finds living
    /// there, where it is not the node's (as every detector reads a path
    /// proven in a runtime's namespace), never through a pid that may name
    /// another process by now.
    fn judge(&self, socket: &Socket, node: &mut dyn crate::inspect::NodeInspector) -> Verdict {
        let root = if socket.mntns == 0 || socket.mntns == self.host_mntns {
            NODE_ROOT
        } else {
            match node.mount_namespace(u64::from(socket.mntns)) {
                Ok(ns) if ns.host => NODE_ROOT,
                Ok(ns) => ns.member,
                Err(why) => return Verdict::Unknown(why.to_string()),
            }
        };
        match node.file_facts(&socket.path, root) {
            Ok(facts) if facts.mode & libc::S_IFMT == libc::S_IFSOCK => Verdict::SocketNobodyListens,
            Ok(_) => Verdict::NotASocket,
            Err(Unreadable::Gone(_)) => Verdict::NoSocket,
            Err(why) => Verdict::Unknown(why.to_string()),
        }
    }

    /// The verdict in words: the finding, its evidence, its fix.
    fn tell(&self, socket: &Socket, verdict: &Verdict, now: SystemTime) -> Finding {
        let key = crate::words::escape_path(&socket.path);
        let mut f = Finding::new(Kind::CsiPluginGone, &key, Severity::Critical, socket.first_seen);
        f.last_seen = socket.last_seen;
        let pods: BTreeSet<_> = socket.volumes.iter().map(|v| v.pod.clone()).collect();
        f.pods = pods.into_iter().collect();
        f.pod_uid = f.pods.first().cloned();
        f.actor = Some(FindingActor::of(socket.pid, &socket.actor));
        f.count = socket.failures;
        f.errno = Some(errno_name(socket.errno));
        f.paths = vec![socket.path.clone()];
        f.confidence = verdict.confidence(socket.errno);
        let volumes: Vec<String> =
            socket.volumes.iter().map(|v| format!("{} of pod {}", v.name, v.pod.as_str())).collect();
        let since = now.duration_since(socket.first_seen).unwrap_or_default();
        f.summary = format!(
            "kubelet cannot reach the CSI node plugin of driver {}: its connects to {key} have failed with {} for {} ({}). Until the plugin answers, kubelet can neither unpublish nor unstage {}, and a pod whose volume stays cannot finish terminating once deleted.",
            socket.driver,
            errno_name(socket.errno),
            human_duration(since),
            verdict.words(socket.errno),
            volumes.join(", "),
        );
        let errnos: Vec<String> = socket.errnos.iter().map(|e| errno_name(*e)).collect();
        f.evidence(
            "trace",
            format!(
                "{} (pid {}): connect({key}) failed {} time(s) since it was first seen ({}), at most one counted a second",
                socket.actor.description,
                socket.pid,
                socket.failures,
                errnos.join(", ")
            ),
        );
        f.evidence("lstat", verdict.evidence(&key));
        for volume in &socket.volumes {
            f.evidence(
                "vol_data.json",
                format!("volume {} of pod {}: driver {}", volume.name, volume.pod.as_str(), volume.driver),
            );
        }
        f.detail("driver", socket.driver.clone());
        f.detail("socket", key.clone());
        f.detail("failures", socket.failures);
        f.detail("volumes", socket.volumes.iter().map(|v| v.name.clone()).collect::<Vec<_>>());
        let hint = socket.driver.split('.').next().unwrap_or(&socket.driver).to_string();
        f.fix = format!(
            "kubectl get pods --all-namespaces -o wide --field-selector spec.nodeName={} | grep -i -e csi -e {}",
            crate::words::shell_word(self.node_name.as_bytes()),
            crate::words::shell_word(hint.as_bytes())
        );
        f.advice.push(format!(
            "That lists the pods on this node that may be driver {}'s node plugin: get it running again (kubectl describe and kubectl logs of its pod say why it is not), then check that it registered: kubectl get csinode {} -o jsonpath='{{.spec.drivers[*].name}}' lists the drivers kubelet reaches.",
            socket.driver,
            crate::words::shell_word(self.node_name.as_bytes())
        ));
        f.advice.push("Once the plugin answers, kubelet's next retry unpublishes and unstages the volume and the pod goes; nothing on the node needs removing. Unmounting the volume or deleting the pod's directory by hand skips the driver's own teardown (unstage, detach), which can leave the disk attached to this node.".into());
        f
    }
}

/// What the socket's path holds now.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Verdict {
    /// A socket file: nothing listens on it (the plugin's process is gone
    /// and left it).
    SocketNobodyListens,
    /// No file there: the plugin is not running, or its directory is gone.
    NoSocket,
    /// Something else than a socket at that path.
    NotASocket,
    /// The path could not be read.
    Unknown(String),
}

impl Verdict {
    /// Confirmed when the path agrees with the errno kubelet got.
    fn confidence(&self, errno: i32) -> Confidence {
        match (self, errno) {
            (Verdict::SocketNobodyListens, libc::ECONNREFUSED) | (Verdict::NoSocket, libc::ENOENT) => {
                Confidence::Confirmed
            }
            _ => Confidence::Likely,
        }
    }

    fn words(&self, errno: i32) -> &'static str {
        match (self, errno) {
            (_, libc::ECONNREFUSED) => "a socket file that nothing listens on: the plugin's process is gone",
            (_, libc::ENOENT) => {
                "no socket there: the plugin is not running, or has not registered again since kubelet restarted"
            }
            (_, libc::EACCES) | (_, libc::EPERM) => "refused: the socket's mode or a security module keeps kubelet out",
            (Verdict::NoSocket, _) => "no socket there now",
            _ => "the plugin does not answer",
        }
    }

    fn evidence(&self, path: &str) -> String {
        match self {
            Verdict::SocketNobodyListens => format!("{path} is a socket file (in kubelet's mount namespace)"),
            Verdict::NoSocket => format!("{path} does not exist (in kubelet's mount namespace)"),
            Verdict::NotASocket => format!("{path} is there but is not a socket"),
            Verdict::Unknown(why) => format!("{path}: {why}"),
        }
    }
}

impl Socket {
    /// Whether kubelet has failed long enough to tell it.
    fn tellable(&self) -> bool {
        let spread = self.last_seen.duration_since(self.first_seen).unwrap_or_default();
        self.failures >= 2 && spread >= TOLD_AFTER
    }
}

impl Detector for CsiPluginGone {
    /// The failure that makes a socket tellable is its proof: told at
    /// once, not at the next tick.
    fn wants_review(&self) -> bool {
        self.sockets.values().any(|s| !s.told && s.tellable())
    }

    fn lifecycle(&mut self, event: &LifecycleEvent, identity: &LifecycleIdentity) {
        if let Lifecycle::ConnectFailed(failed) = &event.what {
            self.failed(event, identity, failed);
        }
    }

    fn review(&mut self, review: &mut Review<'_>) -> Vec<Finding> {
        let now = review.now;
        let mut out = Vec::new();
        let quiet = |s: &Socket| now.duration_since(s.last_seen).unwrap_or_default() >= QUIET_AFTER;
        for socket in self.sockets.values() {
            if quiet(socket) {
                if socket.told {
                    let mut f = self.tell(socket, &self.judge(socket, review.node), socket.last_seen);
                    f.status = Status::Resolved;
                    out.push(f);
                }
            } else if socket.told || socket.tellable() {
                out.push(self.tell(socket, &self.judge(socket, review.node), now));
            }
        }
        // Those told stay told; the quiet ones, told over, go.
        self.sockets.retain(|_, s| !quiet(s));
        self.sockets.values_mut().for_each(|s| s.told |= s.tellable());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::fake::{pod, t, FakeNode};
    use crate::identify::actor::Role;
    use crate::inspect::FileFacts;

    const SOCKET: &str = "/var/lib/kubelet/plugins/ebs.csi.aws.com/csi.sock";

    fn kubelet() -> LifecycleIdentity {
        let actor = Actor {
            comm: "kubelet".into(),
            exe: Some("/usr/bin/kubelet".into()),
            parent: "systemd".into(),
            role: Role::Kubelet,
            description: "kubelet".into(),
        };
        let mut identity = LifecycleIdentity::of(Some(pod()), actor);
        identity.csi_volumes = vec![CsiVolume { pod: pod(), name: "pvc-1".into(), driver: "ebs.csi.aws.com".into() }];
        identity
    }

    fn connect(at: f64, errno: i32) -> LifecycleEvent {
        crate::lifecycle::tests::connect_failed(t(at), SOCKET, errno)
    }

    fn review(d: &mut CsiPluginGone, node: &mut FakeNode, at: f64) -> Vec<Finding> {
        d.review(&mut Review { now: t(at), in_flight: &[], node })
    }

    fn socket_file() -> FileFacts {
        FileFacts {
            mode: libc::S_IFSOCK | 0o755,
            uid: 0,
            gid: 0,
            nlink: 1,
            size: 0,
            is_dir: false,
            sticky: false,
            dev: (0, 0),
        }
    }

    #[test]
    fn kubelet_failing_to_reach_a_plugin_for_seconds_names_the_driver_the_volume_and_the_fix() {
        let mut d = CsiPluginGone::new(&DiagnoseOptions { node_name: "node-1".into(), ..Default::default() });
        let mut node = FakeNode::default();
        node.facts.insert(SOCKET.as_bytes().to_vec(), socket_file());
        d.lifecycle(&connect(0.0, libc::ECONNREFUSED), &kubelet());
        assert!(review(&mut d, &mut node, 1.0).is_empty(), "one failure may be a plugin restarting");
        for i in 1..=4 {
            d.lifecycle(&connect(f64::from(i), libc::ECONNREFUSED), &kubelet());
        }
        assert!(!d.wants_review(), "4 s of failures: not yet");
        for i in 5..=6 {
            d.lifecycle(&connect(f64::from(i), libc::ECONNREFUSED), &kubelet());
        }
        assert!(d.wants_review(), "the failure that proves it asks for a review at once");
        let found = review(&mut d, &mut node, 6.5);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(!d.wants_review(), "told: nothing more to ask");
        let f = &found[0];
        assert_eq!((f.kind, f.status, f.confidence), (Kind::CsiPluginGone, Status::Active, Confidence::Confirmed));
        assert_eq!(f.pod_uid, Some(pod()));
        assert!(f.summary.contains("driver ebs.csi.aws.com") && f.summary.contains("ECONNREFUSED"), "{}", f.summary);
        assert!(f.summary.contains("pvc-1 of pod"), "{}", f.summary);
        assert!(f.fix.contains("spec.nodeName=node-1") && f.fix.contains("-e ebs"), "{}", f.fix);
        assert!(f.advice.iter().any(|a| a.contains("kubectl get csinode node-1")), "{:?}", f.advice);
        assert_eq!(f.count, 7);
        // Still failing: still told; quiet past kubelet's longest backoff: resolved once.
        assert_eq!(review(&mut d, &mut node, 60.0).len(), 1);
        let over = review(&mut d, &mut node, 6.0 + QUIET_AFTER.as_secs_f64() + 1.0);
        assert_eq!(over.len(), 1);
        assert_eq!(over[0].status, Status::Resolved);
        assert!(review(&mut d, &mut node, 400.0).is_empty());
    }

    #[test]
    fn no_socket_file_is_said_so_and_a_path_that_disagrees_with_the_errno_is_only_likely() {
        let mut d = CsiPluginGone::new(&DiagnoseOptions::default());
        let mut node = FakeNode::default();
        for i in 0..=6 {
            d.lifecycle(&connect(f64::from(i), libc::ENOENT), &kubelet());
        }
        let f = review(&mut d, &mut node, 7.0).remove(0);
        assert_eq!(f.confidence, Confidence::Confirmed);
        assert!(f.summary.contains("no socket there"), "{}", f.summary);
        // The socket came back meanwhile (the plugin restarting): not confirmed.
        node.facts.insert(SOCKET.as_bytes().to_vec(), socket_file());
        let f = review(&mut d, &mut node, 7.5).remove(0);
        assert_eq!(f.confidence, Confidence::Likely);
    }

    /// kubelet in a container: its socket path is read through a process
    /// the inspector finds in kubelet's mount namespace, and where that
    /// namespace cannot be read, the path is unknown, never read elsewhere.
    #[test]
    fn kubelet_in_a_container_has_its_socket_read_in_its_own_namespace() {
        const KUBELET_NS: u32 = 4026532999;
        let in_a_container = |at: f64| {
            let mut event = connect(at, libc::ECONNREFUSED);
            if let Lifecycle::ConnectFailed(c) = &mut event.what {
                c.mntns = KUBELET_NS;
            }
            event
        };
        let mut d = CsiPluginGone::new(&DiagnoseOptions::default());
        let mut node = FakeNode::default();
        node.facts.insert(SOCKET.as_bytes().to_vec(), socket_file());
        for i in 0..=6 {
            d.lifecycle(&in_a_container(f64::from(i)), &kubelet());
        }
        let f = review(&mut d, &mut node, 7.0).remove(0);
        assert_eq!(f.confidence, Confidence::Likely, "no namespace read: the path unknown");
        assert!(node.roots_read.is_empty(), "{:?}", node.roots_read);
        node.namespaces.push(crate::inspect::MountNamespace {
            mntns: u64::from(KUBELET_NS),
            host: false,
            member: 4242,
            member_start: None,
            member_comm: "kubelet".into(),
            owner: None,
            mounts: Vec::new(),
        });
        let f = review(&mut d, &mut node, 7.5).remove(0);
        assert_eq!(f.confidence, Confidence::Confirmed);
        assert_eq!(node.roots_read, [4242]);
    }

    #[test]
    fn a_connect_that_names_no_volume_is_no_finding_and_sockets_are_bounded() {
        let mut d = CsiPluginGone::new(&DiagnoseOptions::default());
        let mut node = FakeNode::default();
        let mut nobody = kubelet();
        nobody.csi_volumes.clear();
        for i in 0..10 {
            d.lifecycle(&connect(f64::from(i), libc::ENOENT), &nobody);
        }
        assert!(review(&mut d, &mut node, 10.0).is_empty());
        for i in 0..(SOCKETS_MAX as u32 + 10) {
            let mut event = connect(f64::from(i), libc::ENOENT);
            if let Lifecycle::ConnectFailed(c) = &mut event.what {
                c.socket = format!("/var/lib/kubelet/plugins/ebs.csi.aws.com/{i}.sock").into_bytes();
            }
            d.lifecycle(&event, &kubelet());
        }
        assert_eq!(d.sockets.len(), SOCKETS_MAX);
    }
}
