//! Manifests as the base tools show and change them (pure): the editable form of an object,
//! its conditions, the differences between two forms, and the order a batch is applied in.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value};

/// Metadata the platform keeps for itself: never part of an editable manifest.
const BOOKKEEPING: &[&str] = &[
    "managedFields",
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "selfLink",
];

/// The annotation kubectl's client-side apply keeps (a copy of the last manifest).
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Most differences reported for one object; the rest are counted.
pub const MAX_CHANGES: usize = 100;

/// `object` as a person would edit it: the platform's bookkeeping (managed fields, resource
/// version, uid, creation time, generation, self link, the last-applied annotation) and the
/// status removed.
pub fn editable(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
        if let Some(metadata) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            for field in BOOKKEEPING {
                metadata.remove(*field);
            }
            let empty = metadata
                .get_mut("annotations")
                .and_then(Value::as_object_mut)
                .is_some_and(|annotations| {
                    annotations.remove(LAST_APPLIED);
                    annotations.is_empty()
                });
            if empty {
                metadata.remove("annotations");
            }
        }
    }
    object
}

/// What the platform reports about an object: its `status.conditions` (type, status, reason,
/// message, last transition), in the order the object lists them.
pub fn conditions(object: &Value) -> Vec<Value> {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|conditions| {
            conditions
                .iter()
                .map(|c| {
                    let mut condition = Map::new();
                    for field in ["type", "status", "reason", "message", "lastTransitionTime"] {
                        if let Some(value) = c.get(field).filter(|v| !v.is_null()) {
                            condition.insert(field.to_owned(), value.clone());
                        }
                    }
                    Value::Object(condition)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// One difference between two forms of an object.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Change {
    /// Where, as a dotted path with `[i]` for list entries (`spec.ports[0].port`).
    pub path: String,
    /// `add`, `remove` or `replace`.
    pub op: &'static str,
    /// The value before (for `remove` and `replace`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<Value>,
    /// The value after (for `add` and `replace`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Value>,
}

/// The differences from `before` (absent: a create) to `after`, leaf by leaf, at most
/// [`MAX_CHANGES`]; the second value counts the ones left out. Lists are compared entry by
/// entry; a list that changes length is one `replace` of the list.
pub fn diff(before: Option<&Value>, after: &Value) -> (Vec<Change>, usize) {
    let mut changes = Vec::new();
    let mut omitted = 0;
    let empty = Value::Object(Map::new());
    walk(
        "",
        before.unwrap_or(&empty),
        after,
        &mut changes,
        &mut omitted,
    );
    (changes, omitted)
}

fn push(changes: &mut Vec<Change>, omitted: &mut usize, change: Change) {
    if changes.len() < MAX_CHANGES {
        changes.push(change);
    } else {
        *omitted += 1;
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn walk(path: &str, before: &Value, after: &Value, changes: &mut Vec<Change>, omitted: &mut usize) {
    match (before, after) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, old) in a {
                let here = join(path, key);
                match b.get(key) {
                    Some(new) => walk(&here, old, new, changes, omitted),
                    None => push(
                        changes,
                        omitted,
                        Change {
                            path: here,
                            op: "remove",
                            before: Some(old.clone()),
                            after: None,
                        },
                    ),
                }
            }
            for (key, new) in b {
                if !a.contains_key(key) {
                    push(
                        changes,
                        omitted,
                        Change {
                            path: join(path, key),
                            op: "add",
                            before: None,
                            after: Some(new.clone()),
                        },
                    );
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (old, new)) in a.iter().zip(b).enumerate() {
                walk(&format!("{path}[{i}]"), old, new, changes, omitted);
            }
        }
        _ if before == after => {}
        _ => push(
            changes,
            omitted,
            Change {
                path: path.to_owned(),
                op: "replace",
                before: Some(before.clone()),
                after: Some(after.clone()),
            },
        ),
    }
}

/// What one manifest is, for ordering: its API group, kind, name and namespace — one object
/// whatever the version it is written in; one kind's name in two groups is two kinds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The API group (empty for the core group), without the version.
    pub group: String,
    /// The kind.
    pub kind: String,
    /// The name.
    pub name: String,
    /// The namespace, for a namespaced kind.
    pub namespace: Option<String>,
}

/// The group and version an `apiVersion` names: `apps/v1` is (`apps`, `v1`), the core
/// group's `v1` is (``, `v1`).
pub fn group_version(api_version: &str) -> (&str, &str) {
    api_version.rsplit_once('/').unwrap_or(("", api_version))
}

impl Identity {
    /// The identity of a manifest (missing fields read as empty).
    pub fn of(manifest: &Value) -> Self {
        let text = |pointer: &str| {
            manifest
                .pointer(pointer)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let api_version = text("/apiVersion").unwrap_or_default();
        let (group, _version) = group_version(&api_version);
        Self {
            group: group.to_owned(),
            kind: text("/kind").unwrap_or_default(),
            name: text("/metadata/name").unwrap_or_default(),
            namespace: text("/metadata/namespace"),
        }
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(namespace) => write!(f, "{} {namespace}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// A reference found in a manifest's spec: a `*Ref` object or a `*Refs` entry with a name.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Reference {
    name: String,
    kind: Option<String>,
    namespace: Option<String>,
}

fn reference(value: &Value) -> Option<Reference> {
    let name = value.get("name")?.as_str()?.to_owned();
    let text = |field: &str| value.get(field).and_then(Value::as_str).map(str::to_owned);
    Some(Reference {
        name,
        kind: text("kind"),
        namespace: text("namespace"),
    })
}

/// Every `*Ref` / `*Refs` under `spec`, at any depth.
fn references(manifest: &Value) -> Vec<Reference> {
    fn collect(value: &Value, found: &mut Vec<Reference>) {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    if key.len() > 3 && key.ends_with("Ref") {
                        found.extend(reference(child));
                    } else if key.len() > 4
                        && key.ends_with("Refs")
                        && let Some(entries) = child.as_array()
                    {
                        found.extend(entries.iter().filter_map(reference));
                    }
                    collect(child, found);
                }
            }
            Value::Array(items) => {
                for item in items {
                    collect(item, found);
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    if let Some(spec) = manifest.get("spec") {
        collect(spec, &mut found);
    }
    found
}

fn names(reference: &Reference, referrer: &Identity, target: &Identity) -> bool {
    reference.name == target.name
        && reference
            .kind
            .as_ref()
            .is_none_or(|kind| *kind == target.kind)
        && match (&reference.namespace, &target.namespace) {
            (Some(wanted), Some(actual)) => wanted == actual,
            (Some(_), None) => false,
            // A reference without a namespace means the referrer's own (or a cluster-scoped
            // target).
            (None, actual) => actual.is_none() || *actual == referrer.namespace,
        }
}

/// The order a batch is applied in: a manifest whose spec refers (`*Ref`, `*Refs`; the
/// reference's kind and namespace honoured when present) to another manifest of the batch
/// comes after it; otherwise the given order is kept. A cycle is refused, named.
pub fn plan_order(manifests: &[Value]) -> Result<Vec<usize>, Cycle> {
    let identities: Vec<Identity> = manifests.iter().map(Identity::of).collect();
    // depends[i]: the manifests i must come after.
    let depends: Vec<Vec<usize>> = manifests
        .iter()
        .enumerate()
        .map(|(i, manifest)| {
            let refs = references(manifest);
            let mut after: Vec<usize> = identities
                .iter()
                .enumerate()
                .filter(|(j, target)| {
                    *j != i && refs.iter().any(|r| names(r, &identities[i], target))
                })
                .map(|(j, _)| j)
                .collect();
            after.dedup();
            after
        })
        .collect();
    let mut placed = vec![false; manifests.len()];
    let mut order = Vec::with_capacity(manifests.len());
    while order.len() < manifests.len() {
        // The first manifest, in the given order, whose dependencies are all placed.
        let next =
            (0..manifests.len()).find(|&i| !placed[i] && depends[i].iter().all(|&j| placed[j]));
        match next {
            Some(i) => {
                placed[i] = true;
                order.push(i);
            }
            None => return Err(describe_cycle(&identities, &depends, &placed)),
        }
    }
    Ok(order)
}

/// Manifests of a batch that refer to each other in a cycle: no order can apply them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the manifests refer to each other in a cycle, so no order can apply them: {}",
    .members.join(" refers to ")
)]
pub struct Cycle {
    /// The cycle's manifests, each as `manifests[i] (kind namespace/name)`, the first again
    /// at the end.
    pub members: Vec<String>,
}

fn describe_cycle(identities: &[Identity], depends: &[Vec<usize>], placed: &[bool]) -> Cycle {
    // Walk from any unplaced manifest along unplaced dependencies until one repeats.
    let mut seen: BTreeMap<usize, usize> = BTreeMap::new();
    let mut path = Vec::new();
    let mut at = placed.iter().position(|p| !p).unwrap_or(0);
    while let std::collections::btree_map::Entry::Vacant(entry) = seen.entry(at) {
        entry.insert(path.len());
        path.push(at);
        match depends[at].iter().find(|&&j| !placed[j]) {
            Some(&next) => at = next,
            None => break,
        }
    }
    let start = seen.get(&at).copied().unwrap_or(0);
    let mut cycle: Vec<String> = path[start..]
        .iter()
        .map(|&i| format!("manifests[{i}] ({})", identities[i]))
        .collect();
    cycle.push(cycle[0].clone());
    Cycle { members: cycle }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_editable_form_should_drop_bookkeeping_and_status_only() {
        let object = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "team", "uid": "u", "resourceVersion": "7",
                         "generation": 2, "creationTimestamp": "t", "selfLink": "/x",
                         "managedFields": [{}], "labels": {"app": "x"},
                         "annotations": {LAST_APPLIED: "{}"}},
            "data": {"k": "v"},
            "status": {"conditions": []}
        });
        assert_eq!(
            editable(&object),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "a", "namespace": "team", "labels": {"app": "x"}},
                   "data": {"k": "v"}})
        );
    }

    #[test]
    fn conditions_should_keep_what_a_person_reads() {
        let object = json!({"status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "Pending", "message": "waiting",
             "observedGeneration": 3, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        assert_eq!(
            conditions(&object),
            vec![
                json!({"type": "Ready", "status": "False", "reason": "Pending",
                        "message": "waiting", "lastTransitionTime": "2026-01-01T00:00:00Z"})
            ]
        );
        assert!(conditions(&json!({"spec": {}})).is_empty());
    }

    #[test]
    fn a_diff_should_name_each_changed_leaf() {
        let before = json!({"data": {"a": "1", "b": "2"}, "list": [1, 2], "gone": true});
        let after = json!({"data": {"a": "1", "b": "3", "c": "4"}, "list": [1, 5]});
        let (changes, omitted) = diff(Some(&before), &after);
        let summary: Vec<(String, &str)> = changes.iter().map(|c| (c.path.clone(), c.op)).collect();
        assert_eq!(
            summary,
            vec![
                ("data.b".to_owned(), "replace"),
                ("data.c".to_owned(), "add"),
                ("gone".to_owned(), "remove"),
                ("list[1]".to_owned(), "replace"),
            ]
        );
        assert_eq!(omitted, 0);
        let (create, _) = diff(None, &json!({"kind": "ConfigMap", "data": {"a": "1"}}));
        assert_eq!(create.len(), 2);
        assert!(create.iter().all(|c| c.op == "add"));
        let big =
            json!({"data": (0..150).map(|i| (format!("k{i}"), json!(i))).collect::<Map<_, _>>()});
        let (changes, omitted) = diff(None, &big);
        assert_eq!((changes.len(), omitted), (1, 0), "one new map is one add");
        let (changes, omitted) = diff(Some(&json!({"data": {}})), &big);
        assert_eq!((changes.len(), omitted), (MAX_CHANGES, 50));
    }

    fn manifest(kind: &str, name: &str, spec: Value) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": kind,
               "metadata": {"name": name, "namespace": "team"}, "spec": spec})
    }

    #[test]
    fn a_referring_manifest_should_come_after_what_it_names() {
        let batch = vec![
            manifest(
                "Route",
                "r",
                json!({"backendRef": {"name": "svc", "kind": "Backend"}}),
            ),
            manifest(
                "Gateway",
                "g",
                json!({"listeners": [{"routeRefs": [{"name": "r"}]}]}),
            ),
            manifest("Backend", "svc", json!({"port": 80})),
            manifest("Unrelated", "u", json!({})),
        ];
        // Route after Backend; Gateway after Route; Unrelated keeps its place among the rest.
        assert_eq!(plan_order(&batch).unwrap(), vec![2, 0, 1, 3]);
        // Without references, the given order stands.
        let plain = vec![manifest("A", "a", json!({})), manifest("B", "b", json!({}))];
        assert_eq!(plan_order(&plain).unwrap(), vec![0, 1]);
    }

    #[test]
    fn a_reference_of_another_kind_or_namespace_should_not_order() {
        let batch = vec![
            manifest(
                "Route",
                "r",
                json!({"backendRef": {"name": "svc", "kind": "Service"}}),
            ),
            manifest("Backend", "svc", json!({})),
            manifest(
                "Other",
                "o",
                json!({"targetRef": {"name": "svc", "namespace": "elsewhere"}}),
            ),
        ];
        assert_eq!(plan_order(&batch).unwrap(), vec![0, 1, 2]);
    }

    #[test]
    fn a_cycle_should_be_refused_naming_it() {
        let batch = vec![
            manifest("A", "a", json!({"bRef": {"name": "b"}})),
            manifest("B", "b", json!({"aRef": {"name": "a"}})),
        ];
        let error = plan_order(&batch).unwrap_err().to_string();
        assert!(error.contains("cycle"), "{error}");
        assert!(
            error.contains("manifests[0] (A team/a)") && error.contains("manifests[1] (B team/b)"),
            "{error}"
        );
        let own = vec![manifest("A", "a", json!({"selfRef": {"name": "a"}}))];
        assert_eq!(
            plan_order(&own).unwrap(),
            vec![0],
            "a self-reference is no dependency"
        );
    }
}
