//! The CertificateSigningRequest object a node submits.

#[cfg(feature = "cluster")]
use k8s_openapi::ByteString;
#[cfg(feature = "cluster")]
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestSpec,
    CertificateSigningRequestStatus,
};
#[cfg(feature = "cluster")]
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

/// The signer of kubelet serving certificates.
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

/// The usages of a kubelet serving CSR, `key encipherment` included (a kubelet with an RSA key asks
/// for it).
pub const SERVING_USAGES: [&str; 3] = ["digital signature", "key encipherment", "server auth"];

/// The usages of the serving CSR of a kubelet with an ECDSA key.
pub const ECDSA_SERVING_USAGES: [&str; 2] = ["digital signature", "server auth"];

/// A CSR object named `name` carrying the PEM request `pem` for `signer` with `usages`; the
/// apiserver fills in the username and groups of whoever creates it.
#[cfg(feature = "cluster")]
pub fn object(name: &str, signer: &str, usages: &[&str], pem: &str) -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: ObjectMeta { name: Some(name.to_owned()), ..ObjectMeta::default() },
        spec: CertificateSigningRequestSpec {
            request: ByteString(pem.as_bytes().to_vec()),
            signer_name: signer.to_owned(),
            usages: Some(usages.iter().map(|u| (*u).to_owned()).collect()),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    }
}

/// The kubelet-serving CSR `name` of node `node` (requested by `system:node:<node>`, uid
/// `uid-<name>`) as the apiserver holds it, created `second` seconds into the epoch, with a
/// condition of type `decided` when given.
#[cfg(feature = "cluster")]
pub fn node_serving(name: &str, node: &str, second: i64, decided: Option<&str>) -> CertificateSigningRequest {
    let pem = crate::request::Request::node(node).pem();
    let mut csr = object(name, SERVING_SIGNER, &ECDSA_SERVING_USAGES, &pem);
    csr.metadata.uid = Some(format!("uid-{name}"));
    csr.metadata.creation_timestamp = Some(Time(jiff::Timestamp::from_second(second).unwrap_or_default()));
    csr.spec.username = Some(format!("system:node:{node}"));
    let condition = |type_: &str| CertificateSigningRequestCondition {
        type_: type_.into(),
        status: "True".into(),
        ..Default::default()
    };
    csr.status = decided.map(|type_| CertificateSigningRequestStatus {
        conditions: Some(vec![condition(type_)]),
        ..Default::default()
    });
    csr
}
