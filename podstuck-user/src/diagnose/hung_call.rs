//! P6 `hung-call`: a removal or unmount entered the kernel and has not come
//! back, because the filesystem's server (a hard-mounted NFS server, a FUSE
//! daemon) does not answer. Everything that touches the mount then hangs
//! too, kubelet's volume cleanup included.
//!
//! Signature: a call in flight longer than `--hung-after` (default 5 s),
//! read from the kernel's in-flight map. Evidence: the task's state, wait
//! channel and kernel stack, the mount's filesystem, the FUSE servers and
//! their states. The mount is then never touched by podstuck itself.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use super::stuck_on::{
    is_fuse, is_network_fs, lost_multipath, on_fuse, on_lost_multipath, on_network_fs, on_unproven_fuse, LostMap,
};
use super::{
    human_duration, shown, CallInFlight, Confidence, Detector, Finding, FindingActor, Kind, Review, Severity, Status,
};
use crate::event::syscall_name;
use crate::inspect::mounts::mount_containing;
use crate::inspect::{Mount, MountNamespace, NodeInspector, Probe, Unreadable};

/// Kernel stack frames quoted.
const FRAMES_QUOTED: usize = 6;

pub struct HungCall {
    hung_after: Duration,
    /// Findings made, by (thread, entry time): resolved when the call returns.
    reported: HashMap<(u32, SystemTime), Finding>,
}

impl HungCall {
    pub fn new(hung_after: Duration) -> HungCall {
        HungCall { hung_after, reported: HashMap::new() }
    }

    fn finding(&self, call: &CallInFlight, review: &mut Review<'_>) -> Finding {
        let node = &mut *review.node;
        let waited = review.now.duration_since(call.flight.started).unwrap_or_default();
        let path = call.path.clone().unwrap_or_default();
        let key = format!("{}:{}", call.flight.tid, shown(&path));
        let mut f = Finding::new(Kind::HungCall, &key, Severity::Critical, call.flight.started);
        f.last_seen = review.now;
        f.count = 1;
        f.pod_uid = call.pod_uid.clone();
        f.pods = call.pod_uid.iter().cloned().collect();
        f.actor = Some(FindingActor::of(call.flight.pid, &call.actor));
        f.syscall = Some(syscall_name(call.flight.syscall));
        f.paths = vec![path.clone()];
        f.detail("waiting_s", waited.as_secs_f64().round());
        f.detail("tid", call.flight.tid);
        f.evidence(
            "in-flight map",
            format!(
                "{} of {} entered {} ago and has not returned",
                syscall_name(call.flight.syscall),
                shown(&path),
                human_duration(waited)
            ),
        );
        let mut state_words = String::new();
        match node.task(call.flight.tid) {
            Ok(t) => {
                state_words = t.waiting_words();
                f.evidence(
                    format!("/proc/{}/stat", call.flight.tid),
                    format!("task {} ({}) is {state_words}", call.flight.tid, t.comm),
                );
                if !t.stack.is_empty() {
                    let frames: Vec<&str> = t.stack.iter().take(FRAMES_QUOTED).map(String::as_str).collect();
                    f.evidence(format!("/proc/{}/stack", call.flight.tid), frames.join(" <- "));
                }
            }
            Err(why) if why.is_gone() => {
                f.evidence(format!("/proc/{}", call.flight.tid), format!("the task has exited since ({why})"))
            }
            Err(why) => f.evidence(format!("/proc/{}", call.flight.tid), why.said()),
        }
        if !path.is_empty() {
            // Whatever it is, podstuck keeps its own hands off it.
            node.avoid(&path);
        }
        // The caller's namespace (the thread is in the call, so alive): the
        // mount its path lies on is one of its own, not the node's.
        let namespace = node.mount_namespace(u64::from(call.mntns));
        let verdict = Self::judge(call, node, &namespace);
        let who = format!("{}'s {} of {}", call.actor.description, syscall_name(call.flight.syscall), shown(&path));
        let since = format!("has not returned for {}", human_duration(waited));
        let task = if state_words.is_empty() { String::new() } else { format!(" (the task is {state_words})") };
        let waiting = format!("{who} {since}{task}");
        Self::tell(&mut f, node, call, &namespace, &verdict, &waiting);
        f
    }

    /// What the call waits on, from the mount its path lies on in the
    /// caller's namespace and, for FUSE, the kernel's count of the
    /// requests waiting on that connection.
    fn judge(call: &CallInFlight, node: &mut dyn NodeInspector, namespace: &Probe<MountNamespace>) -> Verdict {
        let path = call.path.as_deref().unwrap_or_default();
        let ns = match namespace {
            Ok(ns) => ns,
            Err(why) => return Verdict::Unknown(Some(why.clone())),
        };
        let Some(mount) = mount_containing(&ns.mounts, path).cloned() else { return Verdict::Unknown(None) };
        if is_fuse(&mount) {
            return match node.fuse_waiting(mount.kernel_dev()) {
                Ok(n) if n > 0 => Verdict::Fuse { mount, waiting: Some(n) },
                // fusectl unreadable: the path of a call the node made names
                // the connection; a path a workload passed does not.
                Err(_) if call.proof.proven() => Verdict::Fuse { mount, waiting: None },
                count => Verdict::UnprovenFuse { mount, waiting: count },
            };
        }
        if is_network_fs(&mount) {
            return Verdict::NetworkFs(mount);
        }
        match lost_multipath(node, &mount) {
            Some(lost) => Verdict::LostDevice { mount, lost: Box::new(lost) },
            None => Verdict::LocalFs(mount),
        }
    }

    /// The verdict in words: summary, evidence, fix and advice.
    fn tell(
        f: &mut Finding,
        node: &mut dyn NodeInspector,
        call: &CallInFlight,
        namespace: &Probe<MountNamespace>,
        verdict: &Verdict,
        waiting: &str,
    ) {
        let path = call.path.as_deref().unwrap_or_default();
        match (verdict, namespace) {
            (Verdict::Fuse { mount, waiting: requests }, Ok(ns)) => {
                on_fuse(f, node, (ns, mount), *requests, path, waiting)
            }
            (Verdict::UnprovenFuse { mount, waiting: count }, _) => {
                on_unproven_fuse(f, &[(mount, count.clone())], waiting, &format!("/proc/{}/stack", call.flight.tid))
            }
            (Verdict::NetworkFs(m), Ok(ns)) => {
                f.evidence(
                    "mountinfo",
                    format!(
                        "{} is on a {} mount of {} at {} ({})",
                        shown(path),
                        m.fstype,
                        m.source,
                        shown(&m.mount_point),
                        m.super_options
                    ),
                );
                on_network_fs(f, ns, m, waiting);
            }
            (Verdict::LostDevice { mount: m, lost }, _) => {
                f.evidence(
                    "mountinfo",
                    format!(
                        "{} is on a {} mount at {} of device {}:{}",
                        shown(path),
                        m.fstype,
                        shown(&m.mount_point),
                        m.dev.0,
                        m.dev.1
                    ),
                );
                let lost = on_lost_multipath(f, lost, "the call returns, failed with EIO");
                f.summary =
                    format!("{waiting}: its filesystem's device {lost}, so the call waits until a path is back.");
            }
            (Verdict::LocalFs(m), Ok(_)) => {
                f.evidence(
                    "mountinfo",
                    format!("{} is on a {} mount at {}", shown(path), m.fstype, shown(&m.mount_point)),
                );
                f.summary = format!(
                    "{waiting}, on a local {} filesystem: a storage device or a kernel lock is stuck.",
                    m.fstype
                );
                // No unmount: forcing a local filesystem off frees no task
                // waiting on its device, and lazily detaching the node's
                // own (`/`, /var) would harm every process on it.
                f.fix = format!("cat /proc/{}/stack", call.flight.tid);
                f.advice.push("check the device: dmesg | tail -n 50 (I/O errors, hung task warnings)".into());
            }
            _ => {
                if let Verdict::Unknown(Some(why)) = verdict {
                    f.evidence("mountinfo", format!("the caller's mount namespace: {}", why.said()));
                }
                f.summary = format!("{waiting}.");
                f.fix = format!("cat /proc/{}/stack", call.flight.tid);
            }
        }
        f.confidence = verdict.confidence();
    }
}

/// What hung-call decides a call that has not returned waits on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A FUSE connection proven to hold it: the kernel counts `waiting`
    /// requests on it (None: fusectl unreadable, and the path is the
    /// node's own, so it names the connection).
    Fuse { mount: Mount, waiting: Option<u64> },
    /// A FUSE mount the call is not proven to wait on: nothing waits on
    /// its connection, or only a workload's path names it (its count as read).
    UnprovenFuse { mount: Mount, waiting: Probe<u64> },
    /// A network filesystem whose server does not answer.
    NetworkFs(Mount),
    /// A local filesystem on a multipath map that lost every path and
    /// queues its I/O: the call waits until a path is back.
    LostDevice { mount: Mount, lost: Box<LostMap> },
    /// A local filesystem: a device or a kernel lock.
    LocalFs(Mount),
    /// Unknown: the caller's namespace unreadable (why), or no mount holds the path.
    Unknown(Option<Unreadable>),
}

impl Verdict {
    pub fn confidence(&self) -> Confidence {
        match self {
            Verdict::Fuse { .. } | Verdict::NetworkFs(_) | Verdict::LostDevice { .. } => Confidence::Confirmed,
            Verdict::UnprovenFuse { .. } | Verdict::LocalFs(_) => Confidence::Likely,
            Verdict::Unknown(_) => Confidence::Possible,
        }
    }
}

impl Detector for HungCall {
    fn review(&mut self, review: &mut Review<'_>) -> Vec<Finding> {
        let mut out = Vec::new();
        let in_flight: Vec<CallInFlight> = review.in_flight.to_vec();
        let now = review.now;
        // Calls that returned since: resolved.
        let still: std::collections::HashSet<(u32, SystemTime)> =
            in_flight.iter().map(|c| (c.flight.tid, c.flight.started)).collect();
        let gone: Vec<(u32, SystemTime)> = self.reported.keys().filter(|k| !still.contains(k)).copied().collect();
        for key in gone {
            let mut f = self.reported.remove(&key).expect("listed");
            f.status = Status::Resolved;
            f.last_seen = now;
            f.evidence("in-flight map", "the call has returned");
            out.push(f);
        }
        for call in
            in_flight.iter().filter(|c| now.duration_since(c.flight.started).unwrap_or_default() >= self.hung_after)
        {
            let key = (call.flight.tid, call.flight.started);
            let recheck = self
                .reported
                .get(&key)
                .is_none_or(|f| now.duration_since(f.last_seen).unwrap_or_default() >= super::track::RECHECK);
            if recheck {
                let f = self.finding(call, review);
                self.reported.insert(key, f);
            }
            out.push(self.reported[&key].clone());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::*;
    use super::*;
    use crate::event::{Flight, AT_FDCWD};
    use crate::identify::actor::Role;
    use crate::identify::tests::actor;
    use podstuck_common::Syscall;

    fn in_flight(path: &str, started: f64) -> CallInFlight {
        CallInFlight {
            flight: Flight {
                tid: 4321,
                pid: 4321,
                syscall: Syscall::Unlinkat,
                flags: 0,
                dfd: AT_FDCWD,
                started: t(started),
                path: Some(path.into()),
            },
            path: Some(path.into()),
            pod_uid: Some(pod()),
            actor: actor("kubelet", "systemd", Role::Kubelet),
            mntns: 0,
            proof: crate::identify::path_proof::PathProof::NodeNamespace,
        }
    }

    /// What hung-call decides `call` waits on, on `node`.
    fn verdict(node: &mut FakeNode, call: &CallInFlight) -> Verdict {
        let namespace = node.mount_namespace(u64::from(call.mntns));
        HungCall::judge(call, node, &namespace)
    }

    #[test]
    fn what_keeps_the_call_hung_is_decided_before_it_is_said() {
        let mut node = FakeNode::with_mounts(&["77 /mnt/fuse fuse.sshfs", "78 /mnt/nfs nfs4", "79 /mnt/disk ext4"]);
        let fuse = |v: Verdict| match v {
            Verdict::Fuse { waiting, .. } => Ok(waiting),
            Verdict::UnprovenFuse { waiting, .. } => Err(waiting),
            other => panic!("{other:?}"),
        };
        // kubelet's own path, fusectl unreadable: its path names the connection.
        assert_eq!(fuse(verdict(&mut node, &in_flight("/mnt/fuse/a", 0.0))), Ok(None));
        node.fuse_waiting.insert(77, 2);
        assert_eq!(fuse(verdict(&mut node, &in_flight("/mnt/fuse/a", 0.0))), Ok(Some(2)));
        node.fuse_waiting.insert(77, 0);
        assert_eq!(fuse(verdict(&mut node, &in_flight("/mnt/fuse/a", 0.0))), Err(Ok(0)));
        assert!(
            matches!(verdict(&mut node, &in_flight("/mnt/nfs/d", 0.0)), Verdict::NetworkFs(m) if m.fstype == "nfs4")
        );
        assert!(
            matches!(verdict(&mut node, &in_flight("/mnt/disk/d", 0.0)), Verdict::LocalFs(m) if m.fstype == "ext4")
        );
        // A local filesystem is never unmounted by a fix: the node's own may be it.
        let mut root =
            FakeNode { mountinfo: "1 0 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n".into(), ..Default::default() };
        let f =
            &run_with(&mut HungCall::new(Duration::from_secs(5)), &mut root, &[], &[in_flight("/var/x", 0.0)], 6.0)[0];
        assert_eq!((f.fix.as_str(), f.confidence), ("cat /proc/4321/stack", Confidence::Likely));
        let mut gone = in_flight("/mnt/disk/d", 0.0);
        gone.mntns = 4026532999;
        assert!(matches!(verdict(&mut node, &gone), Verdict::Unknown(Some(_))));
        assert_eq!(Verdict::Unknown(None).confidence(), Confidence::Possible);
    }

    /// An unlink on ext4 over a multipath map that lost its path and
    /// queues: the device is named, with the fix that fails its I/O; on a
    /// map that still has a path, a local filesystem as before.
    #[test]
    fn a_call_on_a_filesystem_whose_multipath_map_lost_every_path_waits_on_the_map() {
        let mut node = FakeNode::with_mounts(&[]);
        node.mountinfo.push_str("50 1 254:3 / /mnt/disk rw,relatime shared:50 - ext4 /dev/mapper/mpatha rw\n");
        node.mappers = vec![crate::inspect::device_mapper::map(
            "1 queue_if_no_path 0 1 1 round-robin 0 1 1 7:0 1",
            "2 1 0 0 1 1 E 0 1 0 7:0 F 1",
        )];
        let calls = [in_flight("/mnt/disk/d", 0.0)];
        let f = &run_with(&mut HungCall::new(Duration::from_secs(5)), &mut node, &[], &calls, 6.0)[0];
        assert_eq!(
            (f.fix.as_str(), f.confidence),
            ("dmsetup message -- mpatha 0 fail_if_no_path", Confidence::Confirmed)
        );
        assert!(f.summary.contains("its filesystem's device dm-3 (mpatha) is a multipath map that lost its paths (every path failed: 7:0 failed (1 failure(s)))"), "{}", f.summary);
        assert!(f.advice[0].contains("then the call returns, failed with EIO"), "{:?}", f.advice);
        node.mappers[0].targets[0].status = "2 0 0 0 1 1 A 0 1 0 7:0 A 0".into();
        assert!(matches!(verdict(&mut node, &calls[0]), Verdict::LocalFs(_)));
    }

    #[test]
    fn an_unlink_stuck_on_a_stopped_fuse_server() {
        let mut d = HungCall::new(Duration::from_secs(5));
        let mut node = FakeNode::with_mounts(&["77 /mnt/fuse fuse.sshfs", "20 /sys/fs/fuse/connections fusectl"]);
        let mut t = task(4321, "kubelet", 'S');
        t.wchan = Some("request_wait_answer".into());
        t.stack = vec!["request_wait_answer".into(), "fuse_simple_request".into(), "fuse_lookup_name".into()];
        node.tasks.insert(4321, t);
        node.fuse.push(task(900, "sshfs", 'T'));
        let mut server = one_thread(task(900, "sshfs", 'T'));
        server.start = 9_000;
        node.processes.insert(900, server);
        let calls = [in_flight("/mnt/fuse/a", 0.0)];
        assert!(run_with(&mut d, &mut node, &[], &calls, 3.0).is_empty());
        let found = run_with(&mut d, &mut node, &[], &calls, 6.0);
        let f = &found[0];
        assert_eq!(f.kind, Kind::HungCall);
        assert_eq!(f.fix, "echo 1 > /sys/fs/fuse/connections/77/abort");
        assert!(f.summary.contains("FUSE server pid 900 (sshfs) is stopped"), "{}", f.summary);
        assert!(f.evidence.iter().any(|e| e.fact.contains("T (stopped)")));
        assert!(f.evidence.iter().any(|e| e.fact.contains("request_wait_answer <- fuse_simple_request")));
        assert_eq!(
            f.advice[0],
            "or, if the server should live on, continue it: [ \"$(sed 's/.*) //' /proc/900/stat | cut -d' ' -f20)\" = 9000 ] && kill -CONT 900"
        );
        assert_eq!(node.avoided, vec![b"/mnt/fuse/a".to_vec()]);
        // Where fusectl is not mounted, the fix mounts it first.
        let mut bare = FakeNode::with_mounts(&["77 /mnt/fuse fuse.sshfs"]);
        let f = &run_with(&mut HungCall::new(Duration::from_secs(5)), &mut bare, &[], &calls, 6.0)[0];
        assert_eq!(
            f.fix,
            "mount -t fusectl fusectl /sys/fs/fuse/connections && echo 1 > /sys/fs/fuse/connections/77/abort"
        );
        // fuseblk (ntfs-3g, exfat over FUSE) is on a block device: fusectl
        // names its connection by the whole dev_t, major and minor.
        let mut blk = FakeNode::with_mounts(&["20 /sys/fs/fuse/connections fusectl"]);
        blk.mountinfo.push_str("78 1 8:17 / /mnt/fuse rw,relatime shared:78 - fuseblk /dev/sdb1 rw\n");
        let f = &run_with(&mut HungCall::new(Duration::from_secs(5)), &mut blk, &[], &calls, 6.0)[0];
        assert_eq!(f.fix, format!("echo 1 > /sys/fs/fuse/connections/{}/abort", (8 << 20) | 17));
        // It returns: resolved once.
        let after = run_with(&mut d, &mut node, &[], &[], 8.0);
        assert_eq!(after[0].status, Status::Resolved);
        assert!(run_with(&mut d, &mut node, &[], &[], 9.0).is_empty());
    }

    /// A pod's own process, in its own namespace, stuck on a FUSE mount
    /// of that namespace: the mount is found in its table, never the
    /// node's; its connection is aborted only where the kernel counts a
    /// request waiting on it, and the server is continued only where it is
    /// the one process serving FUSE.
    #[test]
    fn a_call_in_its_own_namespace_is_told_from_its_own_mounts_and_proven_by_the_kernels_count() {
        const POD_NS: u32 = 4026532777;
        let mut call = in_flight("/data/f", 0.0);
        call.mntns = POD_NS;
        call.proof = crate::identify::path_proof::PathProof::claim(crate::identify::path_proof::Unproven::NotTheNodes);
        let calls = [call];
        let node = || {
            let mut node = FakeNode::with_mounts(&["77 /data ext4", "20 /sys/fs/fuse/connections fusectl"])
                .with_namespace(u64::from(POD_NS), 4321, "app", &["88 /data fuse.gcsfuse"]);
            node.fuse.extend([task(900, "sshfs", 'T'), task(901, "gcsfuse", 'T')]);
            node
        };
        let mut waiting = node();
        waiting.fuse_waiting.insert(88, 1);
        let f = &run_with(&mut HungCall::new(Duration::from_secs(5)), &mut waiting, &[], &calls, 6.0)[0];
        assert_eq!(f.fix, "echo 1 > /sys/fs/fuse/connections/88/abort");
        assert!(f.summary.contains("which of them serves this connection cannot be told apart"), "{}", f.summary);
        assert!(!f.advice.iter().any(|a| a.contains("CONT")), "{:?}", f.advice);
        // No count to read: a workload's path alone names no connection.
        let mut unread = node();
        let f = &run_with(&mut HungCall::new(Duration::from_secs(5)), &mut unread, &[], &calls, 6.0)[0];
        assert_eq!(f.confidence, Confidence::Likely);
        assert!(!f.fix.contains("abort"), "{}", f.fix);
        // Nothing waits on it: it waits elsewhere.
        let mut idle = node();
        idle.fuse_waiting.insert(88, 0);
        let f = &run_with(&mut HungCall::new(Duration::from_secs(5)), &mut idle, &[], &calls, 6.0)[0];
        assert!(!f.fix.contains("abort"), "{}", f.fix);
    }

    #[test]
    fn an_unmount_stuck_on_a_dead_nfs_server() {
        let mut d = HungCall::new(Duration::from_secs(5));
        let mut node = FakeNode::with_mounts(&["78 /var/lib/kubelet/pods/x/volumes/kubernetes.io~nfs/data nfs4"]);
        let calls = [in_flight("/var/lib/kubelet/pods/x/volumes/kubernetes.io~nfs/data", 0.0)];
        let f = &run_with(&mut d, &mut node, &[], &calls, 30.0)[0];
        assert_eq!(f.fix, "umount -f -l -- /var/lib/kubelet/pods/x/volumes/kubernetes.io~nfs/data");
        assert!(f.summary.contains("server nfs4 does not answer"), "{}", f.summary);
    }
}
