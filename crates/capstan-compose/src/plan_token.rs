//! Plan tokens: the proof that a change applied is the change planned (README, "The change
//! path").
//!
//! A token is `cpt1.<key id>.<expiry, unix seconds>.<HMAC-SHA256, base64url>`. The MAC covers
//! the RFC 8785 canonical JSON of the manifests in plan order, the project, the resource
//! version of each object as the plan saw it (none for a create), the key id and the expiry.
//! Anything that moves between plan and apply — one character of a manifest, the order, the
//! project, an object someone else changed — fails to re-derive, and apply refuses.
//!
//! Keys: one from `PLAN_TOKEN_KEY`, a key set from a file (sign with the first, verify with
//! any: rotation), or one drawn for the process (tokens then die with it and differ between
//! replicas). Verification is constant time (`Mac::verify_slice`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use canon_json::CanonJsonSerialize as _;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use thiserror::Error;

type HmacSha256 = Hmac<Sha256>;

/// How long a plan stays valid: 15 minutes, time for a person to read the plan and say yes.
pub const DEFAULT_PLAN_TTL: Duration = Duration::from_secs(15 * 60);

/// The shortest key accepted, in bytes: HMAC-SHA256's own output size.
pub const MIN_KEY_BYTES: usize = 32;

const TOKEN_PREFIX: &str = "cpt1";

/// One signing key.
#[derive(Clone)]
struct PlanKey {
    id: String,
    secret: Vec<u8>,
}

impl std::fmt::Debug for PlanKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// The keys plan tokens are signed and verified with.
#[derive(Clone, Debug)]
pub struct PlanKeys {
    /// The first signs; every one verifies.
    keys: Vec<PlanKey>,
    generated: bool,
}

/// Why keys could not be loaded; each names the setting to fix.
#[derive(Debug, Error)]
pub enum KeyError {
    /// A key is too short to be a secret.
    #[error(
        "{setting}: key {id:?} has {len} bytes; use at least {MIN_KEY_BYTES} random bytes \
         (for example `openssl rand -base64 32`)"
    )]
    TooShort {
        /// The setting.
        setting: &'static str,
        /// The key's id.
        id: String,
        /// Its length.
        len: usize,
    },
    /// The key file cannot be read or parsed.
    #[error("{setting}: {message}")]
    File {
        /// The setting.
        setting: &'static str,
        /// What is wrong.
        message: String,
    },
    /// No randomness to draw a key from.
    #[error("drawing a plan-token key: {0}")]
    Random(String),
}

/// The key-set file: `{"keys": [{"id": "2026-12", "secret": "…"}, …]}`, newest first.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    keys: Vec<KeyEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyEntry {
    id: String,
    secret: String,
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl PlanKeys {
    /// One key from `PLAN_TOKEN_KEY`: its bytes are the secret; its id is derived from it, so
    /// replicas given the same secret verify each other's tokens.
    pub fn from_secret(secret: &str) -> Result<Self, KeyError> {
        let digest = Sha256::digest(Sha256::digest(secret.as_bytes()));
        let id: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        let key = PlanKey {
            id,
            secret: secret.as_bytes().to_vec(),
        };
        if key.secret.len() < MIN_KEY_BYTES {
            return Err(KeyError::TooShort {
                setting: "PLAN_TOKEN_KEY",
                id: key.id,
                len: key.secret.len(),
            });
        }
        Ok(Self {
            keys: vec![key],
            generated: false,
        })
    }

    /// A key set read from `text` (the file `PLAN_TOKEN_KEYS_FILE`), newest first: the first
    /// signs, every one verifies, so a new key can be added before tokens signed with the old
    /// one have expired.
    pub fn from_key_file(text: &str) -> Result<Self, KeyError> {
        let setting = "PLAN_TOKEN_KEYS_FILE";
        let file: KeyFile = serde_json::from_str(text).map_err(|e| KeyError::File {
            setting,
            message: format!(
                "{e}; expected {{\"keys\": [{{\"id\": \"…\", \"secret\": \"…\"}}, …]}}, newest first"
            ),
        })?;
        if file.keys.is_empty() {
            return Err(KeyError::File {
                setting,
                message: "no keys".into(),
            });
        }
        let mut keys = Vec::with_capacity(file.keys.len());
        for entry in file.keys {
            if !valid_id(&entry.id) {
                return Err(KeyError::File {
                    setting,
                    message: format!(
                        "key id {:?}: use 1 to 64 letters, digits, `-` or `_`",
                        entry.id
                    ),
                });
            }
            if keys.iter().any(|k: &PlanKey| k.id == entry.id) {
                return Err(KeyError::File {
                    setting,
                    message: format!("key id {:?} appears twice", entry.id),
                });
            }
            if entry.secret.len() < MIN_KEY_BYTES {
                return Err(KeyError::TooShort {
                    setting,
                    id: entry.id,
                    len: entry.secret.len(),
                });
            }
            keys.push(PlanKey {
                id: entry.id,
                secret: entry.secret.into_bytes(),
            });
        }
        Ok(Self {
            keys,
            generated: false,
        })
    }

    /// A key drawn for this process: its tokens die with the process and are not accepted by
    /// another replica.
    pub fn generate() -> Result<Self, KeyError> {
        let mut secret = vec![0u8; MIN_KEY_BYTES];
        getrandom::fill(&mut secret).map_err(|e| KeyError::Random(e.to_string()))?;
        let mut id = [0u8; 4];
        getrandom::fill(&mut id).map_err(|e| KeyError::Random(e.to_string()))?;
        Ok(Self {
            keys: vec![PlanKey {
                id: format!("process-{}", URL_SAFE_NO_PAD.encode(id)),
                secret,
            }],
            generated: true,
        })
    }

    /// Whether the key was drawn for this process (no key configured).
    pub fn is_generated(&self) -> bool {
        self.generated
    }

    /// The id of the key that signs.
    pub fn signing_id(&self) -> &str {
        &self.keys[0].id
    }

    /// A token for `plan`, valid until `expires`.
    pub fn sign(&self, plan: &PlanPayload, expires: SystemTime) -> String {
        let key = &self.keys[0];
        let expires = unix_seconds(expires);
        let mac = mac(key, &plan.canonical(&key.id, expires)).finalize();
        format!(
            "{TOKEN_PREFIX}.{}.{expires}.{}",
            key.id,
            URL_SAFE_NO_PAD.encode(mac.into_bytes())
        )
    }

    /// Checks `token` against `plan` re-derived from what apply was handed, at `now`.
    pub fn verify(&self, token: &str, plan: &PlanPayload, now: SystemTime) -> Result<(), Refused> {
        self.verify_covered(token, now, |id, expires| plan.canonical(id, expires))
    }

    /// Checks `token` against the bytes `covered` yields for the token's key id and expiry.
    fn verify_covered(
        &self,
        token: &str,
        now: SystemTime,
        covered: impl FnOnce(&str, u64) -> Vec<u8>,
    ) -> Result<(), Refused> {
        let mut parts = token.trim().split('.');
        let (Some(TOKEN_PREFIX), Some(id), Some(expires), Some(tag), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(Refused::Malformed);
        };
        let expires: u64 = expires.parse().map_err(|_| Refused::Malformed)?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| Refused::Malformed)?;
        let Some(key) = self.keys.iter().find(|k| k.id == id) else {
            return Err(Refused::UnknownKey { id: id.to_owned() });
        };
        if unix_seconds(now) >= expires {
            return Err(Refused::Expired { at: expires });
        }
        mac(key, &covered(&key.id, expires))
            .verify_slice(&tag)
            .map_err(|_| Refused::Mismatch)
    }
}

fn mac(key: &PlanKey, message: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length; the error arm cannot happen.
    let mut mac = match HmacSha256::new_from_slice(&key.secret) {
        Ok(mac) => mac,
        Err(error) => unreachable!("HMAC accepts any key length: {error}"),
    };
    mac.update(message);
    mac
}

fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Why apply refused a token. Every refusal means nothing was changed.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum Refused {
    /// The text is not a plan token.
    #[error("the plan token is not one resources_plan issued")]
    Malformed,
    /// Signed with a key this sidecar does not hold (another replica's drawn key, or a retired
    /// one).
    #[error(
        "the plan token was signed with key {id:?}, which this sidecar does not hold (a \
         restarted sidecar, another replica, or a retired key)"
    )]
    UnknownKey {
        /// The token's key id.
        id: String,
    },
    /// The plan is older than its validity.
    #[error("the plan expired at {at} (unix seconds)")]
    Expired {
        /// When it expired.
        at: u64,
    },
    /// The manifests, their order, the project, or an object changed since the plan.
    #[error(
        "the plan token does not match: the manifests (any character), their order, the \
         project, or an object someone else changed since the plan differ from what was planned"
    )]
    Mismatch,
}

/// What a plan token covers, re-derived at apply from what apply was handed.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanPayload {
    /// The project.
    pub project: String,
    /// The canonical manifests, in plan order.
    pub manifests: Vec<Value>,
    /// Each object's resourceVersion as the plan saw it; `None` for a create.
    pub resource_versions: Vec<Option<String>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Covered<'a> {
    version: u8,
    key_id: &'a str,
    expires: u64,
    project: &'a str,
    manifests: &'a [Value],
    resource_versions: &'a [Option<String>],
}

impl PlanPayload {
    /// The bytes the MAC covers: RFC 8785 canonical JSON, so the same plan always yields the
    /// same bytes whatever order a client wrote an object's keys in.
    pub fn canonical(&self, key_id: &str, expires: u64) -> Vec<u8> {
        let covered = Covered {
            version: 1,
            key_id,
            expires,
            project: &self.project,
            manifests: &self.manifests,
            resource_versions: &self.resource_versions,
        };
        // Serializing JSON values and strings cannot fail.
        covered.to_canon_json_vec().unwrap_or_default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn keys() -> PlanKeys {
        PlanKeys::from_secret("0123456789abcdef0123456789abcdef").unwrap()
    }

    fn plan() -> PlanPayload {
        PlanPayload {
            project: "acme".into(),
            manifests: vec![
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "a", "namespace": "default"}, "data": {"k": "v"}}),
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "b", "namespace": "default"}}),
            ],
            resource_versions: vec![Some("41".into()), None],
        }
    }

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    #[test]
    fn a_token_should_verify_for_exactly_the_plan_it_was_issued_for() {
        let keys = keys();
        let token = keys.sign(&plan(), now() + DEFAULT_PLAN_TTL);
        assert!(token.starts_with(&format!("cpt1.{}.", keys.signing_id())));
        assert_eq!(keys.verify(&token, &plan(), now()), Ok(()));

        let mut edited = plan();
        edited.manifests[0]["data"]["k"] = json!("w");
        let mut reordered = plan();
        reordered.manifests.swap(0, 1);
        reordered.resource_versions.swap(0, 1);
        let mut elsewhere = plan();
        elsewhere.project = "globex".into();
        let mut moved = plan();
        moved.resource_versions[0] = Some("42".into());
        for (what, other) in [
            ("edited", edited),
            ("reordered", reordered),
            ("another project", elsewhere),
            ("changed object", moved),
        ] {
            assert_eq!(
                keys.verify(&token, &other, now()),
                Err(Refused::Mismatch),
                "{what}"
            );
        }
    }

    #[test]
    fn key_order_in_an_object_should_not_matter_but_values_should() {
        let keys = keys();
        let token = keys.sign(&plan(), now() + DEFAULT_PLAN_TTL);
        let mut rewritten = plan();
        // The same object written with its keys in another order.
        rewritten.manifests[1] = serde_json::from_str(
            r#"{"metadata": {"namespace": "default", "name": "b"}, "kind": "ConfigMap", "apiVersion": "v1"}"#,
        )
        .unwrap();
        assert_eq!(keys.verify(&token, &rewritten, now()), Ok(()));
    }

    #[test]
    fn an_expired_a_foreign_or_a_tampered_token_should_be_refused() {
        let keys = keys();
        let expires = now() + DEFAULT_PLAN_TTL;
        let token = keys.sign(&plan(), expires);
        // The injected clock: one second after the expiry.
        assert!(matches!(
            keys.verify(&token, &plan(), expires + Duration::from_secs(1)),
            Err(Refused::Expired { .. })
        ));
        let other = PlanKeys::from_secret("another secret of thirty-two bytes!!").unwrap();
        assert!(matches!(
            other.verify(&token, &plan(), now()),
            Err(Refused::UnknownKey { .. })
        ));
        // A later expiry written into the token does not extend it: the MAC covers it.
        let parts: Vec<&str> = token.split('.').collect();
        let extended = format!(
            "{}.{}.{}.{}",
            parts[0],
            parts[1],
            unix_seconds(expires) + 3600,
            parts[3]
        );
        assert_eq!(
            keys.verify(&extended, &plan(), now()),
            Err(Refused::Mismatch)
        );
        for broken in ["", "cpt1", "cpt1.a.b.c", "cpt2.x.1.AAAA", "cpt1.x.1.!!"] {
            assert_eq!(
                keys.verify(broken, &plan(), now()),
                Err(Refused::Malformed),
                "{broken}"
            );
        }
    }

    #[test]
    fn a_key_set_should_sign_with_the_first_and_verify_with_any() {
        let old = r#"{"keys": [{"id": "old", "secret": "an old secret of thirty-two bytes!!"}]}"#;
        let rotated = r#"{"keys": [{"id": "new", "secret": "a new secret of thirty-two bytes!!!"},
                                   {"id": "old", "secret": "an old secret of thirty-two bytes!!"}]}"#;
        let old = PlanKeys::from_key_file(old).unwrap();
        let rotated = PlanKeys::from_key_file(rotated).unwrap();
        let token = old.sign(&plan(), now() + DEFAULT_PLAN_TTL);
        assert_eq!(rotated.verify(&token, &plan(), now()), Ok(()));
        assert_eq!(rotated.signing_id(), "new");
        assert!(
            rotated
                .sign(&plan(), now() + DEFAULT_PLAN_TTL)
                .starts_with("cpt1.new.")
        );
    }

    #[test]
    fn weak_or_malformed_keys_should_be_refused_naming_the_setting() {
        let short = PlanKeys::from_secret("short").unwrap_err().to_string();
        assert!(short.starts_with("PLAN_TOKEN_KEY: "), "{short}");
        for (text, expected) in [
            (r#"{"keys": []}"#, "no keys"),
            (
                r#"{"keys": [{"id": "a.b", "secret": "0123456789abcdef0123456789abcdef"}]}"#,
                "key id",
            ),
            (r#"{"keys": [{"id": "a", "secret": "short"}]}"#, "bytes"),
            ("[]", "expected"),
        ] {
            let error = PlanKeys::from_key_file(text).unwrap_err().to_string();
            assert!(
                error.starts_with("PLAN_TOKEN_KEYS_FILE: ") && error.contains(expected),
                "{text}: {error}"
            );
        }
        let drawn = PlanKeys::generate().unwrap();
        assert!(drawn.is_generated());
        assert_ne!(
            drawn.signing_id(),
            PlanKeys::generate().unwrap().signing_id()
        );
    }

    proptest! {
        /// Any single-byte change of the canonical input fails verification (the unchanged
        /// bytes pass, so a refusal is the change's doing).
        #[test]
        fn any_single_byte_change_of_the_covered_bytes_should_fail(index in 0usize..4096, flip in 1u8..=255) {
            let keys = keys();
            let expires = now() + DEFAULT_PLAN_TTL;
            let token = keys.sign(&plan(), expires);
            let bytes = plan().canonical(keys.signing_id(), unix_seconds(expires));
            prop_assert_eq!(keys.verify_covered(&token, now(), |_, _| bytes.clone()), Ok(()));
            let mut changed = bytes.clone();
            let index = index % changed.len();
            changed[index] ^= flip;
            prop_assert_eq!(
                keys.verify_covered(&token, now(), |_, _| changed),
                Err(Refused::Mismatch)
            );
        }

        /// Any single-byte change of the token itself is refused.
        #[test]
        fn any_single_byte_change_of_the_token_should_fail(index in 0usize..256, flip in 1u8..=127) {
            let keys = keys();
            let token = keys.sign(&plan(), now() + DEFAULT_PLAN_TTL);
            let mut bytes = token.clone().into_bytes();
            let index = index % bytes.len();
            bytes[index] ^= flip;
            if let Ok(changed) = String::from_utf8(bytes) {
                prop_assert!(keys.verify(&changed, &plan(), now()).is_err(), "{changed}");
            }
        }
    }
}
