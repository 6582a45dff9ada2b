//! Repeats of a finding become the series of one Event, not new Events:
//! kubelet retries a failed unmount every few seconds for hours, and a
//! pod's events must stay readable. As client-go's events library does,
//! the first report is a new Event and later ones raise its
//! `series.count`, patched at most every [`SERIES_EVERY`] per finding;
//! the end of a finding is one Normal Event.
//!
//! Pure: a finding and a clock in, what to post out.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use crate::diagnose::{Finding, Status};

/// A finding's series is patched at most this often.
pub const SERIES_EVERY: Duration = Duration::from_secs(30);

/// Findings remembered at most: past this the one seen longest ago is
/// forgotten (a new report of it starts a new Event).
pub const MAX_REMEMBERED: usize = 4096;

/// What to send the API.
#[derive(Clone, Debug, PartialEq)]
pub enum Post {
    /// A new Event: the finding's first report, or its end (boxed: a
    /// finding is large, a series patch small).
    Create(Box<Finding>),
    /// The Event of finding `id` (in `namespace`, named `name`) happened
    /// `count` times, the last at `last`.
    Series { id: String, namespace: String, name: String, count: i32, last: SystemTime },
}

/// One finding told as an Event.
struct Told {
    /// Where its Event is, once created.
    event: Option<(String, String)>,
    /// No Event can regard it (its pod is not in the API): stay quiet.
    quiet: bool,
    count: i32,
    last: SystemTime,
    patched_at: SystemTime,
    /// Repeats since the last patch.
    unpatched: bool,
}

/// The findings told as Events, and their repeats.
#[derive(Default)]
pub struct Repeats {
    told: HashMap<String, Told>,
}

impl Repeats {
    /// A finding reported by the diagnosis at `now`: a new Event, or a
    /// repeat counted for the next patch.
    pub fn report(&mut self, finding: &Finding, now: SystemTime) -> Option<Post> {
        if finding.status == Status::Resolved {
            // Said resolved only where its start was said.
            let told = self.told.remove(&finding.id)?;
            return (!told.quiet).then(|| Post::Create(Box::new(finding.clone())));
        }
        if let Some(told) = self.told.get_mut(&finding.id) {
            told.count = told.count.saturating_add(1);
            told.last = now;
            told.unpatched = true;
            return None;
        }
        if self.told.len() >= MAX_REMEMBERED {
            let oldest = self.told.iter().min_by_key(|(_, t)| t.last).map(|(id, _)| id.clone());
            oldest.map(|id| self.told.remove(&id));
        }
        self.told.insert(
            finding.id.clone(),
            Told { event: None, quiet: false, count: 1, last: now, patched_at: now, unpatched: false },
        );
        Some(Post::Create(Box::new(finding.clone())))
    }

    /// The Event of finding `id` exists now, named `name` in `namespace`.
    pub fn created(&mut self, id: &str, namespace: &str, name: &str) {
        if let Some(told) = self.told.get_mut(id) {
            told.event = Some((namespace.to_string(), name.to_string()));
        }
    }

    /// No Event can be posted for finding `id`: its repeats and end are not told.
    pub fn quiet(&mut self, id: &str) {
        if let Some(told) = self.told.get_mut(id) {
            told.quiet = true;
        }
    }

    /// The Event of finding `id` is gone (expired in the API): its next
    /// report starts a new one.
    pub fn forget(&mut self, id: &str) {
        self.told.remove(id);
    }

    /// The series patches due at `now`: every finding repeated since its
    /// last patch, at most one patch per [`SERIES_EVERY`].
    pub fn due(&mut self, now: SystemTime) -> Vec<Post> {
        let mut due = Vec::new();
        for (id, told) in &mut self.told {
            let Some((namespace, name)) = &told.event else { continue };
            if !told.unpatched || told.quiet || now.duration_since(told.patched_at).unwrap_or_default() < SERIES_EVERY {
                continue;
            }
            told.unpatched = false;
            told.patched_at = now;
            due.push(Post::Series {
                id: id.clone(),
                namespace: namespace.clone(),
                name: name.clone(),
                count: told.count,
                last: told.last,
            });
        }
        due.sort_by(|a, b| match (a, b) {
            (Post::Series { id: a, .. }, Post::Series { id: b, .. }) => a.cmp(b),
            _ => std::cmp::Ordering::Equal,
        });
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::{Kind, Severity};
    use std::time::UNIX_EPOCH;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    fn finding(key: &str) -> Finding {
        Finding::new(Kind::VolumeStillMounted, key, Severity::Critical, at(0))
    }

    fn count(posts: &[Post]) -> Vec<(i32, SystemTime)> {
        posts
            .iter()
            .map(|p| match p {
                Post::Series { count, last, .. } => (*count, *last),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn repeats_raise_one_series_patched_at_most_every_30_s() {
        let mut r = Repeats::default();
        let f = finding("/a");
        assert_eq!(r.report(&f, at(0)), Some(Post::Create(Box::new(f.clone()))));
        r.created(&f.id, "shop", "web-0.1");
        // Repeats every 10 s, as the diagnosis tells count changes.
        assert_eq!(r.report(&f, at(10)), None);
        assert!(r.due(at(10)).is_empty(), "not before 30 s");
        assert_eq!(r.report(&f, at(20)), None);
        assert!(r.due(at(29)).is_empty());
        assert_eq!(count(&r.due(at(30))), vec![(3, at(20))]);
        assert!(r.due(at(31)).is_empty(), "nothing repeated since");
        r.report(&f, at(40));
        assert!(r.due(at(50)).is_empty(), "30 s since the last patch");
        let due = r.due(at(60));
        assert_eq!(count(&due), vec![(4, at(40))]);
        assert!(matches!(&due[0], Post::Series { namespace, name, .. } if namespace == "shop" && name == "web-0.1"));
    }

    #[test]
    fn no_patch_before_the_event_exists_and_the_end_is_one_new_event() {
        let mut r = Repeats::default();
        let f = finding("/b");
        r.report(&f, at(0));
        r.report(&f, at(10));
        assert!(r.due(at(100)).is_empty(), "its Event is not created yet");
        r.created(&f.id, "shop", "web-0.2");
        assert_eq!(count(&r.due(at(101))), vec![(2, at(10))]);
        let mut done = f.clone();
        done.status = Status::Resolved;
        assert_eq!(r.report(&done, at(110)), Some(Post::Create(Box::new(done.clone()))));
        assert_eq!(r.report(&done, at(111)), None, "said resolved once");
        assert!(r.due(at(200)).is_empty());
        // It comes back: a new Event.
        assert_eq!(r.report(&f, at(300)), Some(Post::Create(Box::new(f.clone()))));
    }

    #[test]
    fn a_finding_with_no_object_to_regard_stays_quiet() {
        let mut r = Repeats::default();
        let f = finding("/c");
        r.report(&f, at(0));
        r.quiet(&f.id);
        assert_eq!(r.report(&f, at(40)), None);
        assert!(r.due(at(80)).is_empty());
        let mut done = f.clone();
        done.status = Status::Resolved;
        assert_eq!(r.report(&done, at(90)), None);
        // An end never started is not told either.
        assert!(r.report(&finding("/never"), at(0)).is_some());
        let mut other = finding("/other");
        other.status = Status::Resolved;
        assert_eq!(r.report(&other, at(1)), None);
    }

    #[test]
    fn an_expired_event_starts_again_and_memory_is_bounded() {
        let mut r = Repeats::default();
        let f = finding("/d");
        r.report(&f, at(0));
        r.forget(&f.id);
        assert!(matches!(r.report(&f, at(1)), Some(Post::Create(_))));
        for i in 0..MAX_REMEMBERED + 10 {
            r.report(&finding(&format!("/many/{i}")), at(2 + i as u64));
        }
        assert_eq!(r.told.len(), MAX_REMEMBERED);
    }
}
