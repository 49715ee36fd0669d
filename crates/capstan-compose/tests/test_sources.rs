//! The fixture and HTTP sources, against a real file and a real HTTP server on loopback; the
//! watched cluster against a fake apiserver there.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use capstan_compose::source::CrdSource;
use capstan_compose::source::DEFAULT_PROVIDER_MAX_BODY;
use capstan_compose::source::DocumentSource;
use capstan_compose::source::FixtureSource;
use capstan_compose::source::HttpSource;
use capstan_compose::source::ProjectDocuments;
use capstan_compose::source::ReadOutcome;
use capstan_compose::source::Uncached;
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

fn names(documents: &[capstan_compose::source::Document]) -> Vec<&str> {
    documents.iter().map(|d| d.binding.as_str()).collect()
}

#[tokio::test]
async fn http_source_should_read_a_project_list() {
    capstan_core::install_crypto_provider();
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
    capstan_core::install_crypto_provider();
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
    capstan_core::install_crypto_provider();
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
    capstan_core::install_crypto_provider();
    let source = HttpSource::new(&serve().await, DEFAULT_PROVIDER_MAX_BODY).unwrap();
    assert_eq!(
        names(&source.documents("mixed").await.unwrap().documents),
        ["kept"]
    );
}

#[tokio::test]
async fn http_source_should_drop_documents_for_another_project() {
    capstan_core::install_crypto_provider();
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
    capstan_core::install_crypto_provider();
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

/// How long a condition may take to hold before a test fails: generous, the machine may be busy.
const PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// Polls `probe` until it yields a value, failing the test with `what` after [`PATIENCE`].
async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = std::time::Instant::now();
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "not within {PATIENCE:?}: {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A fake apiserver on loopback holding no CapabilityBindings and no RouteQualifiers: each list
/// is answered at once — the qualifiers' once `open` says so — and each watch is held open with
/// nothing sent. Returns its URL.
async fn empty_apiserver(open: tokio::sync::watch::Receiver<bool>) -> String {
    async fn kind(
        Path(plural): Path<String>,
        uri: axum::http::Uri,
        axum::extract::State(mut open): axum::extract::State<tokio::sync::watch::Receiver<bool>>,
    ) -> axum::response::Response {
        if uri
            .query()
            .is_some_and(|q| q.split('&').any(|p| p == "watch=true"))
        {
            let nothing = futures::stream::pending::<Result<String, std::io::Error>>();
            return axum::body::Body::from_stream(nothing).into_response();
        }
        let list = match plural.as_str() {
            "capabilitybindings" => "CapabilityBindingList",
            "routequalifiers" => {
                let _ = open.wait_for(|open| *open).await;
                "RouteQualifierList"
            }
            _ => return StatusCode::NOT_FOUND.into_response(),
        };
        axum::Json(json!({
            "apiVersion": "capabilities.assistant.miloapis.com/v1alpha1",
            "kind": list,
            "metadata": {"resourceVersion": "1"},
            "items": [],
        }))
        .into_response()
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = axum::Router::new()
        .route(
            "/apis/capabilities.assistant.miloapis.com/v1alpha1/{plural}",
            axum::routing::get(kind),
        )
        .with_state(open);
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

/// A watched cluster marks a kind read before it tells its followers that the stores changed,
/// so a read that sees the new version sees the kind as read. The other way round (fixed in
/// 20df0b9), a read in the instant between the two built "RouteQualifiers have not been read
/// yet" under the new version and served it until the next change of either kind: every routed
/// call refused. That instant lasts as long as waking the followers takes, so it is widened
/// here as many followers widen it — 20,000 waiting on the change — while a reader on a thread
/// of its own reads without pause. The oracle: once the qualifiers' first sync is told and
/// nothing changes after it, a read must say they were read. Each round is a new watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_that_sees_the_qualifiers_first_sync_should_see_them_read() {
    const FOLLOWERS: usize = 20_000;
    const ROUNDS: usize = 5;
    for round in 0..ROUNDS {
        let (open, opened) = tokio::sync::watch::channel(false);
        let url = empty_apiserver(opened).await;
        let config = kube::Config::new(url.parse().unwrap());
        let watched = Arc::new(capstan_compose::source::WatchedCluster::connect(config).unwrap());
        // The bindings are read first (a read is no longer an outage); the qualifiers' list is
        // held, so their first sync is the last change.
        eventually("the bindings are read", || async {
            let (_, outcome) = watched.read("demo-project").await;
            (outcome == ReadOutcome::Empty).then_some(())
        })
        .await;
        let waiting = Arc::new(AtomicUsize::new(0));
        let followers: Vec<_> = (0..FOLLOWERS)
            .map(|_| {
                let mut changes = watched.changes().unwrap();
                let waiting = waiting.clone();
                tokio::spawn(async move {
                    waiting.fetch_add(1, Ordering::SeqCst);
                    while changes.changed().await.is_ok() {}
                })
            })
            .collect();
        eventually("every follower waits on the change", || async {
            (waiting.load(Ordering::SeqCst) == FOLLOWERS).then_some(())
        })
        .await;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = std::thread::spawn({
            let (watched, stop) = (watched.clone(), stop.clone());
            move || {
                let mut reads = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    futures::executor::block_on(watched.read("demo-project"));
                    reads += 1;
                }
                reads
            }
        });
        open.send_replace(true);
        let mut synced = watched.first_sync();
        tokio::time::timeout(PATIENCE, synced.wait_for(|synced| *synced))
            .await
            .expect("the qualifiers are read")
            .unwrap();
        stop.store(true, Ordering::SeqCst);
        let reads = reader.join().unwrap();
        let (snapshot, _) = watched.read("demo-project").await;
        assert_eq!(
            snapshot.qualifiers_error, None,
            "round {round}: a read after the first sync ({reads} reads during it)"
        );
        for follower in followers {
            follower.abort();
        }
    }
}
