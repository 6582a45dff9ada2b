//! A device-mapper device, read: sysfs (`/sys/dev/block/M:m`: its name,
//! uuid, the devices under it and on it) and its table and status, asked
//! of the device mapper itself as `dmsetup table` and `dmsetup status`
//! ask (the `DM_TABLE_STATUS` ioctl on `/dev/mapper/control`, which takes
//! the map's lock and never waits on its I/O). Nothing of the device is
//! opened: the control device is the device mapper's, not the map's.

use std::fs;
use std::os::fd::AsRawFd;

use crate::inspect::{MapperDevice, MapperTarget, Probe, Unreadable};

use super::block_devices::{device_number, holder, names_in};
use super::RealNode;

/// Targets of one table read at most (a multipath map has one).
const TARGETS_KEPT: usize = 64;

impl RealNode {
    /// The device-mapper device `major`:`minor`, None when it is no
    /// device-mapper device (no `dm/` in its sysfs directory).
    pub(super) fn mapper_device(&self, major: u32, minor: u32) -> Probe<Option<MapperDevice>> {
        let dir = self.node.path(format!("/sys/dev/block/{major}:{minor}"));
        let line =
            |file: &str| fs::read(dir.join(file)).map(|b| crate::words::safe_text(b.strip_suffix(b"\n").unwrap_or(&b)));
        let name = match line("dm/name") {
            Ok(name) => name,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Unreadable::Other(format!("dm/name of {major}:{minor}: {e}"))),
        };
        let device = fs::read_link(&dir)
            .ok()
            .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| format!("{major}:{minor}"));
        let sys_block = self.node.path("/sys/block");
        let holders = names_in(&dir.join("holders")).into_iter().map(|d| holder(&sys_block, d));
        let (targets, table_unread) = match self.mapper_targets(major, minor) {
            Ok(targets) => (targets, None),
            Err(why) => (Vec::new(), Some(why)),
        };
        Ok(Some(MapperDevice {
            device,
            dev: (major, minor),
            name,
            uuid: line("dm/uuid").unwrap_or_default(),
            slaves: names_in(&dir.join("slaves"))
                .into_iter()
                .filter_map(|name| {
                    let dev = device_number(&sys_block.join(&name))?;
                    Some((name, dev))
                })
                .collect(),
            holders: holders.collect(),
            targets,
            table_unread,
        }))
    }

    /// Its targets with their table and status lines.
    fn mapper_targets(&self, major: u32, minor: u32) -> Result<Vec<MapperTarget>, String> {
        let control = self.node.path("/dev/mapper/control");
        let control = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&control)
            .map_err(|e| format!("{}: {e}", control.display()))?;
        let table = table_status(control.as_raw_fd(), major, minor, true)?;
        let status = table_status(control.as_raw_fd(), major, minor, false)?;
        if table.len() != status.len() {
            return Err("the table changed between its two reads".into());
        }
        Ok(table
            .into_iter()
            .zip(status)
            .map(|((kind, table), (_, status))| MapperTarget { kind, table, status })
            .collect())
    }
}

/// `struct dm_ioctl` (linux/dm-ioctl.h), version 4.
#[repr(C)]
#[derive(Clone, Copy)]
struct DmIoctl {
    version: [u32; 3],
    data_size: u32,
    data_start: u32,
    target_count: u32,
    open_count: i32,
    flags: u32,
    event_nr: u32,
    padding: u32,
    dev: u64,
    name: [u8; 128],
    uuid: [u8; 129],
    data: [u8; 7],
}

/// `struct dm_target_spec`: a target's place and type; its parameters
/// follow it, NUL-terminated.
#[repr(C)]
#[derive(Clone, Copy)]
struct DmTargetSpec {
    sector_start: u64,
    length: u64,
    status: i32,
    next: u32,
    target_type: [u8; 16],
}

/// `_IOWR(0xfd, DM_TABLE_STATUS_CMD = 12, struct dm_ioctl)`.
const DM_TABLE_STATUS: u64 = (3 << 30) | ((size_of::<DmIoctl>() as u64) << 16) | (0xfd << 8) | 12;
/// Report the table, not the status.
const DM_STATUS_TABLE_FLAG: u32 = 1 << 4;
/// The answer did not fit the buffer.
const DM_BUFFER_FULL_FLAG: u32 = 1 << 8;
/// The answer's room: a multipath map's lines are a few hundred bytes.
const BUFFER_BYTES: usize = 16 * 1024;

/// The kernel's `huge_encode_dev` of a device number: how `dm_ioctl.dev`
/// names a device when no name or uuid is given.
fn encode_dev(major: u32, minor: u32) -> u64 {
    u64::from(minor & 0xff) | (u64::from(major) << 8) | (u64::from(minor & !0xff) << 12)
}

/// The targets of device `major`:`minor`, each its type and its table
/// line (`table`) or status line.
fn table_status(control: i32, major: u32, minor: u32, table: bool) -> Result<Vec<(String, String)>, String> {
    // u64s: the header's alignment.
    let mut buffer = vec![0u64; BUFFER_BYTES / 8];
    let header = DmIoctl {
        version: [4, 0, 0],
        data_size: BUFFER_BYTES as u32,
        data_start: size_of::<DmIoctl>() as u32,
        target_count: 0,
        open_count: 0,
        flags: if table { DM_STATUS_TABLE_FLAG } else { 0 },
        event_nr: 0,
        padding: 0,
        dev: encode_dev(major, minor),
        name: [0; 128],
        uuid: [0; 129],
        data: [0; 7],
    };
    // SAFETY: the buffer is larger than the header and 8-byte aligned.
    unsafe { std::ptr::write(buffer.as_mut_ptr() as *mut DmIoctl, header) };
    // SAFETY: DM_TABLE_STATUS reads the header and writes at most
    // `data_size` bytes of the buffer, which has them.
    let done = unsafe { libc::ioctl(control, DM_TABLE_STATUS as _, buffer.as_mut_ptr()) };
    if done != 0 {
        return Err(format!("DM_TABLE_STATUS of {major}:{minor}: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: as bytes, the buffer the kernel filled.
    let bytes = unsafe { std::slice::from_raw_parts(buffer.as_ptr() as *const u8, BUFFER_BYTES) };
    targets_of(bytes)
}

/// The targets an answer holds.
fn targets_of(bytes: &[u8]) -> Result<Vec<(String, String)>, String> {
    // SAFETY: read unaligned from bytes at least a header long.
    let header: DmIoctl = unsafe { std::ptr::read_unaligned(bytes.as_ptr() as *const DmIoctl) };
    if header.flags & DM_BUFFER_FULL_FLAG != 0 {
        return Err(format!("its table is longer than {BUFFER_BYTES} bytes"));
    }
    let start = header.data_start as usize;
    let mut targets = Vec::new();
    let mut at = start;
    for _ in 0..(header.target_count as usize).min(TARGETS_KEPT) {
        let spec_bytes = bytes.get(at..at + size_of::<DmTargetSpec>()).ok_or("a target past the answer")?;
        // SAFETY: read unaligned from bytes a spec long.
        let spec: DmTargetSpec = unsafe { std::ptr::read_unaligned(spec_bytes.as_ptr() as *const DmTargetSpec) };
        let params = &bytes[at + size_of::<DmTargetSpec>()..];
        let params = params.split(|b| *b == 0).next().unwrap_or(&[]);
        let kind = spec.target_type.split(|b| *b == 0).next().unwrap_or(&[]);
        targets.push((crate::words::safe_text(kind), crate::words::safe_text(params).trim().to_string()));
        // `next`: from the first spec, in an answer.
        let next = start + spec.next as usize;
        if next <= at {
            break;
        }
        at = next;
    }
    Ok(targets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ioctl_is_the_kernels_layout() {
        // linux/dm-ioctl.h: sizeof(struct dm_ioctl) is 312, of a target spec 40.
        assert_eq!((size_of::<DmIoctl>(), size_of::<DmTargetSpec>()), (312, 40));
        assert_eq!(DM_TABLE_STATUS, 0xc138_fd0c);
        assert_eq!(encode_dev(253, 3), 253 << 8 | 3);
        assert_eq!(encode_dev(253, 0x1234), 0x34 | 253 << 8 | 0x1200 << 12);
    }

    /// An answer as the kernel writes it: the header, then each spec with
    /// its parameters, `next` counted from the first spec.
    fn answer(targets: &[(&str, &str)], flags: u32) -> Vec<u8> {
        let start = size_of::<DmIoctl>();
        let mut data = Vec::new();
        for (kind, params) in targets {
            let mut body = params.as_bytes().to_vec();
            body.push(0);
            while !(size_of::<DmTargetSpec>() + body.len()).is_multiple_of(8) {
                body.push(0);
            }
            let mut target_type = [0u8; 16];
            target_type[..kind.len()].copy_from_slice(kind.as_bytes());
            let next = data.len() + size_of::<DmTargetSpec>() + body.len();
            let spec = DmTargetSpec { sector_start: 0, length: 2048, status: 0, next: next as u32, target_type };
            // SAFETY: plain repr(C) data viewed as bytes.
            data.extend_from_slice(unsafe {
                std::slice::from_raw_parts(&spec as *const DmTargetSpec as *const u8, size_of::<DmTargetSpec>())
            });
            data.extend_from_slice(&body);
        }
        let header = DmIoctl {
            version: [4, 0, 0],
            data_size: (start + data.len()) as u32,
            data_start: start as u32,
            target_count: targets.len() as u32,
            open_count: 1,
            flags,
            event_nr: 0,
            padding: 0,
            dev: 0,
            name: [0; 128],
            uuid: [0; 129],
            data: [0; 7],
        };
        // SAFETY: as above.
        let mut bytes = unsafe { std::slice::from_raw_parts(&header as *const DmIoctl as *const u8, start) }.to_vec();
        bytes.extend_from_slice(&data);
        bytes
    }

    #[test]
    fn an_answers_targets_are_read_in_order_and_a_full_buffer_is_said() {
        let two = answer(&[("linear", "7:0 0"), ("multipath", "1 queue_if_no_path 0 1 1 round-robin 0 1 1 7:0 1")], 0);
        assert_eq!(
            targets_of(&two).unwrap(),
            [
                ("linear".to_string(), "7:0 0".to_string()),
                ("multipath".to_string(), "1 queue_if_no_path 0 1 1 round-robin 0 1 1 7:0 1".to_string())
            ]
        );
        assert!(targets_of(&answer(&[("linear", "7:0 0")], DM_BUFFER_FULL_FLAG)).unwrap_err().contains("longer"));
        // A count past the answer is an error, not a read past it.
        let mut cut = answer(&[("linear", "7:0 0")], 0);
        cut[20..24].copy_from_slice(&3u32.to_ne_bytes());
        assert!(targets_of(&cut).is_err());
    }
}
