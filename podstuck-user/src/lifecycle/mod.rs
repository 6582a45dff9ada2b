//! The process lifecycle the kernel streams beside the calls, decoded: a
//! CNI plugin exec'd (with the `CNI_*` variables of its environment), a
//! process's exit and its wait status, a SIGTERM or SIGKILL generated and
//! what the kernel did with it. These are the causes of a stuck pod that
//! never fail a removal (docs/pathologies.md: sandbox-teardown-failing,
//! sigterm-ignored, unkillable-task). Pure: tested on hand-made records.
//!
//! Everything here but the numbers is chosen by a workload (a process's
//! name, a plugin's environment): kept as safe text, each value bounded.

use std::time::SystemTime;

use podstuck_common::{lifecycle, LifecycleRecord, PluginFile, LIFECYCLE_RECORD_BYTES};

use crate::event::{DecodeError, ProcessStart, WallClock};
use crate::pod::PodUid;
use crate::words::safe_text;

/// The longest `CNI_*` value kept (a netns path, a container id, the pod's
/// name): longer ones are cut, as the kernel cuts the environment anyway.
pub const CNI_VALUE_MAX: usize = 256;

/// One lifecycle event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LifecycleEvent {
    pub time: SystemTime,
    /// The process exec'd or exiting; for a signal, its sender.
    pub pid: u32,
    /// When it started, as the kernel read it (None where it could not:
    /// lockdown, or a record of an older podstuck).
    pub start: Option<ProcessStart>,
    pub ppid: u32,
    pub parent_start: Option<ProcessStart>,
    /// Its name: the workload's to choose (prctl), evidence only.
    pub comm: String,
    /// The cgroup v2 id of `pid` when it happened.
    pub cgroup_id: u64,
    /// Its cgroup in the v1 hierarchies the kernel reads (0: none read),
    /// and which of them it is of.
    pub v1_cgroup_id: u64,
    pub v1_hierarchy: u8,
    pub what: Lifecycle,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    /// One of the node's CNI plugin files started.
    Exec {
        /// The path as its caller passed it: evidence, never a key.
        filename: Vec<u8>,
        cni: Option<CniRun>,
        /// The file the kernel runs, one of `PLUGIN_FILES`.
        file: PluginFile,
        /// The mount namespace it runs in (0: unread).
        mntns: u32,
        /// The environment was longer than the kernel copies: variables
        /// past the cut are missing from `cni`.
        env_cut: bool,
    },
    /// The process ended with this wait status (`WEXITSTATUS`, `WTERMSIG`),
    /// if the kernel could read it (not under lockdown).
    Exit {
        status: Option<i32>,
        /// Its last thread's exit; false: its leader's, which another
        /// thread may outlive (the kernel could not say).
        last_thread: bool,
    },
    Signal(SignalSent),
    /// kubelet's `connect()` to a unix socket failed, by the comm the
    /// kernel filtered on (a claim until `identify` proves the caller).
    ConnectFailed(ConnectFailed),
    /// A running plugin wrote on its stdout (streamed only while a
    /// sandbox's DEL fails): its words, a claim of the plugin's.
    PluginWrote(PluginWrote),
}

/// A CNI plugin's write on its stdout, as the kernel copied it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginWrote {
    /// The first bytes written (at most `lifecycle::PLUGIN_WORDS_MAX`).
    pub bytes: Vec<u8>,
    /// How many it wrote in that call.
    pub total: u32,
}

/// A failing connect to a unix socket, as the kernel saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectFailed {
    /// The socket's path as the caller passed it (resolved in its own
    /// mount namespace), cut at its NUL.
    pub socket: Vec<u8>,
    /// `ENOENT`: no socket file there; `ECONNREFUSED`: a socket file that
    /// nothing listens on; another errno as it came.
    pub errno: i32,
    /// The caller's mount namespace (0: unread).
    pub mntns: u32,
}

impl Lifecycle {
    /// What kind of record it is, as the run's totals count them.
    pub fn kind(&self) -> &'static str {
        match self {
            Lifecycle::Exec { .. } => "exec",
            Lifecycle::Exit { .. } => "exit",
            Lifecycle::Signal(_) => "signal",
            Lifecycle::ConnectFailed(_) => "connect-failed",
            Lifecycle::PluginWrote(_) => "plugin-wrote",
        }
    }
}

/// A SIGTERM or SIGKILL as the kernel generated it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignalSent {
    pub sig: i32,
    pub result: SignalResult,
    pub target_pid: u32,
    pub target_comm: String,
    /// Sent to the whole thread group (kill(2)), not one thread.
    pub group: bool,
    /// Whether the target's process was already exiting when the signal
    /// came (a fatal signal or exit_group had begun ending it), as the
    /// kernel read it at the signal; None where it could not (lockdown,
    /// a record of an older podstuck). A signal to a dying process does
    /// nothing, whatever the kernel's verdict says.
    pub group_exiting: Option<bool>,
}

/// What `signal_generate` says the kernel did with a signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalResult {
    Delivered,
    /// Dropped: the target ignores it, or is its PID namespace's init
    /// with no handler for it (a container's PID 1).
    Ignored,
    /// The same signal was already pending.
    AlreadyPending,
    /// Another of the kernel's codes (queue overflow, lost info).
    Other(i32),
}

impl SignalResult {
    pub fn of(code: i32) -> SignalResult {
        match code {
            lifecycle::SIGNAL_DELIVERED => SignalResult::Delivered,
            lifecycle::SIGNAL_IGNORED => SignalResult::Ignored,
            lifecycle::SIGNAL_ALREADY_PENDING => SignalResult::AlreadyPending,
            other => SignalResult::Other(other),
        }
    }

    pub fn code(self) -> i32 {
        match self {
            SignalResult::Delivered => lifecycle::SIGNAL_DELIVERED,
            SignalResult::Ignored => lifecycle::SIGNAL_IGNORED,
            SignalResult::AlreadyPending => lifecycle::SIGNAL_ALREADY_PENDING,
            SignalResult::Other(code) => code,
        }
    }
}

/// A signal's name as `kill -l` says it.
pub fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGKILL => "SIGKILL".into(),
        other => format!("signal {other}"),
    }
}

/// A wait status in words: "exit code 1", "killed by signal 9 (SIGKILL)";
/// "an exit status it could not read" where the kernel could not say.
pub fn status_words(status: Option<i32>) -> String {
    let Some(status) = status else { return "an exit status podstuck could not read".into() };
    let signal = status & 0x7f;
    if signal == 0 {
        format!("exit code {}", (status >> 8) & 0xff)
    } else {
        format!("killed by signal {signal} ({})", signal_name(signal))
    }
}

/// A CNI plugin's run, from its `CNI_*` variables (the CNI spec's
/// protocol: the runtime passes the command and the sandbox this way).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CniRun {
    /// `ADD`, `DEL`, `CHECK`, `VERSION`, `GC`, `STATUS`.
    pub command: String,
    /// The sandbox (pause container) id.
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    /// From `CNI_ARGS`' `K8S_POD_UID`, when it is a pod UID.
    pub pod_uid: Option<PodUid>,
    pub pod_namespace: String,
    pub pod_name: String,
}

impl CniRun {
    /// The `CNI_*` variables of an environment (NUL-separated
    /// `NAME=value`); None when it holds no `CNI_COMMAND`.
    pub fn from_env(env: &[u8]) -> Option<CniRun> {
        let mut run = CniRun::default();
        let mut args: &[u8] = &[];
        for var in env.split(|b| *b == 0) {
            let Some(eq) = var.iter().position(|b| *b == b'=') else { continue };
            let (name, value) = (&var[..eq], &var[eq + 1..]);
            match name {
                b"CNI_COMMAND" => run.command = bounded(value),
                b"CNI_CONTAINERID" => run.container_id = bounded(value),
                b"CNI_NETNS" => run.netns = bounded(value),
                b"CNI_IFNAME" => run.ifname = bounded(value),
                b"CNI_ARGS" => args = value,
                _ => {}
            }
        }
        if run.command.is_empty() {
            return None;
        }
        for pair in args.split(|b| *b == b';') {
            let Some(eq) = pair.iter().position(|b| *b == b'=') else { continue };
            let (name, value) = (&pair[..eq], &pair[eq + 1..]);
            match name {
                b"K8S_POD_UID" => run.pod_uid = std::str::from_utf8(value).ok().and_then(|v| PodUid::parse(v).ok()),
                b"K8S_POD_NAMESPACE" => run.pod_namespace = bounded(value),
                b"K8S_POD_NAME" => run.pod_name = bounded(value),
                _ => {}
            }
        }
        Some(run)
    }

    /// "shop/web-0", or the pod's UID, or "".
    pub fn pod_words(&self) -> String {
        match (&self.pod_namespace[..], &self.pod_name[..], &self.pod_uid) {
            ("", "", Some(uid)) => uid.as_str().to_string(),
            ("", "", None) => String::new(),
            (ns, name, _) => format!("{ns}/{name}"),
        }
    }
}

fn bounded(value: &[u8]) -> String {
    safe_text(&value[..value.len().min(CNI_VALUE_MAX)])
}

/// A NUL-terminated name field.
fn comm_of(bytes: &[u8]) -> String {
    safe_text(bytes.split(|b| *b == 0).next().unwrap_or(&[]))
}

/// One ring-buffer record of the `LIFECYCLE` ring.
pub fn decode(bytes: &[u8], clock: &WallClock) -> Result<LifecycleEvent, DecodeError> {
    if bytes.len() < LIFECYCLE_RECORD_BYTES {
        return Err(DecodeError::TooShort(bytes.len()));
    }
    // SAFETY: length checked; plain repr(C) data, read unaligned as the
    // ring buffer promises no alignment.
    let r: LifecycleRecord = unsafe { std::ptr::read_unaligned(bytes.as_ptr() as *const LifecycleRecord) };
    let rest = &bytes[LIFECYCLE_RECORD_BYTES..];
    let read = |flag: u8| r.flags & flag != 0;
    let what = match r.kind {
        lifecycle::EXEC => {
            let filename_len = (r.filename_len as usize).min(lifecycle::FILENAME_MAX);
            let env_len = (r.env_len as usize).min(lifecycle::ENV_MAX);
            if rest.len() < lifecycle::FILENAME_MAX + env_len {
                return Err(DecodeError::TooShort(bytes.len()));
            }
            let env = &rest[lifecycle::FILENAME_MAX..lifecycle::FILENAME_MAX + env_len];
            Lifecycle::Exec {
                filename: rest[..filename_len].to_vec(),
                cni: CniRun::from_env(env),
                file: PluginFile { ino: r.file_ino, dev: r.file_dev, _pad: 0 },
                mntns: r.mntns,
                env_cut: r.env_total as usize > env_len,
            }
        }
        lifecycle::EXIT => Lifecycle::Exit {
            status: read(lifecycle::flags::EXIT_CODE_READ).then_some(r.exit_code),
            last_thread: read(lifecycle::flags::LAST_THREAD),
        },
        lifecycle::SIGNAL => Lifecycle::Signal(SignalSent {
            sig: r.sig,
            result: SignalResult::of(r.result),
            target_pid: r.target_pid,
            target_comm: comm_of(&r.target_comm),
            group: r.group != 0,
            group_exiting: read(lifecycle::flags::EXIT_STATE_READ).then_some(read(lifecycle::flags::GROUP_EXITING)),
        }),
        lifecycle::CONNECT_FAILED => {
            let len = (r.filename_len as usize).min(lifecycle::SOCKADDR_MAX).min(rest.len());
            // `struct sockaddr_un`: the family (2 bytes), then the path.
            let path = rest.get(2..len).unwrap_or(&[]);
            let path = path.split(|b| *b == 0).next().unwrap_or(&[]);
            Lifecycle::ConnectFailed(ConnectFailed { socket: path.to_vec(), errno: r.result, mntns: r.mntns })
        }
        lifecycle::PLUGIN_WROTE => {
            let len = (r.env_len as usize).min(lifecycle::PLUGIN_WORDS_MAX);
            let words = rest.get(lifecycle::FILENAME_MAX..lifecycle::FILENAME_MAX + len);
            let words = words.ok_or(DecodeError::TooShort(bytes.len()))?;
            Lifecycle::PluginWrote(PluginWrote { bytes: words.to_vec(), total: r.env_total })
        }
        other => return Err(DecodeError::UnknownLifecycle(other)),
    };
    Ok(LifecycleEvent {
        time: clock.to_wall(r.ns),
        pid: r.pid,
        start: read(lifecycle::flags::START_READ).then(|| ProcessStart::from_boot_ns(r.start_ns)),
        ppid: r.ppid,
        parent_start: read(lifecycle::flags::PARENT_START_READ).then(|| ProcessStart::from_boot_ns(r.parent_start_ns)),
        comm: comm_of(&r.comm),
        cgroup_id: r.cgroup_id,
        v1_cgroup_id: r.v1_cgroup_id,
        v1_hierarchy: r.v1_hierarchy,
        what,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn record(kind: u8) -> LifecycleRecord {
        LifecycleRecord {
            ns: 5_000_000_000,
            cgroup_id: 77,
            v1_cgroup_id: 0,
            start_ns: 1_234_560_000_000,
            parent_start_ns: 0,
            file_ino: 0,
            file_dev: 0,
            mntns: 0,
            pid: 4242,
            ppid: 1,
            target_pid: 0,
            sig: 0,
            result: 0,
            group: 0,
            exit_code: 0,
            env_total: 0,
            filename_len: 0,
            env_len: 0,
            kind,
            flags: lifecycle::flags::START_READ,
            v1_hierarchy: 0,
            _pad: 0,
            comm: *b"containerd\0\0\0\0\0\0",
            target_comm: [0; 16],
        }
    }

    /// kubelet's connect to `socket` failing with `errno`, as decoded: pid
    /// 700, started at tick 70, in no pod's cgroup the kernel read.
    pub(crate) fn connect_failed(time: SystemTime, socket: &str, errno: i32) -> LifecycleEvent {
        LifecycleEvent {
            time,
            pid: 700,
            start: Some(ProcessStart(70)),
            ppid: 1,
            parent_start: None,
            comm: "kubelet".into(),
            cgroup_id: 0,
            v1_cgroup_id: 0,
            v1_hierarchy: 0,
            what: Lifecycle::ConnectFailed(ConnectFailed { socket: socket.as_bytes().to_vec(), errno, mntns: 0 }),
        }
    }

    pub(crate) fn bytes(r: &LifecycleRecord, extra: &[u8]) -> Vec<u8> {
        // SAFETY: plain repr(C) data viewed as bytes.
        let header =
            unsafe { std::slice::from_raw_parts(r as *const LifecycleRecord as *const u8, LIFECYCLE_RECORD_BYTES) };
        [header, extra].concat()
    }

    fn clock() -> WallClock {
        WallClock::new(SystemTime::UNIX_EPOCH, 0)
    }

    #[test]
    fn a_plugins_write_keeps_its_bytes_and_its_whole_length() {
        let mut r = record(lifecycle::PLUGIN_WROTE);
        let said = br#"{"code": 999, "msg": "Unauthorized"}"#;
        r.env_len = said.len() as u16;
        r.env_total = 5000;
        let extra = [&[0u8; lifecycle::FILENAME_MAX][..], said].concat();
        let event = decode(&bytes(&r, &extra), &clock()).unwrap();
        let Lifecycle::PluginWrote(wrote) = event.what else { panic!("{event:?}") };
        assert_eq!((&wrote.bytes[..], wrote.total), (&said[..], 5000));
        // A record shorter than it says is refused, not read past.
        assert!(decode(&bytes(&r, &extra[..extra.len() - 1]), &clock()).is_err());
    }

    #[test]
    fn a_failing_connect_names_its_socket_path_and_errno() {
        let mut r = record(lifecycle::CONNECT_FAILED);
        let mut addr = vec![1u8, 0];
        addr.extend_from_slice(b"/var/lib/kubelet/plugins/ebs.csi.aws.com/csi.sock\0junk");
        r.filename_len = addr.len() as u16;
        r.result = libc::ECONNREFUSED;
        r.mntns = 4026531841;
        let event = decode(&bytes(&r, &addr), &clock()).unwrap();
        let Lifecycle::ConnectFailed(failed) = event.what else { panic!("{event:?}") };
        assert_eq!(failed.socket, b"/var/lib/kubelet/plugins/ebs.csi.aws.com/csi.sock");
        assert_eq!((failed.errno, failed.mntns), (libc::ECONNREFUSED, 4026531841));
        // A record cut short says no more than it holds.
        r.filename_len = 200;
        let event = decode(&bytes(&r, &addr[..10]), &clock()).unwrap();
        let Lifecycle::ConnectFailed(failed) = event.what else { panic!("{event:?}") };
        assert_eq!(failed.socket, b"/var/lib");
    }

    #[test]
    fn an_exec_of_a_cni_plugin_names_its_command_its_sandbox_and_its_pod() {
        let env = b"PATH=/usr/bin\0CNI_COMMAND=DEL\0CNI_CONTAINERID=abc123\0CNI_NETNS=/var/run/netns/cni-1\0CNI_IFNAME=eth0\0CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0;K8S_POD_UID=1b2c3d4e-0000-4000-8000-00000000000a\0";
        let mut r = record(lifecycle::EXEC);
        let file = b"/usr/lib/cni/bridge";
        r.filename_len = file.len() as u16;
        r.env_len = env.len() as u16;
        r.env_total = env.len() as u32;
        (r.file_ino, r.file_dev) = (12, 0x80001);
        let mut extra = vec![0u8; lifecycle::FILENAME_MAX];
        extra[..file.len()].copy_from_slice(file);
        extra.extend_from_slice(env);
        let e = decode(&bytes(&r, &extra), &clock()).unwrap();
        assert_eq!(e.comm, "containerd");
        assert_eq!(e.start, Some(ProcessStart(123_456)), "the kernel's ns since boot in /proc's ticks");
        assert_eq!(e.parent_start, None, "not read: unknown, never a zero");
        let Lifecycle::Exec { filename, cni: Some(cni), file: id, env_cut, .. } = e.what else { panic!("{e:?}") };
        assert_eq!(filename, file);
        assert_eq!(id, PluginFile { ino: 12, dev: 0x80001, _pad: 0 });
        assert!(!env_cut);
        assert_eq!(cni.command, "DEL");
        assert_eq!(cni.container_id, "abc123");
        assert_eq!(cni.netns, "/var/run/netns/cni-1");
        assert_eq!(cni.pod_uid.unwrap().as_str(), "1b2c3d4e-0000-4000-8000-00000000000a");
        assert_eq!(cni.pod_name, "web-0");
    }

    #[test]
    fn hostile_environments_are_bounded_escaped_and_never_a_pod_they_do_not_name() {
        let long = "x".repeat(5000);
        let env =
            format!("CNI_COMMAND=DEL\u{1b}[2J\0CNI_NETNS={long}\0CNI_ARGS=K8S_POD_UID=../../etc;K8S_POD_NAME=a\nb\0");
        let run = CniRun::from_env(env.as_bytes()).unwrap();
        assert!(!run.command.contains('\u{1b}'), "{:?}", run.command);
        assert!(run.netns.len() <= CNI_VALUE_MAX);
        assert_eq!(run.pod_uid, None);
        assert!(!run.pod_name.contains('\n'));
        assert_eq!(CniRun::from_env(b"PATH=/bin\0HOME=/\0"), None, "not a CNI run");
        // An environment longer than the kernel copies is said cut.
        let mut r = record(lifecycle::EXEC);
        (r.env_len, r.env_total) = (4, 9000);
        let mut extra = vec![0u8; lifecycle::FILENAME_MAX];
        extra.extend_from_slice(b"A=b\0");
        let Lifecycle::Exec { env_cut, cni, .. } = decode(&bytes(&r, &extra), &clock()).unwrap().what else { panic!() };
        assert!(env_cut && cni.is_none());
        // A record that claims more environment than it carries is refused.
        let mut r = record(lifecycle::EXEC);
        r.env_len = 100;
        assert!(decode(&bytes(&r, &[0; 10]), &clock()).is_err());
    }

    #[test]
    fn signals_and_exits_decode_with_their_result_and_status() {
        let mut r = record(lifecycle::SIGNAL);
        r.sig = libc::SIGTERM;
        r.result = lifecycle::SIGNAL_IGNORED;
        r.target_pid = 99;
        r.target_comm = *b"sleep\0\0\0\0\0\0\0\0\0\0\0";
        r.group = 1;
        let e = decode(&bytes(&r, &[]), &clock()).unwrap();
        assert_eq!(
            e.what,
            Lifecycle::Signal(SignalSent {
                sig: libc::SIGTERM,
                result: SignalResult::Ignored,
                target_pid: 99,
                target_comm: "sleep".into(),
                group: true,
                group_exiting: None,
            })
        );
        // Read at the signal: the target's process was already exiting.
        r.flags |= lifecycle::flags::EXIT_STATE_READ | lifecycle::flags::GROUP_EXITING;
        let Lifecycle::Signal(sent) = decode(&bytes(&r, &[]), &clock()).unwrap().what else { panic!() };
        assert_eq!(sent.group_exiting, Some(true));
        r.flags &= !lifecycle::flags::GROUP_EXITING;
        let Lifecycle::Signal(sent) = decode(&bytes(&r, &[]), &clock()).unwrap().what else { panic!() };
        assert_eq!(sent.group_exiting, Some(false), "read, and not exiting");
        let mut r = record(lifecycle::EXIT);
        r.exit_code = 0x100;
        r.flags |= lifecycle::flags::EXIT_CODE_READ | lifecycle::flags::LAST_THREAD;
        assert_eq!(
            decode(&bytes(&r, &[]), &clock()).unwrap().what,
            Lifecycle::Exit { status: Some(0x100), last_thread: true }
        );
        assert_eq!(status_words(Some(0x100)), "exit code 1");
        assert_eq!(status_words(Some(9)), "killed by signal 9 (SIGKILL)");
        // Under lockdown the kernel reads no exit code: unknown, not "signal 127".
        let mut r = record(lifecycle::EXIT);
        r.exit_code = -1;
        let e = decode(&bytes(&r, &[]), &clock()).unwrap();
        assert_eq!(e.what, Lifecycle::Exit { status: None, last_thread: false });
        assert_eq!(status_words(None), "an exit status podstuck could not read");
        assert!(decode(&bytes(&record(9), &[]), &clock()).is_err());
    }
}
