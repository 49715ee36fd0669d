//! The address policy for names, with names made for the test.
//!
//! Each test runs itself again inside a private mount and network namespace (`unshare
//! --mount --net`, root): there `/etc/hosts` is a file of the test's (bind-mounted) and the
//! network has only a loopback interface, which also carries 10.0.0.1. Names such as
//! `loop.providers.test` then resolve to loopback or private addresses without touching the
//! machine's name resolution, and a provider can really listen on 10.0.0.1.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use capstan_compose::composition::Composition;
use capstan_compose::limits::Limits;
use common::{DemoProvider, compose_binding, composer, documents, knowledge_binding};
use serde_json::Value;

/// Set in the environment of the run inside the namespace.
const INSIDE: &str = "CAPSTAN_TEST_IN_NAMESPACE";

/// The private address a provider listens on inside the namespace.
const PRIVATE_IP: &str = "10.0.0.1";

const HOSTS: &str = "\
127.0.0.1 localhost
127.0.0.1 loop.providers.test
10.0.0.1 private.providers.test
127.0.0.1 loop.internal.test
10.0.0.1 svc.internal.test
";

/// Whether this run is the one inside the namespace. Outside, runs `test` (this binary, that
/// test only) inside one and asserts that it passed.
fn inside_namespace(test: &str) -> bool {
    if std::env::var_os(INSIDE).is_some() {
        return true;
    }
    // The demo provider is built before entering: cargo has no network inside.
    let _ = capstan_testkit::binary("demo-provider");
    let dir = std::env::temp_dir().join(format!("capstan-netns-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let hosts = dir.join("hosts");
    std::fs::write(&hosts, HOSTS).unwrap();
    let script = "set -e; ip link set lo up; ip addr add 10.0.0.1/32 dev lo; \
                  mount --bind \"$1\" /etc/hosts; shift; exec \"$@\"";
    let output = Command::new("unshare")
        .args(["--mount", "--net", "--", "sh", "-c", script, "sh"])
        .arg(&hosts)
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(INSIDE, "1")
        .output()
        .expect("running unshare (util-linux)");
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{test} failed inside its namespace (it needs root for `unshare --mount --net` and \
         `ip` from iproute2):\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // A run that selected no test passes too (a renamed test, a filter that matches
    // nothing): exactly this test must have run, and passed.
    assert!(
        stdout.contains(&format!("test {test} ... ok")) && stdout.contains("1 passed;"),
        "{test} did not run inside its namespace:\n{stdout}"
    );
    false
}

/// The `/mcp` requests a provider received (its request log also holds the reads of itself).
async fn mcp_requests(provider: &DemoProvider) -> Vec<Value> {
    provider
        .requests()
        .await
        .into_iter()
        .filter(|r| r["path"] == "/mcp")
        .collect()
}

async fn compose_one(endpoint: &str, hosts: &[String]) -> Composition {
    let composed =
        compose_binding(hosts, "provider", "streamco", endpoint, &["streams_list"]).await;
    let composition = composed.composition.clone();
    composed.close().await;
    composition
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wildcard_name_resolving_to_loopback_should_not_be_dialed() {
    if !inside_namespace("a_wildcard_name_resolving_to_loopback_should_not_be_dialed") {
        return;
    }
    let provider = DemoProvider::start_on("127.0.0.1:0", &[], &["loop.providers.test"]);
    let port = provider.address.port();
    let endpoint = format!("http://loop.providers.test:{port}/mcp");
    let composition = compose_one(&endpoint, &[format!("*.providers.test:{port}")]).await;
    let outcome = &composition.bindings[0];
    assert!(composition.tools.is_empty());
    assert_eq!(
        outcome.refused,
        [format!(
            "endpoint {endpoint} was not dialed: host loop.providers.test resolves to \
             127.0.0.1, which is loopback; a name admitted by the wildcard entry \
             *.providers.test:{port} must resolve to public addresses or into an IP or CIDR \
             entry of the allow-list"
        )]
    );
    assert!(mcp_requests(&provider).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wildcard_name_resolving_to_a_private_address_should_need_a_covering_cidr() {
    if !inside_namespace(
        "a_wildcard_name_resolving_to_a_private_address_should_need_a_covering_cidr",
    ) {
        return;
    }
    let provider =
        DemoProvider::start_on(&format!("{PRIVATE_IP}:0"), &[], &["private.providers.test"]);
    let port = provider.address.port();
    let endpoint = format!("http://private.providers.test:{port}/mcp");

    let refused = compose_one(&endpoint, &["*.providers.test".into()]).await;
    assert!(refused.tools.is_empty());
    let reason = &refused.bindings[0].refused;
    assert_eq!(reason.len(), 1, "{reason:?}");
    assert!(
        reason[0].starts_with(&format!(
            "endpoint {endpoint} was not dialed: host private.providers.test resolves to \
             10.0.0.1, which is a private address; "
        )),
        "{reason:?}"
    );
    assert!(mcp_requests(&provider).await.is_empty());

    // A CIDR entry that does not cover the answer changes nothing; one that does admits it.
    let elsewhere = compose_one(
        &endpoint,
        &["*.providers.test".into(), "10.1.0.0/16".into()],
    )
    .await;
    assert_eq!(elsewhere.bindings[0].refused.len(), 1);
    assert!(mcp_requests(&provider).await.is_empty());
    let covered = compose_one(&endpoint, &["*.providers.test".into(), "10.0.0.0/8".into()]).await;
    assert!(covered.bindings[0].refused.is_empty(), "{covered:?}");
    assert_eq!(
        covered
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["streamco__streams_list"]
    );
    assert!(!mcp_requests(&provider).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_exact_name_should_reach_private_addresses_but_loopback_only_through_a_loopback_entry() {
    if !inside_namespace(
        "an_exact_name_should_reach_private_addresses_but_loopback_only_through_a_loopback_entry",
    ) {
        return;
    }
    // An exact name may resolve to a private address (an in-cluster service).
    let private = DemoProvider::start_on(&format!("{PRIVATE_IP}:0"), &[], &["svc.internal.test"]);
    let port = private.address.port();
    let composition = compose_one(
        &format!("http://svc.internal.test:{port}/mcp"),
        &[format!("svc.internal.test:{port}")],
    )
    .await;
    assert_eq!(composition.tools.len(), 1, "{composition:?}");

    // To loopback only when a loopback entry is listed.
    let local = DemoProvider::start_on("127.0.0.1:0", &[], &["loop.internal.test"]);
    let port = local.address.port();
    let endpoint = format!("http://loop.internal.test:{port}/mcp");
    let refused = compose_one(&endpoint, &[format!("loop.internal.test:{port}")]).await;
    assert_eq!(
        refused.bindings[0].refused,
        [format!(
            "endpoint {endpoint} was not dialed: host loop.internal.test resolves to 127.0.0.1, \
             which is loopback; the entry loop.internal.test admits loopback only when the \
             entry is `localhost` or a loopback address or CIDR is listed"
        )]
    );
    assert!(mcp_requests(&local).await.is_empty());
    let admitted = compose_one(
        &endpoint,
        &[format!("loop.internal.test:{port}"), "127.0.0.0/8".into()],
    )
    .await;
    assert_eq!(admitted.tools.len(), 1, "{admitted:?}");
    assert!(!mcp_requests(&local).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn knowledge_on_a_wildcard_name_resolving_to_loopback_should_not_be_fetched() {
    if !inside_namespace("knowledge_on_a_wildcard_name_resolving_to_loopback_should_not_be_fetched")
    {
        return;
    }
    let provider = DemoProvider::start_on("127.0.0.1:0", &[], &[]);
    let port = provider.address.port();
    let text = knowledge_binding(&[format!("http://loop.providers.test:{port}/llms-full.txt")]);
    let hosts = vec![format!("*.providers.test:{port}")];
    let composed = composer(&hosts, &hosts, Limits::default())
        .compose(&documents(&text))
        .await;
    let errors = &composed.composition.bindings[0].knowledge_errors;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("was not dialed") && errors[0].contains("resolves to 127.0.0.1"),
        "{errors:?}"
    );
    assert!(
        provider
            .requests()
            .await
            .iter()
            .all(|r| r["path"] == "/debug/requests")
    );
    composed.close().await;
}
