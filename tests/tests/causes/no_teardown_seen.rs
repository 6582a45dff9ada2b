//! `no-teardown-seen` (P15): a pod nothing on this node works on; the run
//! ends with a finding pointing to `podstuck explain` (the API's view).

use podstuck_tests::*;
use serde_json::Value;

use super::secs;

kernel_test! {
    /// `watch --pod UID` for 30 s on a pod nothing on this node touches:
    /// the run ends with no-teardown-seen, pointing to `podstuck explain`
    /// (the API's view), a warning, so the run still exits 0.
    fn a_pod_nothing_works_on_is_no_teardown_seen_pointing_to_explain(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid().to_string();
        std::fs::create_dir_all(pod.dir()).unwrap();
        let watch = Watch::start(&["--findings", "--kubelet-root", root.arg(), "--pod", &uid, "--duration", "30s"]);
        let done = watch.finish(secs(120));
        assert!(done.status.success(), "a run ending with a warning exits 0: {} {}", done.status, done.stderr);
        assert!(done.end.is_some(), "no end line: {}", done.stderr);
        let told: Vec<&Value> = done.findings.iter().filter(|f| f["kind"] == "no-teardown-seen").collect();
        let [finding] = told[..] else { panic!("one no-teardown-seen finding, not {told:?}") };
        let mut e = Expect::new(finding);
        e.shape_of_no_call();
        e.eq("/status", "active");
        e.eq("/severity", "warning");
        e.eq("/pod_uid", uid.as_str());
        e.starts_with("/summary", &format!("Nothing on this node is working on pod {uid}'s teardown"));
        e.eq("/fix", format!("podstuck explain {uid}"));
        assert!(e.failures().is_empty(), "{finding}\nunmet: {}", e.failures().join("\n       "));
    }
}
