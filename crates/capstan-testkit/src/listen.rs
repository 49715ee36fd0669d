//! A caller's 2026-07-28 `subscriptions/listen` on a sidecar's Unix socket, written as raw
//! HTTP/1.1: what the caller sees of it — the answer's status (admitted, or refused at a cap)
//! and a stream held open until it is dropped — with no client library between the test and
//! the socket.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// The revision whose `subscriptions/listen` this is.
const REVISION: &str = "2026-07-28";

/// A `subscriptions/listen` for tool list changes as raw HTTP/1.1, with `headers` (the
/// caller's project and token) added.
pub fn listen_request(headers: &[(&str, &str)]) -> String {
    let body = serde_json::json!({
    "jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": {
        "notifications": {"toolsListChanged": true},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": REVISION,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        }}})
    .to_string();
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\
         content-type: application/json\r\naccept: application/json, text/event-stream\r\n\
         mcp-protocol-version: {REVISION}\r\nmcp-method: subscriptions/listen\r\n\
         content-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(&body);
    request
}

/// Opens a listen on the sidecar at `socket` as `headers` say: the connection — the stream,
/// open until it is dropped; a read waits at most 30 s — and the response head.
pub fn open_listen(socket: &Path, headers: &[(&str, &str)]) -> (UnixStream, String) {
    let mut stream = UnixStream::connect(socket)
        .unwrap_or_else(|e| panic!("connecting to {}: {e}", socket.display()));
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap_or_else(|e| panic!("a read timeout: {e}"));
    stream
        .write_all(listen_request(headers).as_bytes())
        .unwrap_or_else(|e| panic!("sending the listen: {e}"));
    let head = read_head(&mut stream);
    (stream, head)
}

/// A response head, read up to its blank line (what came before the connection closed, if it
/// closed first).
pub fn read_head(stream: &mut impl Read) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// The status code of a response head; 0 when it has none.
pub fn status_of(head: &str) -> u16 {
    head.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}
