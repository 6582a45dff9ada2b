//! A stand-in for `kubectl`, for the kubectl plugin's end-to-end tests
//! (there is no cluster here). Put on PATH as `kubectl`, it answers the
//! calls the plugin makes from a state directory (`$KUBECTL_STANDIN_DIR`)
//! and logs every call (argv, and standard input for `create`) to
//! `log.jsonl` there, one JSON object a line.
//!
//! State directory:
//!   pods/NS/NAME.json   a pod as `kubectl get pod NAME -n NS -o json`
//!                       prints it (the test writes them)
//!   namespaces/NAME.json  a namespace as `kubectl get namespace NAME -o
//!                       json` prints it
//!   debug/NAME.json     a pod `create -f -` made; moved to deleted/ by
//!                       `delete pod NAME`
//!   never-ready         if present, created pods never start (their
//!                       container waits on ImagePullBackOff)
//!   pack.tar            if present, `exec POD -- podstuck __pack ...`
//!                       prints it instead of running podstuck
//!   pod-tmp/NAME/       the debug pod NAME's /tmp
//!   no-cluster          if present, every call fails as kubectl does
//!                       with no API server: its discovery error five
//!                       times (klog lines from memcache.go), then its
//!                       own line
//!
//! `exec POD -- podstuck ARGS` runs the podstuck under test
//! (`$PODSTUCK_BIN`) here, as root, in a mount namespace of its own where
//! /tmp is `pod-tmp/POD/`: the pod's files and the user's stay apart, as
//! they would on a real node. Its input is the stand-in's own with `-i`,
//! nothing without, as kubectl's.
//!
//! Flags before the verb (`--context`, `--kubeconfig`) are logged and
//! otherwise ignored; `-n`/`--namespace` is honoured (default `default`).

use std::ffi::{CString, OsString};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let state = PathBuf::from(std::env::var_os("KUBECTL_STANDIN_DIR").expect("KUBECTL_STANDIN_DIR"));
    let call = Call::parse(&argv);
    let mut stdin = None;
    if call.verb() == Some("create") {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).expect("read the manifest");
        stdin = Some(text);
    }
    log(&state, &argv, stdin.as_deref());
    if state.join("no-cluster").exists() {
        std::process::exit(no_cluster());
    }
    let code = match call.verb() {
        Some("get") => get(&state, &call),
        Some("create") => create(&state, stdin.as_deref().unwrap_or_default()),
        Some("delete") => delete(&state, &call),
        Some("exec") => exec(&state, &call),
        _ => fail(&format!("error: the kubectl stand-in does not know {argv:?}")),
    };
    std::process::exit(code);
}

/// One line of the log, written whole with one append.
fn log(state: &Path, argv: &[String], stdin: Option<&str>) {
    let mut line = json!({"argv": argv, "stdin": stdin}).to_string();
    line.push('\n');
    let mut file =
        std::fs::OpenOptions::new().create(true).append(true).open(state.join("log.jsonl")).expect("open the log");
    file.write_all(line.as_bytes()).expect("write the log");
}

/// As kubectl 1.30 with no API server at its (default) address.
fn no_cluster() -> i32 {
    for i in 0..5 {
        eprintln!(
            "E1125 10:00:00.00{i}000    4242 memcache.go:265] couldn't get current server API group list: Get \"http://localhost:8080/api?timeout=32s\": dial tcp 127.0.0.1:8080: connect: connection refused"
        );
    }
    fail("The connection to the server localhost:8080 was refused - did you specify the right host or port?")
}

fn fail(message: &str) -> i32 {
    eprintln!("{message}");
    1
}

fn not_found(name: &str) -> i32 {
    fail(&format!("Error from server (NotFound): pods \"{name}\" not found"))
}

/// A kubectl command line: its words without the flags, the namespace,
/// and what follows `--`.
struct Call {
    words: Vec<String>,
    namespace: String,
    interactive: bool,
    command: Vec<String>,
    ignore_not_found: bool,
}

impl Call {
    fn parse(argv: &[String]) -> Call {
        let mut call = Call {
            words: Vec::new(),
            namespace: "default".into(),
            interactive: false,
            command: Vec::new(),
            ignore_not_found: false,
        };
        let mut args = argv.iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--" => {
                    call.command = args.cloned().collect();
                    break;
                }
                "-n" | "--namespace" => call.namespace = args.next().cloned().unwrap_or_default(),
                "-i" | "--stdin" => call.interactive = true,
                "--ignore-not-found" => call.ignore_not_found = true,
                // Flags with a value: theirs is not a word.
                "--context" | "--kubeconfig" | "-o" | "-f" | "-c" | "--for" | "--timeout" => {
                    args.next();
                }
                flag if flag.starts_with('-') => {}
                word => call.words.push(word.to_string()),
            }
        }
        call
    }

    fn verb(&self) -> Option<&str> {
        self.words.first().map(String::as_str)
    }

    /// `get pod NAME`, `delete pod NAME`: the NAME; `exec NAME`: the NAME.
    fn pod(&self) -> &str {
        let at = if self.verb() == Some("exec") { 1 } else { 2 };
        self.words.get(at).map(String::as_str).unwrap_or_default()
    }
}

fn get(state: &Path, call: &Call) -> i32 {
    let name = call.pod();
    if call.words.get(1).is_some_and(|w| w == "namespace" || w == "namespaces" || w == "ns") {
        return match std::fs::read_to_string(state.join("namespaces").join(format!("{name}.json"))) {
            Ok(namespace) => {
                print!("{namespace}");
                0
            }
            Err(_) => fail(&format!("Error from server (NotFound): namespaces \"{name}\" not found")),
        };
    }
    if let Ok(pod) = std::fs::read_to_string(state.join("pods").join(&call.namespace).join(format!("{name}.json"))) {
        print!("{pod}");
        return 0;
    }
    match debug_pod(state, name) {
        Some(manifest) => {
            println!("{}", with_status(manifest, state.join("never-ready").exists()));
            0
        }
        None => not_found(name),
    }
}

/// A created debug pod's manifest, if it exists and was not deleted.
fn debug_pod(state: &Path, name: &str) -> Option<Value> {
    let text = std::fs::read_to_string(state.join("debug").join(format!("{name}.json"))).ok()?;
    Some(serde_json::from_str(&text).expect("a manifest the stand-in saved"))
}

/// The pod as the API server would show it: running and Ready, or
/// Pending on an image kubelet cannot pull.
fn with_status(mut pod: Value, never_ready: bool) -> Value {
    let image = pod["spec"]["containers"][0]["image"].clone();
    pod["status"] = if never_ready {
        json!({
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": "containers with unready status: [podstuck]"}
            ],
            "containerStatuses": [{
                "name": "podstuck", "image": image, "imageID": "", "ready": false, "restartCount": 0, "started": false,
                "state": {"waiting": {"reason": "ImagePullBackOff", "message": format!("Back-off pulling image {image}")}}
            }]
        })
    } else {
        json!({
            "phase": "Running",
            "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
            "containerStatuses": [{
                "name": "podstuck", "image": image, "imageID": "", "ready": true, "restartCount": 0, "started": true,
                "state": {"running": {"startedAt": "2026-05-01T10:05:00Z"}}
            }]
        })
    };
    pod
}

fn create(state: &Path, manifest: &str) -> i32 {
    let pod: Value = match serde_json::from_str(manifest) {
        Ok(pod) => pod,
        Err(e) => return fail(&format!("error: error parsing STDIN: {e}")),
    };
    let name = pod["metadata"]["name"].as_str().expect("a named pod").to_string();
    let dir = state.join("debug");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.json"));
    if path.exists() {
        return fail(&format!(
            "Error from server (AlreadyExists): error when creating \"STDIN\": pods \"{name}\" already exists"
        ));
    }
    std::fs::write(path, manifest).unwrap();
    println!("pod/{name}");
    0
}

fn delete(state: &Path, call: &Call) -> i32 {
    let name = call.pod();
    let from = state.join("debug").join(format!("{name}.json"));
    if !from.exists() {
        return if call.ignore_not_found { 0 } else { not_found(name) };
    }
    let gone = state.join("deleted");
    std::fs::create_dir_all(&gone).unwrap();
    std::fs::rename(from, gone.join(format!("{name}.json"))).unwrap();
    println!("pod \"{name}\" deleted");
    0
}

fn exec(state: &Path, call: &Call) -> i32 {
    let name = call.pod();
    if debug_pod(state, name).is_none() {
        return not_found(name);
    }
    let (program, args) = call.command.split_first().expect("a command after --");
    if program != "podstuck" {
        return fail(&format!("error: exec: \"{program}\": executable file not found in $PATH"));
    }
    let hostile = state.join("pack.tar");
    if args.first().is_some_and(|a| a == "__pack") && hostile.exists() {
        std::io::stdout().write_all(&std::fs::read(hostile).unwrap()).unwrap();
        return 0;
    }
    // Opened before /tmp is the pod's: a checkout under /tmp is out of sight then.
    let podstuck = std::env::var_os("PODSTUCK_BIN").expect("PODSTUCK_BIN");
    let binary = std::fs::File::open(&podstuck)
        .unwrap_or_else(|e| panic!("PODSTUCK_BIN {}: {e}", Path::new(&podstuck).display()));
    let tmp = state.join("pod-tmp").join(name);
    std::fs::create_dir_all(&tmp).unwrap();
    in_pods_tmp(&tmp);
    if !call.interactive {
        let null = std::fs::File::open("/dev/null").unwrap();
        // SAFETY: dup2 onto standard input.
        unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), 0) };
    }
    // A real debug pod's podstuck enters PID 1's mount namespace, the
    // node's. Where even root cannot read PID 1's (a sandboxed test
    // machine), it is told the node is this run's parent's, which lives
    // in the node's namespace, as the container tests tell theirs.
    let mut args: Vec<OsString> = args.iter().map(OsString::from).collect();
    if std::fs::read_link("/proc/1/ns/mnt").is_err() {
        args.extend(["--node-pid".into(), std::os::unix::process::parent_id().to_string().into()]);
    }
    let argv: Vec<CString> =
        std::iter::once(podstuck).chain(args).map(|a| CString::new(a.into_vec()).unwrap()).collect();
    let env: Vec<CString> = std::env::vars_os()
        .map(|(k, v)| CString::new([k.into_vec(), b"=".to_vec(), v.into_vec()].concat()).unwrap())
        .collect();
    let err = nix::unistd::fexecve(&binary, &argv, &env).unwrap_err();
    fail(&format!("cannot run podstuck: {err}"))
}

/// A mount namespace of this process's own whose /tmp is `tmp`; the
/// host's mounts still reach it (slave), its own reach nothing.
fn in_pods_tmp(tmp: &Path) {
    use nix::mount::{mount, MsFlags};
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).expect("unshare the mount namespace (root?)");
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_SLAVE, None::<&str>).expect("make / a slave");
    mount(Some(tmp), "/tmp", None::<&str>, MsFlags::MS_BIND, None::<&str>).expect("bind the pod's /tmp");
}
