//! Prompts, resources and resource templates of a live composition: how their names and URIs
//! map to the upstream that offers them. The requests that reach it (`prompts/get`,
//! `resources/read`, `completion/complete`, in `composer/live.rs`) resolve what they name here,
//! so each is checked against the binding's selectors, whatever the caller sent.
//!
//! URIs (docs/mcp-surface.md "Resources"): by default a server's URI is shown as
//! `capstan://<binding>/<server>/<the server's URI, verbatim>`. Binding names are DNS names and
//! server names `[a-zA-Z0-9_-]`, so the prefix ends at the third `/` and reversing it is
//! stripping it: nothing is encoded, so nothing a template expands to can be decoded wrongly.
//! A server with `resourceUris: AsListed` keeps its own URIs.

use std::collections::HashMap;

use capstan_api::patterns::is_capstan_uri;

use super::uri_template::UriTemplate;
use serde_json::Value;

/// Where a composed prompt name or resource URI leads.
#[derive(Clone, Debug)]
pub(super) struct Route {
    /// Index into the composition's upstreams.
    pub index: usize,
    /// The upstream's own name or URI (template).
    pub upstream: String,
    /// What the upstream's URIs are prefixed with (empty for names and for URIs as listed).
    pub prefix: String,
}

/// The routes of a composition's prompts, resources and templates.
#[derive(Debug, Default)]
pub(super) struct Offered {
    /// Composed prompt name → route.
    pub prompts: HashMap<String, Route>,
    /// Composed resource URI → route.
    pub resources: HashMap<String, Route>,
    /// The composed templates, in composition order (the first that matches a URI wins).
    pub templates: Vec<OfferedTemplate>,
}

/// A composed resource template: the URI template the caller is shown, where it leads, and
/// the provider's template parsed once, when the composition is built, for every read after.
#[derive(Debug)]
pub(super) struct OfferedTemplate {
    /// The template as the caller is shown it.
    pub composed: String,
    /// Where it leads; `route.upstream` is the provider's own template.
    pub route: Route,
    matcher: UriTemplate,
}

impl OfferedTemplate {
    /// The template shown as `composed`, leading to `route`.
    pub(super) fn new(composed: String, route: Route) -> Self {
        let matcher = UriTemplate::parse(&route.upstream);
        Self {
            composed,
            route,
            matcher,
        }
    }
}

/// Why a URI a caller reads leads nowhere.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Unread {
    /// No composed resource is it, and no composed template produces it.
    Unknown,
    /// Its path could climb out of a template's literal prefix (`unsafe_path`): what it holds.
    Unsafe(&'static str),
}

/// How the URIs an upstream's answers name reach the caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum UriScope {
    /// Shown under this prefix (`capstan://<binding>/<server>/`).
    Prefixed(String),
    /// Shown as the server wrote them, within what no other upstream serves.
    AsListed,
}

/// The prefix of the URIs of `server` of `binding` shown the Capstan way.
pub(crate) fn capstan_prefix(binding: &str, server: &str) -> String {
    format!("capstan://{binding}/{server}/")
}

impl Offered {
    /// The route of a URI a caller names: a composed resource, or a URI one of the composed
    /// templates produces — the upstream's URI is the caller's with its prefix stripped.
    pub(super) fn resolve(&self, uri: &str) -> Option<Route> {
        self.read(uri).ok()
    }

    /// The route of a URI a caller reads, as [`Offered::resolve`] finds it, or why there is none.
    pub(super) fn read(&self, uri: &str) -> Result<Route, Unread> {
        if let Some(route) = self.resources.get(uri) {
            return Ok(route.clone());
        }
        // Templates under a prefix first: the prefix names the binding and server outright.
        // A template shown as listed is the provider's own and may match anything (`{+u}`), so
        // it comes after them and never takes a URI of the sidecar's scheme: no provider can
        // capture the reads meant for another binding's server.
        let prefixed = self.templates.iter().filter(|t| !t.route.prefix.is_empty());
        let as_listed = self
            .templates
            .iter()
            .filter(|t| t.route.prefix.is_empty() && !is_capstan_uri(uri));
        // A template's literal prefix is a boundary: a URI whose path could climb out of it
        // (a dot segment, an encoded separator) reaches no template.
        if let Some(holds) = self.unsafe_read(uri) {
            return Err(Unread::Unsafe(holds));
        }
        prefixed
            .chain(as_listed)
            .find_map(|template| {
                let route = &template.route;
                let upstream = uri.strip_prefix(route.prefix.as_str())?;
                template.matcher.matches(upstream).then(|| Route {
                    index: route.index,
                    upstream: upstream.to_owned(),
                    prefix: route.prefix.clone(),
                })
            })
            .ok_or(Unread::Unknown)
    }

    /// Why a read of `uri` may reach no template, if it may not: its path, or the path of the
    /// URI a prefixed template's server would be handed — which has a scheme of its own, so
    /// `capstan://b/s/x:./y` holds no dot segment as the caller wrote it, while its server
    /// would read `x:./y` (`unsafe_path`; the relay fuzz target's corpus holds such a URI).
    fn unsafe_read(&self, uri: &str) -> Option<&'static str> {
        unsafe_path(uri).or_else(|| {
            self.templates
                .iter()
                .filter(|template| !template.route.prefix.is_empty())
                .find_map(|template| {
                    uri.strip_prefix(template.route.prefix.as_str())
                        .and_then(unsafe_path)
                })
        })
    }

    /// The URIs a caller knows upstream URI `uri` by, among the routes whose upstream
    /// `is_upstream` accepts: composed resources with that URI, and the URI under each composed
    /// template that produces it.
    pub(super) fn shown(&self, uri: &str, is_upstream: impl Fn(usize) -> bool) -> Vec<String> {
        let mut shown: Vec<String> = self
            .resources
            .iter()
            .filter(|(_, route)| route.upstream == uri && is_upstream(route.index))
            .map(|(composed, _)| composed.clone())
            .collect();
        shown.extend(
            self.templates
                .iter()
                .filter(|template| {
                    is_upstream(template.route.index) && template.matcher.matches(uri)
                })
                .map(|template| format!("{}{uri}", template.route.prefix)),
        );
        shown.sort();
        shown.dedup();
        shown
    }

    /// The route of a completion's reference: a composed prompt (`ref/prompt`), or a composed
    /// template or resource (`ref/resource`).
    pub(super) fn reference(&self, reference: &Value) -> Option<Route> {
        match reference.get("type").and_then(Value::as_str)? {
            "ref/prompt" => self
                .prompts
                .get(reference.get("name").and_then(Value::as_str)?)
                .cloned(),
            "ref/resource" => {
                let uri = reference.get("uri").and_then(Value::as_str)?;
                self.templates
                    .iter()
                    .find(|template| template.composed == uri)
                    .map(|template| template.route.clone())
                    .or_else(|| self.resources.get(uri).cloned())
            }
            _ => None,
        }
    }
}

/// Why the path of `uri` (what follows its scheme, up to its query or fragment) may not reach a
/// template, if it may not: a dot segment (`.` or `..`, however percent-encoded), an encoded
/// separator (`%2F`, `%5C`, also encoded twice) or a backslash. A server that resolves the
/// path it is handed (a file server, a path-joining handler) would read any of them as leaving
/// the directory the template's literal text names (`file:///docs/{+path}` reading
/// `file:///docs/../../etc/passwd`), so such a URI is refused before it is matched rather than
/// normalised into another: the caller names the resource it means.
pub(crate) fn unsafe_path(uri: &str) -> Option<&'static str> {
    // Only an RFC 3986 scheme (a letter, then letters, digits, `+`, `-`, `.`) is skipped:
    // text before a `:` that is no scheme is path to a server, and is checked like the rest.
    let after_scheme = uri
        .split_once(':')
        .filter(|(scheme, _)| {
            scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        })
        .map_or(uri, |(_, rest)| rest);
    let path = after_scheme
        .split(['?', '#'])
        .next()
        .unwrap_or(after_scheme);
    if path.contains('\\') {
        return Some("a backslash");
    }
    let lower = path.to_ascii_lowercase();
    if ["%2f", "%5c", "%252f", "%255c"]
        .iter()
        .any(|encoded| lower.contains(encoded))
    {
        return Some("an encoded separator");
    }
    let dot_segment = lower.split('/').any(|segment| {
        let decoded = segment.replace("%252e", ".").replace("%2e", ".");
        decoded == "." || decoded == ".."
    });
    dot_segment.then_some("a dot segment")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::{Offered, OfferedTemplate, Route};

    fn route(index: usize, upstream: &str, prefix: &str) -> Route {
        Route {
            index,
            upstream: upstream.to_owned(),
            prefix: prefix.to_owned(),
        }
    }

    #[test]
    fn a_template_shown_as_listed_should_never_capture_another_bindings_uris() {
        let prefix = "capstan://docs-binding/docs/";
        let offered = Offered {
            templates: vec![
                // Earlier in document order, and matching anything.
                OfferedTemplate::new("{+anything}".to_owned(), route(0, "{+anything}", "")),
                OfferedTemplate::new(
                    format!("{prefix}file:///{{+path}}"),
                    route(1, "file:///{+path}", prefix),
                ),
            ],
            ..Offered::default()
        };
        let read = offered
            .resolve("capstan://docs-binding/docs/file:///guide.md")
            .unwrap();
        assert_eq!(
            (read.index, read.upstream.as_str()),
            (1, "file:///guide.md")
        );
        // A URI of the sidecar's scheme that no prefixed template produces goes nowhere.
        assert!(
            offered
                .resolve("capstan://other-binding/x/file:///guide.md")
                .is_none()
        );
        // Its own URIs still reach it.
        let own = offered.resolve("test://anything/at/all").unwrap();
        assert_eq!(own.index, 0);
    }

    #[test]
    fn a_path_that_could_leave_a_templates_prefix_should_reach_no_template() {
        let offered = Offered {
            templates: vec![OfferedTemplate::new(
                "file:///docs/{+path}".to_owned(),
                route(0, "file:///docs/{+path}", ""),
            )],
            ..Offered::default()
        };
        for (uri, why) in [
            ("file:///docs/../../etc/passwd", "a dot segment"),
            ("file:///docs/%2e%2e/%2E%2E/etc/passwd", "a dot segment"),
            ("file:///docs/.%2e/secret", "a dot segment"),
            ("file:///docs/%252e%252e/secret", "a dot segment"),
            ("file:///docs/./guide.md", "a dot segment"),
            ("file:///docs/..", "a dot segment"),
            ("file:///docs/..%2Fetc%2Fpasswd", "an encoded separator"),
            ("file:///docs/..%2fsecret", "an encoded separator"),
            ("file:///docs/..%5Csecret", "an encoded separator"),
            ("file:///docs/..%252Fsecret", "an encoded separator"),
            ("file:///docs/..\\secret", "a backslash"),
            // Text before a `:` that is no scheme is path, checked like the rest.
            (">tes%2ft://docs/x", "an encoded separator"),
            ("../x:y", "a dot segment"),
        ] {
            assert_eq!(super::unsafe_path(uri), Some(why), "{uri}");
            assert!(offered.resolve(uri).is_none(), "{uri} reached the template");
        }
        // Dots that are no segment, and a query or fragment, are the server's own business.
        for uri in [
            "file:///docs/guide.md",
            "file:///docs/a..b/.hidden/v1.2",
            "file:///docs/guide.md?range=../x#..",
            "file:///docs/%2e%2e.md",
        ] {
            assert_eq!(super::unsafe_path(uri), None, "{uri}");
            assert!(offered.resolve(uri).is_some(), "{uri} was refused");
        }
    }

    /// Under a prefix, the URI the server is handed has a scheme of its own: its path is
    /// checked as the server would read it, not only as the caller wrote the whole.
    #[test]
    fn the_uri_a_prefixed_template_hands_its_server_should_be_checked_as_that_server_reads_it() {
        let prefix = "capstan://docs-binding/docs/";
        let offered = Offered {
            templates: vec![OfferedTemplate::new(
                format!("{prefix}{{+path}}"),
                route(0, "{+path}", prefix),
            )],
            ..Offered::default()
        };
        let uri = format!("{prefix}x:./secret");
        assert_eq!(super::unsafe_path(&uri), None, "as the caller wrote it");
        assert_eq!(offered.unsafe_read(&uri), Some("a dot segment"));
        assert!(
            offered.resolve(&uri).is_none(),
            "{uri} reached the template"
        );
        let plain = format!("{prefix}x:guide.md");
        assert_eq!(offered.resolve(&plain).unwrap().upstream, "x:guide.md");
    }
}
