//! Reads the chain a kubelet presents without trusting it, for the audit: a TLS handshake that
//! accepts any chain, so whatever is served can be reported, while the handshake's own signature
//! is still checked (the server proves it holds the leaf's key). Nothing is sent after the
//! handshake, and nothing read is ever used as evidence for a decision.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, ring, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};

use super::handshake::{handshake, tls_error};

/// What a kubelet presented.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Presented {
    /// The chain (leaf first) of a server that completed the handshake: it holds the leaf's key.
    Proven(Vec<CertificateDer<'static>>),
    /// A chain was presented but the handshake then failed (e.g. its signature does not verify
    /// with the leaf's key, or the leaf's key cannot be read); the text says why.
    Unproven(Vec<CertificateDer<'static>>, String),
    /// No connection, or no TLS server that presented a chain, within the limit; the text says why.
    Unreachable(String),
}

/// Connects to `address` and reads the chain its TLS server presents, all within `limit`.
pub async fn presented_chain(address: SocketAddr, limit: Duration) -> Presented {
    let verifier = Arc::new(AnyChain { provider: Arc::new(ring::default_provider()), seen: Mutex::default() });
    let config = ClientConfig::builder_with_provider(verifier.provider.clone())
        .with_safe_default_protocol_versions()
        .map(|builder| builder.dangerous().with_custom_certificate_verifier(verifier.clone()).with_no_client_auth());
    let config = match config {
        Ok(config) => Arc::new(config),
        Err(error) => return Presented::Unreachable(format!("TLS configuration: {error}")),
    };
    let outcome = handshake(address, config, limit).await;
    let seen = verifier.seen.lock().ok().and_then(|mut seen| seen.take());
    match (outcome, seen) {
        (Err(_), None) => Presented::Unreachable(format!("no TLS handshake within {limit:?}")),
        (Ok(Err(error)), None) => Presented::Unreachable(match tls_error(&error) {
            Some(tls) => format!("TLS: {tls}"),
            None => error.to_string(),
        }),
        (Err(_), Some(chain)) => Presented::Unproven(chain, format!("the handshake did not finish within {limit:?}")),
        (Ok(Err(error)), Some(chain)) => Presented::Unproven(chain, error.to_string()),
        (Ok(Ok(stream)), seen) => match (stream.get_ref().1.peer_certificates(), seen) {
            (Some(chain), _) if !chain.is_empty() => {
                Presented::Proven(chain.iter().map(|c| c.clone().into_owned()).collect())
            }
            (_, Some(chain)) => Presented::Proven(chain),
            _ => Presented::Unreachable("the server presented no certificate".into()),
        },
    }
}

/// Accepts every chain and keeps it; the handshake's signatures are checked as rustls always
/// checks them.
#[derive(Debug)]
struct AnyChain {
    provider: Arc<CryptoProvider>,
    seen: Mutex<Option<Vec<CertificateDer<'static>>>>,
}

impl ServerCertVerifier for AnyChain {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let chain = std::iter::once(end_entity).chain(intermediates).map(|c| c.clone().into_owned()).collect();
        if let Ok(mut seen) = self.seen.lock() {
            *seen = Some(chain);
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}
