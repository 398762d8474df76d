//! The fields the approver reads of the apiserver's objects, each kind read into a type of its own
//! that reads nothing else: any object's metadata as [`Meta`] (never `managedFields`, which a
//! requester or a node may fill with times the apiserver serves with a five-digit year), and a
//! CertificateSigningRequest as a [`Csr`], whose conditions keep their times as the text the
//! apiserver served, unread, so the approval write sends them back exactly as they were. The
//! kinds of object read ([`ObjectKind`]), the error of one that cannot be decoded
//! ([`UndecodableError`]), and [`resource_of!`], which makes such a type a [`kube::Resource`].

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Resource;
use serde::{Deserialize, Serialize};

/// A kind of object the approver reads from the apiserver: the `kind` label of
/// `undecodable_objects_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    /// A CertificateSigningRequest.
    Csr,
    /// A Node.
    Node,
    /// A Machine (machine mode).
    Machine,
    /// The leader Lease.
    Lease,
    /// The `default/kubernetes` Service.
    Service,
    /// An EndpointSlice of the `default/kubernetes` Service.
    EndpointSlice,
}

impl ObjectKind {
    /// Every kind, in label order.
    pub const ALL: [ObjectKind; 6] = [
        ObjectKind::Csr,
        ObjectKind::Node,
        ObjectKind::Machine,
        ObjectKind::Lease,
        ObjectKind::Service,
        ObjectKind::EndpointSlice,
    ];

    /// The `kind` label value: the object's Kubernetes kind.
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Csr => "CertificateSigningRequest",
            ObjectKind::Node => "Node",
            ObjectKind::Machine => "Machine",
            ObjectKind::Lease => "Lease",
            ObjectKind::Service => "Service",
            ObjectKind::EndpointSlice => "EndpointSlice",
        }
    }
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An object that could not be decoded, as the error of a read of it by name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {name} could not be decoded: {error}")]
pub struct UndecodableError {
    /// The object's kind.
    pub kind: ObjectKind,
    /// Its name, escaped and quoted.
    pub name: String,
    /// Why it could not be decoded.
    pub error: DecodeError,
}

/// The decoder's error of an object that could not be read into the approver's type, kept whole;
/// two are equal when they read the same.
#[derive(Debug, Clone, thiserror::Error)]
#[error(transparent)]
pub struct DecodeError(Arc<serde_json::Error>);

impl From<serde_json::Error> for DecodeError {
    fn from(error: serde_json::Error) -> DecodeError {
        DecodeError(Arc::new(error))
    }
}

/// A decoder's error saying `text`, for the tests' undecodable objects.
#[cfg(test)]
impl From<&str> for DecodeError {
    fn from(text: &str) -> DecodeError {
        DecodeError::from(<serde_json::Error as serde::de::Error>::custom(text))
    }
}

impl PartialEq for DecodeError {
    fn eq(&self, other: &DecodeError) -> bool {
        self.0.to_string() == other.0.to_string()
    }
}

impl Eq for DecodeError {}

/// The metadata the approver reads of any object: name, namespace, uid, resourceVersion,
/// creationTimestamp, labels and annotations. Every other field (`managedFields` above all) is
/// skipped unread.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(from = "MetaFields")]
pub struct Meta(pub ObjectMeta);

/// The fields [`Meta`] reads, as the apiserver writes them.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetaFields {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    creation_timestamp: Option<Time>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
}

impl From<MetaFields> for Meta {
    fn from(fields: MetaFields) -> Meta {
        let MetaFields { name, namespace, uid, resource_version, creation_timestamp, labels, annotations } = fields;
        Meta(ObjectMeta {
            name,
            namespace,
            uid,
            resource_version,
            creation_timestamp,
            labels,
            annotations,
            ..ObjectMeta::default()
        })
    }
}

/// Implements [`kube::Resource`] for an approver type read from objects of the k8s-openapi type
/// given (its kind, group, version and plural), whose `metadata` field is a [`Meta`].
macro_rules! resource_of {
    ($type:ty, $k8s:ty) => {
        impl kube::Resource for $type {
            type DynamicType = ();
            type Scope = <$k8s as k8s_openapi::Resource>::Scope;

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                <$k8s as k8s_openapi::Resource>::KIND.into()
            }

            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                <$k8s as k8s_openapi::Resource>::GROUP.into()
            }

            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                <$k8s as k8s_openapi::Resource>::VERSION.into()
            }

            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                <$k8s as k8s_openapi::Resource>::URL_PATH_SEGMENT.into()
            }

            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata.0
            }

            fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata.0
            }
        }
    };
}
pub(crate) use resource_of;

/// Only the metadata of objects of `K` ([`Meta`]), read through the apiserver's metadata API
/// (`PartialObjectMetadata`): what a cache that counts or names objects needs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(bound = "")]
pub struct MetadataOnly<K> {
    /// The object's metadata.
    pub metadata: Meta,
    #[serde(skip)]
    kind: PhantomData<fn() -> K>,
}

impl<K: Resource> Resource for MetadataOnly<K> {
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
        true
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata.0
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata.0
    }
}

/// A CSR: the fields the approver reads of `certificates.k8s.io/v1` CertificateSigningRequests.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Csr {
    /// Its metadata ([`Meta`]).
    pub metadata: Meta,
    /// Its spec.
    #[serde(default)]
    pub spec: CsrSpec,
    /// Its status.
    #[serde(default)]
    pub status: CsrStatus,
}

resource_of!(Csr, CertificateSigningRequest);

/// The fields of a CSR's spec the approver reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CsrSpec {
    /// spec.request: the PKCS#10 request's PEM (base64 in JSON).
    #[serde(default)]
    pub request: ByteString,
    /// spec.signerName.
    #[serde(default)]
    pub signer_name: String,
    /// spec.username.
    pub username: Option<String>,
    /// spec.groups.
    pub groups: Option<Vec<String>>,
    /// spec.usages.
    pub usages: Option<Vec<String>>,
    /// spec.expirationSeconds.
    pub expiration_seconds: Option<i32>,
}

/// The fields of a CSR's status the approver reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct CsrStatus {
    /// status.conditions.
    pub conditions: Option<Vec<Condition>>,
    /// status.certificate, of which only whether it holds anything is read.
    #[serde(default, rename = "certificate", deserialize_with = "holds_text")]
    pub certificate_issued: bool,
}

/// A condition of a CSR's status. Its times are the text the apiserver served, never read: the
/// approval write sends the conditions it found back as they were.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// type: Approved, Denied, Failed or another.
    #[serde(rename = "type")]
    pub type_: String,
    /// status: True, False or Unknown.
    #[serde(default)]
    pub status: String,
    /// reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// lastUpdateTime, as served.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<String>,
    /// lastTransitionTime, as served.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// True when the field is a non-empty string (status.certificate is base64 text).
fn holds_text<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    Ok(Option::<String>::deserialize(deserializer)?.is_some_and(|text| !text.is_empty()))
}

/// A time as the apiserver writes it.
fn time_text(time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Option<String> {
    time.and_then(|time| serde_json::to_value(time).ok()?.as_str().map(str::to_owned))
}

impl From<CertificateSigningRequestCondition> for Condition {
    fn from(condition: CertificateSigningRequestCondition) -> Condition {
        let CertificateSigningRequestCondition {
            type_,
            status,
            reason,
            message,
            last_update_time,
            last_transition_time,
        } = condition;
        Condition {
            type_,
            status,
            reason,
            message,
            last_update_time: time_text(last_update_time),
            last_transition_time: time_text(last_transition_time),
        }
    }
}

/// A CSR made as a k8s-openapi object (tests, `check --file`) read as the approver reads one
/// from the apiserver.
impl From<CertificateSigningRequest> for Csr {
    fn from(csr: CertificateSigningRequest) -> Csr {
        let CertificateSigningRequest { metadata, spec, status } = csr;
        let status = status.unwrap_or_default();
        Csr {
            metadata: Meta(k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                managed_fields: None,
                ..metadata
            }),
            spec: CsrSpec {
                request: spec.request,
                signer_name: spec.signer_name,
                username: spec.username,
                groups: spec.groups,
                usages: spec.usages,
                expiration_seconds: spec.expiration_seconds,
            },
            status: CsrStatus {
                conditions: status.conditions.map(|conditions| conditions.into_iter().map(Condition::from).collect()),
                certificate_issued: status.certificate.is_some_and(|certificate| !certificate.0.is_empty()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubernetes::decoded::Decoded;

    /// A CSR as kube-apiserver serves one whose requester wrote a managedFields time it accepted:
    /// `9999-12-31T23:00:00-05:00`, served as `10000-01-01T04:00:00Z`.
    fn served(managed_time: &str, condition_time: &str) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {
                "name": "csr-1", "uid": "u-1", "resourceVersion": "42", "creationTimestamp": "2026-11-29T04:00:00Z",
                "labels": {"a": "b"},
                "managedFields": [{"manager": "kubelet", "operation": "Update", "time": managed_time, "fieldsV1": {"f:spec": {}}}],
            },
            "spec": {
                "request": "LS0tLS1CRUdJTg==", "signerName": "kubernetes.io/kubelet-serving",
                "username": "system:node:a", "groups": ["system:nodes", "system:authenticated"],
                "usages": ["digital signature", "server auth"], "expirationSeconds": 3600, "extra": {"x": ["y"]},
            },
            "status": {
                "conditions": [{"type": "Other", "status": "True", "lastUpdateTime": condition_time, "lastTransitionTime": condition_time}],
                "certificate": "",
            },
        })
    }

    #[test]
    fn a_csr_with_a_five_digit_year_where_the_approver_reads_no_time_is_read_whole() {
        let decoded: Decoded<Csr> =
            serde_json::from_value(served("10000-01-01T04:00:00Z", "10000-01-01T04:00:00Z")).unwrap();
        let Decoded::Object(csr) = decoded else { panic!("not decoded: {decoded:?}") };
        assert_eq!(csr.metadata.0.name.as_deref(), Some("csr-1"));
        assert!(csr.metadata.0.managed_fields.is_none());
        assert_eq!(csr.spec.request.0, b"-----BEGIN");
        assert_eq!(csr.spec.username.as_deref(), Some("system:node:a"));
        assert_eq!(csr.spec.expiration_seconds, Some(3600));
        let conditions = csr.status.conditions.unwrap();
        assert_eq!(conditions[0].last_update_time.as_deref(), Some("10000-01-01T04:00:00Z"), "sent back as served");
        assert!(!csr.status.certificate_issued);
        let k8s = serde_json::from_value::<CertificateSigningRequest>(served(
            "10000-01-01T04:00:00Z",
            "2026-11-29T04:00:00Z",
        ));
        assert!(k8s.is_err(), "k8s-openapi's type fails on it, which is why the approver has its own");
    }

    #[test]
    fn a_condition_is_sent_back_as_it_was_served() {
        let served = served("2026-11-29T04:00:00Z", "2026-11-29T04:00:01Z");
        let csr: Csr = serde_json::from_value(served.clone()).unwrap();
        let written = serde_json::to_value(csr.status.conditions.unwrap()).unwrap();
        assert_eq!(written, served["status"]["conditions"]);
    }

    #[test]
    fn an_issued_certificate_is_one_that_holds_text() {
        for (certificate, issued) in
            [(serde_json::json!("Y2VydA=="), true), (serde_json::json!(""), false), (serde_json::Value::Null, false)]
        {
            let csr: Csr =
                serde_json::from_value(serde_json::json!({"metadata": {}, "status": {"certificate": certificate}}))
                    .unwrap();
            assert_eq!(csr.status.certificate_issued, issued, "{certificate}");
        }
    }

    #[test]
    fn a_node_s_metadata_alone_is_read_past_its_managed_fields_times() {
        // As the metadata API serves a Node (machine mode's Node cache) whose kubelet wrote a
        // managedFields time of a five-digit year.
        let served = serde_json::json!({
            "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"name": "n1", "resourceVersion": "9", "creationTimestamp": "2026-11-29T04:00:00Z",
                "managedFields": [{"manager": "kubelet", "operation": "Update", "time": "10000-01-01T04:00:00Z"}]},
        });
        let node: Decoded<MetadataOnly<k8s_openapi::api::core::v1::Node>> = serde_json::from_value(served).unwrap();
        let Decoded::Object(node) = node else { panic!("not decoded: {node:?}") };
        assert_eq!((node.metadata.0.name.as_deref(), node.meta().resource_version.as_deref()), (Some("n1"), Some("9")));
        assert!(<MetadataOnly<k8s_openapi::api::core::v1::Node> as Resource>::metadata_api());
        assert_eq!(<MetadataOnly<k8s_openapi::api::core::v1::Node> as Resource>::plural(&()), "nodes");
    }

    #[test]
    fn a_k8s_openapi_csr_reads_as_the_same_csr_from_the_apiserver() {
        let served = served("2026-11-29T04:00:00Z", "2026-11-29T04:00:01Z");
        let k8s: CertificateSigningRequest = serde_json::from_value(served.clone()).unwrap();
        let ours: Csr = serde_json::from_value(served).unwrap();
        let mut from_k8s = Csr::from(k8s);
        assert!(from_k8s.metadata.0.labels.is_some());
        assert_eq!(from_k8s.status, ours.status);
        assert_eq!(from_k8s.spec, ours.spec);
        from_k8s.metadata.0.managed_fields = None;
        assert_eq!(from_k8s.metadata, ours.metadata);
    }
}
