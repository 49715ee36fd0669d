//! Why a forwarded tool call produced no result, in the error kinds README.md lists that a caller
//! can tell apart (not allowed, invalid input, unavailable, malformed).

use thiserror::Error;

/// Why a forwarded call produced no result. Each maps onto one of the error kinds README.md lists.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum CallError {
    /// The tool is not on the server's allow-list.
    #[error("tool {tool} is not allowed on MCP server {server}")]
    NotAllowed {
        /// The MCP server entry.
        server: String,
        /// The tool's upstream name.
        tool: String,
    },
    /// The upstream refused the arguments.
    #[error("{server} refused the arguments of {tool}: {message}")]
    InvalidInput {
        /// The MCP server entry.
        server: String,
        /// The tool's upstream name.
        tool: String,
        /// The upstream's message.
        message: String,
    },
    /// The upstream cannot be reached or did not answer in time.
    #[error("{server} is unavailable: {message}")]
    Unavailable {
        /// The MCP server entry.
        server: String,
        /// What failed.
        message: String,
    },
    /// The upstream answered with something that is not a tool result.
    #[error("{server} answered with a malformed response: {message}")]
    Malformed {
        /// The MCP server entry.
        server: String,
        /// What was wrong.
        message: String,
    },
}
