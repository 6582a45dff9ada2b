//! The node as a record sees it: [`RecordingNode`] stands between the
//! detectors and the live node and notes every question and answer, without
//! changing either; [`ReplayNode`] answers the same questions later, on
//! another machine, from what was noted.

use crate::inspect::{
    CgroupState, DirSample, EntryEstimate, FileFacts, FreezerLevel, FsUsage, InodeFlags, Mount, MountCopy, MountHolder,
    MountNamespace, NodeInspector, Probe, TaskState, Unreadable,
};

/// One question a detector asked of the node during a review, with the
/// answer it got: one variant per [`NodeInspector`] method.
#[derive(Clone, Debug, PartialEq)]
pub enum Question {
    HostMounts {
        answer: Probe<Vec<Mount>>,
    },
    MountNamespace {
        mntns: u64,
        answer: Probe<MountNamespace>,
    },
    ResolvedPath {
        pid: u32,
        path: Vec<u8>,
        answer: Probe<Vec<u8>>,
    },
    MountHolders {
        mount: Mount,
        mntns: u64,
        answer: Vec<MountHolder>,
    },
    MountCopies {
        mount: Mount,
        mntns: u64,
        answer: Vec<MountCopy>,
    },
    InodeFlags {
        path: Vec<u8>,
        answer: Probe<InodeFlags>,
    },
    FileFacts {
        path: Vec<u8>,
        answer: Probe<FileFacts>,
    },
    DirSample {
        path: Vec<u8>,
        limit: usize,
        answer: Probe<DirSample>,
    },
    RemainingEntries {
        path: Vec<u8>,
        answer: Probe<EntryEstimate>,
    },
    FsUsage {
        path: Vec<u8>,
        answer: Probe<FsUsage>,
    },
    Cgroup {
        path: Vec<u8>,
        answer: Probe<CgroupState>,
    },
    V1Freezer {
        path: Vec<u8>,
        answer: Probe<Vec<FreezerLevel>>,
    },
    Task {
        tid: u32,
        answer: Probe<TaskState>,
    },
    FuseServers {
        answer: Vec<TaskState>,
    },
    /// Not a question: the detectors telling the node to stay away from a
    /// hung mount. Kept so the order of a review reads as it happened.
    Avoid {
        path: Vec<u8>,
    },
}

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

impl NodeInspector for RecordingNode<'_> {
    fn host_mounts(&mut self) -> Probe<Vec<Mount>> {
        let answer = self.node.host_mounts();
        self.asked.push(Question::HostMounts { answer: answer.clone() });
        answer
    }
    fn mount_namespace(&mut self, mntns: u64) -> Probe<MountNamespace> {
        let answer = self.node.mount_namespace(mntns);
        self.asked.push(Question::MountNamespace { mntns, answer: answer.clone() });
        answer
    }
    fn resolved_path(&mut self, pid: u32, path: &[u8]) -> Probe<Vec<u8>> {
        let answer = self.node.resolved_path(pid, path);
        self.asked.push(Question::ResolvedPath { pid, path: path.to_vec(), answer: answer.clone() });
        answer
    }
    fn mount_holders(&mut self, mount: &Mount, mntns: u64) -> Vec<MountHolder> {
        let answer = self.node.mount_holders(mount, mntns);
        self.asked.push(Question::MountHolders { mount: mount.clone(), mntns, answer: answer.clone() });
        answer
    }
    fn mount_copies(&mut self, mount: &Mount, mntns: u64) -> Vec<MountCopy> {
        let answer = self.node.mount_copies(mount, mntns);
        self.asked.push(Question::MountCopies { mount: mount.clone(), mntns, answer: answer.clone() });
        answer
    }
    fn inode_flags(&mut self, path: &[u8]) -> Probe<InodeFlags> {
        let answer = self.node.inode_flags(path);
        self.asked.push(Question::InodeFlags { path: path.to_vec(), answer: answer.clone() });
        answer
    }
    fn file_facts(&mut self, path: &[u8]) -> Probe<FileFacts> {
        let answer = self.node.file_facts(path);
        self.asked.push(Question::FileFacts { path: path.to_vec(), answer: answer.clone() });
        answer
    }
    fn dir_sample(&mut self, path: &[u8], limit: usize) -> Probe<DirSample> {
        let answer = self.node.dir_sample(path, limit);
        self.asked.push(Question::DirSample { path: path.to_vec(), limit, answer: answer.clone() });
        answer
    }
    fn remaining_entries(&mut self, path: &[u8]) -> Probe<EntryEstimate> {
        let answer = self.node.remaining_entries(path);
        self.asked.push(Question::RemainingEntries { path: path.to_vec(), answer: answer.clone() });
        answer
    }
    fn fs_usage(&mut self, path: &[u8]) -> Probe<FsUsage> {
        let answer = self.node.fs_usage(path);
        self.asked.push(Question::FsUsage { path: path.to_vec(), answer: answer.clone() });
        answer
    }
    fn cgroup(&mut self, path: &[u8]) -> Probe<CgroupState> {
        let answer = self.node.cgroup(path);
        self.asked.push(Question::Cgroup { path: path.to_vec(), answer: answer.clone() });
        answer
    }
    fn v1_freezer(&mut self, path: &[u8]) -> Probe<Vec<FreezerLevel>> {
        let answer = self.node.v1_freezer(path);
        self.asked.push(Question::V1Freezer { path: path.to_vec(), answer: answer.clone() });
        answer
    }
    fn task(&mut self, tid: u32) -> Probe<TaskState> {
        let answer = self.node.task(tid);
        self.asked.push(Question::Task { tid, answer: answer.clone() });
        answer
    }
    fn fuse_servers(&mut self) -> Vec<TaskState> {
        let answer = self.node.fuse_servers();
        self.asked.push(Question::FuseServers { answer: answer.clone() });
        answer
    }
    fn avoid(&mut self, path: &[u8]) {
        self.node.avoid(path);
        self.asked.push(Question::Avoid { path: path.to_vec() });
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
    /// The host's mount namespace, as the record's header says it.
    host_mntns: u64,
    used: Vec<bool>,
    next: usize,
    not_in_record: Vec<String>,
}

impl ReplayNode {
    pub fn new(asked: Vec<Question>) -> ReplayNode {
        let used = vec![false; asked.len()];
        ReplayNode { asked, host_mntns: 0, used, next: 0, not_in_record: Vec::new() }
    }

    /// Records made before podstuck read namespaces through a member
    /// asked for the host's table instead: it answers for the host's namespace.
    pub fn with_host_mntns(mut self, mntns: u32) -> ReplayNode {
        self.host_mntns = u64::from(mntns);
        self
    }

    /// The questions this review asked that the record has no answer to,
    /// as "file_facts /var/lib/x".
    pub fn not_in_record(&self) -> &[String] {
        &self.not_in_record
    }

    /// The recorded answer `pick` accepts: the next one in order, else an
    /// unused one anywhere in the review, else a used one (a question asked
    /// twice here but once live gets the same answer twice).
    fn answer<T>(&mut self, question: impl FnOnce() -> String, pick: impl Fn(&Question) -> Option<T>) -> Option<T> {
        if let Some(found) = self.asked.get(self.next).and_then(&pick) {
            self.used[self.next] = true;
            self.next += 1;
            return Some(found);
        }
        let unused = (0..self.asked.len()).find(|&i| !self.used[i] && pick(&self.asked[i]).is_some());
        if let Some(i) = unused {
            self.used[i] = true;
            // Back in step with the record after a question the live run skipped.
            if i >= self.next {
                self.next = i + 1;
            }
            return pick(&self.asked[i]);
        }
        if let Some(found) = self.asked.iter().find_map(&pick) {
            return Some(found);
        }
        self.not_in_record.push(question());
        None
    }
}

fn missing<T>() -> Probe<T> {
    Err(Unreadable(NOT_IN_THE_RECORD.into()))
}

fn shown(path: &[u8]) -> String {
    crate::words::escape_path(path)
}

impl NodeInspector for ReplayNode {
    fn host_mounts(&mut self) -> Probe<Vec<Mount>> {
        let pick = |a: &Question| match a {
            Question::HostMounts { answer } => Some(answer.clone()),
            _ => None,
        };
        self.answer(|| "host_mounts".into(), pick).unwrap_or_else(missing)
    }
    fn mount_namespace(&mut self, mntns: u64) -> Probe<MountNamespace> {
        let pick = |a: &Question| match a {
            Question::MountNamespace { mntns: n, answer } if *n == mntns => Some(answer.clone()),
            _ => None,
        };
        let recorded_namespaces = self.asked.iter().any(|a| matches!(a, Question::MountNamespace { .. }));
        if !recorded_namespaces && (mntns == 0 || mntns == self.host_mntns) {
            let host = |answer: &Probe<Vec<Mount>>| {
                answer.clone().map(|mounts| MountNamespace {
                    mntns,
                    host: true,
                    member: 1,
                    member_comm: String::new(),
                    owner: None,
                    mounts,
                })
            };
            let pick = |a: &Question| match a {
                Question::HostMounts { answer } => Some(host(answer)),
                _ => None,
            };
            return self.answer(|| "host_mounts".into(), pick).unwrap_or_else(missing);
        }
        self.answer(|| format!("mount_namespace mnt:[{mntns}]"), pick).unwrap_or_else(missing)
    }
    fn resolved_path(&mut self, pid: u32, path: &[u8]) -> Probe<Vec<u8>> {
        let pick = |a: &Question| match a {
            Question::ResolvedPath { pid: p, path: q, answer } if *p == pid && q == path => Some(answer.clone()),
            _ => None,
        };
        self.answer(|| format!("resolved_path {pid} {}", shown(path)), pick).unwrap_or_else(missing)
    }
    fn mount_holders(&mut self, mount: &Mount, mntns: u64) -> Vec<MountHolder> {
        let pick = |a: &Question| match a {
            Question::MountHolders { mount: m, mntns: n, answer } if m == mount && (*n == mntns || *n == 0) => {
                Some(answer.clone())
            }
            _ => None,
        };
        self.answer(|| format!("mount_holders {}", shown(&mount.mount_point)), pick).unwrap_or_default()
    }
    fn mount_copies(&mut self, mount: &Mount, mntns: u64) -> Vec<MountCopy> {
        let pick = |a: &Question| match a {
            Question::MountCopies { mount: m, mntns: n, answer } if m == mount && (*n == mntns || *n == 0) => {
                Some(answer.clone())
            }
            _ => None,
        };
        self.answer(|| format!("mount_copies {}", shown(&mount.mount_point)), pick).unwrap_or_default()
    }
    fn inode_flags(&mut self, path: &[u8]) -> Probe<InodeFlags> {
        let pick = |a: &Question| match a {
            Question::InodeFlags { path: p, answer } if p == path => Some(answer.clone()),
            _ => None,
        };
        self.answer(|| format!("inode_flags {}", shown(path)), pick).unwrap_or_else(missing)
    }
    fn file_facts(&mut self, path: &[u8]) -> Probe<FileFacts> {
        let pick = |a: &Question| match a {
            Question::FileFacts { path: p, answer } if p == path => Some(answer.clone()),
            _ => None,
        };
        self.answer(|| format!("file_facts {}", shown(path)), pick).unwrap_or_else(missing)
    }
    fn dir_sample(&mut self, path: &[u8], limit: usize) -> Probe<DirSample> {
        let pick = |a: &Question| match a {
            Question::DirSample { path: p, limit: l, answer } if p == path && *l == limit => Some(answer.clone()),
            _ => None,
        };
        self.answer(|| format!("dir_sample {} (limit {limit})", shown(path)), pick).unwrap_or_else(missing)
    }
    fn remaining_entries(&mut self, path: &[u8]) -> Probe<EntryEstimate> {
        let pick = |a: &Question| match a {
            Question::RemainingEntries { path: p, answer } if p == path => Some(answer.clone()),
            _ => None,
        };
        self.answer(|| format!("remaining_entries {}", shown(path)), pick).unwrap_or_else(missing)
    }
    fn fs_usage(&mut self, path: &[u8]) -> Probe<FsUsage> {
        let pick = |a: &Question| match a {
            Question::FsUsage { path: p, answer } if p == path => Some(answer.clone()),
            _ => None,
        };
        self.answer(|| format!("fs_usage {}", shown(path)), pick).unwrap_or_else(missing)
    }
    fn cgroup(&mut self, path: &[u8]) -> Probe<CgroupState> {
        let pick = |a: &Question| match a {
            Question::Cgroup { path: p, answer } if p == path => Some(answer.clone()),
            _ => None,
        };
        self.answer(|| format!("cgroup {}", shown(path)), pick).unwrap_or_else(missing)
    }
    fn v1_freezer(&mut self, path: &[u8]) -> Probe<Vec<FreezerLevel>> {
        let pick = |a: &Question| match a {
            Question::V1Freezer { path: p, answer } if p == path => Some(answer.clone()),
            _ => None,
        };
        self.answer(|| format!("v1_freezer {}", shown(path)), pick).unwrap_or_else(missing)
    }
    fn task(&mut self, tid: u32) -> Probe<TaskState> {
        let pick = |a: &Question| match a {
            Question::Task { tid: t, answer } if *t == tid => Some(answer.clone()),
            _ => None,
        };
        self.answer(|| format!("task {tid}"), pick).unwrap_or_else(missing)
    }
    fn fuse_servers(&mut self) -> Vec<TaskState> {
        let pick = |a: &Question| match a {
            Question::FuseServers { answer } => Some(answer.clone()),
            _ => None,
        };
        self.answer(|| "fuse_servers".into(), pick).unwrap_or_default()
    }
    fn avoid(&mut self, path: &[u8]) {
        let pick = |a: &Question| match a {
            Question::Avoid { path: p } if p == path => Some(()),
            _ => None,
        };
        self.answer(|| format!("avoid {}", shown(path)), pick);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::fake::{facts, FakeNode};

    #[test]
    fn the_recording_node_answers_as_the_node_and_notes_each_question_in_order() {
        let mut fake = FakeNode::with_mounts(&["50 /mnt/a tmpfs"]);
        fake.facts.insert(b"/mnt/a".to_vec(), facts(true, 0o755, 0));
        let mut recording = RecordingNode::new(&mut fake);
        let mounts = recording.host_mounts().unwrap();
        assert_eq!(mounts.len(), 2);
        assert!(recording.file_facts(b"/mnt/a").is_ok());
        assert!(recording.file_facts(b"/nope").is_err());
        recording.avoid(b"/mnt/a");
        let asked = recording.into_asked();
        assert_eq!(asked.len(), 4);
        assert!(matches!(&asked[0], Question::HostMounts { answer: Ok(m) } if *m == mounts));
        assert!(matches!(&asked[2], Question::FileFacts { path, answer: Err(_) } if path == b"/nope"));
        assert!(matches!(&asked[3], Question::Avoid { path } if path == b"/mnt/a"));
        assert_eq!(fake.avoided, vec![b"/mnt/a".to_vec()]);
    }

    #[test]
    fn the_replay_node_answers_in_order_then_by_question_then_not_in_the_record() {
        let ok = |uid| Ok(facts(false, 0o644, uid));
        let mut node = ReplayNode::new(vec![
            Question::FileFacts { path: b"/a".to_vec(), answer: ok(1) },
            Question::FileFacts { path: b"/b".to_vec(), answer: ok(2) },
            Question::FileFacts { path: b"/a".to_vec(), answer: ok(3) },
        ]);
        // Out of order: found by its path; the replay goes on in step from there.
        assert_eq!(node.file_facts(b"/b").unwrap().uid, 2);
        assert_eq!(node.file_facts(b"/a").unwrap().uid, 3);
        // Then the answer it skipped, and, asked more often than recorded, an answer again.
        assert_eq!(node.file_facts(b"/a").unwrap().uid, 1);
        assert_eq!(node.file_facts(b"/a").unwrap().uid, 1);
        assert!(node.not_in_record().is_empty());
        assert_eq!(node.file_facts(b"/c"), Err(Unreadable(NOT_IN_THE_RECORD.into())));
        assert_eq!(node.task(7), Err(Unreadable(NOT_IN_THE_RECORD.into())));
        assert!(node.fuse_servers().is_empty());
        assert_eq!(node.not_in_record(), ["file_facts /c", "task 7", "fuse_servers"]);
    }
}
