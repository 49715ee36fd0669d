//! Faults injected into a real sidecar process and real MCP servers (docs/reliability.md):
//! SIGTERM with calls in flight, a restart under a client's session, a client leaving mid-call,
//! a provider answering one byte at a time. The provider's request log is the oracle for what
//! reached it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use capstan_testkit::DemoProvider;
use capstan_testkit::sidecar::*;
use serde_json::{Value, json};

fn sigterm(pid: u32) {
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits until the process exits; how long that took.
fn exited_within(sidecar: &mut Sidecar, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if !sidecar.is_running() {
            return Some(started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_should_drain_in_flight_calls_close_upstreams_and_take_no_new_session() {
    // A grace period far longer than the call: the sidecar must exit because the call
    // drained, not because the grace ran out.
    let provider = DemoProvider::start(&["slow-calls:1500"]);
    let mut sidecar = Sidecar::start(
        &streamco(&provider),
        &[provider.host()],
        &[("CAPSTAN_SHUTDOWN_GRACE_SECONDS", "60")],
    );
    let session = sidecar.session("demo-project", None).await;
    let deletes_before = upstream_deletes(&provider).await;
    let calls_before = provider.tool_calls().await.len();
    let in_flight = tokio::spawn(async move {
        let result = session
            .call_tool(call("streamco__streams_list", json!({})))
            .await;
        (result, session)
    });
    eventually("the call is at the provider", || async {
        (provider.tool_calls().await.len() > calls_before).then_some(())
    })
    .await;
    sigterm(sidecar.pid());
    // No new connection (so no new session) once the shutdown began.
    let socket = sidecar.socket.clone();
    eventually("the socket refuses new connections", || {
        let socket = socket.clone();
        async move {
            std::os::unix::net::UnixStream::connect(&socket)
                .is_err()
                .then_some(())
        }
    })
    .await;
    let (result, session) = in_flight.await.unwrap();
    let result = result.expect("the in-flight call was answered");
    assert_ne!(result.is_error, Some(true), "{result:?}");
    drop(session);
    // Half the grace period: a sidecar that waited it out would still be running.
    let exited = exited_within(&mut sidecar, Duration::from_secs(30));
    assert!(
        exited.is_some(),
        "the sidecar was still running 30 s after its calls drained (grace 60 s)"
    );
    // The upstream session the task held was closed before exit.
    let deletes = upstream_deletes(&provider).await;
    assert!(
        deletes > deletes_before,
        "no upstream session was closed ({deletes_before} → {deletes})"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_hangs_should_not_hold_shutdown_past_the_grace_period() {
    let provider = DemoProvider::start(&["hang-calls"]);
    let mut sidecar = Sidecar::start(
        &streamco(&provider),
        &[provider.host()],
        &[
            ("CAPSTAN_SHUTDOWN_GRACE_SECONDS", "1"),
            ("CAPSTAN_CALL_TIMEOUT_SECONDS", "300"),
        ],
    );
    let session = sidecar.session("demo-project", None).await;
    let calls_before = provider.tool_calls().await.len();
    let hanging = tokio::spawn(async move {
        let _ = session
            .call_tool(call("streamco__streams_list", json!({})))
            .await;
    });
    eventually("the call is at the provider", || async {
        (provider.tool_calls().await.len() > calls_before).then_some(())
    })
    .await;
    sigterm(sidecar.pid());
    // The call's own time limit is 300 s here: a sidecar that waited for it would still be
    // running long after 1 s of grace and the upstream closes.
    let exited = exited_within(&mut sidecar, Duration::from_secs(30));
    hanging.abort();
    assert!(
        exited.is_some(),
        "a hanging call held the sidecar 30 s past SIGTERM (grace 1 s)"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_sidecar_should_answer_404_and_a_new_initialize_should_carry_on() {
    let provider = DemoProvider::start(&[]);
    let documents = streamco(&provider);
    let dir = temp_dir("restart");
    let fixture = dir.join("documents.json");
    std::fs::write(&fixture, serde_json::to_string(&documents).unwrap()).unwrap();
    let socket = dir.join("run/composer.sock");
    let metering = dir.join("metering.jsonl");
    let hosts = [provider.host()];
    let mut first = Sidecar::start_at(&dir, &socket, &fixture, &metering, &hosts, &[]);
    let id = first.curl_initialize("demo-project", "t");
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"streamco__streams_list","arguments":{}}}"#;
    let (status, _) = first.curl_in_session(&id, list);
    assert_eq!(status, 200);
    sigterm(first.pid());
    assert!(exited_within(&mut first, Duration::from_secs(15)).is_some());
    std::mem::forget(first); // its directory is the second sidecar's too
    let second = Sidecar::start_at(&dir, &socket, &fixture, &metering, &hosts, &[]);
    // The old session id means nothing to the new process: 404 with the JSON-RPC code a client
    // takes as "start again".
    let (status, answer) = second.curl_in_session(&id, list);
    assert_eq!(status, 404, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["error"]["code"], -32001, "{answer}");
    let fresh = second.curl_initialize("demo-project", "t");
    assert_ne!(fresh, id);
    let (status, answer) = second.curl_in_session(&fresh, list);
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("clickstream"), "{answer}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_leaving_mid_call_should_not_disturb_the_session_or_the_sidecar() {
    let provider = DemoProvider::start(&["slow-calls:1500"]);
    let mut sidecar = Sidecar::start(&streamco(&provider), &[provider.host()], &[]);
    let id = sidecar.curl_initialize("demo-project", "t");
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"streamco__streams_list","arguments":{}}}"#;
    // curl gives up after 300 ms: the connection closes while the provider is still working.
    let gave_up = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "--max-time",
            "0.3",
            "--unix-socket",
        ])
        .arg(&sidecar.socket)
        .args([
            "-X",
            "POST",
            "http://localhost/mcp",
            "-H",
            "content-type: application/json",
            "-H",
            "accept: application/json, text/event-stream",
            "-H",
            "x-capstan-project: demo-project",
            "-H",
            "authorization: Bearer t",
            "-H",
            &format!("mcp-session-id: {id}"),
            "-H",
            "mcp-protocol-version: 2025-11-25",
            "--data-binary",
            list,
        ])
        .status()
        .unwrap();
    assert_eq!(gave_up.code(), Some(28), "curl should have timed out");
    provider.set_faults(&[]).await;
    let (status, answer) = sidecar.curl_in_session(&id, list);
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("clickstream"), "{answer}");
    assert!(sidecar.is_running());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_answering_one_byte_at_a_time_should_be_cut_at_the_call_timeout() {
    let provider = DemoProvider::start(&[]);
    let sidecar = Sidecar::start(
        &streamco(&provider),
        &[provider.host()],
        &[("CAPSTAN_CALL_TIMEOUT_SECONDS", "2")],
    );
    let session = sidecar.session("demo-project", None).await;
    provider.set_faults(&["slow-drip"]).await;
    let started = Instant::now();
    let result = session
        .call_tool(call("streamco__streams_list", json!({})))
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(result.is_error, Some(true), "{result:?}");
    let error = &result.structured_content.as_ref().unwrap()["error"];
    assert_eq!(error["kind"], "upstream_unavailable", "{error}");
    // ~200 bytes at 5 a second would take ~40 s: the call is cut near the 2 s timeout.
    assert!(took < Duration::from_secs(6), "took {took:?}");
    // The session goes on once the provider is healthy again.
    provider.set_faults(&[]).await;
    let result = session
        .call_tool(call("streamco__streams_get", json!({"name": "orders"})))
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
}
