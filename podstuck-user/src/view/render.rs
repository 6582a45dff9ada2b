//! Lays a [`Screen`] out on a terminal with ratatui: the header, then the
//! findings with their fix (never cut: a fix is meant to be copied), then
//! the busiest series and the slowest calls in flight in whatever rows are
//! left, notes at the bottom. Drawing only: every word comes from the
//! model, so the layout is tested on ratatui's `TestBackend`.

use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Padding, Paragraph, Row, Table};
use ratatui::Frame;

use crate::diagnose::{Confidence, Severity};
use crate::words::{duration_to_the_second, human_duration, latency_text};

use super::model::{FindingRow, Screen};
use super::text::rate;

const QUIT_HINT: &str = "q or Ctrl-C: stop and print a summary";

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

/// `text` cut to `width` characters, the cut marked.
fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut out: String = text.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// `text` broken into rows of `width` characters: a fix is shown whole.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() || width == 0 {
        return vec![text.to_string()];
    }
    chars.chunks(width).map(|c| c.iter().collect()).collect()
}

/// A section's rule and title.
fn section(title: String) -> Block<'static> {
    Block::new().borders(Borders::TOP).border_style(dim()).title(Span::styled(format!(" {title} "), bold()))
}

/// A section whose rows start one column in, like the text around them.
fn table_section(title: String) -> Block<'static> {
    section(title).padding(Padding::left(1))
}

/// The findings as lines for `width` columns: a title line per finding,
/// its cause on one line, its fix on as many as it takes.
fn finding_lines(findings: &[FindingRow], width: u16) -> Vec<Line<'static>> {
    const CAUSE: &str = "   cause: ";
    const FIX: &str = "   fix:   ";
    let room = (width as usize).saturating_sub(CAUSE.len()).max(1);
    if findings.is_empty() {
        return vec![Line::styled(" No finding yet: nothing traced so far is stuck.", dim())];
    }
    let mut lines = Vec::new();
    for f in findings {
        let mut head = vec![
            Span::styled(format!(" {:<8} ", severity_label(f.severity)), severity_style(f.severity, f.active)),
            Span::styled(f.kind.to_string(), if f.active { bold() } else { dim() }),
        ];
        if let Some(pod) = &f.pod {
            head.push(Span::raw(format!("  pod {pod}")));
        }
        let status = if f.active { "" } else { "resolved, " };
        head.push(Span::styled(
            format!("  {status}{}, {} calls, for {}", Confidence::as_str(f.confidence), f.count, human_duration(f.age)),
            dim(),
        ));
        lines.push(Line::from(head));
        lines.push(Line::from(vec![Span::styled(CAUSE, dim()), Span::raw(cut(&f.cause, room))]));
        let fix_style = if f.active { bold().fg(Color::Green) } else { dim() };
        for (i, part) in wrap(&f.fix, room).into_iter().enumerate() {
            let lead = if i == 0 { FIX } else { "          " };
            lines.push(Line::from(vec![Span::styled(lead, dim()), Span::styled(part, fix_style)]));
        }
    }
    lines
}

fn header_lines(screen: &Screen) -> Vec<Line<'static>> {
    let h = &screen.header;
    let lost = if h.events_lost > 0 { bold().fg(Color::Red) } else { Style::new() };
    vec![
        Line::from(vec![
            Span::styled(format!(" podstuck {}", h.version), bold()),
            Span::raw(format!("  node {}  kernel {}  up {}", h.node, h.kernel, duration_to_the_second(h.uptime))),
            Span::styled(format!("  {QUIT_HINT}"), dim()),
        ]),
        Line::from(vec![
            Span::raw(format!(" tracing {}", h.filters)),
            Span::raw(format!("  events {}  {} seen  ", rate(h.events_per_s), h.events_seen)),
            Span::styled(format!("{} lost", h.events_lost), lost),
            Span::raw(format!("  calls counted {}", h.calls_counted)),
            Span::raw(h.node_calls.map(|n| format!("  node: {n} calls")).unwrap_or_default()),
        ]),
    ]
}

fn busiest_table(screen: &Screen) -> Table<'static> {
    let right = |s: String| Cell::from(Line::from(s).right_aligned());
    let rows = screen.busiest.iter().map(|r| {
        let failed = match r.errnos.as_slice() {
            [] => "0".to_string(),
            errnos => {
                let names: Vec<String> = errnos.iter().map(|(e, n)| format!("{e} {n}")).collect();
                format!("{} ({})", r.failed, names.join(", "))
            }
        };
        let failed = if r.failed > 0 { Cell::from(Span::styled(failed, Style::new().fg(Color::Red))) } else { Cell::from(failed) };
        Row::new(vec![
            Cell::from(r.syscall),
            Cell::from(r.actor),
            Cell::from(r.pod.clone().unwrap_or_else(|| "-".to_string())),
            right(r.count.to_string()),
            right(rate(r.per_second)),
            right(latency_text(r.p50_ns)),
            right(latency_text(r.p99_ns)),
            failed,
        ])
    });
    let header = Row::new(vec![
        Cell::from("CALL"),
        Cell::from("ACTOR"),
        Cell::from("POD"),
        right("CALLS".into()),
        right("RATE".into()),
        right("P50".into()),
        right("P99".into()),
        Cell::from("FAILED"),
    ])
    .style(dim());
    Table::new(
        rows,
        [
            Constraint::Length(8),
            Constraint::Length(10),
            Constraint::Length(36),
            Constraint::Length(9),
            Constraint::Length(8),
            Constraint::Length(9),
            Constraint::Length(9),
            Constraint::Fill(1),
        ],
    )
    .header(header)
}

fn in_flight_table(screen: &Screen) -> Table<'static> {
    let rows = screen.in_flight.iter().map(|r| {
        Row::new(vec![
            Cell::from(Line::from(human_duration(r.waiting)).right_aligned()),
            Cell::from(r.call.clone()),
            Cell::from(format!("{}[{}]", r.actor, r.pid)),
            Cell::from(r.pod.clone().unwrap_or_else(|| "-".to_string())),
            Cell::from(r.path.clone()),
        ])
    });
    let header = Row::new(vec![Cell::from(Line::from("WAITING").right_aligned()), "CALL".into(), "ACTOR".into(), "POD".into(), "PATH".into()]).style(dim());
    Table::new(
        rows,
        [Constraint::Length(8), Constraint::Length(24), Constraint::Length(28), Constraint::Length(36), Constraint::Fill(1)],
    )
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

/// Draws `screen` over the whole frame.
pub fn draw(frame: &mut Frame<'_>, screen: &Screen) {
    let mut free = frame.area();
    let width = free.width;

    frame.render_widget(Paragraph::new(header_lines(screen)), take_rows(&mut free, 2));

    // Notes sit at the bottom, out of the way, but are never pushed off.
    if !screen.notes.is_empty() {
        let height = (screen.notes.len() as u16).min(free.height);
        let area = Rect { y: free.y + free.height - height, height, ..free };
        free.height -= height;
        let lines: Vec<Line> = screen.notes.iter().map(|n| Line::styled(format!(" note: {}", cut(n, width as usize)), Style::new().fg(Color::Yellow))).collect();
        frame.render_widget(Paragraph::new(lines), area);
    }

    // Findings first, whole; the tables share what is left.
    let lines = finding_lines(&screen.findings, width);
    let title = match screen.findings.len() {
        0 => "Findings".to_string(),
        n => format!("Findings ({n})"),
    };
    let area = take_rows(&mut free, 1 + lines.len() as u16);
    frame.render_widget(Paragraph::new(lines).block(section(title)), area);

    let busiest_rows = 2 + screen.busiest.len().max(1) as u16;
    let area = take_rows(&mut free, busiest_rows);
    if screen.busiest.is_empty() {
        frame.render_widget(Paragraph::new(Line::styled(" No call traced yet.", dim())).block(section("Busiest series".into())), area);
    } else {
        frame.render_widget(busiest_table(screen).block(table_section("Busiest series".into())), area);
    }

    let area = take_rows(&mut free, 2 + screen.in_flight.len().max(1) as u16);
    let title = "Slowest calls in flight".to_string();
    if screen.in_flight.is_empty() {
        frame.render_widget(Paragraph::new(Line::styled(" None waiting.", dim())).block(section(title)), area);
    } else {
        frame.render_widget(in_flight_table(screen).block(table_section(title)), area);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::fake::t;
    use crate::latency::tests::{event, identity};
    use crate::latency::LatencyBook;
    use crate::collect::RunTotals;
    use crate::identify::actor::Role;
    use crate::view::model::tests::{flight, run, volume_finding, POD};
    use crate::view::model::{LiveView, Moment, Notes};
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
        view.screen(&Moment { now: t(62.0), findings: &[&finding], book: &book, in_flight: &calls, totals: &totals }, notes)
    }

    fn rendered(screen: &Screen, width: u16, height: u16) -> Vec<String> {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        terminal.draw(|f| draw(f, screen)).unwrap();
        let buffer = terminal.backend().buffer();
        buffer.content().chunks(width as usize).map(|row| row.iter().map(|c| c.symbol()).collect::<String>().trim_end().to_string()).collect()
    }

    fn line_with<'a>(lines: &'a [String], needle: &str) -> &'a str {
        lines.iter().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("no line with {needle:?} in\n{}", lines.join("\n")))
    }

    #[test]
    fn with_pod_the_header_says_the_nodes_calls_apart() {
        let mut screen = screen_with_everything(&Notes::default());
        assert!(!rendered(&screen, 200, 30).join("\n").contains("node: "));
        screen.header.node_calls = Some(87_575);
        let lines = rendered(&screen, 200, 30);
        assert!(line_with(&lines, "calls counted").contains("calls counted 4  node: 87575 calls"), "{}", lines.join("\n"));
    }

    #[test]
    fn the_screen_shows_header_findings_series_and_calls_in_flight_in_that_order() {
        let mut notes = Notes::default();
        notes.add("skipped a record: too short");
        let lines = rendered(&screen_with_everything(&notes), 200, 30);
        let text = lines.join("\n");
        let row = |needle: &str| lines.iter().position(|l| l.contains(needle)).unwrap_or_else(|| panic!("no {needle:?} in\n{text}"));
        assert!(lines[0].starts_with(" podstuck 0.1.0  node node-1  kernel 6.1.0-test  up 1m02s"), "{text}");
        assert!(line_with(&lines, "tracing the whole node").contains("5 seen  2 lost  calls counted 4"), "{text}");
        assert!(row("Findings (1)") < row("CRITICAL volume-still-mounted"));
        assert!(line_with(&lines, "CRITICAL").contains(&format!("pod {POD}  confirmed, 4 calls, for 1m00s")), "{text}");
        assert!(line_with(&lines, "cause:").ends_with("cause: kubelet cannot remove the CSI volume dir of pod x: /k/pods/x/mount is still mounted (tmpfs)."));
        assert!(line_with(&lines, "fix:").ends_with("fix:   umount /k/pods/x/mount"));
        assert!(row("fix:") < row("Busiest series") && row("Busiest series") < row("Slowest calls in flight"));
        let rmdir = line_with(&lines, "rmdir ");
        for cell in ["kubelet", POD, "4 (EBUSY 4)", "20.0us"] {
            assert!(rmdir.contains(cell), "{cell} in {rmdir}");
        }
        assert!(row("rmdir ") < row("unlink "), "busiest first:\n{text}");
        let waiting = line_with(&lines, "/mnt/nfs/share");
        assert!(waiting.contains("1m01s") && waiting.contains("umount2") && waiting.contains("kubelet[77]"), "{waiting}");
        assert_eq!(lines.iter().rposition(|l| !l.is_empty()), Some(29), "the note sits on the last row:\n{text}");
        assert!(lines[29].contains("note: skipped a record: too short"));
    }

    #[test]
    fn a_long_fix_wraps_whole_and_a_long_cause_is_cut() {
        let notes = Notes::default();
        let mut screen = screen_with_everything(&notes);
        screen.findings[0].fix = format!("umount /{}", "x".repeat(150));
        screen.findings[0].cause = "y".repeat(150);
        let lines = rendered(&screen, 80, 30);
        let at = lines.iter().position(|l| l.contains("fix:")).unwrap();
        let shown: String = lines[at..at + 3].iter().map(|l| l.trim_start().trim_start_matches("fix:").trim()).collect();
        assert_eq!(shown, format!("umount /{}", "x".repeat(150)), "{}", lines.join("\n"));
        let cause = line_with(&lines, "cause:");
        assert!(cause.ends_with("y…") && cause.chars().count() <= 80, "{cause}");
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
