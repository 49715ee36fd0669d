//! The rules of a CapabilityBinding spec that span fields (the CRD's CEL rules and list-map
//! keys): unique server, skill and capability names, the `__` delimiter and the reserved name
//! `cap`, and `mutating`, `toolSelector.pins` and `capabilities[].tool` entries inside the
//! allow-list, the names an unprefixed server may offer, and the URIs a server whose resources
//! are shown as listed may offer.

use serde_json::Value;

use super::FieldError;
use super::fields::{duplicates, items, text};
use crate::patterns::{is_built_in_tool, is_capstan_uri, is_tool_name_char};

/// Checks the cross-field rules of a binding spec, pushing every violation.
pub(super) fn check(spec: &Value, out: &mut Vec<FieldError>) {
    let servers_path = "spec.tools.mcpServers";
    let servers = spec
        .get("tools")
        .map_or(&[][..], |tools| items(tools, "mcpServers"));

    duplicates(
        servers.iter().enumerate().filter_map(|(i, server)| {
            Some((format!("{servers_path}[{i}].name"), text(server, "name")?))
        }),
        out,
    );

    for (i, server) in servers.iter().enumerate() {
        let at = format!("{servers_path}[{i}]");
        check_server_name(&at, server, out);
        let allow_list = AllowList::of(&at, server);
        check_include_entries(&allow_list, server, out);
        check_unprefixed(&allow_list, server, out);
        check_pins(&at, &allow_list, server, out);
        check_mutating(&at, &allow_list, server, out);
        check_provider_project(&at, &allow_list, server, out);
        check_capabilities(&at, &allow_list, server, out);
        check_other_selectors(&at, server, out);
    }

    duplicates(
        items(spec, "skills")
            .iter()
            .enumerate()
            .filter_map(|(i, skill)| {
                Some((format!("spec.skills[{i}].name"), text(skill, "name")?))
            }),
        out,
    );
}

/// A server's `toolSelector.include`, as far as it can be read.
struct AllowList<'a> {
    /// Where it sits, e.g. `spec.tools.mcpServers[0].toolSelector.include`.
    path: String,
    /// False when it has the wrong type: that is already reported, and checking entries against
    /// it would only add noise.
    readable: bool,
    /// The tools it admits.
    tools: Vec<&'a str>,
}

impl<'a> AllowList<'a> {
    /// The allow-list of the server at `at`.
    fn of(at: &str, server: &'a Value) -> Self {
        let include = server.get("toolSelector").and_then(|s| s.get("include"));
        Self {
            path: format!("{at}.toolSelector.include"),
            readable: include.is_none_or(Value::is_array),
            tools: include
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect(),
        }
    }

    /// Whether a readable allow-list leaves `tool` out.
    fn excludes(&self, tool: &str) -> bool {
        self.readable && !self.tools.contains(&tool)
    }
}

/// A server name must not contain the tool namespace delimiter nor take the reserved `cap`.
fn check_server_name(at: &str, server: &Value, out: &mut Vec<FieldError>) {
    let Some(name) = text(server, "name") else {
        return;
    };
    if name.contains("__") {
        out.push(FieldError::new(
            format!("{at}.name"),
            "must not contain \"__\", the tool namespace delimiter",
        ));
    }
    if name == "cap" {
        out.push(FieldError::new(
            format!("{at}.name"),
            "\"cap\" is reserved for routed capabilities",
        ));
    }
}

/// `toolSelector.include` is a set: each tool at most once.
fn check_include_entries(allow_list: &AllowList, server: &Value, out: &mut Vec<FieldError>) {
    duplicates(
        server
            .get("toolSelector")
            .map_or(&[][..], |s| items(s, "include"))
            .iter()
            .enumerate()
            .filter_map(|(j, tool)| Some((format!("{}[{j}]", allow_list.path), tool.as_str()?))),
        out,
    );
}

/// A server with `toolNames: Unprefixed` exposes each allowed tool under its own name, so the
/// name must already be one a model API accepts and must not take a built-in tool's name.
fn check_unprefixed(allow_list: &AllowList, server: &Value, out: &mut Vec<FieldError>) {
    if text(server, "toolNames") != Some("Unprefixed") {
        return;
    }
    let include = server
        .get("toolSelector")
        .map_or(&[][..], |s| items(s, "include"));
    for (j, tool) in include.iter().enumerate() {
        let Some(tool) = tool.as_str() else {
            continue;
        };
        let path = format!("{}[{j}]", allow_list.path);
        if !is_plain_tool_name(tool) {
            out.push(FieldError::new(
                path,
                format!(
                    "\"{tool}\" cannot be exposed unprefixed: an unprefixed name must be 1-64 \
                     letters, digits, '_' and '-'; keep the <server>__ prefix (remove toolNames)"
                ),
            ));
        } else if is_built_in_tool(tool) {
            out.push(FieldError::new(
                path,
                format!(
                    "\"{tool}\" is reserved for a built-in tool of the sidecar (load_skill, \
                     find_tools, report_capability_gap, the base tools, cap__*); keep the <server>__ prefix (remove toolNames) to offer it"
                ),
            ));
        }
    }
}

/// What `UNPREFIXED_TOOL_PATTERN` admits, without a regular expression engine.
fn is_plain_tool_name(tool: &str) -> bool {
    (1..=64).contains(&tool.len()) && tool.chars().all(is_tool_name_char)
}

/// Each `toolSelector.pins` key must name an allowed tool. Pin keys are object keys, so they
/// cannot repeat.
fn check_pins(at: &str, allow_list: &AllowList, server: &Value, out: &mut Vec<FieldError>) {
    let pins = server
        .get("toolSelector")
        .and_then(|s| s.get("pins"))
        .and_then(Value::as_object);
    for tool in pins.into_iter().flat_map(|pins| pins.keys()) {
        if allow_list.excludes(tool) {
            out.push(FieldError::new(
                format!("{at}.toolSelector.pins.{tool}"),
                format!(
                    "\"{tool}\" is not in {}; a pin for a tool the allow-list does not admit \
                     would pin nothing",
                    allow_list.path
                ),
            ));
        }
    }
}

/// `mutating` is a set of allowed tools.
fn check_mutating(at: &str, allow_list: &AllowList, server: &Value, out: &mut Vec<FieldError>) {
    let mutating = items(server, "mutating");
    duplicates(
        mutating
            .iter()
            .enumerate()
            .filter_map(|(j, tool)| Some((format!("{at}.mutating[{j}]"), tool.as_str()?))),
        out,
    );
    for (j, tool) in mutating.iter().enumerate() {
        if let Some(tool) = tool.as_str()
            && allow_list.excludes(tool)
        {
            out.push(FieldError::new(
                format!("{at}.mutating[{j}]"),
                format!(
                    "\"{tool}\" is not in {}; a tool the allow-list does not admit cannot be \
                     flagged mutating",
                    allow_list.path
                ),
            ));
        }
    }
}

/// `providerProjectArgument.tools` is a set of allowed tools.
fn check_provider_project(
    at: &str,
    allow_list: &AllowList,
    server: &Value,
    out: &mut Vec<FieldError>,
) {
    let tools = server
        .get("providerProjectArgument")
        .map_or(&[][..], |p| items(p, "tools"));
    let path = format!("{at}.providerProjectArgument.tools");
    duplicates(
        tools
            .iter()
            .enumerate()
            .filter_map(|(j, tool)| Some((format!("{path}[{j}]"), tool.as_str()?))),
        out,
    );
    for (j, tool) in tools.iter().enumerate() {
        if let Some(tool) = tool.as_str()
            && allow_list.excludes(tool)
        {
            out.push(FieldError::new(
                format!("{path}[{j}]"),
                format!(
                    "\"{tool}\" is not in {}; a tool the allow-list does not admit is never \
                     composed, with or without its project argument",
                    allow_list.path
                ),
            ));
        }
    }
}

/// `capabilities` are keyed by `capabilityId`; each maps to an allowed tool and lists each
/// feature once.
fn check_capabilities(at: &str, allow_list: &AllowList, server: &Value, out: &mut Vec<FieldError>) {
    let capabilities = items(server, "capabilities");
    duplicates(
        capabilities.iter().enumerate().filter_map(|(j, mapping)| {
            Some((
                format!("{at}.capabilities[{j}].capabilityId"),
                text(mapping, "capabilityId")?,
            ))
        }),
        out,
    );
    for (j, mapping) in capabilities.iter().enumerate() {
        if let Some(tool) = text(mapping, "tool")
            && allow_list.excludes(tool)
        {
            out.push(FieldError::new(
                format!("{at}.capabilities[{j}].tool"),
                format!(
                    "\"{tool}\" is not in {}; a route cannot reach a tool the allow-list does \
                     not admit",
                    allow_list.path
                ),
            ));
        }
        duplicates(
            items(mapping, "features")
                .iter()
                .enumerate()
                .filter_map(|(k, feature)| {
                    Some((
                        format!("{at}.capabilities[{j}].features[{k}]"),
                        feature.as_str()?,
                    ))
                }),
            out,
        );
    }
}

/// `promptSelector.include` and `resourceSelector.include` are sets, and each `pins` key is in
/// its `include`; with `resourceUris:
/// AsListed` no entry may take the `capstan:` scheme, which the sidecar's own URIs use.
fn check_other_selectors(at: &str, server: &Value, out: &mut Vec<FieldError>) {
    for selector in ["promptSelector", "resourceSelector"] {
        let include = server
            .get(selector)
            .map_or(&[][..], |s| items(s, "include"));
        duplicates(
            include.iter().enumerate().filter_map(|(j, entry)| {
                Some((format!("{at}.{selector}.include[{j}]"), entry.as_str()?))
            }),
            out,
        );
        let pins = server
            .get(selector)
            .and_then(|s| s.get("pins"))
            .and_then(Value::as_object);
        for key in pins.into_iter().flat_map(|pins| pins.keys()) {
            if !include.iter().any(|entry| entry.as_str() == Some(key)) {
                out.push(FieldError::new(
                    format!("{at}.{selector}.pins.{key}"),
                    format!(
                        "\"{key}\" is not in {at}.{selector}.include; a pin for an entry the \
                         allow-list does not admit would pin nothing"
                    ),
                ));
            }
        }
    }
    if text(server, "resourceUris") != Some("AsListed") {
        return;
    }
    let include = server
        .get("resourceSelector")
        .map_or(&[][..], |s| items(s, "include"));
    for (j, uri) in include.iter().enumerate() {
        if let Some(uri) = uri.as_str()
            && is_capstan_uri(uri)
        {
            out.push(FieldError::new(
                format!("{at}.resourceSelector.include[{j}]"),
                format!(
                    "\"{uri}\" takes the capstan: scheme, the sidecar's own; keep Capstan's URIs \
                     (remove resourceUris) to offer it"
                ),
            ));
        }
    }
}
