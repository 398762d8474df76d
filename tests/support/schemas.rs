//! Strict JSON schemas for kubeconform, made from a kube-apiserver's own OpenAPI v2 document: one
//! file per kind the apiserver serves, at `<group or v1>/<version>/<kind, lowercased>.json`
//! ([`SCHEMA_LOCATION`]), holding the kind's definition and every definition it reaches.
//!
//! Strict as the apiserver's field validation is: an object with listed properties takes no other
//! (unless its schema says it keeps unknown fields), and the two string types that the apiserver
//! also reads from a number (`int-or-string`, `Quantity`) take either.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{Map, Value, json};

/// kubeconform's `-schema-location` template for a directory written by [`write_strict`]: `Group`
/// is the apiVersion's group (`v1` for the core group) and `ResourceAPIVersion` its version.
pub const SCHEMA_LOCATION: &str = "{{ .Group }}/{{ .ResourceAPIVersion }}/{{ .ResourceKind }}.json";

/// The OpenAPI name of `Quantity`, a string the apiserver also reads from a number.
const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";

/// Writes one strict schema per kind of `openapi` (a `/openapi/v2` document) under `dir`; returns
/// the kinds written, as `group/version/kind` (`v1/v1/pod` for the core group).
pub fn write_strict(openapi: &Value, dir: &Path) -> Vec<String> {
    let definitions = openapi["definitions"].as_object().expect("an OpenAPI v2 document has definitions");
    let mut written = Vec::new();
    for (name, definition) in definitions {
        let Some(kinds) = definition["x-kubernetes-group-version-kind"].as_array() else { continue };
        let mut reached = BTreeMap::new();
        collect(name, definitions, &mut reached);
        let mut schema = strict(definition);
        schema["definitions"] = Value::Object(reached.into_iter().map(|(n, d)| (n, strict(d))).collect());
        for gvk in kinds {
            let group = gvk["group"].as_str().unwrap_or_default();
            let version = gvk["version"].as_str().unwrap_or_default();
            let kind = gvk["kind"].as_str().unwrap_or_default().to_lowercase();
            let group_dir = if group.is_empty() { version } else { group };
            let path = dir.join(group_dir).join(version).join(format!("{kind}.json"));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, serde_json::to_vec(&schema).unwrap()).unwrap();
            written.push(format!("{group_dir}/{version}/{kind}"));
        }
    }
    written
}

/// Adds `name` and every definition its schema refers to, directly or not, to `reached`.
fn collect<'a>(name: &str, definitions: &'a Map<String, Value>, reached: &mut BTreeMap<String, &'a Value>) {
    let mut pending = vec![name.to_owned()];
    while let Some(next) = pending.pop() {
        let Some(definition) = definitions.get(&next) else { continue };
        if reached.insert(next, definition).is_none() {
            let mut refs = BTreeSet::new();
            references(definition, &mut refs);
            pending.extend(refs);
        }
    }
}

/// The definitions `value` refers to (`#/definitions/<name>`).
fn references(value: &Value, refs: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(target)) = map.get("$ref")
                && let Some(name) = target.strip_prefix("#/definitions/")
            {
                refs.insert(name.to_owned());
            }
            map.values().for_each(|v| references(v, refs));
        }
        Value::Array(items) => items.iter().for_each(|v| references(v, refs)),
        _ => {}
    }
}

/// `schema` made strict: no property beyond those listed, numbers where the apiserver takes them.
fn strict(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            if map.get("format").and_then(Value::as_str) == Some("int-or-string") {
                return json!({"oneOf": [{"type": "string"}, {"type": "integer"}]});
            }
            if map.get("$ref").and_then(Value::as_str) == Some(&format!("#/definitions/{QUANTITY}")) {
                return json!({"oneOf": [{"type": "string"}, {"type": "number"}]});
            }
            let mut out: Map<String, Value> = map.iter().map(|(k, v)| (k.clone(), strict_child(k, v))).collect();
            let keeps_unknown = map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
            if map.contains_key("properties") && !map.contains_key("additionalProperties") && !keeps_unknown {
                out.insert("additionalProperties".into(), Value::Bool(false));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(strict).collect()),
        other => other.clone(),
    }
}

/// A member of a schema object made strict: a map of properties holds schemas by name, every
/// other member is a schema (or a plain value, left as it is).
fn strict_child(key: &str, value: &Value) -> Value {
    match (key, value) {
        ("properties" | "patternProperties", Value::Object(properties)) => {
            Value::Object(properties.iter().map(|(name, schema)| (name.clone(), strict(schema))).collect())
        }
        ("enum" | "required" | "x-kubernetes-group-version-kind" | "example", _) => value.clone(),
        _ => strict(value),
    }
}
