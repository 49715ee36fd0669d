//! How provider tools are named in a composition: `<server>__<tool>`, sanitized.

/// Replaces every character outside `[a-zA-Z0-9_-]` with `_`.
pub fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The composed name of `tool` on MCP server `server`.
pub fn composed_name(server: &str, tool: &str) -> String {
    format!("{}__{}", sanitize(server), sanitize(tool))
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
}
