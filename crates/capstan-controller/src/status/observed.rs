//! A condition as the watch cache keeps it, compactly.
//!
//! The cache holds every object's status for as long as the object exists. As k8s-openapi's
//! `Condition` each would be four heap strings and a time — ~0.5 KB a binding, the largest
//! share of the controller's memory at 100,000 bindings after the scheduler's. Almost every
//! type, status, reason and message Capstan writes is one of a few fixed words and sentences:
//! those are held as static strings, and a binding's conditions that repeat one message
//! (`Ready` and `Stalled` carry their cause's) share it.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use capstan_api::conditions::{accepted, composed, ready, reconciling, stalled};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Deserializer};

/// The fixed messages of the conditions the controller writes.
pub mod messages {
    /// `Accepted` True.
    pub const SPEC_VALID: &str = "the spec is valid";
    /// `Composed` of a spec not accepted.
    pub const NOTHING_COMPOSED: &str = "the spec is not accepted; nothing of it is composed";
    /// `Composed` Unknown, probing off.
    pub const PROBING_OFF: &str = "probing is off (--probe-interval-seconds 0)";
    /// `Composed` Unknown, before this generation's first probe.
    pub const FIRST_PROBE_PENDING: &str = "the first probe of this generation is pending";
    /// `Ready` True, nothing to compose.
    pub const TAKES_EFFECT: &str = "the spec is accepted and takes effect";
    /// `Ready` True, composed.
    pub const ACCEPTED_AND_COMPOSED: &str = "the spec is accepted and composed";
    /// `Ready` True, probing off.
    pub const NOT_PROBED: &str =
        "the spec is accepted; its composition is not probed (--probe-interval-seconds 0)";

    /// Every one of them.
    pub(crate) const ALL: &[&str] = &[
        SPEC_VALID,
        NOTHING_COMPOSED,
        PROBING_OFF,
        FIRST_PROBE_PENDING,
        TAKES_EFFECT,
        ACCEPTED_AND_COMPOSED,
        NOT_PROBED,
    ];
}

/// A condition's type, status, reason or message: one of the words and sentences Capstan
/// writes, or any other text, held once.
#[derive(Clone)]
pub enum Text {
    /// A known word or sentence.
    Known(&'static str),
    /// Any other text.
    Other(Arc<str>),
}

/// The words and sentences held as static strings; anything else is stored as read.
const WORDS: &[&str] = &[
    "True",
    "False",
    "Unknown",
    "",
    accepted::TYPE,
    accepted::VALIDATED,
    accepted::VALIDATION_FAILED,
    accepted::LIMIT_EXCEEDED,
    accepted::CONFLICT,
    composed::TYPE,
    composed::COMPOSED,
    composed::COMPOSITION_DEGRADED,
    composed::NOT_PROBED,
    composed::NOT_ACCEPTED,
    ready::TYPE,
    ready::READY,
    stalled::TYPE,
    reconciling::TYPE,
];

impl Text {
    /// `text` as a known word, or held as its own.
    fn new(text: &str) -> Self {
        WORDS
            .iter()
            .chain(messages::ALL)
            .find(|word| **word == text)
            .map_or_else(|| Self::Other(text.into()), |word| Self::Known(word))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Known(word) => word,
            Self::Other(text) => text,
        }
    }
}

impl Default for Text {
    fn default() -> Self {
        Self::Known("")
    }
}

impl Deref for Text {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for Text {
    fn from(text: &str) -> Self {
        Self::new(text)
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Text {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<Text> for &str {
    fn eq(&self, other: &Text) -> bool {
        *self == other.as_str()
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
        Ok(Self::new(&text))
    }
}

/// One condition of a status as the cache shows it: what the transition test and the apply
/// body read.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedCondition {
    /// The condition type.
    #[serde(rename = "type")]
    pub type_: Text,
    /// `True`, `False` or `Unknown`.
    pub status: Text,
    /// Its reason.
    #[serde(default)]
    pub reason: Text,
    /// Its message.
    #[serde(default)]
    pub message: Text,
    /// The generation it describes.
    #[serde(default)]
    pub observed_generation: Option<i64>,
    /// When its status last changed.
    pub last_transition_time: Time,
}

/// Makes conditions that carry the same text as an earlier one share it.
pub(crate) fn share_messages(conditions: &mut [ObservedCondition]) {
    for index in 1..conditions.len() {
        let (earlier, rest) = conditions.split_at_mut(index);
        let condition = &mut rest[0];
        if let Text::Other(message) = &condition.message
            && let Some(same) = earlier
                .iter()
                .find(|c| matches!(&c.message, Text::Other(m) if m == message))
        {
            condition.message = same.message.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_words_should_be_static_and_other_text_kept_as_read() {
        assert!(matches!(Text::new("Accepted"), Text::Known("Accepted")));
        assert!(matches!(
            Text::new("the spec is valid"),
            Text::Known("the spec is valid")
        ));
        let other = Text::new("spec.tools[0]: must not be empty");
        assert!(matches!(&other, Text::Other(_)));
        assert_eq!(other, "spec.tools[0]: must not be empty");
    }

    #[test]
    fn conditions_repeating_a_message_should_share_it() {
        let condition = |type_: &str, message: &str| ObservedCondition {
            type_: type_.into(),
            status: "False".into(),
            reason: "ValidationFailed".into(),
            message: message.into(),
            observed_generation: Some(1),
            last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        };
        let mut conditions = vec![
            condition("Accepted", "spec.x: wrong"),
            condition("Ready", "spec.x: wrong"),
            condition("Stalled", "spec.x: wrong"),
        ];
        share_messages(&mut conditions);
        let shared = |c: &ObservedCondition| match &c.message {
            Text::Other(message) => Arc::as_ptr(message).cast::<u8>(),
            Text::Known(_) => std::ptr::null(),
        };
        assert_eq!(shared(&conditions[0]), shared(&conditions[1]));
        assert_eq!(shared(&conditions[0]), shared(&conditions[2]));
        assert_eq!(conditions[2].message, "spec.x: wrong");
    }
}
