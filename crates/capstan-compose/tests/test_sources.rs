//! The fixture and HTTP sources, against a real file and a real HTTP server on loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use capstan_compose::{
    CrdSource, DEFAULT_PROVIDER_MAX_BODY, DocumentSource, FixtureSource, HttpSource,
    ProjectDocuments, ReadOutcome, Uncached,
};
use serde_json::json;

fn document(name: &str, namespace: Option<&str>) -> serde_json::Value {
    let mut document = common::binding(name, "s", "http://127.0.0.1:7810/mcp", &["t"]);
    if let Some(namespace) = namespace {
        document["metadata"]["namespace"] = json!(namespace);
    }
    document
}

/// Requests the test server received, across all tests of this binary (each test compares
/// counts it took itself before and after).
static SERVED: AtomicUsize = AtomicUsize::new(0);

/// A list of `count` valid documents, as JSON text.
fn list_of(count: usize) -> String {
    let items: Vec<_> = (0..count)
        .map(|i| document(&format!("doc-{i}"), None))
        .collect();
    serde_json::to_string(&items).unwrap()
}

/// Answers per project: `good` a valid list, `mixed` one valid and one invalid document,
/// `empty` an empty list, `down` 503, `garbage` HTML, `scalar` a JSON string, `other` a
/// document for another project, `huge` a valid list of ~9 MiB with a Content-Length,
/// `huge-chunked` the same list streamed without one, `big` a list just under 8 MiB. The
/// `{project}` segment is matched exactly as sent (percent-encoding undone by the router).
async fn serve() -> String {
    async fn documents(Path(project): Path<String>) -> axum::response::Response {
        SERVED.fetch_add(1, Ordering::SeqCst);
        match project.as_str() {
            "good" => axum::Json(json!({"items": [document("one", Some("good"))]})).into_response(),
            "mixed" => {
                let mut invalid = document("broken", None);
                invalid["spec"]
                    .as_object_mut()
                    .unwrap()
                    .remove("serviceName");
                axum::Json(json!([document("kept", None), invalid])).into_response()
            }
            "empty" => axum::Json(json!([])).into_response(),
            "down" => (StatusCode::SERVICE_UNAVAILABLE, "maintenance").into_response(),
            "garbage" => "<html>oops</html>".into_response(),
            "scalar" => axum::Json(json!("nope")).into_response(),
            "other" => {
                axum::Json(json!([document("theirs", Some("someone-else"))])).into_response()
            }
            "huge" => list_of(huge()).into_response(),
            "huge-chunked" => {
                let text = list_of(huge());
                let chunks: Vec<Result<String, std::io::Error>> = text
                    .as_bytes()
                    .chunks(64 * 1024)
                    .map(|c| Ok(String::from_utf8_lossy(c).into_owned()))
                    .collect();
                axum::body::Body::from_stream(futures::stream::iter(chunks)).into_response()
            }
            "big" => list_of(big()).into_response(),
            _ => StatusCode::NOT_FOUND.into_response(),
        }
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = axum::Router::new().route(
        "/api/projects/{project}/capability-documents",
        axum::routing::get(documents),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}/api/")
}

/// A failing source reads as no documents, counted as an error (never as "empty").
async fn assert_no_capabilities(source: &HttpSource, project: &str) {
    let reader = Uncached::new(Arc::new(source.clone()));
    let (documents, outcome) = reader.read(project).await;
    assert_eq!(
        (documents.documents.len(), outcome),
        (0, ReadOutcome::Error),
        "{project}"
    );
}

fn names(documents: &[capstan_compose::Document]) -> Vec<&str> {
    documents.iter().map(|d| d.binding.as_str()).collect()
}

#[tokio::test]
async fn http_source_should_read_a_project_list() {
    capstan_compose::install_crypto_provider();
    let source = HttpSource::new(&serve().await, DEFAULT_PROVIDER_MAX_BODY).unwrap();
    assert_eq!(
        names(&source.documents("good").await.unwrap().documents),
        ["one"]
    );
    assert!(
        source
            .documents("empty")
            .await
            .unwrap()
            .documents
            .is_empty()
    );
}

/// Documents in the `huge` answers (~9 MiB of JSON) and the `big` one (~7.5 MiB).
fn huge() -> usize {
    9 * 1024 * 1024 / list_of(1).len()
}

fn big() -> usize {
    15 * 512 * 1024 / list_of(1).len()
}

#[tokio::test]
async fn http_source_should_refuse_an_answer_over_its_byte_limit() {
    capstan_compose::install_crypto_provider();
    let source = HttpSource::new(&serve().await, DEFAULT_PROVIDER_MAX_BODY).unwrap();
    // The test's oracle for the sizes, computed here and not by the source.
    assert!(list_of(huge()).len() > 8 * 1024 * 1024);
    assert!(list_of(big()).len() < 8 * 1024 * 1024);
    let error = source.documents("huge").await.unwrap_err();
    assert_eq!(
        error.message,
        format!(
            "{}projects/huge/capability-documents: the answer is {} bytes, over the 8388608 byte limit \
             (CAPABILITY_PROVIDER_MAX_BYTES)",
            source.base(),
            list_of(huge()).len()
        )
    );
    let error = source.documents("huge-chunked").await.unwrap_err();
    assert!(
        error.message.contains("the answer is more than ")
            && error
                .message
                .ends_with("over the 8388608 byte limit (CAPABILITY_PROVIDER_MAX_BYTES)"),
        "{error}"
    );
    // Under the limit, every document is kept.
    assert_eq!(
        source.documents("big").await.unwrap().documents.len(),
        big()
    );
    // A smaller limit applies as configured.
    let small = HttpSource::new(&serve().await, 1024).unwrap();
    let error = small.documents("big").await.unwrap_err();
    assert!(
        error.message.contains("over the 1024 byte limit"),
        "{error}"
    );
}

/// Names the sidecar refuses, and so must every source on its own.
const NOT_PROJECT_NAMES: [&str; 8] = ["..", ".", "a/b", "%2e%2e", "A", "a..b", "", "projé"];

#[tokio::test]
async fn every_source_should_refuse_a_project_that_is_not_a_project_name_without_reading() {
    capstan_compose::install_crypto_provider();
    let http = HttpSource::new(&serve().await, DEFAULT_PROVIDER_MAX_BODY).unwrap();
    let fixture =
        FixtureSource::new(common::repo_root().join("examples/streamco/capability-documents.json"));
    // Nothing listens on port 1: had the crd source dialed, its error would say so.
    let crd = CrdSource::new(
        kube::Config::new("http://127.0.0.1:1".parse().unwrap()),
        Some("http://127.0.0.1:1/projects/{project}/control-plane".into()),
    );
    let long = "a".repeat(254);
    let served = SERVED.load(Ordering::SeqCst);
    for project in NOT_PROJECT_NAMES.iter().copied().chain([long.as_str()]) {
        let sources: [(&str, &dyn DocumentSource); 3] =
            [("http", &http), ("fixture", &fixture), ("crd", &crd)];
        for (kind, source) in sources {
            let error = source.documents(project).await.unwrap_err();
            assert_eq!(error.source_kind, kind);
            assert!(
                error
                    .message
                    .ends_with(capstan_api::project::PROJECT_NAME_RULE),
                "{kind} {project:?}: {error}"
            );
        }
    }
    assert_eq!(
        SERVED.load(Ordering::SeqCst),
        served,
        "the provider API was asked"
    );
}

#[tokio::test]
async fn http_source_should_skip_invalid_documents_and_keep_valid_ones() {
    capstan_compose::install_crypto_provider();
    let source = HttpSource::new(&serve().await, DEFAULT_PROVIDER_MAX_BODY).unwrap();
    assert_eq!(
        names(&source.documents("mixed").await.unwrap().documents),
        ["kept"]
    );
}

#[tokio::test]
async fn http_source_should_drop_documents_for_another_project() {
    capstan_compose::install_crypto_provider();
    let source = HttpSource::new(&serve().await, DEFAULT_PROVIDER_MAX_BODY).unwrap();
    assert!(
        source
            .documents("other")
            .await
            .unwrap()
            .documents
            .is_empty()
    );
}

#[tokio::test]
async fn http_source_failures_should_read_as_no_capabilities() {
    capstan_compose::install_crypto_provider();
    let base = serve().await;
    let source = HttpSource::new(&base, DEFAULT_PROVIDER_MAX_BODY).unwrap();
    for (project, why) in [
        ("down", "HTTP 503"),
        ("garbage", "not a JSON array or List"),
        ("scalar", "not a JSON array or List"),
        ("missing", "HTTP 404"),
    ] {
        let error = source.documents(project).await.unwrap_err();
        assert!(error.to_string().contains(why), "{project}: {error}");
        assert_no_capabilities(&source, project).await;
    }
    // A transport error: nothing listens there.
    let refused = HttpSource::new("http://127.0.0.1:1/", DEFAULT_PROVIDER_MAX_BODY).unwrap();
    let error = refused.documents("good").await.unwrap_err();
    assert!(
        error.to_string().starts_with(
            "http source, project good: http://127.0.0.1:1/projects/good/capability-documents: "
        ),
        "{error}"
    );
    assert_no_capabilities(&refused, "good").await;
}

#[tokio::test]
async fn fixture_source_should_scope_documents_to_the_project() {
    let dir = std::env::temp_dir().join(format!("capstan-fixture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("documents.json");
    let mut invalid = document("broken", None);
    invalid["spec"]
        .as_object_mut()
        .unwrap()
        .remove("serviceName");
    std::fs::write(
        &path,
        serde_json::to_string(&json!({"items": [
            document("mine", Some("demo-project")),
            document("theirs", Some("other-project")),
            document("everyone", None),
            invalid,
        ]}))
        .unwrap(),
    )
    .unwrap();
    let source = FixtureSource::new(&path);
    assert_eq!(
        names(&source.documents("demo-project").await.unwrap().documents),
        ["mine", "everyone"]
    );
    assert_eq!(
        names(&source.documents("other-project").await.unwrap().documents),
        ["theirs", "everyone"]
    );
    let missing = FixtureSource::new(dir.join("missing.json"));
    let error = missing.documents("demo-project").await.unwrap_err();
    assert!(error.to_string().contains("missing.json"), "{error}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn the_streamco_fixture_should_serve_the_demo_project() {
    let source =
        FixtureSource::new(common::repo_root().join("examples/streamco/capability-documents.json"));
    assert_eq!(
        names(&source.documents("demo-project").await.unwrap().documents),
        ["streamco-binding"]
    );
}

#[tokio::test]
async fn a_fixture_should_hand_over_its_qualifiers_scoped_like_documents() {
    let dir = std::env::temp_dir().join(format!("capstan-qualifiers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("documents.json");
    let qualifier = |name: &str, namespace: Option<&str>, constraint: serde_json::Value| {
        let mut q = json!({
            "apiVersion": "capabilities.assistant.miloapis.com/v1alpha1",
            "kind": "RouteQualifier",
            "metadata": {"name": name},
            "spec": {"capabilityId": "cap.web.search", "constraint": constraint}
        });
        if let Some(namespace) = namespace {
            q["metadata"]["namespace"] = json!(namespace);
        }
        q
    };
    std::fs::write(
        &path,
        serde_json::to_string(&json!({"items": [
            document("mine", None),
            qualifier("pin-mine", Some("demo-project"), json!({"kind": "pin", "target": "s"})),
            qualifier("pin-theirs", Some("other-project"), json!({"kind": "pin", "target": "x"})),
            qualifier("everyone", None, json!({"kind": "ignore", "targets": ["y"]})),
            qualifier("broken", None, json!({"kind": "pinned", "target": "s"})),
        ]}))
        .unwrap(),
    )
    .unwrap();
    let snapshot = FixtureSource::new(&path)
        .documents("demo-project")
        .await
        .unwrap();
    let qualifiers: Vec<&str> = snapshot
        .qualifiers
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(names(&snapshot.documents), ["mine"]);
    // Another project's and the invalid one are left out; the valid ones kept.
    assert_eq!(qualifiers, ["pin-mine", "everyone"]);
    assert!(snapshot.qualifiers_error.is_none());
    std::fs::remove_dir_all(&dir).unwrap();
}
