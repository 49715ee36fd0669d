//! The relay target: what the composer carries between a caller and a provider — a caller's
//! trace context in `_meta`, a provider's questions to the person, a caller's URI through a
//! provider's resource templates (docs/reliability.md).

use capstan_upstream::mcp::Origin;
use serde_json::{Map, Value};
use url::Host as url_host;

/// What the composer relays between a caller and a provider, one surface per input chosen by
/// its first line: `meta` (a caller's trace context in `_meta`), `ask` (a provider's request
/// for the person) or `uri` (a caller's URI read through a provider's resource templates); any
/// other first line picks one by its first byte. Never panics; the properties are each
/// surface's function's below.
pub fn relay(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (tag, rest) = text.split_once('\n').unwrap_or((&text, ""));
    let surface = match tag {
        "meta" => 0,
        "ask" => 1,
        "uri" => 2,
        _ => data.first().map_or(0, |b| b % 3),
    };
    match surface {
        0 => relay_meta(rest),
        1 => relay_ask(rest),
        _ => relay_uri(rest),
    }
}

/// The `_meta` keys that carry trace context and baggage.
const TRACE_KEYS: [&str; 3] = ["traceparent", "tracestate", "baggage"];

/// `trace_context::sanitize_meta` on a `_meta` object (the input as JSON, or else its lines as
/// `traceparent`, `tracestate` and `baggage`): what it leaves is a W3C version-00
/// `traceparent`, a `tracestate` of at most 512 printable ASCII characters and only beside a
/// `traceparent`, a `baggage` of at most 8192 bytes of printable ASCII; every other member is
/// untouched; and sanitizing again changes nothing (baggage compared member by member, whose
/// order the propagator does not keep).
fn relay_meta(rest: &str) {
    let given = match serde_json::from_str::<Value>(rest) {
        Ok(Value::Object(meta)) => meta,
        _ => TRACE_KEYS
            .iter()
            .zip(rest.split('\n'))
            .map(|(key, line)| ((*key).to_owned(), Value::String(line.to_owned())))
            .collect(),
    };
    let mut meta = given.clone();
    capstan_upstream::trace_context::sanitize_meta(&mut meta);
    for (key, value) in &given {
        if !TRACE_KEYS.contains(&key.as_str()) {
            assert_eq!(meta.get(key), Some(value), "{key} changed");
        }
    }
    for key in meta.keys() {
        assert!(
            given.contains_key(key),
            "{key} added to {}",
            Value::Object(given.clone())
        );
    }
    let text = |key: &str| match meta.get(key) {
        None => None,
        Some(Value::String(text)) => Some(text.as_str()),
        Some(other) => panic!("{key} left as {other}"),
    };
    if let Some(parent) = text("traceparent") {
        assert!(is_w3c_traceparent(parent), "traceparent {parent:?}");
    }
    if let Some(state) = text("tracestate") {
        assert!(text("traceparent").is_some(), "tracestate {state:?} alone");
        assert!(state.len() <= 512, "tracestate of {} bytes", state.len());
        assert!(is_printable_ascii(state), "tracestate {state:?}");
    }
    if let Some(baggage) = text("baggage") {
        assert!(baggage.len() <= 8192, "baggage of {} bytes", baggage.len());
        assert!(is_printable_ascii(baggage), "baggage {baggage:?}");
    }
    let mut again = meta.clone();
    capstan_upstream::trace_context::sanitize_meta(&mut again);
    assert_eq!(
        comparable(&again),
        comparable(&meta),
        "a second sanitizing changed {}",
        Value::Object(meta.clone())
    );
}

/// `meta` with its baggage's members sorted.
fn comparable(meta: &Map<String, Value>) -> Map<String, Value> {
    let mut meta = meta.clone();
    if let Some(Value::String(baggage)) = meta.get_mut("baggage") {
        let mut members: Vec<&str> = baggage.split(',').collect();
        members.sort_unstable();
        *baggage = members.join(",");
    }
    meta
}

/// Printable ASCII (`0x20`–`0x7e`), what each W3C header's grammar is drawn from.
fn is_printable_ascii(text: &str) -> bool {
    text.bytes().all(|b| (0x20..=0x7e).contains(&b))
}

/// The W3C Trace Context version-00 `traceparent`: `00-<32 hex trace id>-<16 hex parent
/// id>-<2 hex flags>`, lower-case hex, neither id all zeros.
fn is_w3c_traceparent(parent: &str) -> bool {
    let fields: Vec<&str> = parent.split('-').collect();
    let hex = |field: &str, len: usize| {
        field.len() == len
            && field
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    let nonzero = |field: &str| field.bytes().any(|b| b != b'0');
    parent.len() == 55
        && fields.len() == 4
        && fields[0] == "00"
        && hex(fields[1], 32)
        && nonzero(fields[1])
        && hex(fields[2], 16)
        && nonzero(fields[2])
        && hex(fields[3], 2)
}

/// The provider whose requests the relay target attributes.
fn relay_origin(url_hosts: Vec<String>) -> Origin {
    Origin {
        service: "streamco.example".into(),
        binding: "streamco-binding".into(),
        server: "streamco".into(),
        url_hosts,
    }
}

/// How the relay target's provider must be named first in what the person reads.
const RELAY_ASKER: &str = "streamco.example (binding streamco-binding, MCP server streamco)";

/// `Origin::attribute` on a provider's request: the first line lists the binding's
/// `urlElicitationHosts` (those admission accepts), the rest is the request as JSON, or else
/// its lines are the URL and the message of a URL-mode elicitation. Never panics; as the
/// client reads the request (its JSON): an elicitation's message starts with the asker and
/// holds no control character but line breaks and tabs, nor a bidirectional override; a
/// sampling request's system prompt starts by naming the asker, likewise clean; a URL-mode
/// elicitation let through names an `https` URL without credentials whose host is, label for
/// label, an admitted host or below an admitted `*.` entry; `_meta` names the binding; and a
/// form-mode elicitation or any other request in an object is never refused.
fn relay_ask(rest: &str) {
    let (hosts, request) = rest.split_once('\n').unwrap_or((rest, ""));
    let url_hosts: Vec<String> = hosts
        .split([',', ' '])
        .filter(|h| is_elicitation_host(h))
        .map(str::to_owned)
        .collect();
    let mut asked = provider_request(request);
    let given = asked.clone();
    let origin = relay_origin(url_hosts.clone());
    let outcome = origin.attribute(&mut asked);
    if !refusable(&given) {
        assert!(outcome.is_ok(), "{given} refused: {outcome:?}");
    }
    if outcome.is_err() {
        return;
    }
    // What the client reads: the request as it leaves in JSON.
    let wire = serde_json::to_string(&asked).unwrap_or_default();
    let seen: Value = serde_json::from_str(&wire).unwrap_or(Value::Null);
    let params = &seen["params"];
    assert_eq!(
        params["_meta"]["capabilities.assistant.miloapis.com/origin"]["binding"],
        "streamco-binding",
        "{wire}"
    );
    match seen["method"].as_str() {
        Some("elicitation/create") => {
            let message = params["message"].as_str().unwrap_or_default();
            assert!(message.starts_with(RELAY_ASKER), "message {message:?}");
            assert!(is_displayable(message), "message {message:?}");
            if params["mode"] == "url" {
                let url = params["url"].as_str().unwrap_or_default();
                assert_url_admitted(url, &url_hosts);
            }
        }
        Some("sampling/createMessage") => {
            let prompt = params["systemPrompt"].as_str().unwrap_or_default();
            let first_line = prompt.lines().next().unwrap_or_default();
            assert!(
                first_line.starts_with("This request comes from ")
                    && first_line.contains(RELAY_ASKER),
                "systemPrompt {prompt:?}"
            );
            assert!(is_displayable(prompt), "systemPrompt {prompt:?}");
        }
        _ => {}
    }
}

/// The provider's request the relay target's input describes: the input as JSON, or else a
/// URL-mode elicitation whose first line is the URL and the rest the message.
fn provider_request(request: &str) -> Value {
    serde_json::from_str::<Value>(request).unwrap_or_else(|_| {
        let mut lines = request.splitn(2, '\n');
        let url = lines.next().unwrap_or_default();
        let message = lines.next().unwrap_or_default();
        serde_json::json!({"method": "elicitation/create", "params": {
            "mode": "url", "url": url, "message": message, "elicitationId": "e1"}})
    })
}

/// Whether `Origin::attribute` may refuse `given`: only a URL-mode elicitation may be refused
/// for what it asks; anything else only when it is not a request at all (not an object, or
/// params not an object).
fn refusable(given: &Value) -> bool {
    let params = &given["params"];
    let url_mode = given["method"] == "elicitation/create" && params["mode"] == "url";
    !given.is_object() || !(params.is_object() || params.is_null()) || url_mode
}

/// A URL-mode elicitation let through names an `https` URL without credentials whose DNS host
/// `url_hosts` admits; panics naming the URL otherwise.
fn assert_url_admitted(url: &str, url_hosts: &[String]) {
    let parsed = url::Url::parse(url);
    let Ok(parsed) = parsed else {
        panic!("URL-mode elicitation to {url:?} let through");
    };
    assert_eq!(parsed.scheme(), "https", "{url:?}");
    assert!(
        parsed.username().is_empty() && parsed.password().is_none(),
        "{url:?}"
    );
    let Some(url_host::Domain(host)) = parsed.host() else {
        panic!("URL-mode elicitation to {url:?}, no DNS host, let through");
    };
    assert!(
        host_admitted(host, url_hosts),
        "URL-mode elicitation to {url:?} let through with {url_hosts:?}"
    );
}

/// What a person may be shown: no control character (C0, DEL, C1) but `\n` and `\t`, and no
/// bidirectional embedding, override or isolate (U+202A–U+202E, U+2066–U+2069).
fn is_displayable(text: &str) -> bool {
    text.chars().all(|c| {
        let code = u32::from(c);
        let control = code < 0x20 || (0x7f..=0x9f).contains(&code);
        let bidi = (0x202a..=0x202e).contains(&code) || (0x2066..=0x2069).contains(&code);
        (!control || c == '\n' || c == '\t') && !bidi
    })
}

/// `urlElicitationHosts` as admission accepts an entry: a lower-case DNS name of at least two
/// labels, optionally after `*.`; labels of letters, digits and inner `-`, at most 63 long, the
/// last starting with a letter; at most 253 characters.
fn is_elicitation_host(entry: &str) -> bool {
    let name = entry.strip_prefix("*.").unwrap_or(entry);
    let labels: Vec<&str> = name.split('.').collect();
    let label_ok = |label: &str| {
        (1..=63).contains(&label.len())
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    entry.len() <= 253
        && labels.len() >= 2
        && labels.iter().all(|l| label_ok(l))
        && labels
            .last()
            .is_some_and(|l| l.bytes().next().is_some_and(|b| b.is_ascii_lowercase()))
}

/// Whether DNS name `host` is an entry of `hosts` or below a `*.` entry, label by label. Empty
/// labels (a trailing dot, `a..b`) name no other host, so they are not counted.
fn host_admitted(host: &str, hosts: &[String]) -> bool {
    let labels = |name: &str| -> Vec<String> {
        name.split('.')
            .filter(|l| !l.is_empty())
            .map(str::to_ascii_lowercase)
            .collect()
    };
    let host = labels(host);
    hosts.iter().any(|entry| match entry.strip_prefix("*.") {
        Some(suffix) => {
            let suffix = labels(suffix);
            host.len() > suffix.len() && host.ends_with(&suffix)
        }
        None => host == labels(entry),
    })
}

/// The prefix the relay target shows a `>`-marked template's URIs under.
const RELAY_PREFIX: &str = "capstan://docs-binding/docs/";

/// A caller's URI read through resource templates (`capstan_compose::composer::fuzzing`): every line but
/// the last is a template (shown under `capstan://docs-binding/docs/` when it starts with
/// `>`, as listed otherwise), the last line the URI. Never panics; a URI a template reads, and
/// the URI its server is handed, begin with that template's literal text and have no path
/// segment that percent-decodes, once or twice, to `.` or `..` or to anything holding a `/` or
/// `\`, and no `\` in their path — so the literal prefix is a boundary for a server that
/// decodes and resolves the path it is handed.
fn relay_uri(rest: &str) {
    let mut lines: Vec<&str> = rest.split('\n').collect();
    let uri = lines.pop().unwrap_or_default();
    let templates: Vec<(String, String)> = lines
        .iter()
        .map(|line| match line.strip_prefix('>') {
            Some(template) => (template.to_owned(), RELAY_PREFIX.to_owned()),
            None => ((*line).to_owned(), String::new()),
        })
        .collect();
    let Some((index, upstream)) =
        capstan_compose::composer::fuzzing::resolve_template_read(&templates, uri)
    else {
        return;
    };
    let Some((template, prefix)) = templates.get(index) else {
        panic!("template {index} of {} read {uri:?}", templates.len());
    };
    assert_eq!(
        format!("{prefix}{upstream}"),
        uri,
        "{uri:?} handed to {template:?} as {upstream:?}"
    );
    let literal = template.split('{').next().unwrap_or_default();
    assert!(
        upstream.starts_with(literal),
        "{template:?} read {upstream:?}"
    );
    for read in [uri, upstream.as_str()] {
        if let Some(why) = climbs(read) {
            panic!("{template:?} read {read:?}, whose path {why}");
        }
    }
}

/// What in the path of `uri` (after an RFC 3986 scheme if it has one, up to its query or
/// fragment) could leave the directory before it, if anything.
fn climbs(uri: &str) -> Option<String> {
    let scheme_len = uri.find(':').filter(|&colon| {
        let scheme = &uri.as_bytes()[..colon];
        scheme.first().is_some_and(u8::is_ascii_alphabetic)
            && scheme
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
    });
    let after = scheme_len.map_or(uri, |colon| &uri[colon + 1..]);
    let path = after.split(['?', '#']).next().unwrap_or_default();
    if path.contains('\\') {
        return Some("holds a backslash".into());
    }
    for segment in path.split('/') {
        let once = percent_decoded(segment.as_bytes());
        let twice = percent_decoded(&once);
        for decoded in [&once, &twice] {
            if decoded == b"." || decoded == b".." {
                return Some(format!("has the segment {segment:?}, a dot segment"));
            }
            if decoded.contains(&b'/') || decoded.contains(&b'\\') {
                return Some(format!("has the segment {segment:?}, an encoded separator"));
            }
        }
    }
    None
}

/// `bytes` with every `%` and two hex digits replaced by the byte they name (RFC 3986).
fn percent_decoded(bytes: &[u8]) -> Vec<u8> {
    let hex = |b: u8| char::from(b).to_digit(16);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let (Some(high), Some(low)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            // Two hex digits are at most 0xff: the cast cannot truncate.
            out.push((high * 16 + low) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}
