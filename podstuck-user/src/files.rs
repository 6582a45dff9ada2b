//! Files podstuck writes or reads as root on a node whose other users are
//! not trusted: the `--histograms` directory, the record file and the
//! plugin's copies are written by these rules; a file a user hands podstuck
//! to read (a report, `explain --from`, a kubeconfig) is opened by
//! [`open_regular`].
//!
//! - A directory is opened once, without following a link at its own name
//!   (`O_DIRECTORY|O_NOFOLLOW`), and kept open for the run; every file in
//!   it is made relative to that descriptor (`openat`, `linkat`,
//!   `renameat`, `unlinkat`), so renaming or replacing a directory on the
//!   way never redirects a write.
//! - A file is made new or not at all: an unnamed file (`O_TMPFILE`) given
//!   a name only once written, or, where the filesystem has none, a name
//!   made with `O_CREAT|O_EXCL|O_NOFOLLOW`. Nothing is ever opened for
//!   writing that podstuck did not just create: a link planted at any name
//!   podstuck uses is never written through and nothing is truncated.
//! - Temporary names are `.<name>.<pid>.<n>.tmp` (the write test at start:
//!   an unnamed file, else `.podstuck-write-test.<pid>.<n>.tmp`), `n`
//!   counted per name from 0; a name that is taken (by anything) is
//!   skipped for the next `n`. The rename into place replaces
//!   whatever sits at the final name, a planted link included, without
//!   following it.
//! - Files are created mode 0600 (exactly: set with `fchmod`, whatever the
//!   umask), unless the caller asks for another mode.
//! - [`others_can_write`] is the rule a directory must pass.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::{self, ErrorKind, Write};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{self, AtFlags, OFlag, AT_FDCWD};
use nix::sys::stat::Mode;
use nix::unistd::{self, UnlinkatFlags};

/// The mode of every file podstuck creates, unless asked otherwise.
pub const FILE_MODE: u32 = 0o600;
/// The mode of a directory podstuck creates for its files.
pub const DIR_MODE: u32 = 0o700;
/// How many taken temporary names are skipped before giving up.
const TEMP_ATTEMPTS: u32 = 1000;

/// Runs a system call again when a signal interrupted it.
fn retry<T>(mut call: impl FnMut() -> nix::Result<T>) -> io::Result<T> {
    loop {
        match call() {
            Err(Errno::EINTR) => continue,
            other => return other.map_err(io::Error::from),
        }
    }
}

/// The directory a call is relative to: `dir`, else the working directory.
fn at(dir: Option<BorrowedFd<'_>>) -> BorrowedFd<'_> {
    dir.unwrap_or(AT_FDCWD)
}

fn mode_bits(mode: u32) -> Mode {
    Mode::from_bits_truncate(mode as libc::mode_t)
}

/// A path or name as the kernel takes it.
pub fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(ErrorKind::InvalidInput, "the name holds a NUL byte"))
}

fn c_name(name: &str) -> CString {
    CString::new(name).expect("podstuck's own file names hold no NUL")
}

/// `openat(2)` with `O_CLOEXEC`.
fn open_at(dir: Option<BorrowedFd<'_>>, path: &CStr, flags: OFlag, mode: u32) -> io::Result<OwnedFd> {
    retry(|| fcntl::openat(at(dir), path, flags | OFlag::O_CLOEXEC, mode_bits(mode)))
}

/// Opens a directory; with `follow` false, a symbolic link at `path`'s
/// last component is refused (`ENOTDIR`, or `ELOOP`) instead of followed.
pub fn open_dir(dir: Option<BorrowedFd<'_>>, path: &CStr, follow: bool) -> io::Result<OwnedFd> {
    let nofollow = if follow { OFlag::empty() } else { OFlag::O_NOFOLLOW };
    open_at(dir, path, OFlag::O_RDONLY | OFlag::O_DIRECTORY | nofollow, 0)
}

/// `fstat(2)`.
pub fn stat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    Ok(nix::sys::stat::fstat(fd)?)
}

/// What is at `name` in `dir`, a link itself rather than what it points
/// to; `None` when nothing is.
pub fn stat_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<Option<libc::stat>> {
    match nix::sys::stat::fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// `mkdirat(2)`; true when made, false when something was already there.
pub fn mkdir_at(dir: Option<BorrowedFd<'_>>, name: &CStr, mode: u32) -> io::Result<bool> {
    match retry(|| nix::sys::stat::mkdirat(at(dir), name, mode_bits(mode))) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// `unlinkat(2)` of a file.
pub fn unlink_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    retry(|| unistd::unlinkat(dir, name, UnlinkatFlags::NoRemoveDir))
}

/// `renameat(2)` within one directory: replaces whatever is at `to` (a
/// link itself, never what it points to).
pub fn rename_at(dir: BorrowedFd<'_>, from: &CStr, to: &CStr) -> io::Result<()> {
    retry(|| fcntl::renameat(dir, from, dir, to))
}

/// Sets a file's mode exactly, whatever the umask took away.
fn set_mode(file: &File, mode: u32) -> io::Result<()> {
    retry(|| nix::sys::stat::fchmod(file, mode_bits(mode)))
}

/// Creates `name` in `dir` (or relative to the working directory): a new
/// file or an error, never an existing file opened nor a link followed
/// (`O_CREAT|O_EXCL|O_NOFOLLOW`); mode `mode` exactly.
pub fn create_new_at(dir: Option<BorrowedFd<'_>>, name: &CStr, mode: u32) -> io::Result<File> {
    let fd = open_at(dir, name, OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW, mode)?;
    let file = File::from(fd);
    if let Err(e) = set_mode(&file, mode) {
        drop(file);
        if let Some(dir) = dir {
            let _ = unlink_at(dir, name);
        }
        return Err(e);
    }
    Ok(file)
}

/// An unnamed file in `dir` (`O_TMPFILE`): it vanishes if podstuck stops
/// before giving it a name. `Ok(None)` where the filesystem or kernel has
/// no such files.
fn create_unnamed(dir: BorrowedFd<'_>, mode: u32) -> io::Result<Option<File>> {
    match open_at(Some(dir), c".", OFlag::O_WRONLY | OFlag::O_TMPFILE, mode) {
        Ok(fd) => {
            let file = File::from(fd);
            set_mode(&file, mode)?;
            Ok(Some(file))
        }
        // Older kernels, filesystems without it (NFS, some FUSE).
        Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Gives an unnamed file a name in `dir`; `EEXIST` if it is taken.
fn link_unnamed(file: &File, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    match retry(|| unistd::linkat(file, c"", dir, name, AtFlags::AT_EMPTY_PATH)) {
        // AT_EMPTY_PATH wants CAP_DAC_READ_SEARCH: without it, through /proc
        // (the way open(2) documents for O_TMPFILE files).
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EPERM)) => {
            let Ok(proc_link) = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd())) else { return Err(e) };
            retry(|| unistd::linkat(AT_FDCWD, proc_link.as_c_str(), dir, name, AtFlags::AT_SYMLINK_FOLLOW))
        }
        other => other,
    }
}

/// Why another user could plant links in, or replace or read files in, a
/// directory of this owner and mode, for a process of effective uid
/// `euid`; `None` when only `euid` (and root) can write it.
///
/// The rule: the directory must be owned by `euid` and must not be
/// writable by its group or by others (`mode & 0o022 == 0`), sticky or
/// not. A POSIX ACL granting anyone write shows as group write in the mode
/// (the ACL mask), so it is refused too.
pub fn others_can_write(owner: u32, mode: u32, euid: u32) -> Option<String> {
    let mode = mode & 0o7777;
    if owner != euid {
        let us = if euid == 0 { "root".to_string() } else { format!("uid {euid}, which podstuck runs as") };
        return Some(format!("it is owned by uid {owner}, not by {us}"));
    }
    let sticky = if mode & 0o1000 != 0 { ", sticky" } else { "" };
    match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (_, true) => Some(format!("it is writable by everyone (mode {mode:04o}{sticky})")),
        (true, false) => Some(format!("it is writable by its group (mode {mode:04o}{sticky})")),
        (false, false) => None,
    }
}

/// The effective uid of this process.
pub fn euid() -> u32 {
    unistd::geteuid().as_raw()
}

/// Writes whole files into a directory, each replaced atomically.
#[derive(Debug)]
pub struct AtomicWriter {
    pid: u32,
    /// The next temporary number per final name.
    next: std::collections::HashMap<String, u64>,
    /// Whether unnamed files (`O_TMPFILE`) work in this directory.
    unnamed: bool,
    mode: u32,
}

/// A temporary name of ours in `dir`: removed when dropped unless it was
/// renamed into place, so no error path leaves one behind.
struct Temporary<'a> {
    dir: BorrowedFd<'a>,
    name: Option<CString>,
}

impl Drop for Temporary<'_> {
    fn drop(&mut self) {
        if let Some(name) = self.name.take() {
            let _ = unlink_at(self.dir, &name);
        }
    }
}

impl AtomicWriter {
    pub fn new(mode: u32) -> AtomicWriter {
        AtomicWriter { pid: std::process::id(), next: Default::default(), unnamed: true, mode }
    }

    pub fn mode(&self) -> u32 {
        self.mode
    }

    pub fn set_mode(&mut self, mode: u32) {
        self.mode = mode;
    }

    /// The temporary name for `name`'s next try.
    fn temporary_name(&mut self, name: &str) -> CString {
        let n = self.next.entry(name.to_string()).or_insert(0);
        let temp = format!(".{name}.{}.{n}.tmp", self.pid);
        *n += 1;
        c_name(&temp)
    }

    /// Runs `make` on fresh temporary names for `name` until one is not
    /// taken.
    fn on_a_free_name<'d>(
        &mut self,
        dir: BorrowedFd<'d>,
        name: &str,
        mut make: impl FnMut(&CStr) -> io::Result<()>,
    ) -> io::Result<Temporary<'d>> {
        for _ in 0..TEMP_ATTEMPTS {
            let temp = self.temporary_name(name);
            match make(&temp) {
                Ok(()) => return Ok(Temporary { dir, name: Some(temp) }),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            ErrorKind::AlreadyExists,
            format!("{TEMP_ATTEMPTS} temporary names for {name} are all taken"),
        ))
    }

    /// Checks that files can be made in `dir`, leaving nothing behind.
    pub fn probe(&mut self, dir: BorrowedFd<'_>) -> io::Result<()> {
        if self.unnamed {
            match create_unnamed(dir, self.mode)? {
                Some(_) => return Ok(()),
                None => self.unnamed = false,
            }
        }
        let mode = self.mode;
        let _removed_on_drop =
            self.on_a_free_name(dir, "podstuck-write-test", |temp| create_new_at(Some(dir), temp, mode).map(drop))?;
        Ok(())
    }

    /// Replaces `name` in `dir` with `bytes`: written to a new file,
    /// flushed to disk, then renamed over `name`. On any error the old
    /// `name` is untouched and no temporary file is left.
    pub fn write(&mut self, dir: BorrowedFd<'_>, name: &str, bytes: &[u8]) -> io::Result<()> {
        let mode = self.mode;
        let unnamed = if self.unnamed { create_unnamed(dir, mode)? } else { None };
        self.unnamed = unnamed.is_some();
        let temporary = match unnamed {
            Some(mut file) => {
                file.write_all(bytes)?;
                file.sync_data()?;
                self.on_a_free_name(dir, name, |temp| link_unnamed(&file, dir, temp))?
            }
            None => {
                let mut file = None;
                let temporary = self.on_a_free_name(dir, name, |temp| {
                    file = Some(create_new_at(Some(dir), temp, mode)?);
                    Ok(())
                })?;
                let mut file = file.expect("made with the name");
                file.write_all(bytes)?;
                file.sync_data()?;
                temporary
            }
        };
        let mut temporary = temporary;
        let temp = temporary.name.as_deref().expect("named");
        rename_at(dir, temp, &c_name(name))?;
        temporary.name = None;
        Ok(())
    }

    /// Flushes the directory itself, so the renames last a power cut.
    pub fn sync_dir(dir: BorrowedFd<'_>) -> io::Result<()> {
        match retry(|| unistd::fsync(dir)) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EROFS)) => Ok(()),
            other => other,
        }
    }

    #[cfg(test)]
    fn without_unnamed_files(mut self) -> AtomicWriter {
        self.unnamed = false;
        self
    }
}

/// Opens `path` for reading only if it is a regular file (through a
/// symbolic link or not): a FIFO would block the reader for ever, a device
/// be read without end. Checked before opening, then opened without
/// blocking and checked again on what was opened (it may have changed).
/// For every file a user hands podstuck to read (reports, `explain --from`,
/// kubeconfigs).
pub fn open_regular(path: &Path) -> io::Result<File> {
    let not_regular = |kind| io::Error::new(ErrorKind::InvalidInput, format!("it is a {kind}, not a regular file"));
    let kind = std::fs::metadata(path)?.file_type();
    if !kind.is_file() {
        return Err(not_regular(crate::words::file_kind(&kind)));
    }
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY).open(path)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(not_regular(crate::words::file_kind(&kind)));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TempDir;
    use std::os::fd::AsFd;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn the_rule_refuses_other_owners_and_group_or_world_write() {
        assert_eq!(others_can_write(0, 0o40700, 0), None);
        assert_eq!(others_can_write(0, 0o40755, 0), None);
        assert_eq!(others_can_write(0, 0o41755, 0), None, "sticky alone gives no one write");
        assert_eq!(others_can_write(1000, 0o700, 0).unwrap(), "it is owned by uid 1000, not by root");
        assert_eq!(others_can_write(0, 0o775, 0).unwrap(), "it is writable by its group (mode 0775)");
        assert_eq!(others_can_write(0, 0o41777, 0).unwrap(), "it is writable by everyone (mode 1777, sticky)");
        assert_eq!(others_can_write(0, 0o703, 0).unwrap(), "it is writable by everyone (mode 0703)");
        assert_eq!(
            others_can_write(0, 0o700, 1000).unwrap(),
            "it is owned by uid 0, not by uid 1000, which podstuck runs as"
        );
    }

    /// Links planted at every temporary name a write will try, and at the
    /// final name: none is written through, the final name becomes our
    /// file, the planted temporaries stay as they were (not ours).
    fn planted_links_are_never_written_through(writer: AtomicWriter) {
        let tmp = TempDir::new("files-planted");
        let dir_path = tmp.0.join("out");
        std::fs::create_dir(&dir_path).unwrap();
        let victim = tmp.0.join("victim");
        std::fs::write(&victim, b"precious\n").unwrap();
        let mut writer = writer;
        for n in 0..5 {
            std::os::unix::fs::symlink(&victim, dir_path.join(format!(".summary.json.{}.{n}.tmp", writer.pid)))
                .unwrap();
        }
        std::os::unix::fs::symlink(&victim, dir_path.join("summary.json")).unwrap();
        std::os::unix::fs::symlink(&victim, dir_path.join(".podstuck-write-test")).unwrap();
        for n in 0..5 {
            std::os::unix::fs::symlink(&victim, dir_path.join(format!(".podstuck-write-test.{}.{n}.tmp", writer.pid)))
                .unwrap();
        }
        let dir = open_dir(None, &c_path(&dir_path).unwrap(), false).unwrap();
        writer.probe(dir.as_fd()).unwrap();
        writer.write(dir.as_fd(), "summary.json", b"{\"ours\":1}").unwrap();
        writer.write(dir.as_fd(), "summary.json", b"{\"ours\":2}").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious\n");
        let ours = dir_path.join("summary.json");
        assert!(ours.symlink_metadata().unwrap().file_type().is_file(), "the link at the final name was replaced");
        assert_eq!(std::fs::read(&ours).unwrap(), b"{\"ours\":2}");
        assert_eq!(ours.metadata().unwrap().permissions().mode() & 0o7777, 0o600);
        let planted = entries(&dir_path).into_iter().filter(|n| n.ends_with(".tmp")).count();
        assert_eq!(planted, 10, "only the planted links: {:?}", entries(&dir_path));
        if !writer.unnamed {
            assert_eq!(writer.next["podstuck-write-test"], 6, "the planted write-test names were tried and skipped");
        }
        assert_eq!(writer.next["summary.json"], 7, "five planted names skipped, then one name per write");
        for n in 0..5 {
            let link = dir_path.join(format!(".summary.json.{}.{n}.tmp", writer.pid));
            assert_eq!(std::fs::read_link(&link).unwrap(), victim);
        }
    }

    #[test]
    fn planted_links_are_never_written_through_with_unnamed_files() {
        planted_links_are_never_written_through(AtomicWriter::new(FILE_MODE));
    }

    #[test]
    fn planted_links_are_never_written_through_with_named_temporaries() {
        planted_links_are_never_written_through(AtomicWriter::new(FILE_MODE).without_unnamed_files());
    }

    #[test]
    fn a_failed_write_leaves_no_temporary_and_the_old_file() {
        for writer in [AtomicWriter::new(FILE_MODE), AtomicWriter::new(FILE_MODE).without_unnamed_files()] {
            let mut writer = writer;
            let tmp = TempDir::new("files-fail");
            let dir = open_dir(None, &c_path(&tmp.0).unwrap(), false).unwrap();
            writer.write(dir.as_fd(), "metrics.prom", b"old").unwrap();
            // A directory at the final name: the rename fails after the write.
            std::fs::create_dir(tmp.0.join("latency.svg")).unwrap();
            std::fs::write(tmp.0.join("latency.svg/keep"), b"").unwrap();
            assert!(writer.write(dir.as_fd(), "latency.svg", b"new").is_err());
            assert_eq!(entries(&tmp.0), ["latency.svg", "metrics.prom"]);
            assert_eq!(std::fs::read(tmp.0.join("metrics.prom")).unwrap(), b"old");
        }
    }

    #[test]
    fn files_get_exactly_the_mode_asked() {
        let tmp = TempDir::new("files-mode");
        let dir = open_dir(None, &c_path(&tmp.0).unwrap(), false).unwrap();
        let mut writer = AtomicWriter::new(FILE_MODE);
        writer.write(dir.as_fd(), "a", b"a").unwrap();
        writer.set_mode(0o640);
        writer.write(dir.as_fd(), "b", b"b").unwrap();
        let mode = |n: &str| std::fs::metadata(tmp.0.join(n)).unwrap().mode() & 0o7777;
        assert_eq!((mode("a"), mode("b")), (0o600, 0o640));
    }

    #[test]
    fn a_link_at_a_directory_name_is_not_opened() {
        let tmp = TempDir::new("files-dirlink");
        std::fs::create_dir(tmp.0.join("real")).unwrap();
        std::os::unix::fs::symlink(tmp.0.join("real"), tmp.0.join("link")).unwrap();
        let err = open_dir(None, &c_path(&tmp.0.join("link")).unwrap(), false).unwrap_err();
        // O_DIRECTORY|O_NOFOLLOW: ENOTDIR on a link (ELOOP on some kernels).
        assert!(matches!(err.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)), "{err}");
        open_dir(None, &c_path(&tmp.0.join("link")).unwrap(), true).unwrap();
    }
}
