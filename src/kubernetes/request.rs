//! Requests the controller sends to the apiserver by path: one CSR read by name ([`read_csr`])
//! and the approval write (`write.rs`), with one error ([`RequestError`]) and one time limit
//! ([`within`]): the client sets no read timeout of its own, and an apiserver that stopped
//! answering would otherwise hold the CSR.

use std::time::Duration;

use kube::Client;
use tokio::time::Instant;

use crate::kubernetes::csr_name::csr_path;
use crate::kubernetes::object_fields::Csr;
use crate::kubernetes::retry_after;

/// Why a request to the apiserver failed.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The cached CSR has no resourceVersion to precondition the write on.
    #[error("the CSR has no resourceVersion to precondition the write on")]
    NoResourceVersion,
    /// No answer within the request's time limit (given up; the next attempt decides).
    #[error("no answer within {:.1?}", .0)]
    TimedOut(Duration),
    /// The apiserver answered with an error, or the request failed on its way.
    #[error(transparent)]
    Api(#[from] kube::Error),
}

impl RequestError {
    /// The HTTP status the apiserver answered with, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            RequestError::Api(kube::Error::Api(status)) => Some(status.code),
            _ => None,
        }
    }

    /// How long the apiserver asked to wait before the next attempt ([`retry_after::told`]): a
    /// 429's `Retry-After`, bounded.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            RequestError::Api(kube::Error::Api(status)) => retry_after::told(status),
            _ => None,
        }
    }
}

/// Waits for `request` until `deadline`; past it, [`RequestError::TimedOut`] with the time that
/// was left when it started.
pub(crate) async fn within<T>(
    deadline: Instant,
    request: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, RequestError> {
    let timeout = deadline.saturating_duration_since(Instant::now());
    match tokio::time::timeout_at(deadline, request).await {
        Ok(answer) => Ok(answer?),
        Err(_) => Err(RequestError::TimedOut(timeout)),
    }
}

/// A request of `builder` carrying `body`, or the error kube gives a request it cannot build.
pub(crate) fn built(builder: http::request::Builder, body: Vec<u8>) -> Result<http::Request<Vec<u8>>, kube::Error> {
    builder.body(body).map_err(|error| kube::Error::BuildRequest(kube::core::request::Error::BuildRequest(error)))
}

/// Reads the CSR `name` from the apiserver, given up after `timeout`: `None` when there is none
/// (404).
pub async fn read_csr(client: &Client, name: &str, timeout: Duration) -> Result<Option<Csr>, RequestError> {
    let request = built(http::Request::get(csr_path(name)), Vec::new())?;
    match within(Instant::now() + timeout, client.request::<Csr>(request)).await {
        Err(error) if error.status() == Some(404) => Ok(None),
        read => read.map(Some),
    }
}
