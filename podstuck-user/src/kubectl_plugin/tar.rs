//! How files come back from the debug pod: `podstuck __pack PATH` in the
//! pod writes them as a tar archive on its standard output (the image has
//! no `tar`, so `kubectl cp` cannot work), and the plugin unpacks that on
//! the user's machine.
//!
//! The pod's output is untrusted input: the unpacker takes regular files
//! with plain names only (no `/`, no `.` or `..`, so no absolute path and
//! no way out of the destination), refuses links and every other kind of
//! entry, and creates each file new in a directory opened once, by the
//! rules of [`crate::files`]: an existing name is refused, never
//! overwritten nor followed.

use std::cell::Cell;
use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use crate::files;

/// Writes the regular files at `path` as a tar archive to `out`: `path`
/// itself by its last name when it is a file, else the regular files
/// directly in it (what `--histograms` writes). Links are not followed;
/// anything but a regular file is left out.
pub fn pack(path: &Path, out: &mut impl Write) -> Result<()> {
    let meta = std::fs::symlink_metadata(path).with_context(|| format!("{}", path.display()))?;
    let mut archive = ::tar::Builder::new(out);
    if meta.is_file() {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| anyhow!("{}: no plain file name", path.display()))?;
        pack_file(path, name, &mut archive)?;
    } else if meta.is_dir() {
        let mut names: Vec<String> = std::fs::read_dir(path)
            .with_context(|| format!("reading {}", path.display()))?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| e.file_name().into_string().ok())
            // podstuck's temporary files: never a finished file.
            .filter(|n| !n.starts_with('.'))
            .collect();
        names.sort();
        for name in names {
            pack_file(&path.join(&name), &name, &mut archive)?;
        }
    } else {
        bail!("{} is neither a file nor a directory", path.display());
    }
    archive.into_inner()?.flush()?;
    Ok(())
}

fn pack_file(path: &Path, name: &str, archive: &mut ::tar::Builder<&mut impl Write>) -> Result<()> {
    // O_NOFOLLOW: a link put there since the listing is not followed.
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let file = File::from(
        nix::fcntl::open(path, flags, Mode::empty())
            .map_err(io::Error::from)
            .with_context(|| format!("opening {}", path.display()))?,
    );
    let meta = file.metadata()?;
    if !meta.is_file() {
        bail!("{} is not a regular file", path.display());
    }
    // The size read now is the size sent: a file still growing is cut
    // there, one shrinking is padded with zeros, so the archive holds.
    let size = meta.len();
    let mut header = ::tar::Header::new_ustar();
    header.set_path(name).with_context(|| format!("{name}: the name does not fit a tar header"))?;
    header.set_entry_type(::tar::EntryType::Regular);
    header.set_size(size);
    header.set_mode(meta.mode() & 0o777);
    header.set_mtime(meta.mtime().max(0) as u64);
    header.set_cksum();
    archive
        .append(&header, file.take(size).chain(io::repeat(0)).take(size))
        .with_context(|| format!("packing {}", path.display()))?;
    Ok(())
}

/// Where an unpacked file goes.
pub enum Destination<'a> {
    /// Every file, by its own name, in this directory (made if missing).
    Directory(&'a Path),
    /// Exactly one file, whatever its name in the archive, at this path.
    File(&'a Path),
}

/// The archive's bytes, noting whether they ran out: the tar crate takes
/// an end of input at a header's place for the end of the archive, but an
/// archive cut there has lost files, and the pod's output must end with
/// the end-of-archive blocks [`pack`] writes.
struct Input<'a, R> {
    inner: &'a mut R,
    ran_out: &'a Cell<bool>,
}

impl<R: Read> Read for Input<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() {
            self.ran_out.set(true);
        }
        Ok(n)
    }
}

/// Unpacks the tar archive `input` at `to`; returns the paths written.
/// Stops at the first entry refused (see the module's rules); files
/// written before it stay.
pub fn unpack(input: &mut impl Read, to: Destination<'_>) -> Result<Vec<std::path::PathBuf>> {
    let (dir_path, only) = match to {
        Destination::Directory(dir) => {
            match std::fs::create_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
            }
            (dir.to_path_buf(), None)
        }
        Destination::File(file) => {
            let name = file.file_name().ok_or_else(|| anyhow!("{}: no file name", file.display()))?;
            let parent = file.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            (parent.to_path_buf(), Some(name.to_os_string()))
        }
    };
    let dir = files::open_dir(None, &files::c_path(&dir_path)?, true)
        .with_context(|| format!("opening {}", dir_path.display()))?;
    let ran_out = Cell::new(false);
    let mut archive = ::tar::Archive::new(Input { inner: input, ran_out: &ran_out });
    let mut written = Vec::new();
    for entry in archive.entries().context("not a tar archive")? {
        let mut entry = entry.map_err(|e| anyhow!("not a tar archive ({e})"))?;
        let accepted = accepted_name(&entry)?;
        let name = match &only {
            Some(_) if !written.is_empty() => bail!("the archive holds more than the one file asked for ({accepted})"),
            Some(name) => name.clone(),
            None => accepted.clone().into(),
        };
        let c_name =
            CString::new(std::os::unix::ffi::OsStrExt::as_bytes(name.as_os_str())).context("a name with a NUL byte")?;
        let path = dir_path.join(&name);
        let mut file =
            files::create_new_at(Some(dir.as_fd()), &c_name, files::FILE_MODE).map_err(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => anyhow!("{} exists: not overwritten", path.display()),
                _ => anyhow!("cannot create {}: {e}", path.display()),
            })?;
        let size = entry.size();
        let copied = io::copy(&mut entry, &mut file).with_context(|| format!("writing {}", path.display()))?;
        if copied < size {
            bail!("the archive ended inside {accepted} ({copied} of {size} bytes; the part is in {})", path.display());
        }
        written.push(path);
    }
    if ran_out.get() {
        bail!("the archive ended early (no end-of-archive blocks): files may be missing");
    }
    Ok(written)
}

/// The entry's name if it is a regular file with a plain name (no `/`,
/// not `.` or `..`, UTF-8), else why it is refused, its name made safe
/// to print.
fn accepted_name<R: Read>(entry: &::tar::Entry<'_, R>) -> Result<String> {
    let header = entry.header();
    let raw = entry.path_bytes();
    let shown = crate::words::terminal_safe(&String::from_utf8_lossy(&raw)).into_owned();
    match header.entry_type() {
        ::tar::EntryType::Regular => {}
        ::tar::EntryType::Link => bail!("refused {shown}: a hard link"),
        ::tar::EntryType::Symlink => bail!("refused {shown}: a symbolic link"),
        other => bail!("refused {shown}: not a regular file (tar type {:?})", char::from(other.as_byte())),
    }
    if header.as_ustar().is_none() && header.as_gnu().is_none() {
        bail!("refused {shown}: not a ustar header");
    }
    let plain = !raw.is_empty() && *raw != *b"." && *raw != *b".." && !raw.contains(&b'/');
    match std::str::from_utf8(&raw) {
        Ok(name) if plain => Ok(name.to_string()),
        _ => bail!("refused {shown}: only plain file names are unpacked (no directory, no absolute path, no ..)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TempDir;

    const BLOCK: usize = 512;

    /// An archive of (name, type, contents) entries as tar writes them,
    /// names written as given (the crate's own setter refuses hostile ones).
    fn archive(entries: &[(&str, u8, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, kind, data) in entries {
            let mut h = ::tar::Header::new_ustar();
            h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
            h.set_mode(0o644);
            h.set_size(data.len() as u64);
            h.set_entry_type(::tar::EntryType::new(*kind));
            if *kind == b'2' {
                h.as_old_mut().linkname[..11].copy_from_slice(b"/etc/passwd");
            }
            h.set_cksum();
            out.extend_from_slice(h.as_bytes());
            out.extend_from_slice(data);
            out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
        }
        out.extend_from_slice(&[0u8; 2 * BLOCK]);
        out
    }

    #[test]
    fn a_packed_directory_unpacks_the_same() {
        let from = TempDir::new("pack-from");
        std::fs::write(from.0.join("summary.json"), b"{}\n").unwrap();
        std::fs::write(from.0.join("latency.hlog"), vec![b'x'; 1500]).unwrap();
        std::fs::write(from.0.join(".latency.hlog.1.0.tmp"), b"half").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", from.0.join("passwd")).unwrap();
        std::fs::create_dir(from.0.join("sub")).unwrap();
        let mut tar = Vec::new();
        pack(&from.0, &mut tar).unwrap();
        assert_eq!(tar.len() % BLOCK, 0);

        let to = TempDir::new("pack-to");
        let dest = to.0.join("histograms");
        let written = unpack(&mut tar.as_slice(), Destination::Directory(&dest)).unwrap();
        assert_eq!(written, [dest.join("latency.hlog"), dest.join("summary.json")]);
        assert_eq!(std::fs::read(dest.join("summary.json")).unwrap(), b"{}\n");
        assert_eq!(std::fs::read(dest.join("latency.hlog")).unwrap(), vec![b'x'; 1500]);
        let mode = std::fs::metadata(dest.join("summary.json")).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn one_file_lands_under_the_name_asked() {
        let from = TempDir::new("pack-file");
        let record = from.0.join("podstuck.record");
        std::fs::write(&record, b"record").unwrap();
        let mut tar = Vec::new();
        pack(&record, &mut tar).unwrap();
        let to = TempDir::new("pack-file-to");
        let wanted = to.0.join("incident.podstuck");
        unpack(&mut tar.as_slice(), Destination::File(&wanted)).unwrap();
        assert_eq!(std::fs::read(&wanted).unwrap(), b"record");
        // A second copy would overwrite: refused.
        let err = unpack(&mut tar.as_slice(), Destination::File(&wanted)).unwrap_err().to_string();
        assert!(err.contains("exists: not overwritten"), "{err}");
    }

    #[test]
    fn a_hostile_archive_writes_nothing_outside() {
        let to = TempDir::new("hostile");
        let dest = to.0.join("in");
        for (entry, refusal) in [
            (("/tmp/podstuck-owned", b'0', &b"x"[..]), "plain file names"),
            (("../outside", b'0', &b"x"[..]), "plain file names"),
            (("sub/inner", b'0', &b"x"[..]), "plain file names"),
            ((".", b'0', &b""[..]), "plain file names"),
            (("passwd", b'2', &b""[..]), "symbolic link"),
            (("passwd", b'1', &b""[..]), "hard link"),
            (("dir", b'5', &b""[..]), "not a regular file"),
        ] {
            let tar = archive(&[entry]);
            let err = unpack(&mut tar.as_slice(), Destination::Directory(&dest)).unwrap_err().to_string();
            assert!(err.contains(refusal), "{}: {err}", entry.0);
            assert_eq!(std::fs::read_dir(&dest).unwrap().count(), 0, "{}", entry.0);
        }
        assert!(!to.0.join("outside").exists());
        assert!(!Path::new("/tmp/podstuck-owned").exists());
    }

    #[test]
    fn a_link_at_the_destination_is_not_followed() {
        let to = TempDir::new("planted");
        let target = to.0.join("target");
        std::os::unix::fs::symlink(&target, to.0.join("summary.json")).unwrap();
        let tar = archive(&[("summary.json", b'0', b"{}")]);
        let err = unpack(&mut tar.as_slice(), Destination::Directory(&to.0)).unwrap_err().to_string();
        assert!(err.contains("exists: not overwritten"), "{err}");
        assert!(!target.exists());
    }

    #[test]
    fn a_damaged_or_cut_archive_is_said() {
        let to = TempDir::new("damaged");
        let mut tar = archive(&[("a", b'0', b"hello")]);
        tar[0] = b'b';
        let err = unpack(&mut tar.as_slice(), Destination::Directory(&to.0)).unwrap_err().to_string();
        assert!(err.contains("checksum"), "{err}");
        let tar = archive(&[("a", b'0', &[7u8; 2000])]);
        let err = unpack(&mut &tar[..1024], Destination::Directory(&to.0)).unwrap_err().to_string();
        assert!(err.contains("ended inside a"), "{err}");
        // Cut where a header would be: files may be missing, and it is said.
        let tar = archive(&[("b", b'0', b"one"), ("c", b'0', b"two")]);
        let err = unpack(&mut &tar[..2 * BLOCK], Destination::Directory(&to.0)).unwrap_err().to_string();
        assert!(err.contains("ended early"), "{err}");
    }

    #[test]
    fn the_record_destination_takes_one_file_only() {
        let to = TempDir::new("one-only");
        let tar = archive(&[("a", b'0', b"1"), ("b", b'0', b"2")]);
        let err = unpack(&mut tar.as_slice(), Destination::File(&to.0.join("rec"))).unwrap_err().to_string();
        assert!(err.contains("more than the one file"), "{err}");
    }
}
