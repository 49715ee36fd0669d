//! The independent MCP clients (the Python and TypeScript SDKs) run against a sidecar.

use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};

use super::{NEXT, Sidecar};
use crate::{ListeningClient, node_dir, python, repo_root, unix_seconds};

/// Project, token, tool and arguments the SDK client scripts are run with.
pub const SDK_CLIENT_ARGS: [&str; 4] = [
    "demo-project",
    "caller-token",
    "streamco__streams_get",
    r#"{"name": "clickstream"}"#,
];

/// What an SDK client script (Python or TypeScript) must report after connecting at protocol
/// revision `version`, listing, reading the instructions and calling `streamco__streams_get`
/// on the StreamCo fixture.
pub fn assert_sdk_client_saw_streamco(output: &std::process::Output, version: &str) {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(seen["protocolVersion"], version, "{seen}");
    assert_eq!(
        seen["tools"],
        json!([
            "streamco__pipeline_diagnose",
            "streamco__streams_get",
            "streamco__streams_list",
            "load_skill"
        ])
    );
    let instructions = seen["instructions"].as_str().unwrap();
    assert!(instructions.contains("## Overview — streaming.streamco.example"));
    assert!(instructions.contains("- lag-triage (streaming.streamco.example): Step-by-step"));
    assert_eq!(seen["isError"], false);
    assert_eq!(seen["structured"]["state"], "Lagging");
}

/// Runs `tests/python/client.py` (the Python SDK) against `sidecar` in connect `mode`.
pub fn python_sdk_client(sidecar: &Sidecar, mode: &str) -> Output {
    Command::new(python())
        .arg(repo_root().join("crates/capstan-sidecar/tests/python/client.py"))
        .arg(&sidecar.socket)
        .args(SDK_CLIENT_ARGS)
        .arg(mode)
        .output()
        .expect("running the Python SDK client")
}

/// Runs the TypeScript SDK client script `tests/node/<script>` against `sidecar` (a copy in
/// the SDK's directory: ES modules find packages next to the script).
pub fn typescript_sdk_client(sidecar: &Sidecar, script: &str) -> Output {
    typescript_sdk_script(sidecar, script, &SDK_CLIENT_ARGS)
}

/// Runs `tests/node/<script>` with the sidecar's socket and `args`.
pub fn typescript_sdk_script(sidecar: &Sidecar, script: &str, args: &[&str]) -> Output {
    let dir = node_dir();
    let copy = dir.join(format!(
        "sidecar-{}-{}-{script}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::copy(
        repo_root()
            .join("crates/capstan-sidecar/tests/node")
            .join(script),
        &copy,
    )
    .expect("copying the TypeScript client");
    let output = Command::new("node")
        .arg(&copy)
        .arg(&sidecar.socket)
        .args(args)
        .output()
        .expect("running the TypeScript SDK client");
    let _ = std::fs::remove_file(&copy);
    output
}

/// Writes `changed` as the fixture and waits for the client's notification: how long after the
/// write it arrived, by the client's clock (never before the write).
pub fn change_and_wait(
    sidecar: &Sidecar,
    client: &ListeningClient,
    changed: &Value,
    patience: Duration,
) -> f64 {
    let changed_at = unix_seconds();
    sidecar.write_fixture(changed);
    let notified = client.next(patience);
    let notified_at = notified["notifiedAt"]
        .as_f64()
        .unwrap_or_else(|| panic!("no notification: {notified}"));
    assert!(
        notified_at >= changed_at,
        "a notification came before the change: {notified}"
    );
    notified_at - changed_at
}

/// The Python SDK client of `list_changed.py` in `sidecar` as (demo-project, t) in connect
/// `mode`, calling `gone` once notified.
pub fn listening_client(sidecar: &Sidecar, mode: &str, gone: Option<&str>) -> ListeningClient {
    ListeningClient::start(&sidecar.socket, "demo-project", "t", mode, gone)
}

/// Runs a Python SDK client script of `tests/python/` with `args` and reads the one JSON
/// report it prints; a script that fails, or prints anything else, fails the test with its
/// output.
pub fn python_report(script: &str, args: &[&str]) -> serde_json::Value {
    let output = std::process::Command::new(python())
        .arg(
            repo_root()
                .join("crates/capstan-sidecar/tests/python")
                .join(script),
        )
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {script}: {e}"));
    assert!(
        output.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{script}: {e}: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}
