//! Files people already know how to read, written to `--histograms DIR`
//! and refreshed every interval: `latency.hlog` (HdrHistogram interval
//! log), `summary.json`, `latency.svg`, `metrics.prom` (Prometheus text).
//!
//! Each file is replaced atomically (temporary file, then rename), so a
//! podstuck killed mid-incident, even by SIGKILL, leaves the files of the
//! last complete interval. The directory is checked when the run starts,
//! not when it ends.

pub mod hlog;
pub mod prom;
pub mod summary;
pub mod svg;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::latency::LatencyBook;

pub const HLOG: &str = "latency.hlog";
pub const SUMMARY: &str = "summary.json";
pub const SVG: &str = "latency.svg";
pub const PROM: &str = "metrics.prom";
pub const FILES: [&str; 4] = [HLOG, SUMMARY, SVG, PROM];

/// What was traced, where, with which filters: the run's metadata.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct RunInfo {
    pub node: String,
    pub kernel: String,
    pub podstuck_version: String,
    pub pods: Vec<String>,
    pub kubelet_root: String,
    pub syscalls: Vec<String>,
    pub errors_only: bool,
    pub started: String,
    pub updated: String,
    pub duration_s: f64,
    pub interval_s: f64,
    pub events_seen: u64,
    pub events_lost: u64,
    /// Every call, counted in the kernel (exact even when events are lost).
    pub calls_counted: BTreeMap<String, u64>,
    /// False while podstuck runs: the files are of the last interval.
    pub finished: bool,
}

/// The output directory, checked and ready.
pub struct Exporter {
    dir: PathBuf,
    log: Vec<u8>,
}

fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let temporary = dir.join(format!(".{name}.tmp"));
    let target = dir.join(name);
    let mut file = std::fs::File::create(&temporary).with_context(|| format!("creating {}", temporary.display()))?;
    file.write_all(bytes).with_context(|| format!("writing {} (disk full?)", temporary.display()))?;
    file.sync_data().with_context(|| format!("flushing {}", temporary.display()))?;
    std::fs::rename(&temporary, &target).with_context(|| format!("replacing {}", target.display()))
}

impl Exporter {
    /// Checks `dir` now, so that a bad directory fails at start: it is
    /// created if missing, must be writable, and must not hold an earlier
    /// run's files unless `force`.
    pub fn open(dir: &Path, force: bool, started: SystemTime) -> Result<Exporter> {
        if dir.exists() && !dir.is_dir() {
            bail!("--histograms {}: exists and is not a directory; choose a directory", dir.display());
        }
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--histograms {}: cannot create it; choose a writable directory", dir.display()))?;
        let earlier: Vec<&str> = FILES.iter().copied().filter(|f| dir.join(f).exists()).collect();
        if !earlier.is_empty() && !force {
            bail!(
                "--histograms {}: already holds podstuck files ({}); pass --force to overwrite them, or choose a new directory",
                dir.display(),
                earlier.join(", ")
            );
        }
        let probe = dir.join(".podstuck-write-test");
        std::fs::write(&probe, b"")
            .with_context(|| format!("--histograms {}: not writable; choose a writable directory", dir.display()))?;
        let _ = std::fs::remove_file(&probe);
        Ok(Exporter { dir: dir.to_path_buf(), log: hlog::header(started) })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Closes the book's interval at `now` and rewrites every file.
    pub fn refresh(&mut self, book: &mut LatencyBook, run: &RunInfo, now: SystemTime) -> Result<()> {
        let interval = book.close_interval(now);
        hlog::append_interval(&mut self.log, &interval)?;
        write_atomically(&self.dir, HLOG, &self.log)?;
        write_atomically(&self.dir, PROM, prom::render(book, run).as_bytes())?;
        write_atomically(&self.dir, SVG, svg::render(book, run).as_bytes())?;
        // Last: a summary.json of interval N means every file is of N or later.
        write_atomically(&self.dir, SUMMARY, summary::render(book, run).as_bytes())
    }
}

/// Seconds as the files show them.
pub fn seconds(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TempDir;

    #[test]
    fn an_earlier_runs_files_are_kept_without_force() {
        let tmp = TempDir::new("export-force");
        let now = SystemTime::now();
        Exporter::open(&tmp.0, false, now).unwrap();
        std::fs::write(tmp.0.join(SUMMARY), b"{}").unwrap();
        let err = Exporter::open(&tmp.0, false, now).err().unwrap().to_string();
        assert!(err.contains("--force") && err.contains(SUMMARY), "{err}");
        Exporter::open(&tmp.0, true, now).unwrap();
    }

    #[test]
    fn a_missing_directory_is_made_and_a_file_is_refused() {
        let tmp = TempDir::new("export-dir");
        let nested = tmp.0.join("a/b");
        Exporter::open(&nested, false, SystemTime::now()).unwrap();
        assert!(nested.is_dir());
        let file = tmp.0.join("file");
        std::fs::write(&file, b"").unwrap();
        let err = Exporter::open(&file, false, SystemTime::now()).err().unwrap().to_string();
        assert!(err.contains("not a directory"), "{err}");
    }
}
