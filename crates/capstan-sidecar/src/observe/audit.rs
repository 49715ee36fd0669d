//! The audit trail: one JSON line per `tools/call`, refused or served, naming the caller as the
//! project's plane authenticated them, the tool, a digest of the arguments (never a value), the
//! authorization and limit decisions, and the outcome (docs/audit.md).

use std::io;

use hmac::{Hmac, Mac as _};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use sha2::{Digest as _, Sha256};

use super::metering::rfc3339;
use super::sink::LineSink;

/// How an audit line names the caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AuditNames {
    /// The user name and uid, as the project's plane authenticated the caller's token.
    #[default]
    Names,
    /// A digest of the user name and uid, keyed with a key this sidecar draws at start: the
    /// lines of one person link up within the sidecar's life, and name nobody.
    Digest,
    /// No name at all.
    Off,
}

/// Who the caller is, as far as it could be told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Named {
    /// As the project's plane authenticated the caller's token (a SelfSubjectReview).
    User {
        /// The user name.
        username: String,
        /// The uid; empty when the authenticator gives none.
        uid: String,
    },
    /// Why no name could be told: no token, no plane to ask, or the plane's answer.
    Unknown(&'static str),
}

/// What a call's authorization decided (docs/authorization.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Authorization {
    /// Per-tool authorization is off: every admitted caller uses everything.
    Off,
    /// The caller may use the tool (or it is a built-in).
    Allowed,
    /// The caller may not: refused as a tool that does not exist.
    Withheld,
    /// The plane could not be asked: refused.
    Undecided,
    /// The request named another caller's session: refused before anything was decided.
    AnotherCaller,
}

impl Authorization {
    /// The decision as lines and spans spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Allowed => "allowed",
            Self::Withheld => "withheld",
            Self::Undecided => "undecided",
            Self::AnotherCaller => "another_caller",
        }
    }
}

/// One audit line.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent<'a> {
    /// When the call was answered (RFC 3339).
    #[serde(serialize_with = "rfc3339")]
    pub time: Timestamp,
    /// The caller's project.
    pub project: &'a str,
    /// The user name (`names`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<&'a str>,
    /// The uid (`names`, when there is one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<&'a str>,
    /// The keyed digest of user name and uid (`digest`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_digest: Option<String>,
    /// Why the caller is not named, when it could not be told.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unnamed: Option<&'static str>,
    /// The tool called, as the caller named it.
    pub tool: &'a str,
    /// `sha256:` of the arguments' RFC 8785 canonical JSON: equal arguments, equal digests.
    pub arguments_digest: &'a str,
    /// What authorization decided; absent when the call was refused before it was asked (a
    /// task past its time limit, a retry whose state did not verify).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
    /// What the provider server's limits decided: `passed`, the limit that refused the call,
    /// or `none` when the call reached no limit (no provider, or none set).
    pub limit: &'a str,
    /// The provider tool the call reached, when it reached one (a routed call's winner).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_tool: Option<&'a str>,
    /// `ok`, `tool_error`, `input_required`, an error kind, or `unknown_tool` (the protocol
    /// error of a tool that does not exist or is withheld).
    pub outcome: &'a str,
    /// How long the call took, in milliseconds.
    pub duration_ms: f64,
}

/// Where audit lines go, and how they name callers.
pub struct Audit {
    sink: LineSink,
    names: AuditNames,
    key: [u8; 32],
}

impl Audit {
    /// An audit trail to `sink` (`off`, `stdout`, `stderr`, or a file), naming callers as
    /// `names` says.
    pub fn open(sink: &str, names: AuditNames) -> io::Result<Self> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(|e| io::Error::other(e.to_string()))?;
        Ok(Self {
            sink: LineSink::open(sink, "audit event")?,
            names,
            key,
        })
    }

    /// Whether lines are written at all.
    pub fn is_on(&self) -> bool {
        self.sink.is_on()
    }

    /// Whether callers' names are asked for: only when lines are written and name them.
    pub fn wants_names(&self) -> bool {
        self.sink.is_on() && self.names != AuditNames::Off
    }

    /// Writes `event` with the caller named as configured.
    pub fn record<'a>(&self, mut event: AuditEvent<'a>, named: Option<&'a Named>) {
        if !self.sink.is_on() {
            return;
        }
        match (self.names, named) {
            (AuditNames::Names, Some(Named::User { username, uid })) => {
                event.user = Some(username);
                event.uid = (!uid.is_empty()).then_some(uid.as_str());
            }
            (AuditNames::Digest, Some(Named::User { username, uid })) => {
                event.user_digest = Some(self.digest(username, uid));
            }
            (AuditNames::Off, _) => {}
            (_, Some(Named::Unknown(why))) => event.unnamed = Some(why),
            (_, None) => event.unnamed = Some("another caller's session"),
        }
        self.sink.write(&event);
    }

    fn digest(&self, username: &str, uid: &str) -> String {
        // The key is 32 bytes, which HMAC takes whatever its length.
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.key) else {
            return String::new();
        };
        mac.update(username.as_bytes());
        mac.update(&[0]);
        mac.update(uid.as_bytes());
        let digest = mac.finalize().into_bytes();
        format!("hmac-sha256:{}", hex(&digest))
    }
}

/// The digest of a call's arguments: `sha256:` of their RFC 8785 canonical JSON, so arguments
/// that differ only in key order or number spelling digest alike.
pub fn arguments_digest(arguments: Option<&serde_json::Map<String, serde_json::Value>>) -> String {
    use canon_json::CanonJsonSerialize as _;
    let empty = serde_json::Map::new();
    let canonical = arguments
        .unwrap_or(&empty)
        .to_canon_json_vec()
        .unwrap_or_default();
    format!("sha256:{}", hex(&Sha256::digest(&canonical)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn arguments_should_digest_alike_whatever_their_key_order_and_never_show() {
        let a: serde_json::Value = serde_json::json!({"name": "orders", "limit": 10});
        let b: serde_json::Value = serde_json::json!({"limit": 10.0, "name": "orders"});
        let c: serde_json::Value = serde_json::json!({"name": "payments", "limit": 10});
        let digest = |v: &serde_json::Value| arguments_digest(v.as_object());
        assert_eq!(digest(&a), digest(&b));
        assert_ne!(digest(&a), digest(&c));
        assert!(!digest(&a).contains("orders"));
        assert_eq!(arguments_digest(None), digest(&serde_json::json!({})));
    }

    fn line(names: AuditNames, named: &Named) -> serde_json::Value {
        let path =
            std::env::temp_dir().join(format!("capstan-audit-{}-{names:?}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let audit = Audit::open(path.to_str().unwrap(), names).unwrap();
        audit.record(
            AuditEvent {
                time: Timestamp::now(),
                project: "acme",
                user: None,
                uid: None,
                user_digest: None,
                unnamed: None,
                tool: "streamco__streams_get",
                arguments_digest: "sha256:00",
                authorization: Some(Authorization::Allowed),
                limit: "passed",
                provider_tool: Some("streamco__streams_get"),
                outcome: "ok",
                duration_ms: 1.0,
            },
            Some(named),
        );
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        serde_json::from_str(text.trim_end()).unwrap()
    }

    #[test]
    fn names_should_be_written_digested_or_left_out_as_configured() {
        let alice = Named::User {
            username: "alice".into(),
            uid: "uid-alice".into(),
        };
        let named = line(AuditNames::Names, &alice);
        assert_eq!(named["user"], "alice");
        assert_eq!(named["uid"], "uid-alice");
        assert_eq!(named["authorization"], "allowed");
        let digested = line(AuditNames::Digest, &alice);
        assert_eq!(digested.get("user"), None);
        let digest = digested["userDigest"].as_str().unwrap();
        assert!(digest.starts_with("hmac-sha256:") && !digest.contains("alice"));
        let off = line(AuditNames::Off, &alice);
        assert_eq!(off.get("user"), None);
        assert_eq!(off.get("userDigest"), None);
        assert_eq!(off["tool"], "streamco__streams_get");
        let unknown = line(AuditNames::Names, &Named::Unknown("no token"));
        assert_eq!(unknown["unnamed"], "no token");
    }
}
