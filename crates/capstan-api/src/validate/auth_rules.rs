//! The rules of `auth` blocks that span fields (the CEL rules of `EndpointAuth`,
//! `SecretCredential`, `TokenExchange` and `ExchangeClient`, and the rule of knowledge sources
//! and skills): exactly one kind, no token exchange where one body serves every caller, no
//! header the sidecar sets itself, and a token endpoint the caller's token may travel to.

use serde_json::Value;

use super::FieldError;
use super::fields::{items, text};

/// Headers the sidecar sets on provider requests itself: a credential placed in one would
/// replace or duplicate what the transport needs.
pub(crate) const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "content-type",
    "accept",
    "connection",
    "transfer-encoding",
    "te",
    "upgrade",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
    "traceparent",
    "tracestate",
    "baggage",
];

/// The kinds of an `auth` block, in the order messages list them.
const KINDS: [&str; 3] = ["workloadIdentity", "secret", "tokenExchange"];

/// Checks every `auth` block of a binding spec, pushing every violation.
pub(super) fn check(spec: &Value, out: &mut Vec<FieldError>) {
    let servers = spec
        .get("tools")
        .map_or(&[][..], |tools| items(tools, "mcpServers"));
    for (i, server) in servers.iter().enumerate() {
        check_block(&format!("spec.tools.mcpServers[{i}]"), server, true, out);
    }
    let sources = spec
        .get("knowledge")
        .map_or(&[][..], |knowledge| items(knowledge, "sources"));
    for (i, source) in sources.iter().enumerate() {
        check_block(&format!("spec.knowledge.sources[{i}]"), source, false, out);
    }
    for (i, skill) in items(spec, "skills").iter().enumerate() {
        check_block(&format!("spec.skills[{i}]"), skill, false, out);
    }
}

/// Checks the `auth` of the endpoint at `at`; `per_caller` says whether it is dialed for one
/// caller at a time (an MCP server) or once for all (a knowledge source, a skill body).
fn check_block(at: &str, endpoint: &Value, per_caller: bool, out: &mut Vec<FieldError>) {
    let Some(auth) = endpoint.get("auth").filter(|auth| auth.is_object()) else {
        return;
    };
    let at = format!("{at}.auth");
    let set: Vec<&str> = KINDS
        .into_iter()
        .filter(|kind| auth.get(kind).is_some())
        .collect();
    if set.len() != 1 {
        let found = match set.as_slice() {
            [] => "none is set".to_owned(),
            several => format!("{} are set", several.join(" and ")),
        };
        out.push(FieldError::new(
            at.clone(),
            format!(
                "set exactly one of workloadIdentity, secret, tokenExchange ({found}); use one \
                 auth block per endpoint"
            ),
        ));
    }
    if let Some(secret) = auth.get("secret") {
        check_header(&format!("{at}.secret"), secret, out);
    }
    let Some(exchange) = auth.get("tokenExchange") else {
        return;
    };
    if !per_caller {
        out.push(FieldError::new(
            format!("{at}.tokenExchange"),
            "is for MCP servers only: this body is fetched once and served to every caller, so \
             no caller's token can be exchanged for it; use workloadIdentity or secret",
        ));
    }
    check_exchange(&format!("{at}.tokenExchange"), exchange, out);
}

/// A Secret's value never goes in a header the sidecar sets itself.
fn check_header(at: &str, secret: &Value, out: &mut Vec<FieldError>) {
    let Some(header) = text(secret, "header") else {
        return;
    };
    if RESERVED_HEADERS.contains(&header.to_ascii_lowercase().as_str()) {
        out.push(FieldError::new(
            format!("{at}.header"),
            format!(
                "\"{header}\" is a header the sidecar sets itself; use Authorization (omit \
                 header) or a header of the provider's own, e.g. X-Api-Key"
            ),
        ));
    }
}

/// The token endpoint receives the caller's token: https, or plain http on loopback only; and
/// the client proves itself one way.
fn check_exchange(at: &str, exchange: &Value, out: &mut Vec<FieldError>) {
    if let Some(endpoint) = text(exchange, "tokenEndpoint")
        && !is_private_transport(endpoint)
    {
        out.push(FieldError::new(
            format!("{at}.tokenEndpoint"),
            format!(
                "\"{endpoint}\" would carry the caller's token in plain text: write an https:// \
                 URL (plain http only to localhost, 127.0.0.0/8 or [::1])"
            ),
        ));
    }
    let Some(client) = exchange.get("client").filter(|c| c.is_object()) else {
        return;
    };
    let ways = ["secret", "workloadIdentity"]
        .into_iter()
        .filter(|way| client.get(way).is_some())
        .count();
    if ways != 1 {
        out.push(FieldError::new(
            format!("{at}.client"),
            "set exactly one of secret (a client secret) or workloadIdentity (the pod's token as \
             a client assertion)",
        ));
    }
}

/// Whether `url` is https, or plain http to a loopback host (what the CEL rule's expression
/// admits: `localhost`, `127.x.y.z`, `[::1]`).
pub(crate) fn is_private_transport(url: &str) -> bool {
    if url.starts_with("https://") {
        return true;
    }
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = match authority.strip_prefix("[::1]") {
        Some(port) => return port.is_empty() || is_port(port),
        None => authority.split_once(':').map_or(authority, |(host, port)| {
            if is_port(&format!(":{port}")) {
                host
            } else {
                ""
            }
        }),
    };
    host == "localhost" || is_loopback_v4(host)
}

/// `:` and one or more digits.
fn is_port(text: &str) -> bool {
    text.strip_prefix(':')
        .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
}

/// `127.` and three dotted groups of digits.
fn is_loopback_v4(host: &str) -> bool {
    let groups: Vec<&str> = host.split('.').collect();
    groups.len() == 4
        && groups[0] == "127"
        && groups
            .iter()
            .all(|g| !g.is_empty() && g.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_or_loopback_http_should_carry_a_callers_token() {
        for url in [
            "https://auth.example/token",
            "http://127.0.0.1:5556/token",
            "http://localhost/token",
            "http://[::1]:80/t",
            "http://127.1.2.3",
        ] {
            assert!(is_private_transport(url), "{url}");
        }
        for url in [
            "http://auth.example/token",
            "http://127.0.0.1.evil.example/token",
            "http://localhost.evil.example:80/",
            "http://[::1].evil/",
            "http://127.0.0.1:x/",
            "ftp://127.0.0.1/",
        ] {
            assert!(!is_private_transport(url), "{url}");
        }
    }

    #[test]
    fn admission_should_refuse_the_headers_runtime_validation_refuses() {
        use kube::CustomResourceExt;
        let crd = serde_json::to_string(&crate::CapabilityBinding::crd()).unwrap_or_default();
        let listed = crd
            .split("self.header.lowerAscii() in [")
            .nth(1)
            .and_then(|rest| rest.split(']').next())
            .unwrap_or_default();
        let cel: Vec<&str> = listed
            .split(',')
            .map(|name| {
                name.trim()
                    .trim_matches('\'')
                    .trim_matches('\\')
                    .trim_matches('"')
            })
            .collect();
        assert_eq!(cel, RESERVED_HEADERS);
    }
}
