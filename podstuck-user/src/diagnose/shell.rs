//! Fix commands are printed for a person to paste into a root shell, so a
//! path must come out as exactly one shell word naming exactly those bytes.

use std::fmt::Write as _;

/// `path` as one POSIX shell word: bare when it is made only of characters
/// no shell treats specially, else single-quoted; bytes that are not
/// printable UTF-8 use bash's `$'\xNN'` form so the word still names the
/// exact bytes.
pub fn word(bytes: &[u8]) -> String {
    let plain = |b: &u8| b.is_ascii_alphanumeric() || b"/._~:@%+=,-".contains(b);
    if !bytes.is_empty() && bytes.iter().all(plain) {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.chars().any(char::is_control) => format!("'{}'", text.replace('\'', r"'\''")),
        _ => {
            let mut out = String::from("$'");
            for b in bytes {
                match b {
                    b'\'' => out.push_str(r"\'"),
                    b'\\' => out.push_str(r"\\"),
                    0x20..=0x7e => out.push(*b as char),
                    _ => {
                        let _ = write!(out, "\\x{b:02x}");
                    }
                }
            }
            out.push('\'');
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::word;

    #[test]
    fn paths_become_one_exact_shell_word() {
        assert_eq!(word(b"/var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pv-1/mount"), "/var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pv-1/mount");
        assert_eq!(word(b"/tmp/a b"), "'/tmp/a b'");
        assert_eq!(word(b"/tmp/it's"), r"'/tmp/it'\''s'");
        assert_eq!(word(b"/tmp/$HOME;rm"), "'/tmp/$HOME;rm'");
        assert_eq!(word(b"/tmp/\xff\n'"), r"$'/tmp/\xff\x0a\''");
        assert_eq!(word(b""), "''");
    }
}
