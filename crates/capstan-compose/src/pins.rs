//! Pinned definitions: the digest of a tool's, prompt's or resource's definition as its server
//! lists it, which a binding's `toolSelector.pins`, `promptSelector.pins` or
//! `resourceSelector.pins` compares against (docs/pins.md).
//!
//! The digest covers what the assistant is shown of a listing — a tool's name, description,
//! input schema and annotations; a prompt's name, description and arguments; a resource's or
//! template's URI, name, description and MIME type — and nothing else: a server changing any
//! of them cannot reach an assistant until someone re-pins, while a change the assistant never
//! sees (an output schema, icons, `_meta`) does not withhold it. What a call, a `prompts/get`
//! or a read returns is an answer, not a definition: not covered.

use std::fmt::Write as _;

use canon_json::CanonJsonSerialize as _;
use rmcp::model::{
    JsonObject, Prompt, PromptArgument, Resource, ResourceTemplate, Tool, ToolAnnotations,
};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

/// The members of a listed tool the digest covers, by their MCP names.
pub const PINNED_MEMBERS: [&str; 4] = ["name", "description", "inputSchema", "annotations"];

/// The digest of `tool`'s definition as `toolSelector.pins` holds it: `sha256:` and the
/// SHA-256, in lower-case hex, of the RFC 8785 canonical JSON of an object with the members
/// [`PINNED_MEMBERS`] of the tool as listed (absent members left out; annotations as MCP
/// defines them: `title`, `readOnlyHint`, `destructiveHint`, `idempotentHint`,
/// `openWorldHint`). Canonical JSON makes key order and whitespace irrelevant.
pub fn definition_digest(tool: &Tool) -> String {
    digest_of(&Covered::of(tool))
}

/// The part of `tool`'s definition the digest covers, as JSON: what a reviewer reads when a
/// pin no longer matches.
pub fn covered_definition(tool: &Tool) -> Value {
    serde_json::to_value(Covered::of(tool)).unwrap_or(Value::Null)
}

/// The digest of a listed prompt, resource or template as `promptSelector.pins` and
/// `resourceSelector.pins` hold it (as [`definition_digest`], over `{name, description,
/// arguments}` of a prompt, `{uri, name, description, mimeType}` of a resource,
/// `{uriTemplate, name, description, mimeType}` of a template).
pub fn offering_digest(listed: Offering<'_>) -> String {
    digest_of(&CoveredOffering::of(listed))
}

/// The part of a listed prompt, resource or template the digest covers, as JSON: what a
/// reviewer reads when a pin no longer matches.
pub fn covered_offering(listed: Offering<'_>) -> Value {
    serde_json::to_value(CoveredOffering::of(listed)).unwrap_or(Value::Null)
}

/// A listed prompt, resource or template, for [`offering_digest`].
#[derive(Clone, Copy)]
pub enum Offering<'a> {
    /// A prompt as `prompts/list` gave it.
    Prompt(&'a Prompt),
    /// A resource as `resources/list` gave it.
    Resource(&'a Resource),
    /// A template as `resources/templates/list` gave it.
    Template(&'a ResourceTemplate),
}

/// The digest of a skill body as `skills[].pin` holds it: `sha256:` and the lower-case hex
/// SHA-256 of the body's text as fetched (docs/pins.md "Skills"). For a UTF-8 body within the
/// skill cap that is the SHA-256 of the bytes the provider serves, which it can compute itself
/// (`sha256sum`); bytes that are not UTF-8 are hashed as served, replaced by U+FFFD, and a
/// body cut at the cap as cut.
pub fn body_digest(text: &str) -> String {
    hex_digest(text.as_bytes())
}

/// `sha256:` and the lower-case hex SHA-256 of `covered`'s RFC 8785 form.
fn digest_of<T: Serialize>(covered: &T) -> String {
    // Canonicalizing fails only on numbers JSON cannot carry, which a parsed listing never
    // holds; an empty input would still yield a digest no pin matches.
    let canonical = covered.to_canon_json_vec().unwrap_or_default();
    hex_digest(&canonical)
}

/// `sha256:` and the lower-case hex SHA-256 of `bytes`.
fn hex_digest(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut text = String::with_capacity(7 + 64);
    text.push_str("sha256:");
    for byte in digest {
        let _ = write!(text, "{byte:02x}");
    }
    text
}

/// The members of a listed tool the digest covers, borrowed (no schema is copied to hash it).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Covered<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    input_schema: &'a JsonObject,
    #[serde(skip_serializing_if = "Option::is_none")]
    annotations: Option<&'a ToolAnnotations>,
}

impl<'a> Covered<'a> {
    fn of(tool: &'a Tool) -> Self {
        Self {
            name: tool.name.as_ref(),
            description: tool.description.as_deref(),
            input_schema: tool.input_schema.as_ref(),
            annotations: tool.annotations.as_ref(),
        }
    }
}

/// The members of a listed prompt, resource or template the digest covers, borrowed.
#[derive(Serialize)]
#[serde(untagged)]
enum CoveredOffering<'a> {
    Prompt(CoveredPrompt<'a>),
    Resource(CoveredResource<'a>),
}

impl<'a> CoveredOffering<'a> {
    fn of(listed: Offering<'a>) -> Self {
        match listed {
            Offering::Prompt(prompt) => Self::Prompt(CoveredPrompt {
                name: &prompt.name,
                description: prompt.description.as_deref(),
                arguments: prompt.arguments.as_ref(),
            }),
            Offering::Resource(resource) => Self::Resource(CoveredResource {
                uri: Some(&resource.uri),
                uri_template: None,
                name: &resource.name,
                description: resource.description.as_deref(),
                mime_type: resource.mime_type.as_deref(),
            }),
            Offering::Template(template) => Self::Resource(CoveredResource {
                uri: None,
                uri_template: Some(&template.uri_template),
                name: &template.name,
                description: template.description.as_deref(),
                mime_type: template.mime_type.as_deref(),
            }),
        }
    }
}

#[derive(Serialize)]
struct CoveredPrompt<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    arguments: Option<&'a Vec<PromptArgument>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CoveredResource<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    uri: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    uri_template: Option<&'a str>,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mime_type: Option<&'a str>,
}

/// What a pin is of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Pinned {
    /// `toolSelector.pins`.
    #[default]
    Tool,
    /// `promptSelector.pins`.
    Prompt,
    /// `resourceSelector.pins` (a resource or a template).
    Resource,
    /// `skills[].pin`: a skill's body.
    Skill,
}

impl Pinned {
    /// The word for it in messages.
    pub fn word(self) -> &'static str {
        match self {
            Self::Tool => "tool",
            Self::Prompt => "prompt",
            Self::Resource => "resource",
            Self::Skill => "skill",
        }
    }
}

/// A pinned tool, prompt or resource whose live definition differs from its pin: withheld
/// from the composition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PinMismatch {
    /// A tool, a prompt, a resource (or template), or a skill.
    pub kind: Pinned,
    /// The `mcpServers[].name` entry (empty for a skill, which no server lists).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub server: String,
    /// The upstream's own name for it: a tool's or prompt's name, a resource's URI or a
    /// template's URI template (the key of the selector's `pins`), or the skill's name.
    pub name: String,
    /// The digest the binding pins.
    pub pinned: String,
    /// The digest of the definition the server lists now (of a skill: of the body fetched).
    pub live: String,
    /// What the server lists now, as the digest covers it (of a skill: the body's text): what
    /// a reviewer reads before re-pinning.
    pub listed: Value,
}

impl std::fmt::Display for PinMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.kind == Pinned::Skill {
            return write!(
                f,
                "skill {} does not match its pin (pinned {}, fetched {}): withheld until its \
                 new body is reviewed and re-pinned (capstanctl pins)",
                self.name, self.pinned, self.live
            );
        }
        write!(
            f,
            "{} {}/{} does not match its pin (pinned {}, listed {}): withheld until its new \
             definition is reviewed and re-pinned (capstanctl pins)",
            self.kind.word(),
            self.server,
            self.name,
            self.pinned,
            self.live
        )
    }
}

/// The live digest of one allowed tool, prompt or resource the server lists, and its pin if it
/// has one: what `capstanctl pins` prints to paste into a binding after review.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedDefinition {
    /// A tool, a prompt, a resource (or template), or a skill.
    pub kind: Pinned,
    /// The `mcpServers[].name` entry (empty for a skill).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub server: String,
    /// The upstream's own name for it (the key of the selector's `pins`), or the skill's name.
    pub name: String,
    /// The digest of the definition the server lists now (of a skill: of the body fetched).
    pub digest: String,
    /// The digest the binding pins, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pinned: Option<String>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn tool(value: Value) -> Tool {
        serde_json::from_value(value).unwrap()
    }

    /// SHA-256 of `canonical`, written by hand as the digest's form: the oracle.
    fn expected(canonical: &str) -> String {
        let digest = Sha256::digest(canonical.as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("sha256:{hex}")
    }

    #[test]
    fn the_digest_should_cover_the_canonical_form_of_the_four_members() {
        let listed = tool(json!({
            "name": "streams_get",
            "title": "Get a stream",
            "description": "Get one stream by name.",
            "inputSchema": {"type": "object", "required": ["name"],
                            "properties": {"name": {"type": "string"}}},
            "outputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": true}
        }));
        // Members sorted, no whitespace, title and outputSchema left out.
        let canonical = r#"{"annotations":{"readOnlyHint":true},"description":"Get one stream by name.","inputSchema":{"properties":{"name":{"type":"string"}},"required":["name"],"type":"object"},"name":"streams_get"}"#;
        assert_eq!(definition_digest(&listed), expected(canonical));
    }

    #[test]
    fn key_order_should_not_matter_and_a_description_change_should() {
        let a = tool(json!({"name": "t", "description": "d",
                            "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}}));
        let b = tool(
            json!({"inputSchema": {"properties": {"x": {"type": "string"}}, "type": "object"},
                            "description": "d", "name": "t"}),
        );
        assert_eq!(definition_digest(&a), definition_digest(&b));
        let mut changed = a.clone();
        changed.description = Some("d, and also mail the data elsewhere".into());
        assert_ne!(definition_digest(&a), definition_digest(&changed));
        let mut annotated = a.clone();
        annotated.annotations = Some(ToolAnnotations::new().read_only(false));
        assert_ne!(definition_digest(&a), definition_digest(&annotated));
        let mut schema = (*a.input_schema).clone();
        schema.insert("required".into(), json!(["x"]));
        let mut stricter = a.clone();
        stricter.input_schema = Arc::new(schema);
        assert_ne!(definition_digest(&a), definition_digest(&stricter));
    }

    #[test]
    fn the_reviewed_definition_should_be_what_the_digest_covers() {
        let listed = tool(json!({"name": "t", "title": "T", "description": "d",
                                 "inputSchema": {"type": "object"}}));
        let covered = covered_definition(&listed);
        assert_eq!(
            covered,
            json!({"name": "t", "description": "d", "inputSchema": {"type": "object"}})
        );
        assert_eq!(
            definition_digest(&listed),
            expected(r#"{"description":"d","inputSchema":{"type":"object"},"name":"t"}"#)
        );
    }

    #[test]
    fn a_prompts_and_a_templates_digest_should_cover_what_the_assistant_is_shown() {
        let prompt: Prompt = serde_json::from_value(json!({
            "name": "triage", "title": "Triage", "description": "Triage a stream.",
            "arguments": [{"name": "stream", "required": true}], "icons": []
        }))
        .unwrap();
        let (digest, covered) = (
            offering_digest(Offering::Prompt(&prompt)),
            covered_offering(Offering::Prompt(&prompt)),
        );
        assert_eq!(
            digest,
            expected(
                r#"{"arguments":[{"name":"stream","required":true}],"description":"Triage a stream.","name":"triage"}"#
            )
        );
        assert_eq!(covered["name"], "triage");
        let template: ResourceTemplate = serde_json::from_value(json!({
            "uriTemplate": "s://streams/{name}", "name": "stream", "title": "A stream",
            "mimeType": "text/plain"
        }))
        .unwrap();
        let digest = offering_digest(Offering::Template(&template));
        assert_eq!(
            digest,
            expected(
                r#"{"mimeType":"text/plain","name":"stream","uriTemplate":"s://streams/{name}"}"#
            )
        );
    }

    /// FIPS 180-2's example, "abc": a digest `sha256sum` prints for the same bytes.
    #[test]
    fn a_skill_bodys_digest_should_be_the_sha256_of_its_bytes() {
        assert_eq!(
            body_digest("abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_withheld_skill_should_be_explained_by_its_name_and_both_digests() {
        let mismatch = PinMismatch {
            kind: Pinned::Skill,
            server: String::new(),
            name: "lag-triage".into(),
            pinned: "sha256:aa".into(),
            live: "sha256:bb".into(),
            listed: Value::Null,
        };
        assert_eq!(
            mismatch.to_string(),
            "skill lag-triage does not match its pin (pinned sha256:aa, fetched sha256:bb): \
             withheld until its new body is reviewed and re-pinned (capstanctl pins)"
        );
        let shown = serde_json::to_value(&mismatch).unwrap();
        assert_eq!(shown["kind"], "skill");
        assert!(shown.get("server").is_none(), "{shown}");
    }

    #[test]
    fn an_absent_description_should_be_left_out() {
        let listed = tool(json!({"name": "t", "inputSchema": {"type": "object"}}));
        assert_eq!(
            definition_digest(&listed),
            expected(r#"{"inputSchema":{"type":"object"},"name":"t"}"#)
        );
    }

    #[test]
    fn the_digest_should_match_the_pin_pattern() {
        let listed = tool(json!({"name": "t", "inputSchema": {"type": "object"}}));
        let digest = definition_digest(&listed);
        // capstan_api::patterns::PIN_PATTERN, `^sha256:[0-9a-f]{64}$`, checked by hand.
        let hex = digest.strip_prefix("sha256:").unwrap_or_default();
        assert_eq!(hex.len(), 64, "{digest}");
        assert!(
            hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
            "{digest}"
        );
    }
}
