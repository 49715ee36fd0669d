//! The bodies of the fuzz targets in `fuzz/` (docs/reliability.md). Each takes arbitrary bytes,
//! drives one surface that reads untrusted input, and checks properties that must hold for
//! every input with oracles written here, not taken from the code under test: a panic or a
//! failed property is a crash. `make fuzz` runs them under libFuzzer; `make test` replays
//! every checked-in input (`fuzz/seeds/`, `fuzz/regressions/`) through the same functions.

use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use capstan_api::{Object, RouteQualifierSpec};
use capstan_platform::{Caller, PlanKeys, PlanPayload, PlanRefused};
use capstan_route::{Candidate, Catalog, route_for, select, take_from};
use capstan_upstream::guard::EndpointGuard;
use serde_json::Value;
use url::Host as url_host;

mod relay;

pub use relay::relay;

/// A target's body.
pub type Target = fn(&[u8]);

/// The targets, by name (the `fuzz/fuzz_targets/<name>.rs` files).
pub const TARGETS: [(&str, Target); 7] = [
    ("parse", parse),
    ("guard", guard),
    ("identity", identity),
    ("plan_token", plan_token),
    ("route", route),
    ("relay", relay),
    ("search", search),
];

/// Tool search (`find_tools`' ranking; docs/tool-search.md), the caller's need being the
/// untrusted input: never panics; answers at most the limit, best first, only tools the
/// caller may see (the first byte chooses which), each once, coverage within 0 and 1; the
/// same need answers the same twice.
pub fn search(data: &[u8]) {
    let Some((&mask, need)) = data.split_first() else {
        return;
    };
    let need = String::from_utf8_lossy(need);
    let index = search_index();
    let visible = |doc: usize| mask & (1 << (doc % 8)) != 0;
    let answer = index.search(&need, 5, visible);
    assert!(answer.hits.len() <= 5);
    let mut seen = std::collections::HashSet::new();
    for pair in answer.hits.windows(2) {
        assert!(pair[0].score >= pair[1].score, "not best first: {answer:?}");
    }
    for hit in &answer.hits {
        assert!(visible(hit.doc), "a hidden tool answered: {hit:?}");
        assert!(seen.insert(hit.doc), "a tool answered twice");
        assert!(
            (0.0..=1.0001).contains(&hit.coverage),
            "coverage {}",
            hit.coverage
        );
    }
    assert!(!answer.matched || !answer.hits.is_empty());
    assert_eq!(index.search(&need, 5, visible), answer);
}

/// A small index of eight tools of three services, made once.
fn search_index() -> &'static capstan_search::Index {
    static INDEX: std::sync::OnceLock<capstan_search::Index> = std::sync::OnceLock::new();
    INDEX.get_or_init(|| {
        let tool = |service: &str, name: &str, description: &str| capstan_search::ToolDoc {
            name: format!("{service}__{name}"),
            tool: name.to_owned(),
            service: service.to_owned(),
            description: description.to_owned(),
            input_schema: serde_json::json!({"type": "object", "properties": {
                "name": {"type": "string", "description": "The object's name"},
                "method": {"enum": ["get", "list", "delete"]}}}),
            ..capstan_search::ToolDoc::default()
        };
        capstan_search::Index::build(vec![
            tool("wiki", "get_page", "Get a wiki page by its id."),
            tool("wiki", "delete_page", "Delete a wiki page."),
            tool("wiki", "search_pages", "Search wiki pages by text."),
            tool("chat", "post_message", "Post a message to a chat channel."),
            tool("chat", "list_channels", "List the chat channels."),
            tool(
                "tracker",
                "create_issue",
                "Create an issue in a tracker project.",
            ),
            tool("tracker", "search_issues", "Search issues by text."),
            tool(
                "tracker",
                "generate_deeplink",
                "Generate a deeplink to an issue.",
            ),
        ])
    })
}

/// The document/CR parser and validator, JSON and YAML: never panics; every invalid object
/// carries at least one `path: message` error; a valid object validates clean again after a
/// round trip through JSON.
pub fn parse(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(parsed) = capstan_api::parse(text) else {
        return;
    };
    for invalid in &parsed.invalid {
        let lines: Vec<String> = invalid.lines().collect();
        assert!(!lines.is_empty(), "an invalid object without an error");
        for line in lines {
            assert!(line.contains(": "), "an error without a path: {line:?}");
        }
    }
    for object in &parsed.objects {
        match &object.object {
            Object::Document(document) => {
                assert!(capstan_api::validate(&document.spec).is_empty());
                let json = serde_json::to_value(&document.spec).unwrap_or(Value::Null);
                assert!(capstan_api::validate::validate_binding_spec(&json).is_empty());
            }
            Object::Binding(binding) => assert!(capstan_api::validate(&binding.spec).is_empty()),
            Object::Qualifier(qualifier) => {
                assert!(capstan_api::validate_qualifier(&qualifier.spec).is_empty());
            }
        }
    }
}

/// Addresses no allow-list may ever admit, by the module's own contract (link-local and cloud
/// metadata, unspecified, multicast, broadcast), decided here with std's classification.
fn never_dialed(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.octets()[0] == 0
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return never_dialed(IpAddr::V4(v4));
            }
            v6.is_unspecified() || v6.is_multicast() || (v6.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

/// The endpoint guard: line 1 an allow-list, line 2 a URL, further lines DNS answers. Never
/// panics; an admitted URL is http(s) without credentials; a literal address or an answer that
/// may never be dialed is refused whatever the allow-list says; an empty list admits nothing.
pub fn guard(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.lines();
    let list = lines.next().unwrap_or_default();
    let url = lines.next().unwrap_or_default();
    let answers: Vec<IpAddr> = lines.filter_map(|l| l.trim().parse().ok()).collect();
    let Ok(guard) = EndpointGuard::from_list(list) else {
        return;
    };
    if let Ok(checked) = guard.check(url) {
        assert!(
            guard.patterns().next().is_some(),
            "an empty allow-list admitted {url:?}"
        );
        let parsed = &checked.url;
        assert!(matches!(parsed.scheme(), "http" | "https"), "{url:?}");
        assert!(
            parsed.username().is_empty() && parsed.password().is_none(),
            "{url:?}"
        );
        match parsed.host() {
            Some(url_host::Ipv4(ip)) => assert!(!never_dialed(IpAddr::V4(ip)), "{url:?}"),
            Some(url_host::Ipv6(ip)) => assert!(!never_dialed(IpAddr::V6(ip)), "{url:?}"),
            Some(url_host::Domain(host)) => {
                if guard.check_answers(host, &answers).is_ok() {
                    for answer in &answers {
                        assert!(!never_dialed(*answer), "{host} → {answer} admitted");
                    }
                }
            }
            None => panic!("an admitted URL without a host: {url:?}"),
        }
    }
}

/// Whether `host` names the socket's host: `localhost`, with a port or without (a client may
/// name one; the socket has none to confuse it with, and a rebinding page's Host names its own
/// domain).
fn is_localhost(host: &str) -> bool {
    match host.split_once(':') {
        None => host == "localhost",
        Some((name, port)) => {
            name == "localhost" && !port.is_empty() && port.chars().all(|c| c.is_ascii_digit())
        }
    }
}

/// The identity middleware: header pairs (`name: value` lines) then an empty line then a body,
/// sent as a POST to `/mcp` (or GET `/v1/composition` when the body is empty). A request that
/// reaches a handler carried an identity the sidecar accepts and the `localhost` Host (with a
/// port or without); an MCP
/// request that reaches it outside a session is an `initialize`.
pub fn identity(data: &[u8]) {
    let split = data
        .windows(2)
        .position(|w| w == b"\n\n")
        .unwrap_or(data.len());
    let (head, body) = data.split_at(split);
    let body = body.get(2..).unwrap_or_default().to_vec();
    let headers: Vec<(&[u8], &[u8])> = head
        .split(|b| *b == b'\n')
        .filter_map(|line| {
            let colon = line.iter().position(|b| *b == b':')?;
            let (name, value) = line.split_at(colon);
            Some((name, value[1..].trim_ascii()))
        })
        .collect();
    let (method, path) = if body.is_empty() {
        ("GET", "/v1/composition")
    } else {
        ("POST", "/mcp")
    };
    let Some(checked) =
        capstan_sidecar::fuzzing::check_request(method, path, &headers, body.clone())
    else {
        return;
    };
    if !checked.reached {
        assert!(checked.status.as_u16() >= 400, "{:?}", checked.status);
        return;
    }
    let mut map = http::HeaderMap::new();
    for (name, value) in &headers {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(name),
            http::HeaderValue::from_bytes(value),
        ) {
            map.append(name, value);
        }
    }
    let host = map.get("host").and_then(|h| h.to_str().ok());
    assert!(
        host.is_some_and(is_localhost),
        "reached without the localhost Host: {host:?}"
    );
    assert!(
        capstan_sidecar::fuzzing::identity_accepted(&map),
        "reached without an accepted identity: {headers:?}"
    );
    if method == "POST" && map.get("mcp-session-id").is_none() {
        let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let first = message
            .as_array()
            .and_then(|m| m.first())
            .unwrap_or(&message);
        assert_eq!(
            first["method"], "initialize",
            "reached outside a session: {message}"
        );
    }
}

/// The secret of the plan-token target's key (its seeds are made with it, so a forged seed
/// reaches the MAC check).
pub const PLAN_TOKEN_SECRET: &str = "fuzz-plan-token-key-of-thirty-two-bytes!";

/// The ledger id the plan-token target verifies for.
pub const PLAN_TOKEN_LEDGER: &str = "fuzz-ledger";

/// The clock of the plan-token target: unix second 2,000,000,000.
pub fn plan_token_now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000_000)
}

/// The plan the plan-token target checks a token against: the caller, project and plane it
/// fixes, with `manifests` to create.
pub fn plan_token_plan(manifests: Vec<Value>) -> PlanPayload {
    PlanPayload {
        project: "fuzz".into(),
        plane: "https://fuzz.example:6443".into(),
        caller: Caller {
            username: "system:serviceaccount:fuzz:alice".into(),
            uid: "fuzz-uid".into(),
        },
        resource_versions: manifests.iter().map(|_| None).collect(),
        manifests,
    }
}

/// The plan-token target's input: its first line (the token) and the plan of the rest (JSON
/// manifests).
fn plan_token_input(data: &[u8]) -> (String, PlanPayload) {
    let text = String::from_utf8_lossy(data);
    let (token, rest) = text.split_once('\n').unwrap_or((&text, ""));
    let manifests = match serde_json::from_str::<Value>(rest) {
        Ok(Value::Array(items)) => items,
        Ok(other) => vec![other],
        Err(_) => Vec::new(),
    };
    (token.to_owned(), plan_token_plan(manifests))
}

/// What verifying the first line of `data` as a token for the plan of its other lines (JSON
/// manifests) answers: `None` when it verifies.
pub fn plan_token_refusal(data: &[u8]) -> Option<PlanRefused> {
    let (token, plan) = plan_token_input(data);
    let keys = PlanKeys::from_secret(PLAN_TOKEN_SECRET).ok()?;
    keys.verify(&token, &plan, PLAN_TOKEN_LEDGER, plan_token_now())
        .err()
}

/// The plan-token decoder and verifier: the first line is a token, the rest the plan's
/// manifests (JSON). Never panics; a token verifies only if it is exactly what signing that
/// plan with its expiry yields, and never once expired.
pub fn plan_token(data: &[u8]) {
    let (token, plan) = plan_token_input(data);
    let token = token.as_str();
    let Ok(keys) = PlanKeys::from_secret(PLAN_TOKEN_SECRET) else {
        return;
    };
    let now = plan_token_now();
    // A token signed here verifies, and one byte changed in it does not.
    let good = keys.sign(&plan, PLAN_TOKEN_LEDGER, now + Duration::from_secs(60));
    assert!(keys.verify(&good, &plan, PLAN_TOKEN_LEDGER, now).is_ok());
    if keys.verify(token, &plan, PLAN_TOKEN_LEDGER, now).is_ok() {
        let expiry = token
            .trim()
            .split('.')
            .nth(3)
            .and_then(|e| e.parse::<u64>().ok())
            .map(|e| SystemTime::UNIX_EPOCH + Duration::from_secs(e));
        let Some(expiry) = expiry else {
            panic!("a token without a readable expiry verified: {token:?}");
        };
        assert!(expiry > now, "an expired token verified: {token:?}");
        assert_eq!(
            token.trim(),
            keys.sign(&plan, PLAN_TOKEN_LEDGER, expiry),
            "a forged token verified"
        );
    }
}

/// The qualifier merge and the call's routing arguments: a JSON object with `qualifiers`
/// (name → spec) and `arguments` (a call's). Never panics; a chosen provider is never among
/// the exclusions and meets the merged route's pin, only and ignore.
pub fn route(data: &[u8]) {
    let Ok(Value::Object(input)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let qualifiers: Vec<(String, RouteQualifierSpec)> = input
        .get("qualifiers")
        .and_then(Value::as_object)
        .map(|q| {
            q.iter()
                .filter_map(|(name, spec)| {
                    let spec: RouteQualifierSpec = serde_json::from_value(spec.clone()).ok()?;
                    capstan_api::validate_qualifier(&spec)
                        .is_empty()
                        .then(|| (name.clone(), spec))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut arguments = input
        .get("arguments")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let Ok(taken) = take_from(&mut arguments) else {
        return;
    };
    for reserved in capstan_route::RESERVED_ARGUMENTS {
        assert!(
            !arguments.contains_key(reserved),
            "{reserved} left in the arguments"
        );
    }
    let Some(spec) = Catalog::embedded().get("cap.web.search") else {
        return;
    };
    let Ok(route) = route_for("cap.web.search", &qualifiers, &taken.route) else {
        return;
    };
    let candidates: Vec<Candidate> = ["a", "b", "c", "d"]
        .iter()
        .enumerate()
        .map(|(i, name)| Candidate {
            binding: format!("ns/{name}"),
            service: Some(format!("{name}.example")),
            server: (*name).to_owned(),
            tool: format!("{name}__search"),
            features: vec!["search.fresh".into()]
                .into_iter()
                .take(i % 2)
                .collect(),
            cost_hint: None,
            quality: Some(2500 * i as u16),
            status: capstan_api::CapabilityStatus::Active,
            composed: i != 3,
        })
        .collect();
    let decision = select(spec, &candidates, &route, &taken.requirements);
    if let Some(winner) = decision.selected() {
        assert!(!decision.exclusions.iter().any(|e| e.tool == winner.tool));
        assert!(winner.composed);
        if let Some((pin, _)) = &route.pin {
            assert!(winner.matches(pin));
        }
        if let Some(only) = &route.only {
            assert!(only.iter().any(|t| winner.matches(t)));
        }
        assert!(!route.ignore.iter().any(|t| winner.matches(t)));
    }
}
