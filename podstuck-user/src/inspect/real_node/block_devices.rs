//! Loop devices and what holds them: the raw block volumes kubelet maps
//! (a loop device over the bind mount of the volume's device file). From
//! sysfs, the bound loop devices with their backing files, whether a
//! detach waits (`autoclear`), and the devices stacked on them (device
//! mapper, md); from /proc, the processes that have one of them open.
//!
//! A detach (`losetup -d`, the LOOP_CLR_FD ioctl) of a loop device still
//! in use does not fail: the kernel sets autoclear and returns 0, and the
//! device stays bound, its backing file open, until its last user closes
//! it. So the failure kubelet sees is the next step's, the unmount of the
//! device file's bind mount (EBUSY), and what this room reads is what
//! explains it.
//!
//! sysfs and /proc only: a process's open device is recognised by the
//! link of its fd (`/dev/...`) and a `statx` that asks the filesystem for
//! nothing (AT_STATX_DONT_SYNC: a device node's type and number are the
//! inode's own), so nothing here waits on a hung filesystem.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use crate::inspect::{BlockHolder, DeviceOpener, LoopDevice};

use super::{read_link, RealNode};

/// Loop devices read at most; a node has a few dozen.
const LOOPS_KEPT: usize = 256;
/// Devices stacked on one (or under one), and processes named per device, at most.
const HOLDERS_KEPT: usize = 16;
const OPENERS_KEPT: usize = 32;

impl RealNode {
    /// Every bound loop device and what holds it open.
    pub(super) fn loops(&mut self) -> Vec<LoopDevice> {
        let sys_block = self.node.path("/sys/block");
        let Ok(entries) = fs::read_dir(&sys_block) else { return Vec::new() };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("loop") && n[4..].bytes().all(|b| b.is_ascii_digit()) && n.len() > 4)
            .collect();
        names.sort_by_key(|n| n[4..].parse::<u32>().unwrap_or(u32::MAX));
        let mut loops: Vec<LoopDevice> =
            names.iter().filter_map(|name| bound_loop(&sys_block, name)).take(LOOPS_KEPT).collect();
        if loops.is_empty() {
            return loops;
        }
        let openers = self.block_openers();
        let of = |dev: (u32, u32)| openers.get(&dev).cloned().unwrap_or_default();
        for device in &mut loops {
            device.openers = of(device.dev);
            for holder in &mut device.holders {
                if let Some(dev) = device_number(&sys_block.join(&holder.device)) {
                    holder.openers = of(dev);
                }
            }
        }
        loops
    }

    /// Every process's open block devices, by device number.
    fn block_openers(&self) -> HashMap<(u32, u32), Vec<DeviceOpener>> {
        let mut found: HashMap<(u32, u32), Vec<DeviceOpener>> = HashMap::new();
        for pid in self.pids() {
            let Ok(fds) = fs::read_dir(self.proc_file(pid, "fd")) else { continue };
            let mut seen: Vec<(u32, u32)> = Vec::new();
            for fd in fds.flatten() {
                let Ok(target) = read_link(&fd.path()) else { continue };
                if !target.starts_with(b"/dev/") {
                    continue;
                }
                let Some(dev) = block_device_of(&fd.path()) else { continue };
                if seen.contains(&dev) {
                    continue;
                }
                seen.push(dev);
                let list = found.entry(dev).or_default();
                if list.len() < OPENERS_KEPT {
                    list.push(DeviceOpener {
                        pid,
                        start: crate::identify::process::process_start(&self.proc_root, pid),
                        comm: self.comm_of(pid),
                        path: target,
                        owner: self.runtimes.owner_of(&self.proc_root, pid),
                    });
                }
            }
        }
        found
    }
}

/// `name` under `/sys/block` if it is bound to a file.
fn bound_loop(sys_block: &Path, name: &str) -> Option<LoopDevice> {
    let dir = sys_block.join(name);
    let backing = fs::read(dir.join("loop/backing_file")).ok()?;
    let backing_file = backing.strip_suffix(b"\n").unwrap_or(&backing).to_vec();
    if backing_file.is_empty() {
        return None;
    }
    let autoclear = fs::read(dir.join("loop/autoclear")).is_ok_and(|a| a.starts_with(b"1"));
    let holders = names_in(&dir.join("holders")).into_iter().map(|device| holder(sys_block, device)).collect();
    Some(LoopDevice {
        name: name.to_string(),
        dev: device_number(&dir)?,
        backing_file,
        autoclear,
        holders,
        openers: Vec::new(),
    })
}

/// The first names, sorted, of a sysfs directory of links to devices
/// (`holders/`, `slaves/`): at most [`HOLDERS_KEPT`].
pub(super) fn names_in(dir: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    let mut names: Vec<String> = entries.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect();
    names.sort();
    names.truncate(HOLDERS_KEPT);
    names
}

pub(super) fn holder(sys_block: &Path, device: String) -> BlockHolder {
    let dir = sys_block.join(&device);
    let mapper_name = fs::read(dir.join("dm/name"))
        .ok()
        .map(|n| crate::words::safe_text(n.strip_suffix(b"\n").unwrap_or(&n)))
        .filter(|n| !n.is_empty());
    BlockHolder { md: dir.join("md").is_dir(), device, mapper_name, openers: Vec::new() }
}

/// A block device's number from its sysfs directory's `dev` ("7:3").
pub(super) fn device_number(dir: &Path) -> Option<(u32, u32)> {
    let text = fs::read_to_string(dir.join("dev")).ok()?;
    let (major, minor) = text.trim().split_once(':')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// The device number of the block device an fd link leads to, asking the
/// filesystem for nothing it does not have (AT_STATX_DONT_SYNC).
fn block_device_of(fd_link: &Path) -> Option<(u32, u32)> {
    let path = crate::files::c_path(fd_link).ok()?;
    // SAFETY: statx writes the struct it is given; all-zero is a valid one.
    let mut info: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid out pointer.
    let done =
        unsafe { libc::statx(libc::AT_FDCWD, path.as_ptr(), libc::AT_STATX_DONT_SYNC, libc::STATX_TYPE, &mut info) };
    (done == 0 && u32::from(info.stx_mode) & libc::S_IFMT == libc::S_IFBLK)
        .then_some((info.stx_rdev_major, info.stx_rdev_minor))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TempDir;

    fn put(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    #[test]
    fn a_bound_loop_with_a_device_mapper_holder_is_read_from_sysfs() {
        let tmp = TempDir::new("sys-block");
        let sys = tmp.0.as_path();
        put(sys, "loop3/dev", "7:3\n");
        put(sys, "loop3/loop/backing_file", "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/pv/dev/x\n");
        put(sys, "loop3/loop/autoclear", "1\n");
        fs::create_dir_all(sys.join("loop3/holders/dm-0")).unwrap();
        put(sys, "dm-0/dev", "254:0\n");
        put(sys, "dm-0/dm/name", "vg-data\n");
        put(sys, "loop4/dev", "7:4\n");
        put(sys, "loop4/loop/backing_file", "\n");
        let found = bound_loop(sys, "loop3").unwrap();
        assert_eq!(found.dev, (7, 3));
        assert!(found.autoclear);
        assert_eq!(found.backing_file, b"/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/pv/dev/x".to_vec());
        assert_eq!(found.holders.len(), 1);
        assert_eq!(found.holders[0].words(), "dm-0 (vg-data)");
        assert!(!found.holders[0].md);
        assert_eq!(bound_loop(sys, "loop4"), None, "an unbound loop device");
        assert_eq!(bound_loop(sys, "loop5"), None, "no such device");
    }

    #[test]
    fn a_process_holding_a_loop_device_open_is_found() {
        // A loop device of our own would need root and a loop driver: the
        // statx path is checked on /dev/null, a character device (not a
        // block device, so not counted), and on a regular file.
        assert_eq!(block_device_of(Path::new("/dev/null")), None);
        assert_eq!(block_device_of(Path::new("/proc/self/exe")), None);
    }
}
