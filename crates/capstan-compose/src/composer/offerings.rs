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
    /// would read `x:./y` (`unsafe_path`; the relay fuzz target found this, its input is a
    /// regression).
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

/// A URI template (RFC 6570) read loosely, to tell whether a URI is one it can produce: literal
/// text must match exactly and in order; a simple expression (`{id}`) matches a run of
/// characters other than `/`, `?` and `#` (what its expansion percent-encodes), any other
/// expression (`{+path}`, `{/segments}`, `{?query}`, …) any run at all. This decides which
/// server a URI goes to, not whether the server accepts it; the server checks its own URI. A
/// template whose match would take more than [`MATCH_WORK_LIMIT`] steps matches nothing. No
/// crate matches URIs against templates (the ones there are expand them), hence this.
#[derive(Debug)]
pub(crate) struct UriTemplate {
    parts: Vec<Part>,
    expressions: usize,
}

/// The most steps one URI's match against one template may take (expressions × the URI's
/// length): 64 expressions against a 64 KiB URI. No real template comes near it (they hold a
/// handful of expressions, their URIs a few hundred bytes); a provider's template past it
/// matches nothing rather than hold the sidecar's thread — by default its only one — while it
/// is tried.
const MATCH_WORK_LIMIT: usize = 64 * 64 * 1024;

impl UriTemplate {
    /// `template` as literal text and expressions.
    pub(crate) fn parse(template: &str) -> Self {
        let mut parts = Vec::new();
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            let Some(close) = rest[open..].find('}') else {
                break;
            };
            parts.push(Part::Literal(rest[..open].into()));
            let expression = &rest[open + 1..open + close];
            parts.push(
                if expression.starts_with(['+', '#', '/', '.', ';', '?', '&']) {
                    Part::Any
                } else {
                    Part::Segment
                },
            );
            rest = &rest[open + close + 1..];
        }
        parts.push(Part::Literal(rest.into()));
        let parts = coalesced(parts);
        let expressions = parts
            .iter()
            .filter(|p| !matches!(p, Part::Literal(_)))
            .count();
        Self { parts, expressions }
    }

    /// Whether the template can produce `uri`.
    pub(crate) fn matches(&self, uri: &str) -> bool {
        self.expressions.saturating_mul(uri.len() + 1) <= MATCH_WORK_LIMIT
            && matches_from(&self.parts, uri)
    }
}

/// `parts` without empty literals, and with each run of adjacent expressions as one: two
/// expressions with nothing between them match what the wider one alone matches (`{+a}{+b}`
/// what `{+a}` does, `{a}{b}` what `{a}` does), so a template of many cannot multiply the work.
fn coalesced(parts: Vec<Part>) -> Vec<Part> {
    let mut kept: Vec<Part> = Vec::with_capacity(parts.len());
    for part in parts {
        match (kept.last_mut(), part) {
            (_, Part::Literal(text)) if text.is_empty() => {}
            (Some(last @ (Part::Segment | Part::Any)), part @ (Part::Segment | Part::Any)) => {
                if matches!(part, Part::Any) {
                    *last = Part::Any;
                }
            }
            (_, part) => kept.push(part),
        }
    }
    kept
}

/// A piece of a parsed template.
#[derive(Clone, Debug)]
enum Part {
    Literal(Box<str>),
    /// A simple expression: no `/`, `?` or `#`.
    Segment,
    /// Any other expression.
    Any,
}

/// Whether `parts` can produce `uri`, in one pass over the parts: the set of places in `uri`
/// each part can end at, from the set the part before it left (two buffers, swapped from part
/// to part). Trying each end of each expression in turn instead would take time exponential
/// in the number of expressions — a provider's template of many `{+x}` would hold the caller's
/// read (and the task) for minutes; the relay fuzz target found that, and its input is a
/// regression.
fn matches_from(parts: &[Part], uri: &str) -> bool {
    let bytes = uri.as_bytes();
    let mut reach = vec![false; uri.len() + 1];
    let mut next = vec![false; uri.len() + 1];
    reach[0] = true;
    for part in parts {
        next.fill(false);
        match part {
            Part::Literal(text) => {
                for (at, _) in reach.iter().enumerate().filter(|(_, reached)| **reached) {
                    if uri[at..].starts_with(&**text) {
                        next[at + text.len()] = true;
                    }
                }
            }
            Part::Any => {
                if let Some(first) = reach.iter().position(|reached| *reached) {
                    for (at, end) in next.iter_mut().enumerate().skip(first) {
                        *end = uri.is_char_boundary(at);
                    }
                }
            }
            Part::Segment => {
                // A run that started at a reached place and has crossed no `/`, `?` or `#`.
                let mut running = false;
                for (at, end) in next.iter_mut().enumerate() {
                    running = reach[at]
                        || (running && at > 0 && !matches!(bytes[at - 1], b'/' | b'?' | b'#'));
                    *end = running && uri.is_char_boundary(at);
                }
            }
        }
        std::mem::swap(&mut reach, &mut next);
    }
    reach[uri.len()]
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::{Offered, OfferedTemplate, Route, UriTemplate};

    fn template_matches(template: &str, uri: &str) -> bool {
        UriTemplate::parse(template).matches(uri)
    }

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

    /// The matcher as first written, trying each end of each expression in turn: exponential
    /// in the number of expressions, but plainly what the loose reading says. The oracle of
    /// the one-pass matcher on inputs small enough for it.
    fn tried_in_turn(parts: &[super::Part], uri: &str) -> bool {
        let Some((first, rest)) = parts.split_first() else {
            return uri.is_empty();
        };
        match first {
            super::Part::Literal(text) => uri
                .strip_prefix(&**text)
                .is_some_and(|after| tried_in_turn(rest, after)),
            super::Part::Segment | super::Part::Any => {
                let stop = match first {
                    super::Part::Segment => uri.find(['/', '?', '#']).unwrap_or(uri.len()),
                    _ => uri.len(),
                };
                (0..=stop)
                    .filter(|&end| uri.is_char_boundary(end))
                    .any(|end| tried_in_turn(rest, &uri[end..]))
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn the_one_pass_matcher_should_agree_with_trying_each_end_in_turn(
            template in "([a/é?#-]|\\{[+]?x\\}){0,7}",
            uri in "[a/é?#-]{0,10}",
        ) {
            proptest::prop_assert_eq!(
                template_matches(&template, &uri),
                tried_in_turn(&UriTemplate::parse(&template).parts, &uri),
                "{} ~ {}", template, uri
            );
        }
    }

    /// A provider's template of many reserved expansions, against a long URI it cannot
    /// produce: answered (no), not left running — the one-pass matcher's reason to be.
    #[test]
    fn a_template_of_many_expressions_should_be_answered_at_once() {
        let template = format!("h://{}b", "{+x}".repeat(40));
        let uri = format!("h://{}", "a".repeat(2000));
        assert!(!template_matches(&template, &uri));
        assert!(template_matches(&template, &format!("{uri}b")));
        let apart = format!("h://{}", "{+x}a".repeat(40));
        assert!(template_matches(
            &apart,
            &format!("h://{}", "a".repeat(2000))
        ));
        assert!(!template_matches(
            &apart,
            &format!("h://{}", "a".repeat(39))
        ));
    }

    /// Past the work limit a template matches nothing, however plainly it would.
    #[test]
    fn a_template_past_the_work_limit_should_match_nothing() {
        let template = "h://{+x}a".repeat(64);
        let uri = "h://a".repeat(64);
        assert!(template_matches(&template, &uri), "within the limit");
        let long = format!("{}h://{}a", "h://a".repeat(63), "b".repeat(70_000));
        assert!(!template_matches(&template, &long), "past it");
    }

    #[test]
    fn a_uri_should_match_the_templates_that_produce_it_and_no_other() {
        let cases = [
            (
                "test://template/{id}/data",
                "test://template/123/data",
                true,
            ),
            (
                "test://template/{id}/data",
                "test://template/1/2/data",
                false,
            ),
            (
                "test://template/{id}/data",
                "test://template/123/datum",
                false,
            ),
            (
                "test://template/{id}/data",
                "other://template/123/data",
                false,
            ),
            ("file:///{+path}", "file:///a/b/c.md", true),
            ("file:///{+path}", "http:///a", false),
            (
                "test://items{?page,size}",
                "test://items?page=2&size=3",
                true,
            ),
            ("test://items{?page,size}", "test://items", true),
            ("test://static", "test://static", true),
            ("test://static", "test://static/x", false),
            ("test://{a}-{b}", "test://x-y-z", true),
            ("test://{a}/é{b}", "test://x/éy", true),
        ];
        for (template, uri, expected) in cases {
            assert_eq!(
                template_matches(template, uri),
                expected,
                "{template} ~ {uri}"
            );
        }
    }
}
