//! The TLS handshake with a kubelet, within a time limit, that the dial and the audit's read of a
//! presented chain share; each brings its own certificate verifier.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::time::error::Elapsed;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// Connects to `address` and completes a TLS handshake under `config`, all within `limit`.
pub(super) async fn handshake(
    address: SocketAddr,
    config: Arc<ClientConfig>,
    limit: Duration,
) -> Result<std::io::Result<TlsStream<TcpStream>>, Elapsed> {
    let handshake = async {
        let tcp = TcpStream::connect(address).await?;
        TlsConnector::from(config).connect(ServerName::IpAddress(address.ip().into()), tcp).await
    };
    tokio::time::timeout(limit, handshake).await
}

/// The TLS error a failed handshake carries, if it failed in TLS.
pub(super) fn tls_error(error: &std::io::Error) -> Option<&rustls::Error> {
    error.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>())
}
