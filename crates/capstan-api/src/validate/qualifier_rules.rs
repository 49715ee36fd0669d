//! The rules of a RouteQualifier spec that span fields: which constraint kinds take `targets`
//! or a `target`, and unique targets.

use serde_json::Value;

use super::FieldError;
use super::fields::{duplicates, items, text};
use crate::qualifier::CONSTRAINT_KINDS;

/// Checks the cross-field rules of a qualifier spec, pushing every violation.
pub(super) fn check(spec: &Value, out: &mut Vec<FieldError>) {
    let Some(constraint) = spec.get("constraint").filter(|c| c.is_object()) else {
        return;
    };
    // An unknown kind is already reported; its shape rules would only add noise.
    let Some(kind) = text(constraint, "kind").filter(|k| CONSTRAINT_KINDS.contains(k)) else {
        return;
    };
    let at = "spec.constraint";
    let takes_targets = matches!(kind, "only" | "ignore");
    match constraint.get("targets") {
        None if takes_targets => out.push(FieldError::new(
            format!("{at}.targets"),
            format!("required when kind is {kind}"),
        )),
        Some(Value::Array(targets)) if takes_targets && targets.is_empty() => {
            out.push(FieldError::new(
                format!("{at}.targets"),
                format!("must not be empty when kind is {kind}"),
            ))
        }
        Some(_) if !takes_targets => out.push(FieldError::new(
            format!("{at}.targets"),
            format!("not allowed when kind is {kind}; only and ignore take targets"),
        )),
        _ => {}
    }
    match constraint.get("target") {
        None if kind == "pin" => out.push(FieldError::new(
            format!("{at}.target"),
            "required when kind is pin",
        )),
        Some(_) if kind != "pin" => out.push(FieldError::new(
            format!("{at}.target"),
            format!("not allowed when kind is {kind}; only pin takes a target"),
        )),
        _ => {}
    }
    duplicates(
        items(constraint, "targets")
            .iter()
            .enumerate()
            .filter_map(|(i, target)| Some((format!("{at}.targets[{i}]"), target.as_str()?))),
        out,
    );
}
