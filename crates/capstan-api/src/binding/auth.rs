//! How Capstan authenticates to an endpoint it dials for a binding (`auth` on an MCP server, a
//! knowledge source or a skill): the sidecar's workload identity, a Secret, or a token exchanged
//! for the caller's. Never the caller's own token. The threat model behind each rule is
//! docs/upstream-auth.md.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::patterns::{
    AUDIENCE_PATTERN, HEADER_NAME_PATTERN, HEADER_VALUE_PATTERN, HTTP_URL_PATTERN, MAX_NAME_LEN,
    MAX_URL_LEN, SCOPE_PATTERN, SECRET_KEY_PATTERN, SECRET_NAME_PATTERN,
};

/// The credential sent with every request to one endpoint: exactly one of its fields.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "[has(self.workloadIdentity), has(self.secret), has(self.tokenExchange)].filter(k, k).size() == 1",
        "message": "set exactly one of workloadIdentity, secret, tokenExchange",
        "reason": "FieldValueInvalid"
    }
]))]
pub struct EndpointAuth {
    /// A ServiceAccount token of the sidecar's pod for `audience`, asked of the TokenRequest
    /// API and refreshed before it expires. The endpoint verifies it with a TokenReview.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_identity: Option<WorkloadIdentity>,

    /// A key of a Secret in the platform's credentials namespace, sent in a header. The Secret
    /// must name this binding and the endpoint's host in its own annotations
    /// (docs/upstream-auth.md); a changed value is sent from the next request on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<SecretCredential>,

    /// The caller's token exchanged (RFC 8693) for a token with the endpoint's audience: the
    /// endpoint sees the caller as subject and itself as audience. MCP servers only: knowledge
    /// and skill bodies are fetched once for every caller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_exchange: Option<TokenExchange>,
}

impl EndpointAuth {
    /// The one kind this block sets, or `None` when it sets none or several (validation refuses
    /// both).
    pub fn kind(&self) -> Option<AuthKind<'_>> {
        match (&self.workload_identity, &self.secret, &self.token_exchange) {
            (Some(identity), None, None) => Some(AuthKind::WorkloadIdentity(identity)),
            (None, Some(secret), None) => Some(AuthKind::Secret(secret)),
            (None, None, Some(exchange)) => Some(AuthKind::TokenExchange(exchange)),
            _ => None,
        }
    }
}

/// The kind an [`EndpointAuth`] sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthKind<'a> {
    /// The sidecar's workload identity.
    WorkloadIdentity(&'a WorkloadIdentity),
    /// A Secret's value.
    Secret(&'a SecretCredential),
    /// The caller's token exchanged.
    TokenExchange(&'a TokenExchange),
}

impl AuthKind<'_> {
    /// The field name of the kind, as an error or a metric label names it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::WorkloadIdentity(_) => "workloadIdentity",
            Self::Secret(_) => "secret",
            Self::TokenExchange(_) => "tokenExchange",
        }
    }
}

/// A ServiceAccount token of the pod for one audience.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub struct WorkloadIdentity {
    /// The audience the token is issued for. It must be the host of the URL it is sent to, or
    /// an audience the platform allows for that host (`CAPSTAN_WORKLOAD_AUDIENCES`).
    #[schemars(length(min = 1, max = MAX_NAME_LEN), pattern(AUDIENCE_PATTERN))]
    pub audience: String,
}

/// A key of a Secret, sent in a header.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.header) || !(self.header.lowerAscii() in ['host', 'content-length', 'content-type', 'accept', 'connection', 'transfer-encoding', 'te', 'upgrade', 'mcp-session-id', 'mcp-protocol-version', 'last-event-id', 'traceparent', 'tracestate', 'baggage'])",
        "message": "is a header the sidecar sets itself; use Authorization or a header of the provider's own",
        "fieldPath": ".header",
        "reason": "FieldValueInvalid"
    }
]))]
pub struct SecretCredential {
    /// The Secret's name, in the platform's credentials namespace.
    #[schemars(length(min = 1, max = MAX_NAME_LEN), pattern(SECRET_NAME_PATTERN))]
    pub name: String,

    /// The key of the Secret's data whose value is sent.
    #[schemars(length(min = 1, max = MAX_NAME_LEN), pattern(SECRET_KEY_PATTERN))]
    pub key: String,

    /// The header the value is sent in. Omitted: `Authorization`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128), pattern(HEADER_NAME_PATTERN))]
    pub header: Option<String>,

    /// Text sent before the value. Omitted: `Bearer ` in `Authorization`, nothing in any other
    /// header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), pattern(HEADER_VALUE_PATTERN))]
    pub prefix: Option<String>,
}

impl SecretCredential {
    /// The header the value goes in.
    pub fn header_name(&self) -> &str {
        self.header.as_deref().unwrap_or(AUTHORIZATION)
    }

    /// The text before the value.
    pub fn value_prefix(&self) -> &str {
        match &self.prefix {
            Some(prefix) => prefix,
            None if self.header_name().eq_ignore_ascii_case(AUTHORIZATION) => "Bearer ",
            None => "",
        }
    }
}

/// The header a credential goes in unless the binding names another.
pub const AUTHORIZATION: &str = "Authorization";

/// A key of a Secret (a client secret).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub struct SecretKeyRef {
    /// The Secret's name, in the platform's credentials namespace.
    #[schemars(length(min = 1, max = MAX_NAME_LEN), pattern(SECRET_NAME_PATTERN))]
    pub name: String,

    /// The key of the Secret's data.
    #[schemars(length(min = 1, max = MAX_NAME_LEN), pattern(SECRET_KEY_PATTERN))]
    pub key: String,
}

/// An RFC 8693 token exchange of the caller's token.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "self.tokenEndpoint.startsWith('https://') || self.tokenEndpoint.matches('^http://(localhost|127\\\\.[0-9]+\\\\.[0-9]+\\\\.[0-9]+|\\\\[::1\\\\])(:[0-9]+)?([/?#].*)?$')",
        "message": "must be an https:// URL: the caller's token is sent to it (plain http only on loopback)",
        "fieldPath": ".tokenEndpoint",
        "reason": "FieldValueInvalid"
    }
]))]
pub struct TokenExchange {
    /// The token service's token endpoint. It must be on the sidecar's token endpoint
    /// allow-list (`CAPSTAN_TOKEN_ENDPOINT_HOSTS`).
    #[schemars(length(max = MAX_URL_LEN), pattern(HTTP_URL_PATTERN))]
    pub token_endpoint: String,

    /// The audience asked for: the MCP server's. It must be the endpoint's host, or an audience
    /// the platform allows for that host (`CAPSTAN_WORKLOAD_AUDIENCES`).
    #[schemars(length(min = 1, max = MAX_NAME_LEN), pattern(AUDIENCE_PATTERN))]
    pub audience: String,

    /// Scopes asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 16),
        inner(length(min = 1, max = 128), pattern(SCOPE_PATTERN))
    )]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub scopes: Vec<String>,

    /// What the caller's token is, as `subject_token_type` says. Omitted: `AccessToken`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject_token_type: Option<SubjectTokenType>,

    /// Send the sidecar's workload token for this audience as `actor_token`, so the exchanged
    /// token names the sidecar as the party acting for the caller. The audience must be the
    /// token endpoint's host or allowed for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<WorkloadIdentity>,

    /// How the sidecar authenticates to the token service.
    pub client: ExchangeClient,
}

impl TokenExchange {
    /// The `subject_token_type` sent.
    pub fn subject_token_type(&self) -> SubjectTokenType {
        self.subject_token_type.unwrap_or_default()
    }
}

/// The token types a caller's token may be exchanged as (RFC 8693 section 3).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum SubjectTokenType {
    /// `urn:ietf:params:oauth:token-type:access_token`.
    #[default]
    AccessToken,
    /// `urn:ietf:params:oauth:token-type:jwt`.
    #[serde(rename = "JWT")]
    Jwt,
    /// `urn:ietf:params:oauth:token-type:id_token`.
    IdToken,
}

impl SubjectTokenType {
    /// The token type URI.
    pub fn uri(self) -> &'static str {
        match self {
            Self::AccessToken => "urn:ietf:params:oauth:token-type:access_token",
            Self::Jwt => "urn:ietf:params:oauth:token-type:jwt",
            Self::IdToken => "urn:ietf:params:oauth:token-type:id_token",
        }
    }
}

/// The sidecar as a client of the token service: its id and exactly one way to prove it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "[has(self.secret), has(self.workloadIdentity)].filter(k, k).size() == 1",
        "message": "set exactly one of secret, workloadIdentity",
        "reason": "FieldValueInvalid"
    }
]))]
pub struct ExchangeClient {
    /// The client id the token service knows the sidecar by.
    #[schemars(length(min = 1, max = MAX_NAME_LEN), pattern(AUDIENCE_PATTERN))]
    pub id: String,

    /// A client secret (HTTP Basic authentication), from a Secret that names the token
    /// endpoint's host in its annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<SecretKeyRef>,

    /// The sidecar's workload token for this audience as a client assertion (RFC 7523
    /// `client_assertion`). The audience must be the token endpoint's host or allowed for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_identity: Option<WorkloadIdentity>,
}
