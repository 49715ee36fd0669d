//! The rules of a CapabilityBinding spec that span fields (the CRD's CEL rules and list-map
//! keys): unique server, skill and capability names, the `__` delimiter and the reserved name
//! `cap`, and `mutating`, `toolSelector.pins` and `capabilities[].tool` entries inside the
//! allow-list.

use serde_json::Value;

use super::FieldError;
use super::fields::{duplicates, items, text};

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
        if let Some(name) = text(server, "name") {
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

        let include_path = format!("{at}.toolSelector.include");
        let include_value = server.get("toolSelector").and_then(|s| s.get("include"));
        // A wrong-typed allow-list is already reported; checking entries against it would only
        // add noise.
        let include_readable = include_value.is_none_or(Value::is_array);
        let include: Vec<&str> = include_value
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        duplicates(
            server
                .get("toolSelector")
                .map_or(&[][..], |s| items(s, "include"))
                .iter()
                .enumerate()
                .filter_map(|(j, tool)| Some((format!("{include_path}[{j}]"), tool.as_str()?))),
            out,
        );

        // Pin keys are object keys, so they cannot repeat; each must name an allowed tool.
        let pins = server
            .get("toolSelector")
            .and_then(|s| s.get("pins"))
            .and_then(Value::as_object);
        for tool in pins.into_iter().flat_map(|pins| pins.keys()) {
            if include_readable && !include.contains(&tool.as_str()) {
                out.push(FieldError::new(
                    format!("{at}.toolSelector.pins.{tool}"),
                    format!(
                        "\"{tool}\" is not in {include_path}; a pin for a tool the allow-list \
                         does not admit would pin nothing"
                    ),
                ));
            }
        }

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
                && include_readable
                && !include.contains(&tool)
            {
                out.push(FieldError::new(
                    format!("{at}.mutating[{j}]"),
                    format!(
                        "\"{tool}\" is not in {include_path}; a tool the allow-list does not \
                         admit cannot be flagged mutating"
                    ),
                ));
            }
        }

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
                && include_readable
                && !include.contains(&tool)
            {
                out.push(FieldError::new(
                    format!("{at}.capabilities[{j}].tool"),
                    format!(
                        "\"{tool}\" is not in {include_path}; a route cannot reach a tool the \
                         allow-list does not admit"
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
