//! End-to-end: `podstuck demo`, the README's first command, builds its
//! throwaway node, gets its actors stuck, diagnoses every scenario with the
//! real probes, and leaves nothing behind.

use std::collections::BTreeMap;
use std::process::Command;

use podstuck_tests::*;
use serde_json::Value;

kernel_test! {
    fn the_demo_diagnoses_every_scenario_and_removes_what_it_made() {
        let out = Command::new(podstuck_binary()).args(["demo", "--json", "--duration", "20s"]).output().expect("run podstuck demo");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "podstuck demo failed: {stderr}");
        let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("JSON line")).collect();
        assert_eq!(lines.first().map(|l| l["type"].clone()), Some("start".into()));
        assert_eq!(lines.last().map(|l| l["type"].clone()), Some("end".into()));
        assert!(!lines.iter().any(|l| l["type"] == "event"), "the demo prints the diagnosis, not every call");
        // The first emission of each kind.
        let mut first: BTreeMap<String, &Value> = BTreeMap::new();
        for l in lines.iter().filter(|l| l["type"] == "finding") {
            first.entry(l["kind"].as_str().unwrap().to_string()).or_insert(l);
        }
        let lab = stderr.split_whitespace().find(|w| w.starts_with("/var/tmp/podstuck-demo-")).expect("the lab's path is said").trim_end_matches(':').to_string();
        let expect = [
            ("volume-still-mounted", "kubelet", "umount "),
            ("removal-storm", "dockerd", "kubectl drain "),
            ("immutable-file", "dockerd", "chattr -i "),
            ("dir-not-empty", "kubelet", "rm -r --one-file-system "),
            // The holder killed only while its pid is still that process.
            ("mount-held", "containerd", "[ \"$(sed 's/.*) //' /proc/"),
            ("cgroup-busy", "kubelet", "echo 1 > "),
        ];
        for (kind, comm, fix) in expect {
            let f = first.get(kind).unwrap_or_else(|| panic!("no {kind} finding; findings: {first:?}\n{stderr}"));
            assert_eq!(f["actor"]["comm"], comm, "{kind}: {f}");
            assert_eq!(f["confidence"], "confirmed", "{kind}: {f}");
            assert!(f["fix"].as_str().unwrap().starts_with(fix), "{kind}: {f}");
            assert!(f["paths"][0].as_str().unwrap().contains("podstuck-demo-"), "{kind}: {f}");
        }
        // The causes that fail no removal: the kernel dropped the shim's
        // SIGTERM to the container's init, and the network DEL fails in
        // Debian's real bridge and host-local plugins.
        let ignored = first.get("sigterm-ignored").unwrap_or_else(|| panic!("no sigterm-ignored finding; findings: {first:?}\n{stderr}"));
        assert_eq!((&ignored["actor"]["comm"], &ignored["confidence"]), (&"containerd-shim".into(), &"confirmed".into()), "{ignored}");
        // The kill checks first that the pid is still the init podstuck saw.
        let pid = ignored["details"]["pid"].as_u64().unwrap();
        let start = ignored["details"]["start"].as_u64().unwrap();
        assert!(ignored["fix"].as_str().unwrap().ends_with(&format!("= {start} ] && kill -KILL {pid}")), "{ignored}");
        assert!(ignored["id"].as_str().unwrap().ends_with(&format!(":{pid}@{start}")), "{ignored}");
        let sandbox = first.get("sandbox-teardown-failing").unwrap_or_else(|| panic!("no sandbox-teardown-failing finding; findings: {first:?}\n{stderr}"));
        assert_eq!(sandbox["actor"]["comm"], "bridge", "{sandbox}");
        // The lab's containerd, by its executable: the copy named so.
        assert_eq!(sandbox["actor"]["parent"], "containerd", "{sandbox}");
        assert!(sandbox["summary"].as_str().unwrap().contains("host-local (exit code 1)"), "{sandbox}");
        // bridge's own error, read from its stdout on the attempt after the
        // first failure (the finding is told at the second).
        assert!(sandbox["details"]["plugin_said"].as_str().is_some_and(|s| s.contains("not a directory")), "{sandbox}");
        assert_eq!(sandbox["pod_uid"], "6b8d0f2a-4c6e-4d8a-8b0c-1d2e3f4a5b6c", "{sandbox}");
        // The lab's sandbox namespace is still there, as a failing DEL
        // leaves one: what confirms it.
        assert_eq!(sandbox["confidence"], "confirmed", "{sandbox}");
        assert!(sandbox.to_string().contains("is still there (nsfs)"), "{sandbox}");
        // kubelet (the lab's, by its executable) dialing a CSI plugin that is gone.
        let csi = first.get("csi-plugin-gone").unwrap_or_else(|| panic!("no csi-plugin-gone finding; findings: {first:?}\n{stderr}"));
        assert_eq!((&csi["actor"]["comm"], &csi["confidence"]), (&"kubelet".into(), &"confirmed".into()), "{csi}");
        assert_eq!(csi["details"]["driver"], "csi.podstuck.demo", "{csi}");
        assert_eq!(csi["pod_uid"], "1a3c5e7f-2b4d-4f6a-8c9e-0d1f2a3b4c5d", "{csi}");
        let storm = first["removal-storm"];
        assert!(storm["details"]["calls"].as_u64().unwrap() >= 20_000, "{storm}");
        assert!(storm["details"]["remaining"].is_u64(), "{storm}");
        assert!(first["volume-still-mounted"]["fix"].as_str().unwrap().ends_with("/volumes/kubernetes.io~csi/pvc-demo/mount"));
        assert!(first["cgroup-busy"]["fix"].as_str().unwrap().ends_with("/cgroup.kill"));
        // Nothing left: no lab, no mount, no cgroup.
        assert!(!std::path::Path::new(&lab).exists(), "{lab} is still there");
        let left = mountinfo::below(&[&lab]);
        assert!(left.is_empty(), "demo mounts are left: {left:?}");
        let pid = lab.rsplit('-').next().unwrap();
        assert!(!cgroup2_root().join(format!("podstuck-demo-{pid}")).exists(), "the demo cgroup is left");
        let netns = format!("/run/netns/cni-podstuck-demo-{pid}");
        assert!(!std::path::Path::new(&netns).exists(), "the demo's network namespace {netns} is left");
        assert!(stderr.contains("removed"), "{stderr}");
    }
}
