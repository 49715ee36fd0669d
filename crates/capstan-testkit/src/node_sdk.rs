//! Where the TypeScript MCP SDK is installed for the tests' Node scripts.

use std::path::PathBuf;

/// The directory holding the TypeScript MCP SDK's `node_modules` (`make tools` installs it
/// into `~/.cache/capstan/node`; `CAPSTAN_NODE_DIR` overrides). Scripts run from there, since
/// ES modules resolve packages next to the importing file.
pub fn node_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("CAPSTAN_NODE_DIR") {
        return dir.into();
    }
    let cache = std::env::var("XDG_CACHE_HOME")
        .unwrap_or_else(|_| format!("{}/.cache", std::env::var("HOME").unwrap_or_default()));
    let dir = PathBuf::from(cache).join("capstan/node");
    assert!(
        dir.join("node_modules/@modelcontextprotocol/sdk").exists(),
        "{} has no TypeScript MCP SDK: run `make tools` (e2e/node-env installs it)",
        dir.display()
    );
    dir
}
