//! The CapabilityBinding custom resource, whose spec is the capability document's spec.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod auth;
mod first_wins;
mod selectors;

pub use self::auth::{
    AUTHORIZATION, AuthKind, EndpointAuth, ExchangeClient, SecretCredential, SecretKeyRef,
    SubjectTokenType, TokenExchange, WorkloadIdentity,
};
pub use self::first_wins::{FirstWinsKey, first_wins_key, first_wins_order};
pub use self::selectors::{PromptSelector, ResourceSelector, ToolSelector};
use crate::patterns::{
    CAPABILITY_ID_PATTERN, ELICITATION_HOST_PATTERN, FEATURE_PATTERN, HTTP_URL_PATTERN,
    MAX_NAME_LEN, MAX_TEXT_LEN, MAX_URL_LEN, PIN_PATTERN, SERVER_NAME_PATTERN, SKILL_NAME_PATTERN,
};

/// What one provider service contributes to a project's assistant: MCP tool endpoints with an
/// allow-list, knowledge sources and on-demand skills.
///
/// This type is both the `spec` of a CapabilityBinding and the `spec` of a capability document
/// (fixture file, capability-provider HTTP API): one Rust type, so a field cannot drift between
/// producers.
// Each `printcolumn(...)` repeats the same keys, which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "capabilities.assistant.miloapis.com",
    version = "v1alpha1",
    kind = "CapabilityBinding",
    plural = "capabilitybindings",
    shortname = "capb",
    category = "capstan",
    derive = "PartialEq",
    status = "CapabilityBindingStatus",
    doc = "A provider service's contribution to the assistants of the project whose control plane \
           holds it: MCP tools behind an allow-list, knowledge, and skills. Cluster-scoped: the \
           control plane is the tenancy boundary.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Accepted and composed (what `kubectl wait --for=condition=Ready` waits on)"
    ),
    printcolumn(
        name = "Accepted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Accepted\")].status",
        description = "Whether the spec validated"
    ),
    printcolumn(
        name = "Composed",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Composed\")].status",
        description = "Whether the last composition could use everything the binding declares"
    ),
    printcolumn(
        name = "Tools",
        type_ = "integer",
        json_path = ".status.toolCount",
        description = "Tools this binding contributes"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityBindingSpec {
    /// The provider service this binding belongs to.
    pub service_ref: ObjectRef,

    /// The provider service's name as metered: every provider tool call emits one
    /// tool-invocation event under this name.
    #[schemars(length(min = 1, max = MAX_NAME_LEN))]
    pub service_name: String,

    /// The agent configuration of the provider service this binding projects.
    pub service_agent_ref: ObjectRef,

    /// The provider's own configuration revision (not the document schema version).
    #[schemars(length(min = 1, max = MAX_NAME_LEN))]
    pub configuration_version: String,

    /// The provider's own project, where its team reviews capability-gap reports. Distinct from
    /// the consumer project this binding is entitled to. Omitted: gap reporting is unavailable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_NAME_LEN))]
    pub reporting_project: Option<String>,

    /// Knowledge sources fetched at composition and rendered into the assistant's instructions
    /// under a provenance header, and concept summaries listed beside them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knowledge: Option<Knowledge>,

    /// MCP tool endpoints and the tools the assistant may use from each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Tools>,

    /// Provider procedures loaded on demand: only name and description enter the prompt; the
    /// body is fetched when the assistant calls `load_skill`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub skills: Vec<Skill>,

    /// What the assistant may read on the provider's behalf, and how long one task may run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authority: Option<Authority>,

    /// Whether this binding's tools, prompts and resources may be served without deciding
    /// them per caller. `Required`: only a sidecar that asks the project's RBAC what each
    /// caller may use (`CAPSTAN_TOOL_AUTHORIZATION=rbac`) serves them; any other serves none
    /// of them (docs/authorization.md). Omitted: `Optional`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller_authorization: Option<CallerAuthorization>,
}

/// Whether a binding's offerings need per-caller authorization (`spec.callerAuthorization`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum CallerAuthorization {
    /// Served by every sidecar: with per-tool authorization on, to the callers RBAC lets use
    /// them; with it off, to every admitted caller.
    #[default]
    Optional,
    /// Served only by sidecars with per-tool authorization on; withheld by the others.
    Required,
}

/// A reference to an object by name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct ObjectRef {
    /// The referenced object's name.
    #[schemars(length(min = 1, max = MAX_NAME_LEN))]
    pub name: String,
}

/// Knowledge the provider publishes for the assistant.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Knowledge {
    /// Documents fetched over HTTP (short timeout, per-source byte cap). One failing source is
    /// tolerated; losing every source degrades the binding.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub sources: Vec<KnowledgeSource>,

    /// One-line summaries of the provider's resource kinds, listed in the instructions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub concepts: Vec<Concept>,
}

/// One knowledge document.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.auth) || !has(self.auth.tokenExchange)",
        "message": "tokenExchange is for MCP servers only: this body is fetched once and served to every caller, so no caller's token can be exchanged for it; use workloadIdentity or secret",
        "fieldPath": ".auth.tokenExchange",
        "reason": "FieldValueInvalid"
    }
]))]
pub struct KnowledgeSource {
    /// What kind of document this is.
    #[serde(rename = "type")]
    pub kind: KnowledgeSourceType,

    /// A title shown in the provenance header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_NAME_LEN))]
    pub title: Option<String>,

    /// Where the document is fetched from: an absolute http or https URL on an allowed host.
    #[schemars(length(max = MAX_URL_LEN), pattern(HTTP_URL_PATTERN))]
    pub url: String,

    /// How the sidecar authenticates to `url`: `workloadIdentity` or `secret` (docs/upstream-auth.md).
    /// Omitted: no credential is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<EndpointAuth>,
}

/// The kinds of knowledge document.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum KnowledgeSourceType {
    /// A site-wide `llms.txt`-style document.
    #[serde(rename = "LLMDocs")]
    LlmDocs,
    /// An operational runbook.
    Runbook,
    /// Any other Markdown document.
    Markdown,
}

impl KnowledgeSourceType {
    /// The name as it appears in documents.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::LlmDocs => "LLMDocs",
            Self::Runbook => "Runbook",
            Self::Markdown => "Markdown",
        }
    }
}

/// A summary of one resource kind the provider serves.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Concept {
    /// The kind summarised.
    pub gvk: GroupKind,
    /// One line on what the kind is.
    #[schemars(length(min = 1, max = MAX_TEXT_LEN))]
    pub summary: String,
}

/// An API group and kind.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct GroupKind {
    /// The API group; empty for the core group.
    #[serde(default)]
    #[schemars(length(max = MAX_NAME_LEN))]
    pub group: String,
    /// The kind, or `*` for every kind of the group.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
}

/// The MCP servers a binding contributes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Tools {
    /// MCP servers (Streamable HTTP), each behind its own tool allow-list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub mcp_servers: Vec<McpServer>,
}

/// One MCP server and the tools the assistant may use from it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.mutating) || self.mutating.all(t, has(self.toolSelector) && has(self.toolSelector.include) && t in self.toolSelector.include)",
        "message": "every mutating entry must also be in toolSelector.include",
        "fieldPath": ".mutating",
        "reason": "FieldValueInvalid"
    },
    {
        "rule": "!has(self.capabilities) || self.capabilities.all(c, has(self.toolSelector) && has(self.toolSelector.include) && c.tool in self.toolSelector.include)",
        "message": "every capabilities[].tool must also be in toolSelector.include",
        "fieldPath": ".capabilities",
        "reason": "FieldValueInvalid"
    },
    {
        "rule": "!has(self.toolNames) || self.toolNames != 'Unprefixed' || !has(self.toolSelector) || !has(self.toolSelector.include) || self.toolSelector.include.all(t, t.matches('^[a-zA-Z0-9_-]{1,64}$') && !t.startsWith('cap__') && !(t in ['load_skill', 'find_tools', 'report_capability_gap', 'resources_list', 'resources_get', 'schema_get', 'locations_list', 'quota_get', 'resources_validate', 'resources_plan', 'resources_apply']))",
        "message": "with toolNames: Unprefixed, every toolSelector.include entry is exposed as listed: it must be 1-64 letters, digits, '_' and '-', and is never a built-in tool name (load_skill, find_tools, report_capability_gap, the base tools, cap__*)",
        "fieldPath": ".toolSelector.include",
        "reason": "FieldValueInvalid"
    },
    {
        "rule": "!has(self.providerProjectArgument) || !has(self.providerProjectArgument.tools) || self.providerProjectArgument.tools.all(t, has(self.toolSelector) && has(self.toolSelector.include) && t in self.toolSelector.include)",
        "message": "every providerProjectArgument.tools entry must also be in toolSelector.include",
        "fieldPath": ".providerProjectArgument.tools",
        "reason": "FieldValueInvalid"
    },
    {
        "rule": "!has(self.resourceUris) || self.resourceUris != 'AsListed' || !has(self.resourceSelector) || !has(self.resourceSelector.include) || self.resourceSelector.include.all(u, !u.lowerAscii().startsWith('capstan:'))",
        "message": "with resourceUris: AsListed, no resourceSelector.include entry may take the capstan: scheme, which is the sidecar's own",
        "fieldPath": ".resourceSelector.include",
        "reason": "FieldValueInvalid"
    }
]))]
pub struct McpServer {
    /// The server's name, the namespace of its tools (`<name>__<tool>`): 1–63 characters of
    /// `[a-zA-Z0-9_-]`, starting and ending alphanumeric, never containing `__`, unique in the
    /// binding. `cap` is reserved for routed capabilities.
    #[schemars(length(min = 1, max = 63), pattern(SERVER_NAME_PATTERN))]
    #[schemars(extend("x-kubernetes-validations" = [
        { "rule": "!self.contains('__')", "message": "must not contain \"__\", the tool namespace delimiter" },
        { "rule": "self != 'cap'", "message": "\"cap\" is reserved for routed capabilities" }
    ]))]
    pub name: String,

    /// The server's Streamable HTTP MCP URL. It must be on the sidecar's endpoint host
    /// allow-list, or it is not dialed and the binding reports Composed=False.
    #[schemars(length(max = MAX_URL_LEN), pattern(HTTP_URL_PATTERN))]
    pub endpoint: String,

    /// How the sidecar authenticates to `endpoint` on every request: its workload identity, a
    /// Secret, or the caller's token exchanged (docs/upstream-auth.md). Omitted: no credential
    /// is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<EndpointAuth>,

    /// The tools the assistant may use. A server without an allow-list contributes no tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_selector: Option<ToolSelector>,

    /// How this server's tools are named in the composition: `Prefixed` (the default,
    /// `<name>__<tool>`) or `Unprefixed` (as the server lists them), for providers whose tool
    /// names are already unique. An unprefixed name is never a built-in tool name (`load_skill`,
    /// the base tools, `cap__*`) and must already be 1–64 characters of `[a-zA-Z0-9_-]`; two
    /// bindings offering one name stay first-wins, the loser reporting the collision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_names: Option<Naming>,

    /// The prompts the assistant may list and get from this server. A server without one
    /// contributes no prompts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_selector: Option<PromptSelector>,

    /// How this server's prompts are named: `Prefixed` (the default, `<name>__<prompt>`) or
    /// `Unprefixed` (as the server lists them); two bindings offering one name stay
    /// first-wins, the loser reporting the collision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_names: Option<Naming>,

    /// The resources and resource templates the assistant may list, read and subscribe to.
    /// A server without one contributes no resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_selector: Option<ResourceSelector>,

    /// How this server's resource URIs are shown: `Capstan` (the default,
    /// `capstan://<binding>/<name>/<the server's URI>`, which `resources/read` reverses) or
    /// `AsListed` (the server's own URIs, for providers whose URIs are already unique). A URI
    /// as listed never takes the `capstan:` scheme.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_uris: Option<ResourceUris>,

    /// Says that the `project` argument of this server's tools is the provider's own concept
    /// (an Azure DevOps project, a Jira project key), not the platform's project: such tools
    /// are composed with it. Omitted: a tool whose input schema takes `project` is withheld,
    /// since the platform's project is never an argument a model writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_project_argument: Option<ProviderProjectArgument>,

    /// Tools, among those included, that can change something. They are listed in the
    /// composition's mutating set and carry `readOnlyHint: false`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128), inner(length(min = 1, max = 128)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub mutating: Vec<String>,

    /// Routed capabilities (`cap.*`) this server's tools can serve.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub capabilities: Vec<CapabilityMapping>,

    /// Hosts this server may send the person to in a URL-mode elicitation (`https` links
    /// only): `login.example.com`, or `*.example.com` for any name below it. A URL-mode
    /// elicitation to any other host — or from a server without this list — is refused and
    /// never reaches the person; form-mode questions are relayed either way, naming this
    /// binding and server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 16),
        inner(length(max = 253), pattern(ELICITATION_HOST_PATTERN))
    )]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub url_elicitation_hosts: Vec<String>,

    /// How many calls this server takes from the assistants of the project, counted by each
    /// sidecar on its own: a call over a limit is refused with `rate_limited` before it reaches
    /// the server. The platform's defaults fill what is omitted and its ceilings cap what is
    /// set (docs/limits.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<CallLimits>,
}

/// Which of a server's tools take a `project` argument of the provider's own.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub struct ProviderProjectArgument {
    /// The tools it applies to, each in `toolSelector.include`. Omitted or empty: every tool
    /// of the server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128), inner(length(min = 1, max = 128)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub tools: Vec<String>,
}

impl ProviderProjectArgument {
    /// Whether `tool`'s `project` argument is the provider's own.
    pub fn covers(&self, tool: &str) -> bool {
        self.tools.is_empty() || self.tools.iter().any(|t| t == tool)
    }
}

/// The calls one MCP server takes, per sidecar. Every field is optional; omitted, the
/// platform's default applies (none: unlimited).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallLimits {
    /// Calls one caller may make to this server in a minute: a burst of this many, then one
    /// every `60 / n` seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_CALLS_PER_MINUTE))]
    pub calls_per_minute_per_caller: Option<u32>,

    /// Calls one caller may have running on this server at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_CONCURRENT_CALLS))]
    pub concurrent_calls_per_caller: Option<u32>,

    /// Calls every caller together may make to this server in a minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_CALLS_PER_MINUTE))]
    pub calls_per_minute: Option<u32>,
}

/// The largest per-minute limit a binding may declare (a thousand calls a second).
pub const MAX_CALLS_PER_MINUTE: u32 = 60_000;

/// The largest concurrency limit a binding may declare.
pub const MAX_CONCURRENT_CALLS: u32 = 10_000;

/// How a server's tools (`toolNames`) or prompts (`promptNames`) are named in a composition.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum Naming {
    /// `<server>__<name>`: no two servers can collide.
    #[default]
    Prefixed,
    /// As the server lists them.
    Unprefixed,
}

/// How a server's resource URIs are shown in a composition.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ResourceUris {
    /// `capstan://<binding>/<server>/<the server's URI>`: no two servers can collide, and
    /// `resources/read` finds the server by the URI alone.
    #[default]
    Capstan,
    /// The server's own URIs.
    AsListed,
}

/// One allowed tool mapped onto a routed capability.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityMapping {
    /// The capability served, `cap.<segment>(.<segment>)*`, e.g. `cap.web.search`.
    #[schemars(length(max = MAX_NAME_LEN), pattern(CAPABILITY_ID_PATTERN))]
    pub capability_id: String,

    /// The tool that serves it; must be in `toolSelector.include`.
    #[schemars(length(min = 1, max = 128))]
    pub tool: String,

    /// Coverage claims, from the capability's feature vocabulary.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(max = 63), pattern(FEATURE_PATTERN)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub features: Vec<String>,

    /// What one call costs. Omitted: unpriced, which is not the same as free.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_hint: Option<CostHint>,

    /// A routing prior in basis points (0–10000). Never evidence of quality.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10000))]
    pub quality: Option<u16>,

    /// `active` routes; `quarantined` is excluded from selection and from direct calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<CapabilityStatus>,
}

/// The price of one call.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CostHint {
    /// Base cost in micro-USD. Omitted: unpriced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub base_micros_usd: Option<i64>,

    /// Whether the cost is bundled into a broker subscription.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bundled_in_broker: bool,
}

/// Whether a capability mapping may be routed to.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum CapabilityStatus {
    /// Eligible for routing.
    #[default]
    Active,
    /// Excluded from routing with the reason `quarantined`.
    Quarantined,
}

/// A provider procedure the assistant loads on demand.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.auth) || !has(self.auth.tokenExchange)",
        "message": "tokenExchange is for MCP servers only: this body is fetched once and served to every caller, so no caller's token can be exchanged for it; use workloadIdentity or secret",
        "fieldPath": ".auth.tokenExchange",
        "reason": "FieldValueInvalid"
    }
]))]
pub struct Skill {
    /// The skill's name, unique in the binding; the argument of `load_skill`.
    #[schemars(length(min = 1, max = 63), pattern(SKILL_NAME_PATTERN))]
    pub name: String,

    /// One line saying when the skill applies; this is all that enters the prompt.
    #[schemars(length(min = 1, max = MAX_TEXT_LEN))]
    pub description: String,

    /// Where the body is fetched from (5 s, 64 KiB): an absolute http or https URL.
    #[schemars(length(max = MAX_URL_LEN), pattern(HTTP_URL_PATTERN))]
    pub source: String,

    /// The reviewed body: `sha256:<64 hex digits>`, the SHA-256 of the body as fetched from
    /// `source` (`capstanctl pins` prints it; docs/pins.md "Skills"). A pinned skill is served
    /// only while its body has that digest; a body that changed is withheld from `load_skill`
    /// and the skills extension, and the binding reports Composed=False naming it. Omitted:
    /// served as fetched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(PIN_PATTERN))]
    pub pin: Option<String>,

    /// How the sidecar authenticates to `source`: `workloadIdentity` or `secret`
    /// (docs/upstream-auth.md). Omitted: no credential is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<EndpointAuth>,
}

/// What the assistant may do on the provider's behalf.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Authority {
    /// Kinds the assistant may read for this provider.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub reads: Vec<ReadGrant>,

    /// The longest one task (one MCP session) may run, in seconds. The smallest value across a
    /// project's bindings applies; 0 or omitted sets no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86400))]
    pub max_task_duration_seconds: Option<u32>,
}

/// One readable kind.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct ReadGrant {
    /// The group and kind (`*` for every kind of the group).
    pub gvk: GroupKind,
}

/// What the controller last observed about a CapabilityBinding. Written only by Capstan.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityBindingStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// `Accepted` (the spec validated) and `Composed` (the last composition could use
    /// everything the binding declares).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// How many tools the binding contributes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_count: Option<i32>,

    /// The namespaced names of the tools the binding contributes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
}
