//! A CSR's name as the cache keeps it: whole up to a DNS subdomain's length, else cut to a bounded
//! prefix and the digest of the whole name. The apiserver accepts a CSR name of any length (it
//! only has to be a path segment: no `/`, no `%`), so a node can create names as long as etcd
//! stores (about 1.5 MiB); no request can name such a CSR in full, so it can never be decided,
//! and the cache keeps a fixed-size stand-in for it.

use std::sync::Arc;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::Resource;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// The longest name kept whole, in bytes: a DNS subdomain's maximum, what every other object's
/// name is held to (the kubelet names its CSRs `csr-` and 5 characters).
pub const MAX_KEPT_NAME_BYTES: usize = 253;

/// How much of a longer name is kept, at most, before its digest.
pub const CUT_NAME_PREFIX_BYTES: usize = 64;

/// What separates a cut name's prefix from the SHA-256 of the whole name: the apiserver refuses a
/// `/` in any name, so a cut name is never another CSR's name.
pub const CUT_NAME_MARK: &str = "/sha256:";

/// `name` as it is kept, and whether it was cut: whole when at most [`MAX_KEPT_NAME_BYTES`] long,
/// else at most [`CUT_NAME_PREFIX_BYTES`] of it (cut at a character boundary), [`CUT_NAME_MARK`]
/// and the SHA-256 of the whole name in lower-case hex: 136 bytes at most.
pub fn kept_name(name: String) -> (Arc<str>, bool) {
    if name.len() <= MAX_KEPT_NAME_BYTES {
        return (Arc::from(name), false);
    }
    let end = (0..=CUT_NAME_PREFIX_BYTES).rev().find(|end| name.is_char_boundary(*end)).unwrap_or_default();
    let digest = ring::digest::digest(&ring::digest::SHA256, name.as_bytes());
    let hex: String = digest.as_ref().iter().map(|byte| format!("{byte:02x}")).collect();
    (Arc::from(format!("{}{CUT_NAME_MARK}{hex}", &name[..end])), true)
}

/// What is percent-encoded in a path segment: everything but RFC 3986's unreserved characters,
/// so `?`, `#`, `/`, `%`, spaces and control characters in a name stay inside its segment.
const PATH_SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// The path of the CSR named `name`, its name one percent-encoded path segment.
pub fn csr_path(name: &str) -> String {
    let collection = CertificateSigningRequest::url_path(&(), None);
    format!("{collection}/{}", utf8_percent_encode(name, PATH_SEGMENT))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestSpec,
        CertificateSigningRequestStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::kubernetes::csr_object::CsrObject;
    use crate::policy::{KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER};

    fn kept(name: &str) -> (String, bool) {
        let (kept, cut) = kept_name(name.to_owned());
        (kept.to_string(), cut)
    }

    #[test]
    fn a_name_up_to_a_dns_subdomains_length_is_kept_whole_whatever_it_holds() {
        for name in ["n".repeat(MAX_KEPT_NAME_BYTES), format!("{}?x #\n", "é".repeat(120)), String::new()] {
            assert_eq!(kept(&name), (name.clone(), false));
        }
    }

    #[test]
    fn a_longer_name_keeps_a_prefix_and_the_sha256_of_the_whole() {
        // sha256("a" × 254) and sha256("a" × 1,000,000), from `sha256sum`.
        let cases = [
            (254, "136496c2a16a22b58bbd01529b66d8510cc5a3ec61711cbaa298a52580b000d6"),
            (1_000_000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"),
        ];
        for (len, sha256) in cases {
            let expected = format!("{}{CUT_NAME_MARK}{sha256}", "a".repeat(CUT_NAME_PREFIX_BYTES));
            assert_eq!(kept(&"a".repeat(len)), (expected, true), "{len}");
        }
        // Names that differ only after the prefix stay apart.
        assert_ne!(kept(&"a".repeat(400)).0, kept(&format!("{}b", "a".repeat(399))).0);
        // A character across the prefix's end is left out whole.
        let straddling = format!("{}é{}", "a".repeat(CUT_NAME_PREFIX_BYTES - 1), "x".repeat(300));
        let (cut, _) = kept(&straddling);
        assert!(cut.starts_with(&format!("{}{CUT_NAME_MARK}", "a".repeat(CUT_NAME_PREFIX_BYTES - 1))), "{cut}");
        assert_eq!(cut.len(), CUT_NAME_PREFIX_BYTES - 1 + CUT_NAME_MARK.len() + 64);
    }

    /// A pending CSR named `name` with a request, groups and usages, of `signer` (approved when
    /// `approved`).
    fn csr(name: String, signer: &str, approved: bool) -> CertificateSigningRequest {
        let condition = CertificateSigningRequestCondition {
            type_: if approved { "Approved" } else { "Other" }.into(),
            message: Some("m".into()),
            ..CertificateSigningRequestCondition::default()
        };
        CertificateSigningRequest {
            metadata: ObjectMeta { name: Some(name), ..ObjectMeta::default() },
            spec: CertificateSigningRequestSpec {
                request: ByteString(b"request".to_vec()),
                signer_name: signer.into(),
                username: Some("system:node:n".into()),
                groups: Some(vec!["system:nodes".into()]),
                usages: Some(vec!["server auth".into()]),
                ..CertificateSigningRequestSpec::default()
            },
            status: Some(CertificateSigningRequestStatus { conditions: Some(vec![condition]), certificate: None }),
        }
    }

    #[test]
    fn a_csr_of_a_cut_name_keeps_only_its_signer_and_username_of_its_spec() {
        // An approved client CSR would keep its request, if its name were not cut.
        let cases = [
            (253, KUBELET_SERVING_SIGNER, false),
            (254, KUBELET_CLIENT_SIGNER, true),
            (300_000, KUBELET_SERVING_SIGNER, false),
        ];
        for (len, signer, approved) in cases {
            let (cached, cut) = (CsrObject::from(csr("x".repeat(len), signer, approved)), len > MAX_KEPT_NAME_BYTES);
            assert_eq!((cached.name.clone(), cached.name_cut), (kept_name("x".repeat(len)).0, cut), "{len}");
            assert_eq!((&*cached.signer_name, &*cached.username), (signer, "system:node:n"));
            assert_eq!(cached.request().is_none(), cut, "{len}");
            assert_eq!(cached.groups().is_empty() && cached.usages().is_empty(), cut || approved, "{len}");
            assert_eq!(cached.conditions().iter().all(|c| c.message.is_none()), cut || approved, "{len}");
        }
    }
}
