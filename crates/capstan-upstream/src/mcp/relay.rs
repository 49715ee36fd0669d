//! A call's own traffic between the caller and the provider: the caller's `_meta` going up,
//! the provider's progress, log messages and questions about the call coming back, mapped
//! through Capstan's own ids (docs/mcp-surface.md).
//!
//! The provider never sees the caller's progress token: it gets one Capstan mints for the call
//! (unique on the upstream session, like the request id), and only a progress notification
//! carrying that token is relayed — rewritten to the caller's token —, so a provider cannot
//! address another caller's call, or another call of the same caller. Log messages
//! (`notifications/message`) sent on the call's stream are relayed as they are. A request the
//! provider sends on the call's stream (`sampling/createMessage`, `elicitation/create`,
//! `roots/list`) goes to the caller when it declared the capability — the caller's side gives
//! it an id of its own and hands back the caller's answer, which goes up under the provider's
//! id —, and is answered at once with -32601 otherwise: nothing waits for an answer that would
//! never come.

use rmcp::model::{
    ClientCapabilities, InputResponses, ProgressToken, RequestMetaObject, ServerNotification,
    ServerRequest,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::oneshot;

mod question_clock;

pub use question_clock::QuestionClock;
pub(crate) use question_clock::within_call_time;

use super::origin::Origin;
use crate::trace_context::sanitize_meta;

/// How long a provider's question may wait for the caller's answer. 300 s: a person reads and
/// answers a form; the time spent waiting does not count against the call's own time, and the
/// caller's client ends the wait sooner by cancelling the call (its own request timeout).
pub const DEFAULT_QUESTION_TIMEOUT: Duration = Duration::from_secs(300);

/// What goes to the caller's side of one call.
#[derive(Debug)]
pub enum ToCaller {
    /// A notification about the call (progress on the caller's token, a log message).
    Notification(ServerNotification),
    /// A request of the provider's for the caller. The caller's side sends it with an id of
    /// its own and puts the caller's JSON-RPC response (its `result` or `error`) in `answer`.
    Request {
        /// The request, without an id.
        request: ServerRequest,
        /// Where the caller's response goes.
        answer: oneshot::Sender<Value>,
    },
}

/// The caller's side of one call (the sidecar turns what arrives into events on the caller's
/// stream). Bounded: a caller that reads slowly slows the reading of the provider's stream,
/// never the sidecar's memory.
pub type CallerSide = tokio::sync::mpsc::Sender<ToCaller>;

/// Request `_meta` members of the 2026-07-28 revision that describe the connection the request
/// came on, not the request: never forwarded to a provider.
const CONNECTION_MEMBERS: &[&str] = &[
    "io.modelcontextprotocol/protocolVersion",
    "io.modelcontextprotocol/clientInfo",
    "io.modelcontextprotocol/clientCapabilities",
];

/// The caller's `_meta` of a forwarded request that is not a tool call (`prompts/get`,
/// `resources/read`, …) as a provider may see it: without the members describing the caller's
/// connection, without a progress token (nothing of such a request is relayed back), and with
/// only valid, bounded trace context (`trace_context::sanitize_meta`).
pub(crate) fn forwardable_meta(params: &mut Value) {
    let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) else {
        return;
    };
    for member in CONNECTION_MEMBERS.iter().chain(&["progressToken"]) {
        meta.remove(*member);
    }
    sanitize_meta(meta);
    if meta.is_empty()
        && let Some(params) = params.as_object_mut()
    {
        params.remove("_meta");
    }
}

/// How many relayed messages may wait for the caller's side of one call.
pub const RELAY_CAPACITY: usize = 64;

/// What the caller can be asked: the capabilities its client declared at `initialize`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientAsks {
    /// `sampling`: `sampling/createMessage`.
    pub sampling: bool,
    /// `elicitation` (form mode; an empty object means form).
    pub elicitation_form: bool,
    /// `elicitation.url`: URL-mode `elicitation/create`.
    pub elicitation_url: bool,
    /// `roots`: `roots/list`.
    pub roots: bool,
}

impl ClientAsks {
    /// What a client declaring `capabilities` (its `initialize` capabilities, as JSON) can be
    /// asked.
    pub fn from_capabilities(capabilities: &Value) -> Self {
        let elicitation = capabilities.get("elicitation").filter(|e| e.is_object());
        let declared = |mode: &str| elicitation.is_some_and(|e| e.get(mode).is_some());
        Self {
            sampling: capabilities.get("sampling").is_some_and(Value::is_object),
            // A client declaring `elicitation: {}` supports form mode (the 2025-11-25 rule).
            elicitation_form: elicitation.is_some_and(|e| {
                declared("form") || e.as_object().is_some_and(serde_json::Map::is_empty)
            }),
            elicitation_url: declared("url"),
            roots: capabilities.get("roots").is_some_and(Value::is_object),
        }
    }

    /// The capabilities a client that can be asked this declares: what an upstream session
    /// opened for the caller declares in its place (the inverse of `from_capabilities`).
    pub(crate) fn declared(self) -> ClientCapabilities {
        let mut declared = json!({});
        if self.sampling {
            declared["sampling"] = json!({});
        }
        if self.roots {
            declared["roots"] = json!({});
        }
        if self.elicitation_form || self.elicitation_url {
            declared["elicitation"] = json!({});
            if self.elicitation_form {
                declared["elicitation"]["form"] = json!({});
            }
            if self.elicitation_url {
                declared["elicitation"]["url"] = json!({});
            }
        }
        serde_json::from_value(declared).unwrap_or_default()
    }

    /// Whether the caller can be asked `request` (a JSON-RPC request of the provider's).
    fn allow(&self, request: &Value) -> bool {
        match request["method"].as_str() {
            Some("sampling/createMessage") => self.sampling,
            Some("elicitation/create") => match request["params"]["mode"].as_str() {
                Some("url") => self.elicitation_url,
                _ => self.elicitation_form,
            },
            Some("roots/list") => self.roots,
            _ => false,
        }
    }
}

/// What a call carries besides its tool and arguments: the caller's `_meta`, its side of the
/// call (none: the provider's messages are read and dropped) and what it can be asked.
#[derive(Debug, Default)]
pub struct CallTraffic {
    /// The caller's request `_meta`, forwarded with its progress token replaced.
    pub meta: Option<RequestMetaObject>,
    /// The caller's side of the call.
    pub caller: Option<CallerSide>,
    /// What the caller can be asked.
    pub asks: ClientAsks,
    /// A 2026-07-28 caller's answers to the provider's `input_required` result, sent with the
    /// call again (`inputResponses`).
    pub input_responses: Option<InputResponses>,
    /// The provider's `requestState` the caller sends back with them: opaque to Capstan, never
    /// read, only carried.
    pub request_state: Option<String>,
    /// Who the call's provider is: its requests and log messages reach the caller in its name
    /// (`mcp/origin.rs`). Set by the composition once the call's upstream is known.
    pub origin: Option<Arc<Origin>>,
    /// How long a provider's question waits for the caller's answer (the composition's
    /// `question_timeout`).
    pub question_timeout: Duration,
    /// The time the call's questions waited for answers: not the call's own time.
    pub asking: QuestionClock,
}

impl CallTraffic {
    /// Traffic with the caller's `_meta`, side and capabilities.
    pub fn new(
        meta: Option<RequestMetaObject>,
        caller: Option<CallerSide>,
        asks: ClientAsks,
    ) -> Self {
        Self {
            meta,
            caller,
            asks,
            input_responses: None,
            request_state: None,
            origin: None,
            question_timeout: DEFAULT_QUESTION_TIMEOUT,
            asking: QuestionClock::default(),
        }
    }

    /// The same traffic, carrying a retry's `inputResponses` and `requestState`.
    #[must_use]
    pub fn retrying(
        mut self,
        input_responses: Option<InputResponses>,
        request_state: Option<String>,
    ) -> Self {
        self.input_responses = input_responses;
        self.request_state = request_state;
        self
    }

    /// Whether the caller can take an `input_required` result: a 2026-07-28 caller (its
    /// request carries its capabilities). A session-revision caller is asked mid-call instead.
    pub fn takes_input(&self) -> bool {
        self.caller_capabilities().is_some()
    }

    /// The capabilities a 2026-07-28 caller declared on this request (its `_meta`), if it did:
    /// what a provider in that revision may ask of it.
    pub(crate) fn caller_capabilities(&self) -> Option<&Value> {
        self.meta
            .as_ref()?
            .0
            .0
            .get(super::revision::CLIENT_CAPABILITIES)
    }

    /// The caller's progress token, if it asked for progress.
    fn caller_token(&self) -> Option<ProgressToken> {
        self.meta.as_ref()?.get_progress_token()
    }

    /// The `_meta` sent to the provider: the caller's members, its progress token replaced by
    /// `minted` — or left out when the caller asked for no progress —, without the members
    /// that describe the caller's own connection to Capstan (its revision, client and
    /// capabilities: the provider's session has its own), with only valid, bounded trace
    /// context (`trace_context::sanitize_meta`).
    pub(crate) fn upstream_meta(&self, minted: &str) -> Option<Value> {
        let meta = self.meta.as_ref()?;
        let mut members = meta.0.0.clone();
        for connection in CONNECTION_MEMBERS {
            members.remove(*connection);
        }
        sanitize_meta(&mut members);
        let asked = members.remove("progressToken").is_some();
        if asked {
            members.insert("progressToken".into(), Value::String(minted.to_owned()));
        }
        (!members.is_empty()).then_some(Value::Object(members))
    }

    /// What to do with `message`, a message on the call's stream that is not its answer.
    pub(crate) async fn relay(&self, message: &Value, minted: &str) -> Relayed {
        if is_request(message) {
            return match self.ask(message).await {
                Ok(answer) => Relayed::Answer(answer),
                Err(waited) => Relayed::Unanswered {
                    method: message["method"].as_str().unwrap_or_default().to_owned(),
                    waited,
                },
            };
        }
        let Some(method) = message.get("method").and_then(Value::as_str) else {
            return Relayed::Dropped;
        };
        let outgoing = match method {
            "notifications/progress" => {
                let ours = message["params"]["progressToken"].as_str() == Some(minted);
                let Some(token) = self.caller_token().filter(|_| ours) else {
                    return Relayed::Dropped;
                };
                let mut rewritten = message.clone();
                rewritten["params"]["progressToken"] =
                    serde_json::to_value(&token).unwrap_or(Value::Null);
                rewritten
            }
            "notifications/message" => {
                let mut said = message.clone();
                if let Some(origin) = &self.origin {
                    origin.attribute_log(&mut said["params"]);
                }
                said
            }
            _ => return Relayed::Dropped,
        };
        let (Some(caller), Ok(notification)) = (
            &self.caller,
            serde_json::from_value::<ServerNotification>(outgoing),
        ) else {
            return Relayed::Dropped;
        };
        // A caller that went away is not an error of the call.
        let _ = caller.send(ToCaller::Notification(notification)).await;
        Relayed::Sent
    }

    /// The response to a request of the provider's: the caller's answer when it can be asked,
    /// an error at once otherwise. Under the provider's own id either way. `Err` with the time
    /// waited when the caller did not answer within the question timeout.
    async fn ask(&self, request: &Value) -> Result<Value, Duration> {
        let id = request["id"].clone();
        let caller = self.caller.as_ref().filter(|_| self.asks.allow(request));
        let Some(caller) = caller else {
            return Ok(error_response(id, -32601, &not_available(request)));
        };
        let mut outgoing = json!({ "method": request["method"], "params": request["params"] });
        // Nothing reaches the person but in its asker's name.
        let Some(origin) = &self.origin else {
            return Ok(error_response(
                id,
                -32603,
                "Capstan could not tell who is asking",
            ));
        };
        if let Err(why) = origin.attribute(&mut outgoing) {
            return Ok(error_response(id, -32602, &why.to_string()));
        }
        let Ok(typed) = serde_json::from_value::<ServerRequest>(outgoing) else {
            return Ok(error_response(
                id,
                -32602,
                "the request's params are not what its method takes",
            ));
        };
        let (answer, answered) = oneshot::channel();
        let asked = ToCaller::Request {
            request: typed,
            answer,
        };
        if caller.send(asked).await.is_err() {
            return Ok(error_response(
                id,
                -32603,
                "the client behind Capstan went away",
            ));
        }
        self.asking.begin();
        let waited = Instant::now();
        let answered = tokio::time::timeout(self.question_timeout, answered).await;
        self.asking.end();
        let Ok(answered) = answered else {
            return Err(waited.elapsed());
        };
        Ok(match answered {
            Ok(response) => {
                let mut upstream = json!({ "jsonrpc": "2.0", "id": id });
                match (response.get("result"), response.get("error")) {
                    (Some(result), _) => upstream["result"] = result.clone(),
                    (None, Some(error)) => upstream["error"] = error.clone(),
                    (None, None) => {
                        return Ok(error_response(
                            id,
                            -32603,
                            "the client's answer has neither a result nor an error",
                        ));
                    }
                }
                upstream
            }
            Err(_) => error_response(id, -32603, "the client behind Capstan did not answer"),
        })
    }
}

/// What became of one message on a call's stream.
#[derive(Debug, PartialEq)]
pub(crate) enum Relayed {
    /// Handed to the caller's side.
    Sent,
    /// Not for the caller (another call's progress, a kind not relayed, no caller side).
    Dropped,
    /// A request of the provider's: this response goes up to it.
    Answer(Value),
    /// A request of the provider's the caller did not answer within the question timeout.
    Unanswered {
        /// What it asked.
        method: String,
        /// How long it waited.
        waited: Duration,
    },
}

/// Whether `message` is a JSON-RPC request (a method and an id).
pub(crate) fn is_request(message: &Value) -> bool {
    message.get("method").is_some() && message.get("id").is_some_and(|id| !id.is_null())
}

/// Why the caller cannot be asked `request`.
fn not_available(request: &Value) -> String {
    let method = request["method"].as_str().unwrap_or("");
    format!(
        "{method} is not available: the client behind Capstan did not declare the capability \
         it needs"
    )
}

/// A JSON-RPC error response to request `id`.
fn error_response(id: Value, code: i64, message: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": code, "message": message },
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_upstream_session_should_declare_exactly_what_its_caller_can_be_asked() {
        for bits in 0u8..16 {
            let asks = ClientAsks {
                sampling: bits & 1 != 0,
                elicitation_form: bits & 2 != 0,
                elicitation_url: bits & 4 != 0,
                roots: bits & 8 != 0,
            };
            let declared = serde_json::to_value(asks.declared()).unwrap();
            assert_eq!(ClientAsks::from_capabilities(&declared), asks, "{declared}");
        }
    }

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01";

    fn traffic(meta: Value) -> (CallTraffic, tokio::sync::mpsc::Receiver<ToCaller>) {
        let (sink, receiver) = tokio::sync::mpsc::channel(RELAY_CAPACITY);
        let meta = serde_json::from_value::<RequestMetaObject>(meta).unwrap();
        (
            CallTraffic::new(Some(meta), Some(sink), ClientAsks::default()),
            receiver,
        )
    }

    #[test]
    fn the_provider_should_see_a_minted_token_and_every_other_member() {
        let (traffic, _) = traffic(json!({
            "progressToken": 7,
            "traceparent": PARENT,
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        }));
        assert_eq!(
            traffic.upstream_meta("capstan-3"),
            Some(json!({"progressToken": "capstan-3", "traceparent": PARENT}))
        );
        let (no_progress, _) = traffic_without_token();
        assert_eq!(
            no_progress.upstream_meta("capstan-3"),
            Some(json!({"traceparent": PARENT}))
        );
        assert_eq!(CallTraffic::default().upstream_meta("capstan-3"), None);
    }

    fn traffic_without_token() -> (CallTraffic, tokio::sync::mpsc::Receiver<ToCaller>) {
        traffic(json!({"traceparent": PARENT}))
    }

    #[tokio::test]
    async fn only_progress_on_the_minted_token_should_reach_the_caller_under_its_own_token() {
        let (traffic, mut receiver) = traffic(json!({"progressToken": "caller-token"}));
        let progress = |token: &str| {
            json!({"jsonrpc": "2.0", "method": "notifications/progress",
                   "params": {"progressToken": token, "progress": 1, "total": 3}})
        };
        assert_eq!(
            traffic.relay(&progress("someone-else"), "capstan-9").await,
            Relayed::Dropped
        );
        assert_eq!(
            traffic.relay(&progress("capstan-9"), "capstan-9").await,
            Relayed::Sent
        );
        let Ok(ToCaller::Notification(sent)) = receiver.try_recv() else {
            panic!("no notification relayed");
        };
        let sent = serde_json::to_value(sent).unwrap();
        assert_eq!(sent["params"]["progressToken"], "caller-token");
        assert_eq!(sent["params"]["progress"], 1.0);
        assert!(receiver.try_recv().is_err(), "one message relayed, not two");
    }

    #[tokio::test]
    async fn a_request_the_caller_cannot_be_asked_should_be_refused_at_once_with_its_own_id() {
        let (traffic, mut receiver) = traffic(json!({}));
        let request = json!({"jsonrpc": "2.0", "id": 41, "method": "elicitation/create",
                             "params": {"message": "?", "requestedSchema": {"type": "object", "properties": {}}}});
        let Relayed::Answer(answer) = traffic.relay(&request, "capstan-1").await else {
            panic!("not answered");
        };
        assert_eq!(answer["id"], 41);
        assert_eq!(answer["error"]["code"], -32601);
        assert!(receiver.try_recv().is_err(), "the caller was asked");
    }

    #[tokio::test]
    async fn a_request_the_caller_can_be_asked_should_go_up_with_the_callers_answer() {
        let (mut traffic, mut receiver) = traffic(json!({}));
        traffic.asks = ClientAsks::from_capabilities(&json!({"elicitation": {}}));
        traffic.origin = Some(Arc::new(Origin {
            service: "s.example".into(),
            binding: "b".into(),
            server: "s".into(),
            url_hosts: Vec::new(),
        }));
        let request = json!({"jsonrpc": "2.0", "id": "p-7", "method": "elicitation/create",
                             "params": {"message": "?", "requestedSchema": {"type": "object", "properties": {}}}});
        let caller = tokio::spawn(async move {
            let Some(ToCaller::Request { request, answer }) = receiver.recv().await else {
                panic!("the caller was not asked");
            };
            let asked = serde_json::to_value(&request).unwrap();
            assert_eq!(asked["method"], "elicitation/create");
            assert_eq!(
                asked["params"]["message"],
                "s.example (binding b, MCP server s) asks: ?"
            );
            answer
                .send(json!({"jsonrpc": "2.0", "id": "capstan-ask-1", "result": {"action": "decline"}}))
                .unwrap();
        });
        let Relayed::Answer(answer) = traffic.relay(&request, "capstan-1").await else {
            panic!("not answered");
        };
        caller.await.unwrap();
        assert_eq!(
            answer,
            json!({"jsonrpc": "2.0", "id": "p-7", "result": {"action": "decline"}})
        );
    }

    #[tokio::test]
    async fn a_request_whose_asker_is_unknown_should_reach_nobody() {
        let (mut traffic, mut receiver) = traffic(json!({}));
        traffic.asks = ClientAsks::from_capabilities(&json!({"elicitation": {}}));
        let request = json!({"jsonrpc": "2.0", "id": 5, "method": "elicitation/create",
                             "params": {"message": "?", "requestedSchema": {"type": "object", "properties": {}}}});
        let Relayed::Answer(answer) = traffic.relay(&request, "capstan-1").await else {
            panic!("not answered");
        };
        assert_eq!(answer["error"]["code"], -32603);
        assert!(receiver.try_recv().is_err(), "the caller was asked");
    }

    #[test]
    fn url_elicitation_should_need_its_own_capability() {
        let form_only = ClientAsks::from_capabilities(&json!({"elicitation": {}}));
        let url = json!({"method": "elicitation/create", "params": {"mode": "url"}});
        let form = json!({"method": "elicitation/create", "params": {}});
        assert!(form_only.allow(&form));
        assert!(!form_only.allow(&url));
        let both = ClientAsks::from_capabilities(&json!({"elicitation": {"form": {}, "url": {}}}));
        assert!(both.allow(&url));
        assert!(!both.allow(&json!({"method": "sampling/createMessage"})));
    }
}
