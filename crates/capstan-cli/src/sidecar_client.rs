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

/// The current-thread runtime each subcommand blocks on.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))
}

/// Prints `message` as capstanctl's failure and exits 1.
pub(crate) fn fail(message: &str) -> ExitCode {
    eprintln!("capstanctl: {message}");
    ExitCode::from(1)
}

/// GETs `path` (with its query) from the sidecar as `target`'s caller: the JSON body, or the
/// sidecar's refusal as a message.
pub(crate) async fn fetch_json(target: &Target, path: &str) -> Result<Value, String> {
    let socket = &target.socket;
    let stream = tokio::net::UnixStream::connect(socket).await.map_err(|e| {
        format!(
            "connecting to {}: {e} (is the sidecar running?)",
            socket.display()
        )
    })?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("{}: {e}", socket.display()))?;
    tokio::spawn(connection);
    let mut request = hyper::Request::get(format!("http://{SOCKET_HOST}{path}"))
        .header(hyper::header::HOST, SOCKET_HOST)
        .header(target.project_header.as_str(), target.project.as_str());
    if let Some(token) = &target.token {
        request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = request
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("building the request: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("GET {path}: {e}"))?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("reading the answer to GET {path}: {e}"))?
        .to_bytes();
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| format!("the sidecar answered {status} with a body that is not JSON: {e}"))?;
    if !status.is_success() {
        let message = value["error"]["message"].as_str().unwrap_or("no message");
        return Err(format!("the sidecar refused ({status}): {message}"));
    }
    Ok(value)
}
