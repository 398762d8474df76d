//! Cluster-side helpers: the real binary run as a controller process, CSRs created through node
//! impersonation, and waiting for what the apiserver stores.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use testenv::ControlPlane;
use testkit::approver::Process;

use super::{Request, SERVING_USAGES};

pub use super::json::json_keys;

pub use testkit::http::get as http_get;
pub use testkit::policy::{PREFIXES, REGEX};

/// Serializes the tests of one binary: every controller decides every CSR of the shared cluster.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The real `node-csr-approver` binary running as a controller: [`testkit::approver::Process`]
/// with a log in a directory of its own, failing the test where that returns an error.
pub struct Approver {
    process: Process,
    /// The metrics port it logged, once ready.
    metrics: Option<u16>,
    _dir: tempfile::TempDir,
}

impl Approver {
    /// Starts the binary (`$NODE_CSR_APPROVER_BIN` when set, else this workspace's) with
    /// `--kubeconfig kubeconfig`, the test regex and prefixes, admin endpoints on ports of the
    /// kernel's choosing (read back from the log) and `extra` arguments; its environment holds only
    /// PATH and `env`.
    pub fn start(kubeconfig: &Path, extra: &[&str], env: &[(&str, &str)]) -> Approver {
        Approver::start_with(kubeconfig, REGEX, PREFIXES, extra, env)
    }

    /// [`Approver::start`] with another `--provider-regex` and `--provider-ip-prefixes`.
    pub fn start_with(
        kubeconfig: &Path,
        regex: &str,
        prefixes: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Approver {
        let built = PathBuf::from(env!("CARGO_BIN_EXE_node-csr-approver"));
        let binary = std::env::var_os(testkit::approver::BINARY_ENV).map_or(built, PathBuf::from);
        let mut command = testkit::approver::command(&binary, kubeconfig, regex, prefixes);
        command.envs(env.iter().copied()).args(["--log-format", "json", "--log-level", "info,node_csr_approver=debug"]);
        command.args(extra);
        Approver::spawn(command)
    }

    /// Runs `command` (the binary with arguments of the caller's choosing: it must log JSON and
    /// bind its admin endpoints on ports it logs), its stderr going to a log file.
    pub fn spawn(command: Command) -> Approver {
        let dir = tempfile::tempdir().unwrap();
        let process = Process::spawn(command, &dir.path().join("approver.log")).unwrap();
        Approver { process, metrics: None, _dir: dir }
    }

    /// Waits until `/readyz` answers 200, at most 30 s.
    pub async fn wait_ready(&mut self) {
        if let Err(error) = self.process.wait_ready(Duration::from_secs(30)).await {
            panic!("approver {error}");
        }
        self.metrics = self.process.listening("metrics").map(|address| address.port());
    }

    /// Whether `/readyz`, on the health port it logged, answers 200 now.
    pub async fn ready(&self) -> bool {
        match self.process.listening("health") {
            Some(address) => testkit::http::ready(address.port()).await,
            None => false,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Sends a signal by name (`TERM`, `KILL`, `STOP`, `CONT`) with the system `kill` command;
    /// returns the moment just before it was sent, for bounds measured from the signal.
    pub fn signal(&self, name: &str) -> Instant {
        let sent = Instant::now();
        self.process.signal(name).unwrap();
        sent
    }

    /// Waits for the process to exit, at most `limit`.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        self.process.wait_exit(limit).await.unwrap()
    }

    /// Waits for the process to exit until `deadline`.
    pub async fn exit_by(&mut self, deadline: Instant) -> Option<ExitStatus> {
        self.wait_exit(deadline.saturating_duration_since(Instant::now())).await
    }

    /// Everything the process logged so far.
    pub fn logs(&self) -> String {
        self.process.logs()
    }

    /// The JSON log lines so far.
    pub fn log_lines(&self) -> Vec<serde_json::Value> {
        log_lines(&self.logs())
    }

    /// The decision log lines about CSR `name` whose message is `note` (`written`, `retrying`,
    /// `held for a human`, `dry run: not written`).
    pub fn decisions(&self, name: &str, note: &str) -> Vec<serde_json::Value> {
        self.log_lines().into_iter().filter(|l| l["csr"] == name && l["message"] == note).collect()
    }

    /// [`Approver::decisions`] once there is at least one, or after 10 s: a decision is logged
    /// after its write returns, so the write may be seen through the apiserver first.
    pub async fn wait_decisions(&self, name: &str, note: &str) -> Vec<serde_json::Value> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let found = self.decisions(name, note);
            if !found.is_empty() || std::time::Instant::now() >= deadline {
                return found;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Whether some log line about CSR `name` has the message `message`.
    pub fn logged(&self, name: &str, message: &str) -> bool {
        self.log_lines().iter().any(|l| l["csr"] == name && l["message"] == message)
    }

    /// `/metrics` text (empty before [`Approver::wait_ready`] or once the process is gone).
    pub async fn metrics(&self) -> String {
        let Some(port) = self.metrics else { return String::new() };
        http_get(port, "/metrics").await.map(|(_, body)| body).unwrap_or_default()
    }

    /// The value of one series of `/metrics`, e.g. `node_csr_approver_leader`; `None` when the
    /// series is absent or nothing answers.
    pub async fn metric(&self, series: &str) -> Option<f64> {
        metric(&self.metrics().await, series)
    }

    /// Approval-subresource writes this process attempted, whatever their result.
    pub async fn write_attempts(&self) -> Option<f64> {
        write_attempts(&self.metrics().await)
    }
}

/// The value of `series` in a `/metrics` text.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The sum of `node_csr_approver_writes_total` over every result; `None` without metrics.
pub fn write_attempts(text: &str) -> Option<f64> {
    let results = ["success", "conflict", "not_found", "error"];
    results.iter().map(|r| metric(text, &format!("node_csr_approver_writes_total{{result=\"{r}\"}}"))).sum()
}

/// Parses JSON log lines; a line that is not a JSON object fails the test.
pub fn log_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}")))
        .collect()
}

/// Unique CSR names for one test, deleted from the cluster when this is dropped (also when the
/// test fails), so no test leaves a pending CSR for another test's controller to decide.
pub struct Csrs {
    kubeconfig: PathBuf,
    names: std::sync::Mutex<Vec<String>>,
}

impl Csrs {
    /// Names for the cluster of the admin kubeconfig `kubeconfig`.
    pub fn new(kubeconfig: &Path) -> Csrs {
        Csrs { kubeconfig: kubeconfig.to_owned(), names: std::sync::Mutex::default() }
    }

    /// A new unique name starting with `prefix`, deleted on drop.
    pub fn name(&self, prefix: &str) -> String {
        let name = unique(prefix);
        self.adopt(&name);
        name
    }

    /// Deletes `name` on drop too.
    pub fn adopt(&self, name: &str) {
        self.names.lock().unwrap().push(name.to_owned());
    }

    /// `count` new names starting with `prefix`.
    pub fn names(&self, prefix: &str, count: usize) -> Vec<String> {
        (0..count).map(|_| self.name(prefix)).collect()
    }
}

impl Drop for Csrs {
    fn drop(&mut self) {
        let names = std::mem::take(&mut *self.names.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        let kubeconfig = self.kubeconfig.clone();
        // The test's runtime may be gone or blocked: delete from a runtime of our own.
        let deleted = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(delete_csrs(&kubeconfig, &names))
        })
        .join();
        if let Ok(Err(error)) = deleted {
            eprintln!("cleaning up CSRs: {error}");
        }
    }
}

/// Deletes the CSRs `names`; those already gone are fine.
async fn delete_csrs(kubeconfig: &Path, names: &[String]) -> Result<(), kube::Error> {
    let file = kube::config::Kubeconfig::read_from(kubeconfig).map_err(kube::Error::InferKubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(kube::Error::InferKubeconfig)?;
    let api = Api::<CertificateSigningRequest>::all(Client::try_from(config)?);
    for name in names {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// Waits until `client`'s identity is allowed (`want` true) or denied (`want` false) `verb` on
/// the resource, as the apiserver's authorizer answers a SelfSubjectAccessReview: RBAC changes
/// reach the authorizer through an informer, a moment after they are stored.
pub async fn wait_access(client: &Client, attributes: ResourceAttributes, want: bool) {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec { resource_attributes: Some(attributes), ..Default::default() },
        ..Default::default()
    };
    let api = Api::<SelfSubjectAccessReview>::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = api.create(&PostParams::default(), &review).await.unwrap();
        let allowed = answer.status.is_some_and(|s| s.allowed);
        if allowed == want {
            return;
        }
        assert!(Instant::now() < deadline, "access still {allowed} after 30s: {:?}", review.spec);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Resource attributes for [`wait_access`].
pub fn access(
    verb: &str,
    group: &str,
    resource: &str,
    namespace: Option<&str>,
    name: Option<&str>,
) -> ResourceAttributes {
    ResourceAttributes {
        verb: Some(verb.to_owned()),
        group: Some(group.to_owned()),
        resource: Some(resource.to_owned()),
        namespace: namespace.map(str::to_owned),
        name: name.map(str::to_owned),
        ..Default::default()
    }
}

/// A unique CSR or node name for this run.
pub fn unique(prefix: &str) -> String {
    // 24 random bits collide once in a few hundred runs of a 400-name flood (the birthday bound):
    // a suffix is never handed out twice in one test process.
    static ISSUED: std::sync::Mutex<std::collections::BTreeSet<u32>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut issued = ISSUED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        let suffix = rand::random::<u32>() & 0xff_ffff;
        if issued.insert(suffix) {
            return format!("{prefix}-{suffix:06x}");
        }
    }
}

/// Creates a kubelet-serving CSR as `system:node:<node>` in `system:nodes`, so the apiserver
/// fills in the username and groups for real.
pub async fn create_serving_csr(cp: &ControlPlane, name: &str, node: &str, request: &Request) {
    create_csr(cp, name, node, testkit::csr::SERVING_SIGNER, &SERVING_USAGES, &request.pem()).await;
}

/// Creates kubelet-serving CSRs `names`, all with the same request, as `system:node:<node>`, 16 at
/// a time.
pub async fn create_serving_csrs(cp: &ControlPlane, names: &[String], node: &str, request: &Request) {
    use futures::StreamExt;
    let client = cp.impersonated_client(&format!("system:node:{node}"), &["system:nodes"]).await.unwrap();
    let (api, pem) = (Api::<CertificateSigningRequest>::all(client), request.pem());
    let create = |name: &String| {
        let csr = testkit::csr::object(name, testkit::csr::SERVING_SIGNER, &SERVING_USAGES, &pem);
        let api = api.clone();
        async move { api.create(&PostParams::default(), &csr).await.map(drop) }
    };
    let created: Vec<_> = futures::stream::iter(names).map(create).buffer_unordered(16).collect().await;
    created.into_iter().collect::<Result<(), _>>().unwrap();
}

/// Creates a CSR with any signer and usages as `system:node:<node>`.
pub async fn create_csr(cp: &ControlPlane, name: &str, node: &str, signer: &str, usages: &[&str], pem: &str) {
    let client = cp.impersonated_client(&format!("system:node:{node}"), &["system:nodes"]).await.unwrap();
    let csr = testkit::csr::object(name, signer, usages, pem);
    Api::<CertificateSigningRequest>::all(client).create(&PostParams::default(), &csr).await.unwrap();
}

/// The CSR's conditions as stored.
pub async fn conditions(admin: &Client, name: &str) -> Vec<CertificateSigningRequestCondition> {
    let csr = Api::<CertificateSigningRequest>::all(admin.clone()).get(name).await.unwrap();
    csr.status.and_then(|s| s.conditions).unwrap_or_default()
}

/// Waits until the CSR has a condition, at most `limit`; returns them (empty on timeout).
pub async fn wait_decided(admin: &Client, name: &str, limit: Duration) -> Vec<CertificateSigningRequestCondition> {
    let deadline = Instant::now() + limit;
    loop {
        let found = conditions(admin, name).await;
        if !found.is_empty() || Instant::now() >= deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The events recorded about the CSR `name`.
pub async fn events_for(admin: &Client, name: &str) -> Vec<Event> {
    let events = Api::<Event>::namespaced(admin.clone(), "default").list(&ListParams::default()).await.unwrap();
    events.items.into_iter().filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)).collect()
}

/// Waits until an event with `reason` exists for the CSR, at most `limit`.
pub async fn wait_event(admin: &Client, name: &str, reason: &str, limit: Duration) -> Option<Event> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(event) = events_for(admin, name).await.into_iter().find(|e| e.reason.as_deref() == Some(reason)) {
            return Some(event);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The shared control plane of this test binary.
pub async fn control_plane() -> &'static ControlPlane {
    ControlPlane::shared().await.unwrap()
}
