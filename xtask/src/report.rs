//! BENCHMARKS.md as sections that different tasks write: `cargo xtask
//! bench` the file and its fork/exec section alone, `cargo xtask soak` its
//! Soak section, each keeping what the others wrote. Here are what both
//! need and neither owns: finding a section by its heading, putting one in
//! place, and the line that says which machine a figure is of. Both
//! tasks import this; it imports neither.

/// Where each line of `text` starts.
fn line_starts(text: &str) -> impl Iterator<Item = usize> + '_ {
    std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).filter(move |&i| i < text.len())
}

/// Where the section under `heading` (a whole `## ` line) starts in
/// `file`, and where it ends: at the next `## ` heading, or the end.
pub fn section_span(file: &str, heading: &str) -> Option<(usize, usize)> {
    let start = line_starts(file).find(|&at| file[at..].lines().next().unwrap_or_default().trim_end() == heading)?;
    let end = line_starts(file).find(|&at| at > start && file[at..].starts_with("## ")).unwrap_or(file.len());
    Some((start, end))
}

/// `file` with its `heading` section replaced by `section`, or, where it
/// has none, `section` put before the first section whose heading starts
/// with one of `before` (else at the end); everything else as it was.
pub fn with_section(file: &str, heading: &str, section: &str, before: &[&str]) -> String {
    let (from, to) = section_span(file, heading).unwrap_or_else(|| {
        let at = line_starts(file).find(|&at| before.iter().any(|b| file[at..].starts_with(b))).unwrap_or(file.len());
        (at, at)
    });
    splice(&file[..from], section, &file[to..])
}

/// `section` between `before` and `after`, one blank line either side:
/// how a section is put in place of its old self.
fn splice(before: &str, section: &str, after: &str) -> String {
    let mut out = before.trim_end().to_string();
    if !out.is_empty() {
        out.push_str("\n\n");
    }
    out.push_str(section.trim_end());
    out.push('\n');
    if !after.trim().is_empty() {
        out.push('\n');
        out.push_str(after);
    }
    out
}

/// CPUs, their model, memory and kernel: the machine a figure is of.
pub fn machine_basics() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string()))
        .unwrap_or_default();
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .collect::<Vec<_>>()
        .join(" ");
    // What `uname -r` prints.
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cpus} CPUs ({cpu}), {mem}, kernel {}", kernel.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_is_found_by_its_whole_heading_line() {
        let file = "# b\n\n## Soaked\n\nx\n\n## Soak\n\ny\n\n## After\n\nz\n";
        let (start, end) = section_span(file, "## Soak").unwrap();
        assert_eq!(&file[start..end], "## Soak\n\ny\n\n");
        assert_eq!(section_span(file, "## Soa"), None);
        let (start, end) = section_span(file, "## After").unwrap();
        assert_eq!(&file[start..end], "## After\n\nz\n");
    }

    #[test]
    fn a_missing_section_goes_before_the_first_named_or_at_the_end() {
        let file = "# b\n\n## One\n\nx\n\n## Two\n\ny\n";
        assert_eq!(
            with_section(file, "## New", "## New\n\nn", &["## Two"]),
            "# b\n\n## One\n\nx\n\n## New\n\nn\n\n## Two\n\ny\n"
        );
        assert_eq!(
            with_section(file, "## New", "## New\n\nn", &[]),
            "# b\n\n## One\n\nx\n\n## Two\n\ny\n\n## New\n\nn\n"
        );
        assert_eq!(with_section("", "## New", "## New\n\nn\n", &[]), "## New\n\nn\n");
    }
}
