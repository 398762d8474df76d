//! The values the rules see: JSON turned into CEL values, every whole number an `int`, and the
//! Node cut to a fixed projection of bounded size.

use std::collections::HashMap;
use std::sync::Arc;

use cel::Value;
use cel::objects::{Key, Map};
use serde_json::{Map as JsonMap, Value as Json};

/// The most bytes of a Node's projection: the bytes of every key and string, and 8 for every
/// value. A real Node's projection takes a few KiB.
pub(crate) const MAX_NODE_BYTES: usize = 64 * 1024;

/// The fields of a Node the rules see, by object: anything else is left out.
const NODE_FIELDS: [(&str, &[&str]); 3] = [
    ("metadata", &["name", "uid", "creationTimestamp", "labels", "annotations"]),
    ("spec", &["providerID", "podCIDR", "podCIDRs", "taints", "unschedulable"]),
    ("status", &["addresses"]),
];

/// The Node as the rules see it ([`NODE_FIELDS`]; `metadata.labels` and `metadata.annotations`
/// an empty map when the Node has none), or `None` when that projection is over
/// [`MAX_NODE_BYTES`]. Only what is projected is read, and it is counted before it is copied: a
/// Node that inflates the rest of its object costs nothing, and one that inflates its labels or
/// annotations is refused after one pass over at most the bound. A projection projects to
/// itself, so a Node may be kept projected and projected again when evaluated.
pub fn node_projection(node: &Json) -> Option<Json> {
    let kept = NODE_FIELDS.map(|(object, fields)| {
        let source = node.get(object);
        (object, fields.iter().filter_map(move |field| Some((*field, source?.get(field).filter(|v| !v.is_null())?))))
    });
    let mut bytes = 0;
    for (object, fields) in kept.clone() {
        bytes += 8 + object.len();
        for (field, value) in fields {
            bytes = size(value, bytes + 8 + field.len())?;
        }
    }
    let mut projection = JsonMap::new();
    for (object, fields) in kept {
        let mut copied: JsonMap<String, Json> =
            fields.map(|(field, value)| (field.to_owned(), value.clone())).collect();
        if object == "metadata" {
            for map in ["labels", "annotations"] {
                copied.entry(map).or_insert_with(|| Json::Object(JsonMap::new()));
            }
        }
        projection.insert(object.to_owned(), Json::Object(copied));
    }
    Some(Json::Object(projection))
}

/// The size of `value` as [`MAX_NODE_BYTES`] counts it, added to `so_far`; `None` once over the
/// bound (counting stops there).
fn size(value: &Json, so_far: usize) -> Option<usize> {
    let total = match value {
        Json::String(text) => so_far + 8 + text.len(),
        Json::Array(items) => items.iter().try_fold(so_far + 8, |total, item| size(item, total))?,
        Json::Object(entries) => {
            entries.iter().try_fold(so_far + 8, |total, (key, item)| size(item, total + key.len()))?
        }
        Json::Null | Json::Bool(_) | Json::Number(_) => so_far + 8,
    };
    (total <= MAX_NODE_BYTES).then_some(total)
}

/// `value` as a CEL value: a whole number that fits is an `int` (as in Kubernetes' CEL, where
/// every integer of an object is an `int`), a larger one a `uint`, any other a `double`.
pub(crate) fn to_cel(value: &Json) -> Value {
    match value {
        Json::Null => Value::Null,
        Json::Bool(flag) => Value::Bool(*flag),
        Json::Number(number) => match (number.as_i64(), number.as_u64()) {
            (Some(int), _) => Value::Int(int),
            (None, Some(uint)) => Value::UInt(uint),
            (None, None) => Value::Float(number.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(text) => Value::String(Arc::new(text.clone())),
        Json::Array(items) => Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Json::Object(entries) => {
            let map: HashMap<Key, Value> =
                entries.iter().map(|(key, item)| (Key::String(Arc::new(key.clone())), to_cel(item))).collect();
            Value::Map(Map { map: Arc::new(map) })
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    #[test]
    fn the_projection_keeps_the_listed_fields_and_nothing_else() {
        let node = json!({
            "metadata": {"name": "n1", "labels": {"a": "b"}, "managedFields": [{}], "resourceVersion": "7"},
            "spec": {"providerID": "aws:///i-1", "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}], "images": [{}],
                       "capacity": {"cpu": "4"}},
        });
        let expected = json!({
            "metadata": {"name": "n1", "labels": {"a": "b"}, "annotations": {}},
            "spec": {"providerID": "aws:///i-1", "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]},
        });
        assert_eq!(node_projection(&node), Some(expected.clone()));
        assert_eq!(node_projection(&expected), Some(expected), "a projection projects to itself");
        assert_eq!(
            node_projection(&json!({})),
            Some(json!({"metadata": {"labels": {}, "annotations": {}}, "spec": {}, "status": {}}))
        );
    }

    #[test]
    fn a_projection_over_the_bound_is_refused_whatever_field_grows() {
        let with = |field: &str, bytes: usize| {
            let big = "x".repeat(bytes);
            let node = match field {
                "labels" => json!({"metadata": {"labels": {"k": big}}}),
                "annotations" => json!({"metadata": {"annotations": {big.clone(): ""}}}),
                _ => json!({"status": {"addresses": [{"type": "Hostname", "address": big}]}}),
            };
            node_projection(&node)
        };
        for field in ["labels", "annotations", "addresses"] {
            assert!(with(field, 60_000).is_some(), "{field}");
            assert_eq!(with(field, MAX_NODE_BYTES), None, "{field}");
        }
        let many: JsonMap<String, Json> = (0..10_000).map(|i| (format!("{i}"), json!(""))).collect();
        assert!(node_projection(&json!({"metadata": {"labels": many}})).is_none());
        let huge_status = json!({"status": {"images": vec![json!({"names": ["x".repeat(1000)]}); 1000]}});
        assert!(node_projection(&huge_status).is_some(), "what is not projected is not counted");
    }

    #[test]
    fn the_bound_counts_every_key_and_string_and_8_bytes_for_every_value() {
        let node = |n: usize| {
            json!({
                "metadata": {"labels": {"k": "x".repeat(n)}},
                "spec": {"unschedulable": true},
                "status": {"addresses": [{"t": "v"}]},
            })
        };
        // "metadata", "spec", "status": 8 each and their names (42); "labels": 8, its name, the
        // map's 8, the key and the string's 8 (31 + n); "unschedulable": 8, its name and the
        // bool's 8 (29); "addresses": 8, its name, the list's 8, the item's 8, its key, the
        // string's 8 and its byte (43).
        assert!(node_projection(&node(MAX_NODE_BYTES - 145)).is_some());
        assert_eq!(node_projection(&node(MAX_NODE_BYTES - 144)), None);
    }

    #[test]
    fn whole_numbers_are_ints() {
        assert_eq!(to_cel(&json!(3600)), Value::Int(3600));
        assert_eq!(to_cel(&json!(-1)), Value::Int(-1));
        assert_eq!(to_cel(&json!(u64::MAX)), Value::UInt(u64::MAX));
        assert_eq!(to_cel(&json!(1.5)), Value::Float(1.5));
        assert_eq!(to_cel(&json!({"a": [null, true, "s"]})), to_cel(&json!({"a": [null, true, "s"]})));
    }
}
