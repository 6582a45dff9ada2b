//! podstuck: finds why a Kubernetes pod is stuck in Terminating by tracing,
//! in the kernel, the calls that tear a pod down (`unlinkat`, `unlink`,
//! `rmdir`, `umount2`) and who makes them.
//!
//! Data flows one way through the stages, one module each:
//! [`collect`] (load the kernel programs, drain records) → [`event`]
//! (decode) → [`identify`] (absolute path, pod, actor) → [`diagnose`]
//! (one detector per pathology, asking [`inspect`] for node state) →
//! [`print`] (one printer per output: JSON lines, call lines, finding
//! lines, the live view of [`view`], the metrics endpoint that [`serve`]
//! serves) and [`latency`]/[`export`] (histogram files). [`watch`] runs them: it gathers the [`run`]'s facts once,
//! traces, and hands each call and review down the stages.
//! [`preflight`] and [`check`] judge the node first, from what
//! [`kernel_features`] probes; [`btf`] reads the struct offsets the kernel
//! programs need. [`record`] saves what the diagnosis consumed and replays
//! it elsewhere; [`demo`] is the built-in scenario lab. The `podstuck`
//! binary is a thin clap layer over [`watch`] and these; the
//! `kubectl-podstuck` binary one over [`kubectl_plugin`], which runs
//! podstuck in a debug pod on a stuck pod's node. [`explain`] asks the
//! Kubernetes API the same question (`podstuck explain`), and joins its
//! answer to the kernel's in `watch --pod NS/NAME`. [`words`] is the
//! ground floor: how times, paths, durations and node-chosen text are
//! said, for all; [`mountinfo`] is beside it, the one reader of mount
//! tables; [`exit`] the codes every command ends with.

pub mod attach_cost;
pub mod btf;
pub mod check;
pub mod cni_plugins;
pub mod collect;
pub mod demo;
pub mod diagnose;
pub mod event;
pub mod exit;
pub mod explain;
pub mod export;
pub mod files;
pub mod finding_block;
#[cfg(test)]
mod fuzz;
pub mod identify;
pub mod inspect;
pub mod k8s_events;
pub mod kernel_features;
pub mod kubectl_plugin;
pub mod latency;
pub mod lifecycle;
pub mod mountinfo;
pub mod node_access;
pub mod pod;
pub mod preflight;
pub mod print;
pub mod record;
pub mod report;
pub mod run;
pub mod series;
pub mod serve;
pub mod tracer_lock;
pub mod view;
pub mod watch;
pub mod words;

#[cfg(test)]
mod test_support;
