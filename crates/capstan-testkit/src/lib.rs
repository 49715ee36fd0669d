//! Test support shared by the integration tests and benchmarks of the composer, the sidecar,
//! the demo provider and the e2e suites: building workspace binaries in the caller's profile,
//! running the demo provider and the benchmarks' upstreams on free loopback ports, finding the
//! Python and TypeScript MCP SDKs, and the oracles tests check Capstan against.
//!
//! Everything here panics with a message on failure: it only ever runs inside tests. Only
//! tests, benches and the e2e crate depend on it.

mod bench_upstreams;
mod binding_document;
mod demo_provider;
mod http_client;
mod listen;
mod mcpload;
mod node_sdk;
mod pin_oracle;
mod proc_stats;
mod python_sdk;
mod spawned;
mod streams;
mod token_service;
mod workspace;

pub use bench_upstreams::{EchoUpstream, TcpHop};
pub use binding_document::binding_document;
pub use demo_provider::DemoProvider;
pub use http_client::{client, install_crypto_provider};
pub use listen::{listen_request, open_listen, read_head, status_of};
pub use mcpload::{OpenSessions, mcpload, mcpload_call};
pub use node_sdk::node_dir;
pub use pin_oracle::{body_pin_oracle, pin_oracle, pin_oracle_of};
pub use proc_stats::{CpuTime, cpu_nanos, cpu_seconds, cpu_time, proc_status_kib};
pub use python_sdk::{ListeningClient, PythonServer, python, unix_seconds};
pub use streams::{NotEnded, read_until_end};
pub use token_service::{TokenService, tokenservice};
pub use workspace::{PREBUILT, binary, repo_root};

pub mod sidecar;
