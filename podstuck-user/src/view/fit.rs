//! Words fitted to a terminal's width, one character a column: every row
//! the live view draws fits, so nothing is left for the terminal to wrap.
//! A sentence gives way in its paths and identifiers (shortened from the
//! middle), never in its words. A fix is broken only between shell words,
//! with a ` \` continuation, so that what is copied off the screen still
//! pastes as the same command; on the screen a word too long for a row (a
//! path) is shortened from the middle, and `c` copies it whole; in the
//! detail pane it is broken after a `/` (a quoted one inside its quotes,
//! closing and opening them again) so that the rows are the fix.

/// Columns a text takes: one a character, as everywhere in the view.
pub fn columns(text: &str) -> usize {
    text.chars().count()
}

/// `text` cut to `width` characters, the cut marked.
pub fn cut(text: &str, width: usize) -> String {
    if columns(text) <= width {
        return text.to_string();
    }
    let mut out: String = text.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// One word (a path, a UID) in `width` characters: its middle gives way to
/// `…`, since a path's tail (`pvc-1/mount`) says which one it is and its
/// head where it lives.
pub fn shorten_middle(word: &str, width: usize) -> String {
    let chars: Vec<char> = word.chars().collect();
    if chars.len() <= width {
        return word.to_string();
    }
    if width < 2 {
        return "…".chars().take(width).collect();
    }
    let head = (width - 1) / 3;
    let tail = width - 1 - head;
    let mut out: String = chars[..head].iter().collect();
    out.push('…');
    out.extend(&chars[chars.len() - tail..]);
    out
}

/// Words shorter than this are never shortened: a sentence's verbs and
/// nouns stay whole; only paths and identifiers give way.
const SHORTEST_SHORTENED: usize = 12;

/// `text` with its longest words (paths, UIDs) shortened from the middle,
/// longest first, until it fits `width` or none is left to shorten.
fn shrink_words(text: &str, width: usize) -> String {
    let mut words: Vec<String> = text.split(' ').map(str::to_string).collect();
    let total = |words: &[String]| words.iter().map(|w| columns(w)).sum::<usize>() + words.len().saturating_sub(1);
    while total(&words) > width {
        let Some((longest, len)) =
            words.iter().enumerate().map(|(i, w)| (i, columns(w))).max_by_key(|&(i, len)| (len, usize::MAX - i))
        else {
            break;
        };
        if len <= SHORTEST_SHORTENED {
            break;
        }
        let excess = total(&words) - width;
        words[longest] = shorten_middle(&words[longest], len.saturating_sub(excess).max(SHORTEST_SHORTENED));
    }
    words.join(" ")
}

/// A line in `width` characters: its long words give way first, then its end.
pub fn fit_words(text: &str, width: usize) -> String {
    cut(&shrink_words(text, width), width)
}

/// A cause in one row of `width` characters if its paths can give way
/// enough, else in two: what is wrong comes after the path in most causes
/// ("... /x/mount is still mounted"), and it must show.
pub fn cause_rows(cause: &str, width: usize) -> Vec<String> {
    let shrunk = shrink_words(cause, width);
    if columns(&shrunk) <= width {
        return vec![shrunk];
    }
    // Breaking between words wastes the ends of rows: shrink until two hold it.
    let mut rows = prose_rows(&shrink_words(cause, 2 * width), width);
    for target in (width..2 * width).rev() {
        if rows.len() <= 2 {
            break;
        }
        rows = prose_rows(&shrink_words(cause, target), width);
    }
    match rows.as_slice() {
        [first, second] => vec![first.clone(), second.clone()],
        [first, rest @ ..] => vec![first.clone(), cut(&rest.join(" "), width)],
        [] => vec![],
    }
}

/// A command line's shell words, split at the spaces a shell splits at
/// (not those inside quotes or after a backslash), each with its quotes.
fn shell_words(line: &str) -> Vec<&str> {
    let mut words = Vec::new();
    let mut start = None;
    let (mut single, mut double, mut escaped) = (false, false, false);
    for (at, c) in line.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' && !single {
            escaped = true;
        } else if c == '\'' && !double {
            single = !single;
        } else if c == '"' && !single {
            double = !double;
        } else if c == ' ' && !single && !double {
            if let Some(from) = start.take() {
                words.push(&line[from..at]);
            }
            continue;
        }
        start.get_or_insert(at);
    }
    if let Some(from) = start {
        words.push(&line[from..]);
    }
    words
}

/// A word in pieces of at most `width` characters, each broken after the
/// last `/` that falls in it (a path reads by its directories), else at
/// `width`: nothing of it is left out.
fn word_pieces(word: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let chars: Vec<char> = word.chars().collect();
    let mut pieces = Vec::new();
    let mut at = 0;
    while chars.len() - at > width {
        let window = &chars[at..at + width];
        let take = window.iter().rposition(|&c| c == '/').filter(|&p| p > 0).map_or(width, |p| p + 1);
        pieces.push(chars[at..at + take].iter().collect());
        at += take;
    }
    pieces.push(chars[at..].iter().collect());
    pieces
}

/// A row of a fix shown whole (see [`whole_fix_rows`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FixRow {
    /// The row goes on with a word the row above broke: it must start in
    /// the terminal's first column, or a paste would split the word.
    pub joins_word: bool,
    pub text: String,
}

/// A fix in rows of at most `width` characters that still paste as the
/// same commands: each of its lines whole if it fits; else broken only
/// between shell words, every row but a command's last ending in ` \`
/// (the shell's line continuation). A word wider than a row (a long path)
/// gets a row of its own, shortened with `…` on screen: `c` copies it whole.
pub fn fix_rows(fix: &str, width: usize) -> Vec<String> {
    let shortened = |word: &str, room| vec![FixRow { joins_word: false, text: shorten_middle(word, room) }];
    rows_of_fix(fix, width, shortened).into_iter().map(|row| row.text).collect()
}

/// A fix in rows of at most `width` characters, whole: as [`fix_rows`],
/// but a word wider than a row (a long path) is broken after a `/` with a
/// `\` and no space at the row's end, which a shell removes with the line
/// break, joining the word back (the row after it starts in the first
/// column, see [`FixRow::joins_word`]). Inside quotes the `\` and the line
/// break would stay in the word, so a quoted word is broken only inside
/// its single quotes, each row closing the quote before its `\` and the
/// next opening it again (`'/var/lib/'\` then `'kubelet/...'`). Nothing is
/// elided: read from the screen, or pasted, the rows are the fix.
pub fn whole_fix_rows(fix: &str, width: usize) -> Vec<FixRow> {
    rows_of_fix(fix, width, |word, room| {
        if word.contains(['\'', '"']) {
            if let Some(pieces) = quoted_pieces(word, room) {
                return pieces;
            }
            // No place inside its quotes to break it at: the pieces as
            // they are, which `c` copies whole.
            return word_pieces(word, room).into_iter().map(|text| FixRow { joins_word: false, text }).collect();
        }
        let pieces = word_pieces(word, room);
        let last = pieces.len() - 1;
        let joined = |i: usize, piece: String| {
            let end = if i < last { "\\" } else { "" };
            FixRow { joins_word: i > 0, text: piece + end }
        };
        pieces.into_iter().enumerate().map(|(i, piece)| joined(i, piece)).collect()
    })
}

/// A quoted word (`'...'`, or `"$(printf '%b' '...')"`) in rows of at
/// most `width` characters that a shell joins back into the word: broken
/// only where it is inside single quotes, after the last `/` that fits
/// (else as late as fits), the row ending `'\` and the next starting `'`.
/// None when no such place fits a row.
fn quoted_pieces(word: &str, width: usize) -> Option<Vec<FixRow>> {
    const CLOSE: &str = "'\\";
    let chars: Vec<char> = word.chars().collect();
    // inside[i]: the word may break before chars[i], being in single quotes there.
    let mut inside = vec![false; chars.len() + 1];
    let (mut single, mut escaped) = (false, false);
    for (i, c) in chars.iter().enumerate() {
        if single {
            single = *c != '\'';
        } else if escaped {
            escaped = false;
        } else if *c == '\\' {
            escaped = true;
        } else if *c == '\'' {
            single = true;
        }
        inside[i + 1] = single;
    }
    let mut rows = Vec::new();
    let (mut start, mut opened) = (0, false);
    loop {
        let lead = usize::from(opened);
        if lead + chars.len() - start <= width {
            let text: String = opened.then_some('\'').into_iter().chain(chars[start..].iter().copied()).collect();
            rows.push(FixRow { joins_word: opened, text });
            return Some(rows);
        }
        let last = (start + width).checked_sub(lead + CLOSE.len())?;
        let fits = (start + 1..=last.min(chars.len() - 1)).filter(|&i| inside[i]);
        let at = fits.clone().rev().find(|&i| chars[i - 1] == '/').or_else(|| fits.clone().next_back())?;
        let head: String = chars[start..at].iter().collect();
        rows.push(FixRow { joins_word: opened, text: format!("{}{head}{CLOSE}", if opened { "'" } else { "" }) });
        (start, opened) = (at, true);
    }
}

/// A fix in rows of at most `width` characters, broken between shell
/// words with ` \` continuations; a word wider than a row is made into the
/// rows `long` gives (each at most a row), the last of which the next
/// words may follow.
fn rows_of_fix(fix: &str, width: usize, long: impl Fn(&str, usize) -> Vec<FixRow>) -> Vec<FixRow> {
    const GOES_ON: &str = " \\";
    let mut rows = Vec::new();
    for line in fix.split('\n') {
        if columns(line) <= width {
            rows.push(FixRow { joins_word: false, text: line.to_string() });
            continue;
        }
        let room = width.saturating_sub(GOES_ON.len()).max(1);
        let mut row = FixRow::default();
        for word in shell_words(line) {
            let needed = if row.text.is_empty() { columns(word) } else { columns(&row.text) + 1 + columns(word) };
            if needed <= room {
                if !row.text.is_empty() {
                    row.text.push(' ');
                }
                row.text.push_str(word);
                continue;
            }
            if !row.text.is_empty() {
                row.text.push_str(GOES_ON);
                rows.push(std::mem::take(&mut row));
            }
            let mut pieces = if columns(word) <= room {
                vec![FixRow { joins_word: false, text: word.to_string() }]
            } else {
                long(word, room)
            };
            row = pieces.pop().unwrap_or_default();
            rows.extend(pieces);
        }
        rows.push(row);
    }
    rows
}

/// Prose in rows of at most `width` characters, broken between words; a
/// word wider than a row is broken after a `/` (see [`word_pieces`]), never
/// shortened: the detail pane is where the whole text is.
pub fn whole_prose_rows(text: &str, width: usize) -> Vec<String> {
    rows_of_prose(text, width, word_pieces)
}

/// Prose (a summary, a piece of evidence) in rows of at most `width`
/// characters, broken between words; a word wider than a row is shortened
/// from the middle.
fn prose_rows(text: &str, width: usize) -> Vec<String> {
    rows_of_prose(text, width, |word, width| vec![shorten_middle(word, width)])
}

/// Prose in rows of at most `width` characters, broken between words; a
/// word wider than a row is made into the pieces `long` gives (each at most
/// a row), the last of which the next words may follow.
fn rows_of_prose(text: &str, width: usize, long: impl Fn(&str, usize) -> Vec<String>) -> Vec<String> {
    let mut rows = Vec::new();
    for line in text.split('\n') {
        let mut row = String::new();
        for word in line.split(' ').filter(|w| !w.is_empty()) {
            let mut pieces = long(word, width);
            let word = pieces.pop().unwrap_or_default();
            let fits = columns(&row) + 1 + columns(&word) <= width;
            if !row.is_empty() && (!pieces.is_empty() || !fits) {
                rows.push(std::mem::take(&mut row));
            }
            rows.extend(pieces);
            if !row.is_empty() {
                row.push(' ');
            }
            row.push_str(&word);
        }
        rows.push(row);
    }
    rows
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// What a shell reads from rows pasted into it: a `\\` at a row's end
    /// and the line break after it are removed.
    pub fn shell_pasted(rows: &[String]) -> String {
        rows.join("\n").replace("\\\n", "").split_whitespace().collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn the_whole_fix_breaks_a_long_path_after_a_slash_and_pastes_back() {
        let path = "/var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pvc-1/mount";
        let fix = format!("umount {path} && rmdir {path}\nkill 42");
        let rows = whole_fix_rows(&fix, 30);
        let texts: Vec<String> =
            rows.iter().map(|r| if r.joins_word { r.text.clone() } else { format!("   {}", r.text) }).collect();
        for row in &rows {
            assert!(row.text.chars().count() <= 30, "{row:?}");
            assert!(!row.text.contains('…'), "{row:?}");
        }
        assert_eq!(rows[0], FixRow { joins_word: false, text: "umount \\".into() });
        assert_eq!(rows[1], FixRow { joins_word: false, text: "/var/lib/kubelet/pods/x/\\".into() });
        assert!(rows[2].joins_word, "{rows:?}");
        assert_eq!(shell_pasted(&texts), fix.replace('\n', " "));
        assert_eq!(word_pieces("abcdefgh", 3), vec!["abc", "def", "gh"]);
        assert_eq!(
            whole_prose_rows(&format!("still mounted: {path}."), 30).concat().replace("mounted:", "mounted: "),
            format!("still mounted: {path}.")
        );
    }

    #[test]
    fn a_quoted_word_breaks_inside_its_quotes_and_every_shell_reads_it_back() {
        use crate::test_support::pasted::{self, calls};
        let csi = b"/var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pvc 1/mount".to_vec();
        let odd = b"/var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/\xff'\n/mount".to_vec();
        let names = [csi, odd];
        let fixes: Vec<String> = names
            .iter()
            .map(|name| {
                let fix = format!("umount -- {}", crate::words::shell_word(name));
                let rows = whole_fix_rows(&fix, 30);
                for row in &rows {
                    assert!(row.text.chars().count() <= 30, "{row:?}");
                }
                assert!(rows.iter().filter(|r| r.joins_word).all(|r| r.text.starts_with('\'')), "{rows:?}");
                // As the detail pane draws them: a row that goes on with a word in the first column.
                rows.iter()
                    .map(|r| if r.joins_word { r.text.clone() } else { format!("   {}", r.text) })
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .collect();
        assert!(fixes[0].contains("'\\\n'"), "{}", fixes[0]);
        let dir = crate::test_support::TempDir::new("fit");
        for (n, shell) in pasted::shells().iter().enumerate() {
            let (cwd, logs) = (dir.0.join(format!("cwd-{n}")), dir.0.join(format!("logs-{n}")));
            std::fs::create_dir_all(&cwd).unwrap();
            std::fs::create_dir_all(&logs).unwrap();
            let ran = pasted::run(shell, &cwd, &logs, &fixes).unwrap_or_else(|e| panic!("{e}"));
            for (name, got) in names.iter().zip(ran) {
                assert_eq!(got, calls(vec![vec![b"umount".to_vec(), b"--".to_vec(), name.clone()]]), "{shell:?}");
            }
        }
        assert_eq!(quoted_pieces("'abcdef'", 3), None, "no room for a piece and its quotes");
    }

    /// The fix as pasted from the screen's rows: continuations joined.
    fn pasted(rows: &[String]) -> String {
        rows.iter().map(|r| r.trim().trim_end_matches(" \\")).collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn a_fix_breaks_only_between_shell_words_with_a_continuation() {
        let fix = "umount -l '/v/a b/c' && rmdir /var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pvc-1\nkill 42";
        let rows = fix_rows(fix, 30);
        assert_eq!(rows, vec!["umount -l '/v/a b/c' && \\", "rmdir \\", "/var/lib/…netes.io~csi/pvc-1", "kill 42"]);
        for row in &rows {
            assert!(row.chars().count() <= 30, "{row}");
        }
        // The rows that are whole paste as the fix's first line, continuations and all.
        let first = fix.lines().next().unwrap();
        assert_eq!(pasted(&rows[..2]) + " /var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pvc-1", first);
        assert_eq!(shell_words(r#"a 'b c' "d \" e" f\ g"#), vec!["a", "'b c'", r#""d \" e""#, r"f\ g"]);
        assert_eq!(fix_rows("umount /short", 30), vec!["umount /short"]);
    }

    #[test]
    fn a_sentence_gives_way_in_its_paths_never_in_its_words() {
        let path = "/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/pvc-1/mount";
        let fitted = fit_words(&format!("kubelet cannot remove {path}: it is still mounted (tmpfs)."), 66);
        assert_eq!(fitted, "kubelet cannot remove /var…c-1/mount: it is still mounted (tmpfs).");
        // No room even then: two rows, what is wrong on the second.
        let rows = cause_rows(
            &format!("kubelet cannot remove the CSI volume dir of pod x: {path} is still mounted (tmpfs)."),
            40,
        );
        assert_eq!(rows, vec!["kubelet cannot remove the CSI volume dir", "of pod x: /va…-1/mount is still mounted…"]);
        assert_eq!(shorten_middle("abcdefghij", 5), "a…hij");
        assert_eq!(cut("sentence", 4), "sen…");
        assert_eq!(prose_rows("one two three", 7), vec!["one two", "three"]);
    }
}
