//! Diagnose: recognises the pathologies of docs/pathologies.md in the stream of
//! identified calls, confirms each against node state read at that moment,
//! and says it as a [`Finding`]: the cause in plain words, the evidence, and
//! the exact command that fixes it (printed, never run).
//!
//! Pure: it takes calls, calls still in flight, a clock and a
//! [`NodeInspector`], and returns findings, so every detector is tested on
//! synthetic streams with a fake node. One detector per pathology, one file
//! each. A finding is emitted once and then updated as evidence grows
//! ([`Diagnoser::review`] decides when a change is worth a new revision).

pub mod block_volume_held;
pub mod cgroup_busy;
pub mod consequences;
pub mod dir_not_empty;
pub mod disk_full;
pub mod hung_call;
pub mod immutable_file;
pub mod mount_held;
pub mod no_teardown_seen;
pub mod not_mounted;
pub mod removal_storm;
pub mod rhythm;
pub mod sandbox_teardown_failing;
pub mod shell;
pub mod signalled;
pub mod sigterm_ignored;
pub mod subpath_left;
pub mod track;
pub mod unkillable_task;
pub mod volume_still_mounted;
pub mod wording;

#[cfg(test)]
pub(crate) mod fake;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use podstuck_common::Syscall;
use serde::Serialize;

use crate::event::{CallEvent, Flight};
use crate::identify::pod::PodUid;
use crate::identify::{Actor, Identity};
use crate::inspect::NodeInspector;
use crate::lifecycle::{LifecycleEvent, LifecycleIdentity};
pub use crate::words::human_duration;

/// The stable name of a pathology, as in docs/pathologies.md: what users grep
/// and alert on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// P1.
    VolumeStillMounted,
    /// P2.
    RemovalStorm,
    /// P3.
    ImmutableFile,
    /// P3's near miss: EPERM for another reason (a sticky directory, a
    /// security module), explained as such.
    PermissionDenied,
    /// P4.
    MountHeld,
    /// P5.
    CgroupBusy,
    /// P6.
    HungCall,
    /// P7.
    NotMounted,
    /// P8.
    DirNotEmpty,
    /// P9, ENOSPC or EDQUOT.
    DiskFull,
    /// P9, EROFS.
    ReadOnlyFs,
    /// P10.
    SubpathLeft,
    /// P11, read from the Kubernetes API: a finalizer no controller removes.
    FinalizerPending,
    /// P11: the pod's node is NotReady or unreachable, so its kubelet never
    /// reports the pod gone.
    NodeNotReady,
    /// P11: a VolumeAttachment of the pod's volumes that does not detach.
    VolumeDetachStuck,
    /// P11: kubelet's Warning events about the pod, quoted.
    KubeletWarning,
    /// P11: the pod's grace period ended long ago (the symptom, and since when).
    GracePeriodPast,
    /// P12: the CNI plugin's DEL fails, so the sandbox's network (and the
    /// sandbox) is never torn down.
    SandboxTeardownFailing,
    /// P13: a container's main process got SIGTERM and did not exit.
    SigtermIgnored,
    /// P14: SIGKILL sent, and the task is still there.
    UnkillableTask,
    /// P15: nothing on the node has worked on the pod's teardown for a while.
    NoTeardownSeen,
    /// P16: a raw block volume's mapping is busy: its loop device (or the
    /// device file) is still in use.
    BlockVolumeHeld,
}

impl Kind {
    pub fn id(self) -> &'static str {
        match self {
            Kind::VolumeStillMounted => "volume-still-mounted",
            Kind::RemovalStorm => "removal-storm",
            Kind::ImmutableFile => "immutable-file",
            Kind::PermissionDenied => "permission-denied",
            Kind::MountHeld => "mount-held",
            Kind::CgroupBusy => "cgroup-busy",
            Kind::HungCall => "hung-call",
            Kind::NotMounted => "not-mounted",
            Kind::DirNotEmpty => "dir-not-empty",
            Kind::DiskFull => "disk-full",
            Kind::ReadOnlyFs => "read-only-fs",
            Kind::SubpathLeft => "subpath-left",
            Kind::FinalizerPending => "finalizer-pending",
            Kind::NodeNotReady => "node-not-ready",
            Kind::VolumeDetachStuck => "volume-detach-stuck",
            Kind::KubeletWarning => "kubelet-warning",
            Kind::GracePeriodPast => "grace-period-past",
            Kind::SandboxTeardownFailing => "sandbox-teardown-failing",
            Kind::SigtermIgnored => "sigterm-ignored",
            Kind::UnkillableTask => "unkillable-task",
            Kind::NoTeardownSeen => "no-teardown-seen",
            Kind::BlockVolumeHeld => "block-volume-held",
        }
    }
}

/// How much a finding matters to the pod's deletion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    Info,
    /// Slows teardown or hurts the node, may not block on its own.
    Warning,
    /// Blocks a pod's deletion until someone acts.
    Critical,
}

impl Severity {
    /// The name used in output, same as the JSON form.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

/// How sure podstuck is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Confidence {
    /// The calls fit, node state could not be read or no longer agrees.
    Possible,
    /// The calls fit and nothing read contradicts it.
    Likely,
    /// Node state read now shows the cause.
    Confirmed,
}

impl Confidence {
    /// The name used in output, same as the JSON form.
    pub fn as_str(self) -> &'static str {
        match self {
            Confidence::Confirmed => "confirmed",
            Confidence::Likely => "likely",
            Confidence::Possible => "possible",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Still happening.
    Active,
    /// The blocked call succeeded, or the hung call returned, or the storm ended.
    Resolved,
}

/// One fact behind a finding and where it was read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Evidence {
    /// "trace", "mountinfo", "/proc/123/stack", "FS_IOC_GETFLAGS", "statfs"...
    pub source: String,
    pub fact: String,
}

impl Evidence {
    pub fn new(source: impl Into<String>, fact: impl Into<String>) -> Evidence {
        Evidence { source: source.into(), fact: fact.into() }
    }
}

/// Who made the calls a finding is about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FindingActor {
    pub pid: u32,
    pub comm: String,
    pub parent: String,
    pub role: &'static str,
    pub description: String,
}

impl FindingActor {
    pub fn of(pid: u32, actor: &Actor) -> FindingActor {
        FindingActor {
            pid,
            comm: actor.comm.clone(),
            parent: actor.parent.clone(),
            role: actor.role.as_str(),
            description: actor.description.clone(),
        }
    }
}

/// What podstuck concluded, with its evidence and the fix.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    /// Stable across revisions: kind and the key path (or actor).
    pub id: String,
    pub kind: Kind,
    pub severity: Severity,
    pub status: Status,
    pub confidence: Confidence,
    /// The cause, in one paragraph of plain words.
    pub summary: String,
    pub pod_uid: Option<PodUid>,
    /// Every pod concerned (a full disk hits them all).
    pub pods: Vec<PodUid>,
    pub actor: Option<FindingActor>,
    pub syscall: Option<&'static str>,
    pub errno: Option<String>,
    /// The key path first.
    #[serde(serialize_with = "serialize_paths")]
    pub paths: Vec<Vec<u8>>,
    pub evidence: Vec<Evidence>,
    /// The retry rhythm recognised, if any.
    pub rhythm: Option<String>,
    /// The exact command that fixes it; podstuck never runs it.
    pub fix: String,
    /// What else to do or know.
    pub advice: Vec<String>,
    #[serde(serialize_with = "serialize_time")]
    pub first_seen: SystemTime,
    #[serde(serialize_with = "serialize_time")]
    pub last_seen: SystemTime,
    /// Calls behind it (failures, removals, hung calls).
    pub count: u64,
    /// 1 for the first emission, then one more per update.
    pub revision: u32,
    /// Kind-specific numbers (a storm's rate, a hang's duration...).
    pub details: BTreeMap<String, serde_json::Value>,
}

fn serialize_paths<S: serde::Serializer>(paths: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(paths.iter().map(|p| String::from_utf8_lossy(p).into_owned()))
}

fn serialize_time<S: serde::Serializer>(time: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::words::rfc3339(*time))
}

impl Finding {
    /// A finding with its identity set and everything else empty.
    pub fn new(kind: Kind, key: &str, severity: Severity, first_seen: SystemTime) -> Finding {
        Finding {
            id: format!("{}:{key}", kind.id()),
            kind,
            severity,
            status: Status::Active,
            confidence: Confidence::Likely,
            summary: String::new(),
            pod_uid: None,
            pods: Vec::new(),
            actor: None,
            syscall: None,
            errno: None,
            paths: Vec::new(),
            evidence: Vec::new(),
            rhythm: None,
            fix: String::new(),
            advice: Vec::new(),
            first_seen,
            last_seen: first_seen,
            count: 0,
            revision: 0,
            details: BTreeMap::new(),
        }
    }

    pub fn evidence(&mut self, source: impl Into<String>, fact: impl Into<String>) {
        self.evidence.push(Evidence::new(source, fact));
    }

    pub fn detail(&mut self, key: &str, value: impl Into<serde_json::Value>) {
        self.details.insert(key.to_string(), value.into());
    }

    /// What changed in a way worth telling at once (not just the count).
    fn differs_materially(&self, other: &Finding) -> bool {
        self.status != other.status
            || self.confidence != other.confidence
            || self.severity != other.severity
            || self.fix != other.fix
            || self.evidence.len() != other.evidence.len()
    }
}

/// A call that entered and has not returned: the kernel's in-flight entry
/// as user space read it ([`Flight`]), with who made it and on what.
#[derive(Clone, Debug)]
pub struct CallInFlight {
    pub flight: Flight,
    /// The absolute path, when the argument could be read from the
    /// caller's memory and, if relative, based on its directory.
    pub path: Option<Vec<u8>>,
    pub pod_uid: Option<PodUid>,
    pub actor: Actor,
}

/// What a review may use besides the calls observed.
pub struct Review<'a> {
    pub now: SystemTime,
    pub in_flight: &'a [CallInFlight],
    pub node: &'a mut dyn NodeInspector,
}

/// Settings a user may change.
#[derive(Clone, Debug)]
pub struct DiagnoseOptions {
    /// A call in flight longer than this is hung (`--hung-after`).
    pub hung_after: Duration,
    /// The node's name, for `kubectl drain <node>`.
    pub node_name: String,
    /// podstuck's own mount namespace (the host's), to tell a caller in
    /// another namespace.
    pub host_mntns: u32,
    /// podstuck runs in a container: fixes are printed to act in the
    /// node's mount namespace (`nsenter -t 1 -m -- ...`).
    pub in_container: bool,
    /// The pods `--pod` follows (empty: the whole node), whose teardown
    /// podstuck says it does not see anyone working on.
    pub pods: Vec<PodUid>,
}

impl Default for DiagnoseOptions {
    fn default() -> DiagnoseOptions {
        DiagnoseOptions {
            hung_after: Duration::from_secs(5),
            node_name: "<node>".into(),
            host_mntns: 0,
            in_container: false,
            pods: Vec::new(),
        }
    }
}

/// Calls the kernel counted for one process, one syscall and one outcome
/// since the last read, streamed or not (a storm is mostly counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CountedCalls {
    pub pid: u32,
    pub syscall: Syscall,
    /// 0 for success; `u16::MAX` for a failure whose errno is unknown.
    pub errno: u16,
    pub count: u64,
}

/// One pathology's recogniser.
pub trait Detector {
    /// Sees what the kernel counted since the last read, before a review.
    /// Only detectors that count need it.
    fn counted(&mut self, _counts: &[CountedCalls]) {}
    /// Sees every completed call in scope, in order. Must be cheap: a
    /// removal storm sends hundreds of thousands per second.
    fn observe(&mut self, event: &CallEvent, identity: &Identity);
    /// Sees every lifecycle event in scope (an exec of a CNI plugin, a
    /// SIGTERM or SIGKILL, an exit of a process either named), in order.
    fn lifecycle(&mut self, _event: &LifecycleEvent, _identity: &LifecycleIdentity) {}
    /// When the grace period of each pod the API was read for ends (its
    /// `deletionTimestamp`), as of now: told before each review.
    fn grace_ends(&mut self, _ends: &BTreeMap<PodUid, SystemTime>) {}
    /// Told before the run's last review: what it returns is the last word.
    fn closing(&mut self) {}
    /// Decides, confirms against the node, and returns the current state of
    /// every finding it holds (active or just resolved).
    fn review(&mut self, review: &mut Review<'_>) -> Vec<Finding>;
}

/// A finding to print: new, or a new revision of one printed before.
#[derive(Clone, Debug, PartialEq)]
pub enum Report {
    New(Finding),
    Update(Finding),
}

impl Report {
    pub fn finding(&self) -> &Finding {
        match self {
            Report::New(f) | Report::Update(f) => f,
        }
    }
}

/// Count-only changes are told at most this often.
const UPDATE_EVERY: Duration = Duration::from_secs(10);

struct Shown {
    /// The latest state.
    finding: Finding,
    /// The state last told, which changes are measured against.
    last_told: Finding,
    /// Whether the latest state has been told.
    told: bool,
    told_at: SystemTime,
    /// The finding it was told under, once folded as its consequence.
    under: Option<String>,
}

/// How long a consequence may outlive the finding it was told under and
/// still be that cause's tail: a teardown's last retries of a directory
/// run a review or two after its held mount is gone. Past this, it is a
/// cause of its own and told as one.
const CONSEQUENCE_OUTLIVES: Duration = Duration::from_secs(10);

/// Findings remembered at most; past this the longest resolved are
/// forgotten first (active ones are bounded by their detectors).
pub const MAX_FINDINGS_KEPT: usize = 2048;

/// All detectors, and what has been told of their findings.
pub struct Diagnoser {
    detectors: Vec<Box<dyn Detector>>,
    shown: BTreeMap<String, Shown>,
    /// Consequences folded before they were ever told, by id: the root
    /// each went under. Without it, one that outlives its root by a review
    /// would be told as a cause of its own a moment after the fix.
    folded_untold: BTreeMap<String, String>,
    in_container: bool,
    /// The always-on run forgets a resolved finding this long after its end
    /// was told; an incident run keeps them for its closing summary.
    forget_resolved_after: Option<Duration>,
}

impl Diagnoser {
    pub fn new(options: &DiagnoseOptions) -> Diagnoser {
        let detectors: Vec<Box<dyn Detector>> = vec![
            Box::new(volume_still_mounted::VolumeStillMounted::default()),
            Box::new(removal_storm::RemovalStorm::new(options.node_name.clone())),
            Box::new(immutable_file::ImmutableFile::default()),
            Box::new(mount_held::MountHeld::default()),
            Box::new(block_volume_held::BlockVolumeHeld::default()),
            Box::new(cgroup_busy::CgroupBusy::default()),
            Box::new(hung_call::HungCall::new(options.hung_after)),
            Box::new(not_mounted::NotMounted::default()),
            Box::new(dir_not_empty::DirNotEmpty::default()),
            Box::new(disk_full::DiskFull::default()),
            Box::new(subpath_left::SubpathLeft::default()),
            Box::new(sandbox_teardown_failing::SandboxTeardownFailing::new(options.node_name.clone())),
            Box::new(sigterm_ignored::SigtermIgnored::default()),
            Box::new(unkillable_task::UnkillableTask::default()),
            Box::new(no_teardown_seen::NoTeardownSeen::new(options.pods.clone())),
        ];
        Diagnoser {
            detectors,
            shown: BTreeMap::new(),
            folded_untold: BTreeMap::new(),
            in_container: options.in_container,
            forget_resolved_after: None,
        }
    }

    /// Resolved findings are forgotten `after` their end was told: a run of
    /// weeks must not keep every finding it ever told.
    pub fn forget_resolved_after(&mut self, after: Duration) {
        self.forget_resolved_after = Some(after);
    }

    /// Forgets what [`Diagnoser::forget_resolved_after`] and
    /// [`MAX_FINDINGS_KEPT`] say; never a finding whose end is not told yet.
    fn forget(&mut self, now: SystemTime) {
        // A consequence never told is remembered while its root's tail lasts.
        let shown = &self.shown;
        self.folded_untold.retain(|_, root| shown.get(root).is_some_and(|r| Self::still_tailed(r, now)));
        let done = |s: &Shown| s.told && s.finding.status == Status::Resolved;
        if let Some(after) = self.forget_resolved_after {
            self.shown.retain(|_, s| !(done(s) && now.duration_since(s.told_at).unwrap_or_default() >= after));
        }
        if self.shown.len() > MAX_FINDINGS_KEPT {
            let mut resolved: Vec<(SystemTime, String)> =
                self.shown.iter().filter(|(_, s)| done(s)).map(|(id, s)| (s.told_at, id.clone())).collect();
            resolved.sort();
            for (_, id) in resolved.into_iter().take(self.shown.len() - MAX_FINDINGS_KEPT) {
                self.shown.remove(&id);
            }
        }
    }

    /// Adds detectors that see no call but bring findings from elsewhere
    /// (the Kubernetes API): `first` before every kernel detector, `last`
    /// after them, so a review tells their findings in that order.
    pub fn join(&mut self, first: Box<dyn Detector>, last: Box<dyn Detector>) {
        self.detectors.insert(0, first);
        self.detectors.push(last);
    }

    pub fn observe(&mut self, event: &CallEvent, identity: &Identity) {
        for detector in &mut self.detectors {
            detector.observe(event, identity);
        }
    }

    pub fn lifecycle(&mut self, event: &LifecycleEvent, identity: &LifecycleIdentity) {
        for detector in &mut self.detectors {
            detector.lifecycle(event, identity);
        }
    }

    /// When the pods' grace periods end, as the API says: for the
    /// detectors that judge a shutdown against it.
    pub fn grace_ends(&mut self, ends: &BTreeMap<PodUid, SystemTime>) {
        for detector in &mut self.detectors {
            detector.grace_ends(ends);
        }
    }

    /// The next review is the run's last.
    pub fn closing(&mut self) {
        for detector in &mut self.detectors {
            detector.closing();
        }
    }

    /// Hands every detector what the kernel counted since the last read.
    pub fn counted(&mut self, counts: &[CountedCalls]) {
        for detector in &mut self.detectors {
            detector.counted(counts);
        }
    }

    /// Runs every detector and returns what is new or changed enough to tell.
    pub fn review(&mut self, review: &mut Review<'_>) -> Vec<Report> {
        let mut reports = Vec::new();
        let mut current: Vec<Finding> = self.detectors.iter_mut().flat_map(|d| d.review(review)).collect();
        if self.in_container {
            current.iter_mut().for_each(shell::from_a_container);
        }
        current.iter_mut().for_each(wording::settle);
        for (id, root) in consequences::fold(&mut current) {
            if !self.shown.contains_key(&id) {
                self.folded_untold.insert(id, root);
                continue;
            }
            // Told on its own before its root cause was known: say where it went.
            if let Some(shown) = self.shown.get_mut(&id).filter(|s| s.last_told.status == Status::Active) {
                let mut finding = shown.finding.clone();
                finding.status = Status::Resolved;
                finding.revision += 1;
                // Not over, only told elsewhere: its words say where, and the fix is the root's.
                finding.summary = format!(
                    "Told under {root} from now on, as a consequence of it. Seen before that: \"{}\"",
                    finding.summary.trim_end()
                );
                finding.fix.clear();
                finding.advice.clear();
                finding.evidence("consequence", format!("a consequence of {root}, told under it"));
                shown.finding = finding.clone();
                shown.last_told = finding.clone();
                shown.told = true;
                shown.told_at = review.now;
                shown.under = Some(root);
                reports.push(Report::Update(finding));
            }
        }
        for mut finding in current {
            if self.tail_of_its_root(&finding.id, review.now) {
                continue;
            }
            match self.shown.get_mut(&finding.id) {
                None => {
                    // Nothing is told of a finding that ended before it was ever shown.
                    if finding.status == Status::Resolved {
                        continue;
                    }
                    finding.revision = 1;
                    let shown = Shown {
                        finding: finding.clone(),
                        last_told: finding.clone(),
                        told: true,
                        told_at: review.now,
                        under: None,
                    };
                    self.shown.insert(finding.id.clone(), shown);
                    reports.push(Report::New(finding));
                }
                Some(shown) => {
                    if shown.last_told.status == Status::Resolved && finding.status == Status::Resolved {
                        continue;
                    }
                    let material = finding.differs_materially(&shown.last_told);
                    let counted = finding.count != shown.last_told.count || finding.details != shown.last_told.details;
                    let due = review.now.duration_since(shown.told_at).unwrap_or_default() >= UPDATE_EVERY;
                    finding.revision = shown.finding.revision;
                    if material || (counted && due) {
                        finding.revision += 1;
                        shown.told_at = review.now;
                        shown.told = true;
                        shown.finding = finding.clone();
                        shown.last_told = finding.clone();
                        reports.push(Report::Update(finding));
                    } else if finding != shown.finding {
                        // Kept current for the closing summary, told later.
                        shown.finding = finding;
                        shown.told = false;
                    }
                }
            }
        }
        self.forget(review.now);
        reports
    }

    /// Whether finding `id`, told under another as its consequence, is
    /// still only that cause's tail: its root is still active (and this
    /// review did not fold it only because the two moved apart a little),
    /// or ended less than [`CONSEQUENCE_OUTLIVES`] ago. Told again, it
    /// would read as a second cause a moment after the first was fixed.
    fn tail_of_its_root(&self, id: &str, now: SystemTime) -> bool {
        let root = self.shown.get(id).and_then(|s| s.under.as_ref()).or_else(|| self.folded_untold.get(id));
        root.and_then(|r| self.shown.get(r)).is_some_and(|root| Self::still_tailed(root, now))
    }

    /// Whether a consequence of `root` is still only its tail.
    fn still_tailed(root: &Shown, now: SystemTime) -> bool {
        root.last_told.status == Status::Active
            || now.duration_since(root.told_at).unwrap_or_default() < CONSEQUENCE_OUTLIVES
    }

    /// The latest state of every finding that changed since it was last
    /// told (counts moving between updates): said once more at exit.
    pub fn untold(&mut self) -> Vec<Report> {
        let mut reports = Vec::new();
        for shown in self.shown.values_mut().filter(|s| !s.told) {
            shown.finding.revision += 1;
            shown.told = true;
            shown.last_told = shown.finding.clone();
            reports.push(Report::Update(shown.finding.clone()));
        }
        reports
    }

    /// Every finding told so far, in its latest state, most severe first.
    pub fn findings(&self) -> Vec<&Finding> {
        let mut all: Vec<&Finding> = self.shown.values().map(|s| &s.finding).collect();
        all.sort_by(|a, b| {
            (b.status == Status::Active, b.severity)
                .cmp(&(a.status == Status::Active, a.severity))
                .then(a.first_seen.cmp(&b.first_seen))
        });
        all
    }
}

/// rmdir(2), or unlinkat(2) with AT_REMOVEDIR: removing a directory.
pub fn removes_dir(event: &CallEvent) -> bool {
    match event.syscall {
        Syscall::Rmdir => true,
        Syscall::Unlinkat => event.flags & libc::AT_REMOVEDIR as u64 != 0,
        _ => false,
    }
}

/// Any of the removal calls (not umount2).
pub fn removes(event: &CallEvent) -> bool {
    event.syscall != Syscall::Umount2
}

/// umount2 without MNT_DETACH: a call that can be refused as busy.
pub fn unmounts(event: &CallEvent) -> bool {
    event.syscall == Syscall::Umount2
}

/// A path for a sentence.
pub fn shown(path: &[u8]) -> String {
    crate::words::escape_path(path)
}

#[cfg(test)]
mod tests {
    use super::fake::{t, FakeNode};
    use super::*;

    /// Returns, at each review, whatever the test put in `next`.
    struct Scripted {
        next: std::rc::Rc<std::cell::RefCell<Vec<Finding>>>,
    }

    impl Detector for Scripted {
        fn observe(&mut self, _: &CallEvent, _: &Identity) {}
        fn review(&mut self, _: &mut Review<'_>) -> Vec<Finding> {
            self.next.borrow().clone()
        }
    }

    fn scripted(next: &std::rc::Rc<std::cell::RefCell<Vec<Finding>>>) -> Diagnoser {
        Diagnoser {
            detectors: vec![Box::new(Scripted { next: next.clone() })],
            shown: BTreeMap::new(),
            folded_untold: BTreeMap::new(),
            in_container: false,
            forget_resolved_after: None,
        }
    }

    fn finding(count: u64, confidence: Confidence, status: Status) -> Finding {
        let mut f = Finding::new(Kind::MountHeld, "/x", Severity::Critical, t(0.0));
        f.count = count;
        f.confidence = confidence;
        f.status = status;
        f
    }

    #[test]
    fn a_finding_is_told_once_then_updated_on_change_or_every_ten_seconds() {
        let next = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let mut d = scripted(&next);
        let mut node = FakeNode::default();
        let mut at =
            |d: &mut Diagnoser, secs: f64| d.review(&mut Review { now: t(secs), in_flight: &[], node: &mut node });
        // Resolved before ever told: nothing.
        *next.borrow_mut() = vec![finding(1, Confidence::Likely, Status::Resolved)];
        assert!(at(&mut d, 0.0).is_empty());
        *next.borrow_mut() = vec![finding(2, Confidence::Likely, Status::Active)];
        let first = at(&mut d, 1.0);
        assert!(matches!(&first[..], [Report::New(f)] if f.revision == 1));
        // Same state again: silence. Count moves: held back, told after 10 s.
        assert!(at(&mut d, 2.0).is_empty());
        *next.borrow_mut() = vec![finding(3, Confidence::Likely, Status::Active)];
        assert!(at(&mut d, 3.0).is_empty());
        let later = at(&mut d, 11.5);
        assert!(matches!(&later[..], [Report::Update(f)] if f.revision == 2 && f.count == 3));
        // A material change is told at once.
        *next.borrow_mut() = vec![finding(4, Confidence::Confirmed, Status::Active)];
        assert!(matches!(&at(&mut d, 12.0)[..], [Report::Update(f)] if f.revision == 3));
        // A held-back count is said at exit.
        *next.borrow_mut() = vec![finding(5, Confidence::Confirmed, Status::Active)];
        assert!(at(&mut d, 13.0).is_empty());
        assert!(matches!(&d.untold()[..], [Report::Update(f)] if f.count == 5 && f.revision == 4));
        assert!(d.untold().is_empty());
        *next.borrow_mut() = vec![finding(5, Confidence::Confirmed, Status::Resolved)];
        assert!(matches!(&at(&mut d, 14.0)[..], [Report::Update(f)] if f.status == Status::Resolved));
        assert!(at(&mut d, 15.0).is_empty());
        assert_eq!(d.findings().len(), 1);
    }

    #[test]
    fn every_finding_told_is_settled_severity_within_confidence_and_no_fix_once_over() {
        let next = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let mut d = scripted(&next);
        let mut node = FakeNode::default();
        let mut at =
            |d: &mut Diagnoser, secs: f64| d.review(&mut Review { now: t(secs), in_flight: &[], node: &mut node });
        let mut unsure = finding(2, Confidence::Possible, Status::Active);
        unsure.fix = "umount /x".into();
        unsure.summary = "umount of /x is refused with EBUSY".into();
        *next.borrow_mut() = vec![unsure.clone()];
        let told = at(&mut d, 1.0);
        assert!(
            matches!(&told[..], [Report::New(f)] if f.severity == Severity::Warning && f.fix == "umount /x"),
            "{told:?}"
        );
        unsure.status = Status::Resolved;
        *next.borrow_mut() = vec![unsure];
        let over = at(&mut d, 2.0);
        let [Report::Update(f)] = &over[..] else { panic!("{over:?}") };
        assert!(f.fix.is_empty() && f.severity == Severity::Warning, "{f:?}");
        assert!(
            f.summary.starts_with("A mount was held busy and its unmount refused from ")
                && f.summary.ends_with("\"umount of /x is refused with EBUSY\""),
            "{}",
            f.summary
        );
        assert_eq!(d.findings()[0].summary, f.summary, "the closing summary has the same words");
    }

    #[test]
    fn a_finding_folded_under_its_root_cause_says_where_it_went_and_drops_its_fix() {
        let next = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let mut d = scripted(&next);
        let mut node = FakeNode::default();
        let mut at =
            |d: &mut Diagnoser, secs: f64| d.review(&mut Review { now: t(secs), in_flight: &[], node: &mut node });
        let actor = FindingActor {
            pid: 7,
            comm: "csi".into(),
            parent: "kubelet".into(),
            role: "csi-plugin",
            description: "csi".into(),
        };
        let mut retry = Finding::new(Kind::NotMounted, "/v", Severity::Warning, t(0.0));
        retry.actor = Some(actor.clone());
        retry.summary = "csi unmounts /v, which is not mounted".into();
        retry.fix = "rmdir /v".into();
        *next.borrow_mut() = vec![retry.clone()];
        assert!(matches!(&at(&mut d, 1.0)[..], [Report::New(f)] if f.fix == "rmdir /v"));
        let mut root = finding(3, Confidence::Confirmed, Status::Active);
        root.actor = Some(actor);
        *next.borrow_mut() = vec![retry, root.clone()];
        let told = at(&mut d, 2.0);
        let folded =
            told.iter().map(Report::finding).find(|f| f.kind == Kind::NotMounted).expect("the folded finding is told");
        assert_eq!(folded.status, Status::Resolved);
        assert_eq!(folded.summary, format!("Told under {} from now on, as a consequence of it. Seen before that: \"csi unmounts /v, which is not mounted\"", root.id));
        assert!(folded.fix.is_empty(), "{folded:?}");
        // The root is fixed and ends; its consequence lingers one review
        // (a runtime's last retry), then ends too: nothing more is told of it.
        let mut ended = root.clone();
        ended.status = Status::Resolved;
        let mut retry_lingers = told.iter().map(Report::finding).find(|f| f.kind == Kind::NotMounted).unwrap().clone();
        retry_lingers.status = Status::Active;
        retry_lingers.summary = "csi unmounts /v, which is not mounted".into();
        *next.borrow_mut() = vec![retry_lingers.clone(), ended.clone()];
        let after_fix = at(&mut d, 3.0);
        assert!(after_fix.iter().all(|r| r.finding().kind != Kind::NotMounted), "{after_fix:?}");
        let mut retry_ends = retry_lingers.clone();
        retry_ends.status = Status::Resolved;
        *next.borrow_mut() = vec![retry_ends, ended.clone()];
        assert!(at(&mut d, 4.0).is_empty());
        // One that goes on failing long after its root ended is a cause of its own.
        *next.borrow_mut() = vec![retry_lingers, ended];
        assert!(at(&mut d, 9.0).is_empty(), "still within the tail");
        let own = at(&mut d, 14.0);
        assert!(
            matches!(&own[..], [Report::Update(f)] if f.kind == Kind::NotMounted && f.status == Status::Active),
            "{own:?}"
        );
    }

    #[test]
    fn a_consequence_folded_before_it_was_ever_told_stays_under_its_root_after_the_fix() {
        // podman's removal of a container's layer directory: ENOTEMPTY for
        // as long as the held `merged` inside it; the hold is fixed, and its
        // last retries run a review or two after the mount-held finding ends.
        let next = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let mut d = scripted(&next);
        let mut node = FakeNode::default();
        let mut at =
            |d: &mut Diagnoser, secs: f64| d.review(&mut Review { now: t(secs), in_flight: &[], node: &mut node });
        let mut root = Finding::new(Kind::MountHeld, "/store/overlay/l1/merged", Severity::Critical, t(0.0));
        root.paths = vec![b"/store/overlay/l1/merged".to_vec()];
        let mut layer = Finding::new(Kind::DirNotEmpty, "/store/overlay/l1", Severity::Critical, t(0.0));
        layer.paths = vec![b"/store/overlay/l1".to_vec()];
        *next.borrow_mut() = vec![root.clone(), layer.clone()];
        let told = at(&mut d, 1.0);
        assert!(matches!(&told[..], [Report::New(f)] if f.kind == Kind::MountHeld), "{told:?}");
        let mut ended = root.clone();
        ended.status = Status::Resolved;
        *next.borrow_mut() = vec![ended.clone(), layer.clone()];
        let after_fix = at(&mut d, 2.0);
        assert!(after_fix.iter().all(|r| r.finding().kind != Kind::DirNotEmpty), "{after_fix:?}");
        assert!(at(&mut d, 9.0).iter().all(|r| r.finding().kind != Kind::DirNotEmpty), "still within the tail");
        // Failing long after its root ended, it is a cause of its own.
        let own = at(&mut d, 14.0);
        assert!(
            matches!(&own[..], [Report::New(f)] if f.kind == Kind::DirNotEmpty && f.status == Status::Active),
            "{own:?}"
        );
        assert!(d.folded_untold.is_empty(), "nothing kept past the tail");
    }

    #[test]
    fn resolved_findings_are_forgotten_when_asked_and_past_the_cap() {
        let next = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let mut d = scripted(&next);
        d.forget_resolved_after(Duration::from_secs(600));
        let mut node = FakeNode::default();
        let mut at =
            |d: &mut Diagnoser, secs: f64| d.review(&mut Review { now: t(secs), in_flight: &[], node: &mut node });
        let numbered = |n: usize, status| {
            let mut f = finding(1, Confidence::Likely, status);
            f.id = format!("f{n}");
            f
        };
        // Many findings come and go, as pods churn; one stays.
        *next.borrow_mut() = (0..MAX_FINDINGS_KEPT + 100).map(|n| numbered(n, Status::Active)).collect();
        assert_eq!(at(&mut d, 0.0).len(), MAX_FINDINGS_KEPT + 100);
        *next.borrow_mut() = (0..MAX_FINDINGS_KEPT + 100)
            .map(|n| numbered(n, if n == 7 { Status::Active } else { Status::Resolved }))
            .collect();
        assert_eq!(at(&mut d, 10.0).len(), MAX_FINDINGS_KEPT + 99, "every end told");
        assert_eq!(d.findings().len(), MAX_FINDINGS_KEPT, "past the cap, resolved ones go");
        assert!(d.findings().iter().any(|f| f.id == "f7"));
        *next.borrow_mut() = vec![numbered(7, Status::Active)];
        at(&mut d, 609.0);
        assert_eq!(d.findings().len(), MAX_FINDINGS_KEPT);
        at(&mut d, 611.0);
        assert_eq!(
            d.findings().iter().map(|f| f.id.as_str()).collect::<Vec<_>>(),
            ["f7"],
            "ten minutes after their end"
        );
    }
}
