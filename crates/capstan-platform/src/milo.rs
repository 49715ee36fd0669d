//! The Milo kinds `locations_list` and `quota_get` read, and how their answers are joined
//! (pure). Field names are those of Milo's published API types (docs/base-tools.md lists
//! them): ServiceAvailability names a Service and a Location; an AllowanceBucket holds a
//! project's limit, allocation and availability of one resource type in its base unit, and
//! the ResourceRegistration of that type publishes the display unit and the conversion.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::manifest::conditions;

/// A kind the Milo tools read: group, version, kind.
pub type MiloKind = (&'static str, &'static str, &'static str);

/// Where a service is offered (cluster-scoped).
pub const SERVICE_AVAILABILITY: MiloKind =
    ("services.miloapis.com", "v1alpha1", "ServiceAvailability");
/// A place services run (cluster-scoped).
pub const LOCATION: MiloKind = ("locations.miloapis.com", "v1alpha1", "Location");
/// A consumer's quota of one resource type (namespaced).
pub const ALLOWANCE_BUCKET: MiloKind = ("quota.miloapis.com", "v1alpha1", "AllowanceBucket");
/// A resource type and its units (cluster-scoped).
pub const RESOURCE_REGISTRATION: MiloKind =
    ("quota.miloapis.com", "v1alpha1", "ResourceRegistration");
/// The namespace holding a project's buckets in the project's own plane.
pub const QUOTA_NAMESPACE: &str = "milo-system";
/// The label selecting buckets whose consumer is the project.
pub const PROJECT_BUCKETS: &str = "quota.miloapis.com/consumer-kind=Project";
/// The label naming the service that owns a resource registration.
pub const OWNER_LABEL: &str = "services.miloapis.com/owner";

fn text<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value.pointer(pointer).and_then(Value::as_str)
}

fn condition(object: &Value, kind: &str) -> Value {
    conditions(object)
        .into_iter()
        .find(|c| c["type"] == kind)
        .unwrap_or(Value::Null)
}

/// Where `service` (a Service's name, as ServiceAvailability's `spec.serviceRef.name` holds it)
/// is offered to the project: each of its ServiceAvailabilities joined to the Location it
/// names, with the location's class, topology, coordinates and readiness, and whether the
/// service is available there. A location named but not found says so.
pub fn join_locations(service: &str, availabilities: &[Value], locations: &[Value]) -> Vec<Value> {
    let by_name: HashMap<&str, &Value> = locations
        .iter()
        .filter_map(|l| Some((text(l, "/metadata/name")?, l)))
        .collect();
    availabilities
        .iter()
        .filter(|a| text(a, "/spec/serviceRef/name") == Some(service))
        .map(|availability| {
            let name = text(availability, "/spec/locationRef/name").unwrap_or_default();
            let mut row = json!({
                "location": name,
                "availability": text(availability, "/metadata/name"),
                "available": condition(availability, "Available"),
            });
            match by_name.get(name) {
                Some(location) => {
                    row["class"] = json!(
                        text(location, "/spec/locationClassRef/name")
                            .or_else(|| text(location, "/spec/locationClassName"))
                    );
                    row["topology"] = location
                        .pointer("/spec/topology")
                        .cloned()
                        .unwrap_or(json!({}));
                    if let Some(coordinates) = location.pointer("/spec/coordinates") {
                        row["coordinates"] = coordinates.clone();
                    }
                    row["ready"] = condition(location, "Ready");
                }
                None => {
                    row["locationFound"] = json!(false);
                    row["note"] = json!(format!(
                        "the availability names Location {name}, which this project does not show"
                    ));
                }
            }
            row
        })
        .collect()
}

/// One number of a bucket, in the registration's display unit.
fn display(base: i64, factor: i64) -> Value {
    if factor <= 1 {
        json!(base)
    } else if base % factor == 0 {
        json!(base / factor)
    } else {
        // Amounts are far below 2^53: the float is exact enough to read.
        #[allow(clippy::cast_precision_loss)]
        let value = base as f64 / factor as f64;
        json!(value)
    }
}

/// The project's quota (limit, used, available per resource type), from its buckets,
/// converted into the unit each ResourceRegistration publishes (display = base / factor).
/// With `service`, only the resource types that service owns (the registration's
/// `services.miloapis.com/owner` label, or a resource type named under the service:
/// `compute.datumapis.com/instances`).
pub fn quota_rows(service: Option<&str>, buckets: &[Value], registrations: &[Value]) -> Vec<Value> {
    let by_type: HashMap<&str, &Value> = registrations
        .iter()
        .filter_map(|r| Some((text(r, "/spec/resourceType")?, r)))
        .collect();
    let mut rows: Vec<Value> = buckets
        .iter()
        .filter_map(|bucket| {
            let resource_type = text(bucket, "/spec/resourceType")?;
            let registration = by_type.get(resource_type).copied();
            if let Some(service) = service
                && !owned_by(service, resource_type, registration)
            {
                return None;
            }
            Some(quota_row(bucket, resource_type, registration))
        })
        .collect();
    rows.sort_by(|a, b| a["resourceType"].as_str().cmp(&b["resourceType"].as_str()));
    rows
}

/// Whether `service` owns `resource_type`: its registration carries the service's owner
/// label, or the type is named under the service (`compute.datumapis.com/instances`).
fn owned_by(service: &str, resource_type: &str, registration: Option<&Value>) -> bool {
    let owner = registration
        .and_then(|r| r.pointer("/metadata/labels"))
        .and_then(|labels| labels.get(OWNER_LABEL))
        .and_then(Value::as_str);
    let named_under = resource_type
        .strip_prefix(service)
        .is_some_and(|rest| rest.starts_with('/'));
    owner == Some(service) || named_under
}

/// One bucket's row: its amounts in the base unit under `base` and, when a registration
/// publishes the type's unit, in the display unit beside them; a note when the amounts cannot
/// be read as they stand (no unit published, or no limit known yet).
fn quota_row(bucket: &Value, resource_type: &str, registration: Option<&Value>) -> Value {
    let number = |field: &str| {
        bucket
            .pointer(&format!("/status/{field}"))
            .and_then(Value::as_i64)
    };
    let (limit, used, available) = (number("limit"), number("allocated"), number("available"));
    let mut row = json!({
        "resourceType": resource_type,
        "base": {"limit": limit, "used": used, "available": available},
    });
    match registration {
        Some(registration) => {
            let factor = registration
                .pointer("/spec/unitConversionFactor")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            row["unit"] = json!(text(registration, "/spec/displayUnit"));
            row["baseUnit"] = json!(text(registration, "/spec/baseUnit"));
            row["unitConversionFactor"] = json!(factor);
            if let Some(description) = text(registration, "/spec/description") {
                row["description"] = json!(description);
            }
            for (name, value) in [("limit", limit), ("used", used), ("available", available)] {
                row[name] = value.map_or(Value::Null, |v| display(v, factor));
            }
        }
        None => {
            row["unit"] = Value::Null;
            row["note"] = json!(
                "no ResourceRegistration publishes this resource type's unit: the amounts are \
                 in its base unit (see base)"
            );
        }
    }
    if limit.is_none() {
        row["note"] = json!(
            "the bucket has not been reconciled yet: its limit is not known, which is not the \
             same as no limit"
        );
    }
    row
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn availabilities_should_join_their_locations() {
        let availabilities = vec![
            json!({"metadata": {"name": "compute--dfw"},
                   "spec": {"serviceRef": {"name": "compute"}, "locationRef": {"name": "dfw"}},
                   "status": {"conditions": [{"type": "Available", "status": "True", "reason": "ServiceOperational"}]}}),
            json!({"metadata": {"name": "compute--gone"},
                   "spec": {"serviceRef": {"name": "compute"}, "locationRef": {"name": "gone"}}}),
            json!({"metadata": {"name": "dns--dfw"},
                   "spec": {"serviceRef": {"name": "dns"}, "locationRef": {"name": "dfw"}}}),
        ];
        let locations = vec![json!({"metadata": {"name": "dfw"},
            "spec": {"locationClassRef": {"name": "shared-edge"},
                     "topology": {"topology.datum.net/city-code": "DFW"},
                     "coordinates": {"latitude": "32.8", "longitude": "-96.8"}},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}]}})];
        let rows = join_locations("compute", &availabilities, &locations);
        assert_eq!(rows.len(), 2, "only the compute service's");
        assert_eq!(rows[0]["location"], "dfw");
        assert_eq!(rows[0]["class"], "shared-edge");
        assert_eq!(rows[0]["topology"]["topology.datum.net/city-code"], "DFW");
        assert_eq!(rows[0]["ready"]["status"], "True");
        assert_eq!(rows[0]["available"]["reason"], "ServiceOperational");
        assert_eq!(rows[1]["locationFound"], false);
        assert!(join_locations("storage", &availabilities, &locations).is_empty());
    }

    fn bucket(resource_type: &str, limit: i64, allocated: i64) -> Value {
        json!({"spec": {"consumerRef": {"kind": "Project", "name": "p"}, "resourceType": resource_type},
               "status": {"limit": limit, "allocated": allocated, "available": limit - allocated}})
    }

    #[test]
    fn quota_should_be_converted_into_the_published_unit() {
        let buckets = vec![
            bucket("compute.datumapis.com/vcpus", 6000, 1500),
            bucket("compute.datumapis.com/instances", 10, 3),
            bucket("core.miloapis.com/secrets", 100, 1),
            bucket("unregistered.example/things", 5, 0),
        ];
        let registrations = vec![
            json!({"spec": {"resourceType": "compute.datumapis.com/vcpus", "baseUnit": "millicore",
                            "displayUnit": "core", "unitConversionFactor": 1000}}),
            json!({"spec": {"resourceType": "compute.datumapis.com/instances", "baseUnit": "instance",
                            "displayUnit": "instance", "unitConversionFactor": 1}}),
            json!({"metadata": {"labels": {OWNER_LABEL: "core.miloapis.com"}},
                   "spec": {"resourceType": "core.miloapis.com/secrets", "baseUnit": "secret",
                            "displayUnit": "secrets", "unitConversionFactor": 1}}),
        ];
        let all = quota_rows(None, &buckets, &registrations);
        assert_eq!(all.len(), 4);
        let vcpus = all
            .iter()
            .find(|r| r["resourceType"] == "compute.datumapis.com/vcpus")
            .unwrap();
        assert_eq!(
            (
                &vcpus["unit"],
                &vcpus["limit"],
                &vcpus["used"],
                &vcpus["available"]
            ),
            (&json!("core"), &json!(6), &json!(1.5), &json!(4.5))
        );
        assert_eq!(
            vcpus["base"],
            json!({"limit": 6000, "used": 1500, "available": 4500})
        );
        let unregistered = all
            .iter()
            .find(|r| r["resourceType"] == "unregistered.example/things")
            .unwrap();
        assert!(unregistered["unit"].is_null() && unregistered["note"].is_string());
        let compute = quota_rows(Some("compute.datumapis.com"), &buckets, &registrations);
        assert_eq!(compute.len(), 2);
        let core = quota_rows(Some("core.miloapis.com"), &buckets, &registrations);
        assert_eq!(core.len(), 1, "by the owner label");
        assert!(quota_rows(Some("compute.datumapis"), &buckets, &registrations).is_empty());
    }
}
