//! The allow-lists of one MCP server — tools, prompts, resources — each with the digests of
//! the definitions someone reviewed (`pins`, docs/pins.md).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::patterns::{MAX_URL_LEN, PIN_PATTERN};

/// The prompt allow-list of one MCP server.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.pins) || self.pins.all(t, has(self.include) && t in self.include)",
        "message": "every pins key must also be in include",
        "fieldPath": ".pins",
        "reason": "FieldValueInvalid"
    }
]))]
pub struct PromptSelector {
    /// Exact prompt names the assistant may list and get. Enforced on `prompts/list`,
    /// `prompts/get` and `completion/complete`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128), inner(length(min = 1, max = 128)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub include: Vec<String>,

    /// Reviewed prompt definitions: prompt name → `sha256:<64 hex digits>`, the digest of the
    /// prompt as the server lists it (name, description, arguments; docs/pins.md). A pinned
    /// prompt is offered only while its listing has that digest. Every key must be in
    /// `include`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "pins_schema")]
    pub pins: BTreeMap<String, String>,
}

/// The resource allow-list of one MCP server.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.pins) || self.pins.all(t, has(self.include) && t in self.include)",
        "message": "every pins key must also be in include",
        "fieldPath": ".pins",
        "reason": "FieldValueInvalid"
    }
]))]
pub struct ResourceSelector {
    /// Exact resource URIs and URI templates, as the server lists them, that the assistant may
    /// list, read and subscribe to; a read of a URI a listed template produces is allowed.
    /// Enforced on every list, `resources/read`, `resources/subscribe` and
    /// `completion/complete`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128), inner(length(min = 1, max = MAX_URL_LEN)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub include: Vec<String>,

    /// Reviewed resource and template definitions: URI or URI template → `sha256:<64 hex
    /// digits>`, the digest of the entry as the server lists it (URI or template, name,
    /// description, MIME type; docs/pins.md). A pinned entry is offered only while its listing
    /// has that digest; what a read returns is not covered. Every key must be in `include`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "pins_schema")]
    pub pins: BTreeMap<String, String>,
}

/// The tool allow-list of one MCP server.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.pins) || self.pins.all(t, has(self.include) && t in self.include)",
        "message": "every pins key must also be in include",
        "fieldPath": ".pins",
        "reason": "FieldValueInvalid"
    }
]))]
pub struct ToolSelector {
    /// Exact tool names the assistant may list and call. Enforced on `tools/list` and on every
    /// `tools/call`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128), inner(length(min = 1, max = 128)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub include: Vec<String>,

    /// Reviewed tool definitions: tool name → `sha256:<64 hex digits>`, the digest of the
    /// tool's definition as the server lists it (`capstanctl pins` prints them; docs/pins.md).
    /// A pinned tool is exposed only while its live definition has that digest; a tool whose
    /// definition changed is withheld and the binding reports Composed=False naming it.
    /// Unpinned tools are exposed as listed. Every key must be in `include`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "pins_schema")]
    pub pins: BTreeMap<String, String>,
}

/// The schema of every selector's `pins`: a map of names (or URIs) to digests, bounded like
/// `include`.
fn pins_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "maxProperties": 128,
        "additionalProperties": {
            "type": "string",
            "pattern": PIN_PATTERN,
        },
    })
}
