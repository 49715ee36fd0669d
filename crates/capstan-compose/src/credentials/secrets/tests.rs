//! What a Secret's state lets a request send: the consent its annotations give, and a
//! refusal that says what to fix for each way it can fail, never the value.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;

fn secret(annotations: &[(&str, &str)], data: &[(&str, &str)]) -> SecretState {
    SecretState::Present(Arc::new(Present::of(Secret {
        metadata: ObjectMeta {
            name: Some("streamco-api-key".into()),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..ObjectMeta::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Secret::default()
    })))
}

fn source(header: Option<&str>) -> SecretCredentialSource {
    let (_tx, state) = watch::channel(SecretState::Pending);
    following(header, state)
}

/// A source reading the Secret's states from `state`.
fn following(header: Option<&str>, state: watch::Receiver<SecretState>) -> SecretCredentialSource {
    SecretCredentialSource {
        watched: Arc::new(Watched {
            state,
            task: tokio::spawn(async {}),
        }),
        namespace: "capstan-credentials".into(),
        secret: SecretCredential {
            name: "streamco-api-key".into(),
            key: "token".into(),
            header: header.map(str::to_owned),
            prefix: None,
        },
        binding: "streamco".into(),
        url: "https://mcp.streamco.example/mcp".into(),
        made: Mutex::default(),
    }
}

const CONSENT: &[(&str, &str)] = &[
    (BINDINGS_ANNOTATION, "other, streamco"),
    (HOSTS_ANNOTATION, "*.streamco.example"),
];

#[tokio::test]
async fn a_secret_its_owner_consented_to_should_be_sent_as_the_header_says() {
    let state = secret(CONSENT, &[("token", "planted-value\n")]);
    let header = source(None).header_of(&state).unwrap();
    assert_eq!(header.name.as_str(), "authorization");
    assert_eq!(header.value.to_str().unwrap(), "Bearer planted-value");
    assert!(header.value.is_sensitive());
    let header = source(Some("X-Api-Key")).header_of(&state).unwrap();
    assert_eq!(
        (header.name.as_str(), header.value.to_str().unwrap()),
        ("x-api-key", "planted-value")
    );
}

#[tokio::test]
async fn a_secret_should_be_refused_unless_its_owner_named_the_binding_and_the_host() {
    let value = &[("token", "planted-value")];
    let cases: Vec<(SecretState, &str)> = vec![
        (
            secret(&[(HOSTS_ANNOTATION, "*.streamco.example")], value),
            "does not name binding streamco",
        ),
        (
            secret(&[(BINDINGS_ANNOTATION, "streamco")], value),
            "has no capabilities.assistant.miloapis.com/hosts annotation",
        ),
        (
            secret(
                &[
                    (BINDINGS_ANNOTATION, "streamco"),
                    (HOSTS_ANNOTATION, "attacker.example"),
                ],
                value,
            ),
            "does not name the host of https://mcp.streamco.example/mcp",
        ),
        (secret(CONSENT, &[("other", "x")]), "has no key token"),
        (SecretState::Missing, "does not exist: create it"),
        (
            SecretState::Unreadable(CredentialError::permanent("the sidecar may not read it")),
            "may not read it",
        ),
    ];
    for (state, expected) in cases {
        let refused = source(None).header_of(&state).unwrap_err();
        assert!(
            refused.message.contains(expected),
            "{refused} lacks {expected}"
        );
        assert!(
            refused
                .message
                .contains("capstan-credentials/streamco-api-key"),
            "{refused}"
        );
        assert!(!refused.message.contains("planted"), "{refused}");
    }
}

#[tokio::test]
async fn a_header_made_once_should_follow_every_change_of_the_secret() {
    let (tx, state) = watch::channel(secret(CONSENT, &[("token", "first")]));
    let source = following(None, state);
    let sent = |header: Result<Header, CredentialError>| {
        header.map(|h| h.value.to_str().unwrap().to_owned())
    };
    assert_eq!(sent(source.header().await).unwrap(), "Bearer first");
    assert_eq!(sent(source.header().await).unwrap(), "Bearer first");
    tx.send_replace(secret(CONSENT, &[("token", "rotated")]));
    assert_eq!(sent(source.header().await).unwrap(), "Bearer rotated");
    // The owner withdraws the host: the header made before must not be sent again.
    tx.send_replace(secret(
        &[
            (BINDINGS_ANNOTATION, "streamco"),
            (HOSTS_ANNOTATION, "elsewhere.example"),
        ],
        &[("token", "rotated")],
    ));
    let refused = sent(source.header().await).unwrap_err();
    assert!(
        refused.to_string().contains("does not name the host"),
        "{refused}"
    );
    tx.send_replace(SecretState::Missing);
    assert!(source.header().await.is_err());
}
