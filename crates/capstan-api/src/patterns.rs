//! Patterns and bounds shared by the schema (admission) and runtime validation.
//!
//! Every pattern has a sentence a person can act on ([`pattern_message`]): the schema carries the
//! regular expression, and runtime errors carry the sentence instead of the expression.

/// MCP server names: 1–63 characters of `[a-zA-Z0-9_-]`, alphanumeric at both ends. The `__`
/// ban and the reserved name `cap` are separate rules so each gets its own message.
pub const SERVER_NAME_PATTERN: &str = "^[a-zA-Z0-9]([a-zA-Z0-9_-]*[a-zA-Z0-9])?$";

/// Skill names: the same alphabet as server names, so `load_skill` arguments stay plain.
pub const SKILL_NAME_PATTERN: &str = SERVER_NAME_PATTERN;

/// Capability ids: `cap.` then dotted lower-case segments. Segments may contain `-` but not `_`:
/// a capability is exposed as the tool `cap__<segments joined by _>`, and allowing `_` would let
/// `cap.web_search` and `cap.web.search` collide.
pub const CAPABILITY_ID_PATTERN: &str = "^cap(\\.[a-z][a-z0-9]*(-[a-z0-9]+)*)+$";

/// Feature names of a capability's vocabulary, e.g. `search.fresh`.
pub const FEATURE_PATTERN: &str = "^[a-z][a-z0-9_-]*(\\.[a-z][a-z0-9_-]*)*$";

/// Absolute http(s) URLs with a non-empty authority and no whitespace. The endpoint guard does
/// the real parsing and host checks at the dial site; this only catches what cannot be a URL.
pub const HTTP_URL_PATTERN: &str = "^https?://[^\\s/?#]+([/?#]\\S*)?$";

/// Pinned tool definitions (`toolSelector.pins` values): `sha256:` and the digest in lower-case
/// hex, the form `capstanctl pins` prints.
pub const PIN_PATTERN: &str = "^sha256:[0-9a-f]{64}$";

/// Tool names a server with `toolNames: Unprefixed` may offer: already what the major model
/// APIs accept (`[a-zA-Z0-9_-]`, at most 64 characters), so the name the assistant sees is the
/// name the server lists, with nothing sanitized or shortened.
pub const UNPREFIXED_TOOL_PATTERN: &str = "^[a-zA-Z0-9_-]{1,64}$";

/// Hosts a provider may send the person to in a URL-mode elicitation
/// (`urlElicitationHosts`): a lower-case DNS name of at least two labels, or `*.` and one (any
/// name below it). No IP address, no port: the link a person is shown names a host, and the
/// sidecar admits only `https` links to it (docs/mcp-surface.md "A provider's questions").
pub const ELICITATION_HOST_PATTERN: &str =
    "^(\\*\\.)?([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\\.)+[a-z]([-a-z0-9]{0,61}[a-z0-9])?$";

/// Audiences and client ids of upstream credentials: printable ASCII without spaces (an
/// audience is usually a host name or a URL; the token service decides which it knows).
pub const AUDIENCE_PATTERN: &str = "^[!-~]+$";

/// HTTP header names (RFC 9110 `token`).
pub const HEADER_NAME_PATTERN: &str = "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$";

/// Text placed in a header value: printable ASCII and spaces, so no value can end a header
/// early or start another.
pub const HEADER_VALUE_PATTERN: &str = "^[ -~]*$";

/// OAuth 2.0 scope tokens (RFC 6749 section 3.3).
pub const SCOPE_PATTERN: &str = "^[!#-\\[\\]-~]+$";

/// Secret names (Kubernetes DNS subdomains).
pub const SECRET_NAME_PATTERN: &str =
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// Keys of a Secret's data.
pub const SECRET_KEY_PATTERN: &str = "^[-._a-zA-Z0-9]+$";

/// The characters the major model APIs accept in a tool name (`[a-zA-Z0-9_-]`): what
/// composition sanitizes provider tool names to, and what an unprefixed name must already be.
pub fn is_tool_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// The names of the sidecar's own tools: `load_skill` and the base platform tools. A provider
/// tool may never be exposed under one of them, nor under `cap__…` (routed capabilities).
/// `capstan-platform` and the sidecar check their names against this list in their tests.
pub const BUILT_IN_TOOLS: &[&str] = &[
    "load_skill",
    "find_tools",
    "report_capability_gap",
    "resources_list",
    "resources_get",
    "schema_get",
    "locations_list",
    "quota_get",
    "resources_validate",
    "resources_plan",
    "resources_apply",
];

/// The prefix of routed capability tools (`cap__web_search`).
pub const CAPABILITY_TOOL_PREFIX: &str = "cap__";

/// Whether `name` belongs to the sidecar: a built-in tool or a routed capability.
pub fn is_built_in_tool(name: &str) -> bool {
    BUILT_IN_TOOLS.contains(&name) || name.starts_with(CAPABILITY_TOOL_PREFIX)
}

/// The URI scheme of resources as the sidecar shows them
/// (`capstan://<binding>/<server>/<the server's URI>`); a server's own URI never takes it.
pub const CAPSTAN_URI_SCHEME: &str = "capstan:";

/// Whether `uri` takes the sidecar's own scheme (schemes are case-insensitive).
pub fn is_capstan_uri(uri: &str) -> bool {
    uri.get(..CAPSTAN_URI_SCHEME.len())
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case(CAPSTAN_URI_SCHEME))
}

/// Names and other identifiers: the Kubernetes DNS-subdomain bound.
pub const MAX_NAME_LEN: u32 = 253;

/// One-line prose that enters the prompt (skill descriptions, concept summaries): bounded so a
/// provider cannot make every project's prompt expensive.
pub const MAX_TEXT_LEN: u32 = 1024;

/// URLs: the length browsers and proxies reliably accept.
pub const MAX_URL_LEN: u32 = 2048;

/// The sentence shown instead of a regular expression when a value does not match it.
pub fn pattern_message(pattern: &str) -> Option<&'static str> {
    match pattern {
        SERVER_NAME_PATTERN => Some(
            "must consist of letters, digits, '_' and '-', and start and end with a letter or digit",
        ),
        CAPABILITY_ID_PATTERN => Some(
            "must be cap.<segment>(.<segment>)*, each segment lower-case letters, digits and '-', \
             starting with a letter",
        ),
        FEATURE_PATTERN => Some(
            "must be dotted lower-case segments of letters, digits, '_' and '-', e.g. search.fresh",
        ),
        HTTP_URL_PATTERN => Some("must be an absolute http:// or https:// URL"),
        PIN_PATTERN => Some(
            "must be sha256: followed by 64 lower-case hex digits, as capstanctl pins prints it",
        ),
        ELICITATION_HOST_PATTERN => Some(
            "must be a lower-case DNS name of at least two labels, optionally starting with *. \
             (no scheme, port, path or IP address)",
        ),
        UNPREFIXED_TOOL_PATTERN => Some(
            "must be 1-64 letters, digits, '_' and '-' to be exposed unprefixed; keep the \
             <server>__ prefix (remove toolNames) for other names",
        ),
        AUDIENCE_PATTERN => Some("must be printable ASCII without spaces"),
        HEADER_NAME_PATTERN => Some(
            "must be an HTTP header name: letters, digits and !#$%&'*+.^_`|~-, e.g. Authorization",
        ),
        HEADER_VALUE_PATTERN => Some("must be printable ASCII and spaces, with no line breaks"),
        SCOPE_PATTERN => Some(
            "must be an OAuth scope: printable ASCII without spaces, '\"' or '\\', e.g. streams.read",
        ),
        SECRET_NAME_PATTERN => Some(
            "must be a Secret name: lower-case letters, digits, '-' and '.', starting and ending \
             with a letter or digit",
        ),
        SECRET_KEY_PATTERN => Some("must be a Secret key: letters, digits, '-', '_' and '.'"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pattern_should_have_a_message() {
        for pattern in [
            SERVER_NAME_PATTERN,
            CAPABILITY_ID_PATTERN,
            FEATURE_PATTERN,
            HTTP_URL_PATTERN,
            PIN_PATTERN,
            ELICITATION_HOST_PATTERN,
            UNPREFIXED_TOOL_PATTERN,
            AUDIENCE_PATTERN,
            HEADER_NAME_PATTERN,
            HEADER_VALUE_PATTERN,
            SCOPE_PATTERN,
            SECRET_NAME_PATTERN,
            SECRET_KEY_PATTERN,
        ] {
            assert!(
                pattern_message(pattern).is_some(),
                "{pattern} has no message"
            );
        }
    }

    #[test]
    fn built_in_names_should_be_the_sidecars_and_every_capability_tool() {
        assert!(is_built_in_tool("load_skill"));
        assert!(is_built_in_tool("resources_apply"));
        assert!(is_built_in_tool("cap__web_search"));
        assert!(!is_built_in_tool("resources_apply_all"));
        assert!(!is_built_in_tool("capture"));
        assert!(!is_built_in_tool("test_simple_text"));
    }
}
