//! Objects of the apiserver as the approver decodes them. Each kind is read into a type of the
//! approver's own that reads only the fields it uses (never `managedFields`, nor a time it does
//! not need), so what a requester or a node writes elsewhere in an object cannot make it
//! undecodable. Whatever still fails to decode is kept as [`Decoded::Undecodable`] (its name and
//! version, and why) instead of failing the list or the watch event that brought it: the
//! apiserver accepts times it then serves with a five-digit year, and one such object must never
//! fail a list or pause a watch for every other object ([`Skipped`] reports it once).

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

use crate::display::Escaped;
use crate::kubernetes::object_fields::{DecodeError, ObjectKind, UndecodableError};

/// An object of a list or a watch: decoded, or the fact that it could not be.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded<K> {
    /// The object, read into the approver's type.
    Object(K),
    /// An object the approver's type could not read.
    Undecodable(Box<Undecodable>),
}

/// An object that could not be decoded: what identifies it, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Undecodable {
    /// Its name, namespace, uid and resourceVersion, as far as they could be read.
    pub metadata: ObjectMeta,
    /// Why it could not be decoded.
    pub error: DecodeError,
}

impl<K> Decoded<K> {
    /// The object, if it was decoded.
    pub fn object(self) -> Option<K> {
        match self {
            Decoded::Object(object) => Some(object),
            Decoded::Undecodable(_) => None,
        }
    }

    /// The object, if it was decoded, borrowed.
    pub fn as_object(&self) -> Option<&K> {
        match self {
            Decoded::Object(object) => Some(object),
            Decoded::Undecodable(_) => None,
        }
    }
}

impl<'de, K: DeserializeOwned> Deserialize<'de> for Decoded<K> {
    /// Reads the object as JSON first, which no object of the apiserver fails, then as `K`.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        Ok(match K::deserialize(&value) {
            Ok(object) => Decoded::Object(object),
            Err(error) => {
                Decoded::Undecodable(Box::new(Undecodable { metadata: identity(&value), error: error.into() }))
            }
        })
    }
}

/// The name, namespace, uid and resourceVersion of `value`, each where it is text.
fn identity(value: &serde_json::Value) -> ObjectMeta {
    let text = |field: &str| value.pointer(&format!("/metadata/{field}"))?.as_str().map(str::to_owned);
    ObjectMeta {
        name: text("name"),
        namespace: text("namespace"),
        uid: text("uid"),
        resource_version: text("resourceVersion"),
        ..ObjectMeta::default()
    }
}

impl<K: Resource> Resource for Decoded<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }

    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn metadata_api() -> bool {
        K::metadata_api()
    }

    fn meta(&self) -> &ObjectMeta {
        match self {
            Decoded::Object(object) => object.meta(),
            Decoded::Undecodable(undecodable) => &undecodable.metadata,
        }
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Decoded::Object(object) => object.meta_mut(),
            Decoded::Undecodable(undecodable) => &mut undecodable.metadata,
        }
    }
}

/// How many skipped objects are remembered as logged; past that the memory starts afresh (and an
/// object seen again is logged again).
const LOGGED_AT_MOST: usize = 1024;

/// Counts one skipped object of a kind.
type Count = Arc<dyn Fn(ObjectKind) + Send + Sync>;

/// Reports the objects skipped because they could not be decoded: each counted every time it is
/// skipped (in a list, a watch event or a read; the controller counts them in
/// `node_csr_approver_undecodable_objects_total{kind}`), and logged once per object version at
/// warning level (later sightings at debug). Cheap to clone.
#[derive(Clone)]
pub struct Skipped {
    count: Option<Count>,
    logged: Arc<Mutex<HashSet<(ObjectKind, String, String)>>>,
}

impl Skipped {
    /// Counts each skipped object with `count`.
    pub fn counting(count: impl Fn(ObjectKind) + Send + Sync + 'static) -> Skipped {
        Skipped { count: Some(Arc::new(count)), logged: Arc::default() }
    }

    /// Logs only: for the commands that serve no metrics (`check`, `audit`).
    pub fn logged() -> Skipped {
        Skipped { count: None, logged: Arc::default() }
    }

    /// Reports `object` of `kind`, skipped; returns the error that describes it.
    pub fn report(&self, kind: ObjectKind, object: &Undecodable) -> UndecodableError {
        if let Some(count) = &self.count {
            count(kind);
        }
        let metadata = &object.metadata;
        let name = match &metadata.namespace {
            Some(namespace) => format!("{namespace}/{}", metadata.name.as_deref().unwrap_or_default()),
            None => metadata.name.clone().unwrap_or_default(),
        };
        let version = metadata.resource_version.clone().unwrap_or_default();
        let first = {
            let mut logged = self.logged.lock().unwrap_or_else(PoisonError::into_inner);
            if logged.len() >= LOGGED_AT_MOST {
                logged.clear();
            }
            logged.insert((kind, name.clone(), version.clone()))
        };
        let error = UndecodableError { kind, name: format!("\"{}\"", Escaped(&name)), error: object.error.clone() };
        if first {
            tracing::warn!(kind = %kind, name = %Escaped(&name), resource_version = %Escaped(&version), error = %Escaped(&object.error.to_string()), "skipped an object that could not be decoded");
        } else {
            tracing::debug!(kind = %kind, name = %Escaped(&name), resource_version = %Escaped(&version), "skipped an object that could not be decoded, again");
        }
        error
    }

    /// `decoded`'s object; reported and `None` when it could not be decoded.
    pub fn keep<K>(&self, kind: ObjectKind, decoded: Decoded<K>) -> Option<K> {
        match decoded {
            Decoded::Object(object) => Some(object),
            Decoded::Undecodable(undecodable) => {
                self.report(kind, &undecodable);
                None
            }
        }
    }
}

impl fmt::Debug for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Skipped").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubernetes::object_fields::Meta;
    use crate::metrics::Metrics;

    #[derive(Debug, Clone, PartialEq, Deserialize)]
    struct Thing {
        metadata: Meta,
        count: u8,
    }

    /// A time kube-apiserver accepts and serves back with a five-digit year.
    const FIVE_DIGIT_YEAR: &str = "10000-01-01T04:00:00Z";

    fn thing(extra_metadata: serde_json::Value, count: serde_json::Value) -> serde_json::Value {
        let mut metadata = serde_json::json!({"name": "a", "namespace": "ns", "uid": "u", "resourceVersion": "7"});
        if let (Some(metadata), Some(extra)) = (metadata.as_object_mut(), extra_metadata.as_object()) {
            metadata.extend(extra.clone());
        }
        serde_json::json!({"metadata": metadata, "count": count})
    }

    #[test]
    fn metadata_is_read_without_its_managed_fields_so_their_times_cannot_fail_it() {
        let managed = serde_json::json!({"managedFields": [{"manager": "m", "time": FIVE_DIGIT_YEAR, "fieldsV1": {}}]});
        let decoded: Decoded<Thing> = serde_json::from_value(thing(managed, 3.into())).unwrap();
        let Decoded::Object(object) = decoded else { panic!("not decoded: {decoded:?}") };
        assert_eq!(object.count, 3);
        assert_eq!(object.metadata.0.name.as_deref(), Some("a"));
        assert_eq!(object.metadata.0.resource_version.as_deref(), Some("7"));
    }

    #[test]
    fn an_object_that_fails_to_decode_is_kept_as_its_identity_and_the_error() {
        let created = serde_json::json!({"creationTimestamp": FIVE_DIGIT_YEAR});
        let decoded: Decoded<Thing> = serde_json::from_value(thing(created, 3.into())).unwrap();
        let Decoded::Undecodable(undecodable) = &decoded else { panic!("decoded: {decoded:?}") };
        assert_eq!(undecodable.metadata.name.as_deref(), Some("a"));
        assert_eq!(undecodable.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(undecodable.metadata.uid.as_deref(), Some("u"));
        assert_eq!(undecodable.metadata.resource_version.as_deref(), Some("7"));
        let wrong_type: Decoded<Thing> = serde_json::from_value(thing(serde_json::json!({}), 300.into())).unwrap();
        assert!(matches!(wrong_type, Decoded::Undecodable(_)), "{wrong_type:?}");
        assert_eq!(wrong_type.object(), None);
    }

    #[test]
    fn a_list_with_an_undecodable_item_keeps_every_other_item() {
        let items = serde_json::json!({
            "apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "9"},
            "items": [thing(serde_json::json!({}), 1.into()), thing(serde_json::json!({"creationTimestamp": FIVE_DIGIT_YEAR}), 2.into()), thing(serde_json::json!({}), 3.into())],
        });
        let text = items.to_string();
        let list: kube::core::ObjectList<Decoded<Thing>> = serde_json::from_str(&text).unwrap();
        let counts: Vec<Option<u8>> = list.items.iter().map(|item| item.as_object().map(|thing| thing.count)).collect();
        assert_eq!(counts, [Some(1), None, Some(3)]);
        let event = format!(
            r#"{{"type":"ADDED","object":{}}}"#,
            thing(serde_json::json!({"creationTimestamp": FIVE_DIGIT_YEAR}), 1.into())
        );
        let event: kube::core::WatchEvent<Decoded<Thing>> = serde_json::from_str(&event).unwrap();
        assert!(matches!(event, kube::core::WatchEvent::Added(Decoded::Undecodable(_))));
    }

    fn counting(metrics: &Metrics) -> Skipped {
        let metrics = metrics.clone();
        Skipped::counting(move |kind| metrics.record_undecodable(kind))
    }

    #[test]
    fn a_skipped_object_is_counted_every_time_and_logged_once_per_version() {
        let metrics = Metrics::new();
        let skipped = counting(&metrics);
        let object = |version: &str| Undecodable {
            metadata: ObjectMeta {
                name: Some("n\u{202e}".into()),
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            },
            error: "bad time".into(),
        };
        let error = skipped.report(ObjectKind::Node, &object("1"));
        assert_eq!(error.to_string(), r#"Node "n\u{202e}" could not be decoded: bad time"#);
        skipped.report(ObjectKind::Node, &object("1"));
        skipped.report(ObjectKind::Node, &object("2"));
        assert_eq!(skipped.logged.lock().unwrap().len(), 2, "two versions logged");
        let text = metrics.encode().unwrap();
        assert!(text.contains("node_csr_approver_undecodable_objects_total{kind=\"Node\"} 3"), "{text}");
        assert!(
            text.contains("node_csr_approver_undecodable_objects_total{kind=\"CertificateSigningRequest\"} 0"),
            "{text}"
        );
    }

    #[test]
    fn the_memory_of_what_was_logged_is_bounded() {
        let skipped = Skipped::logged();
        for version in 0..LOGGED_AT_MOST + 10 {
            let metadata = ObjectMeta { resource_version: Some(version.to_string()), ..ObjectMeta::default() };
            skipped.report(ObjectKind::Lease, &Undecodable { metadata, error: "".into() });
        }
        assert!(skipped.logged.lock().unwrap().len() <= LOGGED_AT_MOST);
    }
}
