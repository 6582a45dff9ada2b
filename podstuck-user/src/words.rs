//! Words every layer shares, on the ground floor: timestamps, paths and
//! node-chosen text made safe for a terminal or a shell, durations and latencies as
//! people read them. It imports nothing from the crate, so every stage may
//! use it and none reaches up into another to say a time or a path.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

/// A time as RFC 3339 with nanoseconds, UTC.
pub fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_nanos(sayable(time)).to_string()
}

/// A time as RFC 3339 to the second, UTC: for people, where nanoseconds
/// would only be noise.
pub fn rfc3339_seconds(time: SystemTime) -> String {
    humantime::format_rfc3339_seconds(sayable(time)).to_string()
}

/// The last second RFC 3339's four-digit years can say (9999-12-31T23:59:59Z).
const LAST_SAYABLE: Duration = Duration::from_secs(253_402_300_799);

/// `time` within what RFC 3339 (and humantime, which panics outside it)
/// can say: 1970 to 9999. Times come from untrusted input too (a pod's
/// deletionTimestamp in a file given to `explain --from`): one from year
/// 27 is said as the epoch rather than end the run.
fn sayable(time: SystemTime) -> SystemTime {
    let last = SystemTime::UNIX_EPOCH + LAST_SAYABLE;
    time.clamp(SystemTime::UNIX_EPOCH, last)
}

/// Serde: a path quoted in a finding or a fact, as text (bytes that are not
/// UTF-8 become U+FFFD; the call events keep the exact bytes in `path_hex`).
pub fn serialize_path<P: AsRef<[u8]>, S: serde::Serializer>(path: &P, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&String::from_utf8_lossy(path.as_ref()))
}

/// Whether a character must never reach a terminal raw: C0 controls
/// (ESC starts the sequences that retitle a terminal or clear its screen),
/// DEL, the C1 controls (U+0080-U+009F, which some terminals obey too) and
/// the bidirectional overrides that make text read other than it is.
fn unsafe_on_a_terminal(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// The one rule for text the node chose (process names, command lines,
/// executables, anything read from a record) on its way to a terminal:
/// every character [`unsafe_on_a_terminal`] becomes `\u{..}`, the rest
/// stays. Applying it twice changes nothing, so text made safe where it
/// was read stays as it is when it is shown.
pub fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(unsafe_on_a_terminal) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_on_a_terminal(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Bytes the node chose, as safe text: not UTF-8 becomes U+FFFD, then
/// [`terminal_safe`].
pub fn safe_text(bytes: &[u8]) -> String {
    terminal_safe(&String::from_utf8_lossy(bytes)).into_owned()
}

/// Lines of text on their way to a terminal: [`terminal_safe`] for all
/// but the line breaks the printer itself put there.
pub fn terminal_safe_lines(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(|c| c != '\n' && unsafe_on_a_terminal(c)) {
        return std::borrow::Cow::Borrowed(text);
    }
    let lines: Vec<std::borrow::Cow<'_, str>> = text.split('\n').map(terminal_safe).collect();
    std::borrow::Cow::Owned(lines.join("\n"))
}

/// A path made safe for one terminal line: printable UTF-8 stays, a
/// backslash doubles, control characters and non-UTF-8 bytes become escapes.
pub fn escape_path(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                c if unsafe_on_a_terminal(c) => {
                    let _ = write!(out, "\\u{{{:x}}}", c as u32);
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// A latency as people read it: 5000ns, 12.3us, 4.5ms, 2.5s.
pub fn latency_text(ns: u64) -> String {
    match ns {
        0..=9_999 => format!("{ns}ns"),
        10_000..=9_999_999 => format!("{:.1}us", ns as f64 / 1e3),
        10_000_000..=999_999_999 => format!("{:.1}ms", ns as f64 / 1e6),
        _ => format!("{:.1}s", ns as f64 / 1e9),
    }
}

/// A latency rounded to whole units, for the marks of an axis where each
/// is ten times the last: 100ns, 1us, 10ms ([`latency_text`] keeps a decimal).
pub fn latency_whole_units(ns: f64) -> String {
    match ns {
        n if n < 1e3 => format!("{n:.0}ns"),
        n if n < 1e6 => format!("{:.0}us", n / 1e3),
        n if n < 1e9 => format!("{:.0}ms", n / 1e6),
        n => format!("{:.0}s", n / 1e9),
    }
}

/// A latency in microseconds with `decimals` decimals, as the findings
/// say it: "12.3 µs" (the µ and the space are the difference from
/// [`latency_text`], whose unit follows the size).
pub fn latency_in_microseconds(ns: u64, decimals: usize) -> String {
    format!("{:.*} µs", decimals, ns as f64 / 1e3)
}

/// A duration as people say it: "850 ms", "12 s", "3m20s", "26h10m", and
/// in days past two ("206d08h": a pod stuck since spring, not "4952h11m").
pub fn human_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        let s = d.as_secs_f64();
        if s < 10.0 {
            format!("{s:.1} s")
        } else {
            format!("{} s", d.as_secs())
        }
    } else {
        let s = d.as_secs();
        if s < 3600 {
            format!("{}m{:02}s", s / 60, s % 60)
        } else if s < 2 * 86_400 {
            format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
        } else {
            format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600)
        }
    }
}

/// A duration someone set, said exactly as set: whole seconds when it is
/// whole seconds, else milliseconds ("1 s", "1500 ms"); [`human_duration`]
/// would round it.
pub fn exact_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 && d.as_secs() > 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// A running time to the second, as a clock that ticks shows it: "0m12s",
/// "1m02s", "1h02m03s" ([`human_duration`] rounds, and says "12 s").
pub fn duration_to_the_second(d: Duration) -> String {
    let s = d.as_secs();
    if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m{:02}s", s / 3600, (s % 3600) / 60, s % 60)
    }
}

/// "7 calls", "1 call".
pub fn call_count(n: u64) -> String {
    if n == 1 {
        "1 call".to_string()
    } else {
        format!("{n} calls")
    }
}

/// What kind of file `kind` is, as a noun ("symbolic link", "FIFO"): said
/// when podstuck refuses to read or open something that is not what it
/// expects.
pub fn file_kind(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_file() {
        "regular file"
    } else if kind.is_dir() {
        "directory"
    } else if kind.is_symlink() {
        "symbolic link"
    } else if kind.is_fifo() {
        "FIFO"
    } else if kind.is_socket() {
        "socket"
    } else if kind.is_block_device() {
        "block device"
    } else if kind.is_char_device() {
        "character device"
    } else {
        "special file"
    }
}

/// An I/O error in words: "No such file or directory (os error 2)" ->
/// "no such file or directory".
pub fn io_words(e: &std::io::Error) -> String {
    let text = e.to_string();
    let text = text.find(" (os error").map_or(text.as_str(), |i| &text[..i]);
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// A duration option as the user typed it (`30s`, `5m`, `1h30m`), for
/// every duration option of both binaries, so each says a mistake the same
/// way: with an example, the unit a bare number lacks, and why zero or a
/// negative length cannot be (`zero_means`: what zero would do, e.g. "it
/// would stop before tracing anything"). Give the option
/// `allow_hyphen_values` so `-5s` reaches it instead of being taken for an
/// option.
pub fn duration_arg(value: &str, zero_means: &str) -> Result<Duration, String> {
    const EXAMPLE: &str = "e.g. 30s, 5m, 1h";
    let text = value.trim();
    if let Some(rest) = text.strip_prefix('-') {
        if rest.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(format!("{value} is negative: give a length of time ({EXAMPLE})"));
        }
    }
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{value} has no unit: did you mean {text}s? ({EXAMPLE})"));
    }
    let d = humantime::parse_duration(text)
        .map_err(|_| format!("{value:?} is not a duration: give a number and a unit ({EXAMPLE})"))?;
    if d.is_zero() {
        return Err(format!("{value}: {zero_means}; give a longer one ({EXAMPLE})"));
    }
    Ok(d)
}

/// A watch's `--duration`, in `podstuck watch` and in `kubectl podstuck`,
/// which passes it on to the watch it runs on the node.
pub fn run_length_arg(value: &str) -> Result<Duration, String> {
    duration_arg(value, "podstuck would stop before tracing anything")
}

/// A byte no shell reads as anything but itself, in any place of a word
/// but the first: no expansion (`$`, backquotes, globs, braces), no
/// quoting, no splitting, no control. `~` is [`tilde_inert`]'s question.
fn inert(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"/._:@%+=,-".contains(&b)
}

/// Whether the `~`s of a word are themselves: a shell expands `~` at a
/// word's start, and bash also after `=` and `:` in a word that looks like
/// an assignment (`a=~/x`), even as an argument; a word with no `=` after
/// its first byte is never one, so kubelet's `kubernetes.io~csi` stays bare.
fn tilde_inert(bytes: &[u8]) -> bool {
    bytes.first() != Some(&b'~') && (!bytes.contains(&b'~') || !bytes.contains(&b'='))
}

/// Whether `c` keeps a word from the single-quoted form: a control, or
/// a bidirectional override that makes a line read other than it is.
fn needs_escapes(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `bytes` as one POSIX shell word that dash, bash (POSIX mode or not)
/// and busybox sh all read back as exactly those bytes, expanding nothing:
/// - bare when every byte is [`inert`] (or a `~` no shell expands there,
///   [`tilde_inert`]) and the first is not `-` (an option to whoever reads
///   it; quoting says so to the reader, `--` in the command is what stops
///   the tool) nor `=` (zsh's `=cmd`);
/// - single-quoted when it is printable UTF-8 (`'` as `'\''`);
/// - otherwise `"$(printf '%b' '...')"`, every other byte a `\0NNN` octal
///   escape (POSIX `printf %b`; `$'...'` is bash's only), `!` too so that
///   no bash's history expansion meets it. A command substitution drops
///   trailing newlines, so a name that ends in newlines gets them back as
///   a single-quoted tail: the one case where a fix holds a raw line break
///   (exact in JSON; shown escaped on a terminal).
///
/// Quoting keeps the shell from reading a word as more or other words; it
/// cannot keep a program from reading `-rf` as options: that is
/// [`CommandLine::operands`]' `--`.
pub fn shell_word(bytes: &[u8]) -> String {
    let bare = !bytes.is_empty()
        && !matches!(bytes[0], b'-' | b'=')
        && tilde_inert(bytes)
        && bytes.iter().all(|b| inert(*b) || *b == b'~');
    if bare {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.chars().any(needs_escapes) => format!("'{}'", text.replace('\'', r"'\''")),
        _ => {
            let body = bytes.len() - bytes.iter().rev().take_while(|b| **b == b'\n').count();
            let mut out = String::from("\"$(printf '%b' '");
            for b in &bytes[..body] {
                match b {
                    b'\\' => out.push_str(r"\\"),
                    0x20..=0x7e if !matches!(b, b'\'' | b'!') => out.push(*b as char),
                    _ => {
                        let _ = write!(out, "\\0{b:03o}");
                    }
                }
            }
            out.push_str("')\"");
            if body < bytes.len() {
                out.push('\'');
                out.push_str(&"\n".repeat(bytes.len() - body));
                out.push('\'');
            }
            out
        }
    }
}

/// One command line of a fix, made so that no byte a workload chose can
/// turn it into another command: podstuck's own words (the program, its
/// options) go as written; every word the node or a workload chose is one
/// [`shell_word`]; operands come after `--`, so a name such as `-rf` or
/// `--all` is a name to the tool, not an option. Only for tools that read
/// `--` so (getopt's, Go's flag and pflag, clap): a tool that does not
/// gets its operand checked instead, by the function that prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandLine(String);

impl CommandLine {
    /// The program and its first options, podstuck's own words as they are.
    pub fn new(own: &str) -> CommandLine {
        debug_assert!(own_words(own), "{own:?} holds a character a shell would read");
        CommandLine(own.to_string())
    }

    /// More of podstuck's own words.
    pub fn own(mut self, own: &str) -> CommandLine {
        debug_assert!(own_words(own), "{own:?} holds a character a shell would read");
        self.0.push(' ');
        self.0.push_str(own);
        self
    }

    /// A word the node chose, in the place of an option's value (after
    /// `-n`, `-p`), which the tool takes as the value whatever it starts
    /// with.
    pub fn value(mut self, value: impl AsRef<[u8]>) -> CommandLine {
        self.0.push(' ');
        self.0.push_str(&shell_word(value.as_ref()));
        self
    }

    /// `--option=VALUE` as one word: the option's own spelling, then the
    /// value quoted (`--grep='$(x)'` is the one word `--grep=$(x)`).
    pub fn option_value(mut self, option: &str, value: impl AsRef<[u8]>) -> CommandLine {
        debug_assert!(option.ends_with('=') && own_words(option), "{option:?}");
        self.0.push(' ');
        self.0.push_str(option);
        let value = value.as_ref();
        // Past the option's `=` a first `-` or `=` starts nothing (the
        // tool reads `--grep=-all` as the value -all): only what the
        // quoter quotes anywhere in a word is quoted.
        if !value.is_empty() && value.iter().all(|b| inert(*b)) {
            self.0.push_str(&String::from_utf8_lossy(value));
        } else {
            self.0.push_str(&shell_word(value));
        }
        self
    }

    /// `--`, then each operand as one quoted word.
    pub fn operands<B: AsRef<[u8]>>(mut self, operands: impl IntoIterator<Item = B>) -> CommandLine {
        self.0.push_str(" --");
        for operand in operands {
            self.0.push(' ');
            self.0.push_str(&shell_word(operand.as_ref()));
        }
        self
    }
}

/// Whether `text` is podstuck's own words, nothing a shell reads as more
/// than itself: what [`CommandLine`] prints unquoted.
fn own_words(text: &str) -> bool {
    text.split(' ').all(|w| !w.is_empty() && w.bytes().all(inert))
}

impl std::fmt::Display for CommandLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<CommandLine> for String {
    fn from(line: CommandLine) -> String {
        line.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_rfc3339_cannot_say_are_said_at_its_ends_not_a_panic() {
        let before = SystemTime::UNIX_EPOCH - Duration::from_secs(61_313_904_000);
        assert_eq!(rfc3339_seconds(before), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(before), "1970-01-01T00:00:00.000000000Z");
        let after = SystemTime::UNIX_EPOCH + Duration::from_secs(300_000_000_000);
        assert_eq!(rfc3339_seconds(after), "9999-12-31T23:59:59Z");
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600);
        assert_eq!(rfc3339_seconds(now), "2026-01-01T00:00:00Z");
    }

    #[test]
    fn durations_read_as_people_say_them() {
        let secs = Duration::from_secs;
        assert_eq!(human_duration(Duration::from_millis(850)), "850 ms");
        assert_eq!(human_duration(Duration::from_millis(2500)), "2.5 s");
        assert_eq!(human_duration(secs(200)), "3m20s");
        assert_eq!(human_duration(secs(26 * 3600 + 600)), "26h10m");
        assert_eq!(human_duration(secs(4952 * 3600 + 11 * 60)), "206d08h");
    }

    #[test]
    fn a_duration_option_says_each_mistake_with_an_example() {
        const ZERO: &str = "it would stop at once";
        assert_eq!(duration_arg("30s", ZERO), Ok(Duration::from_secs(30)));
        assert_eq!(duration_arg("1h30m", ZERO), Ok(Duration::from_secs(5400)));
        assert_eq!(
            duration_arg("garbage", ZERO).unwrap_err(),
            "\"garbage\" is not a duration: give a number and a unit (e.g. 30s, 5m, 1h)"
        );
        assert_eq!(
            duration_arg("", ZERO).unwrap_err(),
            "\"\" is not a duration: give a number and a unit (e.g. 30s, 5m, 1h)"
        );
        assert_eq!(duration_arg("30", ZERO).unwrap_err(), "30 has no unit: did you mean 30s? (e.g. 30s, 5m, 1h)");
        assert_eq!(duration_arg("-5s", ZERO).unwrap_err(), "-5s is negative: give a length of time (e.g. 30s, 5m, 1h)");
        assert_eq!(
            duration_arg("0s", ZERO).unwrap_err(),
            "0s: it would stop at once; give a longer one (e.g. 30s, 5m, 1h)"
        );
        assert!(duration_arg("0ms", ZERO).unwrap_err().contains(ZERO));
    }
}
