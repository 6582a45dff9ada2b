//! A device-mapper device as the kernel tells it, and what its table and
//! status say of a multipath map: the device a volume's filesystem may sit
//! on. A map with no path left that queues I/O (`queue_if_no_path`) keeps
//! every reader and writer of the volume waiting in D for ever, and the
//! unmount refused busy while they do; a partition mapping or an LVM
//! volume stacked on it keeps it open. Pure: the reading is `real_node`'s.

use serde::Serialize;

use super::BlockHolder;

/// A device-mapper device: its sysfs directory (`/sys/dev/block/M:m`) and
/// its targets, as `dmsetup table` and `dmsetup status` print them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MapperDevice {
    /// "dm-3".
    pub device: String,
    pub dev: (u32, u32),
    /// Its name (`dm/name`): what dmsetup and multipath call it.
    pub name: String,
    /// `dm/uuid`, whose prefix names its owner: "mpath-" (multipathd),
    /// "LVM-", "CRYPT-", "part1-" (kpartx).
    pub uuid: String,
    /// The devices under it (`slaves/`), each its name and number: a
    /// multipath map's paths, the map a partition mapping is made on.
    pub slaves: Vec<(String, (u32, u32))>,
    /// The devices stacked on it (`holders/`).
    pub holders: Vec<BlockHolder>,
    /// Its targets, in order; empty where the table could not be read
    /// (`table_unread` says why).
    pub targets: Vec<MapperTarget>,
    pub table_unread: Option<String>,
}

/// One target of a device-mapper table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MapperTarget {
    /// "multipath", "linear", "crypt".
    pub kind: String,
    /// Its table line's parameters (`dmsetup table`, after the type).
    pub table: String,
    /// Its status line's (`dmsetup status`, after the type).
    pub status: String,
}

/// A multipath map's state, read from its table and status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Multipath {
    /// `queue_if_no_path` in its features: with no path left, I/O waits.
    pub queue_if_no_path: bool,
    /// The status's `queue_io`: I/O is being queued now.
    pub queueing: bool,
    pub paths: Vec<MultipathPath>,
}

/// One path of a multipath map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultipathPath {
    /// Its device, as device mapper names it ("8:16").
    pub device: String,
    /// `A`: active; `F`: failed.
    pub active: bool,
    pub fail_count: u64,
}

impl Multipath {
    /// No path is active, and I/O waits for one: every request to the map
    /// sleeps until a path comes back, for ever if none does.
    pub fn queues_for_ever(&self) -> bool {
        self.queue_if_no_path && !self.paths.iter().any(|p| p.active)
    }
}

impl MapperDevice {
    /// "dm-3 (mpatha)".
    pub fn words(&self) -> String {
        format!("{} ({})", self.device, self.name)
    }

    /// Its multipath state, when its one target is a multipath one whose
    /// table and status read.
    pub fn multipath(&self) -> Option<Multipath> {
        let [target] = &self.targets[..] else { return None };
        if target.kind != "multipath" {
            return None;
        }
        let queue_if_no_path = table_features(&target.table)?.contains(&"queue_if_no_path");
        let (queueing, paths) = status_paths(&target.status)?;
        Some(Multipath { queue_if_no_path, queueing, paths })
    }
}

/// A table's features: `<#features> <feature>...` first.
fn table_features(table: &str) -> Option<Vec<&str>> {
    let mut words = table.split_whitespace();
    let n: usize = words.next()?.parse().ok()?;
    let features: Vec<&str> = words.by_ref().take(n).collect();
    (features.len() == n).then_some(features)
}

/// A multipath status line (`STATUSTYPE_INFO`): `2 <queue_io>
/// <pg_init_count>`, the hardware handler's `<#args> <args>`, `<#groups>
/// <next group>`, then each group: `<state> <#selector args> <args>
/// <#paths> <#path info args>` and each path `<dev> <A|F> <fail count>
/// <info args>`.
fn status_paths(status: &str) -> Option<(bool, Vec<MultipathPath>)> {
    let words: Vec<&str> = status.split_whitespace().collect();
    let mut at = 0usize;
    let mut next = || {
        let word = words.get(at).copied();
        at += 1;
        word
    };
    let number = |word: Option<&str>| word?.parse::<usize>().ok();
    let features = number(next())?;
    let feature_words: Vec<&str> = (0..features).map(|_| next()).collect::<Option<_>>()?;
    let queueing = feature_words.first() == Some(&"1");
    let handler = number(next())?;
    (0..handler).try_for_each(|_| next().map(|_| ()))?;
    let groups = number(next())?;
    next()?;
    let mut paths = Vec::new();
    for _ in 0..groups.min(64) {
        next()?;
        let selector = number(next())?;
        (0..selector).try_for_each(|_| next().map(|_| ()))?;
        let (count, info) = (number(next())?, number(next())?);
        for _ in 0..count.min(256) {
            let device = next()?.to_string();
            let active = match next()? {
                "A" => true,
                "F" => false,
                _ => return None,
            };
            let fail_count = next()?.parse().ok()?;
            (0..info).try_for_each(|_| next().map(|_| ()))?;
            paths.push(MultipathPath { device, active, fail_count });
        }
    }
    Some((queueing, paths))
}

/// A multipath map `mpatha` (dm-3, 254:3) over `loop0` with this table
/// and status: the tests' map.
#[cfg(test)]
pub(crate) fn map(table: &str, status: &str) -> MapperDevice {
    MapperDevice {
        device: "dm-3".into(),
        dev: (254, 3),
        name: "mpatha".into(),
        uuid: "mpath-3600a098038303052".into(),
        slaves: vec![("loop0".into(), (7, 0))],
        holders: Vec::new(),
        targets: vec![MapperTarget { kind: "multipath".into(), table: table.into(), status: status.into() }],
        table_unread: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_whose_paths_all_failed_and_that_queues_is_one_that_waits_for_ever() {
        // As dmsetup prints them for a map over one loop device, its path
        // failed (round-robin: no per-path info), then for two SCSI paths
        // under service-time (two info args a path), one still active.
        let lost = map("1 queue_if_no_path 0 1 1 round-robin 0 1 1 7:0 1", "2 1 0 0 1 1 E 0 1 0 7:0 F 1 ");
        let mp = lost.multipath().unwrap();
        assert!(mp.queue_if_no_path && mp.queueing, "{mp:?}");
        assert_eq!(mp.paths, vec![MultipathPath { device: "7:0".into(), active: false, fail_count: 1 }]);
        assert!(mp.queues_for_ever());
        let one_left = map(
            "3 queue_if_no_path pg_init_retries 50 1 alua 2 1 service-time 0 2 2 8:16 1 1 8:32 1 1",
            "2 0 0 0 2 1 A 0 1 2 8:16 A 0 0 1 E 0 1 2 8:32 F 3 0 1",
        );
        let mp = one_left.multipath().unwrap();
        assert_eq!(
            mp.paths.iter().map(|p| (p.device.as_str(), p.active)).collect::<Vec<_>>(),
            [("8:16", true), ("8:32", false)]
        );
        assert!(!mp.queues_for_ever(), "a path is left");
        // Failing rather than queueing: I/O errors out, nothing waits.
        let fails = map("0 0 1 1 round-robin 0 1 1 7:0 1", "2 0 0 0 1 1 E 0 1 0 7:0 F 1 ");
        assert!(!fails.multipath().unwrap().queues_for_ever());
    }

    #[test]
    fn anything_else_is_no_multipath_state() {
        let mut linear = map("7:0 0", "");
        linear.targets[0].kind = "linear".into();
        assert_eq!(linear.multipath(), None);
        // A status cut short, or a word where a state should be.
        assert_eq!(
            map("1 queue_if_no_path 0 1 1 round-robin 0 1 1 7:0 1", "2 1 0 0 1 1 E 0 1 0 7:0").multipath(),
            None
        );
        assert_eq!(map("1 queue_if_no_path 0", "2 1 0 0 1 1 E 0 1 0 7:0 X 1").multipath(), None);
        assert_eq!(map("2 queue_if_no_path", "").multipath(), None);
        let mut unread = map("", "");
        unread.targets.clear();
        assert_eq!(unread.multipath(), None);
    }
}
