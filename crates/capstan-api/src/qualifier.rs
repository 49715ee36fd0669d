//! The RouteQualifier custom resource: a standing rule constraining which provider serves a
//! routed capability.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::patterns::{CAPABILITY_ID_PATTERN, MAX_NAME_LEN};

/// The longest RouteQualifier name: qualifier ids are bounded so they fit in route decision
/// records and condition messages.
pub const MAX_QUALIFIER_NAME_LEN: usize = 128;

/// How many targets one constraint may name.
pub const MAX_CONSTRAINT_TARGETS: usize = 32;

/// A standing rule over routed capabilities. Qualifiers merge in name order; a per-call route
/// request may only narrow them. The schema is closed: a rule with a field Capstan does not know
/// is refused rather than half-applied.
// Each `printcolumn(...)` repeats the same keys, which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "capabilities.assistant.miloapis.com",
    version = "v1alpha1",
    kind = "RouteQualifier",
    plural = "routequalifiers",
    shortname = "rq",
    category = "capstan",
    derive = "PartialEq",
    status = "RouteQualifierStatus",
    doc = "A standing rule constraining which provider serves a routed capability (cap.*). \
           Qualifiers merge in name order; contradictory qualifiers are refused, never ignored.",
    printcolumn(
        name = "Capability",
        type_ = "string",
        json_path = ".spec.capabilityId",
        description = "The capability constrained; empty means every capability"
    ),
    printcolumn(
        name = "Constraint",
        type_ = "string",
        json_path = ".spec.constraint.kind"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Accepted and taking effect"
    ),
    printcolumn(
        name = "Accepted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Accepted\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteQualifierSpec {
    /// The capability this rule applies to, e.g. `cap.web.search`. Omitted: every capability.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_NAME_LEN), pattern(CAPABILITY_ID_PATTERN))]
    pub capability_id: Option<String>,

    /// Which candidates may serve: `none`, `only` (targets), `ignore` (targets) or `pin`
    /// (target). A target names a binding, an MCP server, or a namespaced tool.
    #[serde(default)]
    pub constraint: RouteConstraint,

    /// The lowest quality prior, in basis points (0–10000), a candidate may have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10000))]
    pub min_quality: Option<u16>,

    /// The highest cost per call, in micro-USD, a candidate may have. Unpriced candidates that
    /// are not bundled in a broker are excluded when this is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_cost_micros_usd: Option<i64>,
}

/// Which candidates may serve a capability: a tagged union on `kind`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "camelCase", deny_unknown_fields)]
pub enum RouteConstraint {
    /// No constraint.
    #[default]
    None,
    /// Only these targets may serve.
    Only {
        /// The targets allowed.
        targets: Vec<String>,
    },
    /// These targets may not serve.
    Ignore {
        /// The targets excluded.
        targets: Vec<String>,
    },
    /// Exactly this target serves.
    Pin {
        /// The target pinned.
        target: String,
    },
}

/// The kinds a constraint may have, in the order the schema lists them.
pub const CONSTRAINT_KINDS: [&str; 4] = ["none", "only", "ignore", "pin"];

// Hand-written because Kubernetes structural schemas cannot express a tagged union (`oneOf` with
// per-branch properties): the schema is one flat object whose shape per `kind` is enforced by CEL
// rules, each naming the field it is about. Runtime validation checks the same rules in code.
impl JsonSchema for RouteConstraint {
    fn schema_name() -> Cow<'static, str> {
        "RouteConstraint".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Which candidates may serve: kind none; only or ignore with targets; pin with target.",
            "type": "object",
            "required": ["kind"],
            "additionalProperties": false,
            "properties": {
                "kind": {
                    "description": "none | only | ignore | pin",
                    "type": "string",
                    "enum": CONSTRAINT_KINDS
                },
                "targets": {
                    "description": "For only and ignore: the bindings, MCP servers or namespaced tools named.",
                    "type": "array",
                    "maxItems": MAX_CONSTRAINT_TARGETS,
                    "items": { "type": "string", "minLength": 1, "maxLength": MAX_NAME_LEN },
                    "x-kubernetes-list-type": "set"
                },
                "target": {
                    "description": "For pin: the binding, MCP server or namespaced tool that serves.",
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_NAME_LEN
                }
            },
            "x-kubernetes-validations": [
                {
                    "rule": "!(self.kind == 'only' || self.kind == 'ignore') || (has(self.targets) && size(self.targets) > 0)",
                    "message": "required, non-empty, when kind is only or ignore",
                    "fieldPath": ".targets",
                    "reason": "FieldValueRequired"
                },
                {
                    "rule": "self.kind == 'only' || self.kind == 'ignore' || !has(self.targets)",
                    "message": "allowed only when kind is only or ignore",
                    "fieldPath": ".targets",
                    "reason": "FieldValueForbidden"
                },
                {
                    "rule": "self.kind != 'pin' || has(self.target)",
                    "message": "required when kind is pin",
                    "fieldPath": ".target",
                    "reason": "FieldValueRequired"
                },
                {
                    "rule": "self.kind == 'pin' || !has(self.target)",
                    "message": "allowed only when kind is pin",
                    "fieldPath": ".target",
                    "reason": "FieldValueForbidden"
                }
            ]
        })
    }
}

/// What the controller last observed about a RouteQualifier. Written only by Capstan.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteQualifierStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// `Accepted`: Validated, ValidationFailed, LimitExceeded (beyond the 32nd qualifier) or
    /// Conflict (a contradictory merge, naming the other qualifiers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}
