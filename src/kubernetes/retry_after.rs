//! When the apiserver says to come back: the wait of a `429 Too Many Requests` (or of any error
//! Status naming one), read from the Status's `details.retryAfterSeconds` ([`told`]), bounded;
//! and [`carry_header`], on every response of the client, which puts a 429's `Retry-After` header
//! into that field: kube-apiserver's priority-and-fairness and inflight filters answer a plain
//! text body with the wait in the header only, and the client reads only the body.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use kube::client::DynBody;
use kube::core::Status;
use serde_json::{Value, json};

/// The longest wait honoured: a longer one is cut to it, so no answer holds a CSR back for long.
pub const LONGEST_WAIT: Duration = Duration::from_secs(60);
/// The wait of a 429 naming none: the shortest kube-apiserver names.
pub const SHORTEST_WAIT: Duration = Duration::from_secs(1);

/// The error of the client's requests.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The wait the apiserver asked for with `status`: its `details.retryAfterSeconds`, at most
/// [`LONGEST_WAIT`]; [`SHORTEST_WAIT`] for a 429 naming none (or 0); `None` for any other status
/// naming none.
pub fn told(status: &Status) -> Option<Duration> {
    let seconds = status.details.as_ref().map_or(0, |details| details.retry_after_seconds);
    if seconds > 0 {
        return Some(Duration::from_secs(seconds.into()).min(LONGEST_WAIT));
    }
    (status.code == StatusCode::TOO_MANY_REQUESTS.as_u16()).then_some(SHORTEST_WAIT)
}

/// `response` as it is, unless it is a 429 whose `Retry-After` header names whole seconds: then
/// with those seconds in its Status body's `details.retryAfterSeconds` where the body names no
/// positive wait, a body that is no Status (kube-apiserver's plain text) becoming a Status that
/// carries its text as message.
pub(crate) async fn carry_header(response: Response<Box<DynBody>>) -> Result<Response<Box<DynBody>>, BoxError> {
    let Some(seconds) = header_seconds(&response) else { return Ok(response) };
    let (mut parts, body) = response.into_parts();
    let bytes = body.collect().await?.to_bytes();
    let carried = with_wait(&bytes, seconds);
    parts.headers.remove(CONTENT_LENGTH);
    parts.headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let body: Box<DynBody> = Box::new(Full::new(carried).map_err(|never: Infallible| -> BoxError { match never {} }));
    Ok(Response::from_parts(parts, body))
}

/// The seconds of a 429's `Retry-After` header when it names whole seconds (more than `u32` holds
/// counts as the most it holds); `None` for any other response, or a date, or anything else.
fn header_seconds<B>(response: &Response<B>) -> Option<u32> {
    if response.status() != StatusCode::TOO_MANY_REQUESTS {
        return None;
    }
    let text = response.headers().get(RETRY_AFTER)?.to_str().ok()?.trim();
    if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    Some(text.parse().unwrap_or(u32::MAX))
}

/// The body `body` of a 429 with `seconds` as its Status's `details.retryAfterSeconds`, unless
/// it names a positive wait already.
fn with_wait(body: &[u8], seconds: u32) -> Bytes {
    let mut status = match serde_json::from_slice::<Value>(body) {
        Ok(value) if value["kind"] == "Status" => value,
        _ => json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": String::from_utf8_lossy(body).trim(),
            "reason": "TooManyRequests",
            "code": StatusCode::TOO_MANY_REQUESTS.as_u16(),
        }),
    };
    let named = status["details"]["retryAfterSeconds"].as_u64().is_some_and(|named| named > 0);
    if !named {
        if !status["details"].is_object() {
            status["details"] = json!({});
        }
        status["details"]["retryAfterSeconds"] = seconds.into();
    }
    Bytes::from(status.to_string())
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http::Request;
    use kube::Client;
    use kube::client::{Body, ClientBuilder};
    use tower::ServiceExt as _;
    use tower::util::AndThenLayer;

    use super::*;
    use crate::kubernetes::request::RequestError;

    /// What the client's error says to wait when the apiserver answers `code`, with a
    /// `Retry-After` header `header` when given, and `body`: through a real kube client with
    /// [`carry_header`] on its responses, as the controller's client has it.
    async fn wait_of(code: u16, header: Option<&'static str>, body: &'static str) -> Option<Duration> {
        let service = tower::service_fn(move |_: Request<Body>| async move {
            let mut response = Response::builder().status(code);
            if let Some(header) = header {
                response = response.header(RETRY_AFTER, header);
            }
            let body: Box<DynBody> =
                Box::new(Full::new(Bytes::from(body)).map_err(|never: Infallible| -> BoxError { match never {} }));
            Ok::<_, BoxError>(response.body(body).unwrap())
        });
        let service = service.map_err(BoxError::from);
        let client: Client =
            ClientBuilder::new(service, "default").with_layer(&AndThenLayer::new(carry_header)).build();
        let request = Request::get("/api/v1/namespaces").body(Vec::new()).unwrap();
        let error = client.request::<Value>(request).await.map(|_| ()).unwrap_err();
        RequestError::from(error).retry_after()
    }

    const PLAIN: &str = "Too many requests, please try again later.\n";

    fn status(code: u16, details: &str) -> String {
        format!(
            r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","message":"m","reason":"r","code":{code}{details}}}"#
        )
    }

    #[tokio::test]
    async fn the_header_of_a_plain_429_is_the_wait() {
        assert_eq!(wait_of(429, Some("5"), PLAIN).await, Some(Duration::from_secs(5)));
        assert_eq!(wait_of(429, Some(" 2 "), PLAIN).await, Some(Duration::from_secs(2)));
    }

    #[tokio::test]
    async fn a_status_naming_a_wait_keeps_it_and_one_naming_none_takes_the_header() {
        let named: &'static str = status(429, r#","details":{"retryAfterSeconds":7}"#).leak();
        assert_eq!(wait_of(429, Some("3"), named).await, Some(Duration::from_secs(7)));
        assert_eq!(wait_of(429, None, named).await, Some(Duration::from_secs(7)));
        let none: &'static str = status(429, r#","details":{"name":"x"}"#).leak();
        assert_eq!(wait_of(429, Some("3"), none).await, Some(Duration::from_secs(3)));
        let negative: &'static str = status(429, r#","details":{"retryAfterSeconds":-4}"#).leak();
        assert_eq!(wait_of(429, Some("3"), negative).await, Some(Duration::from_secs(3)));
    }

    #[tokio::test]
    async fn huge_waits_are_cut_to_the_longest() {
        assert_eq!(wait_of(429, Some("86400"), PLAIN).await, Some(LONGEST_WAIT));
        assert_eq!(wait_of(429, Some("99999999999999999999999"), PLAIN).await, Some(LONGEST_WAIT));
        let huge: &'static str = status(429, r#","details":{"retryAfterSeconds":4294967295}"#).leak();
        assert_eq!(wait_of(429, None, huge).await, Some(LONGEST_WAIT));
    }

    #[tokio::test]
    async fn a_429_naming_no_usable_wait_waits_the_shortest() {
        for header in [None, Some("-3"), Some("0"), Some("soon"), Some(""), Some("Wed, 21 Oct 2015 07:28:00 GMT")] {
            assert_eq!(wait_of(429, header, PLAIN).await, Some(SHORTEST_WAIT), "{header:?}");
        }
        let negative: &'static str = status(429, r#","details":{"retryAfterSeconds":-4}"#).leak();
        assert_eq!(wait_of(429, None, negative).await, Some(SHORTEST_WAIT));
    }

    /// The Status [`with_wait`] makes of `body` with a `Retry-After` of `seconds`.
    fn carried(body: &str, seconds: u32) -> Value {
        serde_json::from_slice(&with_wait(body.as_bytes(), seconds)).unwrap()
    }

    #[test]
    fn a_body_that_is_no_status_becomes_one_carrying_its_text() {
        let other = carried(r#"{"kind":"Other"}"#, 3);
        assert_eq!(
            (&other["kind"], &other["code"], &other["message"], &other["details"]["retryAfterSeconds"]),
            (&json!("Status"), &json!(429), &json!(r#"{"kind":"Other"}"#), &json!(3))
        );
    }

    #[test]
    fn a_status_keeps_its_details_and_a_wait_of_zero_is_no_wait() {
        let zero = carried(&status(429, r#","details":{"name":"x","retryAfterSeconds":0}"#), 5);
        assert_eq!((&zero["details"]["name"], &zero["details"]["retryAfterSeconds"]), (&json!("x"), &json!(5)));
        let named = carried(&status(429, r#","details":{"name":"x","retryAfterSeconds":7}"#), 5);
        assert_eq!(named["details"]["retryAfterSeconds"], json!(7));
        let text = carried(&status(429, r#","details":"x""#), 5);
        assert_eq!(text["details"], json!({"retryAfterSeconds": 5}), "details that are no object are replaced");
    }

    #[tokio::test]
    async fn other_errors_name_a_wait_only_in_their_status() {
        assert_eq!(wait_of(503, Some("5"), PLAIN).await, None);
        let conflict: &'static str = status(409, "").leak();
        assert_eq!(wait_of(409, None, conflict).await, None);
        let timeout: &'static str = status(504, r#","details":{"retryAfterSeconds":2}"#).leak();
        assert_eq!(wait_of(504, None, timeout).await, Some(Duration::from_secs(2)));
    }
}
