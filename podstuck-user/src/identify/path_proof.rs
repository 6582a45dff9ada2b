//! Whose word a call's path is. The kernel reports a path as the caller
//! passed it, resolved in the caller's own mount namespace; a pod's
//! process may mount a tmpfs over `/var/lib/kubelet` in its namespace and
//! make `pods/<another pod>/volumes/...` there, or name any directory
//! after another pod's UID. Such a path says nothing about the node, and
//! if podstuck believed it, one pod could give another a critical finding
//! whose fix deletes that pod's data or unmounts its live volume.
//!
//! So a path speaks for the node only when the kernel proves it does:
//! - the call was made in the node's own mount namespace;
//! - or in the mount namespace of the node's kubelet or container runtime
//!   running in a container of its own (kind, k3d, minikube, Talos): a
//!   process of that namespace, in no pod's cgroup, runs their
//!   executable; the caller is in no pod's cgroup either;
//! - or in another namespace where the path's directory entry is the
//!   node's own: the same filesystem and the same directory in it,
//!   found by walking both mount tables as the kernel's lookup does
//!   ([`entry_location`]) (a CSI node plugin whose pod mounts the kubelet
//!   directory from the node).
//!
//! Where the kernel cannot say the namespace (its reads off), a caller in
//! no pod's cgroup is a node component ([`PathProof::OutsidePods`]).
//! Anything else is a [`PathProof::Claim`]: the call concerns the
//! caller's own pod (by its cgroup, which the kernel read) and nothing
//! its path names; the detectors that read the node at a call's path
//! never see it, and it is counted by why ([`Unproven::name`]).
//!
//! The decision is pure over [`NamespaceFacts`]; [`super::namespaces`]
//! reads the facts from /proc.

use crate::mountinfo::{entry_location, Mount};

/// How far a call's path speaks for the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathProof {
    /// Made in the node's own mount namespace: the path is the node's.
    NodeNamespace,
    /// Made in the mount namespace of the node's kubelet or runtime,
    /// which run in a container of their own: the path is theirs, and
    /// state is read and fixes act in that namespace.
    RuntimeNamespace {
        mntns: u32,
        /// The runtime's executable's name ("kubelet", "containerd").
        runtime: String,
    },
    /// Made in another mount namespace where the path's directory entry
    /// is the node's own (the same filesystem and directory).
    NodeDirectory { mntns: u32 },
    /// The kernel could not say the caller's mount namespace (its reads
    /// off: lockdown=confidentiality), and the caller runs in no pod's
    /// cgroup (which the kernel says all the same): a node component, its
    /// path taken as the node's, as podstuck took every path before it
    /// could prove one.
    OutsidePods,
    /// Not proven: the path is the caller's word alone.
    Claim { why: Unproven },
    /// Read from a record made before podstuck proved paths: taken as it
    /// was then, so a replay says what the run said.
    Unrecorded,
}

/// Why a path was not taken as the node's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Unproven {
    /// The kernel could not say which mount namespace the caller was in.
    NamespaceUnknown,
    /// No process is left in the caller's namespace to read it through.
    NamespaceGone,
    /// The caller's or the node's mount table could not be read.
    TableUnreadable,
    /// The path's directory in the caller's namespace is not the node's.
    NotTheNodes,
    /// The call has no absolute path to prove.
    NoPath,
}

impl Unproven {
    /// The reason's name, as `/metrics` labels it.
    pub fn name(self) -> &'static str {
        match self {
            Unproven::NamespaceUnknown => "namespace-unknown",
            Unproven::NamespaceGone => "namespace-gone",
            Unproven::TableUnreadable => "table-unreadable",
            Unproven::NotTheNodes => "not-the-nodes-directory",
            Unproven::NoPath => "no-path",
        }
    }

    /// In words, after "the path was not taken as the node's: ".
    pub fn words(self) -> &'static str {
        match self {
            Unproven::NamespaceUnknown => "the kernel did not say which mount namespace the caller was in",
            Unproven::NamespaceGone => {
                "no process was left in the caller's mount namespace to read its mounts through"
            }
            Unproven::TableUnreadable => "the caller's or the node's mount table could not be read",
            Unproven::NotTheNodes => {
                "in the caller's mount namespace its directory is not the node's (another filesystem or directory is mounted there)"
            }
            Unproven::NoPath => "the call's absolute path is not known",
        }
    }

    /// Every reason, in the order `/metrics` lists them.
    pub const ALL: [Unproven; 5] = [
        Unproven::NamespaceUnknown,
        Unproven::NamespaceGone,
        Unproven::TableUnreadable,
        Unproven::NotTheNodes,
        Unproven::NoPath,
    ];
}

impl PathProof {
    /// Whether the path names the node's state (or, in a runtime's
    /// namespace, the state its runtime acts on).
    pub fn proven(&self) -> bool {
        !matches!(self, PathProof::Claim { .. })
    }

    /// The name `--json` gives it.
    pub fn name(&self) -> &'static str {
        match self {
            PathProof::NodeNamespace => "node-namespace",
            PathProof::RuntimeNamespace { .. } => "runtime-namespace",
            PathProof::NodeDirectory { .. } => "node-directory",
            PathProof::OutsidePods => "outside-pods",
            PathProof::Claim { .. } => "claim",
            PathProof::Unrecorded => "unrecorded",
        }
    }

    /// Why it is a claim, if it is one.
    pub fn unproven(&self) -> Option<Unproven> {
        match self {
            PathProof::Claim { why } => Some(*why),
            _ => None,
        }
    }

    pub fn claim(why: Unproven) -> PathProof {
        PathProof::Claim { why }
    }
}

/// Calls set aside because their path was a claim: never diagnosed,
/// counted so that nothing is dropped silently.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimsSetAside {
    /// Failed calls (what a detector would have looked at), by why.
    pub failed: std::collections::BTreeMap<Unproven, u64>,
    /// Calls, failed or not, whose path named a pod other than the caller's.
    pub naming_another_pod: u64,
}

impl ClaimsSetAside {
    /// Counts one call of `proof` that failed or not, whose unproven path
    /// named `claimed_pod`; a proven call is not counted.
    pub fn count(&mut self, proof: &PathProof, failed: bool, names_another_pod: bool) {
        let Some(why) = proof.unproven() else { return };
        if failed {
            *self.failed.entry(why).or_default() += 1;
        }
        if names_another_pod {
            self.naming_another_pod += 1;
        }
    }

    /// The failed calls by reason's name, as the run's totals keep them.
    pub fn by_name(&self) -> std::collections::BTreeMap<String, u64> {
        self.failed.iter().map(|(why, n)| (why.name().to_string(), *n)).collect()
    }
}

/// What the decision needs of the node's mount namespaces, read when
/// asked (only calls made outside the node's namespace ask).
pub trait NamespaceFacts {
    /// The node's own mount table.
    fn node_table(&mut self) -> Option<&[Mount]>;
    /// The kubelet or runtime (its executable's name) living in namespace
    /// `mntns`, in no pod's cgroup; `caller`, alive in it, is asked first.
    fn runtime_in(&mut self, mntns: u32, caller: u32) -> Option<String>;
    /// Namespace `mntns`'s mount table, read through a process living in
    /// it (`caller` first).
    fn table_of(&mut self, mntns: u32, caller: u32) -> Result<&[Mount], Unproven>;
}

/// The call to judge.
#[derive(Clone, Copy, Debug)]
pub struct CallPlace<'a> {
    /// The caller's mount namespace, as the kernel read it (0: unknown).
    pub mntns: u32,
    pub pid: u32,
    /// Whether the kernel placed the caller in a pod's cgroup.
    pub in_a_pod: bool,
    /// The absolute path, in the caller's namespace, when known.
    pub path: Option<&'a [u8]>,
}

/// How far `call`'s path speaks for the node whose own namespace is
/// `node_mntns`. `node_spellings`: the path as the node's table may name
/// it besides itself (a symlinked kubelet root's real directory).
pub fn judge(
    call: CallPlace<'_>,
    node_mntns: u32,
    node_spellings: &[Vec<u8>],
    facts: &mut dyn NamespaceFacts,
) -> PathProof {
    if call.mntns == 0 {
        return match call.in_a_pod {
            false => PathProof::OutsidePods,
            true => PathProof::claim(Unproven::NamespaceUnknown),
        };
    }
    if call.mntns == node_mntns {
        return PathProof::NodeNamespace;
    }
    if !call.in_a_pod {
        if let Some(runtime) = facts.runtime_in(call.mntns, call.pid) {
            return PathProof::RuntimeNamespace { mntns: call.mntns, runtime };
        }
    }
    let Some(path) = call.path else { return PathProof::claim(Unproven::NoPath) };
    let theirs = match facts.table_of(call.mntns, call.pid) {
        Ok(table) => entry_location(table, path),
        Err(why) => return PathProof::claim(why),
    };
    let Some(theirs) = theirs else { return PathProof::claim(Unproven::NotTheNodes) };
    let Some(node) = facts.node_table() else { return PathProof::claim(Unproven::TableUnreadable) };
    let same = std::iter::once(path)
        .chain(node_spellings.iter().map(Vec::as_slice))
        .any(|spelling| entry_location(node, spelling).as_ref() == Some(&theirs));
    match same {
        true => PathProof::NodeDirectory { mntns: call.mntns },
        false => PathProof::claim(Unproven::NotTheNodes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mountinfo::parse_mountinfo;

    const NODE_NS: u32 = 4026531841;
    const POD_NS: u32 = 4026532900;
    const VOLUME: &[u8] = b"/var/lib/kubelet/pods/b/volumes/kubernetes.io~csi/pv/mount";

    /// A node whose namespaces are given by their tables and runtimes.
    #[derive(Default)]
    struct Facts {
        node: Vec<Mount>,
        tables: Vec<(u32, Vec<Mount>)>,
        runtimes: Vec<(u32, &'static str)>,
        asked_runtime: bool,
    }

    impl NamespaceFacts for Facts {
        fn node_table(&mut self) -> Option<&[Mount]> {
            Some(&self.node)
        }
        fn runtime_in(&mut self, mntns: u32, _caller: u32) -> Option<String> {
            self.asked_runtime = true;
            self.runtimes.iter().find(|(ns, _)| *ns == mntns).map(|(_, r)| r.to_string())
        }
        fn table_of(&mut self, mntns: u32, _caller: u32) -> Result<&[Mount], Unproven> {
            self.tables.iter().find(|(ns, _)| *ns == mntns).map(|(_, t)| t.as_slice()).ok_or(Unproven::NamespaceGone)
        }
    }

    fn facts(namespace: Option<&[u8]>) -> Facts {
        let node = parse_mountinfo(
            b"22 1 8:1 / / rw shared:1 - ext4 /dev/sda1 rw\n\
              90 22 0:70 / /var/lib/kubelet/pods/b/volumes/kubernetes.io~csi/pv/mount rw shared:40 - tmpfs tmpfs rw\n",
        );
        let tables = namespace.map(|t| vec![(POD_NS, parse_mountinfo(t))]).unwrap_or_default();
        Facts { node, tables, ..Facts::default() }
    }

    fn call(mntns: u32, in_a_pod: bool) -> CallPlace<'static> {
        CallPlace { mntns, pid: 4242, in_a_pod, path: Some(VOLUME) }
    }

    #[test]
    fn a_call_in_the_nodes_namespace_is_the_nodes_without_reading_anything() {
        let mut facts = facts(None);
        assert_eq!(judge(call(NODE_NS, true), NODE_NS, &[], &mut facts), PathProof::NodeNamespace);
        assert!(!facts.asked_runtime);
    }

    #[test]
    fn a_pods_tmpfs_over_the_kubelet_directory_is_its_own_claim() {
        let mut facts = facts(Some(
            b"500 400 0:80 / / rw - overlay overlay rw\n502 500 0:81 / /var/lib/kubelet rw - tmpfs tmpfs rw\n",
        ));
        let proof = judge(call(POD_NS, true), NODE_NS, &[], &mut facts);
        assert_eq!(proof, PathProof::claim(Unproven::NotTheNodes));
        assert!(!proof.proven());
        // A pod's process is never taken for a runtime, whatever runs beside it.
        assert!(!facts.asked_runtime);
    }

    #[test]
    fn a_plugin_with_the_nodes_kubelet_directory_speaks_for_the_node() {
        let mut facts = facts(Some(
            b"500 400 0:80 / / rw - overlay overlay rw\n501 500 8:1 /var/lib/kubelet /var/lib/kubelet rw - ext4 /dev/sda1 rw\n",
        ));
        assert_eq!(judge(call(POD_NS, true), NODE_NS, &[], &mut facts), PathProof::NodeDirectory { mntns: POD_NS });
    }

    #[test]
    fn a_namespace_with_no_process_left_proves_nothing() {
        let mut facts = facts(None);
        assert_eq!(judge(call(POD_NS, true), NODE_NS, &[], &mut facts), PathProof::claim(Unproven::NamespaceGone));
        // The namespace unknown (the kernel's reads off): a pod's caller
        // proves nothing; one in no pod's cgroup is a node component.
        assert_eq!(judge(call(0, true), NODE_NS, &[], &mut facts), PathProof::claim(Unproven::NamespaceUnknown));
        assert_eq!(judge(call(0, false), NODE_NS, &[], &mut facts), PathProof::OutsidePods);
        let no_path = CallPlace { path: None, ..call(POD_NS, true) };
        assert_eq!(judge(no_path, NODE_NS, &[], &mut facts), PathProof::claim(Unproven::NoPath));
    }

    #[test]
    fn kubelet_in_a_container_speaks_for_its_namespace_when_the_caller_is_no_pods() {
        let mut facts = facts(Some(b"500 400 0:80 / / rw - overlay overlay rw\n"));
        facts.runtimes.push((POD_NS, "kubelet"));
        assert_eq!(
            judge(call(POD_NS, false), NODE_NS, &[], &mut facts),
            PathProof::RuntimeNamespace { mntns: POD_NS, runtime: "kubelet".into() }
        );
        // The same namespace, a caller in a pod's cgroup: its table decides.
        assert_eq!(judge(call(POD_NS, true), NODE_NS, &[], &mut facts), PathProof::claim(Unproven::NotTheNodes));
    }

    #[test]
    fn a_symlinked_kubelet_root_is_matched_in_the_nodes_spelling() {
        // On the node, /var/lib/kubelet is a link to /data/kubelet, a disk of its own.
        let mut facts = Facts {
            node: parse_mountinfo(
                b"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n23 22 8:17 / /data/kubelet rw - ext4 /dev/sdb1 rw\n",
            ),
            tables: vec![(
                POD_NS,
                parse_mountinfo(
                    b"500 400 0:80 / / rw - overlay overlay rw\n501 500 8:17 / /var/lib/kubelet rw - ext4 /dev/sdb1 rw\n",
                ),
            )],
            ..Facts::default()
        };
        let spelled = b"/data/kubelet/pods/b/volumes/kubernetes.io~csi/pv/mount".to_vec();
        assert_eq!(judge(call(POD_NS, true), NODE_NS, &[], &mut facts), PathProof::claim(Unproven::NotTheNodes));
        assert_eq!(
            judge(call(POD_NS, true), NODE_NS, &[spelled], &mut facts),
            PathProof::NodeDirectory { mntns: POD_NS }
        );
    }
}
