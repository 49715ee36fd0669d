//! Plan tokens: the proof that a change applied is the change planned, by the caller who
//! planned it (docs/base-tools.md, "Plan tokens").
//!
//! A token is `cpt2.<key id>.<ledger id>.<expiry, unix seconds>.<binding tag>.<MAC>`. The MAC
//! (HMAC-SHA256) covers the RFC 8785 canonical JSON of the manifests in plan order, the
//! resource version of each object as the plan saw it (none for a create: the object must not
//! exist), the project, its control plane, the authenticated caller (user name and uid), the
//! ledger of the sidecar that issued it, the key id and the expiry. The binding tag is a MAC of
//! the same key over the caller, project, plane, ledger and expiry alone, so a token presented
//! by anyone else is refused as such rather than as a changed plan. Anything that moves
//! between plan and apply fails to re-derive, and apply refuses.
//!
//! A token is applied once: the sidecar's ledger (`plan_ledger.rs`) records it before the
//! first write, and only the ledger that issued it accepts it.
//!
//! Keys: one from `PLAN_TOKEN_KEY`, a key set from a file (sign with the first, verify with
//! any: rotation), or one drawn for the process (tokens then die with it). Verification is
//! constant time (`Mac::verify_slice`, `verify_truncated_left`).

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

const TOKEN_PREFIX: &str = "cpt2";

/// Bytes of the binding tag kept in the token: 96 bits, far beyond guessing within a plan's
/// lifetime, and short enough to keep the token one line.
const BINDING_TAG_BYTES: usize = 12;

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

/// Whether `id` can name a key or a ledger: 1–64 of `[A-Za-z0-9_-]` (it stands between the
/// dots of a token and in a file line).
pub(crate) fn valid_id(id: &str) -> bool {
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

    /// A token for `plan`, valid until `expires`, to be applied once through `ledger`
    /// (`plan_ledger.rs`).
    pub fn sign(&self, plan: &PlanPayload, ledger: &str, expires: SystemTime) -> String {
        let key = &self.keys[0];
        let expires = unix_seconds(expires);
        let binding = mac(key, &plan.binding(&key.id, ledger, expires)).finalize();
        let covered = mac(key, &plan.canonical(&key.id, ledger, expires)).finalize();
        format!(
            "{TOKEN_PREFIX}.{}.{ledger}.{expires}.{}.{}",
            key.id,
            URL_SAFE_NO_PAD.encode(&binding.into_bytes()[..BINDING_TAG_BYTES]),
            URL_SAFE_NO_PAD.encode(covered.into_bytes())
        )
    }

    /// Checks `token` against `plan` re-derived from what apply was handed, at `now`, for the
    /// sidecar whose ledger is `ledger`. What it returns names the token in the ledger.
    pub fn verify(
        &self,
        token: &str,
        plan: &PlanPayload,
        ledger: &str,
        now: SystemTime,
    ) -> Result<Verified, Refused> {
        self.verify_covered(
            token,
            ledger,
            now,
            |id, expires| plan.binding(id, ledger, expires),
            |id, expires| plan.canonical(id, ledger, expires),
        )
    }

    /// Checks `token`: its form, key, expiry and ledger, then the binding tag against the
    /// bytes `binding` yields and the MAC against those `covered` yields (for the token's key
    /// id and expiry). Cheapest refusals first; every comparison of secret bytes is constant
    /// time.
    fn verify_covered(
        &self,
        token: &str,
        ledger: &str,
        now: SystemTime,
        binding: impl FnOnce(&str, u64) -> Vec<u8>,
        covered: impl FnOnce(&str, u64) -> Vec<u8>,
    ) -> Result<Verified, Refused> {
        let mut parts = token.trim().split('.');
        let (
            Some(TOKEN_PREFIX),
            Some(id),
            Some(issuer),
            Some(expires),
            Some(tag),
            Some(mac_text),
            None,
        ) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        )
        else {
            return Err(Refused::Malformed);
        };
        let expires: u64 = expires.parse().map_err(|_| Refused::Malformed)?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| Refused::Malformed)?;
        let tag_of_mac = URL_SAFE_NO_PAD
            .decode(mac_text)
            .map_err(|_| Refused::Malformed)?;
        if tag.len() != BINDING_TAG_BYTES || issuer.is_empty() {
            return Err(Refused::Malformed);
        }
        let Some(key) = self.keys.iter().find(|k| k.id == id) else {
            return Err(Refused::UnknownKey { id: id.to_owned() });
        };
        if unix_seconds(now) >= expires {
            return Err(Refused::Expired { at: expires });
        }
        if issuer != ledger {
            return Err(Refused::OtherSidecar {
                issuer: issuer.to_owned(),
            });
        }
        mac(key, &binding(&key.id, expires))
            .verify_truncated_left(&tag)
            .map_err(|_| Refused::OtherCaller)?;
        mac(key, &covered(&key.id, expires))
            .verify_slice(&tag_of_mac)
            .map_err(|_| Refused::Mismatch)?;
        Ok(Verified {
            digest: Sha256::digest(&tag_of_mac).into(),
            expires,
        })
    }
}

/// What names `token` in the ledger of applied tokens (SHA-256 of its MAC), read without
/// verifying it: so apply can say a token was applied before anything else is checked. `None`
/// when the text is not a token's shape.
pub fn ledger_digest(token: &str) -> Option<[u8; 32]> {
    let mac = token.trim().rsplit('.').next()?;
    let bytes = URL_SAFE_NO_PAD.decode(mac).ok()?;
    Some(Sha256::digest(&bytes).into())
}

/// A token that verified: what names it in the ledger of used tokens, and until when it could
/// be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// SHA-256 of the token's MAC: one token, one entry.
    pub digest: [u8; 32],
    /// Its expiry (unix seconds); the ledger forgets it after that.
    pub expires: u64,
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
    /// Issued by another sidecar (another replica, or this one before a restart that lost its
    /// ledger): only the issuer knows whether it was used.
    #[error(
        "the plan token was issued by another sidecar (ledger {issuer:?}: another replica, or \
         this sidecar before a restart without its ledger file), which alone can tell whether \
         it was applied"
    )]
    OtherSidecar {
        /// The issuing ledger's id.
        issuer: String,
    },
    /// Issued to another caller, or for another project or control plane.
    #[error(
        "the plan token was issued to another caller (or for another project or control \
         plane): a plan is applied only by the caller who made it"
    )]
    OtherCaller,
    /// The manifests, their order, or an object changed since the plan.
    #[error(
        "the plan token does not match: the manifests (any character), their order, or an \
         object someone else created, changed or deleted since the plan differ from what was \
         planned"
    )]
    Mismatch,
    /// Applied before: a plan is applied once.
    #[error(
        "the plan token was applied already (a plan is applied once, even when what it \
         created has since been deleted)"
    )]
    AlreadyApplied,
}

/// The authenticated caller a plan is bound to, as the project's control plane names it (a
/// SelfSubjectReview with the caller's token).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Caller {
    /// The user name (`system:serviceaccount:ns:name`, `alice@example.com`).
    pub username: String,
    /// The user's uid, when the authenticator gives one (service accounts do): a user deleted
    /// and created again under the same name is another caller.
    pub uid: String,
}

/// What a plan token covers, re-derived at apply from what apply was handed.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanPayload {
    /// The project.
    pub project: String,
    /// The project's control plane (its URL).
    pub plane: String,
    /// Who planned.
    pub caller: Caller,
    /// The canonical manifests, in plan order.
    pub manifests: Vec<Value>,
    /// Each object's resourceVersion as the plan saw it; `None` for a create (the object must
    /// not exist).
    pub resource_versions: Vec<Option<String>>,
}

/// Who and where a token is for: what the binding tag covers.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Binding<'a> {
    version: u8,
    purpose: &'static str,
    key_id: &'a str,
    ledger: &'a str,
    expires: u64,
    project: &'a str,
    plane: &'a str,
    caller: &'a Caller,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Covered<'a> {
    #[serde(flatten)]
    binding: Binding<'a>,
    manifests: &'a [Value],
    resource_versions: &'a [Option<String>],
}

impl PlanPayload {
    fn binding_of<'a>(&'a self, key_id: &'a str, ledger: &'a str, expires: u64) -> Binding<'a> {
        Binding {
            version: 2,
            purpose: "binding",
            key_id,
            ledger,
            expires,
            project: &self.project,
            plane: &self.plane,
            caller: &self.caller,
        }
    }

    /// The bytes the binding tag covers: caller, project, plane, ledger, key and expiry.
    pub fn binding(&self, key_id: &str, ledger: &str, expires: u64) -> Vec<u8> {
        // Serializing strings and numbers cannot fail.
        self.binding_of(key_id, ledger, expires)
            .to_canon_json_vec()
            .unwrap_or_default()
    }

    /// The bytes the MAC covers: RFC 8785 canonical JSON, so the same plan always yields the
    /// same bytes whatever order a client wrote an object's keys in.
    pub fn canonical(&self, key_id: &str, ledger: &str, expires: u64) -> Vec<u8> {
        let mut binding = self.binding_of(key_id, ledger, expires);
        binding.purpose = "plan";
        let covered = Covered {
            binding,
            manifests: &self.manifests,
            resource_versions: &self.resource_versions,
        };
        // Serializing JSON values and strings cannot fail.
        covered.to_canon_json_vec().unwrap_or_default()
    }
}

/// A secret no log may show, and keys signing with it under the id `visible-id`: for the
/// tests that a debug form names the key and never its secret.
#[cfg(test)]
pub(crate) const UNLOGGABLE_SECRET: &str = "a secret nobody may read in a log!";

/// See [`UNLOGGABLE_SECRET`].
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) fn keys_with_unloggable_secret() -> PlanKeys {
    PlanKeys::from_key_file(&format!(
        r#"{{"keys": [{{"id": "visible-id", "secret": "{UNLOGGABLE_SECRET}"}}]}}"#
    ))
    .unwrap()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
