//! `capstanctl compose`: what a capstan-sidecar composes for a project — tools (and which can
//! change something), skills, and each binding's state with the reasons it is degraded — read
//! from the sidecar (`GET /v1/composition`).

use std::fmt::Write as _;
use std::process::ExitCode;

use serde_json::Value;

use crate::output::{Output, column_width, print_json};
use crate::sidecar_client::{SidecarError, Target, fail, fetch_json, runtime};

/// `capstanctl compose`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    output: Output,
    /// Print the instructions a caller is given (the providers' knowledge with its provenance,
    /// concepts, the skills to load) instead of the tables.
    #[arg(long, conflicts_with_all = ["format", "json"])]
    instructions: bool,
}

/// Runs `compose`: exit 0 with the composition printed, 1 when it could not be read.
pub fn run(args: &Args) -> ExitCode {
    let result = runtime().and_then(|rt| rt.block_on(fetch_composition(&args.target)));
    match result {
        Ok(composition) if args.instructions => {
            let text = composition["instructions"].as_str().unwrap_or_default();
            println!("{}", text.trim_end_matches('\n'));
            ExitCode::SUCCESS
        }
        Ok(composition) if args.output.is_json() => {
            print_json(&composition);
            ExitCode::SUCCESS
        }
        Ok(composition) => {
            print!("{}", render(&composition));
            ExitCode::SUCCESS
        }
        Err(error) => fail(&error.to_string()),
    }
}

async fn fetch_composition(target: &Target) -> Result<Value, SidecarError> {
    fetch_json(target, "/v1/composition").await
}

/// The composition as tables: tools, skills, bindings with their reasons.
pub fn render(composition: &Value) -> String {
    let tools = items(&composition["tools"]);
    let skills = items(&composition["skills"]);
    let bindings = items(&composition["bindings"]);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "project {}: {} tools, {} skills, {} bindings ({} degraded)\n",
        composition["project"].as_str().unwrap_or("?"),
        tools.len(),
        skills.len(),
        bindings.len(),
        bindings.iter().filter(|b| b["degraded"] == true).count()
    );
    write_tool_table(&mut out, tools, items(&composition["capabilities"]));
    if let Some(builtins) = composition["builtins"].as_array()
        && !builtins.is_empty()
    {
        let names: Vec<&str> = builtins.iter().filter_map(Value::as_str).collect();
        let _ = writeln!(out, "built-in: {}", names.join(", "));
    }
    write_skills(&mut out, skills);
    write_bindings(&mut out, bindings);
    out
}

/// The items of `value` if it is an array; nothing otherwise.
fn items(value: &Value) -> &[Value] {
    value.as_array().map_or(&[], Vec::as_slice)
}

/// One table of every tool a caller sees: the composed tools, then the routed capabilities,
/// whose column is as wide as the longest composed tool name.
fn write_tool_table(out: &mut String, tools: &[Value], capabilities: &[Value]) {
    let width = tools
        .iter()
        .filter_map(|t| t["name"].as_str())
        .map(str::len)
        .chain([4])
        .max()
        .unwrap_or(4);
    let _ = writeln!(out, "{:<width$}  MUTATING  BINDING / SERVICE", "TOOL");
    for tool in tools {
        let _ = write!(
            out,
            "{:<width$}  {:<8}  {} / {}",
            tool["name"].as_str().unwrap_or("?"),
            if tool["mutating"] == true {
                "yes"
            } else {
                "no"
            },
            tool["binding"].as_str().unwrap_or("?"),
            tool["serviceName"].as_str().unwrap_or("?"),
        );
        match tool["shortenedFrom"].as_str() {
            Some(full) => {
                let _ = writeln!(out, " (shortened from {full})");
            }
            None => out.push('\n'),
        }
    }
    for capability in capabilities {
        let candidates: Vec<String> = items(&capability["candidates"])
            .iter()
            .map(candidate_name)
            .collect();
        let _ = writeln!(
            out,
            "{:<width$}  {:<8}  routed {}: {}",
            capability["tool"].as_str().unwrap_or("?"),
            if capability["effect"] == "read" {
                "no"
            } else {
                "yes"
            },
            capability["capability"].as_str().unwrap_or("?"),
            candidates.join(", "),
        );
    }
}

/// A routed capability's candidate tool, marked when a call could not reach it.
fn candidate_name(candidate: &Value) -> String {
    let mut name = candidate["tool"].as_str().unwrap_or("?").to_owned();
    if candidate["composed"] != true {
        name.push_str(" (not composed)");
    } else if candidate["status"] == "quarantined" {
        name.push_str(" (quarantined)");
    }
    name
}

/// The skills table, left out when there are none.
fn write_skills(out: &mut String, skills: &[Value]) {
    if skills.is_empty() {
        return;
    }
    let name = |skill: &Value| skill["name"].as_str().unwrap_or("?").to_owned();
    let service = |skill: &Value| skill["serviceName"].as_str().unwrap_or("?").to_owned();
    let name_width = column_width("SKILL", skills.iter().map(name));
    let service_width = column_width("SERVICE", skills.iter().map(service));
    let _ = writeln!(
        out,
        "\n{:<name_width$}  {:<service_width$}  DESCRIPTION",
        "SKILL", "SERVICE"
    );
    for skill in skills {
        let _ = writeln!(
            out,
            "{:<name_width$}  {:<service_width$}  {}",
            name(skill),
            service(skill),
            skill["description"].as_str().unwrap_or(""),
        );
    }
}

/// Each binding's state, a degraded one with its reasons beneath.
fn write_bindings(out: &mut String, bindings: &[Value]) {
    let name = |binding: &Value| binding["binding"].as_str().unwrap_or("?").to_owned();
    let width = column_width("BINDING", bindings.iter().map(name));
    let _ = writeln!(out, "\n{:<width$}  STATE", "BINDING");
    for binding in bindings {
        if binding["degraded"] == true {
            let _ = writeln!(out, "{:<width$}  DEGRADED", name(binding));
            for reason in items(&binding["reasons"]) {
                let _ = writeln!(out, "  - {}", reason.as_str().unwrap_or(""));
            }
        } else {
            let _ = writeln!(out, "{:<width$}  ok", name(binding));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_table_should_show_tools_mutating_and_degraded_reasons() {
        let composition = json!({
            "project": "demo",
            "tools": [
                {"name": "streamco__streams_list", "mutating": false, "binding": "b", "serviceName": "s"},
                {"name": "streamco__restart", "mutating": true, "binding": "b", "serviceName": "s"}
            ],
            "builtins": ["load_skill"],
            "capabilities": [{"capability": "cap.web.search", "tool": "cap__web_search", "effect": "read",
                              "candidates": [{"tool": "a__search", "composed": true, "status": "active"},
                                             {"tool": "b__search", "composed": false, "status": "active"}]}],
            "skills": [{"name": "lag-triage", "serviceName": "s", "description": "d"}],
            "bindings": [
                {"binding": "b", "degraded": false, "reasons": []},
                {"binding": "c", "degraded": true, "reasons": ["endpoint x was not dialed: y"]}
            ]
        });
        let table = render(&composition);
        assert!(table.starts_with("project demo: 2 tools, 1 skills, 2 bindings (1 degraded)\n"));
        assert!(
            table.contains("streamco__restart       yes       b / s\n"),
            "{table}"
        );
        assert!(table.contains("built-in: load_skill\n"));
        assert!(
            table.contains(
                "cap__web_search         no        routed cap.web.search: a__search, b__search (not composed)\n"
            ),
            "{table}"
        );
        assert!(
            table.contains("\nBINDING  STATE\nb        ok\nc        DEGRADED\n  - endpoint x was not dialed: y\n"),
            "{table}"
        );
        assert!(
            table.contains("\nSKILL       SERVICE  DESCRIPTION\nlag-triage  s        d\n"),
            "{table}"
        );
    }
}
