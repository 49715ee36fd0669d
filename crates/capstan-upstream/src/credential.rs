//! The credential a request to a provider carries (docs/upstream-auth.md).
//!
//! Which credential an endpoint gets, and where its value comes from (a Secret, a
//! ServiceAccount token, a token exchanged for the caller's), is the embedder's to decide: the
//! sidecar and the controller's probe each implement [`Credential`]. This crate only asks for
//! the header on every request, at the one place each kind of request passes (an upstream's
//! lane, a fetch), so a rotated Secret or a refreshed token reaches the next request without a
//! new session, and a credential that cannot be had stops the request before it leaves.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use capstan_api::EndpointAuth;
use http::{HeaderName, HeaderValue};
use thiserror::Error;

/// What a [`Credential`] answers: the header to send, or why there is none.
pub type HeaderFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Header, CredentialError>> + Send + 'a>>;

/// A source of the header one endpoint's requests carry. Asked once per request; an
/// implementation caches what it can (a Secret's value until it changes, a token until shortly
/// before it expires).
pub trait Credential: Send + Sync + fmt::Debug {
    /// The header for the next request.
    fn header(&self) -> HeaderFuture<'_>;
}

/// A shared credential, as an upstream or a fetch holds it.
pub type SharedCredential = Arc<dyn Credential>;

/// One header carrying a credential. Its value is marked sensitive, and neither `Debug` nor any
/// error shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Header {
    /// The header's name.
    pub name: HeaderName,
    /// The value, marked sensitive.
    pub value: HeaderValue,
}

impl Header {
    /// `name: prefix value`, the value marked sensitive; `None` when either cannot be a header
    /// (the message says which, never the value).
    pub fn new(name: &str, prefix: &str, value: &str) -> Result<Self, CredentialError> {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            CredentialError::permanent(format!("\"{name}\" is not an HTTP header name"))
        })?;
        let mut value = HeaderValue::from_str(&format!("{prefix}{value}")).map_err(|_| {
            CredentialError::permanent(
                "the credential's value cannot be sent in a header (it holds a line break or a \
                 character outside visible ASCII)",
            )
        })?;
        value.set_sensitive(true);
        Ok(Self { name, value })
    }
}

impl fmt::Debug for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Header")
            .field("name", &self.name)
            .field("value", &"<redacted>")
            .finish()
    }
}

/// Why a request's credential could not be had: what failed and what to fix, never a value.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{message}")]
pub struct CredentialError {
    /// What failed and what to fix.
    pub message: String,
    /// Whether asking again may succeed unchanged (a token service down, an apiserver not
    /// answering) rather than needing someone to fix something (a Secret missing, an exchange
    /// refused).
    pub transient: bool,
    /// Whether only a caller could have it (a token exchange, asked for by the controller's
    /// probe): nothing is wrong, the endpoint is just not dialed without one.
    pub needs_caller: bool,
}

impl CredentialError {
    /// A failure someone must fix.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            transient: false,
            needs_caller: false,
        }
    }

    /// A failure that may pass by itself.
    pub fn transient(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            transient: true,
            needs_caller: false,
        }
    }

    /// A credential only a caller could have, asked for where there is none.
    pub fn needs_caller(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            transient: false,
            needs_caller: true,
        }
    }

    /// The same failure, its message prefixed with `context` (what was being authenticated).
    pub fn within(self, context: &str) -> Self {
        Self {
            message: format!("{context}: {}", self.message),
            ..self
        }
    }
}

/// One endpoint a binding asks Capstan to authenticate to, as its embedder is asked for the
/// credential.
#[derive(Clone, Copy, Debug)]
pub struct Dialed<'a> {
    /// The binding (or capability document) that names it.
    pub binding: &'a str,
    /// What of the binding dials it, as messages name it: `MCP server streamco`,
    /// `knowledge source https://…`, `skill triage`.
    pub what: &'a str,
    /// The URL dialed.
    pub url: &'a str,
    /// The binding's `auth` block for it.
    pub auth: &'a EndpointAuth,
}

/// What decides the credential of every endpoint a composition dials: the sidecar, for one
/// caller of one project, or the controller's probe, for none.
pub trait Credentials: Send + Sync + fmt::Debug {
    /// The credential `dialed` asks for. It is asked for its header on every request; one that
    /// cannot be served is [`Unavailable`] with the reason, never `None`.
    fn credential(&self, dialed: &Dialed<'_>) -> SharedCredential;
}

/// Shared [`Credentials`], as a composition holds them.
pub type SharedCredentials = Arc<dyn Credentials>;

/// The credentials of a process that cannot authenticate to providers: every `auth` block is
/// unavailable, so nothing is sent without the credential its binding asks for.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoCredentials;

impl Credentials for NoCredentials {
    fn credential(&self, dialed: &Dialed<'_>) -> SharedCredential {
        let kind = dialed.auth.kind().map_or("auth", |kind| kind.as_str());
        Arc::new(Unavailable(CredentialError::permanent(format!(
            "{} of binding {} asks for {kind}, which this process cannot provide",
            dialed.what, dialed.binding
        ))))
    }
}

/// A credential whose header never changes (tests, and a value the embedder already holds).
#[derive(Clone)]
pub struct Fixed(pub Header);

impl fmt::Debug for Fixed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Fixed").field(&self.0).finish()
    }
}

impl Credential for Fixed {
    fn header(&self) -> HeaderFuture<'_> {
        let header = self.0.clone();
        Box::pin(std::future::ready(Ok(header)))
    }
}

/// A credential that cannot be had, and says why on every request (an `auth` block its
/// embedder cannot serve: the request must not leave without it).
#[derive(Clone, Debug)]
pub struct Unavailable(pub CredentialError);

impl Credential for Unavailable {
    fn header(&self) -> HeaderFuture<'_> {
        Box::pin(std::future::ready(Err(self.0.clone())))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_header_should_never_show_its_value() {
        let header = Header::new("Authorization", "Bearer ", "planted-secret-value").unwrap();
        assert!(header.value.is_sensitive());
        assert!(!format!("{header:?}").contains("planted"));
        assert!(!format!("{:?}", Fixed(header)).contains("planted"));
    }

    #[test]
    fn a_value_that_would_split_the_header_should_be_refused_without_naming_it() {
        let error = Header::new("X-Api-Key", "", "planted\r\nX-Other: 1").unwrap_err();
        assert!(!error.to_string().contains("planted"));
        assert!(!error.transient);
        assert!(Header::new("bad name", "", "v").is_err());
    }
}
