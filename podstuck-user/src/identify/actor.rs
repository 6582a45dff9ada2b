//! Names the part of the node that made a call (kubelet, the container
//! runtime, a shim, runc, a CSI plugin, systemd), from what the kernel tells
//! about the task: its comm, its executable and its parent's comm.
//!
//! The cleanup of a pod is done by these host components, not by the pod,
//! and a person reading a finding wants to know which of them is stuck or
//! retrying. This is a naming heuristic on process names only: it does not
//! look at cgroups or credentials and cannot tell an impostor that borrows a
//! name (it does not need to: podstuck explains, it does not authorise).

/// The part of the node a task belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    Kubelet,
    /// containerd, dockerd, CRI-O, podman.
    Runtime,
    /// containerd-shim-*, conmon: the per-container monitor.
    Shim,
    /// The OCI runtime (runc, crun, youki).
    Runc,
    CsiPlugin,
    Systemd,
    Other,
}

impl Role {
    /// The name used in output, same as the JSON form.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Kubelet => "kubelet",
            Role::Runtime => "runtime",
            Role::Shim => "shim",
            Role::Runc => "runc",
            Role::CsiPlugin => "csi-plugin",
            Role::Systemd => "systemd",
            Role::Other => "other",
        }
    }
}

/// Decides the role of the process that made a call from its comm (kernel
/// task name, at most 15 bytes, may be truncated), its executable path if
/// known, and its parent's comm.
///
/// The executable's name is trusted first because comm can be truncated or
/// renamed; comm is the fallback when the executable says nothing, which
/// also covers multi-call binaries (busybox running `umount`, k3s running
/// containerd) and scripts (exe `bash`, comm the script's name, as with
/// wrapper scripts around CSI plugins). A helper command (`umount`, `mount`, `rm`, ...) takes the
/// role of its parent: kubelet never calls umount2 itself but runs
/// `umount <path>`, and that call is kubelet's.
pub fn role_of(comm: &str, exe: Option<&str>, parent_comm: &str) -> Role {
    let exe_name = exe.map(exe_basename).filter(|n| !n.is_empty());
    let names = || exe_name.into_iter().chain(std::iter::once(comm));
    if let Some(role) = names().find_map(own_role) {
        return role;
    }
    if names().any(is_helper) {
        return own_role(parent_comm).unwrap_or(Role::Other);
    }
    Role::Other
}

/// How a person reads the actor: the comm (`kubelet`), or for a helper
/// command the comm and who ran it (`umount (child of kubelet)`), since
/// "umount" alone hides who is trying.
pub fn describe(comm: &str, parent_comm: &str, role: Role) -> String {
    if comm.is_empty() {
        return role.as_str().to_string();
    }
    if is_helper(comm) && !parent_comm.is_empty() {
        return format!("{comm} (child of {parent_comm})");
    }
    comm.to_string()
}

/// The node's kubelet and container runtimes, by their executable's file
/// name: containerd (and k3s' and k0s' builds of it), CRI-O, cri-dockerd,
/// dockerd, kubelet, podman. They run CNI plugins (kubelet its dockershim,
/// before 1.24), and where they run in a container of their own (kind,
/// k3d, minikube), their mount namespace is where the node's pods live.
pub const RUNTIMES: [&str; 8] = ["containerd", "crio", "cri-dockerd", "dockerd", "k3s", "k0s", "kubelet", "podman"];

/// `/proc/<pid>/exe` reads `... (deleted)` once the binary was replaced on
/// disk, as happens on every package upgrade of a long-running daemon.
pub fn exe_basename(exe: &str) -> &str {
    let exe = exe.strip_suffix(" (deleted)").unwrap_or(exe);
    exe.rsplit('/').next().unwrap_or(exe)
}

/// The role a process name implies by itself, if any.
fn own_role(name: &str) -> Option<Role> {
    let role = match name {
        "kubelet" => Role::Kubelet,
        // comm truncates every containerd-shim-<runtime>-v2 to this prefix.
        n if n.starts_with("containerd-shim") || n == "conmon" => Role::Shim,
        "containerd" | "dockerd" | "crio" | "cri-o" | "podman" => Role::Runtime,
        // runc re-executes itself as "runc:[0:PARENT]", "runc:[2:INIT]", ...
        n if matches!(n, "runc" | "crun" | "youki") || n.starts_with("runc:") => Role::Runc,
        n if n == "systemd" || n.starts_with("systemd-") => Role::Systemd,
        n if n.to_ascii_lowercase().contains("csi") || n.ends_with("plugin") => Role::CsiPlugin,
        _ => return None,
    };
    Some(role)
}

/// Short-lived commands the node components run to do their work.
fn is_helper(name: &str) -> bool {
    matches!(
        name,
        "umount"
            | "mount"
            | "nsenter"
            | "rm"
            | "rmdir"
            | "mkdir"
            | "sh"
            | "bash"
            | "dash"
            | "losetup"
            | "fusermount"
            | "fusermount3"
    ) || name.starts_with("mount.")
        || name.starts_with("umount.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_names_match_their_json_form() {
        for role in [Role::Kubelet, Role::Runtime, Role::Shim, Role::Runc, Role::CsiPlugin, Role::Systemd, Role::Other]
        {
            let json = serde_json::to_string(&role).unwrap();
            assert_eq!(json, format!("\"{}\"", role.as_str()));
        }
        assert_eq!(Role::CsiPlugin.as_str(), "csi-plugin");
    }

    #[test]
    fn node_components_are_recognised_by_comm() {
        let cases = [
            ("kubelet", Role::Kubelet),
            ("containerd", Role::Runtime),
            ("dockerd", Role::Runtime),
            ("crio", Role::Runtime),
            ("cri-o", Role::Runtime),
            ("podman", Role::Runtime),
            ("containerd-shim", Role::Shim), // containerd-shim-runc-v2, truncated
            ("conmon", Role::Shim),
            ("runc", Role::Runc),
            ("runc:[2:INIT]", Role::Runc),
            ("crun", Role::Runc),
            ("youki", Role::Runc),
            ("csi-node-driver", Role::CsiPlugin),
            ("ebs-csi-driver", Role::CsiPlugin),
            ("hostpathplugin", Role::CsiPlugin),
            ("systemd", Role::Systemd),
            ("systemd-tmpfile", Role::Systemd),
        ];
        for (comm, role) in cases {
            assert_eq!(role_of(comm, None, "systemd"), role, "{comm}");
        }
    }

    #[test]
    fn near_miss_names_are_other() {
        for comm in [
            "kubelet2",
            "kube-proxy",
            "containerd2",
            "xcontainerd",
            "docker",
            "runcx",
            "systemdx",
            "my-systemd",
            "plugins",
            "nginx",
            "",
        ] {
            assert_eq!(role_of(comm, None, "bash"), Role::Other, "{comm:?}");
        }
    }

    #[test]
    fn helpers_take_the_role_of_their_parent() {
        assert_eq!(role_of("umount", None, "kubelet"), Role::Kubelet);
        assert_eq!(role_of("mount", Some("/usr/bin/mount"), "kubelet"), Role::Kubelet);
        assert_eq!(role_of("nsenter", None, "kubelet"), Role::Kubelet);
        assert_eq!(role_of("rm", None, "containerd"), Role::Runtime);
        assert_eq!(role_of("sh", None, "containerd-shim"), Role::Shim);
        assert_eq!(role_of("umount", None, "csi-node-driver"), Role::CsiPlugin);
        assert_eq!(role_of("mount.nfs", None, "kubelet"), Role::Kubelet);
        // A helper run from a shell or anything unknown is nobody's.
        assert_eq!(role_of("umount", None, "bash"), Role::Other);
        assert_eq!(role_of("rm", None, ""), Role::Other);
        // Not a helper: its parent does not make it kubelet's.
        assert_eq!(role_of("python3", None, "kubelet"), Role::Other);
    }

    #[test]
    fn the_executable_wins_over_a_truncated_or_renamed_comm() {
        assert_eq!(role_of("containerd-shim", Some("/usr/bin/containerd-shim-runc-v2"), "systemd"), Role::Shim);
        assert_eq!(role_of("worker", Some("/usr/bin/kubelet"), "systemd"), Role::Kubelet);
        // A script runs as its interpreter; its name is in comm.
        assert_eq!(role_of("kubelet", Some("/usr/bin/bash"), "systemd"), Role::Kubelet);
        assert_eq!(role_of("csi-wrapper.sh", Some("/bin/sh"), "containerd-shim"), Role::CsiPlugin);
        assert_eq!(role_of("kubelet", Some("/usr/bin/nginx"), "systemd"), Role::Kubelet);
        assert_eq!(role_of("x", Some("/usr/local/bin/kubelet (deleted)"), "systemd"), Role::Kubelet);
        assert_eq!(role_of("kubelet", Some(""), "systemd"), Role::Kubelet);
    }

    #[test]
    fn multi_call_binaries_fall_back_to_comm() {
        assert_eq!(role_of("umount", Some("/bin/busybox"), "kubelet"), Role::Kubelet);
        assert_eq!(role_of("containerd", Some("/usr/local/bin/k3s"), "k3s"), Role::Runtime);
        assert_eq!(role_of("k3s-agent", Some("/usr/local/bin/k3s"), "systemd"), Role::Other);
    }

    #[test]
    fn helpers_are_described_with_who_ran_them() {
        assert_eq!(describe("kubelet", "systemd", Role::Kubelet), "kubelet");
        assert_eq!(describe("umount", "kubelet", Role::Kubelet), "umount (child of kubelet)");
        assert_eq!(describe("rm", "bash", Role::Other), "rm (child of bash)");
        assert_eq!(describe("umount", "", Role::Other), "umount");
        assert_eq!(describe("containerd", "systemd", Role::Runtime), "containerd");
        // A non-helper is itself the actor, whoever started it.
        assert_eq!(describe("runc", "containerd-shim", Role::Runc), "runc");
        assert_eq!(describe("", "kubelet", Role::Kubelet), "kubelet");
    }
}
