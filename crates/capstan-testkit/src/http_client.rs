//! The HTTP client tests talk to their servers with, and the TLS provider it needs.

/// An HTTP client for talking to test servers (installs the process's TLS provider, which
/// the workspace's reqwest leaves to the application).
pub fn client() -> reqwest::Client {
    install_crypto_provider();
    reqwest::Client::new()
}

/// Installs the process's TLS crypto provider (ring) unless one is installed: the workspace's
/// reqwest and rmcp clients leave that choice to the application.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
