//! removal-storm's tests: storms and near misses, as records and counts.

use super::super::fake::*;
use super::*;
use podstuck_common::Syscall;

fn removals(d: &mut RemovalStorm, dir: &str, comm: &str, pid: u32, n: u64, from: f64, per_s: f64) {
    for i in 0..n {
        let at = from + i as f64 / per_s;
        let c = call_by(at, comm, pid, Syscall::Unlinkat, libc::AT_REMOVEDIR as u64, &format!("{dir}/d{i:07}"), 0);
        d.observe(&c.event, &c.identity);
    }
}

#[test]
fn a_sampled_storm_is_counted_by_what_its_records_carry() {
    // 500 records a second, each carrying 20 calls: 10,000 calls/s.
    let dir = "/var/lib/docker/volumes/big/_data";
    let mut d = RemovalStorm::new("node-1".into());
    let mut node = FakeNode::default();
    node.remaining.insert(dir.as_bytes().to_vec(), 150_000);
    for i in 0..2_500u64 {
        let mut c = call_by(
            i as f64 / 500.0,
            "dockerd",
            77,
            Syscall::Unlinkat,
            libc::AT_REMOVEDIR as u64,
            &format!("{dir}/d{i:07}"),
            0,
        );
        c.event.represents = 20;
        d.observe(&c.event, &c.identity);
    }
    let found = run(&mut d, &mut node, &[], 5.0);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].details["calls"], 50_000);
    let rate = found[0].details["rate_per_s"].as_f64().unwrap();
    assert!((9_000.0..=11_000.0).contains(&rate), "{rate}");
}

#[test]
fn the_call_that_makes_a_storm_asks_for_its_review_at_once() {
    let dir = "/var/lib/docker/volumes/big/_data";
    let mut d = RemovalStorm::new("n".into());
    let mut node = FakeNode::default();
    node.remaining.insert(dir.as_bytes().to_vec(), 150_000);
    removals(&mut d, dir, "dockerd", 7, 19_999, 0.0, 5_000.0);
    assert!(!d.wants_review(), "under 20,000 calls: not yet");
    removals(&mut d, dir, "dockerd", 7, 1, 4.0, 5_000.0);
    assert!(d.wants_review(), "the 20,000th call over 2 s proves it");
    let found = run(&mut d, &mut node, &[], 4.0);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(!d.wants_review(), "the review told it");
    removals(&mut d, dir, "dockerd", 7, 100, 4.1, 5_000.0);
    assert!(!d.wants_review(), "a storm told asks for nothing more: the ticks follow it");
    assert_eq!(node.counts_within, vec![FIRST_COUNT_MS], "the review that tells it counts its tree briefly");
    removals(&mut d, dir, "dockerd", 7, 50_000, 4.2, 5_000.0);
    run(&mut d, &mut node, &[], 14.2);
    assert_eq!(node.counts_within, vec![FIRST_COUNT_MS, 0], "its recheck counts it whole");
}

#[test]
fn common_dir_is_by_whole_components() {
    assert_eq!(common_dir(b"/a/bc/d", b"/a/bc/e"), b"/a/bc");
    assert_eq!(common_dir(b"/a/bc", b"/a/bd"), b"/a");
    assert_eq!(common_dir(b"/a/bc", b"/a/bc/x"), b"/a/bc");
    assert_eq!(common_dir(b"/x", b"/y"), b"/");
}

#[test]
fn dockerd_removing_a_volume_of_empty_dirs_is_a_storm_with_an_estimate() {
    let dir = "/var/lib/docker/volumes/big/_data";
    let mut d = RemovalStorm::new("node-1".into());
    let mut node = FakeNode::default();
    node.remaining.insert(dir.as_bytes().to_vec(), 150_000);
    removals(&mut d, dir, "dockerd", 77, 50_000, 0.0, 10_000.0);
    let found = run(&mut d, &mut node, &[], 5.0);
    assert_eq!(found.len(), 1, "{found:?}");
    let f = &found[0];
    assert_eq!(f.kind, Kind::RemovalStorm);
    assert_eq!(f.actor.as_ref().unwrap().comm, "dockerd");
    assert_eq!(f.paths, vec![dir.as_bytes().to_vec()]);
    assert_eq!(f.details["calls"], 50_000);
    assert_eq!(f.details["remaining"], 150_000);
    let rate = f.details["rate_per_s"].as_f64().unwrap();
    assert!((9_000.0..=11_000.0).contains(&rate), "{rate}");
    let eta = f.details["eta_s"].as_f64().unwrap();
    assert!((13.0..=17.0).contains(&eta), "{eta}");
    assert_eq!(f.fix, "kubectl drain --ignore-daemonsets --delete-emptydir-data -- node-1");
    assert!(f.summary.contains("entries are left"), "{}", f.summary);
    // The storm stops: resolved, once.
    let later = run(&mut d, &mut node, &[], 12.0);
    assert_eq!(later.len(), 1);
    assert_eq!(later[0].status, Status::Resolved);
    assert!(run(&mut d, &mut node, &[], 13.0).is_empty());
}

#[test]
fn the_prefix_is_the_tree_removed_not_its_parent() {
    let mut d = RemovalStorm::new("n".into());
    let root = "/var/lib/docker/volumes/v";
    // Go's RemoveAll: unlinkat(root) fails with EISDIR first, the root goes last.
    let first = call_by(0.0, "dockerd", 9, Syscall::Unlinkat, 0, root, -libc::EISDIR);
    d.observe(&first.event, &first.identity);
    removals(&mut d, &format!("{root}/_data"), "dockerd", 9, 30_000, 0.001, 10_000.0);
    let last = call_by(3.1, "dockerd", 9, Syscall::Unlinkat, libc::AT_REMOVEDIR as u64, root, 0);
    d.observe(&last.event, &last.identity);
    let f = &run(&mut d, &mut FakeNode::default(), &[], 3.2)[0];
    assert_eq!(f.paths, vec![root.as_bytes().to_vec()]);
}

#[test]
fn a_collector_running_behind_the_kernel_does_not_end_the_storm() {
    let mut d = RemovalStorm::new("n".into());
    let mut node = FakeNode::default();
    // Calls of the first 3 s read while the wall clock is already at 20 s.
    node.remaining.insert(b"/var/lib/docker/volumes/v/_data".to_vec(), 50_000);
    removals(&mut d, "/var/lib/docker/volumes/v/_data", "dockerd", 4, 30_000, 0.0, 10_000.0);
    let found = run(&mut d, &mut node, &[], 20.0);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].status, Status::Active);
    assert!(found[0].details["rate_per_s"].as_f64().unwrap() > 5_000.0);
    // Nothing more arrives: now it is over.
    assert_eq!(run(&mut d, &mut node, &[], 21.0)[0].status, Status::Resolved);
}

#[test]
fn rm_rf_of_ten_thousand_files_in_a_second_is_not_a_storm() {
    let mut d = RemovalStorm::new("n".into());
    let mut node = FakeNode::default();
    removals(&mut d, "/home/u/build", "rm", 5, 10_000, 0.0, 10_000.0);
    assert!(run(&mut d, &mut node, &[], 1.5).is_empty());
    assert!(run(&mut d, &mut node, &[], 10.0).is_empty());
}

#[test]
fn a_slow_trickle_is_not_a_storm_and_actors_are_counted_apart() {
    let mut d = RemovalStorm::new("n".into());
    let mut node = FakeNode::default();
    // 9k calls over 90 s: long, but 100/s.
    removals(&mut d, "/data/a", "kubelet", 1, 9_000, 0.0, 100.0);
    // Two processes of 9k each at a high rate for under 2 s: neither
    // reaches either count.
    removals(&mut d, "/data/b", "rm", 2, 9_000, 0.0, 5_000.0);
    removals(&mut d, "/data/b", "rm", 3, 9_000, 0.0, 5_000.0);
    assert!(run(&mut d, &mut node, &[], 90.0).is_empty());
}

#[test]
fn a_slow_storm_is_told_once_it_has_gone_on_ten_seconds() {
    // A slow node's storm: 600 calls a second, 20,000 would take 33 s.
    let dir = "/var/lib/docker/volumes/big/_data";
    let mut d = RemovalStorm::new("n".into());
    let mut node = FakeNode::default();
    removals(&mut d, dir, "dockerd", 7, 5_400, 0.0, 600.0);
    assert!(run(&mut d, &mut node, &[], 9.0).is_empty(), "not yet 10,000 calls nor 10 s");
    removals(&mut d, dir, "dockerd", 7, 5_400, 9.0, 600.0);
    let found = run(&mut d, &mut node, &[], 18.0);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, Kind::RemovalStorm);
    assert_eq!(found[0].details["calls"], 10_800);
}

/// Go's RemoveAll on a tree of empty directories: unlinkat(name, 0)
/// fails with EISDIR, then unlinkat(name, AT_REMOVEDIR).
fn remove_all(d: &mut RemovalStorm, dir: &str, pid: u32, dirs: u64, from: f64, dirs_per_s: f64) {
    for i in 0..dirs {
        let at = from + i as f64 / dirs_per_s;
        let path = format!("{dir}/d{i:07}");
        for (flags, ret) in [(0, -libc::EISDIR), (libc::AT_REMOVEDIR as u64, 0)] {
            let c = call_by(at, "dockerd", pid, Syscall::Unlinkat, flags, &path, ret);
            d.observe(&c.event, &c.identity);
        }
    }
}

#[test]
fn how_a_storm_stands_is_decided_before_it_is_said() {
    let dir = "/var/lib/docker/volumes/v/_data";
    let mut d = RemovalStorm::new("n".into());
    remove_all(&mut d, dir, 9, 30_000, 0.0, 10_000.0);
    let storm = d.by_pid.get_mut(&9).expect("a storm of pid 9");
    let v = RemovalStorm::judge(storm, t(3.0), false);
    assert_eq!(v.counts, KernelCounts { calls: 60_000, failed: 30_000, eisdir: 30_000 });
    assert!(v.remove_all, "half the calls are Go's RemoveAll's EISDIR");
    assert!(matches!(v.progress, Progress::Going { rate } if rate > 0.0), "{v:?}");
    assert_eq!((v.left.clone(), v.confidence()), (Left::NotCounted, Confidence::Likely));
    let counted = EntryEstimate { entries: 70_000, at_least: false, method: "counted".into() };
    storm.estimate = Some(Ok(counted.clone()));
    let v = RemovalStorm::judge(storm, t(3.0), true);
    assert_eq!((v.progress, v.rate()), (Progress::Stopped, 0.0));
    assert_eq!((v.left.clone(), v.confidence()), (Left::Entries(counted), Confidence::Confirmed));
    storm.estimate = Some(Ok(EntryEstimate { entries: 0, at_least: false, method: GONE.into() }));
    let v = RemovalStorm::judge(storm, t(3.0), false);
    assert_eq!((v.progress, v.left), (Progress::Done, Left::Gone), "a gone tree is done, calls or not");
    storm.estimate = Some(Err(Unreadable::Other("denied".into())));
    assert!(matches!(RemovalStorm::judge(storm, t(3.0), false).left, Left::Unread(_)));
}

#[test]
fn go_removeall_doubling_is_explained_and_a_gone_tree_is_done() {
    let dir = "/var/lib/docker/volumes/v/_data";
    let mut d = RemovalStorm::new("n".into());
    let mut node = FakeNode::default();
    node.remaining.insert(dir.as_bytes().to_vec(), 70_000);
    remove_all(&mut d, dir, 9, 30_000, 0.0, 10_000.0);
    let f = &run(&mut d, &mut node, &[], 3.0)[0];
    assert_eq!(f.details["calls"], 60_000);
    assert_eq!(f.details["failed_eisdir"], 30_000);
    assert!(f.summary.contains("two calls per directory") && f.summary.contains("EISDIR"), "{}", f.summary);
    assert!(f.summary.contains(" 70000 entries are left"), "{}", f.summary);
    assert!(!f.summary.contains("About at least"), "{}", f.summary);
    assert!(f.evidence.iter().any(|e| e.fact.contains("30000 failed, all with EISDIR")), "{:?}", f.evidence);
    // The rest goes, and the tree with it: done, said once.
    remove_all(&mut d, dir, 9, 1_000, 3.0, 10_000.0);
    node.remaining.clear();
    assert!(run(&mut d, &mut node, &[], 3.2).iter().all(|f| f.status == Status::Active));
    let done = &run(&mut d, &mut node, &[], 8.5)[0];
    assert_eq!(done.status, Status::Resolved);
    assert!(done.summary.contains("it is done: the tree is gone"), "{}", done.summary);
    assert!(!done.summary.contains("entries are left") && !done.summary.contains("wait meanwhile"), "{}", done.summary);
    assert!(run(&mut d, &mut node, &[], 9.0).is_empty());
}

#[test]
fn removals_elsewhere_by_the_same_process_neither_widen_the_tree_nor_count_in_it() {
    let dir = "/var/lib/docker/volumes/v/_data";
    let mut d = RemovalStorm::new("n".into());
    let mut node = FakeNode::default();
    node.remaining.insert(dir.as_bytes().to_vec(), 10_000);
    remove_all(&mut d, dir, 9, 25_000, 0.0, 10_000.0);
    // dockerd removes a container meanwhile.
    for i in 0..500 {
        let c = call_by(
            1.0 + i as f64 / 1000.0,
            "dockerd",
            9,
            Syscall::Unlinkat,
            0,
            &format!("/var/lib/docker/containers/c1/f{i}"),
            0,
        );
        d.observe(&c.event, &c.identity);
    }
    let f = &run(&mut d, &mut node, &[], 2.5)[0];
    assert_eq!(f.paths, vec![dir.as_bytes().to_vec()]);
    assert_eq!(f.details["calls"], 50_000);
    assert!(
        f.evidence.iter().any(|e| e.fact.contains("500 more removal calls by the same process elsewhere")),
        "{:?}",
        f.evidence
    );
}

#[test]
fn the_count_is_the_kernels_whatever_was_streamed() {
    // 10% of the calls streamed, one call each: the kernel counted them all.
    let dir = "/var/lib/docker/volumes/v/_data";
    let mut d = RemovalStorm::new("n".into());
    let mut node = FakeNode::default();
    node.remaining.insert(dir.as_bytes().to_vec(), 1);
    removals(&mut d, dir, "dockerd", 9, 25_000, 0.0, 10_000.0);
    d.counted(&[
        CountedCalls { pid: 9, syscall: Syscall::Unlinkat, errno: 0, count: 240_000 },
        CountedCalls { pid: 9, syscall: Syscall::Unlinkat, errno: libc::EISDIR as u16, count: 10_000 },
        CountedCalls { pid: 9, syscall: Syscall::Umount2, errno: 0, count: 3 },
        CountedCalls { pid: 10, syscall: Syscall::Unlinkat, errno: 0, count: 7 },
    ]);
    let f = &run(&mut d, &mut node, &[], 2.6)[0];
    assert_eq!(f.details["calls"], 250_000);
    assert_eq!(f.details["failed"], 10_000);
    assert_eq!(f.count, 250_000);
}
