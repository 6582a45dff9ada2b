//! End-to-end: `podstuck watch --listen ADDR`, the DaemonSet mode. A real
//! Prometheus scrapes it through a removal storm and a volume left
//! mounted (P1), and its HTTP API gives back the storm's calls, exactly,
//! and the finding, labelled with the node. A busy port refuses the run
//! before anything is traced; `/findings` is the current findings as JSON;
//! other paths are 404, other methods 405; slow clients hold neither the
//! tracer nor other clients; `/metrics` stays bounded under a storm of
//! many paths; `/ready` says the programs are attached (the DaemonSet's
//! readiness probe).
//!
//! Runs as root; see `kernel_test!` for the skip rule. Each test has its
//! own port, kubelet root and pods.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use podstuck_tests::scrape::{free_port, get, send, Prometheus};
use podstuck_tests::*;
use serde_json::Value;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A free address on this node only, for a podstuck to listen on.
fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// `/metrics` through a Prometheus text-format parser.
fn scrape(addr: SocketAddr) -> (String, prometheus_parse::Scrape) {
    let answer = get(addr, "/metrics");
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(answer.head.contains("Content-Type: text/plain; version=0.0.4"), "{}", answer.head);
    let parsed =
        prometheus_parse::Scrape::parse(answer.body.lines().map(|l| Ok(l.to_string()))).expect("/metrics parses");
    (answer.body, parsed)
}

fn value(sample: &prometheus_parse::Sample) -> f64 {
    match sample.value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => v,
        _ => f64::NAN,
    }
}

kernel_test! {
    fn prometheus_counts_a_storm_exactly_and_sees_a_stuck_volume(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        // P1: the CSI driver said NodeUnpublish worked and left this mounted.
        let stuck = root.new_pod();
        let pv = stuck.create_csi_volume("pvc-listen");
        let mount = pv.join("mount");
        let _volume = TmpfsMount::new(&mount, "size=1m");
        // The storm: another pod's emptyDir, removed file by file.
        let storming = root.new_pod();
        let volume = storming.empty_dir("scratch");
        std::fs::create_dir_all(&volume).unwrap();

        let addr = free_addr();
        let node = "node-under-test-7";
        let listen = addr.to_string();
        let mut watch = Watch::start(&[
            "--findings", "--kubelet-root", root.arg(), "--pod", stuck.uid(), "--pod", storming.uid(),
            "--listen", &listen, "--node-name", node,
        ]);
        let Some(prometheus) = Prometheus::start(&scratch.path().join("prometheus"), addr) else { return };
        prometheus.await_value("podstuck_up", 1.0, secs(30));
        let info = prometheus.await_value(&format!("podstuck_build_info{{node=\"{node}\"}}"), 1.0, secs(10));
        assert_eq!(info["metric"]["version"], env!("CARGO_PKG_VERSION"), "{info}");

        let done = actor().args([OsStr::new("unlink-many"), volume.as_os_str(), OsStr::new("10000")]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&done.stdout).trim(), "unlink-many 10000 unlinked, 0 failed");
        // Counted in the kernel, whatever was streamed: exact.
        prometheus.await_value("sum(podstuck_call_duration_seconds_count{syscall=\"unlink\",outcome=\"ok\"})", 10_000.0, secs(60));
        // A pod named by --pod has series of its own from the start.
        let per_pod = format!("sum(podstuck_pod_calls_total{{pod_uid=\"{}\",syscall=\"unlink\",outcome=\"ok\"}})", storming.uid());
        prometheus.await_value(&per_pod, 10_000.0, secs(10));
        let health = get(addr, "/healthz");
        assert_eq!((health.status, health.body.as_str()), (200, "ok\n"), "{health:?}");
        // Ready for a rollout: its programs are attached.
        let ready = get(addr, "/ready");
        assert_eq!((ready.status, ready.body.as_str()), (200, "tracing: podstuck's programs are attached\n"), "{ready:?}");

        let kubelet = start_actor(["--comm", "kubelet", "--backoff-ms", "500", "--repeat", "0", "rmdir-at", text(&pv), "mount"]);
        let finding = watch.await_finding(secs(60), |f| f["kind"] == "volume-still-mounted", |e| {
            e.eq("/pod_uid", stuck.uid());
            e.eq("/paths/0", text(&mount));
        });
        let series = format!("podstuck_findings{{kind=\"volume-still-mounted\",pod_uid=\"{}\"}}", stuck.uid());
        let sample = prometheus.await_value(&series, 1.0, secs(30));
        assert_eq!(sample["metric"]["node"], node, "{sample}");
        assert_eq!(sample["metric"]["severity"], "critical", "{sample}");

        // /findings: the same finding, as --json says it, on this node.
        let answer = get(addr, "/findings");
        assert_eq!(answer.status, 200, "{answer:?}");
        assert!(answer.head.contains("Content-Type: application/json"), "{}", answer.head);
        let page: Value = serde_json::from_str(&answer.body).expect("/findings is JSON");
        assert_eq!(page["node"], node);
        let listed = page["findings"].as_array().unwrap().iter().find(|f| f["id"] == finding["id"]).unwrap_or_else(|| panic!("{page}"));
        assert_eq!(listed["node"], node);
        assert_eq!(listed["type"], "finding");
        for key in ["kind", "pod_uid", "paths", "fix", "severity", "first_seen"] {
            assert_eq!(listed[key], finding[key], "{key}");
        }
        drop(kubelet);
        let finished = watch.stop(libc::SIGINT);
        assert!(finished.status.success(), "{}", finished.stderr);
        assert!(finished.stderr.contains(&format!("serving http://{addr}/metrics and http://{addr}/findings")), "{}", finished.stderr);
    }
}

kernel_test! {
    fn a_busy_port_or_an_address_not_here_is_refused_before_tracing() {
        let busy = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = busy.local_addr().unwrap().port();
        let cases = [
            (format!("127.0.0.1:{port}"), "the port is in use"),
            // TEST-NET-1: on no interface of a test machine.
            ("192.0.2.1:9464".to_string(), "this node has no such address"),
        ];
        for (listen, said) in cases {
            let started = Instant::now();
            let out = Command::new(podstuck_binary())
                .args(["watch", "--json", "--concurrent", "--listen", &listen])
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{listen}: {stderr}");
            assert!(stderr.contains(&format!("podstuck: error: --listen {listen}: {said}")), "{listen}: {stderr}");
            assert!(out.stdout.is_empty(), "{listen}: traced before refusing: {}", String::from_utf8_lossy(&out.stdout));
            assert!(started.elapsed() < secs(30), "{listen}: refused only after {:?}", started.elapsed());
        }
        // A value that is no address at all is refused by the command line.
        let stderr = podstuck_refuses(&["watch", "--listen", ":9464"]);
        assert!(stderr.contains("0.0.0.0:9464 for every interface"), "{stderr}");
    }
}

kernel_test! {
    fn odd_requests_and_slow_clients_hold_nothing(test) {
        let scratch = test.scratch();
        let (root, pod, volume) = pod_with_empty_dir(scratch.path(), "v");
        let addr = free_addr();
        let listen = addr.to_string();
        let watch = Watch::start(&["--kubelet-root", root.arg(), "--pod", pod.uid(), "--listen", &listen]);

        assert_eq!(get(addr, "/").status, 404);
        assert_eq!(get(addr, "/metrics/extra").status, 404);
        for method in ["POST", "PUT", "DELETE"] {
            let answer = send(addr, format!("{method} /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").as_bytes()).unwrap();
            assert_eq!(answer.status, 405, "{method}: {answer:?}");
            assert!(answer.head.contains("\r\nAllow: GET, HEAD"), "{answer:?}");
        }
        let head = send(addr, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert!(head.status == 200 && head.body.is_empty(), "{head:?}");
        let huge = format!("GET /metrics HTTP/1.1\r\nX-Filler: {}\r\n\r\n", "a".repeat(64 * 1024));
        assert_eq!(send(addr, huge.as_bytes()).unwrap().status, 431);
        assert_eq!(send(addr, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n").unwrap().status, 400, "TLS is not spoken");
        assert_eq!(send(addr, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap().status, 505);

        // A client that never ends its request holds no one else up.
        let mut slow = TcpStream::connect(addr).unwrap();
        slow.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
        let asked = Instant::now();
        scrape(addr);
        assert!(asked.elapsed() < secs(2), "a scrape beside a slow client took {:?}", asked.elapsed());
        // Many, more than are served at once: the tracer goes on.
        let many: Vec<TcpStream> = (0..40)
            .map(|_| {
                let mut s = TcpStream::connect(addr).unwrap();
                let _ = s.write_all(b"GET /metrics HTTP/1.1\r\n");
                s
            })
            .collect();
        let ran = actor().args([OsStr::new("unlink-many"), volume.as_os_str(), OsStr::new("20")]).output().unwrap();
        assert!(ran.status.success());
        wait_until("a call printed while slow clients were connected", secs(10), || {
            watch.events_so_far().iter().any(|e| e["syscall"] == "unlink")
        });
        // They are let go within the connection time (10 s; those beyond
        // the connections served at once, 10 s after they are taken): each
        // sees its end. Then all is served again.
        for mut client in many.into_iter().chain([slow]) {
            client.set_read_timeout(Some(secs(60))).unwrap();
            let ended = std::io::copy(&mut client, &mut std::io::sink());
            let held = |e: &std::io::Error| matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut);
            assert!(!ended.as_ref().is_err_and(held), "a slow client still held after 60 s: {ended:?}");
        }
        let (_, parsed) = scrape(addr);
        let up = parsed.samples.iter().find(|s| s.metric == "podstuck_up").expect("podstuck_up");
        assert_eq!(value(up), 1.0);
        let finished = watch.stop(libc::SIGINT);
        assert!(finished.status.success(), "{}", finished.stderr);
    }
}

kernel_test! {
    fn metrics_stay_bounded_under_a_storm_of_many_paths(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        // 300 real pods, one failed unlink each.
        let (_, real) = root.pods_missing_a_file(300);
        // And 3,000 made-up pods, each a path of its own.
        let made_up: Vec<_> = (0..3_000).map(|_| cstring(&root.pod(&new_pod_uid()).dir().join("volumes/x/y"))).collect();
        let addr = free_addr();
        let listen = addr.to_string();
        // The always-on run: whole node, --listen, lines on stdout.
        let watch = Watch::start(&["--findings", "--kubelet-root", root.arg(), "--syscall", "unlink", "--listen", &listen]);
        let failed = |parsed: &prometheus_parse::Scrape| -> f64 {
            parsed
                .samples
                .iter()
                .filter(|s| s.metric == "podstuck_call_duration_seconds_count" && s.labels.get("outcome") == Some("ENOENT"))
                .map(value)
                .sum()
        };
        // The made-up pods by another process (nobody), the real ones by this one.
        assert_eq!(unlink_as_nobody(&made_up, Duration::ZERO), 3_000);
        for path in &real {
            assert_eq!(sys_unlink(path.as_ptr()), libc::ENOENT);
        }
        // Every call counted, in the node's series, within the page's bound
        // whatever the paths named.
        poll_until_else("every call counted on /metrics", secs(60), || {
            let (body, parsed) = scrape(addr);
            let series = parsed.samples.len();
            eprintln!("/metrics: {} bytes, {series} series", body.len());
            assert!(series <= 500, "{series} series");
            assert!(body.len() <= 100 * 1024, "/metrics is {} bytes", body.len());
            // Only pods with a finding could have series of their own.
            let pods: BTreeSet<&str> = parsed.samples.iter().filter(|s| s.metric == "podstuck_pod_calls_total").filter_map(|s| s.labels.get("pod_uid")).collect();
            assert!(pods.len() <= 64, "{} pods with series", pods.len());
            match failed(&parsed) {
                counted if counted >= 3_300.0 => Ok(()),
                counted => Err(format!("{counted} of 3300 calls counted")),
            }
        });
        let finished = watch.stop(libc::SIGINT);
        assert!(finished.status.success(), "{}", finished.stderr);
    }
}

#[test]
fn the_daemonset_runs_a_watch_podstuck_accepts_unprivileged() {
    let documents = harness::deploy_manifest("base/podstuck-daemonset.yaml");
    let daemonset = documents.iter().find(|d| d["kind"] == "DaemonSet").expect("a DaemonSet");
    let pod = &daemonset["spec"]["template"];
    let spec = &pod["spec"];
    assert_eq!(spec["hostPID"], true, "the kernel's pids are the host's");
    let container = &spec["containers"][0];
    // The name deploy/base/kustomization.yaml's `images:` entry replaces.
    assert_eq!(container["image"], "podstuck");
    let args: Vec<&str> = container["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(args[0], "watch", "{args:?}");
    assert!(args.contains(&"--concurrent"), "{args:?}");

    // The arguments are podstuck's: the command line takes them all (an
    // --interval of zero then stops it before it does anything).
    let out =
        Command::new(podstuck_binary()).args(&args).args(["--interval", "0s"]).stdin(Stdio::null()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("'--interval <INTERVAL>': 0s: the histogram files would be rewritten without a pause"),
        "{args:?}: {stderr}"
    );
    assert_eq!(out.status.code(), Some(2));

    // Served where Prometheus is told to scrape, on every interface.
    let listen = args.iter().position(|a| *a == "--listen").map(|i| args[i + 1]).expect("--listen");
    let port = listen.strip_prefix("0.0.0.0:").unwrap_or_else(|| panic!("--listen {listen}: not every interface"));
    assert_eq!(container["ports"][0]["containerPort"].to_string(), port);
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/port"], port);
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/path"], "/metrics");
    let probe = &container["livenessProbe"]["httpGet"];
    assert_eq!((probe["path"].as_str(), probe["port"].as_str()), (Some("/healthz"), Some("metrics")), "{probe}");
    let probe = &container["readinessProbe"]["httpGet"];
    assert_eq!((probe["path"].as_str(), probe["port"].as_str()), (Some("/ready"), Some("metrics")), "{probe}");
    assert_eq!(container["ports"][0]["name"], "metrics");
    let node_name = container["env"].as_array().unwrap().iter().find(|e| e["name"] == "NODE_NAME").expect("NODE_NAME");
    assert_eq!(node_name["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName");

    // Capabilities, not privileged.
    let security = &container["securityContext"];
    assert_ne!(security["privileged"], true, "{security}");
    assert_ne!(spec["securityContext"]["privileged"], true);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
    let added: Vec<&str> =
        security["capabilities"]["add"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    assert!(added.contains(&"BPF") && added.contains(&"PERFMON"), "{added:?}");
    assert!(
        !added.iter().any(|c| c.trim_start_matches("CAP_") == "SYS_ADMIN")
            || security["allowPrivilegeEscalation"] != false
    );
    assert_eq!(
        security["seccompProfile"]["type"], "RuntimeDefault",
        "containerd's default profile lets bpf(2) through to BPF (tests/tests/container.rs runs it so)"
    );

    // The node's / only read-only, and following the node's unmounts.
    let volumes = spec["volumes"].as_array().unwrap();
    for mount in container["volumeMounts"].as_array().unwrap() {
        let volume =
            volumes.iter().find(|v| v["name"] == mount["name"]).unwrap_or_else(|| panic!("no volume for {mount}"));
        if volume["hostPath"]["path"] == "/" {
            assert_eq!(mount["readOnly"], true, "{mount}");
            assert_eq!(mount["mountPropagation"], "HostToContainer", "{mount}");
        }
    }
    // --events posts with the pod's token; its RBAC is a file of its own.
    assert!(args.contains(&"--events"), "{args:?}");
    assert_eq!(spec["automountServiceAccountToken"], true, "--events needs the token");
    assert!(
        documents.iter().all(|d| d["kind"] != "ClusterRole" && d["kind"] != "Role"),
        "RBAC: deploy/base/podstuck-events-rbac.yaml"
    );
}
