//! What the policy reads of the CSRs themselves: a node's kubelet-serving CSRs (whether a newer
//! one supersedes the CSR decided or holds it back), and in machine mode the pending brake's count and the approved
//! client CSRs of a node name. It reads the controller's CSR cache, which the runner creates and
//! hands to both (or, for `check`, one list of the cluster's CSRs), and holds no state of its own.
//!
//! A client approval counts from the moment its write returns, before the watch brings it into
//! the cache: the ledger reads those the controller wrote through [`WrittenApprovals`].

use std::collections::HashSet;
use std::sync::Arc;

use jiff::Timestamp;
use kube::runtime::watcher;
use kube::{Api, Client};

use crate::kubernetes::csr_cache::{self, Cache};
use crate::kubernetes::csr_object::CsrObject;
use crate::kubernetes::csr_uid::Uid;
use crate::kubernetes::decoded::{Decoded, Skipped};
use crate::kubernetes::object_fields::Csr;
use crate::kubernetes::object_fields::ObjectKind;
use crate::policy::{
    AwaitedNodes, KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER, MachineInfo, MachinePolicy, ServingCsr,
    ServingCsrState, capped_pending, counted_under, pending_key_of,
};

/// The client approvals written (or perhaps written: no answer) that the cache may not show yet,
/// as the controller knows them; read-only.
pub trait WrittenApprovals: Send + Sync {
    /// The uid and name of each client CSR whose approval of a certificate for node name `node`
    /// was written.
    fn approvals_for(&self, node: &str) -> Vec<(Uid, String)>;
}

/// The policy's view of the CSR cache. Cheap to clone.
#[derive(Clone)]
pub struct CsrLedger {
    csrs: Cache<CsrObject>,
    /// The rules the brake's count reads (machine mode only: none, nothing is counted).
    rules: Option<Arc<MachinePolicy>>,
    /// The approvals the controller wrote; none for `check` and `audit`, which write none.
    written: Option<Arc<dyn WrittenApprovals>>,
}

impl CsrLedger {
    /// Reads `csrs` (the controller's cache), under machine mode's `rules` when given, and the
    /// approvals the controller `written`.
    pub fn new(
        csrs: Cache<CsrObject>,
        rules: Option<MachinePolicy>,
        written: Option<Arc<dyn WrittenApprovals>>,
    ) -> CsrLedger {
        CsrLedger { csrs, rules: rules.map(Arc::new), written }
    }

    /// Lists every CSR once (for `check`, which runs no watch), so the superseded serving CSRs, the
    /// brake and one client certificate per Machine read what the controller's cache would hold.
    /// A CSR that cannot be decoded is reported to `skipped` and left out, as the controller's
    /// watch leaves it out.
    pub async fn listed(
        client: Client,
        rules: Option<MachinePolicy>,
        skipped: &Skipped,
    ) -> Result<CsrLedger, kube::Error> {
        let listed = Api::<Decoded<Csr>>::all(client).list(&Default::default()).await?;
        let csrs = listed.items.into_iter().filter_map(|csr| skipped.keep(ObjectKind::Csr, csr));
        Ok(CsrLedger::of(csrs.collect(), rules))
    }

    /// A ledger of no CSR, for `audit`: it judges certificates already issued, so no serving CSR
    /// supersedes one and no brake holds one back, and it judges no client CSR.
    pub fn without_csrs() -> CsrLedger {
        CsrLedger::of(Vec::<Csr>::new(), None)
    }

    /// A ledger of exactly `csrs`, as a cache that has listed them.
    fn of<C: Into<CsrObject>>(csrs: Vec<C>, rules: Option<MachinePolicy>) -> CsrLedger {
        let (store, mut writer) = csr_cache::cache();
        writer.apply(watcher::Event::<CsrObject>::Init);
        for csr in csrs {
            writer.apply(watcher::Event::InitApply(csr));
        }
        writer.apply(watcher::Event::<CsrObject>::InitDone);
        CsrLedger::new(store, rules, None)
    }

    /// The brake's count at `now` with `machines`: the pending node CSRs ([`crate::policy::counts_as_pending`])
    /// under the name each counts under ([`counted_under`]; a bootstrap CSR's from the node name
    /// the cache keeps of its request, [`CsrObject::client_node`]), at most
    /// [`crate::policy::PENDING_PER_NODE`] per name; none outside machine mode.
    pub fn pending(&self, now: Timestamp, machines: &[Arc<MachineInfo>]) -> usize {
        let Some(rules) = &self.rules else {
            return 0;
        };
        let awaited = AwaitedNodes::new(machines.iter().map(Arc::as_ref));
        let mut pending = Vec::new();
        for csr in self.csrs.state() {
            if !csr.pending_facts().counts_as_pending(rules, now) {
                continue;
            }
            let key = pending_key_of(&csr.username, csr.client_node(), rules);
            if let Some(name) = counted_under(&key, csr.created, &awaited) {
                pending.push(name.to_owned());
            }
        }
        capped_pending(pending)
    }

    /// What the superseded rule reads of the kubelet-serving CSRs whose requester is `requester`:
    /// the newest approved one and the newest pending one, if any ([`serving_state`]); refused
    /// ones are left out. One pass over that requester's CSRs in the cache, none over the others,
    /// copying only the two answered.
    pub fn serving_csrs(&self, requester: &str) -> Vec<ServingCsr> {
        self.csrs.in_group(requester, |csrs| {
            let (mut approved, mut pending): (Option<&CsrObject>, Option<&CsrObject>) = (None, None);
            for csr in csrs.iter().filter(|csr| &*csr.signer_name == KUBELET_SERVING_SIGNER) {
                let newest = match serving_state(csr) {
                    ServingCsrState::Approved => &mut approved,
                    ServingCsrState::Pending => &mut pending,
                    ServingCsrState::Refused => continue,
                };
                if newest.is_none_or(|was| (csr.created, &*csr.name) > (was.created, &*was.name)) {
                    *newest = Some(csr);
                }
            }
            [(approved, ServingCsrState::Approved), (pending, ServingCsrState::Pending)]
                .into_iter()
                .filter_map(|(csr, state)| {
                    csr.map(|csr| ServingCsr { name: String::from(&*csr.name), created: csr.created, state })
                })
                .collect()
        })
    }

    /// The names of the approved client CSRs whose certificate is for node `node` (the node name
    /// the cache keeps of an approved client CSR's request, [`CsrObject::client_node`], as
    /// [`crate::policy::issued_client_node`] reads it), and of those whose approval this process
    /// wrote ([`WrittenApprovals`]) while the cache still holds them undecided; sorted.
    pub fn client_certificates(&self, node: &str) -> Vec<String> {
        let written = self.written.as_ref().map(|written| written.approvals_for(node)).unwrap_or_default();
        let mut issued = Vec::new();
        let mut undecided = HashSet::new();
        for csr in self.csrs.state() {
            if !csr.is_decided() {
                undecided.insert(csr.uid.clone());
            }
            if &*csr.signer_name == KUBELET_CLIENT_SIGNER && csr.is_approved() && csr.client_node() == Some(node) {
                issued.push(String::from(&*csr.name));
            }
        }
        issued.extend(written.into_iter().filter(|(uid, _)| undecided.contains(uid)).map(|(_, name)| name));
        issued.sort();
        issued.dedup();
        issued
    }
}

/// Where a kubelet-serving CSR stands for the superseded rule: refused with a Denied or Failed
/// condition; otherwise approved once decided (an Approved condition or an issued certificate);
/// otherwise pending, unless its name is cut: the approver can never decide such a CSR (no write
/// can address it), so it counts as refused and no older CSR of its node waits for it.
fn serving_state(csr: &CsrObject) -> ServingCsrState {
    if csr.is_refused() || (csr.name_cut && !csr.is_decided()) {
        ServingCsrState::Refused
    } else if csr.is_decided() {
        ServingCsrState::Approved
    } else {
        ServingCsrState::Pending
    }
}

#[cfg(test)]
mod tests {

    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestStatus,
    };
    use testkit::csr::node_serving as serving;
    use testkit::request::Request;

    use super::*;
    use crate::policy::Bootstrapper;

    fn ledger() -> (CsrLedger, csr_cache::CacheWriter<CsrObject>) {
        let (cache, mut writer) = csr_cache::cache();
        writer.apply(watcher::Event::<CsrObject>::Init);
        writer.apply(watcher::Event::<CsrObject>::InitDone);
        let rules = MachinePolicy {
            client_approval: true,
            bootstrapper: Bootstrapper::Exact("bootstrapper".into()),
            bootstrapper_groups: Default::default(),
            max_pending_delta: 100,
            serving_renewal: false,
        };
        (CsrLedger::new(cache, Some(rules), None), writer)
    }

    /// A client CSR `name` (uid `uid-<name>`) for node `node`, approved when `approved`.
    fn client(name: &str, node: &str, approved: bool) -> CertificateSigningRequest {
        let usages = ["digital signature", "client auth"];
        let mut csr = testkit::csr::object(name, KUBELET_CLIENT_SIGNER, &usages, &Request::node(node).pem());
        csr.metadata.uid = Some(format!("uid-{name}"));
        let approval = CertificateSigningRequestCondition {
            type_: "Approved".into(),
            status: "True".into(),
            ..Default::default()
        };
        csr.status = approved
            .then(|| CertificateSigningRequestStatus { conditions: Some(vec![approval]), ..Default::default() });
        csr
    }

    #[test]
    fn a_node_s_newest_approved_and_newest_pending_serving_csrs_are_read_from_its_own_group() {
        let (ledger, mut writer) = ledger();
        for csr in [
            serving("pending", "n1", 1, None),
            serving("approved", "n1", 2, Some("Approved")),
            serving("older-pending", "n1", 0, None),
            serving("older-approved", "n1", 0, Some("Approved")),
            serving("denied", "n1", 3, Some("Denied")),
            serving("failed", "n1", 4, Some("Failed")),
            serving("other-node", "n2", 5, None),
            client("client", "n1", false),
        ] {
            writer.apply(watcher::Event::Apply(csr));
        }
        let at = |second| Timestamp::from_second(second).ok();
        let csr = |name: &str, second, state| ServingCsr { name: name.into(), created: at(second), state };
        let (approved, pending) = (ServingCsrState::Approved, ServingCsrState::Pending);
        let n1 = || ledger.serving_csrs("system:node:n1");
        assert_eq!(n1(), [csr("approved", 2, approved), csr("pending", 1, pending)], "denied and failed are left out");
        assert!(ledger.serving_csrs("n1").is_empty(), "the requester is the username, whole");
        assert_eq!(ledger.serving_csrs("system:node:n2"), [csr("other-node", 5, pending)]);
        writer.apply(watcher::Event::Apply(serving("b-newer", "n1", 6, None)));
        writer.apply(watcher::Event::Apply(serving("a-newer", "n1", 6, None)));
        assert_eq!(n1()[1], csr("b-newer", 6, pending), "the same second: the greater name");
        writer.apply(watcher::Event::Apply(serving("b-newer", "n1", 6, Some("Denied"))));
        assert_eq!(n1()[1], csr("a-newer", 6, pending), "a replaced object leaves its group");
        writer.apply(watcher::Event::Apply(serving("a-newer", "n1", 6, Some("Approved"))));
        assert_eq!(n1(), [csr("a-newer", 6, approved), csr("pending", 1, pending)], "approved, it moves over");
        writer.apply(watcher::Event::Apply(serving("a-newer", "n1", 6, Some("Failed"))));
        assert_eq!(n1()[0], csr("approved", 2, approved), "failed: refused, it supersedes nothing");
        writer.apply(watcher::Event::Delete(serving("pending", "n1", 1, None)));
        assert_eq!(n1()[1], csr("older-pending", 0, pending), "a deleted object leaves its group");
        writer.apply(watcher::Event::Apply(serving(&"x".repeat(300), "n1", 9, None)));
        assert_eq!(n1()[1], csr("older-pending", 0, pending), "a pending CSR whose name is cut is never decided");
    }

    #[test]
    fn the_brake_and_the_client_certificates_read_the_node_name_kept_beside_a_request_left_out() {
        let (ledger, mut writer) = ledger();
        let now = Timestamp::now();
        let bootstrap = |name: &str, node: &str, approved: bool| {
            let mut csr = client(name, node, approved);
            csr.spec.username = Some("bootstrapper".into());
            csr.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
            crate::kubernetes::csr_object::Watched { csr: csr.into(), keep_request: false }
        };
        for (name, node, approved) in [("a", "n1", true), ("b", "n2", false), ("c", "n3", false), ("d", "N4", false)] {
            writer.apply(watcher::Event::Apply(bootstrap(name, node, approved)));
        }
        assert!(ledger.csrs.state().iter().all(|csr| csr.request().is_none()), "no request is kept");
        assert_eq!(ledger.client_certificates("n1"), ["a"]);
        assert!(ledger.client_certificates("n2").is_empty(), "pending: no certificate");
        let machine = |node: &str| {
            let address = crate::policy::NodeAddress { kind: "InternalDNS".into(), address: node.into() };
            Arc::new(MachineInfo {
                id: format!("machines/{node}"),
                created: Some(now),
                node_ref: None,
                addresses: vec![address],
                object: None,
            })
        };
        assert_eq!(ledger.pending(now, &[]), 0, "no Machine awaits their nodes");
        assert_eq!(ledger.pending(now, &[machine("n2")]), 1, "n2's, awaited");
        let awaited = [machine("n1"), machine("n2"), machine("n3"), machine("n4")];
        assert_eq!(ledger.pending(now, &awaited), 2, "n2's and n3's: approved, or no valid node name, never");
    }

    /// Approvals written as the controller would list them: (uid, name, node name).
    struct Written(Vec<(&'static str, &'static str, &'static str)>);

    impl WrittenApprovals for Written {
        fn approvals_for(&self, node: &str) -> Vec<(Uid, String)> {
            let of_node = self.0.iter().filter(|(_, _, of)| *of == node);
            of_node.map(|(uid, name, _)| (Uid::from(*uid), (*name).to_owned())).collect()
        }
    }

    #[test]
    fn an_approval_counts_from_its_write_until_the_cache_shows_it_decided_or_gone() {
        let (ledger, mut writer) = ledger();
        let written = Written(vec![("uid-a", "a", "n1"), ("uid-gone", "gone", "n1"), ("uid-b", "b", "n2")]);
        let ledger = CsrLedger { written: Some(Arc::new(written)), ..ledger };
        writer.apply(watcher::Event::Apply(client("a", "n1", false)));
        writer.apply(watcher::Event::Apply(client("b", "n2", true)));
        assert_eq!(ledger.client_certificates("n1"), ["a"], "written, not yet watched; a CSR not cached is gone");
        assert_eq!(ledger.client_certificates("n2"), ["b"], "watched approved: the cache counts it, once");
        assert!(ledger.client_certificates("n3").is_empty(), "another node name");
        writer.apply(watcher::Event::Apply(client("a", "n1", true)));
        assert_eq!(ledger.client_certificates("n1"), ["a"], "watched: the cache counts it, once");
        let mut other = client("a", "n1", false);
        other.metadata.uid = Some("uid-other".into());
        writer.apply(watcher::Event::Apply(other));
        assert!(ledger.client_certificates("n1").is_empty(), "another CSR of the name, undecided");
        writer.apply(watcher::Event::Delete(client("a", "n1", true)));
        assert!(ledger.client_certificates("n1").is_empty());
    }
}
