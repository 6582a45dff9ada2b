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

use super::shell::{unmount_forced, unmount_lazily, write_file};
use super::{
    human_duration, shown, CallInFlight, Confidence, Detector, Finding, FindingActor, Kind, Review, Severity, Status,
};
use crate::event::{syscall_name, CallEvent};
use crate::identify::Identity;
use crate::inspect::mounts::mount_containing;
use crate::inspect::{Mount, NodeInspector};

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
                let wchan = t.wchan.as_ref().map(|w| format!(", waiting in {w}")).unwrap_or_default();
                state_words = format!("{}{wchan}", t.state_words());
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
        let mount: Option<Mount> = node.host_mounts().ok().and_then(|m| mount_containing(&m, &path).cloned());
        let who = format!("{}'s {} of {}", call.actor.description, syscall_name(call.flight.syscall), shown(&path));
        let since = format!("has not returned for {}", human_duration(waited));
        let task = if state_words.is_empty() { String::new() } else { format!(" (the task is {state_words})") };
        match &mount {
            Some(m) if m.fstype == "fuse" || m.fstype.starts_with("fuse.") || m.fstype == "fuseblk" => {
                Self::on_fuse(&mut f, node, m, &path, &format!("{who} {since}{task}"));
            }
            Some(m)
                if m.fstype.starts_with("nfs") || m.fstype == "cifs" || m.fstype == "smb3" || m.fstype == "ceph" =>
            {
                f.confidence = Confidence::Confirmed;
                f.evidence(
                    "mountinfo",
                    format!(
                        "{} is on a {} mount of {} at {} ({})",
                        shown(&path),
                        m.fstype,
                        m.source,
                        shown(&m.mount_point),
                        m.super_options
                    ),
                );
                f.summary = format!("{who} {since}{task}: the {} server {} does not answer.", m.fstype, m.source);
                f.fix = unmount_forced(&m.mount_point);
                f.advice.push(format!("better: bring {} back; the calls then complete by themselves", m.source));
            }
            Some(m) => {
                f.confidence = Confidence::Likely;
                f.evidence(
                    "mountinfo",
                    format!("{} is on a {} mount at {}", shown(&path), m.fstype, shown(&m.mount_point)),
                );
                f.summary = format!(
                    "{who} {since}{task}, on a local {} filesystem: a storage device or a kernel lock is stuck.",
                    m.fstype
                );
                f.fix = unmount_forced(&m.mount_point);
                f.advice.push("check the device: dmesg | tail -n 50 (I/O errors, hung task warnings)".into());
            }
            None => {
                f.confidence = Confidence::Possible;
                f.summary = format!("{who} {since}{task}.");
                f.fix = format!("cat /proc/{}/stack", call.flight.tid);
            }
        }
        f
    }
    /// A call hung on a FUSE mount: whether its server is stopped or gone,
    /// and how to abort the connection. `waiting` says who waits since when.
    pub(super) fn on_fuse(f: &mut Finding, node: &mut dyn NodeInspector, m: &Mount, path: &[u8], waiting: &str) {
        // fusectl names a connection by its dev_t: the minor alone for
        // fuse, major and minor together for fuseblk (a block device).
        let connection = m.kernel_dev();
        f.confidence = Confidence::Confirmed;
        f.evidence(
            "mountinfo",
            format!(
                "{} is on a FUSE mount at {} ({}, connection {connection})",
                shown(path),
                shown(&m.mount_point),
                m.fstype
            ),
        );
        let servers = node.fuse_servers();
        let stopped: Vec<_> = servers.iter().filter(|s| s.state == 'T' || s.state == 't').collect();
        for s in &servers {
            f.evidence("/proc/*/fd", format!("FUSE server pid {} ({}) is {}", s.pid, s.comm, s.state_words()));
        }
        let server_words = match (stopped.first(), servers.is_empty()) {
            (Some(s), _) => format!("its FUSE server pid {} ({}) is stopped", s.pid, s.comm),
            (None, true) => "no process has /dev/fuse open: the FUSE server is gone".into(),
            (None, false) => "its FUSE server does not answer".into(),
        };
        f.summary = format!("{waiting}: {server_words}, so every call on {} waits.", shown(&m.mount_point));
        let abort = write_file("1", format!("/sys/fs/fuse/connections/{connection}/abort").as_bytes());
        let fusectl = node.host_mounts().map(|m| m.iter().any(|m| m.fstype == "fusectl")).unwrap_or(true);
        f.fix = if fusectl { abort } else { format!("mount -t fusectl fusectl /sys/fs/fuse/connections && {abort}") };
        for s in stopped {
            f.advice.push(format!("or, if the server should live on, continue it: kill -CONT {}", s.pid));
        }
        f.advice.push(format!("after aborting, unmount it: {}", unmount_lazily(&m.mount_point)));
    }
}

impl Detector for HungCall {
    fn observe(&mut self, _event: &CallEvent, _identity: &Identity) {}

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
        }
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
        let calls = [in_flight("/mnt/fuse/a", 0.0)];
        assert!(run_with(&mut d, &mut node, &[], &calls, 3.0).is_empty());
        let found = run_with(&mut d, &mut node, &[], &calls, 6.0);
        let f = &found[0];
        assert_eq!(f.kind, Kind::HungCall);
        assert_eq!(f.fix, "echo 1 > /sys/fs/fuse/connections/77/abort");
        assert!(f.summary.contains("FUSE server pid 900 (sshfs) is stopped"), "{}", f.summary);
        assert!(f.evidence.iter().any(|e| e.fact.contains("T (stopped)")));
        assert!(f.evidence.iter().any(|e| e.fact.contains("request_wait_answer <- fuse_simple_request")));
        assert_eq!(f.advice[0], "or, if the server should live on, continue it: kill -CONT 900");
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
