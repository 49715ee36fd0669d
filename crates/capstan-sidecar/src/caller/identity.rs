//! Who is calling: the caller's project and bearer token, read from a request's headers, or
//! why they are refused. Pure: no session, no I/O.
//!
//! The sidecar binds both to the MCP session at `initialize` and compares later requests with
//! them (the token in constant time, `edge/gate.rs`); caller tasks and caches are keyed by a
//! digest of both (`tasks.rs`).

use std::sync::{Arc, OnceLock};

use axum::http::{HeaderMap, HeaderName, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq as _;

/// The caller of one request.
#[derive(Clone)]
pub struct Identity {
    /// The project every read and call is scoped to (a Kubernetes object name).
    pub project: String,
    /// The caller's bearer token: the base tools act as the caller with it, on the project's
    /// own control plane. It is never forwarded to a provider and never logged.
    token: Option<Arc<str>>,
    /// A digest of project and bearer token: what caller tasks and caches are keyed by. Made
    /// when first asked for: a request in a session is checked against its task's identity
    /// without one ([`Identity::is_same_caller`]).
    fingerprint: OnceLock<[u8; 32]>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("project", &self.project)
            .field("token", &self.token.as_ref().map(|_| "(redacted)"))
            .finish()
    }
}

impl Identity {
    /// The identity of `project` and `token`.
    pub fn new(project: String, token: Option<&str>) -> Self {
        Self {
            project,
            token: token.map(Arc::from),
            fingerprint: OnceLock::new(),
        }
    }

    /// Whether `other` is the same caller: the same project and the same token (none and an
    /// empty one alike) — what comparing fingerprints says, without a SHA-256 for every request
    /// in a session. The tokens are compared in constant time.
    pub fn is_same_caller(&self, other: &Identity) -> bool {
        fn token(identity: &Identity) -> &[u8] {
            identity.token.as_deref().unwrap_or("").as_bytes()
        }
        self.project == other.project && bool::from(token(self).ct_eq(token(other)))
    }

    /// A digest of the bearer token alone (callers without a token share one): who the caller
    /// is across projects, what the per-caller cap counts by. Made when a place is taken, not
    /// for every request: a SHA-256 is ~2 % of a forwarded call's instructions.
    pub fn caller(&self) -> [u8; 32] {
        let mut caller = Sha256::new();
        caller.update(b"caller\0");
        caller.update(self.token.as_deref().unwrap_or("").as_bytes());
        caller.finalize().into()
    }

    /// The caller's bearer token, if the request carried one.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// A digest of project and token: what a caller's task without a session and the caches
    /// are keyed by (the token itself is not kept in any key). Made on first use; a request
    /// in a session is checked with [`Identity::is_same_caller`] instead.
    pub fn fingerprint(&self) -> [u8; 32] {
        *self.fingerprint.get_or_init(|| {
            let mut digest = Sha256::new();
            digest.update(self.project.as_bytes());
            digest.update([0]);
            digest.update(self.token.as_deref().unwrap_or("").as_bytes());
            digest.finalize().into()
        })
    }

    /// Reads the identity of a request whose project is in `project_header`, or why it is
    /// refused: no project (400), a project that is not a project name (400), an
    /// Authorization header that is not `Bearer <token>` (401).
    pub fn from_headers(headers: &HeaderMap, project_header: &HeaderName) -> Result<Self, Refused> {
        let Some(value) = headers.get(project_header) else {
            return Err(Refused::bad_request(format!(
                "the {project_header} header is missing: every request names the project it \
                 acts in"
            )));
        };
        // Bytes that are not visible ASCII cannot be a project name; show them as text.
        let project = String::from_utf8_lossy(value.as_bytes());
        let project = project.trim();
        if let Err(error) = capstan_api::check_project_name(project) {
            return Err(Refused::bad_request(format!(
                "the {project_header} header: {error}"
            )));
        }
        let token = match headers.get(header::AUTHORIZATION) {
            None => None,
            Some(value) => {
                let token = value
                    .to_str()
                    .ok()
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .map(str::trim)
                    .filter(|t| !t.is_empty());
                match token {
                    Some(token) => Some(token.to_owned()),
                    None => {
                        return Err(Refused {
                            status: StatusCode::UNAUTHORIZED,
                            message: "the Authorization header must be `Bearer <token>`".into(),
                        });
                    }
                }
            }
        };
        Ok(Self::new(project.to_owned(), token.as_deref()))
    }
}

/// Why a request's identity is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The HTTP status to answer with.
    pub status: StatusCode,
    /// What is wrong and what to send instead.
    pub message: String,
}

impl Refused {
    fn bad_request(message: String) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message,
        }
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        refusal(self.status, "forbidden", &self.message)
    }
}

/// A JSON refusal body: `{"error": {"kind", "message"}}`.
pub fn refusal(status: StatusCode, kind: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({ "error": { "kind": kind, "message": message } })),
    )
        .into_response()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn project_header() -> HeaderName {
        HeaderName::from_static("x-capstan-project")
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (k, v) in pairs {
            headers.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        headers
    }

    fn identity(pairs: &[(&str, &str)]) -> Result<Identity, Refused> {
        Identity::from_headers(&headers(pairs), &project_header())
    }

    #[test]
    fn identity_should_need_a_project_and_a_well_formed_token() {
        assert_eq!(identity(&[]).unwrap_err().status, StatusCode::BAD_REQUEST);
        assert_eq!(
            identity(&[("x-capstan-project", "p"), ("authorization", "Basic x")])
                .unwrap_err()
                .status,
            StatusCode::UNAUTHORIZED
        );
        let a = identity(&[("x-capstan-project", "p"), ("authorization", "Bearer t")]).unwrap();
        let b = identity(&[("x-capstan-project", "p"), ("authorization", "Bearer u")]).unwrap();
        let c = identity(&[("x-capstan-project", "p")]).unwrap();
        assert_eq!(a.project, "p");
        assert_eq!(a.token(), Some("t"));
        assert_eq!(c.token(), None);
        let secret = Identity::new("p".into(), Some("s3cret-token"));
        assert_eq!(
            format!("{secret:?}"),
            r#"Identity { project: "p", token: Some("(redacted)") }"#
        );
        assert_eq!(
            a.fingerprint(),
            Identity::new("p".into(), Some("t")).fingerprint()
        );
        assert_ne!(a.fingerprint(), b.fingerprint());
        assert_ne!(a.fingerprint(), c.fingerprint());
    }

    /// The same caller exactly when the project and the token are the same: a token that
    /// extends another, or the same token in another project, is another caller.
    #[test]
    fn the_same_caller_should_be_the_same_project_and_token_and_nothing_else() {
        let caller = |project: &str, token: Option<&str>| Identity::new(project.into(), token);
        let cases = [
            (caller("p", Some("t")), caller("p", Some("t")), true),
            (caller("p", None), caller("p", Some("")), true),
            (caller("p", Some("t")), caller("p", Some("tt")), false),
            (caller("p", Some("tt")), caller("p", Some("t")), false),
            (caller("p", Some("t")), caller("p", Some("u")), false),
            (caller("p", Some("t")), caller("q", Some("t")), false),
            (caller("p", Some("t")), caller("p", None), false),
            (caller("pt", None), caller("p", Some("t")), false),
        ];
        for (a, b, same) in cases {
            let what = format!(
                "{}/{:?} vs {}/{:?}",
                a.project,
                a.token(),
                b.project,
                b.token()
            );
            assert_eq!(a.is_same_caller(&b), same, "{what}");
            assert_eq!(b.is_same_caller(&a), same, "{what}");
            // The fingerprints, what caller tasks are keyed by, agree.
            assert_eq!(a.fingerprint() == b.fingerprint(), same, "{what}");
        }
    }

    #[test]
    fn a_project_that_is_not_a_project_name_should_be_refused_naming_the_rule() {
        let long = "a".repeat(254);
        for project in ["..", ".", "a/b", "%2e%2e", "A", "a..b", long.as_str()] {
            let refused = identity(&[("x-capstan-project", project)]).unwrap_err();
            assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{project}");
            assert!(
                refused
                    .message
                    .starts_with("the x-capstan-project header: ")
                    && refused
                        .message
                        .ends_with(capstan_api::project::PROJECT_NAME_RULE),
                "{project}: {}",
                refused.message
            );
        }
        // Bytes outside visible ASCII (UTF-8 for "projé").
        let mut non_ascii = HeaderMap::new();
        non_ascii.insert(
            "x-capstan-project",
            HeaderValue::from_bytes("projé".as_bytes()).unwrap(),
        );
        let refused = Identity::from_headers(&non_ascii, &project_header()).unwrap_err();
        assert_eq!(refused.status, StatusCode::BAD_REQUEST);
        assert!(
            refused.message.contains("contains 'é'"),
            "{}",
            refused.message
        );
    }

    /// A refused identity answers with its status and the JSON error body every refusal of
    /// the sidecar has, naming what to send instead.
    #[tokio::test]
    async fn a_refused_identity_should_answer_with_its_status_and_a_json_error() {
        let refused =
            identity(&[("x-capstan-project", "p"), ("authorization", "Bearer ")]).unwrap_err();
        let response = refused.into_response();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        let body = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .unwrap();
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&body).unwrap(),
            json!({"error": {
                "kind": "forbidden",
                "message": "the Authorization header must be `Bearer <token>`",
            }})
        );
    }
}
