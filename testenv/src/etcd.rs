//! A single-member etcd on loopback ports.

use std::path::Path;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::{Instant, sleep};

use crate::Error;
use crate::ports::free_port;
use crate::process::Supervised;

/// How long etcd may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running etcd and the URL clients reach it at.
#[derive(Debug)]
pub(crate) struct Etcd {
    pub(crate) process: Supervised,
    pub(crate) client_url: String,
}

/// Starts etcd with its data under `dir` and waits until its client port accepts connections.
/// `dir` is removed by the watchdog should this process die.
pub(crate) async fn start(binary: &Path, dir: &Path) -> Result<Etcd, Error> {
    let client_url = format!("http://127.0.0.1:{}", free_port()?);
    let peer_url = format!("http://127.0.0.1:{}", free_port()?);
    let args = vec![
        "--name=testenv".to_owned(),
        format!("--data-dir={}", dir.join("etcd").display()),
        format!("--listen-client-urls={client_url}"),
        format!("--advertise-client-urls={client_url}"),
        format!("--listen-peer-urls={peer_url}"),
        format!("--initial-advertise-peer-urls={peer_url}"),
        format!("--initial-cluster=testenv={peer_url}"),
        "--unsafe-no-fsync=true".to_owned(),
        "--log-level=warn".to_owned(),
    ];
    let mut process = Supervised::spawn("etcd", binary, &args, &dir.join("etcd.log"), Some(dir))?;
    let address = client_url.trim_start_matches("http://").to_owned();
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if TcpStream::connect(&address).await.is_ok() {
            return Ok(Etcd { process, client_url });
        }
        if let Some(status) = process.exited() {
            return Err(process.start_error(format!("exited with {status}")));
        }
        if Instant::now() > deadline {
            return Err(process.start_error(format!("no connection after {START_TIMEOUT:?}")));
        }
        sleep(Duration::from_millis(100)).await;
    }
}
