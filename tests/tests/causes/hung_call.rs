//! `hung-call` (P6): kubelet's unlink in a FUSE volume whose daemon is
//! stopped, in flight for longer than `--hung-after`; the finding names
//! the daemon and the connection to abort.

use podstuck_tests::*;

use super::{all_say, one_stuck_fuse_connection, podstuck, secs, stop, FINDING_TIMEOUT};

kernel_test! {
    fn p6_a_call_hung_on_a_stopped_fuse_daemon_is_named_with_abort(test) {
        let _alone = one_stuck_fuse_connection();
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid();
        let pv = pod.create_csi_volume("pvc-fuse");
        let mount = pv.join("mount");
        let mut fuse = FuseMount::start(&mount);
        let victim = mount.join("a");
        // While the daemon answers, removal works.
        let (_, healthy) = start_actor(os!["unlink", victim]).finish(secs(10));
        all_say(&healthy, "unlink ok");
        fuse.stop_server();
        let mut watch = podstuck(&root, &["--pod", uid]);

        let kubelet = start_actor(os!["--comm", "kubelet", "unlink", victim]);
        // The unlink waits for the daemon's answer to LOOKUP: no line, and the
        // task sleeps in the FUSE request wait (interruptible, so state S).
        poll_until_else("the unlink to wait in request_wait_answer", secs(10), || match wchan(kubelet.pid()) {
            wchan if wchan == "request_wait_answer" => Ok(()),
            wchan => Err(format!("wchan {wchan:?}, lines {:?}", kubelet.lines())),
        });
        assert!(kubelet.lines().is_empty(), "the unlink returned: {:?}", kubelet.lines());

        if let Some(mut watch) = watch.take() {
            let server = fuse.server_pid();
            let connection = fuse.connection();
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "hung-call",
                |e| {
                    e.eq("/paths/0", text(&victim));
                    e.eq("/pod_uid", uid);
                    e.eq("/actor/comm", "kubelet");
                    e.eq("/actor/pid", kubelet.pid());
                    e.eq("/syscall", UNLINK_CALL);
                    e.that(e.mentions_number("/evidence", server.into()), format!("evidence should name the FUSE daemon, pid {server}"));
                    e.that(e.mentions("/evidence", "stopped"), "evidence should say the daemon is stopped");
                    // Preceded by mounting fusectl when the node has not (this one has not).
                    let abort = format!("echo 1 > /sys/fs/fuse/connections/{connection}/abort");
                    e.that(e.text("/fix").ends_with(&abort), format!("/fix should end with {abort}"));
                },
            );
            // What the fix does: the hung call fails instead of hanging.
            fuse.abort();
            stop(watch, &finding);
        }
        fuse.abort();
        let (_, lines) = kubelet.finish(secs(10));
        let aborted = [libc::ECONNABORTED, libc::ENOTCONN].map(|e| format!("unlink errno {e}"));
        assert!(lines.len() == 1 && aborted.contains(&lines[0]), "after the abort: {lines:?}");
    }
}
