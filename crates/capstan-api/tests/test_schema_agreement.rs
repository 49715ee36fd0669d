//! Admission and runtime validation agree: every field the CRD's OpenAPI schema requires, and
//! every enum it lists, is reported by runtime validation at the same path. The cases are
//! derived from the generated CRD, so a field added to one side only fails here.

use capstan_api::validate::validate_binding_spec;
use capstan_api::{CapabilityBinding, RouteQualifier};
use kube::CustomResourceExt;
use serde_json::Value;

fn full_spec() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/corpus/valid/full-document.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let document: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    document["spec"].clone()
}

fn spec_schema<K: CustomResourceExt>() -> Value {
    let crd = serde_json::to_value(K::crd()).unwrap_or_else(|e| panic!("{e}"));
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].clone()
}

/// A field path and a pointer to the same place, built side by side while walking.
#[derive(Clone)]
struct At {
    path: String,
    pointer: String,
}

/// Every (object location, required field) and (field location, enum values) in the schema
/// that the instance reaches.
fn walk(schema: &Value, instance: &Value, at: At, required: &mut Required, enums: &mut Enums) {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        enums.push((
            at.clone(),
            values
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
        ));
    }
    match instance {
        Value::Object(fields) => {
            for name in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(name) = name.as_str() {
                    required.push((at.clone(), name.to_owned()));
                }
            }
            for (name, sub) in schema
                .get("properties")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                if let Some(value) = fields.get(name) {
                    let next = At {
                        path: format!("{}.{name}", at.path),
                        pointer: format!("{}/{name}", at.pointer),
                    };
                    walk(sub, value, next, required, enums);
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    let next = At {
                        path: format!("{}[{i}]", at.path),
                        pointer: format!("{}/{i}", at.pointer),
                    };
                    walk(sub, item, next, required, enums);
                }
            }
        }
        _ => {}
    }
}

type Required = Vec<(At, String)>;
type Enums = Vec<(At, Vec<String>)>;

/// The full document's spec, and the required fields and enums of the CRD schema it reaches.
fn reached() -> (Value, Required, Enums) {
    let spec = full_spec();
    let (mut required, mut enums) = (Vec::new(), Vec::new());
    let root = At {
        path: "spec".into(),
        pointer: String::new(),
    };
    walk(
        &spec_schema::<CapabilityBinding>(),
        &spec,
        root,
        &mut required,
        &mut enums,
    );
    (spec, required, enums)
}

fn lines(spec: &Value) -> Vec<String> {
    validate_binding_spec(spec)
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn every_required_field_of_the_crd_should_be_required_at_runtime() {
    let (spec, required, _) = reached();
    assert!(
        required.len() >= 15,
        "the full document reaches only {} required fields",
        required.len()
    );

    for (at, field) in required {
        let mut broken = spec.clone();
        let removed = broken
            .pointer_mut(&at.pointer)
            .and_then(Value::as_object_mut)
            .and_then(|object| object.remove(&field));
        assert!(
            removed.is_some(),
            "{}.{field} is required but absent from the full document",
            at.path
        );
        assert_eq!(lines(&broken), [format!("{}.{field}: required", at.path)]);
    }
}

#[test]
fn every_enum_of_the_crd_should_be_enforced_at_runtime_with_its_values() {
    let (spec, _, enums) = reached();
    assert!(
        enums.len() >= 2,
        "the full document reaches only {} enums",
        enums.len()
    );

    for (at, values) in enums {
        let mut broken = spec.clone();
        if let Some(slot) = broken.pointer_mut(&at.pointer) {
            *slot = Value::String("NotAValue".into());
        }
        assert_eq!(
            lines(&broken),
            [format!("{}: must be one of {}", at.path, values.join(", "))]
        );
    }
}

#[test]
fn qualifier_crd_should_list_the_constraint_kinds_runtime_accepts() {
    let schema = spec_schema::<RouteQualifier>();
    let kinds = &schema["properties"]["constraint"]["properties"]["kind"]["enum"];
    // The four kinds README.md lists, written out: not the constant the CRD was generated from.
    assert_eq!(kinds, &serde_json::json!(["none", "only", "ignore", "pin"]));
    // And runtime validation accepts exactly those.
    for kind in ["none", "only", "ignore", "pin", "pinned", "Only"] {
        let spec = match kind {
            "none" => serde_json::json!({ "constraint": { "kind": "none" } }),
            "pin" => serde_json::json!({ "constraint": { "kind": "pin", "target": "exa" } }),
            other => serde_json::json!({ "constraint": { "kind": other, "targets": ["exa"] } }),
        };
        let errors = capstan_api::validate::validate_qualifier_spec(&spec);
        let refused = errors.iter().any(|e| e.path == "spec.constraint.kind");
        assert_eq!(
            refused,
            !matches!(kind, "none" | "only" | "ignore" | "pin"),
            "{kind}: {errors:?}"
        );
    }
}
