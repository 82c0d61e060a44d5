//! The text screens: drawn from the views for a terminal of a given width, in colour or not.
//! Pure: the same view, width and colour give the same text (the golden tests hold them).

use console::Style;
use jiff::Timestamp;

use crate::format::{age, bytes, duration, thousands, time};
use crate::problems::Problem;
use crate::view::{Activity, ActivityKind, AppLine, AppStatus, Run, Schedule, Verification, Verified, Window};

/// How text is drawn: the terminal's width, and whether it takes colour.
#[derive(Debug, Clone, Copy)]
pub struct Screen {
    pub width: usize,
    pub colour: bool,
}

impl Screen {
    fn paint(&self, style: Style, text: &str) -> String {
        if self.colour { style.force_styling(true).apply_to(text).to_string() } else { text.to_string() }
    }
    fn bad(&self, text: &str) -> String {
        self.paint(Style::new().red().bold(), text)
    }
    fn good(&self, text: &str) -> String {
        self.paint(Style::new().green(), text)
    }
    fn warn(&self, text: &str) -> String {
        self.paint(Style::new().yellow(), text)
    }
    fn heading(&self, text: &str) -> String {
        self.paint(Style::new().bold(), text)
    }
    fn dim(&self, text: &str) -> String {
        self.paint(Style::new().dim(), text)
    }
    /// `text` wrapped to the screen, each line after `indent` spaces.
    fn wrap(&self, text: &str, indent: usize) -> Vec<String> {
        let width = self.width.saturating_sub(indent).max(20);
        textwrap::wrap(text, width).into_iter().map(|line| format!("{}{line}", " ".repeat(indent))).collect()
    }
}

/// How a cell is coloured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tone {
    Plain,
    Good,
    Bad,
    Warn,
    Dim,
}

struct Cell {
    text: String,
    tone: Tone,
}

fn cell(text: impl Into<String>) -> Cell {
    Cell { text: text.into(), tone: Tone::Plain }
}

fn toned(text: impl Into<String>, tone: Tone) -> Cell {
    Cell { text: text.into(), tone }
}

/// Columns separated by two spaces, like kubectl's; on a narrow screen the least needed columns
/// go first (the higher `drop_order`, the sooner; 0 never goes).
struct Table {
    columns: Vec<(&'static str, u8)>,
    rows: Vec<Vec<Cell>>,
    indent: usize,
}

impl Table {
    fn new(indent: usize, columns: &[(&'static str, u8)]) -> Self {
        Table { columns: columns.to_vec(), rows: Vec::new(), indent }
    }

    fn row(&mut self, cells: Vec<Cell>) {
        self.rows.push(cells);
    }

    fn widths(&self) -> Vec<usize> {
        (0..self.columns.len())
            .map(|i| {
                let header = self.columns[i].0.len();
                self.rows.iter().map(|r| console::measure_text_width(&r[i].text)).fold(header, usize::max)
            })
            .collect()
    }

    /// The columns that fit in `width`.
    fn shown(&self, width: usize) -> Vec<usize> {
        let widths = self.widths();
        let mut shown: Vec<usize> = (0..self.columns.len()).collect();
        let total = |shown: &[usize]| self.indent + shown.iter().map(|&i| widths[i] + 2).sum::<usize>();
        while total(&shown) > width + 2 {
            let droppable = shown.iter().copied().filter(|&i| self.columns[i].1 > 0).max_by_key(|&i| self.columns[i].1);
            match droppable {
                Some(column) => shown.retain(|&i| i != column),
                None => break,
            }
        }
        shown
    }

    fn render(&self, screen: &Screen) -> Vec<String> {
        let widths = self.widths();
        let shown = self.shown(screen.width);
        let line = |cells: Vec<(String, Tone)>| {
            let last = shown.len().saturating_sub(1);
            let parts: Vec<String> = cells
                .into_iter()
                .enumerate()
                .map(|(position, (text, tone))| {
                    let column = shown[position];
                    let padding = if position == last {
                        0
                    } else {
                        widths[column].saturating_sub(console::measure_text_width(&text))
                    };
                    let painted = match tone {
                        Tone::Plain => text,
                        Tone::Good => screen.good(&text),
                        Tone::Bad => screen.bad(&text),
                        Tone::Warn => screen.warn(&text),
                        Tone::Dim => screen.dim(&text),
                    };
                    format!("{painted}{}", " ".repeat(padding))
                })
                .collect();
            format!("{}{}", " ".repeat(self.indent), parts.join("  ")).trim_end().to_string()
        };
        let mut lines = vec![line(shown.iter().map(|&i| (self.columns[i].0.to_string(), Tone::Dim)).collect())];
        for row in &self.rows {
            lines.push(line(shown.iter().map(|&i| (row[i].text.clone(), row[i].tone)).collect()));
        }
        lines
    }
}

pub fn app_status(status: &AppStatus, screen: &Screen) -> String {
    let now = status.read_at;
    let mut out = Vec::new();
    out.push(headline(status, screen));
    out.extend(components(status, screen));
    if let Some(replication) = &status.replication {
        out.push(String::new());
        out.push(screen.heading("Replication"));
        out.extend(replication_lines(replication, now, screen));
    }
    out.push(String::new());
    out.push(screen.heading("Backups"));
    out.extend(backup_lines(status, screen));
    for window in &status.point_in_time {
        out.push(String::new());
        out.push(screen.heading(&format!("Point in time ({})", window.schedule)));
        out.extend(window_lines(window, now, screen));
    }
    if let Some(restore) = &status.last_restore {
        out.push(String::new());
        out.push(screen.heading("Last restore"));
        let when = restore.completed.or(restore.started).map(|t| age(t, now)).unwrap_or_default();
        let took = restore.duration_seconds.map(|d| format!(", took {}", duration(d))).unwrap_or_default();
        let phase = tone_of_phase(&restore.phase);
        let text =
            format!("{}  {}  {when}  {}{took}", restore.name, paint(screen, &restore.phase, phase), restore.source);
        out.extend(screen.wrap(&text, 2));
        if let Some(error) = &restore.error {
            out.extend(screen.wrap(error, 4));
        }
    }
    out.push(String::new());
    out.push(screen.heading("Running now"));
    out.extend(activity_lines(&status.running, screen));
    out.push(String::new());
    out.extend(problem_lines(&status.problems, screen));
    out.join("\n") + "\n"
}

fn headline(status: &AppStatus, screen: &Screen) -> String {
    let state = if status.ready { screen.good("Ready") } else { screen.bad(&format!("Not ready: {}", status.state)) };
    let pending = match (status.generation, status.observed_generation) {
        (Some(generation), Some(observed)) if observed < generation => {
            screen.warn(&format!("  (generation {generation} not yet reconciled; status is of {observed})"))
        }
        _ => String::new(),
    };
    format!("{} {}/{}  {state}{pending}", screen.heading("VisitorsApp"), status.namespace, status.name)
}

fn components(status: &AppStatus, screen: &Screen) -> Vec<String> {
    let mysql = &status.mysql;
    let tls = match &mysql.tls {
        Some(tls) => {
            let until = tls.not_after.map(|t| format!(", certificate until {}", day(t))).unwrap_or_default();
            let days = tls.not_after.map(|t| format!(" ({})", age(t, status.read_at))).unwrap_or_default();
            format!("TLS {}{until}{days}", tls.mode.to_lowercase())
        }
        None => "no TLS".to_string(),
    };
    let mut table = Table::new(2, &[("", 0), ("READY", 0), ("IMAGE", 2), ("", 1)]);
    let ready_cell = |ready: i32, replicas: i32| {
        let tone = if ready >= replicas { Tone::Good } else { Tone::Bad };
        toned(format!("{ready}/{replicas}"), tone)
    };
    table.row(vec![
        cell("MySQL"),
        ready_cell(mysql.ready_replicas, mysql.replicas),
        cell(mysql.image.clone().unwrap_or_default()),
        cell(tls),
    ]);
    for (name, tier) in [("Backend", &status.backend), ("Frontend", &status.frontend)] {
        table.row(vec![
            cell(name),
            ready_cell(tier.ready_replicas, tier.replicas),
            cell(tier.image.clone().unwrap_or_default()),
            cell(tier.endpoint.clone().unwrap_or_default()),
        ]);
    }
    table.render(screen)
}

fn replication_lines(replication: &crate::view::Replication, now: Timestamp, screen: &Screen) -> Vec<String> {
    let paced = replication.members.iter().any(|m| m.apply_rate.is_some() || m.behind_primary.is_some());
    let mut columns = vec![("SERVER", 0), ("ROLE", 0), ("LAG", 1)];
    if paced {
        columns.extend([("BEHIND", 1), ("APPLIES", 1)]);
    }
    columns.push(("", 2));
    let mut table = Table::new(2, &columns);
    for member in &replication.members {
        let tone = if member.healthy { Tone::Good } else { Tone::Bad };
        let mut row = vec![
            cell(member.name.clone()),
            toned(member.role.clone(), tone),
            cell(member.lag_seconds.map(|l| format!("{l} s")).unwrap_or_default()),
        ];
        if paced {
            let behind_tone = if member.falling_behind { Tone::Bad } else { Tone::Plain };
            row.push(toned(
                member.behind_primary.map(|b| format!("{} tx", thousands(b))).unwrap_or_default(),
                behind_tone,
            ));
            row.push(cell(member.apply_rate.map(|r| format!("{}/s", thousands(r.round() as i64))).unwrap_or_default()));
        }
        row.push(cell(pace_note(member)));
        table.row(row);
    }
    let mut lines = table.render(screen);
    if let Some(commits) = replication.commit_rate {
        let wait = match replication.expected_failover_wait_seconds {
            Some(wait) => {
                format!("a failover would wait about {} for its new primary to apply what it received", duration(wait))
            }
            None => "a failover would wait for a backlog whose apply rate is not measured yet".to_string(),
        };
        lines.push(format!("  primary commits {}/s; {wait}", thousands(commits.round() as i64)));
    }
    for (what, change) in [("failover", &replication.last_failover), ("switchover", &replication.last_switchover)] {
        if let Some(change) = change {
            let gap = change.write_gap_seconds.map(|g| format!(", writes paused {}", duration(g))).unwrap_or_default();
            lines.push(format!(
                "  last {what} {}: {} → {} ({}{gap})",
                age(change.time, now),
                change.from.clone().unwrap_or_else(|| "?".into()),
                change.to.clone().unwrap_or_else(|| "?".into()),
                change.reason
            ));
        }
    }
    lines
}

/// A member's message, with how soon it catches up or that it falls behind.
fn pace_note(member: &crate::view::Member) -> String {
    let mut note = member.message.clone().unwrap_or_default();
    let pace = match (member.falling_behind, member.catch_up_seconds) {
        (true, _) => Some("falling further behind the primary".to_string()),
        (false, Some(seconds)) => Some(format!("caught up in about {}", duration(seconds))),
        (false, None) => None,
    };
    if let Some(pace) = pace {
        if !note.is_empty() {
            note.push_str("; ");
        }
        note.push_str(&pace);
    }
    note
}

fn backup_lines(status: &AppStatus, screen: &Screen) -> Vec<String> {
    let now = status.read_at;
    if status.schedules.is_empty() && status.last_on_demand.is_none() {
        return vec![
            format!("  {}", screen.bad("No backup of this app exists.")),
            "  Create a schedule (deploy/examples/mysqlbackup-nightly-pvc.yaml), or take one with".to_string(),
            "  `kubectl visitors backup` once a schedule exists.".to_string(),
        ];
    }
    let mut table = Table::new(
        2,
        &[
            ("SCHEDULE", 0),
            ("LAST RUN", 0),
            ("RESULT", 0),
            ("AGE", 1),
            ("SIZE", 3),
            ("TOOK", 4),
            ("VERIFIED", 2),
            ("NEXT", 5),
        ],
    );
    for schedule in &status.schedules {
        table.row(schedule_row(schedule, now));
    }
    if let Some(run) = &status.last_on_demand {
        let mut row = run_cells(Some(run), now);
        row.insert(0, cell("(on demand)"));
        row.push(cell(""));
        table.row(row);
    }
    let mut lines = table.render(screen);
    lines.extend(screen.wrap(&verified_line(status.last_verified.as_ref(), now, screen), 2));
    lines
}

fn schedule_row(schedule: &Schedule, now: Timestamp) -> Vec<Cell> {
    let mut row = vec![cell(schedule.name.clone())];
    row.extend(run_cells(schedule.last_run.as_ref(), now));
    row.push(if schedule.suspended {
        toned("suspended", Tone::Warn)
    } else {
        cell(schedule.next_run.map(|t| age(t, now)).unwrap_or_default())
    });
    row
}

/// LAST RUN, RESULT, AGE, SIZE, TOOK, VERIFIED.
fn run_cells(run: Option<&Run>, now: Timestamp) -> Vec<Cell> {
    let Some(run) = run else {
        return vec![toned("none yet", Tone::Dim), cell(""), cell(""), cell(""), cell(""), cell("")];
    };
    vec![
        cell(run.name.clone()),
        toned(run.phase.clone(), tone_of_phase(&run.phase)),
        cell(run.completed.or(run.created).map(|t| age(t, now)).unwrap_or_default()),
        cell(run.size_bytes.map(bytes).unwrap_or_default()),
        cell(run.duration_seconds.map(duration).unwrap_or_default()),
        verification_cell(&run.verification, now),
    ]
}

fn verification_cell(verification: &Verification, now: Timestamp) -> Cell {
    match verification {
        Verification::Verified { at, .. } => {
            toned(format!("✓ {}", at.map(|t| age(t, now)).unwrap_or_default()).trim_end().to_string(), Tone::Good)
        }
        Verification::DrillFailed { reason, .. } => toned(format!("✗ {reason}"), Tone::Bad),
        Verification::Drilling { .. } => toned("drilling", Tone::Warn),
        Verification::Unverified => toned("not yet", Tone::Warn),
        Verification::NotApplicable => cell("-"),
    }
}

fn verified_line(verified: Option<&Verified>, now: Timestamp, screen: &Screen) -> String {
    let Some(verified) = verified else {
        return format!("Last verified run: {}", screen.warn("none: no backup was proven restorable by a drill yet"));
    };
    let backed_up = verified.backed_up.map(|t| format!(", backed up {}", age(t, now))).unwrap_or_default();
    let proven = verified.verified.map(|t| format!(", proven {}", age(t, now))).unwrap_or_default();
    let restore =
        verified.restore_seconds.map(|s| format!("; its drill restored it in {}", duration(s))).unwrap_or_default();
    format!("Last verified run: {}{backed_up}{proven}{restore}", screen.good(&verified.run))
}

fn window_lines(window: &Window, now: Timestamp, screen: &Screen) -> Vec<String> {
    let mut lines = Vec::new();
    match (window.oldest_recoverable, window.newest_recoverable) {
        (Some(oldest), Some(newest)) => lines.push(format!("  recoverable  {} … {}", time(oldest), time(newest))),
        (None, Some(newest)) => {
            lines.push(format!("  recoverable  up to {} ({})", time(newest), screen.warn("no base run yet")))
        }
        _ => lines.push(format!("  recoverable  {}", screen.warn("nothing yet"))),
    }
    let mut facts = Vec::new();
    if let Some(lag) = window.archive_lag_seconds {
        facts.push(format!("archive lag {}", duration(lag)));
    }
    if let Some(newest) = window.newest_recoverable {
        facts.push(format!("newest {}", age(newest, now)));
    }
    if let Some(segments) = window.segments {
        facts.push(format!("{segments} segments"));
    }
    if let Some(stored) = window.stored_bytes {
        facts.push(bytes(stored));
    }
    let state = match window.state.as_deref() {
        Some("Archiving") => screen.good("archiving"),
        Some(other) => screen.bad(other),
        None => screen.warn("not reported yet"),
    };
    lines.extend(screen.wrap(&format!("{state}  {}", facts.join(", ")), 2));
    for gap in &window.gaps {
        let span = format!(
            "{} … {}",
            gap.after.map(time).unwrap_or_else(|| "?".into()),
            gap.before.map(time).unwrap_or_else(|| "?".into())
        );
        lines.extend(screen.wrap(&format!("{} {span}: {}", screen.bad("gap"), gap.reason), 2));
    }
    lines
}

fn activity_lines(running: &[Activity], screen: &Screen) -> Vec<String> {
    if running.is_empty() {
        return vec![format!("  {}", screen.dim("nothing"))];
    }
    let mut lines = Vec::new();
    for activity in running {
        let kind = match activity.kind {
            ActivityKind::Backup => "backup",
            ActivityKind::Restore => "restore",
            ActivityKind::Drill => "drill",
        };
        let elapsed = activity.elapsed_seconds.map(duration).unwrap_or_default();
        let of = activity.expected_seconds.map(|e| format!(" of about {}", duration(e))).unwrap_or_default();
        let text = format!("{kind:<7}  {}  {}  {elapsed}{of}", activity.name, screen.warn(&activity.phase));
        let mut wrapped = screen.wrap(&text, 2);
        if let Some(bar) = activity.progress.map(|p| progress_bar(p, 20)) {
            match wrapped.last_mut() {
                Some(last) if console::measure_text_width(last) + bar.len() + 2 <= screen.width => {
                    last.push_str(&format!("  {bar}"))
                }
                _ => wrapped.push(format!("    {bar}")),
            }
        }
        lines.extend(wrapped);
        if let Some(detail) = &activity.detail {
            lines.extend(screen.wrap(detail, 4));
        }
    }
    lines
}

/// `[#######-------------]  35%`.
pub fn progress_bar(fraction: f64, width: usize) -> String {
    let fraction = fraction.clamp(0.0, 1.0);
    let filled = (fraction * width as f64).round() as usize;
    format!("[{}{}] {:>3.0}%", "#".repeat(filled), "-".repeat(width - filled), fraction * 100.0)
}

fn problem_lines(problems: &[Problem], screen: &Screen) -> Vec<String> {
    if problems.is_empty() {
        return vec![format!("{} {}", screen.heading("Problems"), screen.good("none"))];
    }
    let mut lines = vec![screen.heading(&format!("Problems ({})", problems.len()))];
    for problem in problems {
        lines.push(format!("  {} {}: {}", screen.bad("✗"), problem.object, screen.bad(&problem.reason)));
        lines.extend(screen.wrap(&problem.message, 4));
        if let Some(what) = &problem.what_to_do {
            let mut wrapped = screen.wrap(&format!("What to do: {what}"), 4);
            if let Some(first) = wrapped.first_mut() {
                *first = first.replacen("What to do:", &screen.heading("What to do:"), 1);
            }
            lines.extend(wrapped);
        }
        if let Some(link) = &problem.runbook {
            lines.push(format!("    {}", screen.dim(link)));
        }
    }
    lines
}

fn tone_of_phase(phase: &str) -> Tone {
    match phase {
        "Succeeded" => Tone::Good,
        "Failed" => Tone::Bad,
        _ => Tone::Warn,
    }
}

fn paint(screen: &Screen, text: &str, tone: Tone) -> String {
    match tone {
        Tone::Good => screen.good(text),
        Tone::Bad => screen.bad(text),
        Tone::Warn => screen.warn(text),
        Tone::Dim => screen.dim(text),
        Tone::Plain => text.to_string(),
    }
}

fn day(at: Timestamp) -> String {
    at.strftime("%Y-%m-%d").to_string()
}

/// `status` without an app: one line per app.
pub fn app_lines(lines: &[AppLine], all_namespaces: bool, now: Timestamp, screen: &Screen) -> String {
    if lines.is_empty() {
        return "No VisitorsApp found.\n".to_string();
    }
    let mut columns = vec![
        ("NAME", 0),
        ("STATE", 0),
        ("MYSQL", 4),
        ("LAST BACKUP", 1),
        ("VERIFIED", 2),
        ("RECOVERABLE TO", 3),
        ("RUNNING", 5),
        ("PROBLEMS", 0),
    ];
    if all_namespaces {
        columns.insert(0, ("NAMESPACE", 0));
    }
    let mut table = Table::new(0, &columns);
    for line in lines {
        let mut row = vec![
            cell(line.name.clone()),
            toned(line.state.clone(), if line.ready { Tone::Good } else { Tone::Bad }),
            cell(line.mysql.clone()),
            match &line.last_backup {
                Some(run) => toned(
                    format!("{} {}", run.phase, run.completed.or(run.created).map(|t| age(t, now)).unwrap_or_default()),
                    tone_of_phase(&run.phase),
                ),
                None => toned("none", Tone::Warn),
            },
            match line.last_verified.as_ref().and_then(|v| v.verified) {
                Some(at) => toned(age(at, now), Tone::Good),
                None => toned("never", Tone::Warn),
            },
            cell(line.newest_recoverable.map(time).unwrap_or_else(|| "-".into())),
            cell(if line.running == 0 { "-".to_string() } else { line.running.to_string() }),
            if line.problems == 0 { toned("0", Tone::Good) } else { toned(line.problems.to_string(), Tone::Bad) },
        ];
        if all_namespaces {
            row.insert(0, cell(line.namespace.clone()));
        }
        table.row(row);
    }
    table.render(screen).join("\n") + "\n"
}

/// `runs`: one line per backup run.
pub fn runs(runs: &[Run], now: Timestamp, screen: &Screen) -> String {
    if runs.is_empty() {
        return "No backup run of this app exists.\n".to_string();
    }
    let mut table = Table::new(
        0,
        &[
            ("NAME", 0),
            ("SCHEDULE", 3),
            ("RESULT", 0),
            ("METHOD", 8),
            ("AGE", 1),
            ("SIZE", 2),
            ("TOOK", 4),
            ("TABLES", 6),
            ("ROWS", 7),
            ("VERIFIED", 0),
            ("FROM", 5),
        ],
    );
    for run in runs {
        table.row(vec![
            cell(run.name.clone()),
            cell(run.schedule.clone().unwrap_or_else(|| "-".into())),
            toned(run.phase.clone(), tone_of_phase(&run.phase)),
            cell(run.method.to_lowercase()),
            cell(run.completed.or(run.created).map(|t| age(t, now)).unwrap_or_default()),
            cell(run.size_bytes.map(bytes).unwrap_or_default()),
            cell(run.duration_seconds.map(duration).unwrap_or_default()),
            cell(run.tables.map(|t| t.to_string()).unwrap_or_default()),
            cell(run.rows.map(|r| r.to_string()).unwrap_or_default()),
            verification_cell(&run.verification, now),
            cell(run.taken_from.clone().unwrap_or_default()),
        ]);
    }
    let mut lines = table.render(screen);
    for run in runs.iter().filter(|r| r.error.is_some()) {
        lines.push(String::new());
        lines.push(format!("{} {}:", screen.bad("✗"), run.name));
        lines.extend(screen.wrap(run.error.as_deref().unwrap_or_default(), 2));
    }
    lines.join("\n") + "\n"
}
