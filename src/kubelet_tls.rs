//! The kubelet-serving CA bundle (`--kubelet-serving-ca-file`) and what it verifies: a chain a
//! kubelet presents, for server auth, at a given time, naming the address it was reached at.
//! [`dial`] reads that chain from a kubelet over TLS, within a time limit.

pub mod dial;

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::client::{verify_server_cert_signed_by_trust_anchor, verify_server_name};
use rustls::crypto::{CryptoProvider, ring};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;

/// The CA certificates a kubelet's serving certificate must chain to.
#[derive(Clone)]
pub struct KubeletServingCa {
    anchors: Arc<Vec<CertificateDer<'static>>>,
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
}

impl KubeletServingCa {
    /// Reads a PEM bundle: every CERTIFICATE block is a trust anchor; at least one is required,
    /// and each must be one webpki accepts as an anchor.
    pub fn read(path: &Path) -> Result<KubeletServingCa, String> {
        let text = std::fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
        let anchors = CertificateDer::pem_slice_iter(&text)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("not a PEM bundle of certificates: {e}"))?;
        if anchors.is_empty() {
            return Err("holds no CERTIFICATE block".into());
        }
        let mut roots = RootCertStore::empty();
        for (index, anchor) in anchors.iter().enumerate() {
            roots.add(anchor.clone()).map_err(|e| format!("certificate {} is not a usable CA: {e}", index + 1))?;
        }
        Ok(KubeletServingCa {
            anchors: Arc::new(anchors),
            roots: Arc::new(roots),
            provider: Arc::new(ring::default_provider()),
        })
    }

    /// Verifies `chain` (leaf first) at `now`: it chains to the bundle, the leaf is valid for
    /// server auth and names `address` as an IP SAN (as a Go client dialling that address checks).
    pub fn verify(&self, chain: &[CertificateDer<'_>], address: IpAddr, now: UnixTime) -> Result<(), rustls::Error> {
        let (leaf, intermediates) = chain.split_first().ok_or(rustls::Error::NoCertificatesPresented)?;
        let leaf = ParsedCertificate::try_from(leaf)?;
        let algorithms = self.provider.signature_verification_algorithms.all;
        verify_server_cert_signed_by_trust_anchor(&leaf, &self.roots, intermediates, now, algorithms)?;
        verify_server_name(&leaf, &ServerName::IpAddress(address.into()))
    }

    /// The cryptography the verification and the dial use.
    fn provider(&self) -> &Arc<CryptoProvider> {
        &self.provider
    }
}

impl std::fmt::Debug for KubeletServingCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KubeletServingCa({} certificates)", self.anchors.len())
    }
}

impl PartialEq for KubeletServingCa {
    fn eq(&self, other: &KubeletServingCa) -> bool {
        self.anchors == other.anchors
    }
}

impl Eq for KubeletServingCa {}

/// Reads a PEM file of certificates (a leaf and its intermediates), for `check`'s evidence.
pub fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read: {e}"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not a PEM file of certificates: {e}"))?;
    if chain.is_empty() {
        return Err("holds no CERTIFICATE block".into());
    }
    Ok(chain)
}
