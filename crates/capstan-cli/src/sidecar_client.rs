//! Talking to a capstan-sidecar over its Unix socket: who is asking ([`Target`]), a GET of its
//! JSON API, and the runtime and failure exit the subcommands that ask it share.

use std::path::PathBuf;
use std::process::ExitCode;

use capstan_api::wire::{DEFAULT_SOCKET, PROJECT_HEADER, SOCKET_HOST};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// Where the sidecar listens and who is asking.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// The sidecar's Unix socket.
    #[arg(long, env = "CAPSTAN_SOCKET", default_value = DEFAULT_SOCKET)]
    pub(crate) socket: PathBuf,
    /// The project to act in (a Kubernetes object name: lower-case letters, digits, '-'
    /// and '.').
    #[arg(long, env = "CAPSTAN_PROJECT", value_parser = project_name)]
    pub(crate) project: String,
    /// The caller's bearer token (sent as `Authorization: Bearer …`, never to providers).
    #[arg(long, env = "CAPSTAN_TOKEN")]
    pub(crate) token: Option<String>,
    /// The header naming the project (as the sidecar is configured).
    #[arg(long, env = "CAPSTAN_PROJECT_HEADER", default_value = PROJECT_HEADER)]
    pub(crate) project_header: String,
}

/// Refuses what the sidecar would refuse, with the same rule, before anything is sent.
pub(crate) fn project_name(value: &str) -> Result<String, capstan_api::ProjectNameError> {
    capstan_api::check_project_name(value).map(|()| value.to_owned())
}

/// Why a subcommand could not get its answer from the sidecar; each says what was being done.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SidecarError {
    /// The runtime the subcommand blocks on could not start.
    #[error("starting the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// Nothing answered on the socket.
    #[error("connecting to {}: {source} (is the sidecar running?)", socket.display())]
    Connect {
        socket: PathBuf,
        source: std::io::Error,
    },
    /// The HTTP exchange failed after the socket was open.
    #[error("{step}: {source}")]
    Exchange {
        /// What was being done, e.g. `GET /v1/composition`.
        step: String,
        source: hyper::Error,
    },
    /// The target names a header or project no HTTP request can carry.
    #[error("{field} cannot be sent in a header: {source}")]
    Header {
        field: &'static str,
        source: http::Error,
    },
    /// The sidecar answered with something other than JSON.
    #[error("the sidecar answered {status} with a body that is not JSON: {source}")]
    NotJson {
        status: hyper::StatusCode,
        source: serde_json::Error,
    },
    /// The sidecar refused, with its own message.
    #[error("the sidecar refused ({status}): {message}")]
    Refused {
        status: hyper::StatusCode,
        message: String,
    },
    /// The MCP session could not be opened.
    #[error("opening a session on {}: {source}", socket.display())]
    Session {
        socket: PathBuf,
        source: Box<rmcp::service::ClientInitializeError>,
    },
    /// The session opened, but the call failed (not a tool's own error: that is a result).
    #[error("calling {tool}: {source}")]
    Call {
        tool: String,
        source: rmcp::ServiceError,
    },
}

/// The current-thread runtime each subcommand blocks on.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, SidecarError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(SidecarError::Runtime)
}

/// Prints `message` as capstanctl's failure and exits 1.
pub(crate) fn fail(message: &str) -> ExitCode {
    eprintln!("capstanctl: {message}");
    ExitCode::from(1)
}

/// GETs `path` (with its query) from the sidecar as `target`'s caller: the JSON body, or the
/// sidecar's refusal as a message.
pub(crate) async fn fetch_json(target: &Target, path: &str) -> Result<Value, SidecarError> {
    let socket = &target.socket;
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|source| SidecarError::Connect {
            socket: socket.clone(),
            source,
        })?;
    let exchange = |step: String| move |source| SidecarError::Exchange { step, source };
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(exchange(format!("handshake on {}", socket.display())))?;
    tokio::spawn(connection);
    let mut request = hyper::Request::get(format!("http://{SOCKET_HOST}{path}"))
        .header(hyper::header::HOST, SOCKET_HOST)
        .header(target.project_header.as_str(), target.project.as_str());
    if let Some(token) = &target.token {
        request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = request
        .body(Empty::<Bytes>::new())
        .map_err(|source| SidecarError::Header {
            field: "--project, --project-header or --token",
            source,
        })?;
    let response = sender
        .send_request(request)
        .await
        .map_err(exchange(format!("GET {path}")))?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(exchange(format!("reading the answer to GET {path}")))?
        .to_bytes();
    let value: Value =
        serde_json::from_slice(&body).map_err(|source| SidecarError::NotJson { status, source })?;
    if !status.is_success() {
        let message = value["error"]["message"].as_str().unwrap_or("no message");
        return Err(SidecarError::Refused {
            status,
            message: message.to_owned(),
        });
    }
    Ok(value)
}
