//! The Diagnoser: runs every detector at each review, folds consequences
//! under their causes, and decides what is told: a finding once, then an
//! update on a material change (counts at most every ten seconds), its
//! end, and what is remembered and forgotten over a long run.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::pod_shutdown::PodShutdown;
use super::route::{Class, Router};
use super::{consequences, shell, wording};
use super::{CountedCalls, Detector, DiagnoseOptions, Finding, Review, Status};
use crate::event::CallEvent;
use crate::identify::pod::PodUid;
use crate::identify::Identity;
use crate::identify::LifecycleIdentity;
use crate::lifecycle::LifecycleEvent;

/// The router of `detectors`' claims. Two claimants of one class are a
/// mistake in their declarations, which the router's tests catch before
/// any run: none is made with it.
fn routed(detectors: &[Box<dyn Detector>]) -> Router {
    Router::new(detectors).unwrap_or_else(|conflicts| panic!("detectors claim the same failed calls: {conflicts:?}"))
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
    /// The state last told, while the latest is not told yet; none when
    /// the latest is what was told. A run of weeks keeps thousands of
    /// resolved findings, each told: one copy each, not two.
    untold_since: Option<Finding>,
    told_at: SystemTime,
    /// The finding it was told under, once folded as its consequence.
    under: Option<String>,
}

impl Shown {
    fn told(finding: Finding, at: SystemTime) -> Shown {
        Shown { finding, untold_since: None, told_at: at, under: None }
    }

    /// The state last told, which changes are measured against.
    fn last_told(&self) -> &Finding {
        self.untold_since.as_ref().unwrap_or(&self.finding)
    }

    /// Whether the latest state has been told.
    fn is_told(&self) -> bool {
        self.untold_since.is_none()
    }

    /// `finding` is the latest state, and it is told now.
    fn tell(&mut self, finding: Finding, at: SystemTime) {
        self.finding = finding;
        self.untold_since = None;
        self.told_at = at;
    }
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
    /// Which detector each failed call goes to.
    router: Router,
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
        let detectors = super::causes::detectors(options);
        Diagnoser {
            router: routed(&detectors),
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
        let done = |s: &Shown| s.is_told() && s.finding.status == Status::Resolved;
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
        self.router = routed(&self.detectors);
    }

    /// One call, for every detector; a call whose path is only its
    /// caller's word (made in a pod's own mount namespace) for none: every
    /// detector reads the node at a call's path or tells its pod's
    /// teardown by it, and such a path is neither (see
    /// `identify::path_proof`; the watch counts what is set aside).
    pub fn observe(&mut self, event: &CallEvent, identity: &Identity) {
        if !identity.proven() {
            return;
        }
        if let Some(at) = Class::of(event, identity).and_then(|class| self.router.claimant(&class)) {
            self.detectors[at].failed(event, identity);
        }
        for detector in &mut self.detectors {
            detector.observe(event, identity);
        }
    }

    pub fn lifecycle(&mut self, event: &LifecycleEvent, identity: &LifecycleIdentity) {
        for detector in &mut self.detectors {
            detector.lifecycle(event, identity);
        }
    }

    /// The deleted pods' shutdowns, as the API says them: for the
    /// detectors that judge a shutdown against its grace period and its
    /// containers' hooks.
    pub fn shutdowns(&mut self, shutdowns: &BTreeMap<PodUid, PodShutdown>) {
        for detector in &mut self.detectors {
            detector.shutdowns(shutdowns);
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

    /// Whether a detector asks for a review soon ([`Detector::wants_review`]).
    pub fn wants_review(&self) -> bool {
        self.detectors.iter().any(|d| d.wants_review())
    }

    /// Whether a detector wants what running CNI plugins write.
    pub fn wants_plugin_words(&self) -> bool {
        self.detectors.iter().any(|d| d.wants_plugin_words())
    }

    /// Runs every detector and returns what is new or changed enough to tell.
    pub fn review(&mut self, review: &mut Review<'_>) -> Vec<Report> {
        let mut reports = Vec::new();
        let mut current: Vec<Finding> = self.detectors.iter_mut().flat_map(|d| d.review(review)).collect();
        current.iter_mut().for_each(shell::withhold_unchecked);
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
            if let Some(shown) = self.shown.get_mut(&id).filter(|s| s.last_told().status == Status::Active) {
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
                shown.tell(finding.clone(), review.now);
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
                    self.shown.insert(finding.id.clone(), Shown::told(finding.clone(), review.now));
                    reports.push(Report::New(finding));
                }
                Some(shown) => {
                    let last_told = shown.last_told();
                    if last_told.status == Status::Resolved && finding.status == Status::Resolved {
                        continue;
                    }
                    let material = finding.differs_materially(last_told);
                    let counted = finding.count != last_told.count || finding.details != last_told.details;
                    let due = review.now.duration_since(shown.told_at).unwrap_or_default() >= UPDATE_EVERY;
                    finding.revision = shown.finding.revision;
                    if material || (counted && due) {
                        finding.revision += 1;
                        shown.tell(finding.clone(), review.now);
                        reports.push(Report::Update(finding));
                    } else if finding != shown.finding {
                        // Kept current for the closing summary, told later.
                        let before = std::mem::replace(&mut shown.finding, finding);
                        shown.untold_since.get_or_insert(before);
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
        root.last_told().status == Status::Active
            || now.duration_since(root.told_at).unwrap_or_default() < CONSEQUENCE_OUTLIVES
    }

    /// The latest state of every finding that changed since it was last
    /// told (counts moving between updates): said once more at exit.
    pub fn untold(&mut self) -> Vec<Report> {
        let mut reports = Vec::new();
        for shown in self.shown.values_mut().filter(|s| !s.is_told()) {
            shown.finding.revision += 1;
            shown.untold_since = None;
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

#[cfg(test)]
mod tests {
    use super::super::fake::{t, FakeNode};
    use super::super::{Confidence, FindingActor, Kind, Severity};
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
            router: Router::default(),
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
