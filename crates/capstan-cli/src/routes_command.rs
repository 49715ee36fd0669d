//! `capstanctl routes`: what a routed capability's call would meet in a project — its
//! candidates, the qualifiers that apply, the exclusions and the provider chosen — read from
//! the sidecar (`GET /v1/routes`) without dispatching anything.

use std::fmt::Write as _;
use std::process::ExitCode;

use serde_json::Value;

use crate::output::{Output, column_width, print_json};
use crate::sidecar_client::{Target, fail, fetch_json, runtime};

/// `capstanctl routes`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// The capability, e.g. `cap.web.search`.
    #[arg(long)]
    capability: String,
    #[command(flatten)]
    output: Output,
}

/// Runs `routes`: exit 0 with the routes shown, 1 when the sidecar could not be asked or
/// refused.
pub fn run(args: &Args) -> ExitCode {
    let path = format!(
        "/v1/routes?{}",
        url::form_urlencoded::Serializer::new(String::new())
            .append_pair("capability", &args.capability)
            .finish()
    );
    match runtime().and_then(|rt| rt.block_on(fetch_json(&args.target, &path))) {
        Ok(routes) if args.output.is_json() => {
            print_json(&routes);
            ExitCode::SUCCESS
        }
        Ok(routes) => {
            print!("{}", render(&routes));
            ExitCode::SUCCESS
        }
        Err(error) => fail(&error.to_string()),
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The routes as tables: candidates, then the decision or why there is none.
pub fn render(routes: &Value) -> String {
    let mut out = String::new();
    write_heading(&mut out, routes);
    if routes["offered"] != true {
        let _ = writeln!(out, "{}", text(&routes["why"]));
        return out;
    }
    write_candidates(&mut out, items(&routes["candidates"]));
    if let Some(why) = routes["refused"].as_str() {
        let _ = writeln!(out, "\nrefused: {why}");
        return out;
    }
    write_decision(&mut out, &routes["decision"]);
    out
}

/// The items of `value` if it is an array; nothing otherwise.
fn items(value: &Value) -> &[Value] {
    value.as_array().map_or(&[], Vec::as_slice)
}

/// One line: the project, the capability, the tool that offers it and the qualifiers applied.
fn write_heading(out: &mut String, routes: &Value) {
    let qualifiers: Vec<String> = items(&routes["qualifiers"]).iter().map(text).collect();
    let _ = writeln!(
        out,
        "project {}: {} ({}), qualifiers: {}",
        text(&routes["project"]),
        text(&routes["capability"]),
        if routes["offered"] == true {
            text(&routes["tool"])
        } else {
            "not offered".into()
        },
        if qualifiers.is_empty() {
            "none".into()
        } else {
            qualifiers.join(", ")
        }
    );
}

/// The candidates table: each provider's binding, tool, status, cost and quality.
fn write_candidates(out: &mut String, candidates: &[Value]) {
    let binding = column_width("BINDING", candidates.iter().map(|c| text(&c["binding"])));
    let tool = column_width("TOOL", candidates.iter().map(|c| text(&c["tool"])));
    let _ = writeln!(
        out,
        "\n{:<binding$}  {:<tool$}  {:<11}  {:<8}  {:>10}  {:>7}",
        "BINDING", "TOOL", "STATUS", "COMPOSED", "COST", "QUALITY"
    );
    for candidate in candidates {
        let _ = writeln!(
            out,
            "{:<binding$}  {:<tool$}  {:<11}  {:<8}  {:>10}  {:>7}",
            text(&candidate["binding"]),
            text(&candidate["tool"]),
            text(&candidate["status"]),
            if candidate["composed"] == true {
                "yes"
            } else {
                "no"
            },
            cost(&candidate["costHint"]),
            text(&candidate["quality"]),
        );
    }
}

/// A cost hint in a word: its base price, `bundled`, or `unpriced`.
fn cost(hint: &Value) -> String {
    match (&hint["baseMicrosUsd"], hint["bundledInBroker"] == true) {
        (Value::Number(n), _) => format!("{n}µ$"),
        (_, true) => "bundled".into(),
        _ => "unpriced".into(),
    }
}

/// Where a call would go and why, what was excluded and why, and the algorithm that decided.
fn write_decision(out: &mut String, decision: &Value) {
    match decision["ranked"].as_array().and_then(|r| r.first()) {
        Some(winner) => {
            let _ = writeln!(
                out,
                "\na call would go to {} ({}): {}, score {:.3}, {} eligible",
                text(&winner["tool"]),
                text(&winner["binding"]),
                text(&decision["routeReason"]),
                winner["score"].as_f64().unwrap_or_default(),
                decision["ranked"].as_array().map_or(0, Vec::len),
            );
        }
        None => {
            let _ = writeln!(out, "\nno eligible provider");
        }
    }
    for exclusion in items(&decision["exclusions"]) {
        let _ = writeln!(
            out,
            "  excluded {} ({}): {}",
            text(&exclusion["tool"]),
            text(&exclusion["binding"]),
            text(&exclusion["reason"]),
        );
    }
    let _ = writeln!(out, "algorithm {}", text(&decision["algorithm"]));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_decision_should_render_its_winner_and_exclusions() {
        let text = render(&json!({
            "project": "acme", "capability": "cap.web.search", "tool": "cap__web_search",
            "offered": true, "qualifiers": ["pin-premium"],
            "candidates": [
                {"binding": "search-cheap", "tool": "cheap__docs_search", "status": "active", "composed": true,
                 "costHint": {"baseMicrosUsd": 1000}, "quality": 6000},
                {"binding": "search-premium", "tool": "premium__docs_search", "status": "active", "composed": true}
            ],
            "decision": {"ranked": [{"binding": "search-premium", "tool": "premium__docs_search", "score": 0.5}],
                         "routeReason": "pinned_by_policy", "algorithm": "capstan-route/1",
                         "exclusions": [{"binding": "search-cheap", "tool": "cheap__docs_search", "reason": "qualifier_pin"}]}
        }));
        assert!(text.contains("qualifiers: pin-premium"), "{text}");
        assert!(
            text.contains(
                "BINDING         TOOL                  STATUS       COMPOSED        COST  QUALITY\nsearch-cheap    cheap__docs_search    active       yes           1000µ$     6000\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("1000µ$") && text.contains("unpriced"),
            "{text}"
        );
        assert!(
            text.contains(
                "a call would go to premium__docs_search (search-premium): pinned_by_policy"
            ),
            "{text}"
        );
        assert!(
            text.contains("excluded cheap__docs_search (search-cheap): qualifier_pin"),
            "{text}"
        );
    }
}
