//! The HTTP/1 connections to upstreams, plain or TLS, driven in the caller's own task: every
//! request Capstan sends an MCP server goes on one, the handshake's included.
//!
//! A pooled client (reqwest, hyper-util's) keeps each connection in a task of its own: a
//! request goes to it over a channel and the answer comes back over another, two task switches
//! per call on top of the client's own layers (redirects, timeouts, the pool's bookkeeping).
//! Here a call takes an idle connection from [`Lanes`] and polls it itself, beside its request
//! and the reading of the answer, so that a forwarded call runs in the task that received it
//! from end to end; the connection goes back once its response has been read to the end. No
//! client crate drives a pooled connection in the task that uses it, hence this module
//! (docs/architecture.md "One way out"); it is built on hyper's own connection API, which the
//! pooled clients are built on too.
//!
//! An `https` upstream's connections speak TLS (rustls, the server's certificate checked against
//! the platform's trust store, as the fetcher's reqwest client checks it: `SSL_CERT_FILE` and
//! the system roots), HTTP/1.1 only. The guard is the same for both: a host name is resolved
//! by the guard's resolver, which checks every answer, and only the checked answers are dialed.
//!
//! A request whose response is read within the exchange (`exchange`) drives its connection
//! itself; a stream read elsewhere for as long as it lasts (a listen stream: `stream`) has its
//! connection carried by a task of its own until the stream ends or is dropped.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use thiserror::Error;
use tokio::net::TcpStream;
use tokio::time::Instant;

mod conn;
mod tls;

pub(crate) use self::conn::Watched;
use self::conn::{BODY_ENDED, BODY_READING, Conn, Unsent, drive, watched};
use self::tls::{Stream, TlsClient};
use super::drain::DRAIN_LIMIT;
use crate::credential::{CredentialError, Header, SharedCredential};
use crate::guard::GuardedResolver;

/// Why a request on a lane failed before its response came.
#[derive(Debug, Error)]
pub(crate) enum LaneError {
    /// The server's name was not resolved, or an answer was refused by the guard (the source
    /// is the guard's [`crate::guard::AddressRefused`]).
    #[error("resolving {host}")]
    Resolve {
        host: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// No address of the server took the connection in time.
    #[error("connecting to {host}:{port}")]
    Connect {
        host: String,
        port: u16,
        #[source]
        source: std::io::Error,
    },
    /// The TLS handshake with the server failed (its certificate not trusted, no common
    /// protocol), or no TLS client could be set up.
    #[error("TLS with {host}")]
    Tls {
        host: String,
        #[source]
        source: std::io::Error,
    },
    /// A new connection closed before its first request.
    #[error("the connection closed before its first request")]
    NotReady,
    /// The exchange itself failed (the connection closed, a malformed response).
    #[error(transparent)]
    Http(#[from] hyper::Error),
    /// The request's credential could not be had: it was not sent. (A source, not
    /// transparent: the connector finds it in a handshake's error chain.)
    #[error("no credential")]
    Credential(
        #[from]
        #[source]
        CredentialError,
    ),
}

/// Where one upstream's requests go: its server's connections and the request target.
#[derive(Clone, Debug)]
pub(crate) struct Lane {
    lanes: Arc<Lanes>,
    to: Arc<To>,
}

/// What a lane's requests are addressed with.
#[derive(Debug)]
struct To {
    key: Arc<Key>,
    /// The request target in origin form (path and query).
    path: Uri,
    /// The `Host` header.
    host: HeaderValue,
    /// The credential every request carries, asked for per request (docs/upstream-auth.md).
    credential: Option<SharedCredential>,
}

/// A server: its host (a name, or an IP literal as the URL spells it), port, and whether it
/// speaks TLS (a plain and a TLS connection to one address are never mixed).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    host: String,
    port: u16,
    tls: bool,
}

impl Lane {
    /// The lane for `url` on `lanes`, each request carrying `credential`'s header; `None` for
    /// anything but an `http` or `https` URL with a host.
    pub(crate) fn new(
        lanes: &Arc<Lanes>,
        url: &url::Url,
        credential: Option<SharedCredential>,
    ) -> Option<Self> {
        let tls = match url.scheme() {
            "http" => false,
            "https" => true,
            _ => return None,
        };
        let host = url.host_str()?;
        let port = url.port_or_known_default()?;
        let path = match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_owned(),
        };
        let authority = match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        Some(Self {
            lanes: lanes.clone(),
            to: Arc::new(To {
                key: Arc::new(Key {
                    host: host.to_owned(),
                    port,
                    tls,
                }),
                path: path.parse().ok()?,
                host: HeaderValue::from_str(&authority).ok()?,
                credential,
            }),
        })
    }

    /// A POST to the upstream: its target and `Host` set.
    pub(crate) fn post(&self) -> http::request::Builder {
        self.request(http::Method::POST)
    }

    /// A request of `method` to the upstream: its target and `Host` set.
    pub(crate) fn request(&self, method: http::Method) -> http::request::Builder {
        Request::builder()
            .method(method)
            .uri(self.to.path.clone())
            .header(http::header::HOST, self.to.host.clone())
    }

    /// Sends `request` and returns its response for the caller to read as long as it likes (a
    /// listen stream): the connection is carried by a task of its own meanwhile, back to the
    /// pool once the body has been read to its end, closed once it is dropped before.
    pub(crate) async fn stream(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<Watched>, LaneError> {
        let (conn, response) = self.send(request).await?;
        let (response, state) = watched(response);
        let lanes = Arc::downgrade(&self.lanes);
        tokio::spawn(conn.carry(state, lanes, self.to.key.clone(), None));
        Ok(response)
    }

    /// `request` sent on an idle connection (a new one when none is idle, and once more on a
    /// new one when the idle one had closed), with the connection it went on. Every request
    /// passes here, so here it takes the lane's credential: one that cannot be had stops it
    /// before a connection is taken.
    async fn send(
        &self,
        mut request: Request<Full<Bytes>>,
    ) -> Result<(Box<Conn>, Response<Incoming>), LaneError> {
        if let Some(credential) = &self.to.credential {
            let Header { name, value } = credential.header().await?;
            request.headers_mut().insert(name, value);
        }
        let mut conn = match self.lanes.take(&self.to.key) {
            Some(conn) => conn,
            // Boxed: a connect is rare, and would otherwise widen every exchange.
            None => Box::pin(self.connect()).await?,
        };
        let response = match conn.send(request).await {
            Ok(response) => response,
            // Not sent (the connection closed while idle): once more on a new connection.
            Err(Unsent::Returned(request)) => {
                conn = Box::pin(self.connect()).await?;
                conn.send(*request).await.map_err(Unsent::into_error)?
            }
            Err(Unsent::Failed(error)) => return Err(error.into()),
        };
        Ok((conn, response))
    }

    /// Sends `request` on an idle connection to the server (a new one when none is idle) and
    /// hands the response to `read`, polling the connection meanwhile. A connection whose
    /// response `read` reads to the end goes back to the pool at once; one whose body `read`
    /// leaves to another task (an abandoned stream read to its end, `mcp/drain.rs`) is polled
    /// by a task of its own until then, for at most [`DRAIN_LIMIT`]; one whose body is dropped
    /// unread is closed (that is how a 2026-07-28 request is cancelled).
    pub(crate) async fn exchange<T, F>(
        &self,
        request: Request<Full<Bytes>>,
        read: impl FnOnce(Response<Watched>) -> F,
    ) -> Result<T, LaneError>
    where
        F: Future<Output = T>,
    {
        let (mut conn, response) = self.send(request).await?;
        let (response, state) = watched(response);
        let out = drive(&mut conn.connection, std::pin::pin!(read(response))).await;
        match state.get() {
            BODY_ENDED => self.lanes.put(&self.to.key, conn),
            BODY_READING => {
                // Read elsewhere: this connection carries it until it ends.
                let lanes = Arc::downgrade(&self.lanes);
                let key = self.to.key.clone();
                tokio::spawn(conn.carry(state, lanes, key, Some(DRAIN_LIMIT)));
            }
            _ => {}
        }
        Ok(out)
    }

    /// A new connection to the server: its name resolved and checked by the guard (an IP
    /// literal is the address the guard checked with the URL), each address tried in turn.
    async fn connect(&self) -> Result<Box<Conn>, LaneError> {
        let Key { host, port, tls } = &*self.to.key;
        let port = *port;
        let literal = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>();
        let addresses = match literal {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => self
                .lanes
                .resolver
                .lookup(host)
                .await
                .map_err(|source| LaneError::Resolve {
                    host: host.clone(),
                    source,
                })?
                .into_iter()
                .map(|answer| SocketAddr::new(answer.ip(), port))
                .collect(),
        };
        let mut last = std::io::Error::other("no address to connect to");
        for address in addresses {
            let stream =
                match tokio::time::timeout(self.lanes.connect_timeout, TcpStream::connect(address))
                    .await
                {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(error)) => {
                        last = error;
                        continue;
                    }
                    Err(_) => {
                        last = std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!(
                                "{address} did not answer within {:?}",
                                self.lanes.connect_timeout
                            ),
                        );
                        continue;
                    }
                };
            // As the pooled client: no Nagle delay on a request's small writes.
            let _ = stream.set_nodelay(true);
            let stream = if *tls {
                Stream::Tls(Box::new(self.tls_handshake(host, stream).await?))
            } else {
                Stream::Plain(stream)
            };
            let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
            return Ok(Box::new(Conn {
                sender,
                connection: Some(connection),
            }));
        }
        Err(LaneError::Connect {
            host: host.clone(),
            port,
            source: last,
        })
    }
}

/// The idle connections to every upstream of a connector, by server.
#[derive(Debug)]
pub(crate) struct Lanes {
    resolver: GuardedResolver,
    connect_timeout: Duration,
    /// The TLS client of every `https` upstream, made at the first one's connect (it reads the
    /// platform's trust store).
    tls: OnceLock<Result<TlsClient, tokio_rustls::rustls::Error>>,
    idle: Mutex<HashMap<Arc<Key>, Vec<Idle>>>,
    /// Whether the sweeper of idle connections runs.
    sweeping: std::sync::atomic::AtomicBool,
}

#[derive(Debug)]
struct Idle {
    conn: Box<Conn>,
    since: Instant,
}

impl Lanes {
    /// Connections resolved by `resolver`, each given `connect_timeout` to connect.
    pub(crate) fn new(resolver: GuardedResolver, connect_timeout: Duration) -> Arc<Self> {
        Arc::new(Self {
            resolver,
            connect_timeout,
            tls: OnceLock::new(),
            idle: Mutex::default(),
            sweeping: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The most recently used idle connection to `key` still open, if any.
    fn take(&self, key: &Arc<Key>) -> Option<Box<Conn>> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let conns = idle.get_mut(key)?;
        while let Some(Idle { mut conn, since }) = conns.pop() {
            // One poll notices a connection the server closed while it was idle.
            if since.elapsed() < POOL_IDLE && conn.is_open() {
                return Some(conn);
            }
        }
        None
    }

    /// Keeps `conn` for the next request to `key`, unless it closed or enough are kept.
    fn put(self: &Arc<Self>, key: &Arc<Key>, mut conn: Box<Conn>) {
        if !conn.is_open() {
            return;
        }
        {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            let conns = idle.entry(key.clone()).or_default();
            if conns.len() >= MAX_IDLE_PER_SERVER {
                return;
            }
            conns.push(Idle {
                conn,
                since: Instant::now(),
            });
        }
        if !self.sweeping.swap(true, Ordering::AcqRel)
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(sweep(Arc::downgrade(self)));
        }
    }
}

/// Closes connections idle longer than [`POOL_IDLE`], every half of it, for as long as the
/// lanes exist (a server no longer called would otherwise keep its connections open).
async fn sweep(lanes: Weak<Lanes>) {
    loop {
        tokio::time::sleep(POOL_IDLE / 2).await;
        let Some(lanes) = lanes.upgrade() else { return };
        let mut idle = lanes.idle.lock().unwrap_or_else(PoisonError::into_inner);
        idle.retain(|_, conns| {
            conns.retain(|conn| conn.since.elapsed() < POOL_IDLE);
            !conns.is_empty()
        });
    }
}

/// How long an idle upstream connection is kept for reuse: a lane's, and the handshake's client's
/// (`connector.rs`).
pub(super) const POOL_IDLE: Duration = Duration::from_secs(30);

/// The most idle connections kept to one server: as many as calls were in flight at once,
/// up to this.
const MAX_IDLE_PER_SERVER: usize = 256;

#[cfg(test)]
mod tests;
