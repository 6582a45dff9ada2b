//! P16 `block-volume-held`: a raw block volume (`volumeMode: Block`)
//! cannot be unmapped because its device is still in use.
//!
//! kubelet maps a block volume by bind-mounting the volume's device file
//! at `plugins/kubernetes.io/csi/volumeDevices/<pv>/dev/<pod uid>` and
//! attaching a loop device to that file (a lock, so the device cannot
//! vanish while the pod runs); the pod's `pods/<uid>/volumeDevices/...`
//! entry points at the device. To unmap it detaches the loop device
//! (`losetup -d`), removes the pod's entry and unmounts the bind mount
//! (`umount`, exit 32 on failure), on its volume backoff. A loop device
//! still in use does not detach: the kernel only marks it to go when its
//! last user closes it (autoclear) and `losetup -d` succeeds, so the first
//! failure kubelet sees is the unmount's EBUSY: the loop device still holds
//! its backing file, the bind mount. Its users: a process with the loop
//! device open, a device stacked on it (LVM's device mapper found a volume
//! group inside the volume and activated it; an md array), or a process
//! with the bind-mounted device file itself open (kubernetes #109132,
//! #110163, #119608; longhorn's EBUSY on detach).
//!
//! Signature: umount2 (or the removal of the mapping's file or directory)
//! failing with EBUSY under a `volumeDevices` directory of kubelet's tree.
//! Confirmed by the loop device whose backing file is the bind mount
//! (sysfs) and what holds it (its holders in sysfs, its openers in /proc),
//! or a process holding the bind mount. The fix releases the holders in
//! order (the stacked device, then the processes, then the loop device)
//! so that kubelet's next retry succeeds.

use super::holders::{holder_facts, process_words};
use super::route::{Attempt, Claim, Refusal, Target};
use super::shell::{find_mount, kill_if_same, remove_mapping, unmount_lazily, word};
use super::track::{Attempts, CallerView, FailureLog};
use super::{shown, Confidence, Detector, Finding, Kind, Review, Severity};
use crate::event::{CallEvent, ProcessStart};
use crate::identify::Identity;
use crate::inspect::mounts::mount_at;
use crate::inspect::{BlockHolder, DeviceOpener, LoopDevice, Mount, MountHolder, NodeInspector};

#[derive(Default)]
pub struct BlockVolumeHeld {
    failures: FailureLog,
}

/// What block-volume-held decides of a mapping kubelet cannot unmap,
/// before a word of it is said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A loop device is still bound to the mapping (its backing file):
    /// whether kubelet's detach already waits (autoclear), and whether
    /// anything (a stacked device, a process) uses it.
    LoopBound { device: String, detach_waits: bool, used: bool },
    /// No loop device; a process has the device file open through the
    /// bind mount (its pid).
    HeldOpen(u32),
    /// The bind mount is busy and nothing was found holding it.
    NothingFound,
    /// Nothing is mounted at the mapping now: the next retry should work.
    NotMountedNow,
}

impl Verdict {
    pub fn confidence(&self) -> Confidence {
        match self {
            Verdict::LoopBound { detach_waits: false, used: false, .. } => Confidence::Likely,
            Verdict::LoopBound { .. } | Verdict::HeldOpen(_) => Confidence::Confirmed,
            Verdict::NothingFound | Verdict::NotMountedNow => Confidence::Possible,
        }
    }
}

/// What was read of the mapping: the facts the verdict stands on, and the
/// fix's parts.
struct Seen {
    mount: Option<Mount>,
    loops: Vec<LoopDevice>,
    holders: Vec<MountHolder>,
}

impl BlockVolumeHeld {
    fn decide(a: &mut Attempts, review: &mut Review<'_>) -> Option<Finding> {
        let node = &mut *review.node;
        let view = a.caller_view(node);
        let (verdict, seen) = Self::judge(a, node, &view)?;
        Some(Self::tell(a, &view, &verdict, &seen))
    }

    /// Reads the mapping's mount, the loop devices bound to it and who
    /// holds them, and decides. None: the caller's namespace is gone.
    fn judge(a: &Attempts, node: &mut dyn NodeInspector, view: &CallerView) -> Option<(Verdict, Seen)> {
        let mounts = view.mounts().ok()?;
        let path = view.path.as_slice();
        let mount = mount_at(mounts, path).cloned();
        let loops: Vec<LoopDevice> =
            node.loop_devices().into_iter().filter(|l| l.backing_file == path || l.backing_file == a.path).collect();
        let holders: Vec<MountHolder> = match &mount {
            Some(m) => node.mount_holders(m, view.mntns).into_iter().filter(|h| !h.other_namespace).collect(),
            None => Vec::new(),
        };
        let verdict = match (loops.first(), holders.first()) {
            (Some(device), _) => Verdict::LoopBound {
                device: device.name.clone(),
                detach_waits: device.autoclear,
                used: !device.holders.is_empty() || !device.openers.is_empty(),
            },
            (None, Some(h)) => Verdict::HeldOpen(h.pid),
            (None, None) if mount.is_some() => Verdict::NothingFound,
            (None, None) => Verdict::NotMountedNow,
        };
        Some((verdict, Seen { mount, loops, holders }))
    }

    /// The verdict in words: the finding, its evidence, its fix.
    fn tell(a: &Attempts, view: &CallerView, verdict: &Verdict, seen: &Seen) -> Finding {
        let path = view.path.as_slice();
        let mut f = Finding::new(Kind::BlockVolumeHeld, &shown(&a.path), Severity::Critical, a.first);
        a.stamp(&mut f);
        f.confidence = verdict.confidence();
        f.evidence("trace", a.trace_words());
        a.resolution_evidence(view, &mut f);
        let what = format!("{} cannot unmap the raw block volume mapped at {}", a.actor.description, shown(&a.path));
        let failed = format!("{}{}", a.failed_words(), a.rhythm_words());
        if let Some(m) = &seen.mount {
            f.evidence("mountinfo", mount_words(path, m));
        }
        for device in &seen.loops {
            for fact in loop_facts(device) {
                f.evidence("/sys/block", fact);
            }
        }
        for fact in holder_facts(&seen.holders) {
            f.evidence("/proc", fact);
        }
        match (verdict, seen.loops.first(), seen.holders.first()) {
            (Verdict::LoopBound { .. }, Some(device), _) => {
                let users = users_words(device);
                let detach = match (device.autoclear, users.is_empty()) {
                    (true, false) => format!(
                        "kubelet's losetup -d of /dev/{} did not detach it: the kernel only marked it to go once its last user lets go, and {}",
                        device.name,
                        users.join(" and ")
                    ),
                    (true, true) => format!(
                        "/dev/{} is marked to detach (losetup -d ran) and nothing was found using it now: the next retry should succeed",
                        device.name
                    ),
                    (false, false) => format!("{} keep /dev/{} attached", users.join(" and "), device.name),
                    (false, true) => format!("/dev/{} is still attached and nothing uses it: it was never detached", device.name),
                };
                f.summary = format!(
                    "{what}: loop device /dev/{} is still bound to it (its backing file), so the bind mount is busy; {detach}. {failed}.",
                    device.name
                );
            }
            (Verdict::HeldOpen(_), _, Some(h)) => {
                f.summary = format!(
                    "{what}: {} has the device file open through the bind mount, so it is busy. {failed}.",
                    process_words(h.pid, &h.comm, h.owner.as_ref())
                );
            }
            (Verdict::NothingFound, ..) => {
                f.summary = format!(
                    "{what}: the bind mount is busy, and no loop device is bound to it and no process holds it (a kernel user such as swap may). {failed}."
                );
            }
            _ => {
                f.summary = format!(
                    "{what}: EBUSY, though nothing is mounted at {} now: the next retry should succeed. {failed}.",
                    shown(path)
                );
                f.fix = find_mount(path);
                return f;
            }
        }
        Self::release(&mut f, view, seen);
        f
    }

    /// The fix: release the mapping's users outermost first, else detach
    /// the mapping lazily; and what to know before running it.
    fn release(f: &mut Finding, view: &CallerView, seen: &Seen) {
        let (release, unchecked) = release_steps(&seen.loops, &seen.holders);
        let fix = match release.is_empty() {
            true => unmount_lazily(&view.path),
            false => release.join(" && "),
        };
        for (pid, comm) in &unchecked {
            f.advice.push(format!(
                "{pid} ({comm}) is left out of the fix: its start could not be read, so a kill by its pid alone could hit another process by the time it is pasted; stop it once `ps -p {pid} -o lstart,comm` shows it is still that process, then run the fix"
            ));
        }
        f.advice.push(
            "kubelet's next retry detaches the loop device and unmounts the mapping once nothing holds them; \
             never remove the mapping's file while it is mounted"
                .into(),
        );
        if seen.loops.iter().any(|l| l.holders.iter().any(|h| h.mapper_name.is_some())) {
            f.advice.push(
                "a volume group found inside a pod's volume is activated by the node's LVM: filter such devices out \
                 (lvm.conf global_filter, e.g. reject loop devices and kubelet's volumeDevices) so it does not happen again"
                    .into(),
            );
        }
        view.place_fix(f, fix);
        if let Some(device) = seen.loops.first() {
            f.detail("loop_device", format!("/dev/{}", device.name));
        }
    }
}

/// "the bind mount of /var/lib/kubelet/.../dev/<uid> (devtmpfs from udev, mount id 61)".
fn mount_words(path: &[u8], m: &Mount) -> String {
    format!("{} is a bind mount of a device file ({} from {}, mount id {})", shown(path), m.fstype, m.source, m.id)
}

/// What sysfs says of a loop device over the mapping, and of what holds it.
fn loop_facts(device: &LoopDevice) -> Vec<String> {
    let mut facts = vec![format!(
        "/dev/{} ({}:{}) is bound to {}{}",
        device.name,
        device.dev.0,
        device.dev.1,
        shown(&device.backing_file),
        if device.autoclear { ", autoclear set: a detach (losetup -d) waits for its last user" } else { "" }
    )];
    for holder in &device.holders {
        facts.push(format!("{} is stacked on /dev/{} and holds it open", holder_kind(holder), device.name));
        facts.extend(opener_facts(&holder.openers, &format!("/dev/{}", holder.device)));
    }
    facts.extend(opener_facts(&device.openers, &format!("/dev/{}", device.name)));
    facts
}

fn opener_facts(openers: &[DeviceOpener], device: &str) -> Vec<String> {
    openers
        .iter()
        .map(|o| {
            format!("{} has {device} open (as {})", process_words(o.pid, &o.comm, o.owner.as_ref()), shown(&o.path))
        })
        .collect()
}

/// "device-mapper device dm-0 (vg-data)", "md array md127".
fn holder_kind(holder: &BlockHolder) -> String {
    match (&holder.mapper_name, holder.md) {
        (Some(_), _) => format!("device-mapper device {}", holder.words()),
        (None, true) => format!("md array {}", holder.device),
        (None, false) => format!("block device {}", holder.device),
    }
}

/// Who uses a loop device, in words.
fn users_words(device: &LoopDevice) -> Vec<String> {
    let mut users: Vec<String> = device.holders.iter().map(holder_kind).collect();
    users.extend(device.openers.iter().map(|o| process_words(o.pid, &o.comm, o.owner.as_ref())));
    users
}

/// The commands that let the loop devices and the mapping go, outermost
/// user first: processes using a stacked device, the stacked device, the
/// loop device's openers, the loop device (unless a detach already waits),
/// then processes holding the mapping itself. Each process is sent SIGTERM
/// only while its pid still names the process found (its start): pids are
/// reused within minutes and a fix is pasted later. A process whose start
/// could not be read is left out of the commands and returned apart, to be
/// said as advice with the check to make first.
fn release_steps(loops: &[LoopDevice], holders: &[MountHolder]) -> (Vec<String>, Vec<(u32, String)>) {
    let mut pids: Vec<u32> = Vec::new();
    let mut steps = Vec::new();
    let mut unchecked = Vec::new();
    let mut kill = |users: Vec<(u32, Option<ProcessStart>, String)>, steps: &mut Vec<String>| {
        for (pid, start, comm) in users {
            if pids.contains(&pid) {
                continue;
            }
            pids.push(pid);
            match kill_if_same("TERM", pid, start) {
                Some(kill) => steps.push(kill),
                None => unchecked.push((pid, comm)),
            }
        }
    };
    let of = |openers: &[DeviceOpener]| openers.iter().map(|o| (o.pid, o.start, o.comm.clone())).collect();
    for device in loops {
        for holder in &device.holders {
            kill(of(&holder.openers), &mut steps);
            match (&holder.mapper_name, holder.md) {
                (Some(name), _) => steps.push(remove_mapping(name)),
                (None, true) => steps.push(format!("mdadm --stop /dev/{}", word(holder.device.as_bytes()))),
                (None, false) => {}
            }
        }
        kill(of(&device.openers), &mut steps);
        if !device.autoclear {
            steps.push(format!("losetup -d /dev/{}", word(device.name.as_bytes())));
        }
    }
    kill(holders.iter().map(|h| (h.pid, h.start, h.comm.clone())).collect(), &mut steps);
    (steps, unchecked)
}

impl Detector for BlockVolumeHeld {
    fn claims(&self) -> &'static [Claim] {
        &[Claim {
            attempts: &[Attempt::Unmount, Attempt::RemoveDir, Attempt::RemoveFile],
            refusals: &[Refusal::Busy],
            targets: &[Target::BlockVolume],
        }]
    }

    fn failed(&mut self, event: &CallEvent, identity: &Identity) {
        self.failures.record(event, identity);
    }

    fn observe(&mut self, event: &CallEvent, identity: &Identity) {
        self.failures.ended_by(event, identity);
    }

    fn review(&mut self, review: &mut Review<'_>) -> Vec<Finding> {
        self.failures.review(review, Self::decide)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::*;
    use super::*;
    use crate::inspect::HoldKind;

    fn map_path() -> String {
        format!("{KUBELET}/plugins/kubernetes.io/csi/volumeDevices/pvc-blk/dev/{POD}")
    }

    /// kubelet's `umount` of the mapping, on its volume backoff.
    fn unmaps() -> Vec<Call> {
        [0.0, 0.5, 1.5, 3.5].iter().map(|&at| umount(at, "umount", &map_path(), -libc::EBUSY)).collect()
    }

    fn node() -> FakeNode {
        FakeNode::with_mounts(&[&format!("61 {} devtmpfs", map_path())])
    }

    fn opener(pid: u32, comm: &str, path: &str) -> DeviceOpener {
        DeviceOpener {
            pid,
            start: Some(ProcessStart(u64::from(pid) * 100)),
            comm: comm.into(),
            path: path.into(),
            owner: None,
        }
    }

    /// The start-checked SIGTERM `opener` and `holder` make for `pid`.
    fn stop(pid: u32) -> String {
        kill_if_same("TERM", pid, Some(ProcessStart(u64::from(pid) * 100))).unwrap()
    }

    fn loop_device(autoclear: bool, holders: Vec<BlockHolder>, openers: Vec<DeviceOpener>) -> LoopDevice {
        LoopDevice {
            name: "loop7".into(),
            dev: (7, 7),
            backing_file: map_path().into_bytes(),
            autoclear,
            holders,
            openers,
        }
    }

    /// What block-volume-held decides of kubelet's unmaps on `node`.
    fn verdict(node: &mut FakeNode) -> Option<Verdict> {
        let a = attempts_of(&unmaps());
        let view = a.caller_view(node);
        BlockVolumeHeld::judge(&a, node, &view).map(|(verdict, _)| verdict)
    }

    #[test]
    fn a_process_holding_the_loop_device_is_named_and_killed() {
        let mut node = node();
        node.loops = vec![loop_device(true, vec![], vec![opener(3131, "dd", "/dev/loop7")])];
        assert_eq!(
            verdict(&mut node),
            Some(Verdict::LoopBound { device: "loop7".into(), detach_waits: true, used: true })
        );
        let f = &run(&mut BlockVolumeHeld::default(), &mut node, &unmaps(), 4.0)[0];
        assert_eq!(f.kind, Kind::BlockVolumeHeld);
        assert_eq!(f.confidence, Confidence::Confirmed);
        assert_eq!(f.fix, stop(3131));
        assert_eq!(f.pod_uid, Some(pod()));
        assert!(f.summary.contains("losetup -d of /dev/loop7 did not detach it"), "{}", f.summary);
        assert!(f.summary.contains("pid 3131 (dd)"), "{}", f.summary);
        assert!(f.evidence.iter().any(|e| e.fact.contains("autoclear set")), "{:?}", f.evidence);
        assert_eq!(f.details["loop_device"], "/dev/loop7");
    }

    #[test]
    fn a_device_mapper_holder_is_removed_after_its_own_users_and_the_loop_detached() {
        let mut node = node();
        let dm = BlockHolder {
            device: "dm-0".into(),
            mapper_name: Some("vg-data".into()),
            md: false,
            openers: vec![opener(4242, "postgres", "/dev/dm-0")],
        };
        node.loops = vec![loop_device(false, vec![dm], vec![])];
        let f = &run(&mut BlockVolumeHeld::default(), &mut node, &unmaps(), 4.0)[0];
        assert_eq!(f.fix, format!("{} && dmsetup remove -- vg-data && losetup -d /dev/loop7", stop(4242)));
        assert!(f.summary.contains("device-mapper device dm-0 (vg-data)"), "{}", f.summary);
        assert!(f.advice.iter().any(|a| a.contains("global_filter")), "{:?}", f.advice);
    }

    #[test]
    fn an_md_array_is_stopped() {
        let mut node = node();
        let md = BlockHolder { device: "md127".into(), mapper_name: None, md: true, openers: vec![] };
        node.loops = vec![loop_device(true, vec![md], vec![])];
        let f = &run(&mut BlockVolumeHeld::default(), &mut node, &unmaps(), 4.0)[0];
        assert_eq!(f.fix, "mdadm --stop /dev/md127");
    }

    #[test]
    fn a_process_with_the_mapped_file_open_is_named_without_a_loop_device() {
        let mut node = node();
        node.holders = vec![MountHolder {
            pid: 5151,
            start: Some(ProcessStart(515_100)),
            comm: "backup".into(),
            how: HoldKind::OpenFile,
            path: map_path().into_bytes(),
            mntns: HOST_MNTNS,
            other_namespace: false,
            owner: None,
        }];
        assert_eq!(verdict(&mut node), Some(Verdict::HeldOpen(5151)));
        let f = &run(&mut BlockVolumeHeld::default(), &mut node, &unmaps(), 4.0)[0];
        assert_eq!(f.fix, stop(5151));
    }

    /// A pid is reused within minutes and a fix is pasted later: a user
    /// whose start is unknown is never killed by its pid alone; the rest
    /// of the fix stands, and the advice says how to stop it safely.
    #[test]
    fn a_user_whose_start_is_unknown_is_left_out_of_the_kills() {
        let mut node = node();
        let mut unknown = opener(3131, "dd", "/dev/dm-0");
        unknown.start = None;
        let dm = BlockHolder {
            device: "dm-0".into(),
            mapper_name: Some("vg-data".into()),
            md: false,
            openers: vec![unknown, opener(4242, "postgres", "/dev/dm-0")],
        };
        node.loops = vec![loop_device(false, vec![dm], vec![])];
        let f = &run(&mut BlockVolumeHeld::default(), &mut node, &unmaps(), 4.0)[0];
        assert_eq!(f.fix, format!("{} && dmsetup remove -- vg-data && losetup -d /dev/loop7", stop(4242)));
        assert!(!f.fix.contains("3131"), "{}", f.fix);
        assert!(f.advice.iter().any(|a| a.contains("ps -p 3131 -o lstart,comm")), "{:?}", f.advice);
    }

    #[test]
    fn a_loop_device_over_another_file_is_not_blamed_and_nothing_found_is_only_possible() {
        let mut node = node();
        let mut other = loop_device(true, vec![], vec![opener(3131, "dd", "/dev/loop7")]);
        other.backing_file = b"/var/lib/images/disk.img".to_vec();
        node.loops = vec![other];
        assert_eq!(verdict(&mut node), Some(Verdict::NothingFound));
        let f = &run(&mut BlockVolumeHeld::default(), &mut node, &unmaps(), 4.0)[0];
        assert_eq!(f.confidence, Confidence::Possible);
        assert!(!f.summary.contains("3131"), "{}", f.summary);
        // A loop device never detached, that nothing uses: likely, not proven.
        let mut never_detached = FakeNode::with_mounts(&[&format!("61 {} devtmpfs", map_path())]);
        never_detached.loops = vec![loop_device(false, vec![], vec![])];
        let v = verdict(&mut never_detached).unwrap();
        assert_eq!(v, Verdict::LoopBound { device: "loop7".into(), detach_waits: false, used: false });
        assert_eq!(v.confidence(), Confidence::Likely);
        assert_eq!(verdict(&mut FakeNode::with_mounts(&[])), Some(Verdict::NotMountedNow));
        assert_eq!(f.fix, format!("umount -l -- {}", map_path()));
    }

    #[test]
    fn only_block_volume_paths_and_a_success_resolves() {
        let mut d = BlockVolumeHeld::default();
        let mut node = node();
        let volume = format!("{KUBELET}/pods/{POD}/volumes/kubernetes.io~csi/pvc-1/mount");
        assert!(run(&mut d, &mut node, &[umount(0.0, "umount", &volume, -libc::EBUSY)], 5.0).is_empty());
        node.loops = vec![loop_device(true, vec![], vec![opener(3131, "dd", "/dev/loop7")])];
        assert_eq!(run(&mut d, &mut node, &unmaps(), 4.0).len(), 1);
        let done = run(&mut d, &mut node, &[umount(6.0, "umount", &map_path(), 0)], 6.5);
        assert_eq!(done[0].status, super::super::Status::Resolved);
    }
}
