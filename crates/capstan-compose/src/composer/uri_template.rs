//! Which URIs a provider's resource template produces: RFC 6570 read loosely, enough to tell
//! which server a URI a caller reads goes to (`composer/offerings.rs`).

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
/// read (and the task) for minutes (the relay fuzz target's corpus holds such a template).
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
    use super::{Part, UriTemplate};

    fn template_matches(template: &str, uri: &str) -> bool {
        UriTemplate::parse(template).matches(uri)
    }

    /// The matcher written plainly, trying each end of each expression in turn: exponential
    /// in the number of expressions, but plainly what the loose reading says. The oracle of
    /// the one-pass matcher on inputs small enough for it.
    fn tried_in_turn(parts: &[Part], uri: &str) -> bool {
        let Some((first, rest)) = parts.split_first() else {
            return uri.is_empty();
        };
        match first {
            Part::Literal(text) => uri
                .strip_prefix(&**text)
                .is_some_and(|after| tried_in_turn(rest, after)),
            Part::Segment | Part::Any => {
                let stop = match first {
                    Part::Segment => uri.find(['/', '?', '#']).unwrap_or(uri.len()),
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
