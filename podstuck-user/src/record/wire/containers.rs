//! A container's cgroup and its processes (the `container_processes`
//! question's answer) as a record keeps them, apart from the live types.

use serde::{Deserialize, Serialize};

use super::{at_most, nanos, time, Bytes};
use crate::inspect::{ContainerCgroup, ContainerProcess};

#[derive(Debug, Serialize, Deserialize)]
pub struct WireContainerCgroup {
    dir: Bytes<'static>,
    #[serde(deserialize_with = "at_most")]
    processes: Vec<WireContainerProcess>,
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "at_most")]
    runtime_pipes: Vec<(u64, u64)>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct WireContainerProcess {
    pid: u32,
    start: u64,
    started: u64,
    ppid: u32,
    comm: String,
    state: char,
    parent_outside: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "at_most")]
    stdio_pipes: Vec<(u64, u64)>,
    argv: Vec<String>,
}

impl From<&ContainerCgroup> for WireContainerCgroup {
    fn from(c: &ContainerCgroup) -> WireContainerCgroup {
        let ContainerCgroup { dir, processes, runtime_pipes } = c;
        let processes = processes
            .iter()
            .map(|p| {
                let ContainerProcess { pid, start, started, ppid, comm, state, parent_outside, stdio_pipes, argv } = p;
                WireContainerProcess {
                    pid: *pid,
                    start: *start,
                    started: nanos(*started),
                    ppid: *ppid,
                    comm: comm.clone(),
                    state: *state,
                    parent_outside: *parent_outside,
                    stdio_pipes: stdio_pipes.clone(),
                    argv: argv.clone(),
                }
            })
            .collect();
        WireContainerCgroup { dir: Bytes(dir.clone().into()), processes, runtime_pipes: runtime_pipes.clone() }
    }
}

impl From<WireContainerCgroup> for ContainerCgroup {
    fn from(w: WireContainerCgroup) -> ContainerCgroup {
        let processes = w
            .processes
            .into_iter()
            .map(|p| ContainerProcess {
                pid: p.pid,
                start: p.start,
                started: time(p.started),
                ppid: p.ppid,
                comm: p.comm,
                state: p.state,
                parent_outside: p.parent_outside,
                stdio_pipes: p.stdio_pipes,
                argv: p.argv,
            })
            .collect();
        ContainerCgroup { dir: w.dir.into_vec(), processes, runtime_pipes: w.runtime_pipes }
    }
}
