//! [`FaultProxy`]: a plain-HTTP proxy in front of kube-apiserver that fails, cuts, expires,
//! throttles (429) and holds requests on command, and counts what passes.

mod seen;
mod serve;
mod throttle;

pub use seen::Seen;
pub use throttle::Reconciling;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use tempfile::TempDir;
use tokio::sync::{oneshot, watch};

use crate::{ControlPlane, Error, kubeconfig};

/// What [`FaultProxy::fail_writes`] does to approval writes (PATCH, PUT or POST of a path ending
/// in `/approval`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WriteFault {
    /// They reach the apiserver.
    #[default]
    Pass,
    /// They are answered `503 Service Unavailable` with a `metav1.Status`.
    Unavailable,
    /// Their connection is reset (TCP RST) without a reply.
    Reset,
}

/// Which new requests [`FaultProxy::block`] holds up, and how.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Block {
    /// None.
    #[default]
    Off,
    /// Watch requests wait unanswered until the block is lifted, then go on like any request
    /// (the other switches apply as they are then).
    HangWatches,
    /// Every request waits unanswered until the block is lifted, then goes on.
    HangAll,
    /// Watch requests have their connection reset without a reply.
    RefuseWatches,
    /// Every request has its connection reset without a reply: an apiserver unreachable for the
    /// clients of this proxy only.
    RefuseAll,
}

/// One write (a request other than GET, HEAD or OPTIONS) the proxy saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// When it arrived.
    pub at: SystemTime,
    /// `PATCH`, `PUT`, `POST`, `DELETE`...
    pub method: String,
    /// Its path and query, as sent.
    pub target: String,
    /// Whether it is an approval write: a PATCH, PUT or POST of a path ending in `/approval`.
    pub approval: bool,
    /// The status the client got; `None` when its connection was reset, by a fault or because the
    /// apiserver was unreachable.
    pub status: Option<u16>,
    /// Whether the answer came from a fault ([`FaultProxy::fail_writes`], [`FaultProxy::block`])
    /// rather than from the apiserver.
    pub injected: bool,
}

/// The switches, changed while the proxy runs and read by every request as it arrives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Switches {
    writes: WriteFault,
    csr_reads: WriteFault,
    expire_watches: bool,
    block: Block,
    slow_initial_events: Option<Duration>,
    five_digit_years: bool,
    throttle: Option<u32>,
    throttle_upkeep: Option<u32>,
}

/// What a CSR's or a Node's name holds for [`FaultProxy::serve_five_digit_years`] to serve it
/// with a creation time of the year 10000.
pub const FIVE_DIGIT_YEAR_MARKER: &str = "five-digit-year";

/// What the proxy's requests share with its handle.
#[derive(Debug)]
struct Shared {
    switches: watch::Sender<Switches>,
    /// Bumped by [`FaultProxy::cut_watches`]; every response streaming ends when it changes.
    cuts: watch::Sender<u64>,
    writes: Mutex<Vec<Write>>,
    watch_requests: AtomicU64,
    expired_watches: AtomicU64,
    held_initial_events_ends: AtomicU64,
    csr_reads: AtomicU64,
    failed_csr_reads: AtomicU64,
    /// The reconcile's requests (CSR reads by name, approval writes), for [`FaultProxy::throttle`].
    reconciling: Mutex<Vec<Reconciling>>,
    /// Every request not refused by a [`Block`], for [`FaultProxy::requests`].
    seen: Mutex<Vec<Seen>>,
}

impl Shared {
    fn record(&self, write: Write) {
        self.writes.lock().unwrap_or_else(PoisonError::into_inner).push(write);
    }
}

/// A proxy on `127.0.0.1:<ephemeral port>` speaking plain HTTP/1.1, forwarding every request to a
/// control plane's apiserver as the admin (method, path and query, body, and headers such as
/// `Impersonate-User`, `Accept` and `Content-Type` pass through; responses stream back, so watches
/// work), unless a fault switch says otherwise. It runs on a thread and runtime of its own, so a
/// test's blocking calls do not stall it; dropping it ends it and every connection.
///
/// ```no_run
/// # async fn demo() -> Result<(), testenv::Error> {
/// let control_plane = testenv::ControlPlane::start().await?;
/// let proxy = testenv::FaultProxy::start(&control_plane).await?;
/// // run a client with --kubeconfig proxy.kubeconfig_path(), then:
/// proxy.fail_writes(testenv::WriteFault::Unavailable);
/// proxy.cut_watches();
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct FaultProxy {
    address: SocketAddr,
    kubeconfig_path: PathBuf,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    _dir: TempDir,
}

impl FaultProxy {
    /// Starts a proxy in front of `control_plane`'s apiserver, with every switch off, and writes a
    /// kubeconfig pointing at it (`http://127.0.0.1:<port>`, no credentials).
    pub async fn start(control_plane: &ControlPlane) -> Result<FaultProxy, Error> {
        let admin = control_plane.admin_kubeconfig().clone();
        let shared = Arc::new(Shared {
            switches: watch::Sender::new(Switches::default()),
            cuts: watch::Sender::new(0),
            writes: Mutex::default(),
            watch_requests: AtomicU64::new(0),
            expired_watches: AtomicU64::new(0),
            held_initial_events_ends: AtomicU64::new(0),
            csr_reads: AtomicU64::new(0),
            failed_csr_reads: AtomicU64::new(0),
            reconciling: Mutex::default(),
            seen: Mutex::default(),
        });
        let (ready, listening) = oneshot::channel();
        let (stop, stopped) = oneshot::channel();
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("testenv-fault-proxy".to_owned())
            .spawn(move || serve::run(&admin, thread_shared, ready, stopped))
            .map_err(Error::io("starting the fault proxy's thread"))?;
        let address = match listening.await {
            Ok(result) => result?,
            Err(_) => return Err(Error::Unexpected("the fault proxy's thread ended before listening".to_owned())),
        };
        let dir = tempfile::Builder::new()
            .prefix("testenv-proxy-")
            .tempdir()
            .map_err(Error::io("creating the fault proxy's directory"))?;
        let kubeconfig_path = dir.path().join("kubeconfig");
        kubeconfig::write(&kubeconfig::plain(&format!("http://{address}")), &kubeconfig_path)?;
        Ok(FaultProxy { address, kubeconfig_path, shared, stop: Some(stop), thread: Some(thread), _dir: dir })
    }

    /// Where it listens (always on 127.0.0.1).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Its URL, `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Path of a kubeconfig pointing at the proxy, without credentials (the proxy adds the admin's).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// From now on, approval writes are answered as `fault` says ([`WriteFault::Pass`] ends it).
    pub fn fail_writes(&self, fault: WriteFault) {
        self.shared.switches.send_modify(|switches| switches.writes = fault);
    }

    /// From now on, reads of one CSR by name (a GET of `…/certificatesigningrequests/<name>`, not
    /// a watch) are answered as `fault` says ([`WriteFault::Pass`] ends it).
    pub fn fail_csr_reads(&self, fault: WriteFault) {
        self.shared.switches.send_modify(|switches| switches.csr_reads = fault);
    }

    /// How many reads of one CSR by name arrived so far, and how many of them a fault answered
    /// ([`FaultProxy::fail_csr_reads`]).
    pub fn csr_reads(&self) -> (u64, u64) {
        (self.shared.csr_reads.load(Ordering::Relaxed), self.shared.failed_csr_reads.load(Ordering::Relaxed))
    }

    /// Ends every response still streaming (watches above all) abruptly, so the clients see their
    /// connection break and must watch again. Requests arriving later are not affected.
    pub fn cut_watches(&self) {
        self.shared.cuts.send_modify(|generation| *generation += 1);
    }

    /// While `on`, every watch request (`watch=true` or `watch=1`) with a `resourceVersion` other
    /// than empty or `0` is answered `200` with one watch event, an `ERROR` carrying a `410
    /// Expired` Status ("too old resource version"), and ended: what the apiserver answers when a
    /// resourceVersion is no longer in its window, which makes a client list again.
    pub fn expire_watches(&self, on: bool) {
        self.shared.switches.send_modify(|switches| switches.expire_watches = on);
    }

    /// Holds up new requests as `block` says; [`Block::Off`] lifts it, and the requests waiting go on.
    pub fn block(&self, block: Block) {
        self.shared.switches.send_modify(|switches| switches.block = block);
    }

    /// While `Some(delay)`, every watch request with `sendInitialEvents=true` (a streaming list, as
    /// a client's first watch or its relist after a 410) has the bookmark ending its initial events
    /// (the one annotated `k8s.io/initial-events-end`) and whatever follows held back `delay`:
    /// its objects arrive at once, but the list completes only `delay` later. The switch is read
    /// as each request arrives; `None` ends it for the requests arriving later.
    pub fn slow_initial_events(&self, delay: Option<Duration>) {
        self.shared.switches.send_modify(|switches| switches.slow_initial_events = delay);
    }

    /// While `on`, every watch event (a streaming list's too) whose object's name holds
    /// [`FIVE_DIGIT_YEAR_MARKER`] is served with its `metadata.creationTimestamp` in the year
    /// 10000, as kube-apiserver serves a time given as `9999-12-31T23:00:00-05:00`: an object a
    /// client reading that time cannot decode. The switch is read as each request arrives.
    pub fn serve_five_digit_years(&self, on: bool) {
        self.shared.switches.send_modify(|switches| switches.five_digit_years = on);
    }

    /// While `Some(seconds)`, every CSR read by name and approval write (the requests a reconcile
    /// sends) is answered `429 Too Many Requests` with `Retry-After: <seconds>` and a plain text
    /// body, as kube-apiserver's priority-and-fairness and inflight filters shed load; `None`
    /// passes them on. Every one of them is recorded, throttled or not ([`FaultProxy::reconciling`]).
    pub fn throttle(&self, retry_after_seconds: Option<u32>) {
        self.shared.switches.send_modify(|switches| switches.throttle = retry_after_seconds);
    }

    /// While `Some(seconds)`, the requests that keep a client's view and leadership going are
    /// answered `429 Too Many Requests` with `Retry-After: <seconds>`, as [`FaultProxy::throttle`]
    /// answers the reconcile's: every watch and list (a watch's start, restart or relist), every
    /// request of a Lease but its watch (reads and renewals), every Event create. `None` passes
    /// them on. [`FaultProxy::requests`] tells which were throttled.
    pub fn throttle_upkeep(&self, retry_after_seconds: Option<u32>) {
        self.shared.switches.send_modify(|switches| switches.throttle_upkeep = retry_after_seconds);
    }

    /// Every request seen so far but those a [`Block`] refused, in order of arrival, with the 429s
    /// the throttles answered.
    pub fn requests(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Every CSR read by name and approval write seen so far, in order of arrival, with the 429s
    /// [`FaultProxy::throttle`] answered.
    pub fn reconciling(&self) -> Vec<Reconciling> {
        self.shared.reconciling.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// How many GET requests other than watches (reads by name, lists and their pages) arrived
    /// so far for `path` (for example `/api/v1/nodes`), whatever their query, but those a
    /// [`Block`] refused ([`FaultProxy::requests`] holds them).
    pub fn gets_of(&self, path: &str) -> u64 {
        let seen = self.shared.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let count =
            seen.iter().filter(|request| request.method == "GET" && !request.watch && request.path == path).count();
        u64::try_from(count).unwrap_or(u64::MAX)
    }

    /// Every write seen so far (Lease renewals and events too), in order of arrival.
    pub fn writes(&self) -> Vec<Write> {
        self.shared.writes.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Every approval write seen so far, in order of arrival.
    pub fn approval_writes(&self) -> Vec<Write> {
        self.writes().into_iter().filter(|write| write.approval).collect()
    }

    /// How many approval writes with `method` (`PATCH`, `PUT`, `POST`) arrived so far.
    pub fn approval_writes_by(&self, method: &str) -> usize {
        self.approval_writes().iter().filter(|write| write.method == method).count()
    }

    /// How many watch requests arrived so far, whatever happened to them.
    pub fn watch_requests(&self) -> u64 {
        self.shared.watch_requests.load(Ordering::Relaxed)
    }

    /// How many watch requests [`FaultProxy::expire_watches`] answered with the 410 event.
    pub fn expired_watches(&self) -> u64 {
        self.shared.expired_watches.load(Ordering::Relaxed)
    }

    /// How many initial-events-end bookmarks [`FaultProxy::slow_initial_events`] held back so far
    /// (counted when found, before their delay is over).
    pub fn held_initial_events_ends(&self) -> u64 {
        self.shared.held_initial_events_ends.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Lift every hold, so nothing waits on a proxy that is going away.
        self.shared.switches.send_modify(|switches| *switches = Switches::default());
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The loopback address the proxy binds (port chosen by the kernel).
const BIND: (Ipv4Addr, u16) = (Ipv4Addr::LOCALHOST, 0);
