//! capstan-core: the words every Capstan crate shares, below the composer and the platform
//! tools alike — the tool error a caller acts on and its kinds, where a project's control
//! plane is and how to reach it as whom, an error's chain as one line, and the process's TLS
//! set-up. Nothing here speaks to a provider or to the platform: it depends on no other
//! Capstan crate.

pub mod control_plane;
pub mod error_chain;
pub mod tool_error;

/// Installs the process-wide TLS crypto provider (ring, the one kube uses) unless one is
/// installed already. Call once before building clients.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
