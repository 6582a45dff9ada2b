//! The filesystems podstuck stays away from, and how they heal. A read
//! that did not answer leaves its reader in the kernel; while it is stuck
//! there the filesystem it is on is avoided (a second read would only
//! hang beside it). Once that reader ends (it returned, or was reaped),
//! the filesystem answered: it is read again at once, and the recovery
//! counted. A reader that never ends (a dead NFS server) does not blind
//! podstuck for good either: the filesystem is tried again after a
//! backoff (30 s, doubling to 10 min), one more reader at most beside the
//! stuck one, and only while half of the readers podstuck allows are
//! free, so filesystems that answer always find a reader.
//!
//! A try that answers while the first reader is still stuck lifts
//! nothing: its answer is used, and the next try waits another backoff.
//! The reads of the same look go on with it for half a second
//! ([`TRY_LOOK`]): a detector's look is several reads (the call's path
//! resolved, then its filesystem's statfs), and a first that answered
//! must not leave the one that tells the cause refused for another
//! backoff. One more reader at most beside the stuck one still holds.
//! A server may answer one request and stall another (a FUSE daemon
//! answering statfs while a lookup it read never returns): lifted on the
//! statfs, the filesystem was read freely, each read that met the stall
//! left one more reader stuck, and once they reached the cap
//! (`DEFAULT_MAX_STUCK_WORKERS`) podstuck refused every read of the node.
//!
//! A filesystem is known by its device (major:minor): every mount of it,
//! in any mount namespace, is the same superblock and hangs alike, and
//! a mount of another filesystem is never avoided for it. A path that
//! no mount table places is avoided as a path, in its own namespace only:
//! a read that hung in a container's root never avoids a host path of the
//! same spelling. Pure bookkeeping: the caller says what the kernel said.

use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime};

use crate::inspect::mounts::is_at_or_below;
use crate::inspect::Unreadable;
use crate::words::{human_duration, safe_text};

/// The first wait before a filesystem whose reader is still stuck is
/// tried again; it doubles with each try that hangs too.
pub(super) const FIRST_BACKOFF: Duration = Duration::from_secs(30);
/// The longest wait between tries.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(600);
/// Readers left stuck on one filesystem at most: the first, and one try.
pub(super) const STUCK_PER_SPOT: usize = 2;
/// How long the reads of one look go on with a try that answered while
/// the first reader is still stuck.
pub(super) const TRY_LOOK: Duration = Duration::from_millis(500);
/// Recoveries remembered for the summary (all are counted).
const RECOVERIES_KEPT: usize = 16;

/// Where a read was: the filesystem, or a path no table placed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Spot {
    /// A filesystem by its device: every mount of it hangs alike.
    Device((u32, u32)),
    /// A path of mount namespace `ns` (0: the node's) no table placed.
    Path { ns: u64, path: Vec<u8> },
}

/// Where a path lies, as avoidance needs it: the filesystems a lookup
/// crosses (the mount it is on first, then each mount above), and what
/// to call the first in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Place {
    pub(super) spots: Vec<Spot>,
    pub(super) mount_point: Vec<u8>,
    pub(super) fstype: String,
}

/// A filesystem avoided now.
#[derive(Clone, Debug)]
struct Avoided {
    spot: Spot,
    mount_point: Vec<u8>,
    fstype: String,
    since: Instant,
    since_wall: SystemTime,
    /// Reads on it that did not answer, in a row: the backoff's exponent.
    hangs: u32,
    /// When it may be tried again though a reader on it is still stuck.
    retry_at: Instant,
    /// Until when the look whose try answered may go on reading it.
    look_until: Option<Instant>,
}

impl Avoided {
    /// Whether the look whose try answered is still going on.
    fn looking(&self, now: Instant) -> bool {
        self.look_until.is_some_and(|until| now < until)
    }
}

/// A filesystem that was avoided and answered again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovered {
    pub mount_point: Vec<u8>,
    pub fstype: String,
    pub avoided_for: Duration,
    pub at: SystemTime,
}

/// A filesystem avoided now, as the summary and /metrics say it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AvoidedNow {
    pub mount_point: Vec<u8>,
    pub fstype: String,
    pub since: SystemTime,
    /// podstuck's readers still stuck on it.
    pub readers: usize,
}

/// What a decision needs to know of the readers still stuck.
pub(super) struct Stuck<'a> {
    /// The spot of each reader still stuck (None: a reader finishing).
    pub(super) spots: Vec<Option<&'a Spot>>,
    pub(super) max: usize,
}

impl Stuck<'_> {
    fn on(&self, spot: &Spot) -> usize {
        self.spots.iter().filter(|s| **s == Some(spot)).count()
    }
}

/// Every avoided filesystem, and those that recovered.
#[derive(Default)]
pub(super) struct Avoidance {
    avoided: Vec<Avoided>,
    recovered: VecDeque<Recovered>,
    pub(super) recovered_total: u64,
}

impl Avoidance {
    /// Whether a read at `place` is refused now, and why, in words. A
    /// filesystem whose readers have all ended is lifted (it answered);
    /// one whose reader is still stuck is tried again once its backoff
    /// has passed, with room for one more stuck reader.
    pub(super) fn refuses(&mut self, place: &Place, stuck: &Stuck<'_>, now: Instant) -> Option<Unreadable> {
        self.lift_answered(stuck, now);
        let hit = self.avoided.iter().find(|a| place.spots.iter().any(|s| covers(&a.spot, s)))?;
        let readers = stuck.on(&hit.spot);
        let free = stuck.max.saturating_sub(stuck.spots.len());
        let trying = now >= hit.retry_at || hit.looking(now);
        let retry = trying && readers < STUCK_PER_SPOT && free * 2 >= stuck.max;
        if retry {
            return None;
        }
        let on = if hit.mount_point.is_empty() {
            String::new()
        } else {
            format!(" on {} ({})", safe_text(&hit.mount_point), hit.fstype)
        };
        let next = match hit.retry_at.checked_duration_since(now) {
            Some(left) if !left.is_zero() => format!("when it returns, or in {}", human_duration(left)),
            _ => "when it returns".into(),
        };
        Some(Unreadable::Avoided(format!(
            "not touched: an earlier read{on} has not returned for {}; podstuck reads there again {next}",
            human_duration(now.saturating_duration_since(hit.since))
        )))
    }

    /// A read at `place` did not answer: its filesystem is avoided, from
    /// now or once more, its next try further off.
    pub(super) fn hung(&mut self, place: &Place, now: Instant) -> Spot {
        let spot = place.spots.first().cloned().unwrap_or(Spot::Path { ns: 0, path: Vec::new() });
        match self.avoided.iter_mut().find(|a| a.spot == spot) {
            Some(a) => {
                a.hangs += 1;
                a.retry_at = now + backoff(a.hangs);
                a.look_until = None;
            }
            None => self.avoided.push(Avoided {
                spot: spot.clone(),
                mount_point: place.mount_point.clone(),
                fstype: place.fstype.clone(),
                since: now,
                since_wall: SystemTime::now(),
                hangs: 1,
                retry_at: now + backoff(1),
                look_until: None,
            }),
        }
        spot
    }

    /// A read at `place` answered: what was avoided there answers again,
    /// unless a reader is still stuck on it (the read that hung may hang
    /// again): that stays avoided until its reader ends, tried again
    /// after another backoff.
    pub(super) fn answered(&mut self, place: &Place, stuck: &Stuck<'_>, now: Instant) {
        let mut answered = Vec::new();
        for a in self.avoided.iter_mut().filter(|a| place.spots.first().is_some_and(|s| covers(&a.spot, s))) {
            match stuck.on(&a.spot) {
                0 => answered.push(a.spot.clone()),
                // The try's own look goes on; the next look waits a backoff.
                _ if a.looking(now) => {}
                _ => {
                    a.retry_at = now + backoff(a.hangs);
                    a.look_until = Some(now + TRY_LOOK);
                }
            }
        }
        for spot in answered {
            self.lift(&spot, now);
        }
    }

    /// Lifts every filesystem no reader is stuck on any more.
    pub(super) fn lift_answered(&mut self, stuck: &Stuck<'_>, now: Instant) {
        let answered: Vec<Spot> =
            self.avoided.iter().filter(|a| stuck.on(&a.spot) == 0).map(|a| a.spot.clone()).collect();
        for spot in answered {
            self.lift(&spot, now);
        }
    }

    fn lift(&mut self, spot: &Spot, now: Instant) {
        let Some(i) = self.avoided.iter().position(|a| a.spot == *spot) else { return };
        let a = self.avoided.remove(i);
        self.recovered_total += 1;
        if self.recovered.len() == RECOVERIES_KEPT {
            self.recovered.pop_front();
        }
        self.recovered.push_back(Recovered {
            mount_point: a.mount_point,
            fstype: a.fstype,
            avoided_for: now.saturating_duration_since(a.since),
            at: SystemTime::now(),
        });
    }

    /// The filesystems avoided now, with the readers stuck on each.
    pub(super) fn now(&self, stuck: &Stuck<'_>) -> Vec<AvoidedNow> {
        self.avoided
            .iter()
            .map(|a| AvoidedNow {
                mount_point: a.mount_point.clone(),
                fstype: a.fstype.clone(),
                since: a.since_wall,
                readers: stuck.on(&a.spot),
            })
            .collect()
    }

    /// The last recoveries, oldest first.
    pub(super) fn recovered(&self) -> Vec<Recovered> {
        self.recovered.iter().cloned().collect()
    }

    /// Whether anything is avoided now.
    pub(super) fn is_empty(&self) -> bool {
        self.avoided.is_empty()
    }
}

/// The wait before try `hangs` (1: after the first hang).
fn backoff(hangs: u32) -> Duration {
    let doubled = FIRST_BACKOFF.saturating_mul(1u32 << hangs.saturating_sub(1).min(16));
    doubled.min(MAX_BACKOFF)
}

/// Whether avoiding `avoided` keeps a read at `spot` away: the same
/// filesystem, or a path at or below an avoided path of its namespace.
fn covers(avoided: &Spot, spot: &Spot) -> bool {
    match (avoided, spot) {
        (Spot::Device(a), Spot::Device(b)) => a == b,
        (Spot::Path { ns: a, path: p }, Spot::Path { ns: b, path: q }) => a == b && is_at_or_below(q, p),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(dev: (u32, u32), above: &[(u32, u32)]) -> Place {
        let mut spots = vec![Spot::Device(dev)];
        spots.extend(above.iter().map(|d| Spot::Device(*d)));
        Place { spots, mount_point: b"/mnt/fuse".to_vec(), fstype: "fuse.bindfs".into() }
    }

    fn stuck(spots: &[&Spot], max: usize) -> Stuck<'static> {
        let leaked: Vec<Option<&'static Spot>> =
            spots.iter().map(|s| Some(&*Box::leak(Box::new((*s).clone())))).collect();
        Stuck { spots: leaked, max }
    }

    #[test]
    fn a_filesystem_is_avoided_while_its_reader_is_stuck_and_read_again_once_it_ends() {
        let mut avoidance = Avoidance::default();
        let t0 = Instant::now();
        let fuse = place((0, 55), &[(8, 1)]);
        let spot = avoidance.hung(&fuse, t0);
        let refused = avoidance.refuses(&fuse, &stuck(&[&spot], 8), t0 + Duration::from_secs(1)).unwrap();
        assert_eq!(refused.kind(), "avoided");
        assert!(refused.why().starts_with("not touched: an earlier read on /mnt/fuse (fuse.bindfs) has not returned for 1.0 s; podstuck reads there again when it returns, or in 29 s"), "{refused}");
        // A path below it on another filesystem walks through it.
        let below = Place { spots: vec![Spot::Device((0, 60)), Spot::Device((0, 55))], ..fuse.clone() };
        assert!(avoidance.refuses(&below, &stuck(&[&spot], 8), t0).is_some());
        // Another filesystem, or the one above it, is read.
        assert!(avoidance.refuses(&place((8, 1), &[]), &stuck(&[&spot], 8), t0).is_none());
        // The reader ended: the filesystem answered, read at once.
        assert!(avoidance.refuses(&fuse, &stuck(&[], 8), t0 + Duration::from_secs(2)).is_none());
        assert_eq!(avoidance.recovered_total, 1);
        let recovered = avoidance.recovered();
        assert_eq!(recovered[0].avoided_for, Duration::from_secs(2));
        assert!(avoidance.is_empty());
    }

    #[test]
    fn a_reader_that_never_ends_is_tried_again_with_a_backoff_and_room_kept_for_others() {
        let mut avoidance = Avoidance::default();
        let t0 = Instant::now();
        let nfs = place((0, 70), &[]);
        let spot = avoidance.hung(&nfs, t0);
        let one = stuck(&[&spot], 8);
        assert!(avoidance.refuses(&nfs, &one, t0 + FIRST_BACKOFF - Duration::from_secs(1)).is_some());
        assert!(avoidance.refuses(&nfs, &one, t0 + FIRST_BACKOFF).is_none(), "tried again after 30 s");
        // The try hung too: twice the wait, and no third reader on it.
        let t1 = t0 + FIRST_BACKOFF;
        avoidance.hung(&nfs, t1);
        let two = stuck(&[&spot, &spot], 8);
        assert!(avoidance.refuses(&nfs, &two, t1 + FIRST_BACKOFF).is_some());
        assert!(avoidance.refuses(&nfs, &two, t1 + 2 * FIRST_BACKOFF).is_some(), "two readers stuck on it already");
        assert!(avoidance.refuses(&nfs, &one, t1 + 2 * FIRST_BACKOFF).is_none());
        // With half the readers stuck elsewhere, no try: others need them.
        let other = Spot::Device((0, 99));
        let busy = stuck(&[&spot, &other, &other, &other, &other], 8);
        assert!(avoidance.refuses(&nfs, &busy, t1 + 2 * FIRST_BACKOFF).is_some());
        assert_eq!(backoff(1), FIRST_BACKOFF);
        assert_eq!(backoff(30), MAX_BACKOFF);
    }

    #[test]
    fn a_path_no_table_placed_is_avoided_in_its_own_namespace_only() {
        let mut avoidance = Avoidance::default();
        let t0 = Instant::now();
        let in_container = Place {
            spots: vec![Spot::Path { ns: 4026532300, path: b"/data".to_vec() }],
            mount_point: b"/data".to_vec(),
            fstype: "?".into(),
        };
        let spot = avoidance.hung(&in_container, t0);
        let on_host = Place { spots: vec![Spot::Path { ns: 0, path: b"/data/x".to_vec() }], ..in_container.clone() };
        let s = stuck(&[&spot], 8);
        assert!(avoidance.refuses(&on_host, &s, t0).is_none(), "the host's /data is another place");
        let below = Place { spots: vec![Spot::Path { ns: 4026532300, path: b"/data/x".to_vec() }], ..on_host };
        assert!(avoidance.refuses(&below, &s, t0).is_some());
        // A read there answered, its reader gone: lifted.
        avoidance.answered(&below, &stuck(&[], 8), t0);
        assert!(avoidance.is_empty());
    }

    /// A FUSE server answering statfs while the lookup it read stays
    /// unanswered: the try's answer lifts nothing while the first reader
    /// is stuck, so readers never pile up to the cap; the reader's return
    /// lifts it, counted.
    #[test]
    fn a_try_that_answers_while_the_first_reader_is_stuck_keeps_the_filesystem_avoided_until_that_reader_returns() {
        let mut avoidance = Avoidance::default();
        let t0 = Instant::now();
        let fuse = place((0, 55), &[(8, 1)]);
        let spot = avoidance.hung(&fuse, t0);
        let one = stuck(&[&spot], 8);
        let tried = t0 + FIRST_BACKOFF;
        assert!(avoidance.refuses(&fuse, &one, tried).is_none(), "tried again after its backoff");
        avoidance.answered(&fuse, &one, tried);
        assert!(!avoidance.is_empty(), "lifted while a reader is still stuck on it");
        // The try's look goes on: its next read (the statfs after the
        // path's resolution) is not refused, and does not open another.
        let same_look = tried + Duration::from_millis(100);
        assert!(avoidance.refuses(&fuse, &one, same_look).is_none(), "the look of the try that answered goes on");
        avoidance.answered(&fuse, &one, same_look);
        assert!(avoidance.refuses(&fuse, &one, tried + TRY_LOOK).is_some(), "the next look waits another backoff");
        assert_eq!(avoidance.recovered_total, 0);
        let refused = avoidance.refuses(&fuse, &one, tried + Duration::from_secs(1)).unwrap();
        assert!(refused.why().ends_with("podstuck reads there again when it returns, or in 29 s"), "{refused}");
        assert_eq!(avoidance.now(&one)[0].readers, 1);
        // Another backoff, another try: still one reader stuck, no more.
        assert!(avoidance.refuses(&fuse, &one, tried + FIRST_BACKOFF).is_none());
        // The stuck reader returns (or is reaped): lifted, counted.
        let returned = tried + FIRST_BACKOFF + Duration::from_secs(5);
        assert!(avoidance.refuses(&fuse, &stuck(&[], 8), returned).is_none());
        assert!(avoidance.is_empty());
        assert_eq!(avoidance.recovered_total, 1);
        assert_eq!(avoidance.recovered()[0].avoided_for, returned - t0);
    }

    /// A read answered elsewhere on a filesystem whose own reader ended
    /// (reaped before this read's answer) lifts it at once, as before.
    #[test]
    fn a_read_that_answers_once_no_reader_is_stuck_lifts_the_filesystem_at_once() {
        let mut avoidance = Avoidance::default();
        let t0 = Instant::now();
        let fuse = place((0, 55), &[]);
        avoidance.hung(&fuse, t0);
        avoidance.answered(&fuse, &stuck(&[], 8), t0 + Duration::from_secs(3));
        assert!(avoidance.is_empty());
        assert_eq!(avoidance.recovered_total, 1);
    }
}
