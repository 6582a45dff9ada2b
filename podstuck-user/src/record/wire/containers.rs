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
    argv: Vec<String>,
}

impl From<&ContainerCgroup> for WireContainerCgroup {
    fn from(c: &ContainerCgroup) -> WireContainerCgroup {
        let ContainerCgroup { dir, processes } = c;
        let processes = processes
            .iter()
            .map(|p| {
                let ContainerProcess { pid, start, started, ppid, comm, state, parent_outside, argv } = p;
                WireContainerProcess {
                    pid: *pid,
                    start: *start,
                    started: nanos(*started),
                    ppid: *ppid,
                    comm: comm.clone(),
                    state: *state,
                    parent_outside: *parent_outside,
                    argv: argv.clone(),
                }
            })
            .collect();
        WireContainerCgroup { dir: Bytes(dir.clone().into()), processes }
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
                argv: p.argv,
            })
            .collect();
        ContainerCgroup { dir: w.dir.into_vec(), processes }
    }
}
