//! What a direct request (`mcp/call.rs`) carries for the revision the upstream speaks
//! (docs/mcp-surface.md "Upstreams in their best revision"):
//!
//! - A session revision (up to 2025-11-25): the session the handshake opened
//!   (`mcp/handshake.rs`) goes on every request as `Mcp-Session-Id`; the session ends with a
//!   DELETE; a call given up is cancelled with `notifications/cancelled`; list changes arrive
//!   on the standalone GET stream. A server may assign no session (a stateless one): then no
//!   request carries the header and there is nothing to end.
//! - 2026-07-28 (no sessions): every request is self-contained — its `_meta` carries the
//!   client context (`io.modelcontextprotocol/protocolVersion`, `clientInfo`,
//!   `clientCapabilities`) and the HTTP request the standard headers (`Mcp-Method`,
//!   `Mcp-Name`, `Mcp-Param-*` for the arguments a tool's schema marks with `x-mcp-header`,
//!   `mcp/param_headers.rs`);
//!   there is nothing to end; a call given up is cancelled by closing its stream; list changes
//!   and resource updates arrive on a `subscriptions/listen` stream.
//!
//! The standard headers are hand-written: rmcp builds them only inside its own transport
//! (crate-private), and the direct path exists to skip that transport.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use capstan_api::wire::{MCP_PROTOCOL_VERSION, MCP_SESSION_ID};
use serde_json::{Map, Value};
use tokio::sync::watch;

use super::param_headers::{MCP_PARAM_PREFIX, ParamHeader, header_value, primitive};
use crate::trace_context::meta_mut;

/// `Mcp-Method`: the request's method.
const MCP_METHOD: &str = "Mcp-Method";
/// `Mcp-Name`: the tool, prompt or resource a request names.
const MCP_NAME: &str = "Mcp-Name";

/// The client context member naming the caller's capabilities.
pub(crate) const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// The request `_meta` member carrying the log level.
const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// The newest protocol revision with sessions; a server answering `initialize` with a later one
/// is spoken to without them (`mcp/handshake.rs`).
pub(crate) const SESSION_REVISIONS_UP_TO: &str = "2025-11-25";

/// Who Capstan is to a provider, in `initialize` and in a 2026-07-28 request's client context.
pub(crate) fn client_info() -> Value {
    serde_json::json!({ "name": "capstan-sidecar", "version": env!("CARGO_PKG_VERSION") })
}

/// How requests to one upstream are addressed.
#[derive(Debug)]
pub(crate) enum Revision {
    /// A revision with sessions: the session the handshake opened (`mcp/handshake.rs`) (none when the server assigned
    /// none), and the revision it negotiated.
    Session { id: Option<String>, version: String },
    /// 2026-07-28 or later: `context` is the client context every request's `_meta` carries.
    /// `session` is one the server assigned all the same (it answered `initialize` with this
    /// revision, which has none): its requests carry it, so that an answer to a question it
    /// asks mid-call — which this revision does not provide for — reaches it.
    Stateless {
        version: String,
        context: Map<String, Value>,
        session: Option<String>,
    },
}

impl Revision {
    /// The client context of a request without a session in `version`, for a client declaring
    /// `capabilities` (Capstan's own: the caller's replace them per call, `stamp`).
    pub(crate) fn stateless(version: String, capabilities: Value, session: Option<String>) -> Self {
        let mut context = Map::new();
        context.insert(
            "io.modelcontextprotocol/protocolVersion".into(),
            Value::String(version.clone()),
        );
        context.insert("io.modelcontextprotocol/clientInfo".into(), client_info());
        context.insert(CLIENT_CAPABILITIES.into(), capabilities);
        Self::Stateless {
            version,
            context,
            session,
        }
    }

    /// The revision's name, as `MCP-Protocol-Version` carries it.
    pub(crate) fn version(&self) -> &str {
        match self {
            Self::Session { version, .. } | Self::Stateless { version, .. } => version,
        }
    }

    /// The session the server assigned, if it assigned one.
    pub(crate) fn session(&self) -> Option<&str> {
        match self {
            Self::Session { id, .. } => id.as_deref(),
            Self::Stateless { session, .. } => session.as_deref(),
        }
    }

    /// Whether an answer to a question the server asks mid-call can reach it: always in a
    /// session revision (on its session, or to a stateless server on the request's own
    /// connection's server), in 2026-07-28 only on a session the server assigned.
    pub(crate) fn answerable(&self) -> bool {
        match self {
            Self::Session { .. } => true,
            Self::Stateless { session, .. } => session.is_some(),
        }
    }

    /// Whether requests are self-contained (no session).
    pub(crate) fn is_stateless(&self) -> bool {
        matches!(self, Self::Stateless { .. })
    }

    /// Adds the client context to `params._meta` of a request without a session; the caller's
    /// own capabilities (`caller_capabilities`, a 2026-07-28 caller's) replace Capstan's, so
    /// that what the provider may ask of the caller is what the caller can answer, and the log
    /// level asked for (`logging/setLevel` has no place in this revision) goes with it.
    pub(crate) fn stamp(
        &self,
        params: &mut Value,
        caller_capabilities: Option<&Value>,
        log_level: Option<&Value>,
    ) {
        let Self::Stateless { context, .. } = self else {
            return;
        };
        let Some(meta) = meta_mut(params) else {
            return;
        };
        for (member, value) in context {
            meta.insert(member.clone(), value.clone());
        }
        if let Some(capabilities) = caller_capabilities {
            meta.insert(CLIENT_CAPABILITIES.into(), capabilities.clone());
        }
        if let Some(level) = log_level {
            meta.insert(LOG_LEVEL.into(), level.clone());
        }
    }

    /// The headers of `message` (a JSON-RPC message) on `request`: the session and revision,
    /// and — without a session — the standard headers, those of a tool's arguments from
    /// `headed` (the tool's `x-mcp-header` annotations).
    pub(crate) fn headers(
        &self,
        mut request: http::request::Builder,
        message: &Value,
        headed: Option<&[ParamHeader]>,
    ) -> http::request::Builder {
        request = request.header(MCP_PROTOCOL_VERSION, self.version());
        if let Some(session) = self.session() {
            request = request.header(MCP_SESSION_ID, session);
        }
        if let Self::Session { .. } = self {
            return request;
        }
        let Some(method) = message.get("method").and_then(Value::as_str) else {
            return request;
        };
        request = request.header(MCP_METHOD, method);
        let params = message.get("params");
        let named = match method {
            "tools/call" | "prompts/get" => "name",
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => "uri",
            _ => "",
        };
        if let Some(name) = params
            .and_then(|p| p.get(named))
            .and_then(Value::as_str)
            .filter(|_| !named.is_empty())
        {
            request = request.header(MCP_NAME, header_value(name));
        }
        let arguments = params.and_then(|p| p.get("arguments"));
        for header in headed.unwrap_or_default() {
            let value = header
                .path
                .iter()
                .try_fold(arguments, |at, key| Some(at?.get(key)))
                .flatten()
                .and_then(primitive);
            if let Some(value) = value {
                request = request.header(
                    format!("{MCP_PARAM_PREFIX}{}", header.name),
                    header_value(&value),
                );
            }
        }
        request
    }
}

/// How long a `resources/subscribe` of a 2026-07-28 upstream waits for a listen stream naming
/// the URI to be acknowledged. 10 s: a stream opens in milliseconds; a provider slower than
/// this is told of as unavailable for the subscription (the stream is still opened, and the
/// caller's listen stays open).
pub(crate) const LISTEN_ACKNOWLEDGEMENT_WAIT: Duration = Duration::from_secs(10);

/// The resources a 2026-07-28 upstream is asked to tell updates of (its listen stream's
/// `resourceSubscriptions`): changed by `resources/subscribe` and `resources/unsubscribe` of
/// the task's sessions, which reach no provider as requests in that revision. Beside the set
/// wanted, the set the provider acknowledged last (`named`): a subscription is carried from the
/// moment a stream naming it is acknowledged, so `resources/subscribe` waits for that
/// (`until_named`), as a session revision's waits for the provider's answer
/// (docs/mcp-surface.md "Subscriptions").
#[derive(Clone, Debug)]
pub(crate) struct Subscribed {
    wanted: Arc<watch::Sender<BTreeSet<String>>>,
    named: Arc<watch::Sender<BTreeSet<String>>>,
    /// Whether a listen stream names resources at all (the server declared
    /// `resources.subscribe` and offers streams): a wait for a stream that will never name a
    /// URI would only delay the caller.
    carried: Arc<AtomicBool>,
}

impl Default for Subscribed {
    fn default() -> Self {
        Self {
            wanted: Arc::new(watch::channel(BTreeSet::new()).0),
            named: Arc::new(watch::channel(BTreeSet::new()).0),
            carried: Arc::default(),
        }
    }
}

impl Subscribed {
    /// Adds or removes `uri`; the listen stream is opened again only when the set changed.
    pub(crate) fn set(&self, uri: &str, subscribed: bool) {
        self.wanted.send_if_modified(|uris| {
            if subscribed {
                uris.insert(uri.to_owned())
            } else {
                uris.remove(uri)
            }
        });
    }

    /// The set wanted, moving with every change.
    pub(crate) fn watch(&self) -> watch::Receiver<BTreeSet<String>> {
        self.wanted.subscribe()
    }

    /// Whether listen streams name resources (`false` again once the server refuses streams).
    pub(crate) fn carry(&self, carried: bool) {
        self.carried.store(carried, Ordering::Release);
        if !carried {
            // Nothing will be named: no one waits for it.
            self.named.send_replace(BTreeSet::new());
        }
    }

    /// The provider acknowledged a stream naming `uris`.
    pub(crate) fn acknowledged(&self, uris: BTreeSet<String>) {
        self.named.send_replace(uris);
    }

    /// Waits, at most `wait`, until a stream naming `uri` is acknowledged; `true` when it was
    /// (at once when no stream names resources: there is nothing to wait for).
    pub(crate) async fn until_named(&self, uri: &str, wait: Duration) -> bool {
        if !self.carried.load(Ordering::Acquire) {
            return true;
        }
        let mut named = self.named.subscribe();
        let named = named.wait_for(|uris| uris.contains(uri));
        matches!(tokio::time::timeout(wait, named).await, Ok(Ok(_)))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stateless_request_should_carry_the_context_and_the_callers_capabilities() {
        let revision = Revision::stateless("2026-07-28".into(), json!({}), None);
        let mut params = json!({"name": "t", "_meta": {"progressToken": "capstan-1"}});
        revision.stamp(
            &mut params,
            Some(&json!({"elicitation": {}})),
            Some(&json!("debug")),
        );
        let meta = &params["_meta"];
        assert_eq!(meta["progressToken"], "capstan-1");
        assert_eq!(
            meta["io.modelcontextprotocol/protocolVersion"],
            "2026-07-28"
        );
        assert_eq!(meta[CLIENT_CAPABILITIES], json!({"elicitation": {}}));
        assert_eq!(
            meta["io.modelcontextprotocol/clientInfo"]["name"],
            "capstan-sidecar"
        );
        assert_eq!(meta[LOG_LEVEL], "debug");
        let session = Revision::Session {
            id: Some("s".into()),
            version: "2025-11-25".into(),
        };
        let mut untouched = json!({"name": "t"});
        session.stamp(&mut untouched, None, Some(&json!("debug")));
        assert_eq!(untouched, json!({"name": "t"}));
    }
}
