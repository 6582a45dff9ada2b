//! Lays a [`Screen`] out on a terminal with ratatui: the header, then the
//! findings with their fix, then the busiest series and the slowest calls
//! in flight in whatever rows are left, notes and the keys at the bottom;
//! or, when the user expands the selected finding, its detail (summary,
//! evidence, whole fix). Each row's words are fitted to the width by
//! [`super::fit`]. Drawing only: every word comes from the model, so the
//! layout is tested on ratatui's `TestBackend`.

use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Padding, Paragraph, Row, Table};
use ratatui::Frame;

use crate::diagnose::{Confidence, Severity};
use crate::words::{duration_to_the_second, human_duration, latency_text, terminal_safe_lines};

use super::fit::{cause_rows, columns, cut, fit_words, fix_rows, shorten_middle, whole_fix_rows, whole_prose_rows};
use super::model::{FindingRow, Screen, Selection};
use super::text::rate;

const QUIT_HINT: &str = "q or Ctrl-C: stop and print a summary";
/// The other keys, said after [`QUIT_HINT`] (which the tests wait for).
const KEYS: &str = "↑↓ select  Enter details  c copy fix";

fn dim() -> Style {
    Style::new().add_modifier(Modifier::DIM)
}

fn bold() -> Style {
    Style::new().add_modifier(Modifier::BOLD)
}

fn severity_style(severity: Severity, active: bool) -> Style {
    if !active {
        return dim();
    }
    let color = match severity {
        Severity::Critical => Color::Red,
        Severity::Warning => Color::Yellow,
        Severity::Info => Color::Blue,
    };
    bold().fg(color)
}

fn severity_label(severity: Severity) -> &'static str {
    match severity {
        Severity::Critical => "CRITICAL",
        Severity::Warning => "WARNING",
        Severity::Info => "INFO",
    }
}

/// How many characters of a pod UID tell the pods on the screen apart: 8
/// (a UID's first group), more only if two of them share those.
fn uid_shown(screen: &Screen) -> usize {
    let mut uids: Vec<&str> = screen.findings.iter().filter_map(|f| f.pod.as_deref()).collect();
    uids.extend(screen.busiest.iter().filter_map(|r| r.pod.as_deref()));
    uids.extend(screen.in_flight.iter().filter_map(|r| r.pod.as_deref()));
    uids.sort_unstable();
    uids.dedup();
    let shared =
        uids.windows(2).map(|w| w[0].chars().zip(w[1].chars()).take_while(|(a, b)| a == b).count()).max().unwrap_or(0);
    (shared + 1).max(8)
}

/// A pod UID in `shown` characters (see [`uid_shown`]).
fn short_uid(uid: &str, shown: usize) -> String {
    uid.chars().take(shown).collect()
}

/// A section's rule and title.
fn section(title: String) -> Block<'static> {
    Block::new().borders(Borders::TOP).border_style(dim()).title(Span::styled(format!(" {title} "), bold()))
}

/// A section whose rows start one column in, like the text around them.
fn table_section(title: String) -> Block<'static> {
    section(title).padding(Padding::left(1))
}

const CAUSE: &str = "   cause: ";
const FIX: &str = "   fix:   ";
const FIX_GOES_ON: &str = "          ";

/// A finding's title: severity, kind, pod, how sure and how long, in
/// `width` columns; the pod's UID whole when the line has room for it,
/// else its first characters (`uid_chars`).
fn finding_title(f: &FindingRow, selected: bool, width: usize, uid_chars: usize) -> Line<'static> {
    let status = if f.active { "" } else { "resolved, " };
    let tail =
        format!("  {status}{}, {} calls, for {}", Confidence::as_str(f.confidence), f.count, human_duration(f.age));
    let mark = if selected { "›" } else { " " };
    let severity = format!("{mark}{:<8} ", severity_label(f.severity));
    let mut pod = f.pod.as_ref().map(|p| format!("  pod {p}")).unwrap_or_default();
    if columns(&severity) + columns(f.kind) + columns(&pod) + columns(&tail) > width {
        pod = f.pod.as_ref().map(|p| format!("  pod {}", short_uid(p, uid_chars))).unwrap_or_default();
    }
    // What is cut, if anything still is, is the tail: how sure, how long.
    let mut room = width;
    let mut spans = Vec::new();
    for (text, style) in [
        (severity, severity_style(f.severity, f.active)),
        (f.kind.to_string(), if f.active { bold() } else { dim() }),
        (pod, Style::new()),
        (tail, dim()),
    ] {
        let text = cut(&text, room);
        room -= columns(&text);
        spans.push(Span::styled(text, style));
    }
    let line = Line::from(spans);
    if selected {
        line.style(Style::new().add_modifier(Modifier::REVERSED))
    } else {
        line
    }
}

/// The findings as lines for `width` columns: a title line per finding,
/// its cause on one line, its fix on as many as it takes.
fn finding_lines(findings: &[FindingRow], selected: usize, width: u16, uid_chars: usize) -> Vec<Line<'static>> {
    let width = width as usize;
    let room = width.saturating_sub(CAUSE.len()).max(1);
    if findings.is_empty() {
        return vec![Line::styled(cut(" No finding yet: nothing traced so far is stuck.", width), dim())];
    }
    let mut lines = Vec::new();
    for (i, f) in findings.iter().enumerate() {
        lines.push(finding_title(f, i == selected, width, uid_chars));
        for (i, row) in cause_rows(&f.cause, room).into_iter().enumerate() {
            let lead = if i == 0 { CAUSE } else { FIX_GOES_ON };
            lines.push(Line::from(vec![Span::styled(lead, dim()), Span::raw(row)]));
        }
        // A finding that is over has nothing to run: no fix row.
        if !f.active || f.fix.is_empty() {
            continue;
        }
        let fix_style = bold().fg(Color::Green);
        for (i, part) in fix_rows(&terminal_safe_lines(&f.fix), room).into_iter().enumerate() {
            let lead = if i == 0 { FIX } else { FIX_GOES_ON };
            lines.push(Line::from(vec![Span::styled(lead, dim()), Span::styled(part, fix_style)]));
        }
    }
    lines
}

/// The selected finding expanded: its whole summary, every piece of
/// evidence, its whole fix (see [`whole_fix_rows`]), in `width` columns.
fn detail_lines(findings: &[FindingRow], selected: usize, width: u16) -> Vec<Line<'static>> {
    let width = width as usize;
    let Some(f) = findings.get(selected) else { return vec![] };
    let indent = "   ";
    let room = width.saturating_sub(indent.len()).max(1);
    let mut lines = vec![Line::from(vec![
        Span::styled(format!(" {} ", severity_label(f.severity)), severity_style(f.severity, f.active)),
        Span::styled(
            cut(
                &format!("{}  (finding {} of {}; ↑↓ scroll, Esc closes)", f.kind, selected + 1, findings.len()),
                width.saturating_sub(10),
            ),
            bold(),
        ),
    ])];
    if let Some(pod) = &f.pod {
        lines.extend(whole_prose_rows(&format!("pod {pod}"), room).into_iter().map(|row| Line::raw(format!(" {row}"))));
    }
    // The fix first: it is what the user acts on, and at 24 rows what
    // comes last may need scrolling to.
    if f.active && !f.fix.is_empty() {
        lines.push(Line::styled(" fix (whole; c copies it, q prints it):", dim()));
        let fix_style = bold().fg(Color::Green);
        // A row that goes on with a broken word starts in the first column,
        // so that the rows pasted into a shell are the fix.
        lines.extend(whole_fix_rows(&terminal_safe_lines(&f.fix), room).into_iter().map(|row| {
            let lead = if row.joins_word { "" } else { indent };
            Line::from(vec![Span::raw(lead), Span::styled(row.text, fix_style)])
        }));
    } else {
        lines.push(Line::styled(" over: nothing to run now", dim()));
    }
    if f.evidence.is_empty() {
        lines.push(Line::styled(" evidence: none recorded", dim()));
    } else {
        lines.push(Line::styled(" evidence:", dim()));
        for item in &f.evidence {
            for (i, row) in whole_prose_rows(item, room.saturating_sub(2).max(1)).into_iter().enumerate() {
                let lead = if i == 0 { "   - " } else { "     " };
                lines.push(Line::raw(format!("{lead}{row}")));
            }
        }
    }
    lines.push(Line::styled(" summary:", dim()));
    lines.extend(whole_prose_rows(&f.summary, room).into_iter().map(|row| Line::raw(format!("{indent}{row}"))));
    lines
}

fn header_lines(screen: &Screen, width: u16) -> Vec<Line<'static>> {
    let h = &screen.header;
    let width = width as usize;
    let lost = if h.events_lost > 0 { bold().fg(Color::Red) } else { Style::new() };
    let first = format!(
        " podstuck {}  node {}  kernel {}  up {}",
        h.version,
        h.node,
        h.kernel,
        duration_to_the_second(h.uptime)
    );
    let tracing = format!(" tracing {}", h.filters);
    let counts = format!("  events {}  {} seen  ", rate(h.events_per_s), h.events_seen);
    let lost_words = format!("{} lost", h.events_lost);
    // With --pod, the pod's calls; the node's are said apart.
    let counted = format!(
        "  calls counted {}{}",
        h.calls_counted,
        h.node_calls.map(|n| format!("  node: {n} calls")).unwrap_or_default()
    );
    // The counts matter more than the whole filter: the filter gives way.
    let counts_width = columns(&counts) + columns(&lost_words) + columns(&counted);
    let tracing = fit_words(&tracing, width.saturating_sub(counts_width).max(width / 2));
    let mut room = width;
    let mut second = Vec::new();
    for (text, style) in [(tracing, Style::new()), (counts, Style::new()), (lost_words, lost), (counted, Style::new())]
    {
        let text = cut(&text, room);
        room -= columns(&text);
        second.push(Span::styled(text, style));
    }
    vec![Line::from(Span::styled(cut(&first, width), bold())), Line::from(second)]
}

/// The keys, on the last row.
fn legend(width: u16) -> Line<'static> {
    Line::styled(cut(&format!(" {QUIT_HINT}  {KEYS}"), width as usize), dim())
}

/// Below this many columns the tables drop their least telling columns
/// (p50, the whole UID) so that what fails (the errno) stays on screen.
const NARROW: u16 = 120;

fn busiest_table(screen: &Screen, width: u16, uid_chars: usize) -> Table<'static> {
    let narrow = width < NARROW;
    let right = |s: String| Cell::from(Line::from(s).right_aligned());
    let rows = screen.busiest.iter().map(|r| {
        let failed = match r.errnos.as_slice() {
            [] => "0".to_string(),
            errnos => {
                let names: Vec<String> = errnos.iter().map(|(e, n)| format!("{e} {n}")).collect();
                format!("{} ({})", r.failed, names.join(", "))
            }
        };
        let failed = if r.failed > 0 {
            Cell::from(Span::styled(failed, Style::new().fg(Color::Red)))
        } else {
            Cell::from(failed)
        };
        let pod = r
            .pod
            .as_deref()
            .map_or_else(|| "-".to_string(), |p| if narrow { short_uid(p, uid_chars) } else { p.to_string() });
        let mut cells = vec![
            Cell::from(r.syscall),
            Cell::from(r.actor),
            Cell::from(pod),
            right(r.count.to_string()),
            right(rate(r.per_second)),
        ];
        if !narrow {
            cells.push(right(latency_text(r.p50_ns)));
        }
        cells.push(right(latency_text(r.p99_ns)));
        cells.push(failed);
        Row::new(cells)
    });
    let mut header =
        vec![Cell::from("CALL"), Cell::from("ACTOR"), Cell::from("POD"), right("CALLS".into()), right("NOW/s".into())];
    if !narrow {
        header.push(right("P50".into()));
    }
    header.extend([right("P99".into()), Cell::from("FAILED")]);
    let widths: Vec<Constraint> = if narrow {
        [8, 10, uid_chars as u16, 7, 7, 8].into_iter().map(Constraint::Length).chain([Constraint::Fill(1)]).collect()
    } else {
        [8, 10, 36, 9, 8, 9, 9].into_iter().map(Constraint::Length).chain([Constraint::Fill(1)]).collect()
    };
    Table::new(rows, widths).header(Row::new(header).style(dim()))
}

fn in_flight_table(screen: &Screen, width: u16, uid_chars: usize) -> Table<'static> {
    let narrow = width < NARROW;
    let widths: [u16; 4] = if narrow { [7, 14, 16, uid_chars as u16] } else { [8, 24, 28, 36] };
    // The path takes what is left (padding and column gaps apart), shortened
    // from the middle rather than clipped at its telling end.
    let path_room = (width as usize).saturating_sub(1 + widths.iter().map(|w| *w as usize + 1).sum::<usize>()).max(8);
    let rows = screen.in_flight.iter().map(|r| {
        let pod = r
            .pod
            .as_deref()
            .map_or_else(|| "-".to_string(), |p| if narrow { short_uid(p, uid_chars) } else { p.to_string() });
        Row::new(vec![
            Cell::from(Line::from(human_duration(r.waiting)).right_aligned()),
            Cell::from(r.call.clone()),
            Cell::from(format!("{}[{}]", r.actor, r.pid)),
            Cell::from(pod),
            Cell::from(shorten_middle(&r.path, path_room)),
        ])
    });
    let header = Row::new(vec![
        Cell::from(Line::from("WAITING").right_aligned()),
        "CALL".into(),
        "ACTOR".into(),
        "POD".into(),
        "PATH".into(),
    ])
    .style(dim());
    Table::new(rows, widths.into_iter().map(Constraint::Length).chain([Constraint::Fill(1)]).collect::<Vec<_>>())
        .header(header)
}

/// Takes up to `want` rows off the top of `free`.
fn take_rows(free: &mut Rect, want: u16) -> Rect {
    let height = want.min(free.height);
    let taken = Rect { height, ..*free };
    free.y += height;
    free.height -= height;
    taken
}

/// Draws `screen` over the whole frame, with the `selection` the user made.
pub fn draw(frame: &mut Frame<'_>, screen: &Screen, selection: &Selection) {
    let mut free = frame.area();
    let width = free.width;
    let uid_chars = uid_shown(screen);

    frame.render_widget(Paragraph::new(header_lines(screen, width)), take_rows(&mut free, 2));

    // From the bottom up: the keys, what the last key did, the notes; out
    // of the way, but never pushed off.
    let mut bottom: Vec<Line> = screen
        .notes
        .iter()
        .map(|n| Line::styled(cut(&format!(" note: {n}"), width as usize), Style::new().fg(Color::Yellow)))
        .collect();
    if let Some(status) = &selection.status {
        bottom.push(Line::styled(cut(&format!(" {status}"), width as usize), bold()));
    }
    bottom.push(legend(width));
    let height = (bottom.len() as u16).min(free.height);
    let area = Rect { y: free.y + free.height - height, height, ..free };
    free.height -= height;
    frame.render_widget(Paragraph::new(bottom), area);

    let selected = selection.index.min(screen.findings.len().saturating_sub(1));
    if selection.expanded && !screen.findings.is_empty() {
        // The detail takes the screen: it is what the user asked to read.
        let lines = detail_lines(&screen.findings, selected, width);
        // Scrolled no further than its last row at the bottom.
        let last_top = (lines.len() as u16).saturating_sub(free.height.saturating_sub(1));
        let scroll = selection.scroll.min(last_top);
        frame.render_widget(Paragraph::new(lines).scroll((scroll, 0)).block(section("Finding".into())), free);
        return;
    }

    // Findings first, whole; the tables share what is left.
    let lines = finding_lines(&screen.findings, selected, width, uid_chars);
    let title = match screen.findings.len() {
        0 => "Findings".to_string(),
        n => format!("Findings ({n})"),
    };
    let area = take_rows(&mut free, 1 + lines.len() as u16);
    frame.render_widget(Paragraph::new(lines).block(section(title)), area);

    let busiest_rows = 2 + screen.busiest.len().max(1) as u16;
    let area = take_rows(&mut free, busiest_rows);
    if screen.busiest.is_empty() {
        frame.render_widget(
            Paragraph::new(Line::styled(" No call traced yet.", dim())).block(section("Busiest series".into())),
            area,
        );
    } else {
        frame
            .render_widget(busiest_table(screen, width, uid_chars).block(table_section("Busiest series".into())), area);
    }

    let area = take_rows(&mut free, 2 + screen.in_flight.len().max(1) as u16);
    let title = "Slowest calls in flight".to_string();
    if screen.in_flight.is_empty() {
        frame.render_widget(Paragraph::new(Line::styled(" None waiting.", dim())).block(section(title)), area);
    } else {
        frame.render_widget(in_flight_table(screen, width, uid_chars).block(table_section(title)), area);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::fake::t;
    use crate::identify::actor::Role;
    use crate::latency::tests::{event, identity};
    use crate::latency::LatencyBook;
    use crate::run::RunTotals;
    use crate::view::fit::tests::shell_pasted;
    use crate::view::model::tests::{flight, run, volume_finding, POD};
    use crate::view::model::{Action, LiveView, Moment, Notes};
    use podstuck_common::Syscall;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    fn screen_with_everything(notes: &Notes) -> Screen {
        let mut book = LatencyBook::new(t(0.0));
        for _ in 0..4 {
            book.record(&event(Syscall::Rmdir, -16, 20_000), &identity(Role::Kubelet, Some(POD)));
        }
        book.record(&event(Syscall::Unlink, 0, 3_000), &identity(Role::Other, None));
        let finding = volume_finding();
        let calls = [flight(77, 1.0, Some(b"/mnt/nfs/share"))];
        let mut totals = RunTotals { events_seen: 5, events_lost: 2, ..Default::default() };
        totals.calls.insert(Syscall::Rmdir, 4);
        let mut view = LiveView::new(run());
        view.screen(
            &Moment { now: t(62.0), findings: &[&finding], book: &book, in_flight: &calls, totals: &totals },
            notes,
        )
    }

    fn rendered(screen: &Screen, width: u16, height: u16) -> Vec<String> {
        rendered_with(screen, &Selection::default(), width, height)
    }

    fn rendered_with(screen: &Screen, selection: &Selection, width: u16, height: u16) -> Vec<String> {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        terminal.draw(|f| draw(f, screen, selection)).unwrap();
        let buffer = terminal.backend().buffer();
        buffer
            .content()
            .chunks(width as usize)
            .map(|row| row.iter().map(|c| c.symbol()).collect::<String>().trim_end().to_string())
            .collect()
    }

    fn line_with<'a>(lines: &'a [String], needle: &str) -> &'a str {
        lines
            .iter()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?} in\n{}", lines.join("\n")))
    }

    #[test]
    fn a_finding_that_is_over_shows_no_fix_and_its_detail_says_so() {
        let book = LatencyBook::new(t(0.0));
        let mut finding = volume_finding();
        finding.status = crate::diagnose::Status::Resolved;
        crate::diagnose::wording::settle(&mut finding);
        let mut view = LiveView::new(run());
        let totals = RunTotals::default();
        let screen = view.screen(
            &Moment { now: t(62.0), findings: &[&finding], book: &book, in_flight: &[], totals: &totals },
            &Notes::default(),
        );
        let lines = rendered(&screen, 80, 24);
        assert!(!lines.iter().any(|l| l.contains("fix:") || l.contains("umount")), "{}", lines.join("\n"));
        let mut selection = Selection::default();
        selection.apply(Action::Toggle, &screen.findings);
        let detail = rendered_with(&screen, &selection, 80, 24);
        assert!(detail.iter().any(|l| l.contains("over: nothing to run now")), "{}", detail.join("\n"));
        assert!(!detail.iter().any(|l| l.contains("umount")), "{}", detail.join("\n"));
    }

    #[test]
    fn the_screen_shows_header_findings_series_and_calls_in_flight_in_that_order() {
        let mut notes = Notes::default();
        notes.add("skipped a record: too short");
        let lines = rendered(&screen_with_everything(&notes), 200, 30);
        let text = lines.join("\n");
        let row = |needle: &str| {
            lines.iter().position(|l| l.contains(needle)).unwrap_or_else(|| panic!("no {needle:?} in\n{text}"))
        };
        assert!(lines[0].starts_with(" podstuck 0.1.0  node node-1  kernel 6.1.0-test  up 1m02s"), "{text}");
        assert!(line_with(&lines, "tracing the whole node").contains("5 seen  2 lost  calls counted 4"), "{text}");
        assert!(row("Findings (1)") < row("CRITICAL volume-still-mounted"));
        assert!(line_with(&lines, "CRITICAL").contains(&format!("pod {POD}  confirmed, 4 calls, for 1m00s")), "{text}");
        assert!(line_with(&lines, "cause:").ends_with(
            "cause: kubelet cannot remove the CSI volume dir of pod x: /k/pods/x/mount is still mounted (tmpfs)."
        ));
        assert!(line_with(&lines, "fix:").ends_with("fix:   umount /k/pods/x/mount"));
        assert!(row("fix:") < row("Busiest series") && row("Busiest series") < row("Slowest calls in flight"));
        let rmdir = line_with(&lines, "rmdir ");
        for cell in ["kubelet", POD, "4 (EBUSY 4)", "20.0us"] {
            assert!(rmdir.contains(cell), "{cell} in {rmdir}");
        }
        assert!(row("rmdir ") < row("unlink "), "busiest first:\n{text}");
        let waiting = line_with(&lines, "/mnt/nfs/share");
        assert!(
            waiting.contains("1m01s") && waiting.contains("umount2") && waiting.contains("kubelet[77]"),
            "{waiting}"
        );
        assert!(lines[28].contains("note: skipped a record: too short"), "the note sits above the keys:\n{text}");
        assert!(
            lines[29].starts_with(" q or Ctrl-C: stop and print a summary  ↑↓ select  Enter details  c copy fix"),
            "{text}"
        );
    }

    const UID: &str = "5f0e8a7c-93b1-4c1e-9d55-2a1b7c3e4f60";

    fn csi_path() -> String {
        format!("/var/lib/kubelet/pods/{UID}/volumes/kubernetes.io~csi/pvc-0b6a3f2e-1c4d-4e8f-9a7b-5d2c1e0f3a9b/mount")
    }

    /// P1 as a real node words it: a long CSI path in the cause and the fix.
    fn csi_screen(notes: &Notes) -> Screen {
        let mut screen = screen_with_everything(notes);
        let f = &mut screen.findings[0];
        f.pod = Some(UID.into());
        f.cause =
            format!("kubelet cannot remove the CSI volume dir of pod {UID}: {} is still mounted (tmpfs).", csi_path());
        f.summary = format!("{} Removal failed with EBUSY 4 times.", f.cause);
        f.fix = format!("umount {}", csi_path());
        screen.busiest[0].pod = Some(UID.into());
        screen.in_flight[0].pod = Some(UID.into());
        screen.in_flight[0].path = csi_path();
        screen
    }

    fn assert_fits(lines: &[String], width: usize) {
        for line in lines {
            assert!(line.chars().count() <= width, "wider than {width}: {line:?}\n{}", lines.join("\n"));
        }
    }

    #[test]
    fn at_80_columns_every_row_fits_the_cause_says_what_is_wrong_and_the_errno_stays() {
        let mut notes = Notes::default();
        notes.add(format!("could not read {}", csi_path()));
        let screen = csi_screen(&notes);
        let lines = rendered(&screen, 80, 24);
        let text = lines.join("\n");
        assert_fits(&lines, 80);
        let title = line_with(&lines, "CRITICAL");
        assert!(title.contains("volume-still-mounted  pod 5f0e8a7c  confirmed"), "the UID's first group:\n{text}");
        let at = lines.iter().position(|l| l.contains("cause:")).unwrap();
        assert!(lines[at].starts_with("   cause: kubelet cannot remove the CSI volume dir of pod"), "{text}");
        assert!(
            lines[at + 1].ends_with("/mount is still mounted (tmpfs)."),
            "the path gives way, not what is wrong:\n{text}"
        );
        // The fix's path is one word: on a row of its own, shortened, after a continuation.
        let at = lines.iter().position(|l| l.contains("fix:")).unwrap();
        assert_eq!(lines[at], "   fix:   umount \\");
        assert!(
            lines[at + 1].trim_start().starts_with("/var/")
                && lines[at + 1].ends_with("/mount")
                && lines[at + 1].contains('…'),
            "{text}"
        );
        let rmdir = line_with(&lines, "rmdir ");
        assert!(rmdir.contains("4 (EBUSY 4)") && rmdir.contains("5f0e8a7c") && !rmdir.contains(UID), "{rmdir}");
        assert!(line_with(&lines, "FAILED").contains("P99"), "{text}");
        let waiting = line_with(&lines, "umount2");
        assert!(waiting.ends_with("/mount") && waiting.contains('…'), "{waiting}");
        assert!(
            lines[23].contains("q or Ctrl-C: stop and print a summary") && lines[23].contains("c copy fix"),
            "{text}"
        );
    }

    #[test]
    fn at_200_columns_the_layout_holds_with_whole_uids_and_the_whole_fix() {
        let notes = Notes::default();
        let screen = csi_screen(&notes);
        let lines = rendered(&screen, 200, 50);
        assert_fits(&lines, 200);
        assert!(line_with(&lines, "CRITICAL").contains(&format!("pod {UID}  confirmed")));
        let cause = line_with(&lines, "cause:");
        assert!(
            cause.contains(&format!("of pod {UID}: /var/lib/kubelet/"))
                && cause.ends_with("/mount is still mounted (tmpfs)."),
            "{cause}"
        );
        assert!(line_with(&lines, "fix:").ends_with(&format!("fix:   umount {}", csi_path())));
        let rmdir = line_with(&lines, "rmdir ");
        assert!(rmdir.contains(UID) && rmdir.contains("20.0us"), "{rmdir}");
        let waiting = line_with(&lines, "umount2");
        assert!(
            waiting.contains("kubelet[77]")
                && waiting.contains(&format!("{UID} /var/lib/kubelet/pods/5f0e"))
                && waiting.ends_with("/mount"),
            "{waiting}"
        );
    }

    #[test]
    fn pods_sharing_a_uid_prefix_are_told_apart() {
        let notes = Notes::default();
        let mut screen = csi_screen(&notes);
        assert_eq!(uid_shown(&screen), 8);
        screen.busiest[1].pod = Some("5f0e8a7c-93b1-4c1e-9d55-000000000000".into());
        assert_eq!(uid_shown(&screen), 25, "one past the characters they share");
        let lines = rendered(&screen, 80, 24);
        assert!(
            lines.iter().any(|l| l.contains("5f0e8a7c-93b1-4c1e-9d55-2") && l.contains("rmdir")),
            "{}",
            lines.join("\n")
        );
    }

    #[test]
    fn the_selected_finding_expands_to_its_summary_evidence_and_whole_fix() {
        let notes = Notes::default();
        let mut screen = csi_screen(&notes);
        let mut second = screen.findings[0].clone();
        second.kind = "dir-not-empty";
        second.evidence.clear();
        screen.findings.push(second);
        let mut selection = Selection::default();
        let lines = rendered_with(&screen, &selection, 80, 24);
        assert!(line_with(&lines, "volume-still-mounted").starts_with("›CRITICAL"), "the first is selected");
        assert!(line_with(&lines, "dir-not-empty").starts_with(" CRITICAL"));
        selection.apply(Action::Toggle, &screen.findings);
        let lines = rendered_with(&screen, &selection, 80, 24);
        let text = lines.join("\n");
        assert_fits(&lines, 80);
        assert!(
            text.contains("volume-still-mounted  (finding 1 of 2; ↑↓ scroll, Esc closes)")
                && text.contains(&format!(" pod {UID}")),
            "{text}"
        );
        assert!(text.contains("Removal failed with EBUSY 4 times."), "the whole summary:\n{text}");
        assert!(text.contains("   - trace: unlinkat(AT_REMOVEDIR) by kubelet failed EBUSY 4 times"), "{text}");
        assert!(text.contains("   - mountinfo: /k/pods/x/mount: tmpfs"), "{text}");
        // The fix whole, at 80 columns: its path broken after a `/`, never
        // elided; the rows pasted into a shell are the fix.
        let at = lines.iter().position(|l| l.contains("fix (whole; c copies it, q prints it):")).unwrap();
        assert_eq!(lines[at + 1], "   umount \\");
        assert!(lines[at + 2].starts_with("   /var/lib/") && lines[at + 2].ends_with("/\\"), "{text}");
        assert!(lines[at + 3].ends_with("/mount") && !lines[at + 3].starts_with(' '), "{text}");
        assert!(!text.contains('…'), "nothing elided in the detail:\n{text}");
        assert_eq!(shell_pasted(&lines[at + 1..at + 4]), screen.findings[0].fix);
        assert!(text.contains(&csi_path()[..40]) || text.contains("kubernetes.io~csi/"), "{text}");
        assert!(!text.contains("Busiest series"), "the detail takes the screen");
        // Scrolling: the last row of the summary comes up, no further.
        for _ in 0..40 {
            selection.apply(Action::Down, &screen.findings);
        }
        let lines = rendered_with(&screen, &selection, 80, 12);
        assert!(lines[lines.len() - 2].ends_with("Removal failed with EBUSY 4 times."), "{}", lines.join("\n"));
        selection.apply(Action::Close, &screen.findings);
        selection.apply(Action::Down, &screen.findings);
        selection.apply(Action::Toggle, &screen.findings);
        let lines = rendered_with(&screen, &selection, 80, 24).join("\n");
        assert!(
            lines.contains("dir-not-empty  (finding 2 of 2;") && lines.contains("evidence: none recorded"),
            "{lines}"
        );
        selection.apply(Action::Copy, &screen.findings);
        let lines = rendered_with(&screen, &selection, 80, 24);
        assert!(
            lines[22].contains(&format!("fix sent as OSC 52 ({} bytes)", screen.findings[1].fix.len())),
            "{}",
            lines.join("\n")
        );
    }

    #[test]
    fn findings_keep_their_rows_when_the_terminal_is_small() {
        let notes = Notes::default();
        let screen = screen_with_everything(&notes);
        let lines = rendered(&screen, 100, 8);
        assert!(lines.iter().any(|l| l.contains("fix:   umount /k/pods/x/mount")), "{}", lines.join("\n"));
        let empty = Screen { findings: vec![], busiest: vec![], in_flight: vec![], ..screen };
        let lines = rendered(&empty, 100, 12).join("\n");
        for words in ["No finding yet", "No call traced yet", "None waiting"] {
            assert!(lines.contains(words), "{words} in\n{lines}");
        }
    }
}
