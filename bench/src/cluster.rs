//! The cluster side of the bench: CSRs created as their nodes (one admin client impersonating per
//! request), and a watch that timestamps every decision the moment the bench sees it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use http::HeaderValue;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::PostParams;
use kube::runtime::watcher;
use kube::{Client, Resource};
use tokio::sync::watch;

use testkit::csr::{ECDSA_SERVING_USAGES, SERVING_SIGNER};

use crate::csrs::NodeRequest;

/// How long the bench's CSR watch call lasts before it is renewed: longer than any phase.
const WATCH_SECONDS: u32 = 3 * 3600;

/// The CSR object node `request` submits, named `name`: what a kubelet with an ECDSA key asks.
pub fn csr_object(name: &str, request: &NodeRequest) -> CertificateSigningRequest {
    testkit::csr::object(name, SERVING_SIGNER, &ECDSA_SERVING_USAGES, &request.pem)
}

/// Creates the CSR as `system:node:<node>` in `system:nodes`: the admin client sends
/// `Impersonate-User`/`Impersonate-Group` on this one request, so the apiserver fills in
/// `spec.username` and `spec.groups` as if the node had asked, without a client per node.
pub async fn create_as_node(admin: &Client, name: &str, request: &NodeRequest) -> Result<CertificateSigningRequest> {
    let url = CertificateSigningRequest::url_path(&(), None);
    let body = serde_json::to_vec(&csr_object(name, request))?;
    let mut http = kube::core::Request::new(url).create(&PostParams::default(), body)?;
    let headers = http.headers_mut();
    headers.insert("Impersonate-User", HeaderValue::from_str(&format!("system:node:{}", request.node))?);
    headers.insert("Impersonate-Group", HeaderValue::from_static("system:nodes"));
    admin.request(http).await.with_context(|| format!("creating CSR {name} as {}", request.node))
}

/// Creates `bench-<prefix>-<i>` for every request, `concurrency` at a time, untimed.
pub async fn create_all(
    admin: &Client,
    prefix: &str,
    requests: &[NodeRequest],
    concurrency: usize,
) -> Result<Vec<CertificateSigningRequest>> {
    futures::stream::iter(requests.iter().enumerate())
        .map(|(i, request)| async move { create_as_node(admin, &csr_name(prefix, i), request).await })
        .buffer_unordered(concurrency.max(1))
        .try_collect()
        .await
}

/// The name of CSR `i` of a phase.
pub fn csr_name(prefix: &str, i: usize) -> String {
    format!("bench-{prefix}-{i}")
}

/// When the bench first saw each CSR decided, keyed by name.
#[derive(Clone)]
pub struct Decisions {
    seen: Arc<Mutex<HashMap<String, Seen>>>,
    count: watch::Receiver<usize>,
    synced: watch::Receiver<bool>,
    task: Arc<tokio::task::JoinHandle<()>>,
}

/// One decision as the bench saw it.
#[derive(Debug, Clone, Copy)]
pub struct Seen {
    /// When the watch delivered it.
    pub at: Instant,
    /// Approved (true) or Denied.
    pub approved: bool,
}

impl Decisions {
    /// Starts watching kubelet-serving CSRs; decided ones already present count too.
    pub fn watch(admin: &Client) -> Decisions {
        let api = kube::Api::<CertificateSigningRequest>::all(admin.clone());
        // One watch call for the whole phase (kube's default ends it after 290 s):
        // the apiserver counts a watch when it ends, so the bench's stays out of its counters
        // (crate::apiserver).
        let config =
            watcher::Config::default().fields(&format!("spec.signerName={SERVING_SIGNER}")).timeout(WATCH_SECONDS);
        let seen: Arc<Mutex<HashMap<String, Seen>>> = Arc::default();
        let (count_tx, count) = watch::channel(0);
        let (synced_tx, synced) = watch::channel(false);
        let sink = seen.clone();
        let task = tokio::spawn(async move {
            let mut stream = watcher(api, config).boxed();
            while let Some(event) = stream.next().await {
                let csr = match event {
                    Ok(watcher::Event::Apply(csr) | watcher::Event::InitApply(csr)) => csr,
                    Ok(watcher::Event::InitDone) => {
                        let _ = synced_tx.send(true);
                        continue;
                    }
                    Ok(_) | Err(_) => continue,
                };
                let at = Instant::now();
                let Some(approved) = decided(&csr) else { continue };
                let Some(name) = csr.metadata.name else { continue };
                if let Ok(mut seen) = sink.lock() {
                    seen.entry(name).or_insert(Seen { at, approved });
                    let _ = count_tx.send(seen.len());
                }
            }
        });
        Decisions { seen, count, synced, task: Arc::new(task) }
    }

    /// Waits until the watch has listed what exists.
    pub async fn wait_synced(&mut self, limit: Duration) -> Result<()> {
        tokio::time::timeout(limit, self.synced.wait_for(|s| *s))
            .await
            .context("the bench's CSR watch did not sync")?
            .context("the bench's CSR watch stopped")?;
        Ok(())
    }

    /// Waits until at least `n` CSRs are decided, at most `limit`.
    pub async fn wait_count(&mut self, n: usize, limit: Duration) -> Result<()> {
        let waited = tokio::time::timeout(limit, self.count.wait_for(|c| *c >= n)).await.map(|r| r.is_ok());
        match waited {
            Ok(true) => Ok(()),
            Ok(false) => bail!("the bench's CSR watch stopped"),
            Err(_) => bail!("only {} of {n} CSRs were decided within {limit:?}", self.count()),
        }
    }

    /// Decisions seen so far.
    pub fn count(&self) -> usize {
        *self.count.borrow()
    }

    /// A copy of everything seen.
    pub fn snapshot(&self) -> HashMap<String, Seen> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Drop for Decisions {
    fn drop(&mut self) {
        if Arc::strong_count(&self.task) == 1 {
            self.task.abort();
        }
    }
}

/// `Some(true)` for an Approved condition, `Some(false)` for Denied, `None` while pending.
fn decided(csr: &CertificateSigningRequest) -> Option<bool> {
    csr.status.as_ref()?.conditions.as_ref()?.iter().find_map(|c| match c.type_.as_str() {
        "Approved" => Some(true),
        "Denied" => Some(false),
        _ => None,
    })
}

/// Counts the controller's events as the bench's watch sees them arrive.
pub struct EventCount {
    count: watch::Receiver<(usize, Option<Instant>)>,
    task: tokio::task::JoinHandle<()>,
}

impl EventCount {
    /// Starts watching events.k8s.io/v1 Events in `default` reported by node-csr-approver.
    pub fn watch(admin: &Client) -> EventCount {
        let api = kube::Api::<k8s_openapi::api::events::v1::Event>::namespaced(admin.clone(), "default");
        let (tx, count) = watch::channel((0, None));
        let task = tokio::spawn(async move {
            let mut names = std::collections::HashSet::new();
            let mut stream = watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = stream.next().await {
                let Ok(watcher::Event::Apply(event) | watcher::Event::InitApply(event)) = event else { continue };
                if event.reporting_controller.as_deref() != Some("node-csr-approver") {
                    continue;
                }
                if let Some(name) = event.metadata.name
                    && names.insert(name)
                {
                    let _ = tx.send((names.len(), Some(Instant::now())));
                }
            }
        });
        EventCount { count, task }
    }

    /// Waits until `n` events arrived, at most `limit`; returns when the last one arrived.
    pub async fn wait_count(&mut self, n: usize, limit: Duration) -> Result<Instant> {
        let waited = tokio::time::timeout(limit, self.count.wait_for(|(c, _)| *c >= n)).await.map(|r| r.is_ok());
        let (count, last) = *self.count.borrow();
        match (waited, last) {
            (Ok(true), Some(last)) => Ok(last),
            (Ok(_), _) => bail!("the bench's event watch stopped"),
            (Err(_), _) => bail!("only {count} of {n} events arrived within {limit:?}"),
        }
    }
}

impl Drop for EventCount {
    fn drop(&mut self) {
        self.task.abort();
    }
}
