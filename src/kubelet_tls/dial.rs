//! Reads the certificate a kubelet serves: a TLS handshake with its HTTPS port, within a time
//! limit, accepting only a chain the kubelet-serving CA bundle verifies for that address.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};

use super::KubeletServingCa;
use super::handshake::{handshake, tls_error};

/// What the dial found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Served {
    /// The leaf (DER) of a chain the bundle verified, from a kubelet that proved it holds its key.
    Verified(Vec<u8>),
    /// A TLS server answered, but with nothing the bundle verifies; the text says why.
    Untrusted(String),
    /// No connection, or no TLS server that completed a handshake, within the limit. The text
    /// names the address only: what failed (refused, timed out, another protocol) is logged, not
    /// told, so that Events cannot serve as a port scanner.
    Unreachable(String),
}

/// Connects to `address` and completes a TLS handshake, all within `limit`.
pub async fn served_certificate(address: SocketAddr, ca: &KubeletServingCa, limit: Duration) -> Served {
    let verifier = Arc::new(BundleVerifier { ca: ca.clone() });
    let config = ClientConfig::builder_with_provider(ca.provider().clone())
        .with_safe_default_protocol_versions()
        .map(|builder| builder.dangerous().with_custom_certificate_verifier(verifier).with_no_client_auth());
    let config = match config {
        Ok(config) => Arc::new(config),
        Err(error) => return Served::Untrusted(format!("TLS configuration: {error}")),
    };
    let unreachable = |why: &dyn std::fmt::Display| {
        tracing::info!(%address, error = %why, "kubelet unreachable");
        Served::Unreachable(format!("{address} unreachable"))
    };
    match handshake(address, config, limit).await {
        Err(_) => unreachable(&format!("no TLS handshake within {limit:?}")),
        Ok(Err(error)) => match tls_error(&error) {
            Some(tls @ (rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented)) => {
                Served::Untrusted(format!("{address}: {tls}"))
            }
            Some(tls) => unreachable(tls),
            None => unreachable(&error),
        },
        Ok(Ok(stream)) => match stream.get_ref().1.peer_certificates().and_then(|chain| chain.first()) {
            Some(leaf) => Served::Verified(leaf.to_vec()),
            None => Served::Untrusted(format!("{address} presented no certificate")),
        },
    }
}

/// Accepts exactly the chains [`KubeletServingCa::verify`] accepts; the handshake's signatures are
/// checked as rustls always checks them, so the kubelet proves it holds the leaf's key.
#[derive(Debug)]
struct BundleVerifier {
    ca: KubeletServingCa,
}

impl ServerCertVerifier for BundleVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let ServerName::IpAddress(address) = server_name else {
            return Err(rustls::Error::General("a kubelet is dialled by address only".into()));
        };
        let chain: Vec<CertificateDer<'_>> =
            std::iter::once(end_entity.clone()).chain(intermediates.iter().cloned()).collect();
        self.ca.verify(&chain, std::net::IpAddr::from(*address), now)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.ca.provider().signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.ca.provider().signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.ca.provider().signature_verification_algorithms.supported_schemes()
    }
}
