//! Why a fact of the node could not be read: a kind a detector decides on
//! (gone, denied, timed out, avoided, too many, other) and the words it
//! says. "The process is gone" and "too many open files" are different
//! answers: the first may resolve a finding, the second says nothing about
//! the node at all and is tried again at the next look. A detector that
//! read "any error" as "ended" would be wrong the first time a node ran
//! out of file descriptors.
//!
//! The words are for the user; the kind is what code decides on. Records
//! written before the kind existed hold the words alone:
//! [`Unreadable::from_words`] gives them back the kind podstuck's words of
//! that time said.

use std::io;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::words::{exact_duration, io_words};

/// A fact that could not be read, by kind, with the words that say why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Unreadable {
    /// What was asked about is not there (any more): no such file or
    /// process, a directory on the way gone, a namespace with nobody left.
    Gone(String),
    /// The kernel refused podstuck: permission, a security profile
    /// (AppArmor, SELinux, seccomp), lockdown.
    Denied(String),
    /// The read did not answer in time: the filesystem may be hung.
    TimedOut(String),
    /// Not tried: podstuck stays away (an earlier read on that filesystem
    /// did not return, too many reads still hung, the review's time is
    /// spent, podstuck is stopping). Tried again later.
    Avoided(String),
    /// Out of a resource, podstuck's or the node's (too many open files,
    /// processes, memory): says nothing of the node's state; tried again
    /// at the next look.
    TooMany(String),
    /// Anything else, in its words.
    Other(String),
}

/// The kinds, by their names in records and metrics.
pub const KINDS: [&str; 6] = ["gone", "denied", "timed-out", "avoided", "too-many", "other"];

impl Unreadable {
    /// The words that say why, for the user.
    pub fn why(&self) -> &str {
        match self {
            Unreadable::Gone(why)
            | Unreadable::Denied(why)
            | Unreadable::TimedOut(why)
            | Unreadable::Avoided(why)
            | Unreadable::TooMany(why)
            | Unreadable::Other(why) => why,
        }
    }

    /// The kind's name, one of [`KINDS`].
    pub fn kind(&self) -> &'static str {
        match self {
            Unreadable::Gone(_) => KINDS[0],
            Unreadable::Denied(_) => KINDS[1],
            Unreadable::TimedOut(_) => KINDS[2],
            Unreadable::Avoided(_) => KINDS[3],
            Unreadable::TooMany(_) => KINDS[4],
            Unreadable::Other(_) => KINDS[5],
        }
    }

    /// The error of kind `kind` (a name of [`KINDS`]) with `why`; None for
    /// a name this podstuck does not know (a newer one's kind).
    pub fn of_kind(kind: &str, why: String) -> Option<Unreadable> {
        Some(match kind {
            "gone" => Unreadable::Gone(why),
            "denied" => Unreadable::Denied(why),
            "timed-out" => Unreadable::TimedOut(why),
            "avoided" => Unreadable::Avoided(why),
            "too-many" => Unreadable::TooMany(why),
            "other" => Unreadable::Other(why),
            _ => return None,
        })
    }

    /// An I/O error, by its errno, in its words.
    pub fn io(e: &io::Error) -> Unreadable {
        let why = io_words(e);
        match e.raw_os_error() {
            Some(libc::ENOENT | libc::ESRCH | libc::ESTALE) => Unreadable::Gone(why),
            Some(libc::EACCES | libc::EPERM) => Unreadable::Denied(why),
            Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::EAGAIN | libc::ENOBUFS | libc::ENOSPC) => {
                Unreadable::TooMany(why)
            }
            Some(libc::ETIMEDOUT) => Unreadable::TimedOut(why),
            Some(libc::ELOOP) => Unreadable::Other(format!(
                "{why}: a symbolic link on the way, and podstuck follows none a workload could have put there"
            )),
            Some(libc::EXDEV) => Unreadable::Other(format!(
                "{why}: the path leads out of where it was asked, and podstuck does not follow it"
            )),
            _ if e.kind() == io::ErrorKind::NotFound => Unreadable::Gone(why),
            _ => Unreadable::Other(why),
        }
    }

    /// The same kind, said in `why`.
    pub fn said_as(self, why: String) -> Unreadable {
        match self {
            Unreadable::Gone(_) => Unreadable::Gone(why),
            Unreadable::Denied(_) => Unreadable::Denied(why),
            Unreadable::TimedOut(_) => Unreadable::TimedOut(why),
            Unreadable::Avoided(_) => Unreadable::Avoided(why),
            Unreadable::TooMany(_) => Unreadable::TooMany(why),
            Unreadable::Other(_) => Unreadable::Other(why),
        }
    }

    /// A read that waited `wait` without an answer.
    pub fn timed_out(wait: Duration) -> Unreadable {
        Unreadable::TimedOut(format!("timed out after {}: the filesystem may be hung", exact_duration(wait)))
    }

    /// Whether what was asked about is known not to be there.
    pub fn is_gone(&self) -> bool {
        matches!(self, Unreadable::Gone(_))
    }

    /// Whether it says nothing of the node and a later look may read it
    /// (timed out, avoided, out of a resource): a detector keeps what it
    /// knew and looks again.
    pub fn is_passing(&self) -> bool {
        matches!(self, Unreadable::TimedOut(_) | Unreadable::Avoided(_) | Unreadable::TooMany(_))
    }

    /// What podstuck could not read, said for a finding after "PATH: ",
    /// each kind in its words and with what comes next.
    pub fn said(&self) -> String {
        match self {
            Unreadable::Gone(why) => format!("it is gone ({why})"),
            Unreadable::Denied(why) => {
                format!("podstuck may not read it ({why}): run podstuck as root, unconfined by AppArmor or SELinux")
            }
            Unreadable::TimedOut(why) => {
                format!("podstuck's read did not answer ({why}); it reads there again once that read returns")
            }
            Unreadable::Avoided(why) => why.clone(),
            Unreadable::TooMany(why) => format!(
                "podstuck could not read it now ({why}), which says nothing of what it reads; it looks again shortly"
            ),
            Unreadable::Other(why) => format!("podstuck could not read it ({why})"),
        }
    }

    /// The kind of an error podstuck said before errors had kinds, from
    /// its words (records older than the kind hold the words alone): the
    /// words podstuck used for each kind then.
    pub fn from_words(why: String) -> Unreadable {
        let w = why.as_str();
        let has = |words: &[&str]| words.iter().any(|x| w.contains(x));
        if w.starts_with("timed out") {
            Unreadable::TimedOut(why)
        } else if w.starts_with("not touched") || w.starts_with("not read") {
            Unreadable::Avoided(why)
        } else if has(&["too many open files", "cannot allocate memory", "resource temporarily"]) {
            Unreadable::TooMany(why)
        } else if has(&["permission denied", "operation not permitted", "security profile"]) {
            Unreadable::Denied(why)
        } else if has(&["no such file", "no such process", "no process is left"]) {
            Unreadable::Gone(why)
        } else {
            Unreadable::Other(why)
        }
    }
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.why())
    }
}

impl std::error::Error for Unreadable {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_errno_is_its_kind() {
        let kind = |errno| Unreadable::io(&io::Error::from_raw_os_error(errno)).kind();
        assert_eq!(kind(libc::ENOENT), "gone");
        assert_eq!(kind(libc::ESRCH), "gone");
        assert_eq!(kind(libc::EACCES), "denied");
        assert_eq!(kind(libc::EPERM), "denied");
        assert_eq!(kind(libc::EMFILE), "too-many");
        assert_eq!(kind(libc::ENFILE), "too-many");
        assert_eq!(kind(libc::ETIMEDOUT), "timed-out");
        assert_eq!(kind(libc::EIO), "other");
        assert_eq!(Unreadable::io(&io::Error::from_raw_os_error(libc::EMFILE)).why(), "too many open files");
        let link = Unreadable::io(&io::Error::from_raw_os_error(libc::ELOOP));
        assert!(link.why().contains("follows none"), "{link}");
    }

    #[test]
    fn older_words_are_read_as_their_kind() {
        let kind = |w: &str| Unreadable::from_words(w.into()).kind();
        assert_eq!(kind("timed out after 1 s: the filesystem may be hung"), "timed-out");
        assert_eq!(kind("not touched: an earlier read on this filesystem did not return"), "avoided");
        assert_eq!(kind("not read: podstuck is stopping"), "avoided");
        assert_eq!(kind("too many open files"), "too-many");
        assert_eq!(kind("permission denied"), "denied");
        assert_eq!(kind("no such file or directory"), "gone");
        assert_eq!(kind("no such process"), "gone");
        assert_eq!(kind("no process is left in mount namespace mnt:[4], so its mounts cannot be read"), "gone");
        assert_eq!(kind("the fake node was given no answer to task"), "other");
        for name in KINDS {
            assert_eq!(Unreadable::of_kind(name, "x".into()).unwrap().kind(), name);
        }
        assert_eq!(Unreadable::of_kind("newer", "x".into()), None);
    }
}
