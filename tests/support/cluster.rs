//! Cluster-side helpers: the real binary run as a controller process, CSRs created through node
//! impersonation, and waiting for what the apiserver stores.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition, CertificateSigningRequestSpec,
};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use testenv::ControlPlane;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Request, SERVING_USAGES};

/// The provider regex and prefixes every controller in these tests runs with.
pub const REGEX: &str = r"^[a-z0-9-]+\.nodes\.example\.com$";
pub const PREFIXES: &str = "10.0.0.0/16";

/// Serializes the tests of one binary: every controller decides every CSR of the shared cluster.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The real `node-csr-approver` binary running as a controller.
pub struct Approver {
    child: Child,
    pub health_port: u16,
    pub metrics_port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Approver {
    /// Starts the binary with `--kubeconfig kubeconfig`, the test regex and prefixes, loopback
    /// admin ports and `extra` arguments; its environment holds only PATH and `env`.
    pub fn start(kubeconfig: &Path, extra: &[&str], env: &[(&str, &str)]) -> Approver {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("approver.log");
        let (health_port, metrics_port) = (free_port(), free_port());
        let child = Command::new(env!("CARGO_BIN_EXE_node-csr-approver"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(env.iter().copied())
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--provider-regex", REGEX, "--provider-ip-prefixes", PREFIXES])
            .args(["--log-format", "json", "--log-level", "info,node_csr_approver=debug"])
            .arg(format!("--health-probe-bind-address=127.0.0.1:{health_port}"))
            .arg(format!("--metrics-bind-address=127.0.0.1:{metrics_port}"))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Approver { child, health_port, metrics_port, log, _dir: dir }
    }

    /// Waits until `/readyz` answers 200.
    pub async fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("approver exited with {status} before ready:\n{}", self.logs());
            }
            if http_get(self.health_port, "/readyz").await.is_some_and(|(code, _)| code == 200) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("approver not ready within 30s:\n{}", self.logs());
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal by name (`TERM`, `KILL`) with the system `kill` command.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill").arg(format!("-{name}")).arg(self.pid().to_string()).status().unwrap();
        assert!(status.success(), "kill -{name} failed");
    }

    /// Waits for the process to exit, at most `limit`.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    /// Everything the process logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `/metrics` text.
    pub async fn metrics(&self) -> String {
        http_get(self.metrics_port, "/metrics").await.map(|(_, body)| body).unwrap_or_default()
    }
}

impl Drop for Approver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP/1.1 GET on 127.0.0.1; `None` when nothing answers.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Some((code, body))
}

/// A unique CSR or node name for this run.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{:06x}", rand::random::<u32>() & 0xff_ffff)
}

/// Creates a kubelet-serving CSR as `system:node:<node>` in `system:nodes`, so the apiserver
/// fills in the username and groups for real.
pub async fn create_serving_csr(cp: &ControlPlane, name: &str, node: &str, request: &Request) {
    create_csr(cp, name, node, "kubernetes.io/kubelet-serving", &SERVING_USAGES, &request.pem()).await;
}

/// Creates a CSR with any signer and usages as `system:node:<node>`.
pub async fn create_csr(cp: &ControlPlane, name: &str, node: &str, signer: &str, usages: &[&str], pem: &str) {
    let client = cp.impersonated_client(&format!("system:node:{node}"), &["system:nodes"]).await.unwrap();
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta { name: Some(name.to_owned()), ..ObjectMeta::default() },
        spec: CertificateSigningRequestSpec {
            request: ByteString(pem.as_bytes().to_vec()),
            signer_name: signer.to_owned(),
            usages: Some(usages.iter().map(|u| (*u).to_owned()).collect()),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    };
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
