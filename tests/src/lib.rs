//! Helpers for podstuck's end-to-end tests: run the real `podstuck` binary
//! against the real kernel, make the real node state a pathology needs
//! (mounts, immutable files, cgroups, container runtimes), and undo all of
//! it even when a test fails.
//!
//! Every piece of node state is owned by a guard whose `Drop` removes it, so
//! a panicking assertion still unmounts, clears flags and deletes.
//!
//! - [`prerequisite`]: the one rule for a test that cannot run here (it
//!   fails, or skips loudly where `PODSTUCK_ALLOW_SKIPS=1`);
//! - [`harness`]: how a test is written (`kernel_test!`, root, the
//!   scratch directory);
//! - [`podstuck`]: the podstuck under test and what it printed;
//! - [`findings`]: checking its findings;
//! - [`kubelet`]: kubelet's tree of pods and volumes;
//! - [`apiserver`]: a stand-in Kubernetes API server on loopback;
//! - [`kubectl`]: the kubectl plugin and the kubectl stand-in it talks to;
//! - [`node`]: mounts, flags, cgroups and directories, undone on drop;
//! - [`block`]: raw block volumes as kubelet maps them (loop devices, bind
//!   mounts of device files) and kubelet's unmap;
//! - [`mountinfo`]: what is mounted where, read apart from podstuck's parser;
//! - [`actors`]: the processes a scenario runs;
//! - [`calls`]: the system calls a test makes itself;
//! - [`terminal`]: a real terminal (tmux);
//! - [`oci`]: container image tarballs (podstuck's own, the tests' busybox);
//! - [`runtimes`]: private dockerd, containerd and podman (with conmon and crun);
//! - [`scrape`]: what reads `--listen`: raw HTTP requests, a real Prometheus;
//! - [`container`]: podstuck's own image, run in docker the ways SREs run it;
//! - [`release`]: what users download (`cargo xtask release`), unpacked
//!   and run as they run it, in a Debian 11 root;
//! - [`krew`]: krew's rules for a plugin manifest, and an install as krew
//!   lays it out;
//! - [`attacks`]: what another user does to a root process that writes files;
//! - [`soak`]: the always-on mode through a long pod churn, sampled;
//! - [`wait`]: how a test waits for what it waits for (never a fixed sleep).
//!
//! `use podstuck_tests::*` brings what most tests use.

pub mod calls;
pub mod wait;

pub use calls::{
    cstring, sys_rmdir, sys_umount2, sys_unlink, sys_unlinkat, this_thread, unlink_as_nobody, UNLINK_CALL,
};
pub use wait::{poll_until, poll_until_else, wait_until, within};

/// The suite's items, each under the `suite` feature (the default):
/// without it, the helper binaries the VM guests run (`actor`,
/// `fuse_server`) build with `calls` and `wait` alone, and none of the
/// suite's dependencies.
macro_rules! suite {
    ($($item:item)*) => { $(#[cfg(feature = "suite")] $item)* };
}

suite! {
    pub mod actors;
    pub mod apiserver;
    pub mod attacks;
    pub mod block;
    pub mod container;
    pub mod findings;
    pub mod harness;
    pub mod krew;
    pub mod kubectl;
    pub mod kubelet;
    pub mod mountinfo;
    pub mod node;
    pub mod oci;
    pub mod podstuck;
    pub mod prerequisite;
    pub mod release;
    pub mod runtimes;
    pub mod scrape;
    pub mod soak;
    pub mod terminal;

    pub use actors::{actor, actor_binary, alive, fuse_server, start_actor, task_state, wchan, Process};
    pub use findings::{latest_findings, shell_word, Expect};
    pub use harness::{can_touch_the_kernel, text, KernelTest, ScratchDir};
    pub use kubelet::{new_pod_uid, pod_slice, pod_with_empty_dir, KubeletRoot, Pod};
    pub use mountinfo::is_mountpoint;
    pub use node::{
        cgroup2_root, v1_hierarchy, which, BindMount, Bindfs, CgroupDirs, Chattr, CreatedDirs, FuseMount, Immutable,
        OverlayMount, PodCgroup, TmpfsMount, V1PodCgroups,
    };
    pub use podstuck::{
        abs_path_bytes, path_bytes, podstuck_binary, podstuck_refuses, program_loaded, programs_attached, series_count,
        status_kib, stop_when, summary_json, Attached, Finished, Watch,
    };
    pub use prerequisite::missing;
    pub use runtimes::{Containerd, Dockerd, EventLog, Podman, Propagation, RbindView};
}
