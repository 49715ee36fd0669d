//! The JSON-RPC message of an MCP POST, parsed once into what the sidecar reads of it.
//!
//! The gate and the edge read a message's method, its id and a few of its params (`_meta`'s
//! revision and trace context, a tool's or prompt's name, a cancelled request's id);
//! `edge/tools_call.rs` takes a `tools/call`'s params whole, and `edge/methods.rs` any other's
//! as their type. So a message is parsed into an [`Envelope`], not a `Value` tree: the params
//! of a `tools/call` go straight into rmcp's `CallToolRequestParams` (its arguments and
//! `_meta` the only maps built), other params into a `Value` (rare beside calls: an
//! `initialize` and a `tools/list` a session, notifications). Building the tree and then typed
//! params from it would be about a fifth of the sidecar's instructions per forwarded call. A
//! batch, or a body that is no object, stays a `Value`: only whether it opens with
//! `initialize` is read of it.
//!
//! No object of the body names a member twice (`unique.rs` says why): the visitors here are
//! hand-written because a derived one skips the members it does not know unchecked. Every
//! member the envelope does not keep is still read through [`Unique`].

use std::collections::HashSet;
use std::fmt;

use rmcp::model::{CallToolRequestParams, MetaObject, RequestMetaObject};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use self::unique::{Unique, UniqueVisitor};

mod unique;

/// The `_meta` member naming a request's revision (2026-07-28 on).
pub const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";

/// The method whose params are parsed into their type here.
const TOOLS_CALL: &str = "tools/call";

/// The JSON-RPC message of an MCP POST, parsed once by the gate.
#[derive(Clone, Debug)]
pub enum Message {
    /// One request, notification or answer.
    Single(Box<Envelope>),
    /// A batch, or a body that is no object.
    Other(Value),
}

/// What the sidecar reads of one message.
#[derive(Clone, Debug, Default)]
pub struct Envelope {
    /// Its `id`, if it has the member (`null` included).
    pub id: Option<Value>,
    /// Its `method`, if that is a string.
    pub method: Option<String>,
    /// Its `params`.
    pub params: Params,
    /// The whole message as a `Value`, only when it is an answer (it has a `result` or an
    /// `error`): the caller's rare reply to a provider's question, handed on as it is.
    pub answer: Option<Value>,
}

/// A message's params.
#[derive(Clone, Debug, Default)]
pub enum Params {
    /// The message has none.
    #[default]
    Absent,
    /// A `tools/call`'s, typed.
    Call(Box<CallToolRequestParams>),
    /// Any other method's, or a `tools/call`'s that do not fit their type (answered with the
    /// type's own error, `edge/tools_call.rs`).
    Other(Value),
}

impl Message {
    /// Parses a body. A member named twice anywhere is an error.
    pub fn parse(bytes: &[u8]) -> Result<Message, serde_json::Error> {
        let mut message = serde_json::from_slice::<Message>(bytes)?;
        if let Message::Single(envelope) = &mut message
            && envelope.answer.is_some()
        {
            // Rare (the caller answering a provider's question), so parsed a second time whole.
            envelope.answer = Some(serde_json::from_slice::<Unique>(bytes)?.0);
        }
        Ok(message)
    }

    /// The one message, if the body is one.
    pub fn single(&self) -> Option<&Envelope> {
        match self {
            Message::Single(envelope) => Some(envelope),
            Message::Other(_) => None,
        }
    }

    /// Whether it is an `initialize` request (alone or first in a batch).
    pub fn is_initialize(&self) -> bool {
        match self {
            Message::Single(envelope) => envelope.method.as_deref() == Some("initialize"),
            Message::Other(Value::Array(items)) => {
                items.first().is_some_and(|m| m["method"] == "initialize")
            }
            Message::Other(_) => false,
        }
    }
}

impl Envelope {
    /// Its method, if it has one.
    pub fn method(&self) -> Option<&str> {
        self.method.as_deref()
    }

    /// Its params' `_meta` object.
    pub fn meta(&self) -> Option<&Map<String, Value>> {
        match &self.params {
            Params::Call(params) => params.meta.as_ref().map(|meta| &meta.0.0),
            Params::Other(params) => params.get("_meta").and_then(Value::as_object),
            Params::Absent => None,
        }
    }

    /// A string member of its params' `_meta`.
    pub fn meta_str(&self, key: &str) -> Option<&str> {
        self.meta()?.get(key)?.as_str()
    }

    /// A member of its params (a `tools/call`'s typed params answer only for `name`).
    pub fn param(&self, key: &str) -> Option<&str> {
        match &self.params {
            Params::Call(params) => (key == "name").then_some(&*params.name),
            Params::Other(params) => params.get(key).and_then(Value::as_str),
            Params::Absent => None,
        }
    }

    /// Its params as a `Value` (a `tools/call`'s typed ones are not).
    pub fn untyped_params(&self) -> Option<&Value> {
        match &self.params {
            Params::Other(params) => Some(params),
            Params::Call(_) | Params::Absent => None,
        }
    }
}

/// A visitor's methods for every value that is no object: read as a `Value` (`unique.rs`) and
/// wrapped by `$wrap`.
macro_rules! not_an_object {
    ($wrap:expr) => {
        fn visit_bool<E: de::Error>(self, value: bool) -> Result<Self::Value, E> {
            UniqueVisitor.visit_bool(value).map($wrap)
        }

        fn visit_i64<E: de::Error>(self, value: i64) -> Result<Self::Value, E> {
            UniqueVisitor.visit_i64(value).map($wrap)
        }

        fn visit_u64<E: de::Error>(self, value: u64) -> Result<Self::Value, E> {
            UniqueVisitor.visit_u64(value).map($wrap)
        }

        fn visit_f64<E: de::Error>(self, value: f64) -> Result<Self::Value, E> {
            UniqueVisitor.visit_f64(value).map($wrap)
        }

        fn visit_str<E: de::Error>(self, value: &str) -> Result<Self::Value, E> {
            UniqueVisitor.visit_str(value).map($wrap)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            UniqueVisitor.visit_unit().map($wrap)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, items: A) -> Result<Self::Value, A::Error> {
            UniqueVisitor.visit_seq(items).map($wrap)
        }
    };
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(MessageVisitor)
    }
}

struct MessageVisitor;

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = Message;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC message")
    }

    not_an_object!(Message::Other);

    fn visit_map<A: MapAccess<'de>>(self, mut members: A) -> Result<Message, A::Error> {
        let mut envelope = Envelope::default();
        let mut seen = Seen::default();
        let mut raw_params: Option<Box<RawValue>> = None;
        let mut answers = false;
        while let Some(name) = members.next_key::<Name>()? {
            seen.first(&name)?;
            match name {
                Name::Known("id", _) => envelope.id = Some(members.next_value::<Unique>()?.0),
                Name::Known("method", _) => {
                    if let Unique(Value::String(method)) = members.next_value()? {
                        envelope.method = Some(method);
                    }
                }
                // Clients send the method first, so a call's params are typed as they are read.
                Name::Known("params", _) if envelope.method() == Some(TOOLS_CALL) => {
                    envelope.params = members.next_value::<CallParams>()?.0;
                }
                Name::Known("params", _) => raw_params = Some(members.next_value()?),
                Name::Known(name, _) => {
                    members.next_value::<Unique>()?;
                    answers |= name == "result" || name == "error";
                }
                Name::Other(_) => drop(members.next_value::<Unique>()?),
            }
        }
        if let Some(raw) = raw_params {
            envelope.params = if envelope.method() == Some(TOOLS_CALL) {
                serde_json::from_str::<CallParams>(raw.get()).map(|CallParams(params)| params)
            } else {
                serde_json::from_str::<Unique>(raw.get())
                    .map(|Unique(params)| Params::Other(params))
            }
            .map_err(de::Error::custom)?;
        }
        // Marked here, filled by `Message::parse` from the bytes.
        envelope.answer = answers.then_some(Value::Null);
        Ok(Message::Single(Box::new(envelope)))
    }
}

/// The name of a member: one the visitor reads, or another (checked only for repeats).
enum Name {
    /// A name the visitors read, with its bit in [`Seen`].
    Known(&'static str, u16),
    Other(String),
}

impl Name {
    /// The envelope's members, each a bit of [`Seen`].
    const ENVELOPE: [&'static str; 6] = ["jsonrpc", "id", "method", "params", "result", "error"];
    /// A `tools/call`'s params.
    const CALL: [&'static str; 5] = [
        "name",
        "arguments",
        "_meta",
        "inputResponses",
        "requestState",
    ];
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NameVisitor;
        impl Visitor<'_> for NameVisitor {
            type Value = Name;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }

            fn visit_str<E>(self, name: &str) -> Result<Name, E> {
                let mut known = Name::ENVELOPE.iter().chain(&Name::CALL).enumerate();
                Ok(match known.find(|(_, k)| **k == name) {
                    Some((i, k)) => Name::Known(k, 1 << i),
                    None => Name::Other(name.to_owned()),
                })
            }
        }
        deserializer.deserialize_str(NameVisitor)
    }
}

/// The names an object has named so far: the known ones as bits, any other in a set (made
/// only when one comes).
#[derive(Default)]
struct Seen {
    known: u16,
    others: Option<HashSet<String>>,
}

impl Seen {
    /// Notes `name`; an error if the object named it before.
    fn first<E: de::Error>(&mut self, name: &Name) -> Result<(), E> {
        let first = match name {
            Name::Known(_, bit) => {
                let first = self.known & bit == 0;
                self.known |= bit;
                first
            }
            Name::Other(other) => self.others.get_or_insert_default().insert(other.clone()),
        };
        if first {
            Ok(())
        } else {
            Err(E::custom("an object names a member twice"))
        }
    }
}

/// A `tools/call`'s params as read, each member checked for shape only afterwards: a member of
/// the wrong type makes them [`Params::Other`], for the type's own error.
#[derive(Default)]
struct CallFields {
    name: Option<Value>,
    arguments: Option<Value>,
    meta: Option<Value>,
    input_responses: Option<Value>,
    request_state: Option<Value>,
}

/// A `tools/call`'s params, typed if they fit (params that are no object are
/// [`Params::Other`] too).
struct CallParams(Params);

impl<'de> Deserialize<'de> for CallParams {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(CallParamsVisitor)
            .map(CallParams)
    }
}

struct CallParamsVisitor;

impl<'de> Visitor<'de> for CallParamsVisitor {
    type Value = Params;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a tools/call's params")
    }

    not_an_object!(Params::Other);

    fn visit_map<A: MapAccess<'de>>(self, mut members: A) -> Result<Params, A::Error> {
        let mut fields = CallFields::default();
        let mut seen = Seen::default();
        while let Some(name) = members.next_key::<Name>()? {
            seen.first(&name)?;
            let Unique(value) = members.next_value()?;
            let slot = match name {
                Name::Known("name", _) => &mut fields.name,
                Name::Known("arguments", _) => &mut fields.arguments,
                Name::Known("_meta", _) => &mut fields.meta,
                Name::Known("inputResponses", _) => &mut fields.input_responses,
                Name::Known("requestState", _) => &mut fields.request_state,
                Name::Known(..) | Name::Other(_) => continue,
            };
            *slot = Some(value);
        }
        Ok(fields.into_params())
    }
}

impl CallFields {
    /// Typed, if every member has its type's shape (as rmcp's derived parse reads them: an
    /// optional member may be `null`); else as a `Value` of the members read.
    fn into_params(self) -> Params {
        let optional = |value: &Option<Value>, fits: fn(&Value) -> bool| match value {
            None | Some(Value::Null) => true,
            Some(value) => fits(value),
        };
        let input_responses = match self.input_responses {
            None | Some(Value::Null) => Ok(None),
            Some(value) => serde_json::from_value(value.clone())
                .map(Some)
                .map_err(|_| value),
        };
        let fits = matches!(self.name, Some(Value::String(_)))
            && optional(&self.arguments, Value::is_object)
            && optional(&self.meta, Value::is_object)
            && optional(&self.request_state, Value::is_string)
            && input_responses.is_ok();
        if !fits {
            let mut params = Map::new();
            let members = [
                ("name", self.name),
                ("arguments", self.arguments),
                ("_meta", self.meta),
                ("inputResponses", input_responses.err()),
                ("requestState", self.request_state),
            ];
            for (name, value) in members {
                if let Some(value) = value {
                    params.insert(name.to_owned(), value);
                }
            }
            return Params::Other(Value::Object(params));
        }
        let object = |value: Option<Value>| match value {
            Some(Value::Object(map)) => Some(map),
            _ => None,
        };
        let mut params = CallToolRequestParams::default();
        if let Some(Value::String(name)) = self.name {
            params.name = name.into();
        }
        params.arguments = object(self.arguments);
        params.meta = object(self.meta).map(|meta| RequestMetaObject(MetaObject(meta)));
        params.input_responses = input_responses.ok().flatten();
        if let Some(Value::String(state)) = self.request_state {
            params.request_state = Some(state);
        }
        Params::Call(Box::new(params))
    }
}

#[cfg(test)]
mod tests;
