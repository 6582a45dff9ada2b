//! Who holds a mount, in words: the processes /proc names as holding it
//! (their pid, name and pod), a leftover debug pod's copy of the node's
//! mounts, and the processes podstuck could not look into. Shared by the
//! detectors whose cause is a holder (mount-held, block-volume-held,
//! volume-still-mounted, not-mounted), so each says it the same way.

use super::{shown, Finding};
use crate::identify::owner::Owner;
use crate::inspect::{MountHolder, TaskState};

/// "pid 42 (sleep)", and whose it is where it belongs to a pod or container:
/// "pid 42 (sleep) of pod shop/web-0 (container app)".
pub fn process_words(pid: u32, comm: &str, owner: Option<&Owner>) -> String {
    match owner {
        Some(owner) => format!("pid {pid} ({comm}) of {}", owner.words()),
        None => format!("pid {pid} ({comm})"),
    }
}

/// What to do about a leftover `kubectl debug node` pod among the holders:
/// it holds its own copy of every mount of the node until deleted.
pub fn debug_pod_advice<'h>(owners: impl IntoIterator<Item = Option<&'h Owner>>) -> Option<String> {
    let pod = owners.into_iter().flatten().find(|o| o.is_debug_pod())?;
    Some(format!("{} holds a private copy of the mount: delete it: {}", pod.words(), pod.delete_pod()?))
}

/// The processes podstuck may not look into, as one evidence line: a
/// holder may be among them, so "no process holds it" would be a claim
/// podstuck cannot make (an AppArmor profile such as docker-default lets
/// it read only processes of its own profile).
pub fn unreadable_fact(denied: &[TaskState]) -> Option<String> {
    const NAMED: usize = 5;
    if denied.is_empty() {
        return None;
    }
    let named: Vec<String> = denied.iter().take(NAMED).map(|t| format!("pid {} ({})", t.pid, t.comm)).collect();
    let more = match denied.len().saturating_sub(NAMED) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    Some(format!(
        "{} process(es) not readable under this security profile (AppArmor, SELinux or ptrace rules refuse their /proc/PID/fd, cwd and root): {}{more}; a holder among them cannot be named",
        denied.len(),
        named.join(", ")
    ))
}

/// What /proc says of who holds a mount, as evidence: each holder, the
/// processes podstuck could not read, and "no process" only when it
/// could read them all.
pub fn holders_evidence(f: &mut Finding, holders: &[MountHolder], denied: &[TaskState]) {
    match (holders.is_empty(), unreadable_fact(denied)) {
        (true, None) => f.evidence("/proc", "no process has a file, cwd, root or mapping on it"),
        (true, Some(fact)) => {
            f.evidence("/proc", "no process podstuck could read has a file, cwd, root or mapping on it");
            f.evidence("/proc", fact);
        }
        (false, unreadable) => {
            for fact in holder_facts(holders) {
                f.evidence("/proc", fact);
            }
            if let Some(fact) = unreadable {
                f.evidence("/proc", fact);
            }
        }
    }
}

/// Holders as evidence lines.
pub fn holder_facts(holders: &[MountHolder]) -> Vec<String> {
    holders
        .iter()
        .map(|h| {
            let ns = if h.other_namespace {
                format!(", in another mount namespace (mnt:[{}])", h.mntns)
            } else {
                String::new()
            };
            let how = match h.how {
                crate::inspect::HoldKind::Cwd => "has its current directory at",
                crate::inspect::HoldKind::Root => "has its root directory at",
                crate::inspect::HoldKind::OpenFile => "has open",
                crate::inspect::HoldKind::MappedFile => "has mapped",
            };
            format!("{} {how} {}{ns}", process_words(h.pid, &h.comm, h.owner.as_ref()), shown(&h.path))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::fake::task;
    use super::*;

    #[test]
    fn a_long_list_of_unreadable_processes_names_five() {
        let denied: Vec<TaskState> = (1..=8).map(|pid| task(pid, "p", 'S')).collect();
        let fact = unreadable_fact(&denied).unwrap();
        assert!(fact.starts_with("8 process(es) not readable under this security profile"), "{fact}");
        assert!(fact.contains("pid 5 (p) and 3 more;"), "{fact}");
        assert_eq!(unreadable_fact(&[]), None);
    }
}
