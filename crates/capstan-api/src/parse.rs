//! Reading capability documents and Capstan custom resources from JSON or YAML text.
//!
//! Accepted shapes: a bare array, a `{"items": [...]}` List, a single object, and multi-document
//! YAML of any of these. Text starting with `{` or `[` is read as JSON, anything else as YAML. Each object is validated on its own: an invalid one is reported with
//! every error and skipped, and never costs its valid siblings.

use serde_json::value::RawValue;
use serde_json::{Map, Value};
use thiserror::Error;

use crate::binding::CapabilityBinding;
use crate::document::{CapabilityDocument, DocumentMeta};
use crate::qualifier::RouteQualifier;
use crate::validate::{
    FieldError, check_binding_spec, check_qualifier_spec, json_type, strip_nulls,
    validate_qualifier_name,
};

/// `apiVersion` of Capstan's custom resources.
pub const API_VERSION: &str = "capabilities.assistant.miloapis.com/v1alpha1";

/// Text that is not JSON or YAML at all. Documents inside well-formed text that fail validation
/// are not errors of this kind: they are reported per object in [`Parsed::invalid`].
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseError {
    /// The text looked like JSON but is not.
    #[error("not valid JSON at line {line}, column {column}: {message}")]
    Json {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What the JSON parser reported.
        message: String,
    },
    /// The text is not valid YAML.
    #[error("not valid YAML{}: {message}", location.map(|(l, c)| format!(" at line {l}, column {c}")).unwrap_or_default())]
    Yaml {
        /// 1-based line and column, when the YAML parser knows them.
        location: Option<(u64, u64)>,
        /// What the YAML parser reported.
        message: String,
    },
}

/// One object read from the input.
#[derive(Clone, Debug, PartialEq)]
#[allow(clippy::large_enum_variant)] // Objects are parsed once and moved, never copied around.
pub enum Object {
    /// A capability document (the fixture/HTTP form; `kind` absent or a producer's own, such
    /// as `AgentBinding`).
    Document(CapabilityDocument),
    /// A CapabilityBinding custom resource.
    Binding(CapabilityBinding),
    /// A RouteQualifier custom resource.
    Qualifier(RouteQualifier),
}

impl Object {
    /// The object's name, when it has one.
    pub fn name(&self) -> Option<&str> {
        match self {
            Self::Document(doc) => doc.metadata.name.as_deref(),
            Self::Binding(binding) => binding.metadata.name.as_deref(),
            Self::Qualifier(qualifier) => qualifier.metadata.name.as_deref(),
        }
    }

    /// The object as a capability document: documents as they are, CapabilityBindings with their
    /// name (a binding carries no project: its control plane is the project). Qualifiers are not
    /// documents.
    pub fn into_document(self) -> Option<CapabilityDocument> {
        match self {
            Self::Document(doc) => Some(doc),
            Self::Binding(binding) => Some(CapabilityDocument {
                api_version: Some(API_VERSION.to_owned()),
                kind: Some("CapabilityBinding".to_owned()),
                metadata: DocumentMeta {
                    name: binding.metadata.name,
                    namespace: None,
                },
                spec: binding.spec,
            }),
            Self::Qualifier(_) => None,
        }
    }
}

/// A valid object and where it stood in the input.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedObject {
    /// Position among all objects of the input, from 0.
    pub index: usize,
    /// The object.
    pub object: Object,
}

/// An object that failed validation, with every error found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidObject {
    /// Position among all objects of the input, from 0.
    pub index: usize,
    /// `metadata.name` when the object has a usable one, otherwise `#<index>`.
    pub label: String,
    /// Every error, path-qualified.
    pub errors: Vec<FieldError>,
}

impl InvalidObject {
    /// One line per error, `<label>: <path>: <message>`: the form `capstanctl validate` prints
    /// and the controller logs.
    pub fn lines(&self) -> impl Iterator<Item = String> + '_ {
        self.errors
            .iter()
            .map(|error| format!("{}: {error}", self.label))
    }
}

/// The result of reading one input: valid objects in input order, and the invalid ones.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parsed {
    /// Valid objects, in input order.
    pub objects: Vec<ParsedObject>,
    /// Invalid objects, in input order.
    pub invalid: Vec<InvalidObject>,
}

impl Parsed {
    /// The valid objects as capability documents, in input order; qualifiers are left out.
    pub fn into_documents(self) -> Vec<CapabilityDocument> {
        self.objects
            .into_iter()
            .filter_map(|parsed| parsed.object.into_document())
            .collect()
    }
}

/// Reads every object in `text` (JSON or YAML) and validates each.
pub fn parse(text: &str) -> Result<Parsed, ParseError> {
    let mut parsed = Parsed::default();
    if looks_like_json(text) {
        // Items are decoded one at a time from borrowed slices of the text, so a large list
        // never exists as one `Value` tree (a 10 MB list would take about 15 times its size).
        for item in json_items(text)? {
            parsed.push(serde_json::from_str(item.get()).map_err(json_error)?);
        }
    } else {
        for root in yaml_values(text)? {
            for value in expand(root) {
                parsed.push(value);
            }
        }
    }
    Ok(parsed)
}

impl Parsed {
    fn push(&mut self, value: Value) {
        let index = self.objects.len() + self.invalid.len();
        match read_object(value) {
            Ok(object) => self.objects.push(ParsedObject { index, object }),
            Err((name, errors)) => self.invalid.push(InvalidObject {
                index,
                label: name.unwrap_or_else(|| format!("#{index}")),
                errors,
            }),
        }
    }
}

/// Text starting with `{` or `[` is held to JSON: a typo in a JSON file must not be read as a
/// YAML flow mapping with a different meaning.
fn looks_like_json(text: &str) -> bool {
    matches!(text.trim_start().chars().next(), Some('{' | '['))
}

fn json_error(error: serde_json::Error) -> ParseError {
    ParseError::Json {
        line: error.line(),
        column: error.column(),
        message: error.to_string(),
    }
}

/// The top-level members of a JSON object that decide whether it is a List.
#[derive(serde::Deserialize)]
struct JsonRoot<'a> {
    #[serde(borrow, default)]
    items: Option<&'a RawValue>,
    #[serde(default)]
    kind: Option<Value>,
    #[serde(default)]
    spec: Option<serde::de::IgnoredAny>,
}

/// The objects of a JSON text, unparsed: the elements of a bare array or of a List's `items`,
/// else the whole text as one object. The whole text is syntax-checked here.
fn json_items(text: &str) -> Result<Vec<&RawValue>, ParseError> {
    let root: &RawValue = serde_json::from_str(text).map_err(json_error)?;
    if text.trim_start().starts_with('[') {
        return serde_json::from_str(root.get()).map_err(json_error);
    }
    let JsonRoot { items, kind, spec } = serde_json::from_str(root.get()).map_err(json_error)?;
    let kind_is_list = kind
        .as_ref()
        .is_none_or(|k| k.as_str().is_some_and(|k| k.ends_with("List")));
    match items {
        Some(items) if spec.is_none() && kind_is_list && items.get().starts_with('[') => {
            serde_json::from_str(items.get()).map_err(json_error)
        }
        _ => Ok(vec![root]),
    }
}

/// Every document of a (multi-document) YAML text.
fn yaml_values(text: &str) -> Result<Vec<Value>, ParseError> {
    serde_saphyr::from_multiple_with_options::<Value>(text, yaml_options(text.len())).map_err(
        |error| ParseError::Yaml {
            location: error.location().map(|l| (l.line(), l.column())),
            message: error.to_string(),
        },
    )
}

/// The YAML parser's resource budget, scaled to the input: a large but honest input (a 10 MB
/// list) must read, while the limits that stop amplification (alias expansion, nesting depth)
/// keep their defaults. Events, nodes and scalar bytes cannot outnumber input bytes without
/// aliases, so the input length bounds them safely.
pub fn yaml_options(input_len: usize) -> serde_saphyr::Options {
    let defaults = serde_saphyr::Budget::default();
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_events: defaults.max_events.max(input_len),
            max_nodes: defaults.max_nodes.max(input_len),
            max_total_scalar_bytes: defaults.max_total_scalar_bytes.max(input_len),
            max_documents: defaults.max_documents.max(input_len / 16),
        },
    }
}

/// A root value's objects: the items of a bare array or of a List, else the value itself.
fn expand(root: Value) -> Vec<Value> {
    match root {
        Value::Array(items) => items,
        Value::Object(mut map) if is_list(&map) => match map.remove("items") {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        },
        other => vec![other],
    }
}

/// A List has an `items` array and no `spec`; its kind, when given, ends in `List`.
fn is_list(map: &Map<String, Value>) -> bool {
    // As `json_items` reads it: a kind that is not a string is no List's.
    let kind_is_list = map
        .get("kind")
        .is_none_or(|kind| kind.as_str().is_some_and(|kind| kind.ends_with("List")));
    matches!(map.get("items"), Some(Value::Array(_))) && !map.contains_key("spec") && kind_is_list
}

type ObjectErrors = (Option<String>, Vec<FieldError>);

/// Validates one object and, when valid, decodes it into its type.
fn read_object(mut value: Value) -> Result<Object, ObjectErrors> {
    strip_nulls(&mut value);
    let Value::Object(mut map) = value else {
        let got = json_type(&value);
        return Err((
            None,
            vec![FieldError::new(
                "object",
                format!("must be an object, got {got}"),
            )],
        ));
    };
    // Status is written by Capstan, never read from input.
    map.remove("status");
    let name = map
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty())
        .map(str::to_owned);
    let kind = map.get("kind").and_then(Value::as_str).map(str::to_owned);
    let result = match kind.as_deref() {
        Some("RouteQualifier") => read_qualifier(map),
        Some("CapabilityBinding") => read_binding(map),
        _ => read_document(map),
    };
    result.map_err(|errors| (name, errors))
}

fn envelope_errors(map: &Map<String, Value>, is_resource: bool) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for key in ["apiVersion", "kind"] {
        match map.get(key) {
            None | Some(Value::Null) if is_resource => {
                errors.push(FieldError::new(key, "required"))
            }
            Some(Value::String(_)) | None | Some(Value::Null) => {}
            Some(_) => errors.push(FieldError::new(key, "must be a string")),
        }
    }
    if is_resource
        && let Some(Value::String(version)) = map.get("apiVersion")
        && version != API_VERSION
    {
        errors.push(FieldError::new(
            "apiVersion",
            format!("must be {API_VERSION}"),
        ));
    }
    match map.get("metadata") {
        None | Some(Value::Null) if is_resource => {
            errors.push(FieldError::new("metadata.name", "required"))
        }
        None | Some(Value::Null) => {}
        Some(Value::Object(meta)) => {
            match meta.get("name") {
                None | Some(Value::Null) if is_resource => {
                    errors.push(FieldError::new("metadata.name", "required"))
                }
                Some(Value::String(name)) if name.is_empty() => {
                    errors.push(FieldError::new("metadata.name", "must not be empty"))
                }
                Some(Value::String(_)) | None | Some(Value::Null) => {}
                Some(_) => errors.push(FieldError::new("metadata.name", "must be a string")),
            }
            if let Some(namespace) = meta.get("namespace")
                && !namespace.is_string()
                && !namespace.is_null()
            {
                errors.push(FieldError::new("metadata.namespace", "must be a string"));
            }
        }
        Some(_) => errors.push(FieldError::new("metadata", "must be an object")),
    }
    match map.get("spec") {
        None | Some(Value::Null) => errors.push(FieldError::new("spec", "required")),
        Some(Value::Object(_)) => {}
        Some(other) => errors.push(FieldError::new(
            "spec",
            format!("must be an object, got {}", json_type(other)),
        )),
    }
    errors
}

fn spec_of(map: &Map<String, Value>) -> Option<&Value> {
    map.get("spec").filter(|spec| spec.is_object())
}

fn decode<T: serde::de::DeserializeOwned>(map: Map<String, Value>) -> Result<T, Vec<FieldError>> {
    // Validation has accepted the value, so decoding fails only where validation and the types
    // disagree (a defect); report it at the object rather than panic.
    serde_json::from_value(Value::Object(map)).map_err(|error| {
        vec![FieldError::new(
            "object",
            format!("cannot be decoded: {error}"),
        )]
    })
}

fn read_document(map: Map<String, Value>) -> Result<Object, Vec<FieldError>> {
    let mut errors = envelope_errors(&map, false);
    if let Some(spec) = spec_of(&map) {
        errors.extend(check_binding_spec(spec));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    decode(map).map(Object::Document)
}

fn read_binding(map: Map<String, Value>) -> Result<Object, Vec<FieldError>> {
    let mut errors = envelope_errors(&map, true);
    if let Some(spec) = spec_of(&map) {
        errors.extend(check_binding_spec(spec));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    decode(map).map(Object::Binding)
}

fn read_qualifier(map: Map<String, Value>) -> Result<Object, Vec<FieldError>> {
    let mut errors = envelope_errors(&map, true);
    // The schema is closed at every level, the envelope included.
    for key in map.keys() {
        if !matches!(key.as_str(), "apiVersion" | "kind" | "metadata" | "spec") {
            errors.push(FieldError::new(key.clone(), "unknown field"));
        }
    }
    if let Some(name) = map
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
    {
        errors.extend(validate_qualifier_name(name));
    }
    if let Some(spec) = spec_of(&map) {
        errors.extend(check_qualifier_spec(spec));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    decode(map).map(Object::Qualifier)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BINDING_SPEC: &str = r#"{
        "serviceRef": {"name": "s"}, "serviceName": "s.example", "serviceAgentRef": {"name": "a"},
        "configurationVersion": "v1"
    }"#;

    fn doc(name: &str) -> String {
        format!(r#"{{"metadata": {{"name": "{name}"}}, "spec": {BINDING_SPEC}}}"#)
    }

    #[test]
    fn bare_array_list_and_single_object_should_all_read() {
        let array = format!("[{}, {}]", doc("a"), doc("b"));
        let list = format!(
            r#"{{"kind": "List", "items": [{}, {}]}}"#,
            doc("a"),
            doc("b")
        );
        for text in [array.as_str(), list.as_str()] {
            let parsed = parse(text).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(parsed.objects.len(), 2, "{text}");
        }
        assert_eq!(parse(&doc("a")).map(|p| p.objects.len()), Ok(1));
    }

    #[test]
    fn invalid_document_should_not_cost_its_valid_siblings() {
        let text = format!(
            r#"[{}, {{"metadata": {{"name": "bad"}}, "spec": {{}}}}, {}]"#,
            doc("a"),
            doc("c")
        );
        let parsed = parse(&text).unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<_> = parsed
            .objects
            .iter()
            .filter_map(|p| p.object.name())
            .collect();
        assert_eq!(names, ["a", "c"]);
        assert_eq!(parsed.invalid.len(), 1);
        assert_eq!(parsed.invalid[0].label, "bad");
        assert_eq!(parsed.invalid[0].index, 1);
        assert_eq!(parsed.invalid[0].errors.len(), 4);
    }

    #[test]
    fn multi_document_yaml_should_read_every_document() {
        let text = "\
apiVersion: capabilities.assistant.miloapis.com/v1alpha1
kind: RouteQualifier
metadata: {name: q1}
spec: {constraint: {kind: pin, target: exa}}
---
apiVersion: capabilities.assistant.miloapis.com/v1alpha1
kind: RouteQualifier
metadata: {name: q2}
spec: {constraint: {kind: pinned}}
";
        let parsed = parse(text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed.objects.len(), 1);
        assert_eq!(parsed.invalid[0].label, "q2");
        assert_eq!(
            parsed.invalid[0]
                .errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["spec.constraint.kind: must be one of none, only, ignore, pin"]
        );
    }

    #[test]
    fn broken_json_should_name_line_and_column() {
        let error = parse("{\n  \"items\": [\n    {,}\n  ]\n}").err();
        assert!(
            matches!(error, Some(ParseError::Json { line: 3, .. })),
            "{error:?}"
        );
    }

    /// An object is read as a List only without `spec`, with no kind or one ending in
    /// `List`, and with an array of `items`; anything else is one object — the same in JSON
    /// and in YAML.
    #[test]
    fn an_object_should_be_a_list_only_with_a_list_kind_an_array_of_items_and_no_spec() {
        let items = format!("[{}, {}]", doc("a"), doc("b"));
        let cases = [
            (format!(r#"{{"items": {items}}}"#), 2),
            (
                format!(r#"{{"kind": "CapabilityBindingList", "items": {items}}}"#),
                2,
            ),
            (
                format!(r#"{{"kind": "CapabilityBinding", "items": {items}}}"#),
                1,
            ),
            (format!(r#"{{"kind": 3, "items": {items}}}"#), 1),
            (
                format!(r#"{{"items": {items}, "spec": {BINDING_SPEC}}}"#),
                1,
            ),
            (r#"{"kind": "List", "items": {"a": 1}}"#.to_owned(), 1),
            (r#"{"items": "a"}"#.to_owned(), 1),
        ];
        for (json, objects) in cases {
            // YAML reads JSON; a leading document marker keeps it from being read as JSON.
            for text in [json.clone(), format!("---\n{json}")] {
                let parsed = parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
                assert_eq!(
                    parsed.objects.len() + parsed.invalid.len(),
                    objects,
                    "{text}"
                );
            }
        }
    }

    /// A long multi-document YAML reads whole: the parser's budget grows with the input
    /// (its default stops at 1,024 documents).
    #[test]
    fn a_yaml_stream_past_the_parsers_default_budget_should_read_whole() {
        let text: String = (0..1500)
            .map(|i| format!("---\n{}\n", doc(&format!("d{i}"))))
            .collect();
        let parsed = parse(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed.objects.len(), 1500);
        assert!(parsed.invalid.is_empty());
    }

    #[test]
    fn object_without_name_should_be_labelled_by_index() {
        let parsed = parse(r#"[{"spec": {}}, 3]"#).unwrap_or_else(|e| panic!("{e}"));
        let labels: Vec<_> = parsed.invalid.iter().map(|i| i.label.as_str()).collect();
        assert_eq!(labels, ["#0", "#1"]);
    }
}
