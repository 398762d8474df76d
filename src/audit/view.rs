//! The cluster as an audit's policy evaluation sees it: the live view, but with nothing about the
//! CSR process itself, since the names of a certificate already issued are what is judged. No
//! other serving CSR supersedes it, the pending brake is released, and the certificate audited is
//! never evidence for itself (a renewal is approved because the kubelet already serves the names;
//! here that would prove nothing).

use std::net::IpAddr;
use std::sync::Arc;

use crate::policy::{
    AddressClaim, ApiserverAddresses, BrakeInputs, ClusterError, ClusterView, KubeletCertificate, MachineInfo,
    NodeInfo, ServingCsr,
};

/// `C` with the CSR process left out.
pub(super) struct AuditView<'a, C> {
    /// The cluster.
    pub(super) cluster: &'a C,
}

impl<C: ClusterView> ClusterView for AuditView<'_, C> {
    async fn node(&self, name: &str) -> Result<Option<NodeInfo>, ClusterError> {
        self.cluster.node(name).await
    }

    async fn machines(&self) -> Result<Vec<Arc<MachineInfo>>, ClusterError> {
        self.cluster.machines().await
    }

    async fn load(&self) -> Result<BrakeInputs, ClusterError> {
        Ok(BrakeInputs::default())
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

    async fn serving_csrs(&self, _requester: &str) -> Result<Vec<ServingCsr>, ClusterError> {
        Ok(Vec::new())
    }

    async fn kubelet_certificate(&self, _node: &str) -> Result<KubeletCertificate, ClusterError> {
        Ok(KubeletCertificate::Unusable("the certificate audited is no evidence for itself".into()))
    }
}
