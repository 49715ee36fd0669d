//! RFC 8693 token exchange on the wire (docs/upstream-auth.md "Token exchange"): the request a
//! token endpoint takes and what its answer means. Which tokens are exchanged, for whom, and
//! how long the result is kept is the embedder's; this module only speaks the protocol, over
//! a [`Fetcher`] whose guard admits token endpoints (`CAPSTAN_TOKEN_ENDPOINT_HOSTS`).

use std::time::Duration;

use base64::Engine as _;
use http::{HeaderName, HeaderValue};
use serde::Deserialize;
use url::form_urlencoded;

use crate::credential::CredentialError;
use crate::fetch::{FetchError, Fetcher};

/// The grant type of a token exchange.
pub const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";

/// The token type asked for: an access token.
pub const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// The token type of a JWT (an actor token or a client assertion of the pod's).
pub const JWT_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";

/// The client assertion type of RFC 7523.
pub const JWT_BEARER_ASSERTION: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// The largest answer read from a token endpoint.
const MAX_ANSWER: usize = 64 * 1024;

/// How the client proves itself to the token service.
#[derive(Clone, Copy)]
pub enum ClientAuth<'a> {
    /// `client_secret_basic`: the id and this secret in HTTP Basic.
    Secret(&'a str),
    /// A JWT client assertion (RFC 7523): the pod's token.
    Assertion(&'a str),
}

/// One exchange.
#[derive(Clone, Copy)]
pub struct ExchangeRequest<'a> {
    /// The token endpoint.
    pub endpoint: &'a str,
    /// The caller's token, and its type URI.
    pub subject_token: &'a str,
    /// The `subject_token_type` URI.
    pub subject_token_type: &'a str,
    /// The audience asked for.
    pub audience: &'a str,
    /// The scopes asked for.
    pub scopes: &'a [String],
    /// The pod's token as `actor_token`, if sent.
    pub actor_token: Option<&'a str>,
    /// The client's id.
    pub client_id: &'a str,
    /// How the client proves itself.
    pub client_auth: ClientAuth<'a>,
}

/// A token the service issued.
#[derive(Clone, PartialEq, Eq)]
pub struct Exchanged {
    /// The issued token.
    pub access_token: String,
    /// How long it is valid, as the service said (`expires_in`).
    pub expires_in: Option<Duration>,
}

impl std::fmt::Debug for Exchanged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchanged")
            .field("access_token", &"<redacted>")
            .field("expires_in", &self.expires_in)
            .finish()
    }
}

/// A successful answer (RFC 8693 section 2.2.1).
#[derive(Deserialize)]
struct Issued {
    access_token: String,
    #[serde(default)]
    issued_token_type: Option<String>,
    token_type: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

/// An error answer (RFC 6749 section 5.2).
#[derive(Deserialize)]
struct Refused {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

/// Exchanges a token at `request.endpoint` through `fetcher` (whose guard must admit it),
/// within `timeout`. Every failure says what to fix, never a token or secret.
pub async fn exchange(
    fetcher: &Fetcher,
    request: &ExchangeRequest<'_>,
    timeout: Duration,
) -> Result<Exchanged, CredentialError> {
    let (headers, form) = encode(request);
    let endpoint = request.endpoint;
    let posted = fetcher
        .post_form(endpoint, &headers, form, timeout, MAX_ANSWER)
        .await
        .map_err(|error| unreachable_endpoint(endpoint, &error))?;
    if (200..300).contains(&posted.status) {
        return issued(endpoint, &posted.body.text);
    }
    Err(refused(request, posted.status, &posted.body.text))
}

/// The request's headers and form.
fn encode(request: &ExchangeRequest<'_>) -> (Vec<(HeaderName, HeaderValue)>, String) {
    let mut form = form_urlencoded::Serializer::new(String::new());
    form.append_pair("grant_type", GRANT_TYPE)
        .append_pair("subject_token", request.subject_token)
        .append_pair("subject_token_type", request.subject_token_type)
        .append_pair("audience", request.audience)
        .append_pair("requested_token_type", ACCESS_TOKEN_TYPE);
    if !request.scopes.is_empty() {
        form.append_pair("scope", &request.scopes.join(" "));
    }
    if let Some(actor) = request.actor_token {
        form.append_pair("actor_token", actor)
            .append_pair("actor_token_type", JWT_TOKEN_TYPE);
    }
    let mut headers = Vec::new();
    match request.client_auth {
        ClientAuth::Secret(secret) => {
            // RFC 6749 section 2.3.1: both parts form-encoded before Basic.
            let encode =
                |text: &str| form_urlencoded::byte_serialize(text.as_bytes()).collect::<String>();
            let pair = format!("{}:{}", encode(request.client_id), encode(secret));
            let basic = base64::engine::general_purpose::STANDARD.encode(pair);
            if let Ok(mut value) = HeaderValue::from_str(&format!("Basic {basic}")) {
                value.set_sensitive(true);
                headers.push((http::header::AUTHORIZATION, value));
            }
        }
        ClientAuth::Assertion(assertion) => {
            form.append_pair("client_id", request.client_id)
                .append_pair("client_assertion_type", JWT_BEARER_ASSERTION)
                .append_pair("client_assertion", assertion);
        }
    }
    (headers, form.finish())
}

/// The token of a success answer, or why it is unusable.
fn issued(endpoint: &str, body: &str) -> Result<Exchanged, CredentialError> {
    let issued: Issued = serde_json::from_str(body).map_err(|e| {
        CredentialError::transient(format!(
            "the token service at {endpoint} answered with something that is no token response: {e}"
        ))
    })?;
    let bearer = issued.token_type.eq_ignore_ascii_case("bearer")
        || issued.token_type.eq_ignore_ascii_case("n_a");
    let usable_type = issued
        .issued_token_type
        .as_deref()
        .is_none_or(|t| t == ACCESS_TOKEN_TYPE || t == JWT_TOKEN_TYPE);
    if !bearer || !usable_type || issued.access_token.is_empty() {
        return Err(CredentialError::permanent(format!(
            "the token service at {endpoint} issued a token that cannot be sent as a bearer \
             token (token_type {}, issued_token_type {})",
            issued.token_type,
            issued.issued_token_type.as_deref().unwrap_or("none")
        )));
    }
    Ok(Exchanged {
        access_token: issued.access_token,
        expires_in: issued.expires_in.map(Duration::from_secs),
    })
}

/// Why the service refused, from its error answer. Its description is kept only when it
/// repeats nothing that was sent to it (a service echoing the request would otherwise put a
/// token in every log line that carries the error).
fn refused(request: &ExchangeRequest<'_>, status: u16, body: &str) -> CredentialError {
    let endpoint = request.endpoint;
    let Ok(refused) = serde_json::from_str::<Refused>(body) else {
        let message = format!("the token service at {endpoint} answered HTTP {status}");
        return if status >= 500 || status == 429 {
            CredentialError::transient(message)
        } else {
            CredentialError::permanent(message)
        };
    };
    // The service's own description, kept short and on one line: it is the service's text.
    let described: String = refused
        .error_description
        .filter(|d| !repeats_what_was_sent(request, d))
        .map(|d| {
            let line: String = d.chars().filter(|c| !c.is_control()).take(200).collect();
            format!(" ({line})")
        })
        .unwrap_or_default();
    let fix = match refused.error.as_str() {
        "invalid_client" => "check the binding's client id and the client secret or assertion",
        "invalid_target" => "the service does not issue tokens for this audience",
        "invalid_grant" | "invalid_request" => {
            "the service does not accept this caller's token for this exchange"
        }
        "unauthorized_client" => "the client may not use token exchange at this service",
        "invalid_scope" => "the service does not grant these scopes",
        _ => "see the token service's documentation",
    };
    let message = format!(
        "the token service at {endpoint} refused the exchange: {}{described}; {fix}",
        refused.error
    );
    if status >= 500 || refused.error == "temporarily_unavailable" {
        CredentialError::transient(message)
    } else {
        CredentialError::permanent(message)
    }
}

/// Whether `text` holds a token or secret of `request`.
fn repeats_what_was_sent(request: &ExchangeRequest<'_>, text: &str) -> bool {
    let secret = match request.client_auth {
        ClientAuth::Secret(secret) | ClientAuth::Assertion(secret) => secret,
    };
    [
        Some(request.subject_token),
        request.actor_token,
        Some(secret),
    ]
    .into_iter()
    .flatten()
    .any(|sent| !sent.is_empty() && text.contains(sent))
}

/// Why the token endpoint could not be asked.
fn unreachable_endpoint(endpoint: &str, error: &FetchError) -> CredentialError {
    match error {
        FetchError::Refused(refusal) => CredentialError::permanent(format!(
            "token endpoint {endpoint} was not dialed: {} (CAPSTAN_TOKEN_ENDPOINT_HOSTS)",
            refusal.reason
        )),
        other => CredentialError::transient(format!(
            "the token service at {endpoint} could not be reached: {other}"
        )),
    }
}

#[cfg(test)]
mod tests;
