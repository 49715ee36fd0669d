//! The documents and requests the sidecar's tests send, and how they read its refusals.

use serde_json::{Value, json};

use crate::{DemoProvider, binding_document, repo_root};

/// A binding document for `project` with one MCP server on `provider`.
pub fn binding(
    name: &str,
    project: Option<&str>,
    server: &str,
    provider: &DemoProvider,
    include: &[&str],
) -> Value {
    let mut document = binding_document(name, server, &provider.url("/mcp"), include);
    if let Some(project) = project {
        document["metadata"]["namespace"] = json!(project);
    }
    document
}

/// The StreamCo fixture with its endpoints on `provider`.
pub fn streamco(provider: &DemoProvider) -> Value {
    let text =
        std::fs::read_to_string(repo_root().join("examples/streamco/capability-documents.json"))
            .unwrap()
            .replace("127.0.0.1:7810", &provider.host());
    serde_json::from_str(&text).unwrap()
}

/// Asserts that `body` is the sidecar's refusal `{"error": {"kind", "message"}}` of `kind`
/// whose message contains `message`.
pub fn assert_refusal(body: &str, kind: &str, message: &str) {
    let refusal: Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("not a refusal ({e}): {body}"));
    assert_eq!(refusal["error"]["kind"], kind, "{body}");
    assert!(
        refusal["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(message)),
        "want {message:?}: {body}"
    );
}

/// The value of header `name` in a response head or curl's header dump.
pub fn header_value(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_owned())
    })
}

/// The body of an `initialize` request.
pub const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}"#;

/// A capability-provider API on loopback that answers every project with `documents` and
/// counts the requests it receives.
pub struct RecordingProviderApi {
    /// Its base URL (`CAPABILITY_PROVIDER_URL`).
    pub url: String,
    /// The requests it has answered.
    pub requests: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl RecordingProviderApi {
    /// Serves `documents` to every project on a free loopback port.
    pub async fn start(documents: Value) -> Self {
        let requests = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = requests.clone();
        let app = axum::Router::new().route(
            "/projects/{project}/capability-documents",
            axum::routing::get(move || {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let documents = documents.clone();
                async move { axum::Json(documents) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, requests }
    }

    /// The requests answered so far.
    pub fn count(&self) -> usize {
        self.requests.load(std::sync::atomic::Ordering::SeqCst)
    }
}
