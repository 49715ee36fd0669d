//! Plan tokens: each verifies for exactly its plan, caller, project, plane and sidecar, and
//! any change of what it covers, or of the token itself, is refused.

use proptest::prelude::*;
use serde_json::json;

use super::*;

const LEDGER: &str = "ledger-a";

fn keys() -> PlanKeys {
    PlanKeys::from_secret("0123456789abcdef0123456789abcdef").unwrap()
}

fn alice() -> Caller {
    Caller {
        username: "system:serviceaccount:capstan-system:alice".into(),
        uid: "0b7d6f1e".into(),
    }
}

fn plan() -> PlanPayload {
    PlanPayload {
        project: "acme".into(),
        plane: "https://acme.example:6443".into(),
        caller: alice(),
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

fn sign(keys: &PlanKeys, plan: &PlanPayload) -> String {
    keys.sign(plan, LEDGER, now() + DEFAULT_PLAN_TTL)
}

#[test]
fn a_token_should_verify_for_exactly_the_plan_it_was_issued_for() {
    let keys = keys();
    let token = sign(&keys, &plan());
    assert!(token.starts_with(&format!("cpt2.{}.{LEDGER}.", keys.signing_id())));
    let verified = keys.verify(&token, &plan(), LEDGER, now()).unwrap();
    assert_eq!(verified.expires, unix_seconds(now() + DEFAULT_PLAN_TTL));
    assert_eq!(ledger_digest(&token), Some(verified.digest));

    let mut edited = plan();
    edited.manifests[0]["data"]["k"] = json!("w");
    let mut reordered = plan();
    reordered.manifests.swap(0, 1);
    reordered.resource_versions.swap(0, 1);
    let mut moved = plan();
    moved.resource_versions[0] = Some("42".into());
    let mut created_since = plan();
    created_since.resource_versions[1] = Some("43".into());
    let mut deleted_since = plan();
    deleted_since.resource_versions[0] = None;
    for (what, other) in [
        ("edited", edited),
        ("reordered", reordered),
        ("changed object", moved),
        ("created since", created_since),
        ("deleted since", deleted_since),
    ] {
        assert_eq!(
            keys.verify(&token, &other, LEDGER, now()),
            Err(Refused::Mismatch),
            "{what}"
        );
    }
}

#[test]
fn a_token_should_be_refused_to_another_caller_project_plane_or_sidecar() {
    let keys = keys();
    let token = sign(&keys, &plan());
    let mut carol = plan();
    carol.caller.username = "system:serviceaccount:capstan-system:carol".into();
    let mut alice_again = plan();
    alice_again.caller.uid = "another uid: alice deleted and created again".into();
    let mut elsewhere = plan();
    elsewhere.project = "globex".into();
    let mut other_plane = plan();
    other_plane.plane = "https://globex.example:6443".into();
    for (what, other) in [
        ("another user", carol),
        ("another uid", alice_again),
        ("another project", elsewhere),
        ("another plane", other_plane),
    ] {
        assert_eq!(
            keys.verify(&token, &other, LEDGER, now()),
            Err(Refused::OtherCaller),
            "{what}"
        );
    }
    assert_eq!(
        keys.verify(&token, &plan(), "ledger-b", now()),
        Err(Refused::OtherSidecar {
            issuer: LEDGER.into()
        })
    );
}

#[test]
fn key_order_in_an_object_should_not_matter_but_values_should() {
    let keys = keys();
    let token = sign(&keys, &plan());
    let mut rewritten = plan();
    // The same object written with its keys in another order.
    rewritten.manifests[1] = serde_json::from_str(
        r#"{"metadata": {"namespace": "default", "name": "b"}, "kind": "ConfigMap", "apiVersion": "v1"}"#,
    )
    .unwrap();
    assert!(keys.verify(&token, &rewritten, LEDGER, now()).is_ok());
}

#[test]
fn an_expired_a_foreign_or_a_tampered_token_should_be_refused() {
    let keys = keys();
    let expires = now() + DEFAULT_PLAN_TTL;
    let token = keys.sign(&plan(), LEDGER, expires);
    // The injected clock: one second after the expiry.
    assert!(matches!(
        keys.verify(&token, &plan(), LEDGER, expires + Duration::from_secs(1)),
        Err(Refused::Expired { .. })
    ));
    let other = PlanKeys::from_secret("another secret of thirty-two bytes!!").unwrap();
    assert!(matches!(
        other.verify(&token, &plan(), LEDGER, now()),
        Err(Refused::UnknownKey { .. })
    ));
    // A later expiry written into the token does not extend it: both tags cover it.
    let parts: Vec<&str> = token.split('.').collect();
    let extended = format!(
        "{}.{}.{}.{}.{}.{}",
        parts[0],
        parts[1],
        parts[2],
        unix_seconds(expires) + 3600,
        parts[4],
        parts[5]
    );
    assert_eq!(
        keys.verify(&extended, &plan(), LEDGER, now()),
        Err(Refused::OtherCaller)
    );
    // Another ledger id written into it is refused by the ledger named, and the tags
    // cover the ledger too.
    let moved = token.replacen(LEDGER, "ledger-b", 1);
    assert_eq!(
        keys.verify(&moved, &plan(), "ledger-b", now()),
        Err(Refused::OtherCaller)
    );
    for broken in [
        "",
        "cpt2",
        "cpt2.a.b.c.d",
        "cpt1.x.1.AAAA",
        "cpt2.x.l.1.AAAA.AAAA",
        "cpt2.x.l.1.!!.AAAA",
        "cpt2.x..1.AAAAAAAAAAAAAAAA.AAAA",
    ] {
        assert_eq!(
            keys.verify(broken, &plan(), LEDGER, now()),
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
    let token = sign(&old, &plan());
    assert!(rotated.verify(&token, &plan(), LEDGER, now()).is_ok());
    assert_eq!(rotated.signing_id(), "new");
    assert!(sign(&rotated, &plan()).starts_with("cpt2.new."));
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

/// The documented edges of the key settings (docs/base-tools.md, docs/configuration.md): a
/// secret of exactly 32 bytes is enough, one byte fewer is not; key ids may use `-` and `_`; a
/// configured key is not a drawn one; a plan lives 900 s by default.
#[test]
fn key_settings_should_hold_exactly_at_their_documented_edges() {
    let file =
        |id: &str, secret: &str| format!(r#"{{"keys": [{{"id": "{id}", "secret": "{secret}"}}]}}"#);
    let exactly = PlanKeys::from_key_file(&file("a", &"k".repeat(32))).unwrap();
    assert!(!exactly.is_generated());
    let short = PlanKeys::from_key_file(&file("a", &"k".repeat(31)))
        .unwrap_err()
        .to_string();
    assert!(short.contains("bytes"), "{short}");
    let from_secret = PlanKeys::from_secret(&"k".repeat(32)).unwrap();
    assert!(!from_secret.is_generated());
    for id in ["key-2026_12", "_", "-", "a"] {
        let keys = PlanKeys::from_key_file(&file(id, &"k".repeat(32))).unwrap();
        assert_eq!(keys.signing_id(), id);
    }
    assert_eq!(DEFAULT_PLAN_TTL, Duration::from_secs(900));
}

/// A key's debug form names it and never shows its secret (keys reach logs through the
/// structs that hold them).
#[test]
fn a_key_should_debug_print_its_id_and_never_its_secret() {
    let secret = UNLOGGABLE_SECRET;
    let keys = keys_with_unloggable_secret();
    let printed = format!("{keys:?}");
    assert!(printed.contains("visible-id"), "{printed}");
    assert!(!printed.contains(secret), "{printed}");
}

proptest! {
    /// Any single-byte change of the bytes the MAC covers fails verification (the
    /// unchanged bytes pass, so a refusal is the change's doing).
    #[test]
    fn any_single_byte_change_of_the_covered_bytes_should_fail(index in 0usize..4096, flip in 1u8..=255) {
        let keys = keys();
        let expires = now() + DEFAULT_PLAN_TTL;
        let token = keys.sign(&plan(), LEDGER, expires);
        let (id, at) = (keys.signing_id().to_owned(), unix_seconds(expires));
        let binding = plan().binding(&id, LEDGER, at);
        let bytes = plan().canonical(&id, LEDGER, at);
        prop_assert!(keys
            .verify_covered(&token, LEDGER, now(), |_, _| binding.clone(), |_, _| bytes.clone())
            .is_ok());
        let mut changed = bytes.clone();
        let index = index % changed.len();
        changed[index] ^= flip;
        prop_assert_eq!(
            keys.verify_covered(&token, LEDGER, now(), |_, _| binding.clone(), |_, _| changed),
            Err(Refused::Mismatch)
        );
        let mut changed = binding.clone();
        let index = index % changed.len();
        changed[index] ^= flip;
        prop_assert_eq!(
            keys.verify_covered(&token, LEDGER, now(), |_, _| changed, |_, _| bytes.clone()),
            Err(Refused::OtherCaller)
        );
    }

    /// Any single-byte change of the token itself is refused.
    #[test]
    fn any_single_byte_change_of_the_token_should_fail(index in 0usize..256, flip in 1u8..=127) {
        let keys = keys();
        let token = sign(&keys, &plan());
        let mut bytes = token.clone().into_bytes();
        let index = index % bytes.len();
        bytes[index] ^= flip;
        if let Ok(changed) = String::from_utf8(bytes) {
            prop_assert!(keys.verify(&changed, &plan(), LEDGER, now()).is_err(), "{changed}");
        }
    }
}
