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

/// Fixes that act the same from any mount namespace of the node's PID
/// namespace (a pid, /proc, the API server, another namespace entered),
/// when they are one command alone.
const ANYWHERE: [&str; 4] = ["kill ", "nsenter ", "kubectl ", "cat /proc/"];

/// How a fix that signals a process begins: it checks first that the pid
/// still names the process podstuck saw (its start time), as a pid is
/// reused within minutes on a busy node. Though joined with `&&`, it reads
/// only /proc and signals a pid: it acts the same from any mount namespace
/// of the node's PID namespace, so it is never wrapped.
const SAME_PROCESS: &str = "[ \"$(sed 's/.*) //' /proc/";

/// `kill -SIGNAL PID`, run only if process `pid` is still the one that
/// started at `start` (`/proc/<pid>/stat`'s 22nd field, read past the
/// name, which may hold spaces and parentheses). None without a start:
/// then a pid alone is no proof of which process it names.
pub fn kill_if_same(signal: &str, pid: u32, start: Option<crate::event::ProcessStart>) -> Option<String> {
    let start = start?.ticks();
    Some(format!("{SAME_PROCESS}{pid}/stat | cut -d' ' -f20)\" = {start} ] && kill -{signal} {pid}"))
}

/// `fix` made to act in the node's mount namespace, pasted in a container
/// with the host's PID namespace or on the node: `nsenter -t 1 -m -- CMD`,
/// several commands as one `sh -c` word.
pub fn in_node_namespace(fix: &str) -> String {
    entering(IN_NODE_NAMESPACE, fix)
}

/// `fix` made to act in the mount namespace process `pid` lives in (kubelet
/// in a container: its paths and mounts are that namespace's, not the
/// host's), pasted on the node: `nsenter -t PID -m -- CMD`.
pub fn in_mount_namespace_of(pid: u32, fix: &str) -> String {
    entering(&format!("nsenter -t {pid} -m --"), fix)
}

fn entering(nsenter: &str, fix: &str) -> String {
    // Anything the pasting shell would do itself (join commands with &&,
    // ; or |, redirect with > into a file) must happen inside the
    // namespace: the whole fix goes there as one `sh -c` word. Only a
    // lone command may go as its words.
    let joined = fix.contains(['&', ';', '|', '\n', '`', '>', '<']) || fix.contains("$(");
    let same_process_kill = fix.starts_with(SAME_PROCESS) && !fix.contains('\n');
    if fix.is_empty() || same_process_kill || (!joined && ANYWHERE.iter().any(|a| fix.starts_with(a))) {
        return fix.to_string();
    }
    if joined {
        format!("{nsenter} sh -c {}", word(fix.as_bytes()))
    } else {
        format!("{nsenter} {fix}")
    }
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

/// `umount -l -- PATH`: detached at once, gone when its last user lets go.
pub fn unmount_lazily(path: &[u8]) -> String {
    CommandLine::new("umount -l").operands([path]).into()
}

/// `umount -f -l -- PATH`: for a mount whose server does not answer.
pub fn unmount_forced(path: &[u8]) -> String {
    CommandLine::new("umount -f -l").operands([path]).into()
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
