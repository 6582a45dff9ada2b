//! API objects that more than one test serves, built here once: a kubelet
//! Warning event about pod shop/web-0 and a node's lease, used by
//! podstuck-user's explain tests and the end-to-end explain and
//! `explain --all` tests alike.

use std::ops::Range;
use std::time::{SystemTime, UNIX_EPOCH};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

/// A Warning event `reason` that kubelet on worker-1 reported about pod
/// shop/web-0 (whose UID is `uid`), `count` times over `seen`.
pub fn kubelet_warning(uid: &str, reason: &str, message: &str, count: i32, seen: Range<SystemTime>) -> Event {
    Event {
        metadata: ObjectMeta {
            name: Some(format!("web-0.{}", reason.to_lowercase())),
            namespace: Some("shop".into()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            kind: Some("Pod".into()),
            name: Some("web-0".into()),
            namespace: Some("shop".into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        reason: Some(reason.into()),
        message: Some(message.into()),
        type_: Some("Warning".into()),
        count: Some(count),
        first_timestamp: Some(Time(stamp(seen.start))),
        last_timestamp: Some(Time(stamp(seen.end))),
        source: Some(EventSource { component: Some("kubelet".into()), host: Some("worker-1".into()) }),
        ..Default::default()
    }
}

/// Node `node`'s lease in kube-node-lease, held by the node and last
/// renewed at `renewed`.
pub fn lease(node: &str, renewed: SystemTime) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(node.into()),
            namespace: Some("kube-node-lease".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(node.into()),
            renew_time: Some(MicroTime(stamp(renewed))),
            ..Default::default()
        }),
    }
}

/// `t` as the API's times hold it, to the nanosecond.
fn stamp(t: SystemTime) -> Timestamp {
    let since = t.duration_since(UNIX_EPOCH).expect("a time after 1970");
    Timestamp::new(since.as_secs() as i64, since.subsec_nanos() as i32).expect("a time the API can state")
}
