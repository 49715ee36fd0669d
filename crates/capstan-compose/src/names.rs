//! How provider tools are named in a composition: `<server>__<tool>`, sanitized, and never
//! longer than the major model APIs accept (64 characters of `[a-zA-Z0-9_-]`) — or, for a
//! server with `toolNames: Unprefixed`, the tool's own name (already such a name: the binding
//! rules refuse any other).
//!
//! A longer name is shortened deterministically: the first 55 characters of the full name, an
//! underscore, and the first 8 hex digits of the SHA-256 of the full name — readable, stable
//! across sidecars and restarts, and distinct for distinct full names unless their digests
//! collide. Two names that shorten alike meet in the composition's first-wins table like any
//! other collision (`compose.rs`): reported, never silently overwritten.

use capstan_api::Naming;
use capstan_api::patterns::is_tool_name_char;
use sha2::{Digest, Sha256};

/// The longest tool name the major model APIs accept.
pub const MAX_TOOL_NAME: usize = 64;

/// Hex digits of the digest a shortened name ends with.
const DIGEST_DIGITS: usize = 8;

/// Replaces every character outside `[a-zA-Z0-9_-]` with `_`.
pub fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| if is_tool_name_char(c) { c } else { '_' })
        .collect()
}

/// `<server>__<tool>`, sanitized, at any length.
pub fn full_name(server: &str, tool: &str) -> String {
    format!("{}__{}", sanitize(server), sanitize(tool))
}

/// The composed name of `tool` on MCP server `server`: [`full_name`], shortened to
/// [`MAX_TOOL_NAME`] when longer.
pub fn composed_name(server: &str, tool: &str) -> String {
    shortened(&full_name(server, tool))
}

/// The name `tool` of `server` takes under `naming`, before shortening: [`full_name`], or the
/// tool's own name sanitized.
pub fn full_name_as(naming: Naming, server: &str, tool: &str) -> String {
    match naming {
        Naming::Prefixed => full_name(server, tool),
        Naming::Unprefixed => sanitize(tool),
    }
}

/// The composed name of `tool` of `server` under `naming`.
pub fn composed_name_as(naming: Naming, server: &str, tool: &str) -> String {
    shortened(&full_name_as(naming, server, tool))
}

/// `full` itself when it fits, else its first characters, `_` and a digest of all of it.
pub fn shortened(full: &str) -> String {
    if full.len() <= MAX_TOOL_NAME {
        return full.to_owned();
    }
    let digest = Sha256::digest(full.as_bytes());
    let digits: String = digest
        .iter()
        .take(DIGEST_DIGITS / 2)
        .map(|b| format!("{b:02x}"))
        .collect();
    // Sanitized names are ASCII: any byte index is a character boundary.
    let keep = MAX_TOOL_NAME - 1 - DIGEST_DIGITS;
    format!("{}_{digits}", &full[..keep])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_should_be_namespaced_and_sanitized() {
        assert_eq!(
            composed_name("streamco", "streams_list"),
            "streamco__streams_list"
        );
        assert_eq!(
            composed_name("stream.co", "get/one thing"),
            "stream_co__get_one_thing"
        );
        assert_eq!(composed_name("é", "a-b"), "___a-b");
    }

    #[test]
    fn a_name_of_64_characters_should_stay_as_it_is() {
        let server = "s".repeat(30);
        let tool = "t".repeat(32);
        let name = composed_name(&server, &tool);
        assert_eq!(name, format!("{server}__{tool}"));
        assert_eq!(name.len(), 64);
    }

    #[test]
    fn a_longer_name_should_keep_its_start_and_end_in_a_digest_of_the_whole() {
        let server = "a".repeat(60);
        let tool = "list_every_stream_of_a_project";
        assert_eq!(tool.len(), 30);
        let name = composed_name(&server, tool);
        assert_eq!(name.len(), 64);
        assert!(name.starts_with(&"a".repeat(55)), "{name}");
        // The oracle: the digest computed here from the full name, independently.
        let full = format!("{server}__{tool}");
        let digest = Sha256::digest(full.as_bytes());
        let expected = format!(
            "{}_{:02x}{:02x}{:02x}{:02x}",
            &full[..55],
            digest[0],
            digest[1],
            digest[2],
            digest[3]
        );
        assert_eq!(name, expected);
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        );
    }

    #[test]
    fn names_that_differ_only_past_the_cut_should_stay_apart() {
        let server = "b".repeat(60);
        let one = composed_name(&server, "streams_list_by_owner");
        let other = composed_name(&server, "streams_list_by_group");
        assert_eq!(one[..55], other[..55]);
        assert_ne!(one, other);
        assert_eq!(composed_name(&server, "streams_list_by_owner"), one);
    }
}
