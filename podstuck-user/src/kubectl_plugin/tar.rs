//! How files come back from the debug pod: `podstuck __pack PATH` in the
//! pod writes them as a tar archive on its standard output (the image has
//! no `tar`, so `kubectl cp` cannot work), and the plugin unpacks that on
//! the user's machine.
//!
//! The pod's output is untrusted input: the unpacker takes regular files
//! with plain names only (no `/`, no `.` or `..`, so no absolute path and
//! no way out of the destination), refuses links and every other kind of
//! entry, and creates each file new in a directory opened once, by the
//! rules of [`crate::export::files`]: an existing name is refused, never
//! overwritten nor followed.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};

use crate::export::files;

const BLOCK: usize = 512;
/// The longest name a plain ustar header holds.
const NAME_MAX: usize = 100;
/// The largest size eleven octal digits say (8 GiB - 1).
const SIZE_MAX: u64 = 0o77777777777;

/// A ustar header for a regular file.
fn header(name: &str, size: u64, mode: u32, mtime: u64) -> io::Result<[u8; BLOCK]> {
    if name.len() > NAME_MAX || name.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{name}: the name does not fit a tar header")));
    }
    if size > SIZE_MAX {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{name}: too large for a tar header")));
    }
    let mut h = [0u8; BLOCK];
    h[..name.len()].copy_from_slice(name.as_bytes());
    octal(&mut h[100..108], u64::from(mode & 0o777));
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], mtime);
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    let sum = checksum(&h);
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    Ok(h)
}

/// `value` in octal, zero-padded, NUL-terminated, filling `field`.
fn octal(field: &mut [u8], value: u64) {
    let digits = format!("{value:0width$o}\0", width = field.len() - 1);
    field.copy_from_slice(digits.as_bytes());
}

/// The header's checksum: its bytes summed, the checksum field as spaces.
fn checksum(h: &[u8; BLOCK]) -> u32 {
    h.iter().enumerate().map(|(i, b)| if (148..156).contains(&i) { u32::from(b' ') } else { u32::from(*b) }).sum()
}

/// Writes the regular files at `path` as a tar archive to `out`: `path`
/// itself by its last name when it is a file, else the regular files
/// directly in it (what `--histograms` writes). Links are not followed;
/// anything but a regular file is left out.
pub fn pack(path: &Path, out: &mut impl Write) -> Result<()> {
    let meta = std::fs::symlink_metadata(path).with_context(|| format!("{}", path.display()))?;
    if meta.is_file() {
        let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| anyhow!("{}: no plain file name", path.display()))?;
        pack_file(path, name, out)?;
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
            pack_file(&path.join(&name), &name, out)?;
        }
    } else {
        bail!("{} is neither a file nor a directory", path.display());
    }
    out.write_all(&[0u8; 2 * BLOCK])?;
    out.flush()?;
    Ok(())
}

fn pack_file(path: &Path, name: &str, out: &mut impl Write) -> Result<()> {
    let c = files::c_path(path)?;
    // O_NOFOLLOW: a link put there since the listing is not followed.
    // SAFETY: a valid C string; the descriptor is owned at once.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error()).with_context(|| format!("opening {}", path.display()));
    }
    // SAFETY: the kernel just gave us this descriptor.
    let file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let meta = file.metadata()?;
    if !meta.is_file() {
        bail!("{} is not a regular file", path.display());
    }
    // The size read now is the size sent: a file still growing is cut
    // there, one shrinking is padded with zeros, so the archive holds.
    let size = meta.len();
    out.write_all(&header(name, size, meta.mode(), meta.mtime().max(0) as u64)?)?;
    let copied = io::copy(&mut file.take(size), out)?;
    io::copy(&mut io::repeat(0).take(size - copied), out)?;
    let pad = (BLOCK - (size as usize % BLOCK)) % BLOCK;
    out.write_all(&vec![0u8; pad])?;
    Ok(())
}

/// Where an unpacked file goes.
pub enum Destination<'a> {
    /// Every file, by its own name, in this directory (made if missing).
    Directory(&'a Path),
    /// Exactly one file, whatever its name in the archive, at this path.
    File(&'a Path),
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
    let dir = files::open_dir(None, &files::c_path(&dir_path)?, true).with_context(|| format!("opening {}", dir_path.display()))?;
    let mut written = Vec::new();
    let mut block = [0u8; BLOCK];
    loop {
        input.read_exact(&mut block).context("the archive ended early")?;
        if block.iter().all(|b| *b == 0) {
            return Ok(written);
        }
        let entry = Entry::parse(&block)?;
        let name = match &only {
            Some(_) if !written.is_empty() => bail!("the archive holds more than the one file asked for ({})", entry.name),
            Some(name) => name.clone(),
            None => entry.name.clone().into(),
        };
        let c_name = CString::new(std::os::unix::ffi::OsStrExt::as_bytes(name.as_os_str())).context("a name with a NUL byte")?;
        let path = dir_path.join(&name);
        let mut file = files::create_new_at(Some(dir.as_fd()), &c_name, files::FILE_MODE).map_err(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => anyhow!("{} exists: not overwritten", path.display()),
            _ => anyhow!("cannot create {}: {e}", path.display()),
        })?;
        let copied = io::copy(&mut input.by_ref().take(entry.size), &mut file).with_context(|| format!("writing {}", path.display()))?;
        if copied < entry.size {
            bail!("the archive ended inside {} ({copied} of {} bytes; the part is in {})", entry.name, entry.size, path.display());
        }
        let pad = (BLOCK as u64 - entry.size % BLOCK as u64) % BLOCK as u64;
        io::copy(&mut input.by_ref().take(pad), &mut io::sink())?;
        written.push(path);
    }
}

/// One entry of the archive, accepted.
struct Entry {
    name: String,
    size: u64,
}

impl Entry {
    /// The header's entry if it is a regular file with a plain name.
    fn parse(h: &[u8; BLOCK]) -> Result<Entry> {
        let field = |range: std::ops::Range<usize>| {
            let bytes = &h[range];
            let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
            &bytes[..end]
        };
        let stored: u32 = std::str::from_utf8(field(148..156))
            .ok()
            .and_then(|s| u32::from_str_radix(s.trim_matches([' ', '\0']), 8).ok())
            .ok_or_else(|| anyhow!("not a tar archive (no header checksum)"))?;
        if stored != checksum(h) {
            bail!("not a tar archive (a header's checksum is wrong)");
        }
        let prefix = field(345..500);
        let name = field(0..100);
        let shown = String::from_utf8_lossy(&[prefix, if prefix.is_empty() { b"" } else { b"/" }, name].concat()).into_owned();
        let shown = crate::words::terminal_safe(&shown).into_owned();
        match h[156] {
            b'0' | 0 => {}
            b'1' => bail!("refused {shown}: a hard link"),
            b'2' => bail!("refused {shown}: a symbolic link"),
            other => bail!("refused {shown}: not a regular file (tar type {:?})", char::from(other)),
        }
        if !field(257..263).starts_with(b"ustar") {
            bail!("refused {shown}: not a ustar header");
        }
        let plain = prefix.is_empty()
            && !name.is_empty()
            && name != b"."
            && name != b".."
            && !name.contains(&b'/')
            && std::str::from_utf8(name).is_ok();
        if !plain {
            bail!("refused {shown}: only plain file names are unpacked (no directory, no absolute path, no ..)");
        }
        let size = std::str::from_utf8(field(124..136))
            .ok()
            .and_then(|s| u64::from_str_radix(s.trim_matches([' ', '\0']), 8).ok())
            .ok_or_else(|| anyhow!("refused {shown}: its size is not a number"))?;
        Ok(Entry { name: String::from_utf8_lossy(name).into_owned(), size })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TempDir;

    /// An archive of (name, type, contents) entries as tar writes them.
    fn archive(entries: &[(&str, u8, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, kind, data) in entries {
            let mut h = [0u8; BLOCK];
            h[..name.len()].copy_from_slice(name.as_bytes());
            octal(&mut h[100..108], 0o644);
            octal(&mut h[124..136], data.len() as u64);
            h[156] = *kind;
            if *kind == b'2' {
                h[157..157 + 11].copy_from_slice(b"/etc/passwd");
            }
            h[257..263].copy_from_slice(b"ustar\0");
            let sum = checksum(&h);
            h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
            out.extend_from_slice(&h);
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
    }

    #[test]
    fn the_record_destination_takes_one_file_only() {
        let to = TempDir::new("one-only");
        let tar = archive(&[("a", b'0', b"1"), ("b", b'0', b"2")]);
        let err = unpack(&mut tar.as_slice(), Destination::File(&to.0.join("rec"))).unwrap_err().to_string();
        assert!(err.contains("more than the one file"), "{err}");
    }
}
