//! The kubelet-serving CA bundle (`--kubelet-serving-ca-file`) and what it verifies: a chain a
//! kubelet presents, for server auth, at a given time, naming the address it was reached at.
//! [`dial`] reads that chain from a kubelet over TLS, within a time limit; [`presented`] reads
//! whatever chain a kubelet presents, trusting none, for the audit.

pub mod dial;
mod handshake;
pub mod presented;

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::RootCertStore;
use rustls::client::{verify_server_cert_signed_by_trust_anchor, verify_server_name};
use rustls::crypto::{CryptoProvider, ring};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;

/// How long the connection and the TLS handshake with a kubelet may take together: serving
/// renewal's dial, and the audit's unless `audit --dial-timeout` says otherwise.
pub const DIAL_LIMIT: Duration = Duration::from_secs(3);

/// Why a PEM file of certificates (the CA bundle or `check`'s chain) cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PemError {
    /// The file cannot be read.
    #[error("cannot read: {0}")]
    Unreadable(#[source] std::io::Error),
    /// The CA bundle is not PEM certificates.
    #[error("not a PEM bundle of certificates: {0}")]
    NotPemBundle(#[source] rustls::pki_types::pem::Error),
    /// The chain's file is not PEM certificates.
    #[error("not a PEM file of certificates: {0}")]
    NotPemFile(#[source] rustls::pki_types::pem::Error),
    /// No CERTIFICATE block at all.
    #[error("holds no CERTIFICATE block")]
    Empty,
    /// A certificate of the bundle is not one webpki accepts as a trust anchor (1-based index).
    #[error("certificate {index} is not a usable CA: {source}")]
    NotCa {
        /// Its place in the bundle, from 1.
        index: usize,
        /// Why webpki refused it.
        source: rustls::Error,
    },
}

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
    pub fn read(path: &Path) -> Result<KubeletServingCa, PemError> {
        let text = std::fs::read(path).map_err(PemError::Unreadable)?;
        let anchors =
            CertificateDer::pem_slice_iter(&text).collect::<Result<Vec<_>, _>>().map_err(PemError::NotPemBundle)?;
        if anchors.is_empty() {
            return Err(PemError::Empty);
        }
        let mut roots = RootCertStore::empty();
        for (index, anchor) in anchors.iter().enumerate() {
            roots.add(anchor.clone()).map_err(|source| PemError::NotCa { index: index + 1, source })?;
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
pub fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, PemError> {
    let text = std::fs::read(path).map_err(PemError::Unreadable)?;
    let chain = CertificateDer::pem_slice_iter(&text).collect::<Result<Vec<_>, _>>().map_err(PemError::NotPemFile)?;
    if chain.is_empty() {
        return Err(PemError::Empty);
    }
    Ok(chain)
}
