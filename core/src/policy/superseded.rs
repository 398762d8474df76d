//! Only the newest kubelet-serving CSR of a node that passes is signed. A pending serving CSR that
//! passes its own checks is denied `Superseded` once a newer serving CSR of the same requester is
//! approved; while a newer one is still undecided it waits (retried as `NewerServingCSRPending`,
//! neither approved nor denied), because that newer one may yet be denied for a reason of its own
//! (a forgery, a bad SAN): then the older one is approved, and the node is not left without a
//! certificate. Only the node itself can create a CSR with its username, and its kubelet waits
//! only for its newest CSR (it gives up on one after 15 minutes), so denying the older ones costs
//! the node nothing and a renewal storm signs one certificate per node. Client CSRs are never
//! superseded: their requester (the bootstrap credential) is shared.

use jiff::Timestamp;

use super::identity::{NODE_USER_PREFIX, SERVING_SIGNER};
use super::ports::{ClusterError, ServingCsr, ServingCsrState};
use super::report::Failure;
use super::{Reason, Submission};

/// The node name of a kubelet-serving CSR whose requester is `system:node:<name>` (any other CSR:
/// `None`). The controller decides the serving CSRs of one such node one at a time.
pub fn serving_node(sub: &Submission) -> Option<&str> {
    if sub.signer_name != SERVING_SIGNER {
        return None;
    }
    sub.username.strip_prefix(NODE_USER_PREFIX).filter(|name| !name.is_empty())
}

/// Whether a CSR created at `created` and named `name` is newer than `than`: a later creation
/// time, or the same one (a second's resolution) and a greater name. No creation time is older
/// than any.
fn newer(created: Option<Timestamp>, name: &str, than: &Submission) -> bool {
    (created, name) > (than.created, than.name.as_str())
}

/// The newest of `csrs` in `state` that is newer than `sub`.
fn newest_newer<'a>(csrs: &'a [ServingCsr], state: ServingCsrState, sub: &Submission) -> Option<&'a ServingCsr> {
    csrs.iter()
        .filter(|csr| csr.state == state && newer(csr.created, &csr.name, sub))
        .max_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)))
}

/// `csr`'s name, requester and creation time, as a message names it.
fn named(csr: &ServingCsr, sub: &Submission) -> String {
    let created = csr.created.map_or_else(|| "no creation time".to_owned(), |t| format!("created {t}"));
    format!("the newer kubelet-serving CSR {:?} of {} ({created})", csr.name, sub.username)
}

/// Passes when no kubelet-serving CSR of `sub`'s requester that is newer than `sub` is approved
/// or pending. Denies `sub` as superseded when one is approved, naming the newest approved one;
/// otherwise, while one is pending, asks to retry, naming the newest pending one.
pub(crate) fn check(
    lookup: &Option<Result<Vec<ServingCsr>, ClusterError>>,
    sub: &Submission,
) -> Result<String, Failure> {
    let csrs = match lookup {
        Some(Ok(csrs)) => csrs,
        Some(Err(error)) => {
            return Err(Failure::retry(
                Reason::ClusterUnavailable,
                format!("cannot read the kubelet-serving CSRs of {}: {error}", sub.username),
            ));
        }
        None => {
            return Err(Failure::retry(Reason::ClusterUnavailable, "the kubelet-serving CSRs were not looked up"));
        }
    };
    if let Some(approved) = newest_newer(csrs, ServingCsrState::Approved, sub) {
        return Err(Failure::deny(
            Reason::Superseded,
            format!("superseded by {}, approved: only a node's newest serving CSR is signed", named(approved, sub)),
        ));
    }
    if let Some(pending) = newest_newer(csrs, ServingCsrState::Pending, sub) {
        return Err(Failure::retry(
            Reason::NewerServingCSRPending,
            format!(
                "waiting for {} to be decided: denied Superseded once it is approved, approved once it is denied \
                 or failed",
                named(pending, sub)
            ),
        ));
    }
    Ok(format!("no newer kubelet-serving CSR of {} is pending or approved", sub.username))
}
