//! The composition as data: tools, the instructions, skills and a per-binding outcome — what
//! `GET /v1/composition` shows and the controller's probe reads.

use std::sync::Arc;

use capstan_api::CallLimits;
use rmcp::model::{JsonObject, Prompt, Resource, ResourceTemplate, ToolAnnotations};
use serde::Serialize;

use crate::capabilities::CapabilitySummary;
use crate::pins::{ListedDefinition, PinMismatch};

/// A tool in the composed set.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ComposedTool {
    /// The name the assistant sees: `<server>__<tool>`, sanitized, shortened to 64 characters
    /// when longer (`names.rs`).
    pub name: String,
    /// The full `<server>__<tool>` when `name` is its shortened form.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shortened_from: Option<String>,
    /// The binding that contributed it.
    pub binding: String,
    /// The binding's `serviceName` (the metering dimension).
    pub service_name: String,
    /// The `mcpServers[].name` entry.
    pub server: String,
    /// The upstream's own name for the tool.
    pub upstream_tool: String,
    /// The upstream's description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The upstream's input schema, as it listed it: shared with the listing a composition
    /// keeps for the next one and with the tool the session shows, never copied.
    pub input_schema: Arc<JsonObject>,
    /// MCP annotations (a mutating tool always carries `readOnlyHint: false`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolAnnotations>,
    /// Whether the document flags the tool as mutating.
    pub mutating: bool,
    /// The call limits its binding declares for its server (`mcpServers[].limits`); the
    /// sidecar puts the platform's defaults and ceilings under them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<CallLimits>,
}

/// A prompt in the composed set.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ComposedPrompt {
    /// The name the assistant sees: `<server>__<prompt>`, or the server's own
    /// (`promptNames: Unprefixed`).
    pub name: String,
    /// The binding that contributed it.
    pub binding: String,
    /// The `mcpServers[].name` entry.
    pub server: String,
    /// The upstream's own name for the prompt.
    pub upstream_name: String,
    /// The prompt as the assistant sees it (the upstream's, under the composed name).
    #[serde(skip)]
    pub prompt: Prompt,
}

/// A resource, or a resource template, in the composed set.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ComposedResource {
    /// The URI (or URI template) the assistant sees: `capstan://<binding>/<server>/<the
    /// server's>`, or the server's own (`resourceUris: AsListed`).
    pub uri: String,
    /// The binding that contributed it.
    pub binding: String,
    /// The `mcpServers[].name` entry.
    pub server: String,
    /// The upstream's own URI (or URI template).
    pub upstream_uri: String,
    /// Whether it is a template (`resources/templates/list`).
    pub template: bool,
    /// The resource as the assistant sees it (the upstream's, under the composed URI).
    #[serde(skip)]
    pub resource: Option<Resource>,
    /// The template as the assistant sees it.
    #[serde(skip)]
    pub resource_template: Option<ResourceTemplate>,
}

/// A skill offered in the instructions.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SkillSummary {
    /// The skill's name (what `load_skill` takes).
    pub name: String,
    /// Its one-line description.
    pub description: String,
    /// The binding that contributed it.
    pub binding: String,
    /// The binding's `serviceName`.
    pub service_name: String,
    /// Where the body is fetched from.
    pub source: String,
    /// The binding's `configurationVersion`.
    pub configuration_version: String,
    /// The digest its body must have to be served (`skills[].pin`), if pinned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pin: Option<String>,
}

/// [`Collision::won_by`] for a name the sidecar's own tools hold (`load_skill`, the base tools,
/// `cap__*`).
pub const BUILT_IN: &str = "(built-in)";

/// A name this binding declared that another binding won.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Collision {
    /// The contested name.
    pub name: String,
    /// The binding that holds it.
    pub won_by: String,
}

/// What composition made of one binding.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BindingOutcome {
    /// The binding.
    pub binding: String,
    /// Its `serviceName`.
    pub service_name: String,
    /// Tools exposed, by composed name.
    pub exposed: Vec<String>,
    /// Tools whose capability mapping is quarantined: served to the router only (which
    /// excludes them), never listed or called by name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub quarantined: Vec<String>,
    /// Allowed tools the server does not offer, as `<server>/<tool>`.
    pub missing: Vec<String>,
    /// Pinned tools whose live definition differs from the pin: withheld.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pin_mismatches: Vec<PinMismatch>,
    /// The live definition digest of every allowed tool the servers list, with its pin: what
    /// `capstanctl pins` prints.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub definitions: Vec<ListedDefinition>,
    /// Tool names won by an earlier binding.
    pub collisions: Vec<Collision>,
    /// Prompts exposed, by composed name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub prompts: Vec<String>,
    /// Resources and resource templates exposed, by composed URI.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    /// Allowed prompts, resources and templates the server does not offer, as
    /// `<server>/<name or URI>`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_offerings: Vec<String>,
    /// Prompt names and resource URIs won by an earlier binding.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub offering_collisions: Vec<Collision>,
    /// Skill names won by an earlier binding.
    pub skill_collisions: Vec<Collision>,
    /// Allowed tools not exposed because their input schema takes a project: the project is
    /// never an argument (it comes from the request, never from what the model writes).
    pub project_arguments: Vec<String>,
    /// Endpoints the guard refused (the refusal text says "was not dialed").
    pub refused: Vec<String>,
    /// MCP servers not dialed because only a caller could authenticate to them (a token
    /// exchange, composed for no caller: the controller's probe), each with why. Not a
    /// degradation: they are composed for each caller.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub needs_caller: Vec<String>,
    /// Connect, initialize and `tools/list` failures, with their details.
    pub upstream_errors: Vec<String>,
    /// The same failures without details that vary between attempts (ports, durations): what
    /// a status may show and compare.
    pub upstream_failures: Vec<UpstreamFailure>,
    /// Knowledge sources declared.
    pub knowledge_total: usize,
    /// Knowledge sources that delivered nothing, with why.
    pub knowledge_errors: Vec<String>,
    /// Knowledge sources cut at a byte cap (delivered, not lost).
    pub knowledge_truncated: usize,
}

impl BindingOutcome {
    /// Whether the binding could not deliver everything it declared: refused or failing
    /// endpoints, missing tools, tools withheld by their pins, lost collisions, or all of its
    /// knowledge lost. One knowledge source failing among others, or truncation, is not
    /// degradation.
    pub fn degraded(&self) -> bool {
        !self.reasons().is_empty()
    }

    /// Why the binding is degraded in sentences that stay the same while the facts do (no
    /// ports, durations or OS error text): what the controller's `Composed` condition shows,
    /// so an unchanged problem is never rewritten. Empty when the binding is not degraded.
    pub fn stable_reasons(&self) -> Vec<String> {
        self.sentences(false)
    }

    /// Why the binding is degraded, one sentence per fact with its details (empty when it is
    /// not): what logs and `GET /v1/composition` show.
    pub fn reasons(&self) -> Vec<String> {
        self.sentences(true)
    }

    fn sentences(&self, detailed: bool) -> Vec<String> {
        let mut reasons: Vec<String> = self.refused.clone();
        if detailed {
            reasons.extend(self.upstream_errors.iter().cloned());
        } else {
            reasons.extend(self.upstream_failures.iter().map(ToString::to_string));
        }
        reasons.extend(
            self.missing
                .iter()
                .map(|m| format!("declared tool {m} is not offered by the server")),
        );
        reasons.extend(
            self.missing_offerings
                .iter()
                .map(|m| format!("declared prompt or resource {m} is not offered by the server")),
        );
        reasons.extend(self.pin_mismatches.iter().map(ToString::to_string));
        reasons.extend(self.project_arguments.iter().map(|t| {
            format!(
                "tool {t} takes a project argument and is not exposed: the platform's project is \
                 never an argument; if `project` is the provider's own concept, say so with \
                 providerProjectArgument on its server"
            )
        }));
        reasons.extend(self.collisions.iter().map(|c| {
            if c.won_by == BUILT_IN {
                format!(
                    "tool name {} is a built-in tool of the sidecar and is not exposed; keep \
                     the server's prefix (remove toolNames)",
                    c.name
                )
            } else {
                format!(
                    "tool name {} is already taken by binding {}",
                    c.name, c.won_by
                )
            }
        }));
        reasons.extend(self.offering_collisions.iter().map(|c| {
            format!(
                "prompt or resource {} is already taken by binding {}",
                c.name, c.won_by
            )
        }));
        if self.knowledge_total > 0 && self.knowledge_errors.len() == self.knowledge_total {
            let mut lost = format!("all {} knowledge sources failed", self.knowledge_total);
            if detailed {
                lost.push_str(": ");
                lost.push_str(&self.knowledge_errors.join("; "));
            }
            reasons.push(lost);
        }
        reasons
    }
}

/// The composition as data: what `GET /v1/composition` shows and the controller's probe reads.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Composition {
    /// The tools, in document order, then server order, then tool name.
    pub tools: Vec<ComposedTool>,
    /// The composed names of mutating tools: provider tools flagged mutating and destructive
    /// routed capabilities (the sidecar adds its platform tools' to the view it serves).
    pub mutating: Vec<String>,
    /// The prompts, in document order, then server order, then the selector's order.
    pub prompts: Vec<ComposedPrompt>,
    /// The resources and resource templates, in the same order.
    pub resources: Vec<ComposedResource>,
    /// The prompt additions: knowledge, concepts and the skills list.
    pub instructions: String,
    /// The skills offered.
    pub skills: Vec<SkillSummary>,
    /// One outcome per binding, in document order.
    pub bindings: Vec<BindingOutcome>,
    /// The routed capabilities offered (`cap__<job>` tools), with their candidates.
    pub capabilities: Vec<CapabilitySummary>,
}

/// An MCP upstream that contributed no tools, without the details that vary between attempts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamFailure {
    /// The `mcpServers[].name` entry.
    pub server: String,
    /// Its endpoint.
    pub endpoint: String,
    /// Which step failed.
    pub stage: UpstreamStage,
    /// What to fix, where the failure says (a credential that could not be had); worded to
    /// stay the same while the cause does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

pub use capstan_upstream::mcp::UpstreamStage;

impl std::fmt::Display for UpstreamFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.stage {
            UpstreamStage::Connect => "could not be connected and initialized",
            UpstreamStage::List => "did not list its tools",
            UpstreamStage::ListPrompts => "did not list its prompts",
            UpstreamStage::ListResources => "did not list its resources",
            UpstreamStage::Credential => "was not dialed: its credential could not be had",
        };
        write!(f, "MCP server {} at {} {what}", self.server, self.endpoint)?;
        match &self.detail {
            Some(detail) => write!(f, " ({detail})"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::BindingOutcome;
    use crate::pins::{PinMismatch, Pinned};

    /// The sentence the binding's `Composed` condition carries for a withheld tool, prompt or
    /// resource: the kind, where it is, both digests and what to do, written out by hand.
    #[test]
    fn a_withheld_definition_should_be_explained_by_its_kind_and_both_digests() {
        let pinned = format!("sha256:{}", "a".repeat(64));
        let live = format!("sha256:{}", "b".repeat(64));
        let mismatch = |kind, name: &str| PinMismatch {
            kind,
            server: "docs".into(),
            name: name.into(),
            pinned: pinned.clone(),
            live: live.clone(),
            listed: Value::Null,
        };
        let outcome = BindingOutcome {
            binding: "team-a/docs".into(),
            pin_mismatches: vec![
                mismatch(Pinned::Tool, "search"),
                mismatch(Pinned::Prompt, "summarise"),
                mismatch(Pinned::Resource, "docs://guide/{page}"),
            ],
            ..Default::default()
        };
        let then = "withheld until its new definition is reviewed and re-pinned (capstanctl pins)";
        assert_eq!(
            outcome.stable_reasons(),
            [
                format!(
                    "tool docs/search does not match its pin (pinned {pinned}, listed {live}): {then}"
                ),
                format!(
                    "prompt docs/summarise does not match its pin (pinned {pinned}, listed {live}): {then}"
                ),
                format!(
                    "resource docs/docs://guide/{{page}} does not match its pin (pinned {pinned}, listed {live}): {then}"
                ),
            ]
        );
        assert!(
            outcome.degraded(),
            "a withheld definition degrades the binding"
        );
    }
}
