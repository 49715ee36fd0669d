//! `report_capability_gap`: the assistant reports a need no tool here served to the teams of
//! the providers concerned — those whose bindings name a `reportingProject`
//! (docs/tool-search.md "Capability-gap reports"). Which teams: the services the assistant
//! names, or else the services of the tools a search finds nearest the need; only bindings the
//! caller may use. Where a report lands (the reporting project, the sink) is the platform's
//! knowledge: the answer names the services, never the project a report went to.

use std::collections::BTreeSet;
use std::sync::Arc;

use capstan_core::tool_error::{ErrorKind, ToolError};
use k8s_openapi::jiff::Timestamp;
use rmcp::model::{CallToolResult, ContentBlock, Tool, ToolAnnotations};
use serde_json::{Value, json};

use super::search::{MAX_NEED_CHARS, nearest_bindings};
use super::served::Served;
use crate::caller::authorization::Withheld;
use crate::caller::identity::Identity;
use crate::task::gaps::{Filed, GapReport, GapReports};

/// The tool's name (reserved in `capstan_api::patterns::BUILT_IN_TOOLS`).
pub const REPORT_GAP: &str = "report_capability_gap";

/// Services a report may name, and the characters of each and of the search it quotes.
const MAX_SERVICES: usize = 8;
const MAX_SERVICE_CHARS: usize = 253;
/// How many of the nearest tools' bindings a report without services goes to, at most.
const NEAREST: usize = 3;

/// Whether `served` offers the tool: reports go somewhere and a binding names where its
/// provider's land.
pub fn offered(served: &Served, gaps: &GapReports) -> bool {
    gaps.is_on()
        && served
            .snapshot()
            .documents
            .iter()
            .any(|d| d.spec.reporting_project.is_some())
}

/// The tool as `tools/list` shows it; its description says what a report shares.
pub fn report_gap_tool() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {
            "need": {"type": "string", "minLength": 1, "maxLength": MAX_NEED_CHARS,
                     "description": "What the person needed that no tool here does, in a sentence, without personal data or secrets."},
            "services": {"type": "array", "maxItems": MAX_SERVICES,
                         "items": {"type": "string", "minLength": 1, "maxLength": MAX_SERVICE_CHARS},
                         "description": "The services whose tools you considered (the `service` of find_tools answers); leave out to let the nearest tools decide."},
            "search": {"type": "string", "maxLength": MAX_NEED_CHARS,
                       "description": "The find_tools need you searched with, if you did."}
        },
        "required": ["need"],
        "additionalProperties": false
    });
    let mut tool = Tool::new(
        REPORT_GAP,
        "Report that no tool here serves a need, so the providers' teams can close the gap. \
         Use it after find_tools answered \"match\": \"none\" for something the person asked. \
         The report shares with those providers' teams the need as you word it, the services \
         and search you name, and this project's name — never the conversation. Leave out \
         personal data and secrets. One need is reported once a day, and a caller may file only \
         a few reports an hour.",
        Arc::new(schema.as_object().cloned().unwrap_or_default()),
    );
    tool.annotations = Some(
        ToolAnnotations::new()
            .read_only(false)
            .destructive(false)
            .idempotent(true),
    );
    tool
}

/// The arguments of a report.
struct Asked<'a> {
    need: &'a str,
    services: Vec<String>,
    search: Option<&'a str>,
}

/// A report: filed for the teams concerned, or refused naming what is wrong.
pub(super) fn report_gap(
    served: &Served,
    withheld: &Withheld,
    identity: &Identity,
    gaps: &GapReports,
    arguments: &Value,
) -> Result<CallToolResult, ToolError> {
    let asked = arguments_of(arguments)?;
    let bindings = concerned(served, withheld, &asked);
    let project = identity.project.as_str();
    let time = Timestamp::now();
    let documents = &served.snapshot().documents;
    let reports: Vec<GapReport<'_>> = documents
        .iter()
        .filter(|d| bindings.contains(d.binding.as_str()))
        .filter_map(|d| {
            Some(GapReport {
                time,
                project,
                reporting_project: d.spec.reporting_project.as_deref()?,
                service: &d.spec.service_name,
                binding: &d.binding,
                need: asked.need,
                considered: &asked.services,
                search: asked.search,
            })
        })
        .collect();
    let services: BTreeSet<&str> = reports.iter().map(|r| r.service).collect();
    let (reported, note) = if reports.is_empty() {
        (
            false,
            "No provider of the tools here takes reports for this need; nothing was sent."
                .to_owned(),
        )
    } else {
        match gaps.file(identity.caller(), &reports) {
            Filed::Written => (
                true,
                "Reported to the teams of the services named.".to_owned(),
            ),
            Filed::Duplicate => (
                true,
                "This need was reported lately; it is not sent again.".to_owned(),
            ),
            Filed::OverRate => {
                return Err(ToolError::new(
                    ErrorKind::RateLimited,
                    "this caller has filed its capability-gap reports for the hour; try again later",
                ));
            }
        }
    };
    let answer = json!({"reported": reported, "services": services, "note": note});
    let mut result = CallToolResult::success(vec![ContentBlock::text(answer.to_string())]);
    result.structured_content = Some(answer);
    Ok(result)
}

/// The bindings a report concerns: those of the services named, else of the tools nearest the
/// need; only bindings the caller may use, and only those naming a reporting project.
fn concerned(served: &Served, withheld: &Withheld, asked: &Asked<'_>) -> BTreeSet<String> {
    let documents = &served.snapshot().documents;
    let reporting = |binding: &str| {
        withheld.binding(binding)
            && documents
                .iter()
                .any(|d| d.binding == binding && d.spec.reporting_project.is_some())
    };
    let named: BTreeSet<String> = documents
        .iter()
        .filter(|d| {
            asked
                .services
                .iter()
                .any(|s| *s == d.spec.service_name || *s == d.binding)
        })
        .map(|d| d.binding.clone())
        .filter(|b| reporting(b))
        .collect();
    if !asked.services.is_empty() {
        return named;
    }
    nearest_bindings(
        served,
        withheld,
        asked.search.unwrap_or(asked.need),
        NEAREST,
    )
    .into_iter()
    .filter(|b| reporting(b))
    .collect()
}

/// The arguments, or what is wrong with them.
fn arguments_of(arguments: &Value) -> Result<Asked<'_>, ToolError> {
    let invalid =
        |field: &str, message: String| ToolError::new(ErrorKind::InvalidInput, message).at(field);
    if let Some(extra) = arguments.as_object().and_then(|o| {
        o.keys()
            .find(|k| !["need", "services", "search"].contains(&k.as_str()))
    }) {
        return Err(invalid(
            extra,
            format!("{extra}: not an argument of {REPORT_GAP} (need, services, search)"),
        ));
    }
    let text = |field: &str, required: bool| -> Result<Option<&str>, ToolError> {
        match arguments.get(field) {
            None | Some(Value::Null) if !required => Ok(None),
            Some(Value::String(s))
                if !s.trim().is_empty() && s.chars().count() <= MAX_NEED_CHARS =>
            {
                Ok(Some(s))
            }
            _ => Err(invalid(
                field,
                format!("{field}: 1 to {MAX_NEED_CHARS} characters of text"),
            )),
        }
    };
    let need = text("need", true)?.unwrap_or_default();
    let search = text("search", false)?;
    let services = match arguments.get("services") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) if items.len() <= MAX_SERVICES => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item.as_str() {
                Some(s) if !s.is_empty() && s.chars().count() <= MAX_SERVICE_CHARS => {
                    Ok(s.to_owned())
                }
                _ => Err(invalid(
                    &format!("services[{i}]"),
                    format!("services[{i}]: a service name of 1 to {MAX_SERVICE_CHARS} characters"),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(invalid(
                "services",
                format!("services: a list of at most {MAX_SERVICES} service names"),
            ));
        }
    };
    Ok(Asked {
        need,
        services,
        search,
    })
}
