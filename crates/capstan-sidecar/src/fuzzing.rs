//! Entry points for the fuzz targets (`fuzz/`, docs/reliability.md): the gate
//! driven in-process with arbitrary headers and bodies, behind the same Host check and
//! session table as the served router, in front of a handler that only records that it was
//! reached. Not part of the sidecar's API.

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderName, Method, Request, StatusCode};
use axum::response::IntoResponse as _;
use capstan_api::wire::PROJECT_HEADER;
use tower::ServiceExt;

use crate::caller::identity::Identity;
use crate::edge::gate::{Gate, check, check_host};
use crate::edge::request::{EdgeRequest, Serve};
use crate::tasks::Tasks;

/// What the gate did with one request.
#[derive(Debug)]
pub struct Checked {
    /// The status answered.
    pub status: StatusCode,
    /// Whether the request got past the gate to a handler.
    pub reached: bool,
}

struct Harness {
    runtime: tokio::runtime::Runtime,
    router: Router,
}

fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        #[allow(clippy::expect_used)]
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the fuzz harness");
        let tasks = Arc::new(Tasks::new(
            crate::caller::admission::Admission::new(
                HeaderName::from_static("x-capstan-project"),
                crate::caller::admission::Caps::default(),
            ),
            crate::tasks::Lifetimes::default(),
        ));
        // What the gate lets through is answered 299, so "reached" cannot be confused with
        // any status the gate itself answers; the served router's paths and methods only.
        let serve: Serve = Arc::new(|request: EdgeRequest| {
            let method = &request.parts.method;
            let read = *method == Method::GET || *method == Method::HEAD;
            let status = match request.parts.uri.path() {
                "/mcp" if read || *method == Method::POST || *method == Method::DELETE => 299,
                "/v1/composition" | "/v1/routes" if read => 299,
                "/mcp" | "/v1/composition" | "/v1/routes" => 405,
                _ => 404,
            };
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            Box::pin(std::future::ready(status.into_response()))
        });
        let gate = Gate {
            tasks,
            starter: None,
            serve,
            tracing: Default::default(),
        };
        let router = Router::new()
            .fallback(check)
            .with_state(gate)
            .layer(axum::middleware::from_fn(check_host));
        Harness { runtime, router }
    })
}

/// Sends one request (`method`, `path`, raw header pairs, `body`) through the Host check and
/// the gate. `None` when the request cannot even be built (an invalid header
/// name or value, which no HTTP server would hand over either).
pub fn check_request(
    method: &str,
    path: &str,
    headers: &[(&[u8], &[u8])],
    body: Vec<u8>,
) -> Option<Checked> {
    let mut request = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Body::from(body)).ok()?;
    let harness = harness();
    let response = harness
        .runtime
        .block_on(harness.router.clone().oneshot(request))
        .ok()?;
    let status = response.status();
    Some(Checked {
        status,
        reached: status.as_u16() == 299,
    })
}

/// Whether these headers carry an identity the sidecar accepts (the project header's name as
/// configured by default).
pub fn identity_accepted(headers: &axum::http::HeaderMap) -> bool {
    Identity::from_headers(headers, &HeaderName::from_static("x-capstan-project")).is_ok()
}

/// The project header's default name, for targets building requests.
pub const PROJECT: &str = PROJECT_HEADER;
