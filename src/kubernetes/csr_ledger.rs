//! What machine mode reads of the CSRs themselves: the pending brake's count and the approved
//! client CSRs of a node name. It reads the controller's CSR cache, which the runner creates and
//! hands to both (or, for `check`, one list of the cluster's CSRs).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use jiff::Timestamp;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::runtime::watcher;
use kube::{Api, Client};

use crate::kubernetes::csr_cache::{self, Cache};
use crate::kubernetes::csr_object::CsrObject;
use crate::policy::{
    KUBELET_CLIENT_SIGNER, MachinePolicy, capped_pending, counts_as_pending, issued_client_node, pending_node,
};

/// Machine mode's view of the CSR cache. Cheap to clone.
#[derive(Clone)]
pub struct CsrLedger {
    csrs: Cache<CsrObject>,
    /// The rules the brake's count reads.
    rules: Arc<MachinePolicy>,
    /// The node name each pending CSR counts under, by uid (a request never changes), so a
    /// bootstrap request is read once, not on every count.
    pending_nodes: Arc<Mutex<HashMap<String, String>>>,
    /// The node name each approved client CSR's certificate is for, by uid (`None`: none can be
    /// read), so an approved request is read once (a request never changes, nor does an approval).
    issued_nodes: Arc<Mutex<HashMap<String, Option<String>>>>,
}

impl CsrLedger {
    /// Reads `csrs` (the controller's cache) under `rules`.
    pub fn new(csrs: Cache<CsrObject>, rules: MachinePolicy) -> CsrLedger {
        CsrLedger { csrs, rules: Arc::new(rules), pending_nodes: Arc::default(), issued_nodes: Arc::default() }
    }

    /// Lists every CSR once (for `check`, which runs no watch), so the brake and one client
    /// certificate per Machine read what the controller's cache would hold.
    pub async fn listed(client: Client, rules: MachinePolicy) -> Result<CsrLedger, kube::Error> {
        let listed = Api::<CertificateSigningRequest>::all(client).list(&Default::default()).await?;
        let (store, mut writer) = csr_cache::cache();
        writer.apply(watcher::Event::<CsrObject>::Init);
        for csr in listed.items {
            writer.apply(watcher::Event::InitApply(csr));
        }
        writer.apply(watcher::Event::<CsrObject>::InitDone);
        Ok(CsrLedger::new(store, rules))
    }

    /// The brake's count at `now`: the pending node CSRs ([`counts_as_pending`]), at most
    /// [`crate::policy::PENDING_PER_NODE`] per node name.
    pub fn pending(&self, now: Timestamp) -> usize {
        let mut known = self.pending_nodes.lock().unwrap_or_else(PoisonError::into_inner);
        let mut seen = HashMap::new();
        let mut pending = Vec::new();
        for csr in self.csrs.state() {
            let sub = csr.submission();
            if !counts_as_pending(&sub, &self.rules, now) {
                continue;
            }
            let uid = Some(&*csr.uid).filter(|uid| !uid.is_empty());
            let node = uid.and_then(|uid| known.remove(uid)).unwrap_or_else(|| pending_node(&sub, &self.rules));
            if let Some(uid) = uid {
                seen.insert(uid.to_owned(), node.clone());
            }
            pending.push(node);
        }
        *known = seen;
        capped_pending(pending)
    }

    /// The names of the approved client CSRs whose certificate is for node `node`
    /// ([`issued_client_node`]), sorted.
    pub fn client_certificates(&self, node: &str) -> Vec<String> {
        let mut known = self.issued_nodes.lock().unwrap_or_else(PoisonError::into_inner);
        let mut seen = HashMap::new();
        let mut issued = Vec::new();
        for csr in self.csrs.state() {
            if &*csr.signer_name != KUBELET_CLIENT_SIGNER || !csr.is_approved() {
                continue;
            }
            let uid = String::from(&*csr.uid);
            let for_node = match known.remove(&uid) {
                Some(for_node) => for_node,
                None => issued_client_node(&csr.submission()),
            };
            if for_node.as_deref() == Some(node) {
                issued.push(String::from(&*csr.name));
            }
            if !uid.is_empty() {
                seen.insert(uid, for_node);
            }
        }
        *known = seen;
        issued.sort();
        issued
    }
}
