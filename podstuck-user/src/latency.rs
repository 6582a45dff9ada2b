//! Latency histograms per series (syscall x outcome x actor role x pod), for
//! the whole run and per interval, with exact counts. This is the record
//! kept in memory; `export` turns it into files and `report` reads them back.
//!
//! One HdrHistogram per series and scope: 1 ns to 1 hour at 3 significant
//! digits in an incident run (the files show them), 2 in the always-on run
//! (see below). The calls come from the kernel's exact per-series buckets
//! (log-linear, 8 per power of two): each bucket's calls are recorded at its
//! middle, so a percentile is told to within 6 % of the true latency, and
//! counts and sums are exact.
//!
//! The pods a series names come from paths, which anyone on the node can
//! make up, so the book is bounded: at most [`MAX_PODS`] pods and
//! [`MAX_SERIES`] series of their own; the calls of any more are counted,
//! exactly, in `other` series ([`SeriesKey::is_other`]), and the book says
//! so once ([`LatencyBook::take_overflow_note`]).
//!
//! The always-on run (`--listen` without `--histograms` or the live view)
//! must not grow with the pods it has seen over weeks: its book is
//! [`LatencyBook::node_wide`], where only the pods followed (an active
//! finding, or named by `--pod`; see [`LatencyBook::follow`]) get series of
//! their own, and a pod no longer followed is merged back into the node's
//! series after [`POD_SERIES_LINGER`]. Every other call is the node's.
//! Its histograms are only ever read as Prometheus' buckets (a factor of 2
//! or 2.5 apart), so they keep 2 significant digits
//! ([`ALWAYS_ON_SIGNIFICANT_DIGITS`]), an eighth of the memory, and no
//! interval histogram: a series that saw an hour-long call holds 36 KB,
//! not 2 x 270. And /metrics shows a followed pod's calls as counts only
//! (its latencies are the node's histograms'), so there a pod's series
//! keeps counts and no histogram ([`Series::counts_only`]), and every call,
//! the followed pods' too, is in the node's series: a pod whose findings
//! come and go costs a few hundred bytes a series for its 10 minutes, not
//! a histogram each (the soak with demos beside grew 5 MB by them).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use hdrhistogram::Histogram;
use podstuck_common::{latency_bucket_range, Syscall};

use crate::event::{errno_name, syscall_name, CallEvent};
use crate::identify::actor::Role;
use crate::identify::pod::PodUid;
use crate::identify::Identity;

/// Largest latency kept apart: an hour. A longer call is recorded as an
/// hour (and its exact duration is in its event).
pub const MAX_LATENCY_NS: u64 = 3_600_000_000_000;
pub const SIGNIFICANT_DIGITS: u8 = 3;
/// The always-on book's precision: 1 %, finer than the kernel's buckets
/// (an eighth of a power of two) and than any bucket /metrics exports.
pub const ALWAYS_ON_SIGNIFICANT_DIGITS: u8 = 2;

/// A histogram from 1 ns up, 3 significant digits, that grows as values
/// come: one whose calls all took microseconds holds 4,096 counts (32 KB)
/// instead of the 33,792 (270 KB) that reach an hour, and the book clamps
/// every value to [`MAX_LATENCY_NS`], so none grows past that.
pub fn new_histogram() -> Histogram<u64> {
    histogram_of(SIGNIFICANT_DIGITS)
}

fn histogram_of(digits: u8) -> Histogram<u64> {
    Histogram::new(digits).expect("valid histogram bounds")
}

/// Records `count` calls of `latency_ns`, clamped to 1 ns ..= an hour,
/// growing the histogram as needed.
pub fn record_clamped(histogram: &mut Histogram<u64>, latency_ns: u64, count: u64) {
    let value = latency_ns.clamp(1, MAX_LATENCY_NS);
    // Growing to an hour cannot fail; should it, the value is kept at the top.
    if histogram.record_n(value, count).is_err() {
        histogram.saturating_record_n(value, count);
    }
}

/// Pods kept apart in the book. kubelet runs at most 110 pods by default
/// (`--max-pods`) and the largest managed nodes 250; pods that ended during
/// a run add a few more. A real node stays under 256, while made-up pod
/// UIDs in paths cost nothing to make: past this, calls of further pods are
/// counted in `other` series.
pub const MAX_PODS: usize = 256;

/// Series of their own (syscall x outcome x actor role x pod). A pod's
/// teardown makes a handful (the four calls, "ok" and an errno or two, one
/// or two actors), so 256 pods stay well under 1,024; past this, calls of
/// new series are counted in `other` series.
pub const MAX_SERIES: usize = 1024;

/// `other` series at most: by syscall, outcome and actor role while there
/// are fewer than `MAX_OTHER_SERIES - 8`, then by syscall and failed or not
/// (4 x 2 = 8 more at most). The book never holds more than
/// `MAX_SERIES + MAX_OTHER_SERIES` series.
pub const MAX_OTHER_SERIES: usize = 64;

/// Series of the fully folded kind: every syscall, "ok" or "failed".
const FULLY_FOLDED: usize = Syscall::ALL.len() * 2;

/// How long a pod keeps its own series once it is no longer followed (its
/// findings resolved): long enough for a dashboard to show how it ended,
/// then the series end, as Prometheus expects of a stale series.
pub const POD_SERIES_LINGER: Duration = Duration::from_secs(600);

/// Pods followed at once in a node-wide book: the named ones first, then
/// those with active findings as they came. A node with more stuck pods
/// than this has its cause told by the findings already.
pub const MAX_PODS_FOLLOWED: usize = 64;

/// Where `other` series keep their pod: the nil UUID, which kubelet never
/// gives a pod (pod UIDs are random, version 4). Its tag and labels say
/// `other` ([`SeriesKey::pod_label`]).
pub const OTHER_POD_UID: &str = "00000000-0000-0000-0000-000000000000";

/// The pod of `other` series.
pub fn other_pod() -> PodUid {
    PodUid::parse(OTHER_POD_UID).expect("the nil UUID is a valid pod UID")
}

/// Where a kernel latency bucket's calls are recorded: its middle, within
/// the histogram's bounds.
pub fn bucket_middle(bucket: usize) -> u64 {
    let (low, high) = latency_bucket_range(bucket);
    (low + (high - low) / 2).clamp(1, MAX_LATENCY_NS)
}

/// What a series is: one kind of call, one outcome, one kind of actor, one
/// pod (or none).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SeriesKey {
    pub syscall: Syscall,
    /// "ok" or the errno name ("EBUSY").
    pub outcome: String,
    pub role: Role,
    pub pod: Option<PodUid>,
}

impl SeriesKey {
    pub fn of(event: &CallEvent, identity: &Identity) -> SeriesKey {
        SeriesKey {
            syscall: event.syscall,
            outcome: event.errno().map(errno_name).unwrap_or_else(|| "ok".to_string()),
            role: identity.actor.role,
            pod: identity.pod_uid.clone(),
        }
    }

    /// The interval-log tag: `syscall/outcome/role/pod`, "node" for no pod,
    /// "other" for calls of pods and series past the book's caps. Free of
    /// commas and spaces, as the log format requires.
    pub fn tag(&self) -> String {
        let pod = if self.pod.is_none() { "node" } else { self.pod_label() };
        format!("{}/{}/{}/{}", syscall_name(self.syscall), self.outcome, self.role.as_str(), pod)
    }

    /// Calls of pods (or series) past the book's caps, counted together.
    pub fn is_other(&self) -> bool {
        self.pod.as_ref().is_some_and(|p| p.as_str() == OTHER_POD_UID)
    }

    /// The pod as a label: its UID, "other" for the `other` series, empty
    /// for none (the node).
    pub fn pod_label(&self) -> &str {
        match &self.pod {
            _ if self.is_other() => "other",
            Some(pod) => pod.as_str(),
            None => "",
        }
    }

    pub fn is_error(&self) -> bool {
        self.outcome != "ok"
    }
}

/// One series: its histograms and exact counts.
#[derive(Clone, Debug)]
pub struct Series {
    pub total: Histogram<u64>,
    /// The current interval's, where intervals are kept (the files).
    pub interval: Option<Histogram<u64>>,
    pub count: u64,
    pub sum_ns: u128,
    pub first_seen: SystemTime,
    pub last_seen: SystemTime,
    /// The order the series came in, over the run: what is exported first
    /// stays exported ([`crate::export::prom`]).
    pub seq: u64,
    /// A followed pod's series in the always-on book: its calls' counts and
    /// sum, while their latencies are recorded in the node's series, which
    /// count them too; `total` stays empty. Not part of the node's figures.
    pub counts_only: bool,
}

impl Series {
    fn new(time: SystemTime, seq: u64, digits: u8, intervals: bool) -> Series {
        Series {
            total: histogram_of(digits),
            interval: intervals.then(|| histogram_of(digits)),
            count: 0,
            sum_ns: 0,
            first_seen: time,
            last_seen: time,
            seq,
            counts_only: false,
        }
    }

    /// A series of counts only ([`Series::counts_only`]): its histogram the
    /// smallest there is (1 significant digit: 32 counts), never recorded in.
    fn counts_only(time: SystemTime, seq: u64) -> Series {
        Series { counts_only: true, ..Series::new(time, seq, 1, false) }
    }

    /// Adds `other`'s calls to this one (a pod merged into the node).
    fn absorb(&mut self, other: &Series) {
        // Both grow as needed: adding cannot fail.
        let _ = self.total.add(&other.total);
        if let (Some(mine), Some(theirs)) = (self.interval.as_mut(), other.interval.as_ref()) {
            let _ = mine.add(theirs);
        }
        self.count += other.count;
        self.sum_ns += other.sum_ns;
        self.first_seen = self.first_seen.min(other.first_seen);
        self.last_seen = self.last_seen.max(other.last_seen);
    }
}

/// Which pods have series of their own.
enum PodDetail {
    /// Every pod, up to [`MAX_PODS`]: an incident run.
    Every,
    /// Only the pods followed: the always-on run.
    Followed,
}

/// Calls and errors of one closed interval, all series together: the
/// timeline of the picture.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IntervalTotals {
    /// Since the start of the run.
    pub start: Duration,
    pub length: Duration,
    pub calls: u64,
    pub errors: u64,
}

/// A closed interval: its per-series histograms (non-empty series only).
pub struct ClosedInterval {
    pub start: Duration,
    pub length: Duration,
    pub histograms: Vec<(SeriesKey, Histogram<u64>)>,
}

/// Every series of a run.
pub struct LatencyBook {
    pub started: SystemTime,
    series: BTreeMap<SeriesKey, Series>,
    detail: PodDetail,
    /// Pods followed now (`None`) or until when they linger (`Some`).
    followed: BTreeMap<PodUid, Option<SystemTime>>,
    /// Whether interval histograms are kept (only the files close them).
    intervals: bool,
    /// The histograms' significant digits.
    digits: u8,
    next_seq: u64,
    /// Pods with series of their own (at most [`MAX_PODS`]).
    pods: BTreeSet<PodUid>,
    /// How many of `series` are `other` ones.
    other_series: usize,
    /// Calls counted in `other` series.
    folded_calls: u64,
    /// Notes for the user, each said once.
    notes: Vec<String>,
    said_folding: bool,
    interval_started: SystemTime,
    interval_calls: u64,
    interval_errors: u64,
    timeline: Vec<IntervalTotals>,
}

impl LatencyBook {
    /// A book of every pod (up to the caps), with interval histograms: an
    /// incident run's, for the files and the live view.
    pub fn new(started: SystemTime) -> LatencyBook {
        LatencyBook {
            started,
            series: BTreeMap::new(),
            detail: PodDetail::Every,
            followed: BTreeMap::new(),
            intervals: true,
            digits: SIGNIFICANT_DIGITS,
            next_seq: 0,
            pods: BTreeSet::new(),
            other_series: 0,
            folded_calls: 0,
            notes: Vec::new(),
            said_folding: false,
            interval_started: started,
            interval_calls: 0,
            interval_errors: 0,
            timeline: Vec::new(),
        }
    }

    /// The always-on run's book: the node's series, and series of their
    /// own only for the pods followed; no interval histograms (no files).
    pub fn node_wide(started: SystemTime) -> LatencyBook {
        LatencyBook {
            detail: PodDetail::Followed,
            intervals: false,
            digits: ALWAYS_ON_SIGNIFICANT_DIGITS,
            ..LatencyBook::new(started)
        }
    }

    /// The pods to follow from now: `named` (by `--pod`) first, then
    /// `with_findings`, at most [`MAX_PODS_FOLLOWED`]. A pod no longer
    /// followed lingers [`POD_SERIES_LINGER`]; then, in a node-wide book,
    /// its series are merged into the node's (no call is lost from the
    /// node's counts) and it is forgotten.
    pub fn follow<'a>(
        &mut self,
        named: impl IntoIterator<Item = &'a PodUid>,
        with_findings: impl IntoIterator<Item = &'a PodUid>,
        now: SystemTime,
    ) {
        let mut now_followed = BTreeSet::new();
        for pod in named.into_iter().chain(with_findings) {
            if now_followed.len() >= MAX_PODS_FOLLOWED {
                break;
            }
            now_followed.insert(pod.clone());
        }
        for (pod, until) in self.followed.iter_mut() {
            if !now_followed.contains(pod) && until.is_none() {
                *until = Some(now + POD_SERIES_LINGER);
            }
        }
        let ended: Vec<PodUid> =
            self.followed.iter().filter(|(_, until)| until.is_some_and(|t| t <= now)).map(|(p, _)| p.clone()).collect();
        for pod in ended {
            self.followed.remove(&pod);
            if matches!(self.detail, PodDetail::Followed) {
                self.merge_into_node(&pod);
            }
        }
        for pod in now_followed {
            self.followed.insert(pod, None);
        }
    }

    /// Pods followed now or lingering: those whose series are exported.
    pub fn followed(&self) -> impl Iterator<Item = &PodUid> {
        self.followed.keys()
    }

    /// Moves `pod`'s series into the node's (pod-less) ones.
    fn merge_into_node(&mut self, pod: &PodUid) {
        let keys: Vec<SeriesKey> = self.series.keys().filter(|k| k.pod.as_ref() == Some(pod)).cloned().collect();
        for key in keys {
            let Some(series) = self.series.remove(&key) else { continue };
            self.pods.remove(pod);
            // Its calls are in the node's series already.
            if series.counts_only {
                continue;
            }
            let node_key = SeriesKey { pod: None, ..key };
            match self.series.get_mut(&node_key) {
                Some(node) => node.absorb(&series),
                None => {
                    self.series.insert(node_key, series);
                }
            }
        }
    }

    /// The key the calls of `key` are counted under: its own, or, past
    /// the caps, an `other` one.
    fn admit(&mut self, mut key: SeriesKey) -> SeriesKey {
        if matches!(self.detail, PodDetail::Followed)
            && key.pod.as_ref().is_some_and(|p| !self.followed.contains_key(p))
        {
            key.pod = None;
        }
        if self.series.contains_key(&key) {
            return key;
        }
        let own_series = self.series.len() - self.other_series;
        let pod_fits = match &key.pod {
            None => true,
            Some(_) if key.is_other() => false,
            Some(pod) => self.pods.contains(pod) || self.pods.len() < MAX_PODS,
        };
        if pod_fits && own_series < MAX_SERIES {
            if let Some(pod) = &key.pod {
                self.pods.insert(pod.clone());
            }
            return key;
        }
        let mut folded = SeriesKey { pod: Some(other_pod()), ..key };
        if !self.series.contains_key(&folded) && self.other_series >= MAX_OTHER_SERIES - FULLY_FOLDED {
            folded.outcome = if folded.is_error() { "failed".to_string() } else { "ok".to_string() };
            folded.role = Role::Other;
        }
        if !self.series.contains_key(&folded) {
            self.other_series += 1;
        }
        if !self.said_folding {
            self.said_folding = true;
            let why = if pod_fits {
                format!("more than {MAX_SERIES} series")
            } else {
                format!("calls of more than {MAX_PODS} pods")
            };
            self.notes.push(format!(
                "{why}: no node runs that many, so most are likely made-up pod paths; the calls of further pods and series are counted together in the series of pod \"other\""
            ));
        }
        folded
    }

    fn series_at(&mut self, key: SeriesKey, time: SystemTime, count: u64, sum_ns: u64) -> &mut Series {
        self.interval_calls += count;
        if key.is_error() {
            self.interval_errors += count;
        }
        let mut key = self.admit(key);
        if key.is_other() {
            self.folded_calls += count;
        }
        if matches!(self.detail, PodDetail::Followed) && key.pod.is_some() && !key.is_other() {
            self.count_in(key.clone(), |seq| Series::counts_only(time, seq), time, count, sum_ns);
            key.pod = None;
        }
        let (digits, intervals) = (self.digits, self.intervals);
        self.count_in(key, |seq| Series::new(time, seq, digits, intervals), time, count, sum_ns)
    }

    /// `key`'s series (made by `make`, given its place in the run's order,
    /// when new) with `count` calls taking `sum_ns` added.
    fn count_in(
        &mut self,
        key: SeriesKey,
        make: impl FnOnce(u64) -> Series,
        time: SystemTime,
        count: u64,
        sum_ns: u64,
    ) -> &mut Series {
        let seq = self.next_seq;
        let series = self.series.entry(key).or_insert_with(|| make(seq));
        if series.seq == seq {
            self.next_seq += 1;
        }
        series.count += count;
        series.sum_ns += sum_ns as u128;
        series.first_seen = series.first_seen.min(time);
        series.last_seen = series.last_seen.max(time);
        series
    }

    /// One call whose latency is known exactly.
    pub fn record(&mut self, event: &CallEvent, identity: &Identity) {
        self.record_latency(SeriesKey::of(event, identity), event.time, event.latency_ns);
    }

    pub fn record_latency(&mut self, key: SeriesKey, time: SystemTime, latency_ns: u64) {
        let series = self.series_at(key, time, 1, latency_ns);
        record_clamped(&mut series.total, latency_ns, 1);
        if let Some(interval) = series.interval.as_mut() {
            record_clamped(interval, latency_ns, 1);
        }
    }

    /// Calls the kernel counted, `count` of them taking `sum_ns` in all,
    /// spread over its latency buckets as (bucket, calls).
    pub fn add(&mut self, key: SeriesKey, time: SystemTime, count: u64, sum_ns: u64, buckets: &[(usize, u64)]) {
        if count == 0 {
            return;
        }
        let series = self.series_at(key, time, count, sum_ns);
        for (bucket, calls) in buckets {
            let value = bucket_middle(*bucket);
            record_clamped(&mut series.total, value, *calls);
            if let Some(interval) = series.interval.as_mut() {
                record_clamped(interval, value, *calls);
            }
        }
    }

    pub fn series(&self) -> impl Iterator<Item = (&SeriesKey, &Series)> {
        self.series.iter()
    }

    /// Calls counted in `other` series (past the caps on pods and series).
    pub fn folded_calls(&self) -> u64 {
        self.folded_calls
    }

    /// What the user should be told about the book, once: the first time
    /// calls are folded into `other` series (and the first time calls named
    /// pods that do not exist, see [`crate::series::SeriesNames`]). Take it
    /// after each refresh and print it; None when there is nothing new.
    pub fn take_overflow_note(&mut self) -> Option<String> {
        if self.notes.is_empty() {
            return None;
        }
        Some(std::mem::take(&mut self.notes).join("; "))
    }

    /// A note for [`LatencyBook::take_overflow_note`] (the caller says each once).
    pub(crate) fn add_note(&mut self, note: String) {
        self.notes.push(note);
    }

    pub fn timeline(&self) -> &[IntervalTotals] {
        &self.timeline
    }

    /// Ends the current interval at `now`: returns its histograms and
    /// starts the next one.
    pub fn close_interval(&mut self, now: SystemTime) -> ClosedInterval {
        let start = self.interval_started.duration_since(self.started).unwrap_or_default();
        let length = now.duration_since(self.interval_started).unwrap_or_default();
        let mut histograms = Vec::new();
        for (key, series) in self.series.iter_mut() {
            if let Some(interval) = series.interval.as_mut().filter(|h| !h.is_empty()) {
                histograms.push((key.clone(), interval.clone()));
                interval.reset();
            }
        }
        self.timeline.push(IntervalTotals { start, length, calls: self.interval_calls, errors: self.interval_errors });
        self.interval_started = now;
        self.interval_calls = 0;
        self.interval_errors = 0;
        ClosedInterval { start, length, histograms }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::event::{decode, tests::record_bytes, WallClock};
    use crate::identify::Actor;

    pub(crate) fn identity(role: Role, pod: Option<&str>) -> Identity {
        Identity {
            abs_path: Ok(b"/x".to_vec()),
            pod_uid: pod.map(|p| PodUid::parse(p).unwrap()),
            path_area: None,
            target: crate::identify::target::Target::Other,
            container_id: None,
            actor: Actor { comm: "c".into(), exe: None, parent: "p".into(), role, description: "c".into() },
            matched: vec![],
            proof: crate::identify::path_proof::PathProof::NodeNamespace,
            claimed_pod: None,
        }
    }

    pub(crate) fn event(syscall: Syscall, ret: i64, latency_ns: u64) -> CallEvent {
        let mut e = decode(&record_bytes(syscall, ret, 0, b"/x"), &WallClock::now()).unwrap();
        e.latency_ns = latency_ns;
        e
    }

    #[test]
    fn series_split_by_syscall_outcome_role_and_pod() {
        let mut book = LatencyBook::new(SystemTime::now());
        let pod = "1b2c3d4e-0000-4000-8000-00000000000a";
        for _ in 0..3 {
            book.record(&event(Syscall::Rmdir, -16, 1_000), &identity(Role::Kubelet, Some(pod)));
        }
        book.record(&event(Syscall::Rmdir, 0, 2_000), &identity(Role::Kubelet, Some(pod)));
        book.record(&event(Syscall::Unlink, 0, 3_000), &identity(Role::Other, None));
        let tags: Vec<(String, u64)> = book.series().map(|(k, s)| (k.tag(), s.count)).collect();
        assert_eq!(
            tags,
            vec![
                ("unlink/ok/other/node".to_string(), 1),
                (format!("rmdir/EBUSY/kubelet/{pod}"), 3),
                (format!("rmdir/ok/kubelet/{pod}"), 1),
            ]
        );
    }

    #[test]
    fn intervals_reset_but_totals_keep_counting() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let mut book = LatencyBook::new(t0);
        for latency in [10, 20, 30] {
            book.record(&event(Syscall::Unlink, 0, latency), &identity(Role::Other, None));
        }
        book.record(&event(Syscall::Unlink, -2, 5), &identity(Role::Other, None));
        let first = book.close_interval(t0 + Duration::from_secs(5));
        assert_eq!(first.start, Duration::ZERO);
        assert_eq!(first.length, Duration::from_secs(5));
        assert_eq!(first.histograms.len(), 2);
        assert_eq!(first.histograms.iter().map(|(_, h)| h.len()).sum::<u64>(), 4);
        book.record(&event(Syscall::Unlink, 0, 40), &identity(Role::Other, None));
        let second = book.close_interval(t0 + Duration::from_secs(10));
        assert_eq!(second.histograms.len(), 1, "empty series are not logged");
        assert_eq!(second.histograms[0].1.len(), 1);
        let (_, ok) = book.series().find(|(k, _)| k.outcome == "ok").unwrap();
        assert_eq!(ok.count, 4);
        assert_eq!(ok.total.len(), 4);
        assert_eq!(ok.sum_ns, 100);
        assert_eq!(
            book.timeline()[0],
            IntervalTotals { start: Duration::ZERO, length: Duration::from_secs(5), calls: 4, errors: 1 }
        );
        assert_eq!(book.timeline()[1].calls, 1);
    }

    #[test]
    fn kernel_buckets_cover_every_latency_within_an_eighth() {
        use podstuck_common::{latency_bucket, LATENCY_BUCKETS};
        let mut previous = 0;
        for ns in (0..100_000u64).chain((17..42).flat_map(|p| [(1u64 << p) - 1, 1 << p, (1 << p) + 1, 3 << (p - 1)])) {
            let bucket = latency_bucket(ns);
            assert!(bucket < LATENCY_BUCKETS);
            let (low, high) = latency_bucket_range(bucket);
            assert!(low <= ns && ns <= high, "{ns} not in bucket {bucket} = {low}..={high}");
            assert!((high - low) as f64 <= low as f64 / 8.0 + 1.0, "bucket {bucket} too wide");
            if ns < 100_000 {
                assert!(bucket >= previous, "buckets follow latencies");
                previous = bucket;
            }
        }
        assert_eq!(latency_bucket(u64::MAX), LATENCY_BUCKETS - 1);
        let (_, top) = latency_bucket_range(LATENCY_BUCKETS - 1);
        assert_eq!(top, (1u64 << 42) - 1);
    }

    #[test]
    fn kernel_counts_are_added_exactly() {
        use podstuck_common::latency_bucket;
        let mut book = LatencyBook::new(SystemTime::now());
        let key = SeriesKey { syscall: Syscall::Unlinkat, outcome: "ok".into(), role: Role::Runtime, pod: None };
        let buckets = [(latency_bucket(1_000), 600_000), (latency_bucket(50_000), 400_000)];
        book.add(key.clone(), SystemTime::now(), 1_000_000, 20_600_000_000, &buckets);
        let (_, s) = book.series().next().unwrap();
        assert_eq!((s.count, s.sum_ns, s.total.len()), (1_000_000, 20_600_000_000, 1_000_000));
        let p50 = s.total.value_at_quantile(0.5) as f64;
        assert!((p50 - 1_000.0).abs() / 1_000.0 < 0.07, "p50 {p50}");
        let p99 = s.total.value_at_quantile(0.99) as f64;
        assert!((p99 - 50_000.0).abs() / 50_000.0 < 0.07, "p99 {p99}");
    }

    fn pod_uid(n: usize) -> String {
        format!("1b2c3d4e-0000-4000-8000-{n:012x}")
    }

    #[test]
    fn pods_past_the_cap_are_counted_together_as_other_and_said_once() {
        let mut book = LatencyBook::new(SystemTime::now());
        assert_eq!(book.take_overflow_note(), None);
        let pods = MAX_PODS + 44;
        for n in 0..pods {
            book.record(&event(Syscall::Unlink, -2, 1_000), &identity(Role::Other, Some(&pod_uid(n))));
        }
        let note = book.take_overflow_note().expect("the fold is said");
        assert!(note.contains("256 pods") && note.contains("\"other\""), "{note}");
        // Once: more folding says nothing more.
        book.record(&event(Syscall::Unlink, -2, 1_000), &identity(Role::Other, Some(&pod_uid(pods))));
        assert_eq!(book.take_overflow_note(), None);
        let own: Vec<_> = book.series().filter(|(k, _)| !k.is_other()).collect();
        assert_eq!(own.len(), MAX_PODS);
        let other: Vec<_> = book.series().filter(|(k, _)| k.is_other()).collect();
        assert_eq!(other.len(), 1);
        let (key, series) = other[0];
        assert_eq!(key.tag(), "unlink/ENOENT/other/other");
        assert_eq!(key.pod_label(), "other");
        assert_eq!((series.count, series.total.len()), (45, 45));
        assert_eq!(book.folded_calls(), 45);
        // A pod kept apart keeps its series, new outcomes included.
        book.record(&event(Syscall::Rmdir, -16, 1_000), &identity(Role::Kubelet, Some(&pod_uid(3))));
        assert!(book.series().any(|(k, _)| k.tag() == format!("rmdir/EBUSY/kubelet/{}", pod_uid(3))));
        assert_eq!(book.series().map(|(_, s)| s.count).sum::<u64>(), pods as u64 + 2);
    }

    #[test]
    fn series_past_the_cap_fold_and_the_book_stays_bounded() {
        let mut book = LatencyBook::new(SystemTime::now());
        let mut calls = 0;
        // Every errno, every role, every syscall, no pod: far more series than kept.
        for syscall in Syscall::ALL {
            for role in [Role::Kubelet, Role::Runtime, Role::Other, Role::Shim] {
                for errno in 1..400 {
                    book.record(&event(syscall, -errno, 500), &identity(role, None));
                    calls += 1;
                }
            }
        }
        let all = book.series().count();
        assert!(all <= MAX_SERIES + MAX_OTHER_SERIES, "{all} series");
        assert_eq!(book.series().filter(|(k, _)| !k.is_other()).count(), MAX_SERIES);
        assert_eq!(book.series().map(|(_, s)| s.count).sum::<u64>(), calls);
        assert_eq!(book.series().map(|(_, s)| s.total.len()).sum::<u64>(), calls);
        assert!(book.series().any(|(k, _)| k.tag() == "umount2/failed/other/other"), "fully folded series");
        let closed = book.close_interval(SystemTime::now());
        assert_eq!(closed.histograms.iter().map(|(_, h)| h.len()).sum::<u64>(), calls);
        assert!(book.take_overflow_note().unwrap().contains("1024 series"));
    }

    #[test]
    fn histograms_grow_only_as_far_as_their_calls() {
        let mut book = LatencyBook::new(SystemTime::now());
        for latency in [800, 2_000, 7_000] {
            book.record(&event(Syscall::Unlink, 0, latency), &identity(Role::Other, None));
        }
        let (_, s) = book.series().next().unwrap();
        // Microseconds: 4,096 counts (32 KB), not the 33,792 an hour takes.
        assert!(s.total.distinct_values() <= 4_096, "{}", s.total.distinct_values());
        assert_eq!(s.total.max(), s.total.highest_equivalent(7_000));
        assert!(new_histogram().distinct_values() <= 2_048);
        let mut full = new_histogram();
        record_clamped(&mut full, u64::MAX, 3);
        record_clamped(&mut full, 0, 1);
        assert_eq!(full.len(), 4);
        assert!(full.max() >= MAX_LATENCY_NS - MAX_LATENCY_NS / 1000);
        assert!(full.distinct_values() <= 33_792, "{}", full.distinct_values());
    }

    #[test]
    fn the_always_on_book_keeps_two_digits_and_no_interval() {
        let mut book = LatencyBook::node_wide(SystemTime::now());
        book.record(&event(Syscall::Umount2, 0, 10 * MAX_LATENCY_NS), &identity(Role::Runtime, None));
        book.record(&event(Syscall::Umount2, 0, 900), &identity(Role::Runtime, None));
        let (_, s) = book.series().next().unwrap();
        assert_eq!(s.total.sigfig(), ALWAYS_ON_SIGNIFICANT_DIGITS);
        assert!(s.interval.is_none());
        // From a nanosecond to an hour: 4,608 counts (36 KB), not 33,792.
        assert!(s.total.distinct_values() <= 4_608, "{}", s.total.distinct_values());
        assert_eq!(s.total.len(), 2);
        assert!(book.close_interval(SystemTime::now()).histograms.is_empty());
        let incident = LatencyBook::new(SystemTime::now());
        assert_eq!(incident.digits, SIGNIFICANT_DIGITS);
    }

    #[test]
    fn a_followed_pods_series_keeps_counts_and_its_calls_are_the_nodes() {
        let t0 = SystemTime::now();
        let mut book = LatencyBook::node_wide(t0);
        let pod = PodUid::parse(&pod_uid(1)).unwrap();
        book.follow([], [&pod], t0);
        for latency in [2_000, 3_000_000_000] {
            book.record(&event(Syscall::Rmdir, -16, latency), &identity(Role::Kubelet, Some(pod.as_str())));
        }
        let of = |book: &LatencyBook, pod: Option<&PodUid>| {
            book.series().find(|(k, _)| k.pod.as_ref() == pod).map(|(_, s)| s.clone()).unwrap()
        };
        let (mine, node) = (of(&book, Some(&pod)), of(&book, None));
        assert!(mine.counts_only && !node.counts_only);
        assert_eq!((mine.count, mine.sum_ns), (2, 3_000_002_000));
        assert!(mine.total.is_empty() && mine.total.distinct_values() <= 64, "{}", mine.total.distinct_values());
        assert_eq!((node.count, node.total.len()), (2, 2), "every call in the node's series");
        // Its linger over, the pod's counts go; the node keeps its calls once.
        book.follow([], [], t0);
        book.follow([], [], t0 + POD_SERIES_LINGER);
        assert_eq!(book.series().count(), 1);
        assert_eq!(of(&book, None).count, 2);
        // An incident book keeps a pod's own histograms, as its files show them.
        let mut incident = LatencyBook::new(t0);
        incident.record(&event(Syscall::Rmdir, -16, 2_000), &identity(Role::Kubelet, Some(pod.as_str())));
        assert!(incident.series().all(|(k, s)| k.pod.is_some() && !s.counts_only && s.total.len() == 1));
    }

    #[test]
    fn two_digits_put_every_kernel_bucket_in_its_prometheus_bucket() {
        // The always-on book is read as /metrics' buckets: each kernel
        // bucket's calls, recorded at its middle, must count below exactly
        // the bounds its middle is below.
        for bucket in 0..podstuck_common::LATENCY_BUCKETS {
            let middle = bucket_middle(bucket);
            if middle > MAX_LATENCY_NS {
                break;
            }
            let mut h = histogram_of(ALWAYS_ON_SIGNIFICANT_DIGITS);
            record_clamped(&mut h, middle, 1);
            for bound in crate::export::prom::BUCKETS_S {
                let bound_ns = (bound * 1e9) as u64;
                assert_eq!(h.count_between(0, bound_ns) == 1, middle <= bound_ns, "{middle} ns against {bound} s");
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, failure_persistence: None, ..Default::default() })]

        /// Whatever calls come, every one is counted, exactly once, and the
        /// book stays within its caps.
        #[test]
        fn every_call_is_counted_within_the_caps(calls in proptest::collection::vec((0usize..600, 0usize..4, 0i64..40, 1u64..10_000_000, 1u64..50), 1..400)) {
            let mut book = LatencyBook::new(SystemTime::now());
            let mut total = 0;
            for (pod, syscall, errno, latency, count) in calls {
                let key = SeriesKey {
                    syscall: Syscall::ALL[syscall],
                    outcome: if errno == 0 { "ok".into() } else { errno_name(errno as i32) },
                    role: Role::Kubelet,
                    pod: (pod > 0).then(|| PodUid::parse(&pod_uid(pod)).unwrap()),
                };
                book.add(key, SystemTime::now(), count, latency * count, &[(podstuck_common::latency_bucket(latency), count)]);
                total += count;
            }
            proptest::prop_assert_eq!(book.series().map(|(_, s)| s.count).sum::<u64>(), total);
            proptest::prop_assert_eq!(book.series().map(|(_, s)| s.total.len()).sum::<u64>(), total);
            proptest::prop_assert!(book.series().count() <= MAX_SERIES + MAX_OTHER_SERIES);
            let pods: BTreeSet<_> = book.series().filter(|(k, _)| !k.is_other()).filter_map(|(k, _)| k.pod.clone()).collect();
            proptest::prop_assert!(pods.len() <= MAX_PODS);
        }
    }

    #[test]
    fn an_hour_long_call_is_kept_at_the_top() {
        let mut book = LatencyBook::new(SystemTime::now());
        book.record(&event(Syscall::Umount2, 0, 10 * MAX_LATENCY_NS), &identity(Role::Runtime, None));
        let (_, s) = book.series().next().unwrap();
        assert_eq!(s.count, 1);
        assert!(s.total.max() >= MAX_LATENCY_NS - MAX_LATENCY_NS / 1000);
    }
}
