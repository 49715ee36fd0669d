//! The HTTP client tests talk to their servers with, and the TLS provider it needs.

pub use capstan_core::install_crypto_provider;

/// An HTTP client for talking to test servers (installs the process's TLS provider, which
/// the workspace's reqwest leaves to the application).
pub fn client() -> reqwest::Client {
    install_crypto_provider();
    reqwest::Client::new()
}
