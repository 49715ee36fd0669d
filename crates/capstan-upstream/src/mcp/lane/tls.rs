//! A lane's TLS: the client every `https` upstream's connections share, and the byte stream
//! of a connection, plain or TLS.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::ServerName;

use super::{Lane, LaneError};

impl Lane {
    /// TLS over `stream` with the server `host`, its certificate checked for that name (or IP
    /// address), within the connect timeout.
    pub(super) async fn tls_handshake(
        &self,
        host: &str,
        stream: TcpStream,
    ) -> Result<TlsStream<TcpStream>, LaneError> {
        let tls_error = |source: std::io::Error| LaneError::Tls {
            host: host.to_owned(),
            source,
        };
        let TlsClient(connector) = self
            .lanes
            .tls
            .get_or_init(tls_client)
            .clone()
            .map_err(|error| tls_error(std::io::Error::other(error)))?;
        let name = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(name.to_owned())
            .map_err(|e| tls_error(std::io::Error::new(std::io::ErrorKind::InvalidInput, e)))?;
        match tokio::time::timeout(self.lanes.connect_timeout, connector.connect(name, stream))
            .await
        {
            Ok(connected) => connected.map_err(tls_error),
            Err(_) => Err(tls_error(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no TLS handshake within {:?}", self.lanes.connect_timeout),
            ))),
        }
    }
}

/// The TLS client of the lanes.
#[derive(Clone)]
pub(super) struct TlsClient(TlsConnector);

impl std::fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsClient")
    }
}

/// The TLS client of the lanes: the platform's trust store (as reqwest's default client, which
/// the fetcher uses), HTTP/1.1 offered by ALPN.
pub(super) fn tls_client() -> Result<TlsClient, tokio_rustls::rustls::Error> {
    use rustls_platform_verifier::ConfigVerifierExt as _;
    let mut config = tokio_rustls::rustls::ClientConfig::with_platform_verifier()?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsClient(TlsConnector::from(Arc::new(config))))
}

/// A connection's byte stream: plain TCP, or TLS over it.
pub(super) enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(stream) => Pin::new(stream).poll_read(cx, buf),
            Self::Tls(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(stream) => Pin::new(stream).poll_write(cx, buf),
            Self::Tls(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(stream) => Pin::new(stream).poll_flush(cx),
            Self::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(stream) => Pin::new(stream).poll_shutdown(cx),
            Self::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
        }
    }
}
