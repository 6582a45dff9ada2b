//! The commands fixes print, each written once. Fixes are printed for a
//! person to paste into a root shell, and the names in them (files in a
//! pod's volume, mount points, cgroups, container and sandbox ids) are
//! chosen by workloads that may be hostile. A name must come out as
//! exactly one word naming exactly those bytes in every POSIX shell (dash,
//! Debian's /bin/sh; busybox sh; bash), run nothing else, carry no control
//! character to the terminal it is printed on, and reach the tool as a
//! name, never as an option: each command puts `--` before its operands
//! where the tool reads it so, and checks the operand where it does not
//! (find and busybox mount read `--` otherwise: their path must be
//! absolute; crictl resolves a prefix of an id: its id must be a whole
//! runtime id).

use super::Finding;
use crate::identify::pod::ContainerId;
use crate::words::CommandLine;

/// Every name in a fix is quoted by the ground floor's one quoter.
pub use crate::words::shell_word as word;

/// What a fix says first from a container: the node's mount namespace.
pub const IN_NODE_NAMESPACE: &str = "nsenter -t 1 -m --";

/// Steps of a fix that act the same from any mount namespace of the
/// node's PID namespace (a pid, /proc, the API server, another namespace
/// entered): a fix's other steps act on files and mounts, and must run in
/// the namespace they were proven in.
const ANYWHERE: [&str; 5] = ["kill ", "nsenter ", "kubectl ", "cat /proc/", SAME_PROCESS];

/// How a step that checks a process begins: it reads the process's start
/// time from /proc (`/proc/<pid>/stat`'s 22nd field, read past the name,
/// which may hold spaces and parentheses).
const SAME_PROCESS: &str = "[ \"$(sed 's/.*) //' /proc/";

/// The check that pid `pid` still names the process that started at
/// `start`: pids are reused within minutes on a busy node, and a fix is
/// pasted later. It reads only /proc, so it acts the same from any mount
/// namespace of the node's PID namespace.
fn same_process(pid: u32, start: crate::event::ProcessStart) -> String {
    format!("{SAME_PROCESS}{pid}/stat | cut -d' ' -f20)\" = {} ]", start.ticks())
}

/// `kill -SIGNAL PID`, run only if process `pid` is still the one that
/// started at `start`. None without a start: then a pid alone is no proof
/// of which process it names.
pub fn kill_if_same(signal: &str, pid: u32, start: Option<crate::event::ProcessStart>) -> Option<String> {
    Some(format!("{} && kill -{signal} {pid}", same_process(pid, start?)))
}

/// `fix` made to act in the node's mount namespace, pasted in a container
/// with the host's PID namespace or on the node: `nsenter -t 1 -m -- CMD`,
/// several commands as one `sh -c` word. PID 1 is the node's init, never
/// reused while the node runs.
pub fn in_node_namespace(fix: &str) -> String {
    entering(IN_NODE_NAMESPACE, fix)
}

/// `fix` made to act in the mount namespace process `pid` lives in
/// (kubelet in a container: its paths and mounts are that namespace's,
/// not the host's), pasted on the node: `nsenter -t PID -m -- CMD`, only
/// once PID is checked to be the process that started at `start` (a
/// reused pid would run the fix in whatever namespace its new process
/// has, the host's as likely as any). None without a start.
pub fn in_mount_namespace_of(pid: u32, start: Option<crate::event::ProcessStart>, fix: &str) -> Option<String> {
    Some(entering(&format!("{} && nsenter -t {pid} -m --", same_process(pid, start?)), fix))
}

/// `fix` with its steps that act on files and mounts run through
/// `nsenter`, the steps that act the same anywhere (a checked kill) left
/// as they are, the order and the `&&` between them kept. Anything the
/// pasting shell would do itself within a step (a pipe, a redirection, a
/// `;`) happens inside the namespace: such steps go there as one `sh -c`
/// word.
fn entering(nsenter: &str, fix: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut inside: Vec<&str> = Vec::new();
    let flush = |inside: &mut Vec<&str>, out: &mut Vec<String>| {
        if inside.is_empty() {
            return;
        }
        let joined = inside.join(" && ");
        let lone = !joined.contains(['&', ';', '|', '\n', '`', '>', '<']) && !joined.contains("$(");
        out.push(match lone {
            true => format!("{nsenter} {joined}"),
            false => format!("{nsenter} sh -c {}", word(joined.as_bytes())),
        });
        inside.clear();
    };
    for step in steps_of(fix) {
        if ANYWHERE.iter().any(|a| step.starts_with(a)) && !step.contains('\n') {
            flush(&mut inside, &mut out);
            out.push(step.to_string());
        } else {
            inside.push(step);
        }
    }
    flush(&mut inside, &mut out);
    out.join(" && ")
}

/// Whether every step of `fix` acts the same from any mount namespace
/// (checked kills, /proc reads, kubectl): it needs no namespace entered.
pub fn acts_anywhere(fix: &str) -> bool {
    steps_of(fix).iter().all(|step| ANYWHERE.iter().any(|a| step.starts_with(a)) && !step.contains('\n'))
}

/// The steps of a fix: its commands joined by `&&` at the top level, not
/// inside a quoted word or a `$(...)` (podstuck's quoting: `'...'`,
/// `"$(printf '%b' '...')"`).
pub fn steps_of(fix: &str) -> Vec<&str> {
    #[derive(Clone, Copy, PartialEq)]
    enum In {
        Single,
        Double,
        Substitution,
    }
    let bytes = fix.as_bytes();
    let mut stack: Vec<In> = Vec::new();
    let mut steps = Vec::new();
    let (mut from, mut i) = (0, 0);
    while i < bytes.len() {
        let b = bytes[i];
        match stack.last().copied() {
            Some(In::Single) => {
                if b == b'\'' {
                    stack.pop();
                }
            }
            Some(In::Double) => match b {
                b'\\' => i += 1,
                b'"' => {
                    stack.pop();
                }
                b'$' if bytes.get(i + 1) == Some(&b'(') => {
                    stack.push(In::Substitution);
                    i += 1;
                }
                _ => {}
            },
            top => match b {
                b'\'' => stack.push(In::Single),
                b'"' => stack.push(In::Double),
                b'\\' => i += 1,
                b'$' if bytes.get(i + 1) == Some(&b'(') => {
                    stack.push(In::Substitution);
                    i += 1;
                }
                b')' if top == Some(In::Substitution) => {
                    stack.pop();
                }
                b'&' if top.is_none() && bytes.get(i + 1) == Some(&b'&') => {
                    steps.push(fix[from..i].trim());
                    i += 1;
                    from = i + 1;
                }
                _ => {}
            },
        }
        i += 1;
    }
    steps.push(fix[from..].trim());
    steps.retain(|s| !s.is_empty());
    steps
}

/// The pids a printed command signals or enters (`kill ... PID`, `nsenter
/// -t PID`) without checking first, earlier in the same text, that PID is
/// still the process podstuck saw (its start time, `/proc/PID/stat`).
/// Every fix and every piece of advice must have none: PID 1 aside (the
/// node's init), a pid alone names whichever process holds it when the
/// text is pasted.
pub fn unchecked_pids(text: &str) -> Vec<u32> {
    let words: Vec<&str> = text.split(|c: char| c.is_whitespace() || c == '\'' || c == '"').collect();
    let mut unchecked = Vec::new();
    let mut push = |at: usize, pid: u32| {
        let place = words[..at].iter().map(|w| w.len() + 1).sum::<usize>().min(text.len());
        let checked = text[..place].contains(&format!("/proc/{pid}/stat"));
        if pid != 1 && !checked && !unchecked.contains(&pid) {
            unchecked.push(pid);
        }
    };
    for (i, w) in words.iter().enumerate() {
        match *w {
            "kill" => {
                for (j, arg) in words.iter().enumerate().skip(i + 1) {
                    if arg.starts_with('-') && j == i + 1 {
                        continue;
                    }
                    match arg.parse::<u32>() {
                        Ok(pid) => push(i, pid),
                        Err(_) => break,
                    }
                }
            }
            "-t" if i > 0 && words[i - 1] == "nsenter" => {
                if let Some(pid) = words.get(i + 1).and_then(|p| p.parse::<u32>().ok()) {
                    push(i, pid);
                }
            }
            _ => {}
        }
    }
    unchecked
}

/// A finding whose fix or advice names a pid unchecked (none should: every
/// builder checks; see [`unchecked_pids`]) keeps neither: it says what
/// was withheld and why, never a command that could hit another process.
pub fn withhold_unchecked(finding: &mut Finding) {
    let pids = unchecked_pids(&finding.fix);
    if !pids.is_empty() {
        finding.fix.clear();
        finding.advice.push(format!(
            "a fix naming pid(s) {pids:?} without checking they are still the processes seen was withheld: a pid is reused within minutes"
        ));
    }
    finding.advice.retain(|a| unchecked_pids(a).is_empty());
}

/// A finding as said from a container: its fix acts in the node's mount
/// namespace, and says so.
pub fn from_a_container(finding: &mut Finding) {
    let fix = in_node_namespace(&finding.fix);
    if fix != finding.fix {
        finding.fix = fix;
        finding.advice.push(format!(
            "podstuck runs in a container, so the fix enters the node's mount namespace first ({IN_NODE_NAMESPACE}): paste it as root on the node, or in a shell with the host's PID namespace (a kubectl debug node pod with a shell image)"
        ));
    }
}

/// Commands one after another, each only once the one before succeeded.
pub fn one_after_another(commands: impl IntoIterator<Item = String>) -> String {
    commands.into_iter().collect::<Vec<_>>().join(" && ")
}

/// `umount -- PATH`.
pub fn unmount(path: &[u8]) -> String {
    CommandLine::new("umount").operands([path]).into()
}

/// `dmsetup message -- MAP 0 fail_if_no_path`: a multipath map that queues
/// I/O while it has no path fails it instead, what waits in it at once.
pub fn multipath_fail_queued(map: &str) -> String {
    CommandLine::new("dmsetup message").operands([map, "0", "fail_if_no_path"]).into()
}

/// `dmsetup remove -- NAME`: a device-mapper device (an LVM volume, a
/// partition mapping, a dm-crypt mapping) taken away, which lets go of the
/// device under it; refused while something has it open.
pub fn remove_mapping(name: &str) -> String {
    CommandLine::new("dmsetup remove").operands([name]).into()
}

/// `umount -l -- PATH`: detached at once, gone when its last user lets go.
pub fn unmount_lazily(path: &[u8]) -> String {
    CommandLine::new("umount -l").operands([path]).into()
}

/// `umount -f -l -- PATH`: for a mount whose server does not answer.
pub fn unmount_forced(path: &[u8]) -> String {
    CommandLine::new("umount -f -l").operands([path]).into()
}

/// `find DIR... -name cgroup.procs -exec cat -- {} + | sort -u | xargs -r
/// kill -9 || true`: SIGKILL to every process the cgroups `dirs` and those
/// below them hold when it is pasted, read from the kernel's own lists
/// then: never a list of pids read earlier, which may name other
/// processes by then (pids are reused within minutes). A process that
/// ends between the read and the kill is no failure. A directory below
/// another given is left out (find walks it). find reads a starting point
/// that begins with `-`, `!` or `(` as its expression: only absolute
/// directories are printed; None when one is not.
pub fn kill_what_cgroups_hold<B: AsRef<[u8]>>(dirs: impl IntoIterator<Item = B>) -> Option<String> {
    let dirs: Vec<B> = dirs.into_iter().collect();
    let all: Vec<&[u8]> = dirs.iter().map(|d| d.as_ref()).collect();
    if all.is_empty() || all.iter().any(|d| !absolute(d)) {
        return None;
    }
    let mut tops: Vec<&[u8]> = Vec::new();
    for d in &all {
        let below = all.iter().any(|o| o != d && crate::mountinfo::is_at_or_below(d, o));
        if !below && !tops.contains(d) {
            tops.push(d);
        }
    }
    let words: Vec<String> = tops.iter().map(|d| word(d)).collect();
    Some(format!(
        "find {} -name cgroup.procs -exec cat -- {{}} + | sort -u | xargs -r kill -9 || true",
        words.join(" ")
    ))
}

/// `rmdir -- DIR...`.
pub fn remove_dirs<B: AsRef<[u8]>>(dirs: impl IntoIterator<Item = B>) -> String {
    CommandLine::new("rmdir").operands(dirs).into()
}

/// `rm -- FILE`.
pub fn remove_file(path: &[u8]) -> String {
    CommandLine::new("rm").operands([path]).into()
}

/// `rm -r --one-file-system -- ENTRY...`: never into another mount.
pub fn remove_entries<B: AsRef<[u8]>>(entries: impl IntoIterator<Item = B>) -> String {
    CommandLine::new("rm -r --one-file-system").operands(entries).into()
}

/// `find DIR -xdev -mindepth 1 -delete`: everything in `dir`, on its own
/// filesystem. find reads a starting point that begins with `-`, `!` or
/// `(` as its expression, `--` or not: only an absolute path is printed.
pub fn empty_dir(dir: &[u8]) -> Option<String> {
    absolute(dir).then(|| format!("find {} -xdev -mindepth 1 -delete", word(dir)))
}

/// `ls -la -- PATH`.
pub fn list(path: &[u8]) -> String {
    CommandLine::new("ls -la").operands([path]).into()
}

/// `findmnt -- PATH`: whether and what is mounted there.
pub fn find_mount(path: &[u8]) -> String {
    CommandLine::new("findmnt").operands([path]).into()
}

/// `chattr -i -a -- PATH`, for the flags set (chattr reads `+i`, `-i`
/// and `=i` before a `--` as modes).
pub fn clear_flags(immutable: bool, append_only: bool, path: &[u8]) -> String {
    let mut line = CommandLine::new("chattr");
    if immutable {
        line = line.own("-i");
    }
    if append_only {
        line = line.own("-a");
    }
    line.operands([path]).into()
}

/// `lsattr -d -- PATH`.
pub fn show_flags(path: &[u8]) -> String {
    CommandLine::new("lsattr -d").operands([path]).into()
}

/// `mount -o remount,OPTIONS -- MOUNTPOINT`. busybox's mount takes every
/// word starting with `--` for mount options (`--` adds none) and reads on
/// past it: only an absolute mount point is printed, which no mount reads
/// as an option.
pub fn remount(options: &str, mount_point: &[u8]) -> Option<String> {
    absolute(mount_point)
        .then(|| CommandLine::new("mount -o").own(&format!("remount,{options}")).operands([mount_point]).into())
}

/// `df -h -i -- MP && du -xh -d 2 -- MP | sort -h | tail -n 20`: how full
/// it is, and what fills it.
pub fn space_used(mount_point: &[u8]) -> String {
    let du = CommandLine::new("du -xh -d 2").operands([mount_point]);
    format!("{} && {du} | sort -h | tail -n 20", free_space(mount_point))
}

/// `df -h -i -- MP`.
pub fn free_space(mount_point: &[u8]) -> String {
    CommandLine::new("df -h -i").operands([mount_point]).into()
}

/// `cat -- FILE`.
pub fn show_file(path: &[u8]) -> String {
    CommandLine::new("cat").operands([path]).into()
}

/// `echo VALUE > FILE` (the shell opens the file: no option to mistake).
pub fn write_file(value: &'static str, path: &[u8]) -> String {
    format!("{} > {}", CommandLine::new("echo").own(value), word(path))
}

/// `dir/name`.
pub fn file_in(dir: &[u8], name: impl AsRef<[u8]>) -> Vec<u8> {
    [dir, b"/", name.as_ref()].concat()
}

/// `docker exec -- NAME sh -c FIX`: `fix` run inside docker container
/// `name` (a kind or k3d node). Only for a name docker itself would give a
/// container (`[a-zA-Z0-9][a-zA-Z0-9_.-]+`).
pub fn in_docker_container(name: &str, fix: &str) -> Option<String> {
    let docker_name = name.len() >= 2
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    docker_name.then(|| CommandLine::new("docker exec").operands([name.as_bytes()]).own("sh -c").value(fix).into())
}

/// `crictl rmp --force -- ID`: removes one pod sandbox. Only for a whole
/// runtime id (64 lowercase hex digits, as containerd, CRI-O and
/// cri-dockerd make them): the runtime resolves an id's prefix to the one
/// sandbox it names, so a short or made-up id could remove another pod's.
pub fn remove_sandbox(id: &str) -> Option<String> {
    ContainerId::parse(id).map(|id| CommandLine::new("crictl rmp --force").operands([id.as_str()]).into())
}

/// Why [`remove_sandbox`] printed nothing for `id`, in words.
pub fn no_sandbox_removal(id: &str) -> String {
    format!(
        "no crictl rmp is printed: the sandbox id {} is not a runtime's id (64 lowercase hex digits), and crictl would remove whichever sandbox's id starts with it",
        word(id.as_bytes())
    )
}

/// `journalctl -u containerd -u crio --since -15min --grep=ID`: the
/// runtimes' log lines that name `id`.
pub fn runtime_log(id: &str) -> String {
    CommandLine::new("journalctl -u containerd -u crio --since -15min").option_value("--grep=", id).into()
}

/// `grep -rlF -- TEXT DIR`: the files under `dir` that hold `text`.
pub fn files_naming(text: &str, dir: &str) -> String {
    CommandLine::new("grep -rlF").operands([text, dir]).into()
}

/// `kubectl drain --ignore-daemonsets --delete-emptydir-data -- NODE`.
pub fn drain(node: &str) -> String {
    CommandLine::new("kubectl drain --ignore-daemonsets --delete-emptydir-data").operands([node]).into()
}

fn absolute(path: &[u8]) -> bool {
    path.first() == Some(&b'/')
}

#[cfg(test)]
mod tests;
