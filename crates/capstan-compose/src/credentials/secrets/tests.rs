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
