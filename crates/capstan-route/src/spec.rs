//! Capability specs: the job a `cap.*` tool does, as one schema an assistant calls instead of a
//! provider's own tool. Specs ship as JSON packs in `config/capabilities/` (one file per
//! capability, `{"spec": …}`), embedded in every binary so the controller, the sidecar and
//! `capstanctl` judge the same catalog (docs/routing.md).
//!
//! A pack is checked in two passes, like a binding: the JSON Schema generated from these types
//! (types, enums, patterns, bounds, unknown fields), then the rules that span fields — the
//! file name, duplicate features, input and output schemas that compile, the arguments routing
//! reserves.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::LazyLock;

use capstan_api::patterns::{CAPABILITY_ID_PATTERN, FEATURE_PATTERN, MAX_NAME_LEN};
use capstan_api::{FieldError, SchemaDefect, TypeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The pack format this Capstan reads.
pub const SCHEMA_VERSION: u32 = 1;

/// Argument names routing takes from a call before the provider sees it; a spec's input schema
/// may not declare them.
pub const RESERVED_ARGUMENTS: [&str; 3] = ["route", "requirements", "intent"];

/// The packs built into this Capstan: `config/capabilities/*.json`.
const EMBEDDED: [(&str, &str); 3] = [
    (
        "cap.issue.create.json",
        include_str!("../../../config/capabilities/cap.issue.create.json"),
    ),
    (
        "cap.web.scrape.json",
        include_str!("../../../config/capabilities/cap.web.scrape.json"),
    ),
    (
        "cap.web.search.json",
        include_str!("../../../config/capabilities/cap.web.search.json"),
    ),
];

/// One capability pack file.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Pack {
    /// The capability.
    pub spec: CapabilitySpec,
}

/// What a capability is: its schemas, its feature vocabulary, its effect.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CapabilitySpec {
    /// The pack format, 1.
    #[schemars(range(min = 1, max = 1))]
    pub schema_version: u32,
    /// `cap.<segment>(.<segment>)*`; the pack's file name is `<capability_id>.json`.
    #[schemars(length(max = MAX_NAME_LEN), pattern(CAPABILITY_ID_PATTERN))]
    pub capability_id: String,
    /// A short name for people.
    #[schemars(length(min = 1, max = 80))]
    pub display_name: String,
    /// What the job is, for the model: it never names a provider.
    #[schemars(length(min = 1, max = 1024))]
    pub description: String,
    /// The closed set of features a provider may claim and a call may ask for.
    #[serde(default)]
    #[schemars(
        length(max = 32),
        inner(length(min = 1, max = 63), pattern(FEATURE_PATTERN))
    )]
    pub feature_vocabulary: Vec<String>,
    /// The arguments of the `cap__…` tool (a JSON Schema object).
    pub input_schema: Map<String, Value>,
    /// What a provider answers (a JSON Schema object).
    pub output_schema: Map<String, Value>,
    /// What a call does to the world.
    pub effect: Effect,
    /// Whether the capability is offered.
    pub status: SpecStatus,
}

/// What a call does to the world.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Effect {
    /// The effect format, 1.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 1))]
    pub schema_version: u32,
    /// The effect's kind.
    pub kind: EffectKind,
}

fn one() -> u32 {
    1
}

/// The kinds of effect; every kind but `read` makes the tool destructive.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EffectKind {
    /// Reads only.
    Read,
    /// Creates or changes something.
    Write,
    /// Removes something.
    Delete,
    /// Acts outside any system of record (sends a message, charges a card).
    ExternalSideEffect,
}

impl EffectKind {
    /// Whether a call may change something: MCP's `destructiveHint`, derived, never asserted.
    pub fn is_destructive(self) -> bool {
        self != Self::Read
    }
}

/// Whether a capability is offered.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SpecStatus {
    /// Offered.
    Active,
    /// Kept for reference, never offered as a tool.
    Retired,
}

impl CapabilitySpec {
    /// The tool name of the capability: `cap.web.search` → `cap__web_search`.
    pub fn tool_name(&self) -> String {
        tool_name(&self.capability_id)
    }

    /// Whether `feature` is in the vocabulary.
    pub fn knows(&self, feature: &str) -> bool {
        self.feature_vocabulary.iter().any(|f| f == feature)
    }
}

/// `cap.web.search` → `cap__web_search`: `cap` and the job, joined the way provider tools are
/// (`<server>__<tool>`), dots and dashes as underscores, within the tool-name alphabet.
pub fn tool_name(capability_id: &str) -> String {
    let job = capability_id.strip_prefix("cap.").unwrap_or(capability_id);
    format!("cap__{}", job.replace(['.', '-'], "_"))
}

/// A pack that could not be loaded: its file and every error in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackError {
    /// The pack's file name.
    pub file: String,
    /// What is wrong, path-qualified (`spec.input_schema.type: …`).
    pub errors: Vec<FieldError>,
}

impl fmt::Display for PackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let errors: Vec<String> = self.errors.iter().map(ToString::to_string).collect();
        write!(f, "capability pack {}: {}", self.file, errors.join("; "))
    }
}

static PACK_SCHEMA: LazyLock<Result<TypeSchema, SchemaDefect>> =
    LazyLock::new(TypeSchema::of::<Pack>);

/// Reads one pack named `file` (`<capability_id>.json`) from `text`: the spec, or every error.
pub fn load_pack(file: &str, text: &str) -> Result<CapabilitySpec, PackError> {
    let refuse = |errors: Vec<FieldError>| PackError {
        file: file.to_owned(),
        errors,
    };
    let value: Value = serde_json::from_str(text).map_err(|e| {
        refuse(vec![FieldError::new(
            "",
            format!("not JSON ({e}); a pack is {{\"spec\": {{…}}}}"),
        )])
    })?;
    let mut errors = match &*PACK_SCHEMA {
        Ok(schema) => schema.errors("", &value),
        Err(defect) => vec![FieldError::new("", defect.to_string())],
    };
    let spec = &value["spec"];
    check_rules(file, spec, &mut errors);
    if !errors.is_empty() {
        for error in &mut errors {
            error.path = error.path.trim_start_matches('.').to_owned();
        }
        return Err(refuse(errors));
    }
    serde_json::from_value::<Pack>(value)
        .map(|pack| pack.spec)
        .map_err(|e| refuse(vec![FieldError::new("spec", e.to_string())]))
}

/// The rules that span fields.
fn check_rules(file: &str, spec: &Value, errors: &mut Vec<FieldError>) {
    if let Some(id) = spec["capability_id"].as_str()
        && file.strip_suffix(".json") != Some(id)
    {
        errors.push(FieldError::new(
            "spec.capability_id",
            format!("{id:?} must match the file name {file:?} (name the file {id}.json)"),
        ));
    }
    if let Some(features) = spec["feature_vocabulary"].as_array() {
        let mut seen = BTreeMap::new();
        for (index, feature) in features.iter().enumerate() {
            if let Some(first) = seen.insert(feature.to_string(), index) {
                errors.push(FieldError::new(
                    format!("spec.feature_vocabulary[{index}]"),
                    format!("duplicate of feature_vocabulary[{first}]"),
                ));
            }
        }
    }
    for field in ["input_schema", "output_schema"] {
        let schema = &spec[field];
        if !schema.is_object() {
            continue; // The schema pass reported it.
        }
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            errors.push(FieldError::new(
                format!("spec.{field}.type"),
                "must be \"object\": a tool's arguments and answers are JSON objects",
            ));
        }
        if let Err(e) = jsonschema::validator_for(schema) {
            errors.push(FieldError::new(
                format!("spec.{field}"),
                format!("not a valid JSON Schema: {e}"),
            ));
        }
    }
    if let Some(properties) = spec["input_schema"]["properties"].as_object() {
        for reserved in RESERVED_ARGUMENTS {
            if properties.contains_key(reserved) {
                errors.push(FieldError::new(
                    format!("spec.input_schema.properties.{reserved}"),
                    format!(
                        "`{reserved}` is reserved: routing takes it from a call before the \
                         provider sees it; rename the argument"
                    ),
                ));
            }
        }
    }
}

/// The capability specs a process knows, by id.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    specs: BTreeMap<String, CapabilitySpec>,
}

impl Catalog {
    /// Loads `packs` (file name, text). Every invalid pack is reported; a valid pack is kept
    /// whatever its siblings hold, and a second pack with the same id is refused.
    pub fn load<'a>(packs: impl IntoIterator<Item = (&'a str, &'a str)>) -> (Self, Vec<PackError>) {
        let mut catalog = Self::default();
        let mut refused = Vec::new();
        for (file, text) in packs {
            match load_pack(file, text) {
                Ok(spec) if catalog.specs.contains_key(&spec.capability_id) => {
                    refused.push(PackError {
                        file: file.to_owned(),
                        errors: vec![FieldError::new(
                            "spec.capability_id",
                            format!("{} is defined by another pack too", spec.capability_id),
                        )],
                    });
                }
                Ok(spec) => {
                    catalog.specs.insert(spec.capability_id.clone(), spec);
                }
                Err(error) => refused.push(error),
            }
        }
        (catalog, refused)
    }

    /// The packs built into this Capstan (`config/capabilities/`; a unit test keeps every one
    /// valid).
    pub fn embedded() -> &'static Self {
        static EMBEDDED_CATALOG: LazyLock<Catalog> = LazyLock::new(|| Catalog::load(EMBEDDED).0);
        &EMBEDDED_CATALOG
    }

    /// The spec of `capability_id`.
    pub fn get(&self, capability_id: &str) -> Option<&CapabilitySpec> {
        self.specs.get(capability_id)
    }

    /// The spec whose tool name is `tool` (`cap__web_search`).
    pub fn by_tool_name(&self, tool: &str) -> Option<&CapabilitySpec> {
        self.specs.values().find(|s| s.tool_name() == tool)
    }

    /// The ids, in order.
    pub fn ids(&self) -> BTreeSet<&str> {
        self.specs.keys().map(String::as_str).collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pack(spec: Value) -> String {
        json!({ "spec": spec }).to_string()
    }

    fn valid() -> Value {
        json!({
            "schema_version": 1,
            "capability_id": "cap.test.job",
            "display_name": "A job",
            "description": "Does the job.",
            "feature_vocabulary": ["job.fast"],
            "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
            "output_schema": {"type": "object"},
            "effect": {"kind": "read"},
            "status": "active"
        })
    }

    #[test]
    fn every_embedded_pack_should_load() {
        let (catalog, refused) = Catalog::load(EMBEDDED);
        assert_eq!(refused, Vec::new());
        assert_eq!(
            catalog.ids().into_iter().collect::<Vec<_>>(),
            ["cap.issue.create", "cap.web.scrape", "cap.web.search"]
        );
        let create = catalog.get("cap.issue.create").map(|s| s.effect.kind);
        assert_eq!(create, Some(EffectKind::Write));
        assert!(EffectKind::Write.is_destructive() && !EffectKind::Read.is_destructive());
        assert_eq!(Catalog::embedded().ids().len(), 3);
    }

    #[test]
    fn tool_names_should_replace_dots_and_dashes() {
        assert_eq!(tool_name("cap.web.search"), "cap__web_search");
        assert_eq!(
            tool_name("cap.issue-tracker.create"),
            "cap__issue_tracker_create"
        );
        let catalog = Catalog::embedded();
        assert_eq!(
            catalog
                .by_tool_name("cap__web_scrape")
                .map(|s| s.capability_id.as_str()),
            Some("cap.web.scrape")
        );
    }

    #[test]
    fn a_valid_pack_should_load() {
        let spec = load_pack("cap.test.job.json", &pack(valid())).unwrap();
        assert_eq!(spec.effect.schema_version, 1);
        assert!(spec.knows("job.fast") && !spec.knows("job.slow"));
    }

    #[test]
    fn an_invalid_pack_should_be_refused_with_every_path() {
        let cases: Vec<(&str, Value, &str)> = vec![
            (
                "cap.test.job.json",
                json!({"spec": {}}),
                "spec.capability_id: required",
            ),
            (
                "cap.test.job.json",
                {
                    let mut s = valid();
                    s["schema_version"] = json!(2);
                    json!({"spec": s})
                },
                "spec.schema_version",
            ),
            (
                "cap.test.job.json",
                {
                    let mut s = valid();
                    s["effect"]["kind"] = json!("mutate");
                    json!({"spec": s})
                },
                "spec.effect.kind",
            ),
            (
                "cap.test.job.json",
                {
                    let mut s = valid();
                    s["capability_id"] = json!("web.search");
                    json!({"spec": s})
                },
                "spec.capability_id",
            ),
            (
                "cap.other.json",
                json!({"spec": valid()}),
                "spec.capability_id: \"cap.test.job\" must match the file name",
            ),
            (
                "cap.test.job.json",
                {
                    let mut s = valid();
                    s["feature_vocabulary"] = json!(["a.b", "a.b"]);
                    json!({"spec": s})
                },
                "spec.feature_vocabulary[1]: duplicate of feature_vocabulary[0]",
            ),
            (
                "cap.test.job.json",
                {
                    let mut s = valid();
                    s["input_schema"] = json!({"type": "string"});
                    json!({"spec": s})
                },
                "spec.input_schema.type: must be \"object\"",
            ),
            (
                "cap.test.job.json",
                {
                    let mut s = valid();
                    s["input_schema"]["properties"]["q"] = json!({"type": 7});
                    json!({"spec": s})
                },
                "spec.input_schema: not a valid JSON Schema",
            ),
            (
                "cap.test.job.json",
                {
                    let mut s = valid();
                    s["input_schema"]["properties"]["route"] = json!({"type": "object"});
                    json!({"spec": s})
                },
                "spec.input_schema.properties.route: `route` is reserved",
            ),
            (
                "cap.test.job.json",
                {
                    let mut s = valid();
                    s["surprise"] = json!(1);
                    json!({"spec": s})
                },
                "spec.surprise: unknown field",
            ),
        ];
        for (file, value, expected) in cases {
            let error = load_pack(file, &value.to_string()).unwrap_err();
            let text = error.to_string();
            assert!(
                text.contains(expected) && text.contains(file),
                "{value}: want {expected:?}, got {text}"
            );
        }
        let error = load_pack("cap.test.job.json", "{").unwrap_err();
        assert!(error.to_string().contains("not JSON"), "{error}");
    }

    #[test]
    fn an_invalid_pack_should_not_cost_its_valid_siblings() {
        let good = pack(valid());
        let mut other = valid();
        other["capability_id"] = json!("cap.other.job");
        let other = pack(other);
        let (catalog, refused) = Catalog::load([
            ("cap.test.job.json", good.as_str()),
            ("cap.broken.json", "{\"spec\": {}}"),
            ("cap.other.job.json", other.as_str()),
            ("cap.test.job.json", good.as_str()),
        ]);
        assert_eq!(catalog.ids().len(), 2);
        assert_eq!(refused.len(), 2);
        assert!(refused[1].to_string().contains("defined by another pack"));
    }
}
