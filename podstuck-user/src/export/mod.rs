//! Files people already know how to read, written to `--histograms DIR`
//! and refreshed every interval: `latency.hlog` (HdrHistogram interval
//! log), `summary.json`, `latency.svg`, `metrics.prom` (Prometheus text).
//!
//! Each file is replaced atomically (temporary file, then rename), so a
//! podstuck killed mid-incident, even by SIGKILL, leaves the files of the
//! last complete interval. The directory is checked when the run starts,
//! not when it ends.
//!
//! podstuck runs as root on a node whose other users are not trusted, so
//! the directory must be one only root can write (owned by root, not
//! group- or world-writable, sticky or not: [`files::others_can_write`]);
//! it is opened once without following a link at its name and kept open,
//! and every file is made new in it, mode 0600, never through a link and
//! never truncating anything ([`files`]). A refresh that fails (disk full)
//! is said once and retried every interval; a directory removed while
//! podstuck runs is made again by the same rules.

pub mod hlog;
pub mod prom;
pub mod summary;
pub mod svg;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::{self, ErrorKind};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;

use crate::event::syscall_name;
use crate::exit::BadInput;
use crate::files::{self, AtomicWriter};
use crate::latency::LatencyBook;
use crate::run::{RunFacts, RunTotals};
use crate::words::rfc3339;

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
    /// Of `events_lost`, the process lifecycle's records.
    #[serde(default)]
    pub lifecycle_lost: u64,
    /// Every call the run is about (with `--pod` the pods'), counted in
    /// the kernel (exact even when events are lost).
    pub calls_counted: BTreeMap<String, u64>,
    /// With `--pod`, every call of the node, by syscall.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_calls_counted: Option<BTreeMap<String, u64>>,
    /// Calls counted while the kernel's series map was full.
    #[serde(default)]
    pub calls_outside_series: u64,
    /// Execs of the node's CNI plugin files set aside as no runtime's work,
    /// by reason.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub lifecycle_dropped: BTreeMap<String, u64>,
    /// Failed calls whose path was the caller's word alone (a pod's own
    /// mount namespace), set aside, by reason.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub claims_set_aside: BTreeMap<String, u64>,
    /// Calls whose unproven path named another pod than the caller's.
    #[serde(default)]
    pub claims_naming_another_pod: u64,
    /// Times the rings' reader found a queue full.
    #[serde(default)]
    pub queue_full: u64,
    /// Filesystems podstuck does not read now (a read there did not
    /// return): mount point (escaped) and type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts_avoided: Vec<(String, String)>,
    /// Avoided filesystems that answered again, all counted ...
    #[serde(default)]
    pub mounts_recovered: u64,
    /// ... and the last few: mount point, type, seconds avoided.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts_recovered_last: Vec<(String, String, f64)>,
    /// Node reads that failed, by kind.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_reads_failed: BTreeMap<String, u64>,
    /// False while podstuck runs: the files are of the last interval.
    pub finished: bool,
}

impl RunInfo {
    /// `run`'s metadata at `now`, with what the kernel counted so far.
    pub fn of_run(run: &RunFacts, totals: &RunTotals, interval: Duration, now: SystemTime, finished: bool) -> RunInfo {
        RunInfo {
            node: run.node.clone(),
            kernel: run.kernel.clone(),
            podstuck_version: run.version.to_string(),
            pods: run.pods.iter().map(|p| p.to_string()).collect(),
            kubelet_root: run.kubelet_root.to_string_lossy().into_owned(),
            syscalls: run.syscall_names().iter().map(|s| s.to_string()).collect(),
            errors_only: run.errors_only,
            started: rfc3339(run.started),
            updated: rfc3339(now),
            duration_s: now.duration_since(run.started).unwrap_or_default().as_secs_f64(),
            interval_s: interval.as_secs_f64(),
            events_seen: totals.events_seen,
            events_lost: totals.events_lost,
            lifecycle_lost: totals.lifecycle_lost,
            calls_counted: totals.shown_calls().iter().map(|(s, n)| (syscall_name(*s).to_string(), *n)).collect(),
            node_calls_counted: totals
                .pods_calls
                .as_ref()
                .map(|_| totals.calls.iter().map(|(s, n)| (syscall_name(*s).to_string(), *n)).collect()),
            calls_outside_series: totals.calls_outside_series,
            lifecycle_dropped: totals.lifecycle_dropped.clone(),
            claims_set_aside: totals.claims_set_aside.clone(),
            claims_naming_another_pod: totals.claims_naming_another_pod,
            queue_full: totals.queue_full,
            mounts_avoided: totals
                .node_reads
                .avoided
                .iter()
                .map(|a| (crate::words::escape_path(&a.mount_point), a.fstype.clone()))
                .collect(),
            mounts_recovered: totals.node_reads.recovered_total,
            mounts_recovered_last: totals
                .node_reads
                .recovered
                .iter()
                .map(|r| (crate::words::escape_path(&r.mount_point), r.fstype.clone(), r.avoided_for.as_secs_f64()))
                .collect(),
            node_reads_failed: totals.node_reads.failed.clone(),
            finished,
        }
    }
}

/// Where the files go: the directory, open for the run, and what is
/// needed to make it again where it was if it is removed.
struct Place {
    dir: OwnedFd,
    /// The directory holding it and its name there, when the path has a
    /// last name (not `/`, `.` or `..`).
    parent: Option<(OwnedFd, CString)>,
}

/// How a directory was found.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Found {
    Made,
    Existing,
}

/// `--histograms DIR: <what>` with the io error said plainly.
fn dir_error(dir: &Path, what: &str, e: io::Error) -> anyhow::Error {
    anyhow!("--histograms {}: {what} ({e})", dir.display())
}

impl Place {
    /// Opens (making it if missing) the directory at `dir`, the path
    /// resolved as given except that a link at its last name is refused.
    fn open(dir: &Path) -> Result<(Place, Found)> {
        let (Some(leaf), Some(parent)) = (dir.file_name(), dir.parent()) else {
            // `/`, `.`, `..` or a path ending in `..`: no name to make.
            let fd = files::open_dir(None, &files::c_path(dir)?, true)
                .map_err(|e| dir_error(dir, "cannot open it; choose a directory only root can write", e))?;
            return Ok((Place { dir: fd, parent: None }, Found::Existing));
        };
        let parent = if parent.as_os_str().is_empty() { Path::new(".") } else { parent };
        let parent_fd = match files::open_dir(None, &files::c_path(parent)?, true) {
            Ok(fd) => fd,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                std::fs::create_dir_all(parent)
                    .map_err(|e| dir_error(dir, "cannot create it; choose a writable directory", e))?;
                files::open_dir(None, &files::c_path(parent)?, true)
                    .map_err(|e| dir_error(dir, "cannot create it; choose a writable directory", e))?
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                bail!("--histograms {}: {} is not a directory; choose a directory", dir.display(), parent.display())
            }
            Err(e) => return Err(dir_error(dir, "cannot open the directory it is in; choose a writable directory", e)),
        };
        let leaf = files::c_path(Path::new(leaf))?;
        let place = Place::open_in(dir, parent_fd, leaf)?;
        Ok(place)
    }

    /// Opens (making it if missing) `leaf` in `parent`.
    fn open_in(dir: &Path, parent: OwnedFd, leaf: CString) -> Result<(Place, Found)> {
        let made = files::mkdir_at(Some(parent.as_fd()), &leaf, files::DIR_MODE)
            .map_err(|e| dir_error(dir, "cannot create it; choose a writable directory", e))?;
        let fd = match files::open_dir(Some(parent.as_fd()), &leaf, false) {
            Ok(fd) => fd,
            // O_DIRECTORY|O_NOFOLLOW on a link: ENOTDIR (or ELOOP).
            Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
                let link = files::stat_at(parent.as_fd(), &leaf)
                    .ok()
                    .flatten()
                    .is_some_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFLNK);
                // Refusals of the path asked for: exit 2 (docs/exit-codes.md).
                if link {
                    return Err(BadInput(format!(
                        "--histograms {}: is a symbolic link, which podstuck does not follow there; give the directory it points to",
                        dir.display()
                    ))
                    .into());
                }
                return Err(BadInput(format!(
                    "--histograms {}: exists and is not a directory; choose a directory",
                    dir.display()
                ))
                .into());
            }
            Err(e) => return Err(dir_error(dir, "cannot open it", e)),
        };
        let found = if made { Found::Made } else { Found::Existing };
        Ok((Place { dir: fd, parent: Some((parent, leaf)) }, found))
    }

    /// Makes the directory again where it was: in the directory that held
    /// it, if that is still there, else by its path.
    fn reopen(&self, dir: &Path) -> Result<(Place, Found)> {
        if let Some((parent, leaf)) = &self.parent {
            let alive = files::stat(parent.as_fd()).is_ok_and(|st| st.st_nlink > 0);
            if alive {
                let parent = parent.try_clone().context("duplicating a descriptor")?;
                return Place::open_in(dir, parent, leaf.clone());
            }
        }
        Place::open(dir)
    }

    /// Whether the directory was removed while open.
    fn gone(&self) -> bool {
        files::stat(self.dir.as_fd()).map_or(true, |st| st.st_nlink == 0)
    }

    /// Refuses a directory another user can write or own (see
    /// [`files::others_can_write`]).
    fn check_owner(&self, dir: &Path) -> Result<()> {
        let st = files::stat(self.dir.as_fd()).map_err(|e| dir_error(dir, "cannot read its owner and mode", e))?;
        if let Some(why) = files::others_can_write(st.st_uid, st.st_mode, files::euid()) {
            return Err(BadInput(format!(
                "--histograms {d}: {why}, so another user could plant links in it or read or replace the files podstuck writes there; use a directory only root can write, e.g. create a new one with `install -d -m 0700 {fresh}` (and point node exporter's textfile collector at it)",
                d = dir.display(),
                fresh = fresh_dir(dir, |p| p.symlink_metadata().is_ok()).display()
            ))
            .into());
        }
        Ok(())
    }

    /// The rules a directory must pass, at start and when made again:
    /// only root can write it, it holds no earlier run's files unless
    /// `force` (or podstuck just made it), files can be made in it.
    fn check(&self, dir: &Path, found: Found, force: bool, writer: &mut AtomicWriter) -> Result<()> {
        self.check_owner(dir)?;
        let earlier = self.earlier_files();
        if found == Found::Existing && !earlier.is_empty() && !force {
            return Err(BadInput(format!(
                "--histograms {}: already holds podstuck files ({}); pass --force to overwrite them, or choose a new directory",
                dir.display(),
                earlier.join(", ")
            ))
            .into());
        }
        writer.probe(self.dir.as_fd()).map_err(|e| dir_error(dir, "not writable; choose a writable directory", e))
    }

    /// podstuck files already there (anything at their names, links too).
    fn earlier_files(&self) -> Vec<&'static str> {
        FILES
            .iter()
            .copied()
            .filter(|f| files::stat_at(self.dir.as_fd(), &CString::new(*f).unwrap()).is_ok_and(|s| s.is_some()))
            .collect()
    }
}

/// A directory to advise creating instead of `refused`, which exists:
/// one that does not exist yet, so pasting `install -d -m 0700` on it
/// makes it and never changes the mode or owner of a directory others
/// use (`--histograms /tmp` must not turn into a locked `/tmp`).
fn fresh_dir(refused: &Path, exists: impl Fn(&Path) -> bool) -> PathBuf {
    let base = Path::new("/var/lib/podstuck/histograms");
    std::iter::once(base.to_path_buf())
        .chain((2..).map(|n| PathBuf::from(format!("{}-{n}", base.display()))))
        .find(|p| p != refused && !exists(p))
        .expect("an unbounded sequence of names holds one that does not exist")
}

/// The output directory, checked and ready.
pub struct Exporter {
    /// As the user named it, for messages.
    dir: PathBuf,
    place: Place,
    force: bool,
    writer: AtomicWriter,
    log: Vec<u8>,
    /// A refresh failed and none succeeded since: said once.
    failing: bool,
}

/// What [`Exporter::refresh`] did besides writing the files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refreshed {
    /// Written where they were.
    InPlace,
    /// The directory had gone (removed while podstuck ran) and was made
    /// again, by the same rules as at start; the files are whole again.
    DirectoryMadeAgain,
}

impl Exporter {
    /// Checks `dir` now, so that a bad directory fails at start: it is
    /// created if missing (mode 0700), must be a directory only podstuck's
    /// user (root) can write, must be writable, and must not hold an
    /// earlier run's files unless `force`. Kept open for the run.
    pub fn open(dir: &Path, force: bool, started: SystemTime) -> Result<Exporter> {
        let (place, found) = Place::open(dir)?;
        let mut writer = AtomicWriter::new(files::FILE_MODE);
        place.check(dir, found, force, &mut writer)?;
        Ok(Exporter { dir: dir.to_path_buf(), place, force, writer, log: hlog::header(started), failing: false })
    }

    /// Files are created with this mode (default 0600).
    pub fn with_file_mode(mut self, mode: u32) -> Exporter {
        self.writer.set_mode(mode & 0o777);
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Closes the book's interval at `now` and rewrites every file. If the
    /// directory was removed, it is made again first (or when a write
    /// finds it gone), by the rules of [`Exporter::open`]. On an error the
    /// files keep their last complete interval, no temporary file is left,
    /// and the next refresh writes every interval since the start.
    pub fn refresh(&mut self, book: &mut LatencyBook, run: &RunInfo, now: SystemTime) -> Result<Refreshed> {
        let interval = book.close_interval(now);
        hlog::append_interval(&mut self.log, &interval)?;
        let mut refreshed = Refreshed::InPlace;
        if self.place.gone() {
            self.make_again()?;
            refreshed = Refreshed::DirectoryMadeAgain;
        }
        let (prom, svg, summary) = (prom::render(book, run), svg::render(book, run), summary::render(book, run));
        let files = [
            (HLOG, &self.log[..]),
            (PROM, prom.as_bytes()),
            (SVG, svg.as_bytes()),
            // Last: a summary.json of interval N means every file is of N or later.
            (SUMMARY, summary.as_bytes()),
        ];
        match write_files(&mut self.writer, &self.place, &files) {
            Ok(()) => Ok(refreshed),
            // Removed while being written: once more, in a new one.
            Err(_) if refreshed == Refreshed::InPlace && self.place.gone() => {
                let (place, found) = self.place.reopen(&self.dir)?;
                place.check(&self.dir, found, self.force, &mut self.writer)?;
                self.place = place;
                write_files(&mut self.writer, &self.place, &files)?;
                Ok(Refreshed::DirectoryMadeAgain)
            }
            Err(e) => Err(e),
        }
    }

    /// A refresh while podstuck runs: what to tell the user, if anything.
    /// A failure is said once, not every interval, until a refresh works
    /// again (which is said too); a directory made again is said each time.
    pub fn refresh_and_tell(&mut self, book: &mut LatencyBook, run: &RunInfo, now: SystemTime) -> Option<String> {
        let dir = self.dir.display().to_string();
        match self.refresh(book, run, now) {
            Ok(refreshed) => {
                let was_failing = std::mem::replace(&mut self.failing, false);
                match refreshed {
                    Refreshed::DirectoryMadeAgain => Some(format!(
                        "the histogram directory {dir} was removed while podstuck ran: made it again, checked as at start, and wrote the files whole there"
                    )),
                    Refreshed::InPlace if was_failing => Some(format!("histogram files in {dir} are written again")),
                    Refreshed::InPlace => None,
                }
            }
            Err(e) if !self.failing => {
                self.failing = true;
                Some(format!(
                    "cannot refresh histogram files in {dir}: {e:#}; tracing goes on, the files keep the last interval written, and podstuck tries again every interval (said once)"
                ))
            }
            Err(_) => None,
        }
    }

    /// Adopts the directory made again only once it passed every rule.
    fn make_again(&mut self) -> Result<()> {
        let (place, found) = self.place.reopen(&self.dir)?;
        place.check(&self.dir, found, self.force, &mut self.writer)?;
        self.place = place;
        Ok(())
    }
}

/// Replaces each file in `place`, in order, and flushes the directory.
fn write_files(writer: &mut AtomicWriter, place: &Place, files: &[(&str, &[u8])]) -> Result<()> {
    let dir = place.dir.as_fd();
    for (name, bytes) in files {
        writer.write(dir, name, bytes).with_context(|| format!("writing {name}"))?;
    }
    AtomicWriter::sync_dir(dir).context("flushing the directory")
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

    fn book_and_run() -> (LatencyBook, RunInfo) {
        use crate::identify::actor::Role;
        use crate::latency::tests::{event, identity};
        let mut book = LatencyBook::new(SystemTime::now());
        for i in 0..10u64 {
            book.record(&event(podstuck_common::Syscall::Unlink, 0, 2_000 + i), &identity(Role::Other, None));
        }
        (book, summary::tests::run_info())
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    fn mode_of(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn a_directory_others_can_write_is_refused_with_why_and_what_to_do() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = TempDir::new("export-rule");
        for mode in [0o777, 0o1777, 0o770, 0o720] {
            std::fs::set_permissions(&tmp.0, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = Exporter::open(&tmp.0, false, SystemTime::now()).err().unwrap().to_string();
            assert!(err.contains("writable by"), "{mode:o}: {err}");
            assert!(
                err.contains("another user could plant links in it")
                    && err.contains("install -d -m 0700 /var/lib/podstuck/histograms"),
                "{err}"
            );
            assert!(
                !err.contains(&format!("0700 {}", tmp.0.display())),
                "never advise changing the refused directory: {err}"
            );
            assert!(names(&tmp.0).is_empty(), "nothing written: {:?}", names(&tmp.0));
        }
        std::fs::set_permissions(&tmp.0, std::fs::Permissions::from_mode(0o755)).unwrap();
        Exporter::open(&tmp.0, false, SystemTime::now()).unwrap();
        if files::euid() == 0 {
            std::os::unix::fs::chown(&tmp.0, Some(65534), None).unwrap();
            let err = Exporter::open(&tmp.0, false, SystemTime::now()).err().unwrap().to_string();
            assert!(err.contains("owned by uid 65534, not by root"), "{err}");
        }
    }

    #[test]
    fn with_pod_summary_json_counts_the_pods_calls_and_the_nodes_apart() {
        let facts = crate::run::tests::run();
        let mut totals = RunTotals {
            calls: BTreeMap::from([(podstuck_common::Syscall::Unlinkat, 87_571), (podstuck_common::Syscall::Rmdir, 4)]),
            ..Default::default()
        };
        let info = RunInfo::of_run(&facts, &totals, Duration::from_secs(5), SystemTime::UNIX_EPOCH, true);
        assert_eq!((info.calls_counted["unlinkat"], info.node_calls_counted.as_ref()), (87_571, None));
        totals.pods_calls = Some(BTreeMap::from([(podstuck_common::Syscall::Unlinkat, 4)]));
        let info = RunInfo::of_run(&facts, &totals, Duration::from_secs(5), SystemTime::UNIX_EPOCH, true);
        assert_eq!(info.calls_counted, BTreeMap::from([("unlinkat".to_string(), 4), ("rmdir".to_string(), 0)]));
        assert_eq!(info.node_calls_counted.as_ref().unwrap()["unlinkat"], 87_571);
        let json: serde_json::Value = serde_json::to_value(&info).unwrap();
        assert_eq!(
            (json["calls_counted"]["unlinkat"].as_u64(), json["node_calls_counted"]["unlinkat"].as_u64()),
            (Some(4), Some(87_571))
        );
    }

    #[test]
    fn advice_for_a_refused_directory_names_one_that_does_not_exist() {
        // `--histograms /tmp`: advising `install -d -m 0700 /tmp` would lock
        // every other user out of /tmp.
        let none = |_: &Path| false;
        assert_eq!(fresh_dir(Path::new("/tmp"), none), Path::new("/var/lib/podstuck/histograms"));
        let taken = |p: &Path| {
            p == Path::new("/var/lib/podstuck/histograms") || p == Path::new("/var/lib/podstuck/histograms-2")
        };
        assert_eq!(fresh_dir(Path::new("/tmp"), taken), Path::new("/var/lib/podstuck/histograms-3"));
        // The refused directory itself is never the advice, even when it is
        // the usual name and (as a refused one must) exists.
        assert_eq!(
            fresh_dir(Path::new("/var/lib/podstuck/histograms"), none),
            Path::new("/var/lib/podstuck/histograms-2")
        );
    }

    #[test]
    fn a_made_directory_and_its_files_are_roots_alone() {
        let tmp = TempDir::new("export-modes");
        let dir = tmp.0.join("out");
        let mut exporter = Exporter::open(&dir, false, SystemTime::now()).unwrap();
        assert_eq!(mode_of(&dir), 0o700);
        let (mut book, run) = book_and_run();
        assert_eq!(exporter.refresh(&mut book, &run, SystemTime::now()).unwrap(), Refreshed::InPlace);
        assert_eq!(names(&dir), ["latency.hlog", "latency.svg", "metrics.prom", "summary.json"]);
        for f in FILES {
            assert_eq!(mode_of(&dir.join(f)), 0o600, "{f}");
        }
        let mut exporter = exporter.with_file_mode(0o640);
        exporter.refresh(&mut book, &run, SystemTime::now()).unwrap();
        assert_eq!(mode_of(&dir.join(SUMMARY)), 0o640);
    }

    /// Links planted at the write test's name and at the final names (with
    /// --force) are never written through; the final ones are replaced.
    #[test]
    fn planted_links_are_replaced_never_followed() {
        let tmp = TempDir::new("export-links");
        let dir = tmp.0.join("out");
        std::fs::create_dir(&dir).unwrap();
        let victim = tmp.0.join("victim");
        std::fs::write(&victim, b"precious\n").unwrap();
        let mut planted = vec![".podstuck-write-test".to_string()];
        planted.extend(FILES.iter().map(|f| f.to_string()));
        planted.extend(FILES.iter().map(|f| format!(".{f}.tmp")));
        for name in &planted {
            std::os::unix::fs::symlink(&victim, dir.join(name)).unwrap();
        }
        let err = Exporter::open(&dir, false, SystemTime::now()).err().unwrap().to_string();
        assert!(err.contains("--force"), "links at the final names count as earlier files: {err}");
        let mut exporter = Exporter::open(&dir, true, SystemTime::now()).unwrap();
        let (mut book, run) = book_and_run();
        exporter.refresh(&mut book, &run, SystemTime::now()).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious\n");
        for f in FILES {
            assert!(dir.join(f).symlink_metadata().unwrap().file_type().is_file(), "{f} replaced by a file of ours");
        }
        assert!(std::fs::read_to_string(dir.join(SUMMARY)).unwrap().contains("\"series\""));
        assert_eq!(std::fs::read_link(dir.join(".podstuck-write-test")).unwrap(), victim, "not ours: left alone");
    }

    #[test]
    fn a_link_at_the_directorys_name_is_refused() {
        let tmp = TempDir::new("export-dirlink");
        std::fs::create_dir(tmp.0.join("real")).unwrap();
        std::os::unix::fs::symlink(tmp.0.join("real"), tmp.0.join("link")).unwrap();
        let err = Exporter::open(&tmp.0.join("link"), false, SystemTime::now()).err().unwrap().to_string();
        assert!(err.contains("is a symbolic link"), "{err}");
        assert!(names(&tmp.0.join("real")).is_empty());
    }

    #[test]
    fn a_removed_directory_is_made_again_with_whole_files() {
        let tmp = TempDir::new("export-removed");
        let dir = tmp.0.join("out");
        let mut exporter = Exporter::open(&dir, false, SystemTime::now()).unwrap();
        let (mut book, run) = book_and_run();
        assert_eq!(exporter.refresh_and_tell(&mut book, &run, SystemTime::now()), None);
        std::fs::remove_dir_all(&dir).unwrap();
        let said = exporter.refresh_and_tell(&mut book, &run, SystemTime::now()).unwrap();
        assert!(said.contains("was removed while podstuck ran: made it again"), "{said}");
        assert_eq!(mode_of(&dir), 0o700);
        assert_eq!(exporter.refresh_and_tell(&mut book, &run, SystemTime::now()), None);
        let intervals = hlog::read(&std::fs::read(dir.join(HLOG)).unwrap()).unwrap();
        assert_eq!(intervals.iter().map(|i| i.histogram.len()).sum::<u64>(), 10, "every interval since the start");
        // The directory it was in gone too: made again by its path.
        std::fs::remove_dir_all(&tmp.0).unwrap();
        let said = exporter.refresh_and_tell(&mut book, &run, SystemTime::now()).unwrap();
        assert!(said.contains("made it again"), "{said}");
        assert_eq!(names(&dir), ["latency.hlog", "latency.svg", "metrics.prom", "summary.json"]);
    }

    /// Removed, then put back by another user before podstuck makes it
    /// again: refused, said, nothing written there, and tried again.
    #[test]
    fn a_directory_put_back_writable_by_others_is_not_written() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = TempDir::new("export-putback");
        let dir = tmp.0.join("out");
        let mut exporter = Exporter::open(&dir, false, SystemTime::now()).unwrap();
        let (mut book, run) = book_and_run();
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let said = exporter.refresh_and_tell(&mut book, &run, SystemTime::now()).unwrap();
        assert!(said.contains("writable by everyone") && said.contains("another user could"), "{said}");
        assert_eq!(exporter.refresh_and_tell(&mut book, &run, SystemTime::now()), None);
        assert!(names(&dir).is_empty(), "{:?}", names(&dir));
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(exporter.refresh_and_tell(&mut book, &run, SystemTime::now()).unwrap().contains("made it again"));
        assert_eq!(names(&dir), ["latency.hlog", "latency.svg", "metrics.prom", "summary.json"]);
    }

    #[test]
    fn a_failing_refresh_is_said_once_and_its_end_too() {
        let tmp = TempDir::new("export-failing");
        let mut exporter = Exporter::open(&tmp.0, false, SystemTime::now()).unwrap();
        let (mut book, run) = book_and_run();
        // A directory at a final name: every refresh fails at it.
        std::fs::create_dir(tmp.0.join(SVG)).unwrap();
        let said = exporter.refresh_and_tell(&mut book, &run, SystemTime::now()).unwrap();
        assert!(
            said.starts_with(&format!("cannot refresh histogram files in {}: writing latency.svg", tmp.0.display())),
            "{said}"
        );
        assert!(said.contains("tracing goes on") && said.contains("(said once)"), "{said}");
        for _ in 0..3 {
            assert_eq!(
                exporter.refresh_and_tell(&mut book, &run, SystemTime::now()),
                None,
                "said once, not every interval"
            );
        }
        assert_eq!(names(&tmp.0), ["latency.hlog", "latency.svg", "metrics.prom"], "no temporary file left");
        std::fs::remove_dir(tmp.0.join(SVG)).unwrap();
        let said = exporter.refresh_and_tell(&mut book, &run, SystemTime::now()).unwrap();
        assert!(said.ends_with("are written again"), "{said}");
        assert_eq!(names(&tmp.0), ["latency.hlog", "latency.svg", "metrics.prom", "summary.json"]);
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
