//! What the Kubernetes API says of a deleted pod's shutdown, as the
//! diagnosis is told it before each review (`watch --pod NS/NAME`): when
//! the deletion was asked, when its grace period ends, and its containers
//! as kubelet's shutdown treats them: which has a preStop exec hook (run
//! before the container gets SIGTERM), which is a sidecar (a restartable
//! init container, stopped only once every main container has ended),
//! which still runs. These are the API's words (the pod's spec, written
//! by whoever made the pod, and its status, written by kubelet): what
//! runs on the node is for the kernel and /proc to say.

use std::time::SystemTime;

use crate::pod::ContainerId;
use crate::words::safe_text;

/// Containers kept of one pod: a pod spec has a handful; the bound stops
/// a pathological one.
pub const CONTAINERS_KEPT: usize = 32;

/// Words of a hook's command kept, each cut to [`HOOK_WORD_MAX`] bytes.
pub const HOOK_WORDS_KEPT: usize = 16;
pub const HOOK_WORD_MAX: usize = 256;

/// A deleted pod's shutdown, as the API last said it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodShutdown {
    /// When its grace period ends (`deletionTimestamp`).
    pub grace_ends: SystemTime,
    /// When the deletion was asked: `deletionTimestamp` less
    /// `deletionGracePeriodSeconds` (None where the API gave no grace
    /// period). To the second, as the API keeps times.
    pub deleted_at: Option<SystemTime>,
    pub containers: Vec<ShutdownContainer>,
}

/// One container of a deleted pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShutdownContainer {
    pub name: String,
    /// Its id as its status says it (`containerd://<id>`), when it has one.
    pub id: Option<ContainerId>,
    /// A restartable init container (`restartPolicy: Always`): kubelet
    /// stops it only after every main container has ended.
    pub sidecar: bool,
    /// Its preStop hook's command, when the hook is an exec.
    pub prestop: Option<Vec<String>>,
    /// Its status says it is running.
    pub running: bool,
}

impl ShutdownContainer {
    /// A container named `name`, its words bounded and made safe.
    pub fn new(name: &str, id: Option<ContainerId>, sidecar: bool, running: bool) -> ShutdownContainer {
        ShutdownContainer {
            name: safe_text(&name.as_bytes()[..name.len().min(253)]),
            id,
            sidecar,
            prestop: None,
            running,
        }
    }

    /// Its preStop exec hook's command, bounded and made safe.
    pub fn with_prestop(mut self, command: &[String]) -> ShutdownContainer {
        let word = |w: &String| safe_text(&w.as_bytes()[..w.len().min(HOOK_WORD_MAX)]);
        self.prestop = Some(command.iter().take(HOOK_WORDS_KEPT).map(word).collect());
        self
    }
}

/// The id in a container status's `containerID` ("containerd://<id>",
/// "cri-o://<id>", "docker://<id>"), when it is one a runtime made.
pub fn container_id_of_status(status_id: &str) -> Option<ContainerId> {
    let (_, id) = status_id.split_once("://")?;
    ContainerId::parse(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_id_is_read_for_every_runtime_and_nothing_else() {
        let id = "a".repeat(64);
        for runtime in ["containerd", "cri-o", "docker"] {
            assert_eq!(container_id_of_status(&format!("{runtime}://{id}")), ContainerId::parse(&id));
        }
        assert_eq!(container_id_of_status(&id), None, "no scheme");
        assert_eq!(container_id_of_status("containerd://ABC"), None);
        assert_eq!(container_id_of_status(""), None);
    }

    #[test]
    fn a_hooks_command_and_a_name_are_bounded_and_made_safe() {
        let long = "x".repeat(1000);
        let words: Vec<String> = (0..40).map(|i| format!("w{i}\u{1b}[31m")).chain([long]).collect();
        let c = ShutdownContainer::new("app\u{7}", None, false, true).with_prestop(&words);
        let hook = c.prestop.unwrap();
        assert_eq!(hook.len(), HOOK_WORDS_KEPT);
        assert!(hook.iter().all(|w| !w.contains('\u{1b}')), "{hook:?}");
        assert!(!c.name.contains('\u{7}'), "{}", c.name);
    }
}
