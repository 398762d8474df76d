//! [`super::FaultProxy::throttle`] and [`super::FaultProxy::throttle_upkeep`]: requests answered
//! `429 Too Many Requests` with `Retry-After`, as kube-apiserver sheds load under API Priority and
//! Fairness or `--max-requests-inflight`: the reconcile's (a CSR read by name, an approval write),
//! each recorded, or the upkeep's (watches and lists, the Lease's requests, Event creates).

use std::time::SystemTime;

use http::header::RETRY_AFTER;
use http::{HeaderValue, Response, StatusCode};

use super::Shared;
use super::seen::Seen;
use super::serve::{Relayed, fixed};

/// What kube-apiserver's inflight and priority-and-fairness filters answer (plain text, with the
/// wait in the `Retry-After` header only).
const TOO_MANY: &str = "Too many requests, please try again later.\n";

/// One request of a reconcile (a CSR read by name, an approval write) the proxy saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconciling {
    /// When it arrived.
    pub at: SystemTime,
    /// Its path.
    pub path: String,
    /// The `Retry-After` seconds of the 429 the proxy answered it with; `None` when it was passed on.
    pub throttled: Option<u32>,
}

/// Records a reconcile's request to `path` arriving `at`; the 429 to answer it with, with
/// `Retry-After: <seconds>`, while the proxy throttles (`throttle` is `Some(seconds)`).
pub(super) fn answer(shared: &Shared, throttle: Option<u32>, path: &str, at: SystemTime) -> Option<Response<Relayed>> {
    let seen = Reconciling { at, path: path.to_owned(), throttled: throttle };
    shared.reconciling.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(seen);
    Some(too_many(shared, throttle?))
}

/// Whether [`super::FaultProxy::throttle_upkeep`] answers `seen`: a watch or a list, a request of
/// a Lease (not its watch's), an Event's create.
pub(super) fn upkeep(seen: &Seen) -> bool {
    let resource = seen.resource();
    matches!(seen.verb(), "watch" | "list") || resource == "leases" || (seen.verb() == "create" && resource == "events")
}

/// A 429 with `Retry-After: <seconds>`.
pub(super) fn too_many(shared: &Shared, seconds: u32) -> Response<Relayed> {
    let mut response = fixed(StatusCode::TOO_MANY_REQUESTS, TOO_MANY.to_owned(), shared);
    response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(seconds));
    response
}
