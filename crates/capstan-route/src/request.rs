//! Per-call routing arguments: what a caller may add to a `cap__…` call beside the
//! capability's own arguments, taken out before anything reaches a provider.
//!
//! `route` (constraints that may only narrow the operator's qualifiers) and `requirements`
//! (features: `require` or `prefer`) are developer-facing and absent from the schema the model
//! sees; `intent` is free text kept only as a digest for correlation, never a scoring input: a
//! sentence a model wrote must not choose a provider.

use std::collections::BTreeMap;

use capstan_api::FieldError;
use serde::Deserialize;
use serde_json::{Map, Value};

/// Most targets one `route` list may name.
pub const MAX_ROUTE_TARGETS: usize = 32;

/// The caller's `route`: it narrows, never widens, what the qualifiers allow.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteRequest {
    /// Only these targets may serve (intersected with the qualifiers' `only`).
    #[serde(default)]
    pub only: Option<Vec<String>>,
    /// These targets may not serve (added to the qualifiers' `ignore`).
    #[serde(default)]
    pub ignore: Vec<String>,
    /// Exactly this target serves (must agree with a qualifier's pin).
    #[serde(default)]
    pub pin: Option<String>,
    /// A higher quality floor, basis points.
    #[serde(default)]
    pub min_quality: Option<u16>,
    /// A lower cost ceiling, micro-USD per call.
    #[serde(default)]
    pub max_cost_micros_usd: Option<i64>,
    /// Targets to favour when scores are otherwise close.
    #[serde(default)]
    pub prefer: Vec<String>,
}

/// How much a caller wants a feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Level {
    /// A candidate without it is excluded (`coverage_missing`).
    Require,
    /// A candidate with it scores higher.
    Prefer,
}

/// Feature → level, as the caller wrote it (keys outside the spec's vocabulary are ignored at
/// selection).
pub type Requirements = BTreeMap<String, Level>;

/// What routing took out of a call's arguments.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Taken {
    /// The caller's route.
    pub route: RouteRequest,
    /// The caller's requirements.
    pub requirements: Requirements,
    /// The caller's intent, as written (the sidecar keeps only its digest).
    pub intent: Option<String>,
}

/// Takes `route`, `requirements` and `intent` out of `arguments`, leaving the capability's own.
/// A malformed routing argument is an error naming its path (`route.pin`), never ignored: a
/// constraint silently dropped is a rule the caller did not get.
pub fn take_from(arguments: &mut Map<String, Value>) -> Result<Taken, Vec<FieldError>> {
    let mut errors = Vec::new();
    let mut taken = Taken::default();
    if let Some(route) = arguments.remove("route") {
        match serde_json::from_value::<RouteRequest>(route) {
            Ok(route) => {
                let lists = [
                    ("only", route.only.as_deref().unwrap_or_default()),
                    ("ignore", &route.ignore),
                    ("prefer", &route.prefer),
                ];
                for (field, list) in lists {
                    if list.len() > MAX_ROUTE_TARGETS {
                        errors.push(FieldError::new(
                            format!("route.{field}"),
                            format!("at most {MAX_ROUTE_TARGETS} targets"),
                        ));
                    }
                }
                if route.min_quality.is_some_and(|q| q > 10_000) {
                    errors.push(FieldError::new(
                        "route.minQuality",
                        "basis points, 0 to 10000",
                    ));
                }
                if route.max_cost_micros_usd.is_some_and(|c| c < 0) {
                    errors.push(FieldError::new(
                        "route.maxCostMicrosUsd",
                        "must not be negative",
                    ));
                }
                taken.route = route;
            }
            Err(e) => errors.push(FieldError::new(
                "route",
                format!(
                    "{e}; expected {{only?, ignore?, pin?, minQuality?, maxCostMicrosUsd?, \
                     prefer?}}"
                ),
            )),
        }
    }
    if let Some(requirements) = arguments.remove("requirements") {
        match serde_json::from_value::<Requirements>(requirements) {
            Ok(requirements) => taken.requirements = requirements,
            Err(e) => errors.push(FieldError::new(
                "requirements",
                format!("{e}; expected {{\"<feature>\": \"require\" | \"prefer\"}}"),
            )),
        }
    }
    if let Some(intent) = arguments.remove("intent") {
        match intent {
            Value::String(text) => taken.intent = Some(text),
            Value::Null => {}
            other => errors.push(FieldError::new(
                "intent",
                format!("must be a string, not {other}"),
            )),
        }
    }
    if errors.is_empty() {
        Ok(taken)
    } else {
        Err(errors)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn arguments(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn routing_arguments_should_be_taken_and_the_rest_left() {
        let mut args = arguments(json!({
            "query": "capstan",
            "intent": "find the docs",
            "requirements": {"search.fresh": "prefer", "search.render": "require"},
            "route": {"only": ["a", "b"], "pin": "a", "maxCostMicrosUsd": 5000, "prefer": ["b"]}
        }));
        let taken = take_from(&mut args).unwrap();
        assert_eq!(args, arguments(json!({"query": "capstan"})));
        assert_eq!(taken.intent.as_deref(), Some("find the docs"));
        assert_eq!(taken.requirements["search.render"], Level::Require);
        assert_eq!(taken.route.pin.as_deref(), Some("a"));
        assert_eq!(taken.route.max_cost_micros_usd, Some(5000));
    }

    #[test]
    fn malformed_routing_arguments_should_be_refused_by_path() {
        let cases = [
            (
                json!({"route": {"pinned": "a"}}),
                "route: unknown field `pinned`",
            ),
            (json!({"route": {"minQuality": 20000}}), "route.minQuality"),
            (
                json!({"route": {"maxCostMicrosUsd": -1}}),
                "route.maxCostMicrosUsd",
            ),
            (json!({"route": "a"}), "route: invalid type"),
            (
                json!({"requirements": {"search.fresh": "must"}}),
                "requirements: unknown variant",
            ),
            (json!({"intent": 7}), "intent: must be a string"),
        ];
        for (value, expected) in cases {
            let errors = take_from(&mut arguments(value.clone())).unwrap_err();
            let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
            assert!(
                text.iter().any(|t| t.starts_with(expected)),
                "{value}: want {expected:?}, got {text:?}"
            );
        }
        let too_many: Vec<String> = (0..33).map(|i| format!("t{i}")).collect();
        let errors = take_from(&mut arguments(json!({"route": {"ignore": too_many}}))).unwrap_err();
        assert_eq!(errors[0].path, "route.ignore");
    }

    /// The paths `take_from` refuses for `route`, or none when it takes it.
    fn refused(route: Value) -> Vec<String> {
        match take_from(&mut arguments(json!({ "route": route }))) {
            Ok(_) => Vec::new(),
            Err(errors) => errors.into_iter().map(|e| e.path).collect(),
        }
    }

    /// Every limit docs/routing.md gives, exactly on its boundary: the last value allowed is
    /// taken, the first beyond it refused by its path.
    #[test]
    fn routing_limits_should_hold_exactly_at_their_boundaries() {
        let targets = |n: usize| json!((0..n).map(|i| format!("t{i}")).collect::<Vec<_>>());
        for field in ["only", "ignore", "prefer"] {
            let mut at = Map::new();
            at.insert(field.to_owned(), targets(32));
            assert_eq!(
                refused(Value::Object(at)),
                Vec::<String>::new(),
                "{field}: 32"
            );
            let mut beyond = Map::new();
            beyond.insert(field.to_owned(), targets(33));
            assert_eq!(refused(Value::Object(beyond)), [format!("route.{field}")]);
        }
        assert_eq!(refused(json!({"minQuality": 10_000})), Vec::<String>::new());
        assert_eq!(refused(json!({"minQuality": 10_001})), ["route.minQuality"]);
        assert_eq!(
            refused(json!({"maxCostMicrosUsd": 0})),
            Vec::<String>::new()
        );
        assert_eq!(
            refused(json!({"maxCostMicrosUsd": -1})),
            ["route.maxCostMicrosUsd"]
        );
    }
}
