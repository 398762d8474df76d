//! The proxy's serving side: its runtime, its connections, and what each request meets.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use http::header::{CONTENT_TYPE, HeaderName};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use kube::config::Kubeconfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use super::{BIND, Block, Seen, Shared, Switches, Write, WriteFault};
use crate::{Error, kubeconfig};

/// The watch event the apiserver sends when a watch's resourceVersion is too old.
const EXPIRED_EVENT: &str = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version","reason":"Expired","code":410}}"#;

/// The path of the CSR collection, followed by `/<name>` in a read of one CSR.
const CSR_COLLECTION: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests/";
/// The answer to an approval write (or a CSR read) while [`WriteFault::Unavailable`] is on.
const UNAVAILABLE_STATUS: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the fault proxy fails approval writes","reason":"ServiceUnavailable","code":503}"#;

/// Headers of one connection that are not passed on.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
];

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Runs the proxy on a runtime of this thread until `stop` resolves: builds the admin client,
/// binds, reports the address (or why not) on `ready`, and serves.
pub(super) fn run(
    admin: &Kubeconfig,
    shared: Arc<Shared>,
    ready: oneshot::Sender<Result<SocketAddr, Error>>,
    stop: oneshot::Receiver<()>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(source) => {
            let _ = ready.send(Err(Error::Io { context: "building the fault proxy's runtime".to_owned(), source }));
            return;
        }
    };
    runtime.block_on(async move {
        let started = async {
            // Pass on every answer as it comes: kube retries a 503 for minutes by default.
            let client = kubeconfig::client(admin, |config| config.default_retry = false).await?;
            let listener = TcpListener::bind(BIND).await.map_err(Error::io("binding the fault proxy"))?;
            let address = listener.local_addr().map_err(Error::io("reading the fault proxy's address"))?;
            Ok::<_, Error>((client, listener, address))
        };
        let (client, listener, address) = match started.await {
            Ok(started) => started,
            Err(error) => {
                let _ = ready.send(Err(error));
                return;
            }
        };
        if ready.send(Ok(address)).is_ok() {
            accept(listener, client, shared, stop).await;
        }
    });
}

/// Accepts connections until `stop` resolves (or its sender is dropped).
async fn accept(listener: TcpListener, client: kube::Client, shared: Arc<Shared>, mut stop: oneshot::Receiver<()>) {
    loop {
        tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    tokio::spawn(connection(stream, client.clone(), shared.clone()));
                }
            }
        }
    }
}

/// Serves one client connection. A second handle on its socket lets a fault reset it.
async fn connection(stream: TcpStream, client: kube::Client, shared: Arc<Shared>) {
    let Ok((stream, socket)) = with_second_handle(stream) else { return };
    let socket = Arc::new(socket);
    let service =
        hyper::service::service_fn(move |request| handle(request, client.clone(), shared.clone(), socket.clone()));
    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
}

fn with_second_handle(stream: TcpStream) -> std::io::Result<(TcpStream, std::net::TcpStream)> {
    let stream = stream.into_std()?;
    let second = stream.try_clone()?;
    Ok((TcpStream::from_std(stream)?, second))
}

/// Returned by the service to make hyper drop the connection without a reply.
#[derive(Debug, thiserror::Error)]
#[error("connection reset by the fault proxy")]
struct Reset;

/// Makes the connection end with a TCP RST once hyper drops it (on the [`Reset`] error).
fn reset(socket: &std::net::TcpStream) -> Reset {
    let _ = socket2::SockRef::from(socket).set_linger(Some(Duration::ZERO));
    Reset
}

/// What the proxy needs to know of a request.
struct Kind {
    write: bool,
    approval_write: bool,
    csr_read: bool,
    watch: bool,
    resource_version: String,
    initial_events: bool,
    continued: bool,
}

impl Kind {
    fn of(method: &Method, uri: &Uri) -> Kind {
        let approval_write =
            matches!(*method, Method::PATCH | Method::PUT | Method::POST) && uri.path().ends_with("/approval");
        let (mut watch, mut resource_version, mut initial_events, mut continued) = (false, String::new(), false, false);
        for pair in uri.query().unwrap_or_default().split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "watch" => watch = matches!(value, "true" | "1"),
                "resourceVersion" => value.clone_into(&mut resource_version),
                "sendInitialEvents" => initial_events = value == "true",
                "continue" => continued = !value.is_empty(),
                _ => {}
            }
        }
        let write = !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
        let one_csr =
            uri.path().strip_prefix(CSR_COLLECTION).is_some_and(|name| !name.is_empty() && !name.contains('/'));
        let csr_read = *method == Method::GET && !watch && one_csr;
        Kind { write, approval_write, csr_read, watch, resource_version, initial_events, continued }
    }

    /// Whether [`super::FaultProxy::expire_watches`] answers it.
    fn expirable(&self) -> bool {
        self.watch && !self.resource_version.is_empty() && self.resource_version != "0"
    }
}

async fn handle(
    request: Request<Incoming>,
    client: kube::Client,
    shared: Arc<Shared>,
    socket: Arc<std::net::TcpStream>,
) -> Result<Response<Relayed>, Reset> {
    let at = SystemTime::now();
    let kind = Kind::of(request.method(), request.uri());
    if kind.watch {
        shared.watch_requests.fetch_add(1, Ordering::Relaxed);
    }
    let (parts, body) = request.into_parts();
    let body = body.collect().await.map_err(|_| reset(&socket))?.to_bytes();
    let record = |status: Option<u16>, injected: bool| {
        if kind.write {
            let target = parts.uri.path_and_query().map(ToString::to_string).unwrap_or_default();
            let method = parts.method.to_string();
            shared.record(Write { at, method, target, approval: kind.approval_write, status, injected });
        }
    };
    let Some(switches) = hold(&shared, kind.watch).await else {
        record(None, true);
        return Err(reset(&socket));
    };
    let mut seen = Seen {
        at,
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        watch: kind.watch,
        continued: kind.continued,
        throttled: None,
    };
    seen.throttled = switches.throttle_upkeep.filter(|_| super::throttle::upkeep(&seen));
    let reconcile = kind.csr_read || kind.approval_write;
    if reconcile {
        seen.throttled = seen.throttled.or(switches.throttle);
    }
    let upkeep = seen.throttled.filter(|_| !reconcile);
    shared.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(seen);
    if let Some(seconds) = upkeep {
        record(Some(429), true);
        return Ok(super::throttle::too_many(&shared, seconds));
    }
    if switches.expire_watches && kind.expirable() {
        shared.expired_watches.fetch_add(1, Ordering::Relaxed);
        return Ok(fixed(StatusCode::OK, format!("{EXPIRED_EVENT}\n"), &shared));
    }
    if (kind.csr_read || kind.approval_write)
        && let Some(throttled) = super::throttle::answer(&shared, switches.throttle, parts.uri.path(), at)
    {
        record(Some(429), true);
        return Ok(throttled);
    }
    if kind.csr_read {
        shared.csr_reads.fetch_add(1, Ordering::Relaxed);
        let failed = |shared: &Shared| shared.failed_csr_reads.fetch_add(1, Ordering::Relaxed);
        match switches.csr_reads {
            WriteFault::Pass => {}
            WriteFault::Unavailable => {
                failed(&shared);
                return Ok(fixed(StatusCode::SERVICE_UNAVAILABLE, UNAVAILABLE_STATUS.to_owned(), &shared));
            }
            WriteFault::Reset => {
                failed(&shared);
                return Err(reset(&socket));
            }
        }
    }
    if kind.approval_write {
        match switches.writes {
            WriteFault::Pass => {}
            WriteFault::Unavailable => {
                record(Some(503), true);
                return Ok(fixed(StatusCode::SERVICE_UNAVAILABLE, UNAVAILABLE_STATUS.to_owned(), &shared));
            }
            WriteFault::Reset => {
                record(None, true);
                return Err(reset(&socket));
            }
        }
    }
    match forward(&client, &parts, body).await {
        Ok(response) => {
            record(Some(response.status().as_u16()), false);
            let (mut head, body) = response.into_parts();
            strip_hop_by_hop(&mut head.headers);
            let mut relayed = Relayed::new(body, &shared);
            if switches.five_digit_years && kind.watch {
                relayed.rewrite = Some(FiveDigitYears::default());
            }
            if let Some(delay) = switches.slow_initial_events.filter(|_| kind.watch && kind.initial_events) {
                relayed.hold = Some(Holdback { delay, shared, pending: BytesMut::new(), sleep: None });
            }
            Ok(Response::from_parts(head, relayed))
        }
        // The apiserver is unreachable: so is the proxy.
        Err(_) => {
            record(None, false);
            Err(reset(&socket))
        }
    }
}

/// Waits while the block holds this request; the switches it then goes on with, or `None` when it
/// is to be refused.
async fn hold(shared: &Shared, watch: bool) -> Option<Switches> {
    let mut switches = shared.switches.subscribe();
    loop {
        let now = *switches.borrow_and_update();
        match now.block {
            Block::RefuseAll => return None,
            Block::RefuseWatches if watch => return None,
            Block::HangAll => {}
            Block::HangWatches if watch => {}
            _ => return Some(now),
        }
        if switches.changed().await.is_err() {
            return Some(now);
        }
    }
}

/// Sends the request on to the apiserver as the admin.
async fn forward(
    client: &kube::Client,
    parts: &http::request::Parts,
    body: Bytes,
) -> Result<Response<kube::client::Body>, kube::Error> {
    let mut upstream = Request::builder()
        .method(parts.method.clone())
        .uri(parts.uri.clone())
        .body(kube::client::Body::from(body))
        .map_err(kube::Error::HttpError)?;
    for (name, value) in &parts.headers {
        if !is_hop_by_hop(name) && name != http::header::HOST {
            upstream.headers_mut().append(name.clone(), value.clone());
        }
    }
    client.send(upstream).await
}

fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(&name.as_str())
}

fn strip_hop_by_hop(headers: &mut http::HeaderMap) {
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// A JSON answer of the proxy's own.
pub(super) fn fixed(status: StatusCode, body: String, shared: &Shared) -> Response<Relayed> {
    let mut response = Response::new(Relayed::new(kube::client::Body::from(body.into_bytes()), shared));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    response
}

/// A response body passed on frame by frame, ended abruptly by [`super::FaultProxy::cut_watches`].
pub(super) struct Relayed {
    inner: kube::client::Body,
    /// Resolves at the next cut; `None` once it did.
    cut: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// Set by [`super::FaultProxy::slow_initial_events`]; `None` once the delay is over.
    hold: Option<Holdback>,
    /// Set by [`super::FaultProxy::serve_five_digit_years`].
    rewrite: Option<FiveDigitYears>,
}

/// Rewrites each complete watch event line whose object's name holds
/// [`super::FIVE_DIGIT_YEAR_MARKER`]: its creation time in the year 10000.
#[derive(Default)]
struct FiveDigitYears {
    /// An incomplete line, not passed on yet.
    pending: BytesMut,
}

impl FiveDigitYears {
    /// Takes in `data`; returns the complete lines in it, rewritten.
    fn take(&mut self, data: &[u8]) -> Bytes {
        self.pending.extend_from_slice(data);
        let Some(end) = self.pending.iter().rposition(|byte| *byte == b'\n') else { return Bytes::new() };
        let lines = self.pending.split_to(end + 1);
        let mut out = BytesMut::with_capacity(lines.len() + 1);
        for line in lines.split_inclusive(|byte| *byte == b'\n') {
            out.extend_from_slice(&five_digit_year(line));
        }
        out.freeze()
    }
}

/// `line` with its creation time in the year 10000 when its object's name holds the marker.
fn five_digit_year(line: &[u8]) -> Vec<u8> {
    const CREATED: &str = r#""creationTimestamp":""#;
    let Ok(text) = std::str::from_utf8(line) else { return line.to_vec() };
    const NAME: &str = r#""name":""#;
    // The first name of an event's object is its metadata.name.
    let name = text.find(NAME).map(|at| &text[at + NAME.len()..]).and_then(|rest| rest.split('"').next());
    let named = name.is_some_and(|name| name.contains(super::FIVE_DIGIT_YEAR_MARKER));
    match text.find(CREATED).map(|at| at + CREATED.len()) {
        Some(year) if named && text.len() >= year + 4 => {
            format!("{}10000{}", &text[..year], &text[year + 4..]).into_bytes()
        }
        _ => line.to_vec(),
    }
}

/// What holds back the initial-events-end bookmark of a streaming list, and what follows it.
struct Holdback {
    delay: Duration,
    shared: Arc<Shared>,
    /// What came from the apiserver and was not passed on yet: an incomplete line, or, once the
    /// bookmark is found, its line and everything after it.
    pending: BytesMut,
    /// Running once the bookmark is found.
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Holdback {
    /// Takes in `data`; returns the complete lines before the bookmark, and starts the delay when
    /// the bookmark's line is there.
    fn take(&mut self, data: &[u8]) -> Bytes {
        self.pending.extend_from_slice(data);
        let mut passed = 0;
        while let Some(end) = self.pending[passed..].iter().position(|byte| *byte == b'\n') {
            if is_initial_events_end(&self.pending[passed..passed + end]) {
                self.shared.held_initial_events_ends.fetch_add(1, Ordering::Relaxed);
                self.sleep = Some(Box::pin(tokio::time::sleep(self.delay)));
                break;
            }
            passed += end + 1;
        }
        self.pending.split_to(passed).freeze()
    }
}

/// Whether a watch event line is the bookmark ending a streaming list's initial events.
fn is_initial_events_end(line: &[u8]) -> bool {
    let Ok(line) = std::str::from_utf8(line) else { return false };
    line.contains(r#""type":"BOOKMARK""#) && line.contains(r#""k8s.io/initial-events-end":"true""#)
}

impl Relayed {
    fn new(inner: kube::client::Body, shared: &Shared) -> Relayed {
        let mut cuts = shared.cuts.subscribe();
        let cut = async move {
            let _ = cuts.changed().await;
        };
        Relayed { inner, cut: Some(Box::pin(cut)), hold: None, rewrite: None }
    }

    /// The next frame of the apiserver's body, rewritten as [`FiveDigitYears`] says when set.
    fn poll_inner(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        loop {
            let frame = std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx)).map(|f| f.map_err(BoxError::from));
            let Some(rewrite) = self.rewrite.as_mut() else { return Poll::Ready(frame) };
            match frame {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        let lines = rewrite.take(&data);
                        if !lines.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(lines))));
                        }
                    }
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                None if !rewrite.pending.is_empty() => {
                    let rest = rewrite.pending.split().freeze();
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(five_digit_year(&rest))))));
                }
                other => return Poll::Ready(other),
            }
        }
    }
}

impl Body for Relayed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let Some(cut) = self.cut.as_mut() else { return Poll::Ready(None) };
        if cut.as_mut().poll(cx).is_ready() {
            self.cut = None;
            return Poll::Ready(Some(Err("response cut by the fault proxy".into())));
        }
        loop {
            let Some(hold) = self.hold.as_mut() else {
                return self.poll_inner(cx);
            };
            if let Some(sleep) = hold.sleep.as_mut() {
                std::task::ready!(sleep.as_mut().poll(cx));
            }
            let frame = if hold.sleep.is_some() { None } else { std::task::ready!(self.poll_inner(cx)) };
            let Some(hold) = self.hold.as_mut() else { continue };
            match frame {
                // The delay is over, or the body ended: pass on what is left, then the rest as it comes.
                None => {
                    let rest = hold.pending.split().freeze();
                    self.hold = None;
                    if !rest.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(rest))));
                    }
                }
                Some(Err(error)) => return Poll::Ready(Some(Err(error))),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        let lines = hold.take(&data);
                        if !lines.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(lines))));
                        }
                    }
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.cut.is_none() || (self.hold.is_none() && self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        if self.hold.is_some() {
            return SizeHint::default();
        }
        self.inner.size_hint()
    }
}
