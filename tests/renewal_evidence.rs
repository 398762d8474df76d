//! When the kubelet is dialled: only for a serving CSR in machine mode with renewals on, and only
//! when the Machines were read and none claims the node. The cluster is the file-backed view
//! `check --objects` uses, with a served chain of a real CA, counted as it is asked for (the rest of
//! machine mode's decision table is the core's, `core/tests/machine_policy.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use node_csr_approver::dns::HickoryResolver;
use node_csr_approver::kubelet_tls::KubeletServingCa;
use node_csr_approver::kubernetes::cluster::StaticCluster;
use node_csr_approver::policy::{
    AddressClaim, ApiserverAddresses, BrakeInputs, ClusterError, ClusterView, DecisionKind, KubeletCertificate,
    MachineInfo, NodeAddress, NodeInfo, PolicyConfig, Reason, ServingCsr, evaluate,
};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

use support::serving;
use testkit::machine::{machine_config, n1_machine, now};
use testkit::request::legit;

/// The file-backed cluster, counting the dials it is asked for.
struct Counted {
    cluster: StaticCluster,
    dials: AtomicUsize,
}

impl ClusterView for Counted {
    async fn node(&self, name: &str) -> Result<Option<NodeInfo>, ClusterError> {
        self.cluster.node(name).await
    }
    async fn machines(&self) -> Result<Vec<Arc<MachineInfo>>, ClusterError> {
        self.cluster.machines().await
    }
    async fn load(&self) -> Result<BrakeInputs, ClusterError> {
        self.cluster.load().await
    }
    async fn apiserver_addresses(&self) -> Result<ApiserverAddresses, ClusterError> {
        self.cluster.apiserver_addresses().await
    }
    async fn nodes_claiming(&self, ips: &[IpAddr]) -> Result<Vec<AddressClaim>, ClusterError> {
        self.cluster.nodes_claiming(ips).await
    }
    async fn client_certificates(&self, node: &str) -> Result<Vec<String>, ClusterError> {
        self.cluster.client_certificates(node).await
    }

    async fn serving_csrs(&self, requester: &str) -> Result<Vec<ServingCsr>, ClusterError> {
        self.cluster.serving_csrs(requester).await
    }
    async fn kubelet_certificate(&self, node: &str) -> Result<KubeletCertificate, ClusterError> {
        self.dials.fetch_add(1, Ordering::SeqCst);
        self.cluster.kubelet_certificate(node).await
    }
}

/// Node n1 at 10.0.0.11, these Machines, and n1's kubelet serving a certificate of a CA for
/// n1.nodes.example.com and 10.0.0.11.
fn cluster(machines: Vec<Arc<MachineInfo>>) -> Counted {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.distinguished_name.push(DnType::CommonName, "kubelet-serving");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.crt"), ca.self_signed(&ca_key).unwrap().pem()).unwrap();
    let bundle = KubeletServingCa::read(&dir.path().join("ca.crt")).unwrap();
    let mut leaf = CertificateParams::new(vec!["n1.nodes.example.com".to_owned(), "10.0.0.11".to_owned()]).unwrap();
    leaf.distinguished_name.push(DnType::CommonName, "system:node:n1");
    let leaf = leaf.signed_by(&KeyPair::generate().unwrap(), &Issuer::new(ca, ca_key)).unwrap();
    let node = NodeInfo {
        name: "n1".into(),
        addresses: vec![NodeAddress { kind: "InternalIP".into(), address: "10.0.0.11".into() }],
        object: None,
    };
    let machines = machines.into_iter().map(|m| (*m).clone());
    let served = HashMap::from([("n1".to_owned(), vec![leaf.der().clone()])]);
    let cluster = StaticCluster::new([node], machines, 0).with_kubelet_certificates(served, bundle, now());
    Counted { cluster, dials: AtomicUsize::new(0) }
}

/// Decides a renewal request of n1 with `cfg`; the decision and how often the kubelet was dialled.
async fn decide(cfg: &PolicyConfig, cluster: &Counted) -> (DecisionKind, Reason, usize) {
    let resolver = HickoryResolver::new(Some(&["127.0.0.1:9".parse().unwrap()]), Duration::from_millis(100)).unwrap();
    let sub = serving("n1", &legit("n1", 11).pem());
    let evaluation = evaluate(&sub, cfg, &resolver, cluster, now()).await;
    (evaluation.decision.kind, evaluation.decision.reason, cluster.dials.load(Ordering::SeqCst))
}

fn renewals_on() -> PolicyConfig {
    let mut cfg = machine_config();
    cfg.machine.as_mut().unwrap().serving_renewal = true;
    cfg
}

#[tokio::test]
async fn the_kubelet_is_dialled_once_when_no_machine_claims_the_node() {
    let unclaimed = decide(&renewals_on(), &cluster(vec![n1_machine(None)])).await;
    assert_eq!(unclaimed, (DecisionKind::Approve, Reason::AutoApproved, 1));
}

#[tokio::test]
async fn a_machine_that_claims_the_node_spares_the_dial() {
    let claimed = decide(&renewals_on(), &cluster(vec![n1_machine(Some("n1"))])).await;
    assert_eq!(claimed, (DecisionKind::Approve, Reason::AutoApproved, 0));
}

#[tokio::test]
async fn without_renewals_the_kubelet_is_never_dialled() {
    let off = decide(&machine_config(), &cluster(vec![n1_machine(None)])).await;
    assert_eq!(off, (DecisionKind::Retry, Reason::MachineNotFound, 0));
    let mut serving_mode = renewals_on();
    serving_mode.machine = None;
    let serving = decide(&serving_mode, &cluster(Vec::new())).await;
    assert_eq!(serving, (DecisionKind::Approve, Reason::AutoApproved, 0));
}
