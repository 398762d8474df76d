//! Machine mode's one client certificate per Machine: a bootstrap client CSR is held while an
//! approved client CSR for the same node name still exists (the CSR cleaner removes it an hour
//! after issue). Without it, anyone holding the bootstrap credential would get a valid client
//! certificate for a pending Machine's node name as often as they asked, until the Node registers.

use crate::csr::CsrFacts;

use super::identity::{CLIENT_SIGNER, NODE_USER_PREFIX};
use super::ports::ClusterError;
use super::report::Failure;
use super::{Reason, Submission};

/// The node name a CSR's client certificate was issued for: `Some` for an approved
/// `kube-apiserver-client-kubelet` CSR whose one common name is `system:node:<name>`.
pub fn issued_client_node(sub: &Submission) -> Option<String> {
    if !sub.approved {
        return None;
    }
    client_node(sub)
}

/// The node name a `kube-apiserver-client-kubelet` CSR asks a certificate for, approved or not:
/// `Some` when its request reads and its one common name is `system:node:<name>`. The controller
/// decides the client CSRs of one such name one at a time.
pub fn client_node(sub: &Submission) -> Option<String> {
    if sub.signer_name != CLIENT_SIGNER {
        return None;
    }
    let facts = CsrFacts::from_pem(&sub.request).ok()?;
    match facts.common_names.as_slice() {
        [common_name] => common_name.strip_prefix(NODE_USER_PREFIX).map(str::to_owned),
        _ => None,
    }
}

/// Passes when no approved client CSR for `node` exists but `this` itself (whose approval may have
/// been written without an answer); otherwise holds `this` with a message naming the earlier one
/// and how a human approves this one.
pub(crate) fn check(
    issued: &Option<Result<Vec<String>, ClusterError>>,
    node: &str,
    this: &str,
) -> Result<String, Failure> {
    match issued {
        Some(Ok(issued)) => match issued.iter().find(|name| *name != this) {
            None => Ok(format!("no approved client CSR for node {node:?} exists")),
            Some(first) => Err(Failure::deny(
                Reason::ClientCertificateIssued,
                format!(
                    "approved client CSR {first:?} for node {node:?} still exists (the CSR cleaner removes it an hour \
                     after issue): one client certificate per Machine. If this request really is the node's, \
                     approve it with: kubectl certificate approve {this:?}"
                ),
            )),
        },
        Some(Err(error)) => {
            Err(Failure::retry(Reason::ClusterUnavailable, format!("cannot read the approved client CSRs: {error}")))
        }
        None => Err(Failure::retry(Reason::ClusterUnavailable, "approved client CSRs were not looked up")),
    }
}
