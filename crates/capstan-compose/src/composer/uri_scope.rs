//! Whose URIs an upstream's answers may name (docs/mcp-surface.md "URIs in answers").
//!
//! A provider names resources in what it answers — the contents of a `resources/read`, the
//! embedded resources and resource links of a tool result or of a prompt's messages. A client
//! that caches by URI believes what it is told, so a URI in an answer is confined to the URI
//! space of the upstream that answered before the caller sees it:
//!
//! - a server shown the Capstan way (`capstan://<binding>/<server>/…`) has every URI it names
//!   shown under its own prefix, so it can only ever name its own (a URI of the sidecar's
//!   scheme it writes lands under its own prefix too);
//! - a server shown as listed (`resourceUris: AsListed`) keeps its URIs, so one that takes the
//!   sidecar's scheme, that another upstream of the composition serves (a resource it offers,
//!   or one its template produces), or that is no URI at all (whitespace or control
//!   characters, which a client may trim into another) is refused with the whole answer.

use capstan_api::patterns::is_capstan_uri;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use serde_json::Value;

use super::live::Composed;
use super::offerings::UriScope;
use capstan_upstream::mcp::CallError;

impl Composed {
    /// `uri`, named in an answer of upstream `index`, as the caller is shown it; an error
    /// naming the binding and server when it lies outside that upstream's URI space.
    pub(super) fn confined_uri(&self, index: usize, uri: &str) -> Result<String, CallError> {
        let connected = &self.upstreams[index];
        let refuse = |why: String| {
            Err(CallError::Malformed {
                server: connected.upstream.server.clone(),
                message: format!(
                    "binding {} answered with the resource URI {uri:?}, which {why}; the answer \
                     was refused",
                    connected.binding
                ),
            })
        };
        match &connected.scope {
            UriScope::Prefixed(prefix) => Ok(format!("{prefix}{uri}")),
            UriScope::AsListed if is_capstan_uri(uri) => {
                refuse("takes the sidecar's own scheme (capstan:)".into())
            }
            UriScope::AsListed if uri.is_empty() || uri.chars().any(not_in_uri) => {
                refuse("is empty or holds whitespace or control characters".into())
            }
            UriScope::AsListed => match self.offered.resolve(uri) {
                Some(route) if route.index != index => {
                    let owner = &self.upstreams[route.index];
                    refuse(format!(
                        "is served by MCP server {} of binding {}",
                        owner.upstream.server, owner.binding
                    ))
                }
                _ => Ok(uri.to_owned()),
            },
        }
    }

    /// Confines the resource URIs of a tool result of upstream `index`: its embedded
    /// resources and resource links.
    pub(super) fn confine_tool_result(
        &self,
        index: usize,
        result: &mut CallToolResult,
    ) -> Result<(), CallError> {
        for block in &mut result.content {
            let uri = match block {
                ContentBlock::Resource(embedded) => match &mut embedded.resource {
                    ResourceContents::TextResourceContents { uri, .. }
                    | ResourceContents::BlobResourceContents { uri, .. } => uri,
                    // A kind of contents rmcp may add later: refused, as one whose URI
                    // cannot be read.
                    _ => {
                        return Err(CallError::Malformed {
                            server: self.upstreams[index].upstream.server.clone(),
                            message: "an embedded resource of an unknown kind".into(),
                        });
                    }
                },
                ContentBlock::ResourceLink(link) => &mut link.uri,
                _ => continue,
            };
            *uri = self.confined_uri(index, uri)?;
        }
        Ok(())
    }

    /// Confines the URIs of a `prompts/get` result of upstream `index`: each message's embedded
    /// resource or resource link.
    pub(super) fn confine_prompt(&self, index: usize, result: &mut Value) -> Result<(), CallError> {
        let Some(messages) = result.get_mut("messages").and_then(Value::as_array_mut) else {
            return Ok(());
        };
        for message in messages {
            match message.get_mut("content") {
                Some(Value::Array(blocks)) => {
                    for block in blocks {
                        self.confine_block(index, block)?;
                    }
                }
                Some(block) => self.confine_block(index, block)?,
                None => {}
            }
        }
        Ok(())
    }

    /// Confines the `uri` of each content of a `resources/read` result of upstream `index`.
    pub(super) fn confine_contents(
        &self,
        index: usize,
        result: &mut Value,
    ) -> Result<(), CallError> {
        let Some(contents) = result.get_mut("contents").and_then(Value::as_array_mut) else {
            return Ok(());
        };
        for content in contents {
            self.confine_member(index, content, "uri")?;
        }
        Ok(())
    }

    /// One content block as JSON: an embedded resource's `resource.uri`, a resource link's
    /// `uri`.
    fn confine_block(&self, index: usize, block: &mut Value) -> Result<(), CallError> {
        match block.get("type").and_then(Value::as_str) {
            Some("resource") => match block.get_mut("resource") {
                Some(resource) => self.confine_member(index, resource, "uri"),
                None => Ok(()),
            },
            Some("resource_link") => self.confine_member(index, block, "uri"),
            _ => Ok(()),
        }
    }

    /// `object[member]`, when a string, confined in place.
    fn confine_member(
        &self,
        index: usize,
        object: &mut Value,
        member: &str,
    ) -> Result<(), CallError> {
        if let Some(uri) = object.get(member).and_then(Value::as_str) {
            let shown = self.confined_uri(index, uri)?;
            object[member] = Value::String(shown);
        }
        Ok(())
    }
}

/// A character no URI holds (RFC 3986 has no whitespace or control characters).
fn not_in_uri(c: char) -> bool {
    c.is_whitespace() || c.is_control()
}
