//! The lanes against a real HTTP/1 server (axum on loopback) that names the connection each
//! request came on: reuse, a dropped body, a connection the server closed while idle, and the
//! guard's refusal before any dial.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::ConnectInfo;
use axum::routing::post;
use futures::StreamExt as _;
use http_body_util::BodyExt as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

use super::*;
use crate::guard::{AddressRefused, EndpointGuard};
use capstan_core::error_chain::find_in_chain;

/// A server answering `POST /json` with the port its request came from, and `POST /stream`
/// with one chunk of a body that never ends.
async fn server() -> SocketAddr {
    let app = Router::new()
        .route(
            "/json",
            post(
                |ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.port().to_string() },
            ),
        )
        .route(
            "/stream",
            post(|| async {
                let chunks = futures::stream::once(async { Ok::<_, std::io::Error>("first") })
                    .chain(futures::stream::pending());
                axum::body::Body::from_stream(chunks)
            }),
        );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    address
}

fn lanes(patterns: &[&str]) -> Arc<Lanes> {
    let guard = EndpointGuard::new(patterns).unwrap();
    Lanes::new(guard.resolver(), Duration::from_secs(5))
}

fn lane(lanes: &Arc<Lanes>, url: &str) -> Lane {
    Lane::new(lanes, &url::Url::parse(url).unwrap(), None).unwrap()
}

/// The port the server saw the request come from (which connection carried it).
async fn port_of(lane: &Lane) -> String {
    let request = lane.post().body(Full::new(Bytes::new())).unwrap();
    lane.exchange(request, |response| async move {
        let body = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(body.to_vec()).unwrap()
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn calls_one_after_another_should_share_one_connection() {
    let address = server().await;
    let lanes = lanes(&["127.0.0.1"]);
    let lane = lane(&lanes, &format!("http://{address}/json"));
    let first = port_of(&lane).await;
    for _ in 0..5 {
        assert_eq!(port_of(&lane).await, first);
    }
}

#[tokio::test]
async fn a_body_dropped_before_its_end_should_close_its_connection() {
    let address = server().await;
    let lanes = lanes(&["127.0.0.1"]);
    let json = lane(&lanes, &format!("http://{address}/json"));
    let stream = lane(&lanes, &format!("http://{address}/stream"));
    let first = port_of(&json).await;
    // The stream takes the idle connection, reads its first chunk and gives up.
    let request = stream.post().body(Full::new(Bytes::new())).unwrap();
    let chunk = stream
        .exchange(request, |response| async move {
            let mut body = response.into_body();
            body.frame().await.unwrap().unwrap().into_data().unwrap()
        })
        .await
        .unwrap();
    assert_eq!(chunk, "first");
    // That connection is gone: a body left unread cannot be followed by another response.
    let next = port_of(&json).await;
    assert_ne!(next, first);
    assert_eq!(port_of(&json).await, next);
}

/// A server that answers one request per connection and closes it when told (`close`), as a
/// server whose keep-alive time ran out does; `closed` counts the connections it closed.
async fn closing_server(close: Arc<tokio::sync::Notify>, closed: Arc<AtomicUsize>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut read = Vec::new();
            let mut buffer = [0u8; 1024];
            while !read.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = stream.read(&mut buffer).await.unwrap();
                read.extend_from_slice(&buffer[..n]);
            }
            stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await
                .unwrap();
            close.notified().await;
            drop(stream);
            closed.fetch_add(1, Ordering::SeqCst);
        }
    });
    address
}

#[tokio::test]
async fn a_connection_the_server_closed_while_idle_should_not_take_the_next_call() {
    let close = Arc::new(tokio::sync::Notify::new());
    let closed = Arc::new(AtomicUsize::new(0));
    let address = closing_server(close.clone(), closed.clone()).await;
    let lanes = lanes(&["127.0.0.1"]);
    let lane = lane(&lanes, &format!("http://{address}/mcp"));
    for call in 1..=3 {
        assert_eq!(port_of(&lane).await, "ok");
        // Closed only now that the connection waits in the pool.
        close.notify_one();
        while closed.load(Ordering::SeqCst) < call {
            tokio::task::yield_now().await;
        }
        // Once the runtime has read the server's close, the pooled connection is found shut.
        tokio::task::yield_now().await;
    }
    assert_eq!(closed.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_name_resolving_outside_the_allow_list_should_never_be_dialed() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    // The allow-list names another host: `localhost`'s loopback answer is refused.
    let lanes = lanes(&["mcp.example.com"]);
    let lane = lane(&lanes, &format!("http://localhost:{port}/mcp"));
    let request = lane.post().body(Full::new(Bytes::new())).unwrap();
    // Bounded: were the address dialed, the listener would take the connection and never
    // answer, and the exchange would wait for ever.
    let error = tokio::time::timeout(
        Duration::from_secs(10),
        lane.exchange(request, |_| async {}),
    )
    .await
    .unwrap_or_else(|_| panic!("the lane dialed a refused address and waited for its answer"))
    .unwrap_err();
    let refused = find_in_chain::<AddressRefused>(&error).unwrap();
    assert_eq!(refused.host, "localhost");
    // Nothing reached the listener.
    let accepted = tokio::time::timeout(Duration::from_millis(100), listener.accept()).await;
    assert!(accepted.is_err(), "a refused address was dialed");
}

/// A credential whose value changes on every request (a Secret rotated between two calls).
#[derive(Debug, Default)]
struct Rotating(AtomicUsize);

impl crate::credential::Credential for Rotating {
    fn header(&self) -> crate::credential::HeaderFuture<'_> {
        let n = self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(std::future::ready(crate::credential::Header::new(
            "X-Api-Key",
            "",
            &format!("value-{n}"),
        )))
    }
}

/// A server answering `POST /key` with the `X-Api-Key` it was sent, counting its requests.
async fn key_server(seen: Arc<AtomicUsize>) -> SocketAddr {
    let app = Router::new().route(
        "/key",
        post(move |headers: http::HeaderMap| async move {
            seen.fetch_add(1, Ordering::SeqCst);
            headers
                .get("x-api-key")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("none")
                .to_owned()
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

async fn key_of(lane: &Lane) -> Result<String, LaneError> {
    let request = lane.post().body(Full::new(Bytes::new())).unwrap();
    lane.exchange(request, |response| async move {
        let body = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(body.to_vec()).unwrap()
    })
    .await
}

#[tokio::test]
async fn every_request_should_carry_the_credentials_current_value() {
    let seen = Arc::new(AtomicUsize::new(0));
    let address = key_server(seen.clone()).await;
    let lanes = lanes(&["127.0.0.1"]);
    let url = url::Url::parse(&format!("http://{address}/key")).unwrap();
    let credential: crate::credential::SharedCredential = Arc::new(Rotating::default());
    let lane = Lane::new(&lanes, &url, Some(credential)).unwrap();
    assert_eq!(key_of(&lane).await.unwrap(), "value-0");
    assert_eq!(key_of(&lane).await.unwrap(), "value-1");
    let plain = Lane::new(&lanes, &url, None).unwrap();
    assert_eq!(key_of(&plain).await.unwrap(), "none");
    assert_eq!(seen.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_credential_that_cannot_be_had_should_stop_the_request_before_it_leaves() {
    let seen = Arc::new(AtomicUsize::new(0));
    let address = key_server(seen.clone()).await;
    let lanes = lanes(&["127.0.0.1"]);
    let url = url::Url::parse(&format!("http://{address}/key")).unwrap();
    let failed = crate::credential::CredentialError::permanent("Secret streamco-api-key missing");
    let credential: crate::credential::SharedCredential =
        Arc::new(crate::credential::Unavailable(failed.clone()));
    let lane = Lane::new(&lanes, &url, Some(credential)).unwrap();
    let before = seen.load(Ordering::SeqCst);
    match key_of(&lane).await {
        Err(LaneError::Credential(error)) => assert_eq!(error, failed),
        other => panic!("expected a credential failure, got {other:?}"),
    }
    assert_eq!(
        seen.load(Ordering::SeqCst),
        before,
        "the server saw the request"
    );
}
