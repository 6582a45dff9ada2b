//! The node as a record sees it: [`RecordingNode`] stands between the
//! detectors and the live node and notes every question and answer, without
//! changing either; [`ReplayNode`] answers the same questions later, on
//! another machine, from what was noted. Both are made from the table of
//! questions (`inspect::questions`) by the macro below; what they note
//! and answer from is the record's [`Question`] (`question`).

use super::question::Question;
use super::wire::{question_key, Recorded};
use crate::inspect::questions::named::*;
use crate::inspect::questions::{node_questions, Unanswered};
use crate::inspect::NodeInspector;

macro_rules! recorded_node_of {
    ($(
        $(#[$doc:meta])*
        fn $method:ident($($arg:ident: $ty:ty => $owned:ty $(= $older:expr)?),*) -> $answer:ty as $variant:ident;
    )*) => {
        impl NodeInspector for RecordingNode<'_> {
            $(
                fn $method(&mut self, $($arg: $ty),*) -> $answer {
                    let answer = self.node.$method($($arg),*);
                    self.asked.push(Question::$variant { $($arg: $arg.to_owned(),)* answer: answer.clone() });
                    answer
                }
            )*
            fn avoid(&mut self, path: &[u8]) {
                self.node.avoid(path);
                self.asked.push(Question::Avoid { path: path.to_vec() });
            }
        }

        impl NodeInspector for ReplayNode {
            $(
                fn $method(&mut self, $($arg: $ty),*) -> $answer {
                    let key = question_key(stringify!($method), &($($arg.to_owned().to_wire(),)*));
                    let older = question_key(
                        stringify!($method),
                        &($({
                            let older: $owned = older_or!($arg.to_owned() $(, $older)?);
                            older.to_wire()
                        },)*),
                    );
                    let said = || said(stringify!($method), &[$($arg.said()),*]);
                    match self.answer(&key, &older, said).map(|i| &self.asked[i]) {
                        Some(Question::$variant { answer, .. }) => answer.clone(),
                        _ => Unanswered::unanswered(NOT_IN_THE_RECORD),
                    }
                }
            )*
            fn avoid(&mut self, path: &[u8]) {
                let key = question_key("avoid", &(path.to_vec().to_wire(),));
                self.answer(&key, &key, || said("avoid", &[path.said()]));
            }
        }
    };
}

/// An argument as older records have it: `$older` where the table gives one.
macro_rules! older_or {
    ($now:expr) => {
        $now
    };
    ($now:expr, $older:expr) => {
        $older
    };
}

node_questions!(recorded_node_of);

/// The live node, with a note of every question and answer. Wrap the node
/// for one review, then hand [`RecordingNode::into_asked`] to the recorder.
pub struct RecordingNode<'a> {
    node: &'a mut dyn NodeInspector,
    asked: Vec<Question>,
}

impl<'a> RecordingNode<'a> {
    pub fn new(node: &'a mut dyn NodeInspector) -> RecordingNode<'a> {
        RecordingNode { node, asked: Vec::new() }
    }

    /// What was asked, in order.
    pub fn into_asked(self) -> Vec<Question> {
        self.asked
    }
}

/// What a replay says of a fact the live run never read.
pub const NOT_IN_THE_RECORD: &str = "not in the record";

/// The node of one recorded review. Questions are answered in the order
/// they were recorded; a question out of order (detectors walk hash maps,
/// so their order varies from run to run) is found by method and arguments
/// among the review's answers; one the live run never asked (a newer
/// podstuck asks more) is unreadable, "not in the record".
pub struct ReplayNode {
    asked: Vec<Question>,
    /// Each recorded question's [`Question::key`].
    keys: Vec<String>,
    used: Vec<bool>,
    next: usize,
    not_in_record: Vec<String>,
    /// The review recorded no namespaces: its host tables answer for the host's.
    from_host_tables: bool,
}

impl ReplayNode {
    pub fn new(asked: Vec<Question>) -> ReplayNode {
        ReplayNode::of_review(asked, 0)
    }

    /// Records made before podstuck read namespaces through a member
    /// asked for the host's table instead: it answers for the host's namespace.
    pub fn with_host_mntns(self, mntns: u32) -> ReplayNode {
        let mut asked = self.asked;
        if self.from_host_tables {
            asked.retain(|a| !matches!(a, Question::MountNamespace { .. }));
        }
        ReplayNode::of_review(asked, u64::from(mntns))
    }

    fn of_review(asked: Vec<Question>, host_mntns: u64) -> ReplayNode {
        let from_host_tables = !asked.iter().any(|a| matches!(a, Question::MountNamespace { .. }));
        let asked = if from_host_tables { namespaces_of_host_tables(asked, host_mntns) } else { asked };
        let keys = asked.iter().map(Question::key).collect();
        let used = vec![false; asked.len()];
        ReplayNode { asked, keys, used, next: 0, not_in_record: Vec::new(), from_host_tables }
    }

    /// The questions this review asked that the record has no answer to,
    /// as "file_facts /var/lib/x".
    pub fn not_in_record(&self) -> &[String] {
        &self.not_in_record
    }

    /// Where the recorded answer to `key` (or to `older`, the question as
    /// an older record asked it) is: the next one in order, else an
    /// unused one anywhere in the review, else a used one (a question asked
    /// twice here but once live gets the same answer twice).
    fn answer(&mut self, key: &str, older: &str, question: impl FnOnce() -> String) -> Option<usize> {
        let fits = |k: &String| k == key || k == older;
        if self.keys.get(self.next).is_some_and(fits) {
            self.used[self.next] = true;
            self.next += 1;
            return Some(self.next - 1);
        }
        if let Some(i) = (0..self.keys.len()).find(|&i| !self.used[i] && fits(&self.keys[i])) {
            self.used[i] = true;
            // Back in step with the record after a question the live run skipped.
            if i >= self.next {
                self.next = i + 1;
            }
            return Some(i);
        }
        let found = self.keys.iter().position(fits);
        if found.is_none() {
            self.not_in_record.push(question());
        }
        found
    }
}

/// A review recorded before podstuck read mount namespaces asked for the
/// host's table instead: each such answer also answers for the host's
/// namespace (0, unknown, and `host_mntns`), right after it.
fn namespaces_of_host_tables(asked: Vec<Question>, host_mntns: u64) -> Vec<Question> {
    let mut numbers = vec![0];
    if host_mntns != 0 {
        numbers.push(host_mntns);
    }
    let mut out = Vec::with_capacity(asked.len());
    for a in asked {
        if let Question::HostMounts { answer } = &a {
            for &mntns in &numbers {
                let answer = answer.clone().map(|mounts| MountNamespace {
                    mntns,
                    host: true,
                    member: 1,
                    member_start: None,
                    member_comm: String::new(),
                    owner: None,
                    mounts,
                });
                out.push(Question::MountNamespace { mntns, answer });
            }
        }
        out.push(a);
    }
    out
}

/// An argument as a replay says a question it lacks.
trait Said {
    fn said(&self) -> String;
}

impl Said for [u8] {
    fn said(&self) -> String {
        crate::words::escape_path(self)
    }
}

impl Said for Mount {
    fn said(&self) -> String {
        self.mount_point.said()
    }
}

impl Said for u32 {
    fn said(&self) -> String {
        self.to_string()
    }
}

impl Said for u64 {
    fn said(&self) -> String {
        self.to_string()
    }
}

impl Said for ContainerId {
    fn said(&self) -> String {
        self.as_str().to_string()
    }
}

impl Said for usize {
    fn said(&self) -> String {
        self.to_string()
    }
}

/// "file_facts /var/lib/x", "resolved_path 100 /run/x".
fn said(method: &str, arguments: &[String]) -> String {
    std::iter::once(method).chain(arguments.iter().map(String::as_str)).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::fake::{facts, FakeNode};
    use crate::inspect::Unreadable;

    #[test]
    fn the_recording_node_answers_as_the_node_and_notes_each_question_in_order() {
        let mut fake = FakeNode::with_mounts(&["50 /mnt/a tmpfs"]);
        fake.facts.insert(b"/mnt/a".to_vec(), facts(true, 0o755, 0));
        let mut recording = RecordingNode::new(&mut fake);
        let mounts = recording.host_mounts().unwrap();
        assert_eq!(mounts.len(), 2);
        assert!(recording.file_facts(b"/mnt/a", 0).is_ok());
        assert!(recording.file_facts(b"/nope", 0).is_err());
        recording.avoid(b"/mnt/a");
        let asked = recording.into_asked();
        assert_eq!(asked.len(), 4);
        assert!(matches!(&asked[0], Question::HostMounts { answer: Ok(m) } if *m == mounts));
        assert!(matches!(&asked[2], Question::FileFacts { path, answer: Err(_), .. } if path == b"/nope"));
        assert!(matches!(&asked[3], Question::Avoid { path } if path == b"/mnt/a"));
        assert_eq!(fake.avoided, vec![b"/mnt/a".to_vec()]);
    }

    #[test]
    fn the_replay_node_answers_in_order_then_by_question_then_not_in_the_record() {
        let ok = |uid| Ok(facts(false, 0o644, uid));
        let mut node = ReplayNode::new(vec![
            Question::FileFacts { path: b"/a".to_vec(), root: 0, answer: ok(1) },
            Question::FileFacts { path: b"/b".to_vec(), root: 0, answer: ok(2) },
            Question::FileFacts { path: b"/a".to_vec(), root: 0, answer: ok(3) },
        ]);
        // Out of order: found by its path; the replay goes on in step from there.
        assert_eq!(node.file_facts(b"/b", 0).unwrap().uid, 2);
        assert_eq!(node.file_facts(b"/a", 0).unwrap().uid, 3);
        // Then the answer it skipped, and, asked more often than recorded, an answer again.
        assert_eq!(node.file_facts(b"/a", 0).unwrap().uid, 1);
        assert_eq!(node.file_facts(b"/a", 0).unwrap().uid, 1);
        assert!(node.not_in_record().is_empty());
        assert_eq!(node.file_facts(b"/c", 0), Err(Unreadable::Other(NOT_IN_THE_RECORD.into())));
        assert_eq!(node.task(7), Err(Unreadable::Other(NOT_IN_THE_RECORD.into())));
        assert!(node.fuse_servers().is_empty());
        assert_eq!(node.not_in_record(), ["file_facts /c 0", "task 7", "fuse_servers"]);
    }
}
