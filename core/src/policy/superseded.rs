//! Only the newest kubelet-serving CSR of a node is signed: a pending serving CSR that passes its
//! own checks is denied `Superseded` while a newer serving CSR of the same requester exists that
//! is not denied or failed (pending or approved). Only the node itself can create a CSR with its
//! username, and its kubelet waits only for its newest CSR (it gives up on one after 15 minutes),
//! so denying the older ones costs the node nothing and a renewal storm signs one certificate per
//! node. Client CSRs are never superseded: their requester (the bootstrap credential) is shared.

use jiff::Timestamp;

use super::identity::{NODE_USER_PREFIX, SERVING_SIGNER};
use super::ports::{ClusterError, ServingCsr};
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

/// Passes when no kubelet-serving CSR of `sub`'s requester that is newer than `sub` is pending or
/// approved; otherwise denies `sub` as superseded, naming the newest such CSR.
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
    let newest = csrs
        .iter()
        .filter(|csr| !csr.refused && newer(csr.created, &csr.name, sub))
        .max_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
    match newest {
        None => Ok(format!("no newer kubelet-serving CSR of {} is pending or approved", sub.username)),
        Some(newest) => {
            let created = newest.created.map_or_else(|| "no creation time".to_owned(), |t| format!("created {t}"));
            Err(Failure::deny(
                Reason::Superseded,
                format!(
                    "superseded by the newer kubelet-serving CSR {:?} of {} ({created}): only a node's newest \
                     serving CSR is signed",
                    newest.name, sub.username
                ),
            ))
        }
    }
}
