//! Test support around the demo provider, shared by the integration tests and benchmarks of
//! the composer and the sidecar: building workspace binaries in the caller's profile, running
//! the demo provider on a free loopback port, and finding the Python `mcp` SDK.
//!
//! Everything here panics with a message on failure: it only ever runs inside tests.

pub mod harness;
