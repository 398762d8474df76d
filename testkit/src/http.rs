//! A plain HTTP/1.1 GET on loopback, for the approver's `/readyz` and `/metrics`.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// GETs `path` from 127.0.0.1:`port`; the status code and body, or `None` when nothing answers
/// or the answer is not HTTP.
pub async fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Some((code, body))
}

/// Whether 127.0.0.1:`port` answers `/readyz` with 200.
pub async fn ready(port: u16) -> bool {
    get(port, "/readyz").await.is_some_and(|(code, _)| code == 200)
}
