//! The guarantee made observable: the age of the oldest CSR this replica must decide and has not.
//! A CSR counts while it is pending, of a signer the approver handles, and not excused (held for a
//! human, or found not to be the approver's). Only a replica that writes reports it: a standby
//! evaluates nothing, so it cannot tell a held CSR from a lost one.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;

use super::Context;
use crate::kubernetes::csr_cache::Cache;
use crate::kubernetes::csr_object::CsrObject;
use crate::policy::{KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER};

/// How often the age is computed (a scan of the cache).
const REPORT_PERIOD: Duration = Duration::from_secs(5);

/// The age at `now` of the oldest CSR of `csrs` that is undecided, of a signer in `signers`,
/// and not `excused`; zero when there is none.
pub(super) fn oldest_undecided_age<'a>(
    csrs: impl IntoIterator<Item = &'a CsrObject>,
    signers: &[&str],
    excused: impl Fn(&CsrObject) -> bool,
    now: Timestamp,
) -> Duration {
    csrs.into_iter()
        .filter(|csr| signers.contains(&&*csr.signer_name) && !csr.is_decided() && !excused(csr))
        .filter_map(|csr| csr.created)
        .filter_map(|created| Duration::try_from(now.duration_since(created)).ok())
        .max()
        .unwrap_or_default()
}

/// The signers whose CSRs this approver decides.
pub(super) fn handled_signers(client_csrs: bool) -> &'static [&'static str] {
    if client_csrs { &[KUBELET_SERVING_SIGNER, KUBELET_CLIENT_SIGNER] } else { &[KUBELET_SERVING_SIGNER] }
}

/// Every [`REPORT_PERIOD`]: sets the gauge from `store`, leaving out the CSRs `excused` names
/// (zero unless this replica writes).
pub(super) async fn report<R, C>(
    ctx: Arc<Context<R, C>>,
    store: Cache<CsrObject>,
    client_csrs: bool,
    excused: impl Fn(&CsrObject) -> bool,
) {
    let signers = handled_signers(client_csrs);
    loop {
        tokio::time::sleep(REPORT_PERIOD).await;
        let age = if ctx.leadership.is_leader() && !ctx.dry_run {
            let csrs = store.state();
            oldest_undecided_age(csrs.iter().map(AsRef::as_ref), signers, &excused, Timestamp::now())
        } else {
            Duration::ZERO
        };
        ctx.metrics.set_oldest_undecided(age);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};

    fn csr(name: &str, signer: &str, age_secs: i64, now: Timestamp) -> CsrObject {
        let mut csr = CsrObject::from(CertificateSigningRequest::default());
        csr.name = name.into();
        csr.uid = format!("uid-{name}").into();
        csr.created = Some(now - jiff::SignedDuration::from_secs(age_secs));
        csr.signer_name = signer.to_owned().into();
        csr
    }

    fn decided(mut csr: CsrObject, type_: &str) -> CsrObject {
        let condition =
            CertificateSigningRequestCondition { type_: type_.into(), status: "True".into(), ..Default::default() };
        csr.pending.get_or_insert_default().conditions = [condition.into()].into();
        csr
    }

    #[test]
    fn the_oldest_pending_csr_of_a_handled_signer_that_is_not_excused_counts() {
        let now = Timestamp::now();
        let csrs = [
            csr("young", KUBELET_SERVING_SIGNER, 30, now),
            csr("older", KUBELET_SERVING_SIGNER, 90, now),
            decided(csr("approved", KUBELET_SERVING_SIGNER, 900, now), "Approved"),
            decided(csr("denied", KUBELET_SERVING_SIGNER, 800, now), "Denied"),
            csr("held", KUBELET_SERVING_SIGNER, 700, now),
            csr("client", KUBELET_CLIENT_SIGNER, 600, now),
            csr("other-signer", "example.com/other", 500, now),
        ];
        let excused = |csr: &CsrObject| &*csr.name == "held";
        let age = |signers| oldest_undecided_age(&csrs, signers, excused, now);
        assert_eq!(age(handled_signers(false)), Duration::from_secs(90));
        assert_eq!(age(handled_signers(true)), Duration::from_secs(600));
        let none = |_: &CsrObject| false;
        assert_eq!(oldest_undecided_age(&csrs, handled_signers(false), none, now), Duration::from_secs(700));
        assert_eq!(oldest_undecided_age(&csrs[2..4], handled_signers(true), none, now), Duration::ZERO);
    }

    #[test]
    fn a_csr_from_the_future_or_without_a_creation_time_does_not_count() {
        let now = Timestamp::now();
        let mut undated = csr("undated", KUBELET_SERVING_SIGNER, 0, now);
        undated.created = None;
        let csrs = [csr("future", KUBELET_SERVING_SIGNER, -60, now), undated];
        assert_eq!(oldest_undecided_age(&csrs, handled_signers(false), |_| false, now), Duration::ZERO);
    }
}
