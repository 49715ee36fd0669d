//! Fetches carrying a credential against real HTTP servers on loopback: the header arrives, a
//! redirect within the origin keeps it, and one to another origin is refused before that origin
//! sees a request.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::response::Redirect;
use axum::routing::get;
use tokio::net::TcpListener;

use super::*;
use crate::credential::{Fixed, Header, Unavailable};

/// A server answering `/doc` with the `X-Api-Key` it got, `/here` with a redirect to its own
/// `/doc`, and `/away` with a redirect to `away`'s `/doc`; counting every request.
async fn server(away: Option<SocketAddr>, seen: Arc<AtomicUsize>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let counted = seen.clone();
    let app = Router::new()
        .route(
            "/doc",
            get(move |headers: http::HeaderMap| async move {
                counted.fetch_add(1, Ordering::SeqCst);
                headers
                    .get("x-api-key")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("none")
                    .to_owned()
            }),
        )
        .route("/here", get(|| async { Redirect::temporary("/doc") }))
        .route(
            "/away",
            get(move || async move {
                let to = away.map_or(String::new(), |a| format!("http://{a}/doc"));
                Redirect::temporary(&to)
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

fn fetcher() -> Fetcher {
    capstan_core::install_crypto_provider();
    Fetcher::new(EndpointGuard::new(&["127.0.0.1"]).unwrap()).unwrap()
}

fn key() -> SharedCredential {
    Arc::new(Fixed(Header::new("X-Api-Key", "", "planted-key").unwrap()))
}

async fn fetch(
    fetcher: &Fetcher,
    url: &str,
    credential: Option<&SharedCredential>,
) -> Result<String, FetchError> {
    fetcher
        .fetch_as(url, credential, Duration::from_secs(5), 1024)
        .await
        .map(|fetched| fetched.text)
}

#[tokio::test]
async fn a_credential_should_reach_its_origin_and_never_follow_a_redirect_away() {
    let away_seen = Arc::new(AtomicUsize::new(0));
    let away = server(None, away_seen.clone()).await;
    let home = server(Some(away), Arc::new(AtomicUsize::new(0))).await;
    let fetcher = fetcher();

    assert_eq!(
        fetch(&fetcher, &format!("http://{home}/doc"), Some(&key()))
            .await
            .unwrap(),
        "planted-key"
    );
    assert_eq!(
        fetch(&fetcher, &format!("http://{home}/here"), Some(&key()))
            .await
            .unwrap(),
        "planted-key",
        "a redirect within the origin keeps the credential"
    );

    let before = away_seen.load(Ordering::SeqCst);
    let refused = fetch(&fetcher, &format!("http://{home}/away"), Some(&key())).await;
    match refused {
        Err(FetchError::Refused(refusal)) => {
            assert!(refusal.reason.contains("another origin"), "{refusal}");
            assert!(!refusal.to_string().contains("planted"));
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(
        away_seen.load(Ordering::SeqCst),
        before,
        "the other origin was asked"
    );

    // Without a credential the same redirect is followed (the guard admits the host).
    assert_eq!(
        fetch(&fetcher, &format!("http://{home}/away"), None)
            .await
            .unwrap(),
        "none"
    );
    assert_eq!(away_seen.load(Ordering::SeqCst), before + 1);
}

#[tokio::test]
async fn a_credential_that_cannot_be_had_should_stop_the_fetch_before_it_is_sent() {
    let seen = Arc::new(AtomicUsize::new(0));
    let home = server(None, seen.clone()).await;
    let fetcher = fetcher();
    let failed = CredentialError::transient("the token service did not answer");
    let credential: SharedCredential = Arc::new(Unavailable(failed.clone()));
    match fetch(&fetcher, &format!("http://{home}/doc"), Some(&credential)).await {
        Err(FetchError::Credential { failed: error, .. }) => assert_eq!(error, failed),
        other => panic!("expected a credential failure, got {other:?}"),
    }
    assert_eq!(seen.load(Ordering::SeqCst), 0);
}
