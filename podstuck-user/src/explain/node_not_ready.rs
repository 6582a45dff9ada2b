//! P11 `node-not-ready`: the pod's node is NotReady, unreachable (its
//! kubelet stopped reporting: Ready Unknown), or gone. Only that node's
//! kubelet can confirm a pod's containers stopped, so the API keeps the pod
//! Terminating forever, and a StatefulSet or a `Recreate` Deployment waits
//! on it.
//!
//! The fix is a forced deletion, and it says its risk: the containers may
//! still run on that node (a partition, not a crash), and a replacement
//! would then run beside them.

use super::snapshot::{micro_time, time, ApiSnapshot, SOURCE};
use crate::diagnose::{human_duration, Finding, Kind, Severity};

pub fn detect(snapshot: &ApiSnapshot) -> Vec<Finding> {
    let Some(node) = snapshot.node_name() else { return Vec::new() };
    let severity = match snapshot.deletion() {
        Some(_) => Severity::Critical,
        None => Severity::Warning,
    };
    if snapshot.node_missing {
        let since = snapshot.deletion().unwrap_or(snapshot.now);
        let mut f = snapshot.finding(Kind::NodeNotReady, node, severity, since);
        f.summary = format!(
            "pod {} is bound to node {node}, which no longer exists: no kubelet will ever report its containers stopped; the pod garbage collector removes such pods only after a while.",
            snapshot.pod_words()
        );
        f.evidence(SOURCE, format!("node {node}: not found"));
        f.fix = force_delete(snapshot);
        f.advice.push(format!("safe once {node} is really gone (deleted from the cloud, not just from the API): nothing of the pod can still run"));
        return vec![f];
    }
    let Some(n) = &snapshot.node else { return Vec::new() };
    let ready = n.status.iter().flat_map(|s| s.conditions.iter().flatten()).find(|c| c.type_ == "Ready");
    let Some(ready) = ready else { return Vec::new() };
    if ready.status == "True" {
        return Vec::new();
    }
    let since = ready.last_transition_time.as_ref().map(time).unwrap_or(snapshot.now);
    let heartbeat = ready.last_heartbeat_time.as_ref().map(time);
    let renewed =
        snapshot.lease.as_ref().and_then(|l| l.spec.as_ref()).and_then(|s| s.renew_time.as_ref()).map(micro_time);
    let unreachable = ready.status == "Unknown";
    let mut f = snapshot.finding(Kind::NodeNotReady, node, severity, since);
    let state = match unreachable {
        true => "unreachable (its kubelet stopped reporting: Ready is Unknown)",
        false => "NotReady (its kubelet reports it not ready)",
    };
    let last = [heartbeat, renewed].into_iter().flatten().max();
    f.summary = format!(
        "node {node} of pod {} has been {state} for {}{}: the pod's deletion waits on that kubelet, which {}.",
        snapshot.pod_words(),
        human_duration(snapshot.ago(since)),
        last.map(|t| format!(", last heard from {} ago", human_duration(snapshot.ago(t)))).unwrap_or_default(),
        match unreachable {
            true => "does not answer, so the API never learns the containers stopped",
            false => "does not tear pods down while NotReady",
        }
    );
    let reason = ready.reason.as_deref().unwrap_or("");
    let message = ready.message.as_deref().unwrap_or("");
    f.evidence(
        SOURCE,
        format!(
            "node {node}: condition Ready={} since {} ({reason}: {message})",
            ready.status,
            snapshot.when_words(since)
        ),
    );
    if let Some(t) = heartbeat {
        f.evidence(SOURCE, format!("node {node}: last status heartbeat {}", snapshot.when_words(t)));
    }
    match renewed {
        Some(t) => f.evidence(SOURCE, format!("lease kube-node-lease/{node}: renewTime {}", snapshot.when_words(t))),
        None if snapshot.lease.is_none() => {}
        None => f.evidence(SOURCE, format!("lease kube-node-lease/{node}: never renewed")),
    }
    for taint in n.spec.iter().flat_map(|s| s.taints.iter().flatten()) {
        if taint.key.starts_with("node.kubernetes.io/") {
            let added = taint
                .time_added
                .as_ref()
                .map(|t| format!(" since {}", snapshot.when_words(time(t))))
                .unwrap_or_default();
            f.evidence(SOURCE, format!("node {node}: taint {}:{}{added}", taint.key, taint.effect));
        }
    }
    f.fix = force_delete(snapshot);
    f.advice.push(format!(
        "risk: the containers may still run on {node} (a network partition, not a crash): a forced deletion lets a StatefulSet or Recreate Deployment start a replacement beside them, \
         two writers on the same data. Check first that {node} is down or cut off for good (its console or power state, `{}`), or drain it when it comes back",
        crate::words::CommandLine::new("ssh").operands([node])
    ));
    f.advice.push(format!("once {node} is known down: {} removes all its pods safely (the pod garbage collector), and a volume attached there can be detached", super::commands::delete_node(node)));
    f.detail("ready", ready.status.as_str());
    vec![f]
}

fn force_delete(snapshot: &ApiSnapshot) -> String {
    super::commands::force_delete(snapshot.name(), snapshot.namespace())
}

#[cfg(test)]
mod tests {
    use super::super::tests::{at, deleted_pod, lease, node, snapshot};
    use super::*;

    #[test]
    fn an_unreachable_node_is_told_with_its_last_heartbeat_and_a_forced_deletion_with_its_risk() {
        let mut s = snapshot(deleted_pod(at(100.0)), at(1000.0));
        s.node = Some(node("worker-1", "Unknown", at(40.0)));
        s.lease = Some(lease("worker-1", at(30.0)));
        let found = detect(&s);
        assert_eq!(found.len(), 1);
        let f = &found[0];
        assert_eq!((f.kind, f.severity), (Kind::NodeNotReady, Severity::Critical));
        assert!(f.summary.contains("node worker-1 of pod shop/web-0 has been unreachable"), "{}", f.summary);
        assert!(f.summary.contains("for 16m00s, last heard from 16m00s ago"), "{}", f.summary);
        assert!(
            f.evidence.iter().any(|e| e.fact.starts_with("lease kube-node-lease/worker-1: renewTime")),
            "{:?}",
            f.evidence
        );
        assert!(
            f.evidence.iter().any(|e| e.fact.contains("taint node.kubernetes.io/unreachable:NoExecute")),
            "{:?}",
            f.evidence
        );
        assert_eq!(f.fix, "kubectl delete pod -n shop --grace-period=0 --force -- web-0");
        assert!(f.advice[0].contains("may still run on worker-1"), "{:?}", f.advice);
    }

    #[test]
    fn a_ready_node_is_no_finding_and_a_missing_one_is() {
        let mut s = snapshot(deleted_pod(at(100.0)), at(1000.0));
        s.node = Some(node("worker-1", "True", at(40.0)));
        assert!(detect(&s).is_empty());
        s.node = None;
        s.node_missing = true;
        assert!(detect(&s)[0].summary.contains("no longer exists"));
    }
}
