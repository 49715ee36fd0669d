//! The fixture and HTTP sources, against a real file and a real HTTP server on loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use capstan_compose::source::read_or_empty;
use capstan_compose::{DocumentSource, FixtureSource, HttpSource};
use serde_json::json;

fn document(name: &str, namespace: Option<&str>) -> serde_json::Value {
    let mut document = common::binding(name, "s", "http://127.0.0.1:7810/mcp", &["t"]);
    if let Some(namespace) = namespace {
        document["metadata"]["namespace"] = json!(namespace);
    }
    document
}

/// Answers per project: `good` a valid list, `mixed` one valid and one invalid document,
/// `empty` an empty list, `down` 503, `garbage` HTML, `scalar` a JSON string, `other` a
/// document for another project; `a b` (escaped) is echoed to prove escaping.
async fn serve() -> String {
    async fn documents(Path(project): Path<String>) -> axum::response::Response {
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
            "a b/c" => axum::Json(json!([document("escaped", None)])).into_response(),
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

fn names(documents: &[capstan_compose::Document]) -> Vec<&str> {
    documents.iter().map(|d| d.binding.as_str()).collect()
}

#[tokio::test]
async fn http_source_should_read_a_project_list() {
    capstan_compose::install_crypto_provider();
    let source = HttpSource::new(&serve().await).unwrap();
    assert_eq!(names(&source.documents("good").await.unwrap()), ["one"]);
    assert_eq!(
        names(&source.documents("a b/c").await.unwrap()),
        ["escaped"]
    );
    assert!(source.documents("empty").await.unwrap().is_empty());
}

#[tokio::test]
async fn http_source_should_skip_invalid_documents_and_keep_valid_ones() {
    capstan_compose::install_crypto_provider();
    let source = HttpSource::new(&serve().await).unwrap();
    assert_eq!(names(&source.documents("mixed").await.unwrap()), ["kept"]);
}

#[tokio::test]
async fn http_source_should_drop_documents_for_another_project() {
    capstan_compose::install_crypto_provider();
    let source = HttpSource::new(&serve().await).unwrap();
    assert!(source.documents("other").await.unwrap().is_empty());
}

#[tokio::test]
async fn http_source_failures_should_read_as_no_capabilities() {
    capstan_compose::install_crypto_provider();
    let base = serve().await;
    let source = HttpSource::new(&base).unwrap();
    for (project, why) in [
        ("down", "HTTP 503"),
        ("garbage", "not a JSON array or List"),
        ("scalar", "not a JSON array or List"),
        ("missing", "HTTP 404"),
    ] {
        let error = source.documents(project).await.unwrap_err();
        assert!(error.to_string().contains(why), "{project}: {error}");
        assert!(read_or_empty(&source, project).await.is_empty());
    }
    // A transport error: nothing listens there.
    let refused = HttpSource::new("http://127.0.0.1:1/").unwrap();
    let error = refused.documents("good").await.unwrap_err();
    assert!(
        error.to_string().starts_with(
            "http source, project good: http://127.0.0.1:1/projects/good/capability-documents: "
        ),
        "{error}"
    );
    assert!(read_or_empty(&refused, "good").await.is_empty());
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
        names(&source.documents("demo-project").await.unwrap()),
        ["mine", "everyone"]
    );
    assert_eq!(
        names(&source.documents("other-project").await.unwrap()),
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
        names(&source.documents("demo-project").await.unwrap()),
        ["streamco-binding"]
    );
}
