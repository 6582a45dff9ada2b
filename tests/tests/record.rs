//! End-to-end: `podstuck record` saves a real incident (a CSI volume still
//! mounted, kubelet on its backoff) and `podstuck replay` diagnoses it again
//! from the file alone, with the same findings; a cut or damaged file is
//! said clearly, never a panic.

use std::process::Command;
use std::time::Duration;

use podstuck_tests::*;
use serde_json::Value;

/// Every finding line (`finding`, `finding-update`) of `lines`: type, id,
/// kind, revision, fix.
fn findings<'a>(lines: impl IntoIterator<Item = &'a Value>) -> Vec<(String, String, String, u64, String)> {
    lines
        .into_iter()
        .filter(|v| v["type"] == "finding" || v["type"] == "finding-update")
        .map(|v| {
            let text = |k: &str| v[k].as_str().unwrap_or_default().to_string();
            (text("type"), text("id"), text("kind"), v["revision"].as_u64().unwrap_or(0), text("fix"))
        })
        .collect()
}

/// The JSON lines of an output.
fn json_lines(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout).lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).collect()
}

kernel_test! {
    fn a_recorded_incident_replays_to_the_same_findings(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let volume = pod.csi_volume("pvc-rec");
        let _tree = CreatedDirs::create(&volume);
        let _mount = TmpfsMount::new(&volume.join("mount"), "size=1m");
        let file = scratch.path().join("incident.podstuck");
        // Attached once it prints its start line; the actor then fails on kubelet's backoff.
        let podstuck = Watch::spawn(
            Command::new(podstuck_binary())
                .arg("record")
                .arg(&file)
                .args(["--json", "--findings", "--concurrent", "--duration", "6s", "--pod", pod.uid(), "--kubelet-root"])
                .arg(root.path()),
        );
        let actor = actor()
            .args(["--comm", "kubelet", "--backoff-ms", "500", "--repeat", "4", "rmdir-at"])
            .arg(&volume)
            .arg("mount")
            .output()
            .expect("run the actor");
        assert!(String::from_utf8_lossy(&actor.stdout).contains(&format!("errno {}", libc::EBUSY)));
        let live = podstuck.finish(Duration::from_secs(60));
        let stderr = &live.stderr;
        // The volume is still mounted when --duration ends: exit 3, and the record is whole.
        assert_eq!(live.status.code(), Some(3), "{stderr}");
        assert!(stderr.contains("recorded"), "{stderr}");
        let live_findings = findings(&live.finding_lines);
        assert!(live_findings.iter().any(|f| f.2 == "volume-still-mounted"), "{live_findings:?}\n{stderr}");

        let replay = Command::new(podstuck_binary()).arg("replay").arg(&file).arg("--json").output().expect("run podstuck replay");
        let replay_err = String::from_utf8_lossy(&replay.stderr);
        assert!(replay.status.success(), "{replay_err}");
        assert_eq!(findings(&json_lines(&replay.stdout)), live_findings, "replay differs from the live run\n{replay_err}");

        // The file is not overwritten by a second record.
        let again = Command::new(podstuck_binary()).arg("record").arg(&file).args(["--concurrent", "--duration", "1s"]).output().unwrap();
        assert!(!again.status.success());
        assert!(String::from_utf8_lossy(&again.stderr).contains("exists"), "{}", String::from_utf8_lossy(&again.stderr));

        // Cut short: what is there replays, with a warning. Damaged: a clear error.
        let bytes = std::fs::read(&file).unwrap();
        let cut = scratch.path().join("cut.podstuck");
        std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
        let out = Command::new(podstuck_binary()).arg("replay").arg(&cut).output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("ends early") || said.contains("corrupt") || said.contains("damaged"), "{said}");
        assert!(!said.contains("panicked"), "{said}");
        let junk = scratch.path().join("junk.podstuck");
        std::fs::write(&junk, b"not a record at all\n").unwrap();
        let out = Command::new(podstuck_binary()).arg("replay").arg(&junk).output().unwrap();
        // Not a record: asked wrongly, exit 2 (issue 42).
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("not a podstuck record"), "{}", String::from_utf8_lossy(&out.stderr));
    }
}
