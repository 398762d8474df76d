//! A real authoritative DNS server on loopback for tests, the demo and benchmarks.
//!
//! [`DnsServer`] answers over UDP and TCP on `127.0.0.1` (one ephemeral port for both) from
//! [`Records`] that can be changed while it runs. It is built on hickory-server with a small
//! request handler:
//!
//! - a known name answers its records of the asked type, following CNAMEs inside the data (or,
//!   with [`Records::follow_cnames`] off, only the first CNAME, for the resolver to follow);
//! - a known name without records of that type answers NOERROR with no records (and an SOA);
//! - an unknown name answers NXDOMAIN (with an SOA, so resolvers cache the negative answer).
//!
//! Its [`Mode`] can make it answer SERVFAIL or REFUSED to everything, or stop answering at all
//! while still holding its port ([`DnsServer::pause`] / [`DnsServer::resume`]);
//! [`Records::fault`] does the same for one name and query type only. [`DnsServer::set_delay`]
//! holds every answer back for a while, so lookups stay in flight. [`Records::extra_a`] and its
//! siblings send records of other owners along with a name's answers, in the answer or the
//! additional section, as a resolver or forwarder passing records along would.
//!
//! ```no_run
//! # async fn demo() -> Result<(), testdns::Error> {
//! use testdns::{DnsServer, Records};
//! let server = DnsServer::start(Records::new().a("n1.example.com", "10.0.0.1")).await?;
//! println!("nameserver at {}", server.addr());
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

mod records;

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use hickory_server::Server;
use hickory_server::net::runtime::Time;
use hickory_server::proto::op::{Edns, Header, HeaderCounts, Metadata, ResponseCode};
use hickory_server::proto::rr::LowerName;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;

pub use records::{Mode, QueryType, Records, Section};
use records::{Reply, parse_name};

/// Default TTL of answers and of negative answers (the SOA minimum), in seconds.
pub const DEFAULT_TTL: u32 = 300;

/// How long an idle TCP connection is kept open.
const TCP_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// An error starting or configuring a [`DnsServer`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A name or address given to [`Records`] does not parse.
    #[error("invalid test DNS records: {0}")]
    InvalidRecords(String),
    /// The sockets could not be bound.
    #[error("cannot bind the test DNS server: {0}")]
    Bind(#[from] io::Error),
    /// The server's own thread could not be started.
    #[error("cannot start the test DNS server thread: {0}")]
    Thread(String),
}

/// State shared between the [`DnsServer`] handle and its request handler.
#[derive(Debug)]
struct Shared {
    records: RwLock<Records>,
    mode: AtomicU8,
    /// How long each answer is held back, in milliseconds.
    delay_millis: AtomicU64,
    total_queries: AtomicU64,
    queries_by_name: Mutex<HashMap<LowerName, u64>>,
}

struct Handler(Arc<Shared>);

impl Handler {
    fn plan(&self, request: &Request) -> Reply {
        if let Some(reply) = Reply::imposed_by(Mode::from_u8(self.0.mode.load(Ordering::SeqCst))) {
            return reply;
        }
        let [query] = request.queries.queries() else {
            return Reply::Error(ResponseCode::FormErr);
        };
        let records = self.0.records.read().unwrap_or_else(PoisonError::into_inner);
        records.reply(query.original().name(), query.query_type())
    }
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let shared = &self.0;
        shared.total_queries.fetch_add(1, Ordering::Relaxed);
        if let Some(query) = request.queries.queries().first() {
            let mut counts = shared.queries_by_name.lock().unwrap_or_else(PoisonError::into_inner);
            *counts.entry(query.name().clone()).or_insert(0) += 1;
        }
        let delay = shared.delay_millis.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }

        let builder = MessageResponseBuilder::from_message_request(request);
        let result = match self.plan(request) {
            Reply::Silent => return no_response(request),
            Reply::Error(code) => response_handle.send_response(builder.error_msg(&request.metadata, code)).await,
            Reply::Answer { code, answers, soa, additionals } => {
                let edns = request.edns.as_ref().map(|request_edns| {
                    let mut edns = Edns::new();
                    edns.set_max_payload(request_edns.max_payload().max(512));
                    edns
                });
                let mut builder = builder;
                if let Some(edns) = &edns {
                    builder.edns(edns);
                }
                let mut metadata = Metadata::response_from_request(&request.metadata);
                metadata.authoritative = true;
                metadata.response_code = code;
                let response = builder.build(metadata, answers.iter(), [], soa.as_deref(), additionals.iter());
                response_handle.send_response(response).await
            }
        };
        result.unwrap_or_else(|error| {
            tracing::debug!(%error, "testdns: cannot send response");
            no_response(request)
        })
    }
}

/// The `ResponseInfo` for a query left unanswered.
fn no_response(request: &Request) -> ResponseInfo {
    let mut metadata = Metadata::response_from_request(&request.metadata);
    metadata.response_code = ResponseCode::ServFail;
    ResponseInfo::from(Header { metadata, counts: HeaderCounts::default() })
}

/// A running DNS server on loopback; it stops when dropped.
pub struct DnsServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    runner: Runner,
}

enum Runner {
    /// Tasks on the runtime of the caller of [`DnsServer::start`].
    Task(Server<Handler>),
    /// A dedicated thread with its own runtime, see [`DnsServer::start_on_thread`].
    Thread { stop: Option<tokio::sync::oneshot::Sender<()>>, thread: Option<std::thread::JoinHandle<()>> },
}

impl std::fmt::Debug for DnsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DnsServer").field("addr", &self.addr).field("mode", &self.mode()).finish_non_exhaustive()
    }
}

impl DnsServer {
    /// Starts serving `records` over UDP and TCP on `127.0.0.1`, on one ephemeral port, as tasks
    /// of the current tokio runtime: it answers only while that runtime runs, so a caller that
    /// blocks its thread (on a current-thread runtime) should use [`DnsServer::start_on_thread`].
    pub async fn start(records: Records) -> Result<Self, Error> {
        records.check().map_err(Error::InvalidRecords)?;
        let (udp, tcp) = bind_loopback()?;
        let addr = udp.local_addr()?;
        let shared = new_shared(records);
        let server = serve(&shared, udp, tcp)?;
        Ok(Self { addr, shared, runner: Runner::Task(server) })
    }

    /// Like [`DnsServer::start`], but serves from a dedicated thread with its own runtime, so it
    /// works from synchronous code and does not compete with the caller's runtime.
    pub fn start_on_thread(records: Records) -> Result<Self, Error> {
        records.check().map_err(Error::InvalidRecords)?;
        let (udp, tcp) = bind_loopback()?;
        Self::serve_on_thread(records, udp, tcp)
    }

    /// Like [`DnsServer::start_on_thread`], on `addr` rather than an ephemeral port of 127.0.0.1:
    /// e.g. port 53 of a loopback address, for a client that only reads `/etc/resolv.conf`
    /// (binding port 53 needs root or `CAP_NET_BIND_SERVICE`).
    pub fn start_on_thread_at(records: Records, addr: SocketAddr) -> Result<Self, Error> {
        records.check().map_err(Error::InvalidRecords)?;
        let udp = std::net::UdpSocket::bind(addr)?;
        let tcp = std::net::TcpListener::bind(udp.local_addr()?)?;
        udp.set_nonblocking(true)?;
        tcp.set_nonblocking(true)?;
        Self::serve_on_thread(records, udp, tcp)
    }

    fn serve_on_thread(records: Records, udp: std::net::UdpSocket, tcp: std::net::TcpListener) -> Result<Self, Error> {
        let addr = udp.local_addr()?;
        let shared = new_shared(records);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), Error>>();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("testdns-{}", addr.port()))
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = ready_tx.send(Err(Error::Thread(e.to_string())));
                        return;
                    }
                };
                runtime.block_on(async move {
                    match serve(&thread_shared, udp, tcp) {
                        Ok(server) => {
                            let _ = ready_tx.send(Ok(()));
                            // Until stopped or the handle is gone.
                            let _ = stop_rx.await;
                            drop(server);
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                        }
                    }
                });
            })
            .map_err(|e| Error::Thread(e.to_string()))?;
        match ready_rx.recv() {
            Ok(Ok(())) => {
                Ok(Self { addr, shared, runner: Runner::Thread { stop: Some(stop_tx), thread: Some(thread) } })
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Error::Thread("server thread exited".to_owned())),
        }
    }

    /// A server that holds its port but never answers (clients time out).
    pub async fn unresponsive() -> Result<Self, Error> {
        let server = Self::start(Records::new()).await?;
        server.set_mode(Mode::Unresponsive);
        Ok(server)
    }

    /// A server that answers SERVFAIL to every query.
    pub async fn servfail() -> Result<Self, Error> {
        let server = Self::start(Records::new()).await?;
        server.set_mode(Mode::ServFail);
        Ok(server)
    }

    /// The address of both the UDP socket and the TCP listener.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Replaces all records.
    pub fn set_records(&self, records: Records) -> Result<(), Error> {
        records.check().map_err(Error::InvalidRecords)?;
        *self.records_mut() = records;
        Ok(())
    }

    /// Adds records (merged into existing names; the TTL and CNAME-following of `records` are
    /// ignored).
    pub fn add(&self, records: Records) -> Result<(), Error> {
        records.check().map_err(Error::InvalidRecords)?;
        self.records_mut().merge(records);
        Ok(())
    }

    /// Removes every record of `name`, which then answers NXDOMAIN. Returns whether it existed.
    pub fn remove(&self, name: &str) -> Result<bool, Error> {
        let name = parse_name(name).map_err(Error::InvalidRecords)?;
        Ok(self.records_mut().names.remove(&LowerName::new(&name)).is_some())
    }

    /// Changes how the server treats queries from now on.
    pub fn set_mode(&self, mode: Mode) {
        self.shared.mode.store(mode as u8, Ordering::SeqCst);
    }

    /// How the server currently treats queries.
    pub fn mode(&self) -> Mode {
        Mode::from_u8(self.shared.mode.load(Ordering::SeqCst))
    }

    /// Stops answering (as if the server were down) while keeping the port.
    pub fn pause(&self) {
        self.set_mode(Mode::Unresponsive);
    }

    /// Answers from the records again, on the same address.
    pub fn resume(&self) {
        self.set_mode(Mode::Answer);
    }

    /// Holds every answer back for `delay` from now on (each query waits on its own, so lookups
    /// overlap); `Duration::ZERO` answers at once again. The mode is read after the delay.
    pub fn set_delay(&self, delay: Duration) {
        let millis = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.shared.delay_millis.store(millis, Ordering::SeqCst);
    }

    /// Number of queries received (answered or not) since the start.
    pub fn total_queries(&self) -> u64 {
        self.shared.total_queries.load(Ordering::Relaxed)
    }

    /// Number of queries received for `name` (any type, case-insensitive, trailing dot optional).
    pub fn queries_for(&self, name: &str) -> u64 {
        let Ok(name) = parse_name(name) else {
            return 0;
        };
        self.shared
            .queries_by_name
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&LowerName::new(&name))
            .copied()
            .unwrap_or(0)
    }

    fn records_mut(&self) -> std::sync::RwLockWriteGuard<'_, Records> {
        self.shared.records.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        match &mut self.runner {
            // Dropping the server aborts its tasks; cancel first so they stop promptly.
            Runner::Task(server) => server.shutdown_token().cancel(),
            Runner::Thread { stop, thread } => {
                if let Some(stop) = stop.take() {
                    let _ = stop.send(());
                }
                if let Some(thread) = thread.take() {
                    let _ = thread.join();
                }
            }
        }
    }
}

fn new_shared(records: Records) -> Arc<Shared> {
    Arc::new(Shared {
        records: RwLock::new(records),
        mode: AtomicU8::new(Mode::Answer as u8),
        delay_millis: AtomicU64::new(0),
        total_queries: AtomicU64::new(0),
        queries_by_name: Mutex::new(HashMap::new()),
    })
}

/// Binds a UDP socket and a TCP listener on the same ephemeral port of 127.0.0.1.
fn bind_loopback() -> Result<(std::net::UdpSocket, std::net::TcpListener), Error> {
    let mut last_error = None;
    for _ in 0..32 {
        let udp = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
        let addr = udp.local_addr()?;
        match std::net::TcpListener::bind(addr) {
            Ok(tcp) => {
                udp.set_nonblocking(true)?;
                tcp.set_nonblocking(true)?;
                return Ok((udp, tcp));
            }
            Err(e) => last_error = Some(e),
        }
    }
    Err(Error::Bind(last_error.unwrap_or_else(|| io::Error::new(io::ErrorKind::AddrInUse, "no free port"))))
}

/// Registers the sockets with a hickory server on the current runtime.
fn serve(shared: &Arc<Shared>, udp: std::net::UdpSocket, tcp: std::net::TcpListener) -> Result<Server<Handler>, Error> {
    let udp = tokio::net::UdpSocket::from_std(udp)?;
    let tcp = tokio::net::TcpListener::from_std(tcp)?;
    let mut server = Server::new(Handler(shared.clone()));
    server.register_socket(udp);
    server.register_listener(tcp, TCP_IDLE_TIMEOUT, 64);
    Ok(server)
}
