//! One root cause, its consequences under it. When an actor's teardown
//! fails for one cause, it often fails in other ways on the way: it retries
//! an unmount that already succeeded (EINVAL), for instance. Told apart,
//! those read as two pathologies with two fixes, one of them wrong. Here a
//! finding that only follows from another finding of the same actor is
//! folded into it: listed in its evidence, not told on its own.

use super::{Finding, Kind, Status};

/// Kinds that, beside another finding of the same actor, are its
/// consequence rather than a cause of their own.
fn follows_from_others(kind: Kind) -> bool {
    kind == Kind::NotMounted
}

fn same_actor(a: &Finding, b: &Finding) -> bool {
    match (&a.actor, &b.actor) {
        (Some(x), Some(y)) => x.pid == y.pid || (x.comm == y.comm && x.parent == y.parent),
        _ => false,
    }
}

/// Folds consequences into their root findings. Returns the ids of the
/// findings folded, each with the id of the finding it was told under.
pub fn fold(findings: &mut Vec<Finding>) -> Vec<(String, String)> {
    let mut folded = Vec::new();
    let mut i = 0;
    while i < findings.len() {
        let candidate = &findings[i];
        let root = (candidate.status == Status::Active && follows_from_others(candidate.kind))
            .then(|| {
                findings.iter().position(|r| {
                    r.status == Status::Active
                        && !follows_from_others(r.kind)
                        && r.kind != candidate.kind
                        && same_actor(r, candidate)
                })
            })
            .flatten();
        let Some(root) = root else {
            i += 1;
            continue;
        };
        let consequence = findings.remove(i);
        let root = if root > i { root - 1 } else { root };
        let r = &mut findings[root];
        let path = consequence.paths.first().map(|p| super::shown(p)).unwrap_or_default();
        r.evidence(
            "consequence",
            format!(
                "{}'s {} of {path} also fails with {} {} times: it retries a step that already happened while the teardown fails for the cause above, not a second cause",
                consequence.actor.as_ref().map(|a| a.description.as_str()).unwrap_or("the same actor"),
                consequence.syscall.unwrap_or("call"),
                consequence.errno.as_deref().unwrap_or("an error"),
                consequence.count
            ),
        );
        folded.push((consequence.id, r.id.clone()));
    }
    folded
}

#[cfg(test)]
mod tests {
    use super::super::fake::t;
    use super::super::{FindingActor, Severity};
    use super::*;

    fn by(kind: Kind, key: &str, pid: u32, comm: &str) -> Finding {
        let mut f = Finding::new(kind, key, Severity::Critical, t(0.0));
        f.actor = Some(FindingActor {
            pid,
            comm: comm.into(),
            parent: "systemd".into(),
            role: "other",
            description: comm.into(),
        });
        f.paths = vec![key.as_bytes().to_vec()];
        f.syscall = Some("umount2");
        f.errno = Some("EINVAL".into());
        f.count = 3;
        f
    }

    #[test]
    fn an_unmount_retried_by_an_actor_stuck_on_another_cause_is_told_under_it() {
        let mut all = vec![
            by(Kind::NotMounted, "/x/merged", 7, "agent"),
            by(Kind::ImmutableFile, "/x/diff/f", 7, "agent"),
            by(Kind::NotMounted, "/y", 8, "other"),
        ];
        let folded = fold(&mut all);
        assert_eq!(folded, vec![("not-mounted:/x/merged".to_string(), "immutable-file:/x/diff/f".to_string())]);
        assert_eq!(all.len(), 2);
        assert!(all[0]
            .evidence
            .iter()
            .any(|e| e.source == "consequence" && e.fact.contains("/x/merged") && e.fact.contains("EINVAL 3 times")));
        // Another actor's not-mounted stands on its own.
        assert_eq!(all[1].kind, Kind::NotMounted);
    }
}
