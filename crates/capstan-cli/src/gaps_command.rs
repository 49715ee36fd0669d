//! `capstanctl gaps FILE`: the capability-gap reports a sidecar wrote (`CAPSTAN_GAP_SINK`,
//! docs/tool-search.md "Capability-gap reports") summarized per reporting project and service:
//! how many reports, over how many projects, when the first and last were filed, and the
//! needs reported most.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{Value, json};

use crate::output::{Output, print_json};

/// `capstanctl gaps`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The file of reports (JSON lines).
    file: PathBuf,
    /// The needs shown per service, most reported first.
    #[arg(long, default_value_t = 3)]
    needs: usize,
    #[command(flatten)]
    output: Output,
}

/// The reports per (reporting project, service).
type Summaries = BTreeMap<(String, String), Summary>;

/// One reporting project and service's reports.
#[derive(Default)]
struct Summary {
    reports: usize,
    projects: BTreeMap<String, usize>,
    first: String,
    last: String,
    needs: BTreeMap<String, usize>,
}

/// Runs `gaps`: exit 0 with the summary shown, 2 when the file cannot be read. A line that is
/// not a report is counted and named, never fatal.
pub fn run(args: &Args) -> ExitCode {
    let text = match std::fs::read_to_string(&args.file) {
        Ok(text) => text,
        Err(error) => {
            eprintln!("capstanctl gaps: {}: {error}", args.file.display());
            return ExitCode::from(2);
        }
    };
    let (summaries, skipped) = summarize(&text);
    if args.output.is_json() {
        print_json(&as_json(&summaries, args.needs));
    } else {
        print!("{}", render(&summaries, args.needs));
    }
    for (line, why) in &skipped {
        eprintln!(
            "{}:{line}: not a capability-gap report ({why}); skipped",
            args.file.display()
        );
    }
    ExitCode::SUCCESS
}

/// The reports of `text` per (reporting project, service), and the lines that are not reports.
fn summarize(text: &str) -> (Summaries, Vec<(usize, String)>) {
    let mut summaries = Summaries::new();
    let mut skipped = Vec::new();
    for (number, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let report: Value = match serde_json::from_str(line) {
            Ok(report) => report,
            Err(error) => {
                skipped.push((number + 1, error.to_string()));
                continue;
            }
        };
        let field = |name: &str| report[name].as_str().map(str::to_owned);
        let (Some(reporting), Some(service), Some(need)) =
            (field("reportingProject"), field("service"), field("need"))
        else {
            skipped.push((number + 1, "no reportingProject, service or need".into()));
            continue;
        };
        let summary = summaries.entry((reporting, service)).or_default();
        summary.reports += 1;
        *summary
            .projects
            .entry(field("project").unwrap_or_default())
            .or_default() += 1;
        *summary.needs.entry(need).or_default() += 1;
        let time = field("time").unwrap_or_default();
        if summary.first.is_empty() || time < summary.first {
            summary.first = time.clone();
        }
        if time > summary.last {
            summary.last = time;
        }
    }
    (summaries, skipped)
}

/// The needs of `summary`, most reported first (then alphabetically), at most `count`.
fn top_needs(summary: &Summary, count: usize) -> Vec<(&str, usize)> {
    let mut needs: Vec<(&str, usize)> = summary
        .needs
        .iter()
        .map(|(n, c)| (n.as_str(), *c))
        .collect();
    needs.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    needs.truncate(count);
    needs
}

/// The summary as an aligned table, then each service's top needs.
fn render(summaries: &Summaries, needs: usize) -> String {
    let mut out = String::new();
    if summaries.is_empty() {
        out.push_str("no capability-gap reports\n");
        return out;
    }
    let _ = writeln!(
        out,
        "{:<28} {:<36} {:>7} {:>8} {:<24} {:<24}",
        "REPORTING PROJECT", "SERVICE", "REPORTS", "PROJECTS", "FIRST", "LAST"
    );
    for ((reporting, service), summary) in summaries {
        let _ = writeln!(
            out,
            "{reporting:<28} {service:<36} {:>7} {:>8} {:<24} {:<24}",
            summary.reports,
            summary.projects.len(),
            summary.first,
            summary.last
        );
    }
    for ((_, service), summary) in summaries {
        let _ = writeln!(out, "\n{service}: needs reported most");
        for (need, count) in top_needs(summary, needs) {
            let _ = writeln!(out, "  {count:>4}  {need}");
        }
    }
    out
}

fn as_json(summaries: &Summaries, needs: usize) -> Value {
    let rows: Vec<Value> = summaries
        .iter()
        .map(|((reporting, service), s)| {
            let top: Vec<Value> = top_needs(s, needs)
                .into_iter()
                .map(|(need, count)| json!({"need": need, "reports": count}))
                .collect();
            json!({"reportingProject": reporting, "service": service, "reports": s.reports,
                   "projects": s.projects.len(), "first": s.first, "last": s.last, "needs": top})
        })
        .collect();
    Value::Array(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORTS: &str = r#"{"time":"2026-12-07T10:00:00Z","project":"a","reportingProject":"sc-platform","service":"streaming","binding":"sc","need":"Export streams as CSV"}
{"time":"2026-12-07T09:00:00Z","project":"b","reportingProject":"sc-platform","service":"streaming","binding":"sc","need":"Export streams as CSV"}
not json
{"time":"2026-12-07T11:00:00Z","project":"a","reportingProject":"sc-platform","service":"streaming","binding":"sc","need":"Pause a stream"}
{"time":"2026-12-07T08:00:00Z","project":"a","reportingProject":"maps-team","service":"maps","binding":"m","need":"Plan a route by bike"}
{"time":"2026-12-07T08:00:00Z","project":"a","service":"maps"}
"#;

    #[test]
    fn reports_should_be_counted_per_reporting_project_and_service() {
        let (summaries, skipped) = summarize(REPORTS);
        assert_eq!(skipped.iter().map(|(l, _)| *l).collect::<Vec<_>>(), [3, 6]);
        let streaming = &summaries[&("sc-platform".to_owned(), "streaming".to_owned())];
        assert_eq!((streaming.reports, streaming.projects.len()), (3, 2));
        assert_eq!(
            (streaming.first.as_str(), streaming.last.as_str()),
            ("2026-12-07T09:00:00Z", "2026-12-07T11:00:00Z")
        );
        assert_eq!(top_needs(streaming, 1), [("Export streams as CSV", 2)]);
        let table = render(&summaries, 3);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("REPORTING PROJECT"), "{table}");
        // Rows in order of reporting project, then service.
        assert!(
            lines[1].starts_with("maps-team") && lines[2].starts_with("sc-platform"),
            "{table}"
        );
        let json = as_json(&summaries, 3);
        assert_eq!(json[1]["reports"], 3);
        assert_eq!(
            json[1]["needs"][0],
            json!({"need": "Export streams as CSV", "reports": 2})
        );
    }
}
