//! Sessions the sidecar keeps itself (docs/architecture.md, "Sessions"): the id it mints at
//! `initialize`, on its refusal side — a second `initialize` inside a session, another
//! caller's GET stream, a session's GET stream outliving its DELETE, a client leaving while
//! its `initialize` composes. Raw HTTP over the socket: the oracles are what a client reads
//! and what the admission lets in afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::Duration;

use capstan_testkit::DemoProvider;
use capstan_testkit::sidecar::*;

const LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;

fn in_session<'a>(id: &'a str, token: &'a str) -> Vec<(&'a str, String)> {
    vec![
        (PROJECT_HEADER, "demo-project".to_owned()),
        ("authorization", format!("Bearer {token}")),
        ("mcp-session-id", id.to_owned()),
        ("mcp-protocol-version", "2025-11-25".to_owned()),
    ]
}

fn borrowed<'a>(headers: &'a [(&'a str, String)]) -> Vec<(&'a str, &'a str)> {
    headers.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// A session's GET stream held open on its own connection: the response head, and a channel
/// that yields once the sidecar closes the stream.
struct GetStream {
    head: String,
    closed: mpsc::Receiver<()>,
}

fn open_get_stream(sidecar: &Sidecar, headers: &[(&str, &str)]) -> GetStream {
    let mut stream = UnixStream::connect(&sidecar.socket).unwrap();
    let mut request = "GET /mcp HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\naccept: text/event-stream\r\n"
        .to_owned();
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let (sender, closed) = mpsc::channel();
    std::thread::spawn(move || {
        // Until the end of the stream (or an error: the sidecar closed it either way).
        let mut sink = Vec::new();
        let _ = reader.read_to_end(&mut sink);
        let _ = sender.send(());
    });
    GetStream { head, closed }
}

impl GetStream {
    fn status(&self) -> u16 {
        self.head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    fn is_closed_within(&self, patience: Duration) -> bool {
        self.closed.recv_timeout(patience).is_ok()
    }
}

fn counter(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_initialize_inside_a_session_should_be_refused_and_start_nothing() {
    let provider = DemoProvider::start(&[]);
    let address = free_address();
    let sidecar = Sidecar::start(
        &streamco(&provider),
        &[provider.host()],
        &[("CAPSTAN_METRICS_ADDRESS", &address)],
    );
    let id = sidecar.curl_initialize("demo-project", "t");
    let before = metrics(&address).await;
    assert_eq!(counter(&before, "capstan_sidecar_sessions_total"), 1);
    let headers = in_session(&id, "t");
    let (code, answer, head) = sidecar.curl("POST", "/mcp", &borrowed(&headers), Some(INITIALIZE));
    // Refused as a JSON-RPC error, with no new session id.
    assert_eq!(code, 200, "{answer}");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("already initialized"),
        "{answer}"
    );
    assert!(answer.get("result").is_none(), "{answer}");
    assert_eq!(header_value(&head, "mcp-session-id"), None, "{head}");
    // No task started (none counted), and the session serves on as before.
    let after = metrics(&address).await;
    assert_eq!(counter(&after, "capstan_sidecar_sessions_total"), 1);
    assert_eq!(counter(&after, "capstan_sidecar_sessions_active"), 1);
    let (code, tools) = sidecar.curl_in_session(&id, LIST);
    assert_eq!(code, 200, "{tools}");
    assert!(tools.contains("streamco__streams_get"), "{tools}");
}

#[test]
fn a_sessions_get_stream_should_be_its_callers_alone_and_end_with_the_session() {
    let provider = DemoProvider::start(&[]);
    let sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &[]);
    let id = sidecar.curl_initialize("demo-project", "t");
    let mine = in_session(&id, "t");
    let first = open_get_stream(&sidecar, &borrowed(&mine));
    assert_eq!(first.status(), 200, "{}", first.head);
    assert!(
        header_value(&first.head, "content-type")
            .is_some_and(|t| t.starts_with("text/event-stream")),
        "{}",
        first.head
    );
    // Another caller naming the session gets no stream of it.
    let theirs = in_session(&id, "someone-else");
    let refused = open_get_stream(&sidecar, &borrowed(&theirs));
    assert_eq!(refused.status(), 403, "{}", refused.head);
    // A second stream of the session is held beside the first.
    let second = open_get_stream(&sidecar, &borrowed(&mine));
    assert_eq!(second.status(), 200, "{}", second.head);
    assert!(!first.is_closed_within(Duration::from_millis(500)));
    // Ending the session closes both, and its id is refused from then on.
    let (code, _, _) = sidecar.curl("DELETE", "/mcp", &borrowed(&mine), None);
    assert_eq!(code, 204);
    for stream in [&first, &second] {
        assert!(
            stream.is_closed_within(PATIENCE),
            "a stream outlived its session"
        );
    }
    let (code, body) = sidecar.curl_in_session(&id, LIST);
    assert_eq!(code, 404, "{body}");
    let late = open_get_stream(&sidecar, &borrowed(&mine));
    assert_eq!(late.status(), 404, "{}", late.head);
    let (code, _, _) = sidecar.curl("DELETE", "/mcp", &borrowed(&mine), None);
    assert_eq!(code, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_leaving_while_its_initialize_composes_should_leave_no_session_and_no_place() {
    // The provider never answers, so `initialize` composes until the connect timeout; the
    // caller may hold one session.
    let provider = DemoProvider::start(&["hang"]);
    let address = free_address();
    let sidecar = Sidecar::start(
        &streamco(&provider),
        &[provider.host()],
        &[
            ("CAPSTAN_METRICS_ADDRESS", &address),
            ("CAPSTAN_MAX_SESSIONS_PER_CALLER", "1"),
            ("CAPSTAN_CONNECT_TIMEOUT_SECONDS", "2"),
        ],
    );
    let mut leaving = UnixStream::connect(&sidecar.socket).unwrap();
    let headers = format!(
        "{PROJECT_HEADER}: demo-project\r\nauthorization: Bearer t\r\n\
         content-type: application/json\r\naccept: application/json, text/event-stream\r\n"
    );
    leaving
        .write_all(
            format!(
                "POST /mcp HTTP/1.1\r\nhost: localhost\r\n{headers}content-length: {}\r\n\r\n{INITIALIZE}",
                INITIALIZE.len()
            )
            .as_bytes(),
        )
        .unwrap();
    // Composing (the provider holds it), the client goes.
    eventually("the initialize to reach the provider", || async {
        (provider.mcp_requests("POST").await > 0).then_some(())
    })
    .await;
    drop(leaving);
    provider.set_faults(&[]).await;
    // The caller's one place comes back: a new initialize is served.
    let id = eventually("the place of the client that left to be freed", || async {
        let (code, head, _) = sidecar.raw(
            "POST",
            "/mcp",
            &[
                (PROJECT_HEADER, "demo-project"),
                ("authorization", "Bearer t"),
            ],
            INITIALIZE,
        );
        (code == 200).then(|| header_value(&head, "mcp-session-id").expect("a session id"))
    })
    .await;
    // Past the time the one that left could still have been composing: one session, the new.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let text = metrics(&address).await;
    assert_eq!(
        counter(&text, "capstan_sidecar_sessions_active"),
        1,
        "{text}"
    );
    let (code, body) = sidecar.curl_in_session(&id, LIST);
    assert_eq!(code, 200, "{body}");
}
