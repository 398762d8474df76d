//! Reading a CSR whose request the cache left in the apiserver ([`CsrObject::cached`]) before it
//! is decided: one GET by name ([`read_whole`]), and what the answer means for the reconcile
//! ([`Read`]). The CSR is then decided as read, on the request the signer reads.

use std::time::Duration;

use kube::Api;

use crate::kubernetes::csr_object::CsrObject;
use crate::kubernetes::decoded::Decoded;
use crate::kubernetes::object_fields::Csr;
use crate::kubernetes::request::{RequestError, read_csr};

/// The longest one read may take before it counts as failed (and is retried), as long as a write
/// may take (`WRITE_TIMEOUT`): the client sets no read timeout of its own.
pub(super) const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What the apiserver holds under a cached CSR's name.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Read {
    /// The same CSR (its uid), still undecided: as read, its request whole.
    Same(CsrObject),
    /// The same CSR, decided meanwhile: nothing to decide, the watch brings it.
    Decided,
    /// Another CSR under the name (the cached one was deleted and the name used again): nothing
    /// is decided now; the watch brings the new one, and its event triggers it.
    Replaced,
    /// No CSR of the name: gone, nothing to decide.
    Gone,
}

/// Reads the CSR named as `cached` from the apiserver (given up after `timeout`) and tells what
/// it is ([`compare`]); a 404 is [`Read::Gone`].
pub(super) async fn read_whole(
    api: &Api<Decoded<Csr>>,
    cached: &CsrObject,
    timeout: Duration,
) -> Result<Read, RequestError> {
    let read = read_csr(&api.clone().into_client(), &cached.name, timeout).await?;
    Ok(read.map_or(Read::Gone, |read| compare(cached, CsrObject::from(read))))
}

/// What `read` (the apiserver's answer for `cached`'s name, kept whole) is to the reconcile of
/// `cached`: the same CSR only under the same name and uid, and then only while undecided.
pub(super) fn compare(cached: &CsrObject, read: CsrObject) -> Read {
    if read.uid != cached.uid || read.name != cached.name {
        Read::Replaced
    } else if read.is_decided() {
        Read::Decided
    } else {
        Read::Same(read)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
    use testkit::csr::node_serving;

    use super::*;
    use crate::csr::CsrFacts;
    use crate::policy::KUBELET_SERVING_SIGNER;

    /// Node `n1`'s serving CSR `a` of uid `1`, as the watch brings it.
    fn watched() -> CertificateSigningRequest {
        let mut csr = node_serving("a", "n1", 1, None);
        csr.metadata.uid = Some("1".into());
        csr
    }

    #[test]
    fn the_cache_leaves_a_pending_serving_csr_s_request_in_the_apiserver_and_the_read_gives_it_back() {
        let csr = watched();
        let cached = CsrObject::cached(csr.clone().into(), false);
        assert!(cached.request_in_apiserver() && cached.request().is_none());
        assert!(cached.submission().request.is_empty());
        let Read::Same(whole) = compare(&cached, CsrObject::from(csr.clone())) else {
            panic!("the same CSR, undecided, is decided as read");
        };
        assert!(!whole.request_in_apiserver());
        assert_eq!(whole.submission(), CsrObject::from(csr.clone()).submission());
        let (decided_on, held) = (whole.submission().request, &csr.spec.request.0);
        assert!(!decided_on.is_empty(), "the request as the apiserver holds it");
        assert_eq!(CsrFacts::canonical_der(&decided_on), CsrFacts::canonical_der(held));
        assert_eq!(CsrFacts::from_pem(&decided_on), CsrFacts::from_pem(held));
        assert_eq!(&*whole.signer_name, KUBELET_SERVING_SIGNER);
        let kept = CsrObject::cached(csr.clone().into(), true);
        assert!(!kept.request_in_apiserver(), "a cache with room keeps the request");
        assert_eq!(kept, CsrObject::from(csr), "as a CSR read whole");
    }

    #[test]
    fn another_csr_under_the_name_or_a_decided_one_is_not_decided() {
        let cached = CsrObject::cached(watched().into(), false);
        let mut recreated = watched();
        recreated.metadata.uid = Some("2".into());
        assert_eq!(compare(&cached, CsrObject::from(recreated)), Read::Replaced);
        let mut renamed = watched();
        renamed.metadata.name = Some("b".into());
        assert_eq!(compare(&cached, CsrObject::from(renamed)), Read::Replaced);
        for decision in ["Approved", "Denied"] {
            let mut decided = watched();
            let condition = CertificateSigningRequestCondition {
                type_: decision.into(),
                status: "True".into(),
                ..Default::default()
            };
            decided.status.get_or_insert_default().conditions = Some(vec![condition]);
            assert_eq!(compare(&cached, CsrObject::from(decided)), Read::Decided, "{decision}");
        }
    }
}
