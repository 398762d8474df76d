//! The approver installed as operators install it: the image and the chart released into a test
//! registry ([`Release`]), verified with cosign, the chart installed by `helm` from there into a
//! [`ContainerCluster`] whose node pulls the image from there, with the chart's default values, the
//! image pinned by digest and the two required values.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use testenv::{ContainerCluster, ContainerClusterOptions};
use tokio::sync::{Mutex, MutexGuard};

use super::chart::helm;
use super::release::Release;

/// The release and its namespace.
pub const RELEASE: &str = "approver";
pub const NAMESPACE: &str = "csr-system";

/// The node's name, under [`PROVIDER_REGEX`].
pub const NODE_NAME: &str = "node-1.nodes.example.com";

/// The two required values: node names and node addresses (the node networks' range).
pub const PROVIDER_REGEX: &str = "^[a-z0-9-]+\\.nodes\\.example\\.com$";
pub const PROVIDER_IP_PREFIXES: &str = "198.51.100.0/24";

/// The chart's `test.image`, as containerd names it.
const BUSYBOX: &str = "docker.io/library/busybox:1.37";

/// How long `helm install --wait` and friends may take.
pub const HELM_TIMEOUT: &str = "180s";

/// This test's turn to run a cluster (one at a time: each is a whole cluster on two cores), or
/// `None`, printing why, when this machine cannot run a container node (not root).
pub async fn can_run() -> Option<MutexGuard<'static, ()>> {
    static TURN: Mutex<()> = Mutex::const_new(());
    if !testenv::running_as_root().unwrap_or(false) {
        eprintln!("skipped: a container node needs root");
        return None;
    }
    echo_panics();
    Some(TURN.lock().await)
}

/// Writes each panic straight to the process's stderr too, when it happens: the test harness
/// prints a failing test's captured output only in its summary, after every test of the binary,
/// and a long CI log may be cut there.
fn echo_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current();
            let line = format!("panicked ({}): {info}\n", thread.name().unwrap_or("unnamed thread"));
            // Not `eprintln!`: the harness captures that; a write to the handle goes to the terminal.
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
            previous(info);
        }));
    });
}

/// The approver released into a test registry ([`Release::publish`]) and a container cluster whose
/// node pulls from that registry (the chart's test image imported); prints how long each took.
pub async fn cluster(control_plane_node: bool) -> (ContainerCluster, Release) {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let release = Release::publish(dir.path()).await;
    eprintln!("released into the test registry in {:.1} s", started.elapsed().as_secs_f64());
    let busybox = testenv::busybox_image(BUSYBOX, &dir.path().join("busybox.tar")).unwrap();
    let mut options = ContainerClusterOptions::new(NODE_NAME, vec![busybox]);
    options.control_plane_node = control_plane_node;
    options.registry = Some(release.registry.address());
    let started = Instant::now();
    let cluster = ContainerCluster::start(options).await.unwrap();
    cluster.wait_node_ready().await.unwrap();
    eprintln!("cluster up in {:.1} s", started.elapsed().as_secs_f64());
    (cluster, release)
}

/// `helm ARGS… --kubeconfig <the cluster's admin>`: `Ok(stdout)` or `Err(stdout and stderr)`.
pub fn helm_in(cluster: &ContainerCluster, args: &[&str]) -> Result<String, String> {
    let output = Command::new(helm())
        .args(args)
        .arg("--kubeconfig")
        .arg(cluster.control_plane().kubeconfig_path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if output.status.success() {
        Ok(stdout)
    } else {
        Err(format!("{stdout}{}", String::from_utf8_lossy(&output.stderr)))
    }
}

/// `helm install` (or, with `verb` "upgrade", an upgrade) of `release` as the README says: the
/// chart from the registry by version, the image pinned by digest, the two required values and
/// `extra` ones, `--wait`; refused (`Err`) when cosign does not verify the image and its SBOMs.
pub fn install(cluster: &ContainerCluster, release: &Release, verb: &str, extra: &[&str]) -> Result<String, String> {
    let chart =
        release.install_args().map_err(|error| format!("refusing to install an unverified release: {error}"))?;
    let regex = format!("providerRegex={PROVIDER_REGEX}");
    let prefixes = format!("providerIpPrefixes={{{PROVIDER_IP_PREFIXES}}}");
    let mut args = vec![verb, RELEASE];
    args.extend(chart.iter().map(String::as_str));
    args.extend([
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--wait",
        "--timeout",
        HELM_TIMEOUT,
        "--set-literal",
        &regex,
        "--set",
        &prefixes,
    ]);
    args.extend_from_slice(extra);
    helm_in(cluster, &args)
}

/// `helm install` as [`install`] does, with `extra` values; panics with the cluster's state when it
/// fails. Prints and returns how long it took.
pub fn install_or_panic(cluster: &ContainerCluster, release: &Release, extra: &[&str]) -> Duration {
    let started = Instant::now();
    if let Err(error) = install(cluster, release, "install", extra) {
        panic!("helm install failed: {error}\n{}", diagnose(cluster));
    }
    let took = started.elapsed();
    eprintln!("helm install --wait (cosign verification included) took {:.1} s", took.as_secs_f64());
    took
}

/// The release's approver pods now (those of its ReplicaSets, not `helm test`'s).
pub async fn pods(admin: &Client) -> Vec<Pod> {
    let params = ListParams::default().labels(&format!("app.kubernetes.io/instance={RELEASE}"));
    let pods = Api::<Pod>::namespaced(admin.clone(), NAMESPACE).list(&params).await.unwrap().items;
    pods.into_iter().filter(|pod| pod.owner_references().iter().any(|owner| owner.kind == "ReplicaSet")).collect()
}

/// Whether `pod` is Running with every container ready.
pub fn running_and_ready(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|conditions| conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The holder of the approver's Lease, if any.
pub async fn lease_holder(admin: &Client) -> Option<String> {
    let lease = Api::<Lease>::namespaced(admin.clone(), NAMESPACE).get_opt("node-csr-approver").await.unwrap()?;
    lease.spec.and_then(|spec| spec.holder_identity).filter(|holder| !holder.is_empty())
}

/// Waits up to `limit` for a kubelet-serving CSR of the node to be approved and issued; returns it.
pub async fn wait_issued_serving_csr(admin: &Client, limit: Duration) -> Option<CertificateSigningRequest> {
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let issued = csrs.list(&ListParams::default()).await.unwrap().items.into_iter().find(|csr| {
            csr.spec.signer_name == "kubernetes.io/kubelet-serving"
                && csr.spec.username.as_deref() == Some(&format!("system:node:{NODE_NAME}"))
                && csr.status.as_ref().is_some_and(|status| status.certificate.is_some())
        });
        if issued.is_some() {
            return issued;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    None
}

/// The name of the condition that decided `csr` and its reason.
pub fn decision(csr: &CertificateSigningRequest) -> Option<(String, String)> {
    let conditions = csr.status.as_ref()?.conditions.as_ref()?;
    let condition = conditions.iter().find(|c| c.type_ == "Approved" || c.type_ == "Denied")?;
    Some((condition.type_.clone(), condition.reason.clone().unwrap_or_default()))
}

/// Names of `pods`.
pub fn names(pods: &[Pod]) -> Vec<String> {
    pods.iter().map(ResourceExt::name_any).collect()
}

/// What a failure needs: the pods' states and the tail of the kubelet's log.
pub fn diagnose(cluster: &ContainerCluster) -> String {
    let kubelet = cluster.node().kubelet_log();
    let lines: Vec<&str> = kubelet.lines().collect();
    let pods = helm_in(cluster, &["status", RELEASE, "--namespace", NAMESPACE]).unwrap_or_else(|error| error);
    format!("helm status:\n{pods}\nkubelet log tail:\n{}", lines[lines.len().saturating_sub(40)..].join("\n"))
}

/// A kubelet-serving CSR a [`Workload`] created, and the one condition it must end with.
#[derive(Debug, Clone)]
pub struct Sent {
    /// Its name.
    pub name: String,
    /// `Approved` (the node's own request) or `Denied` (a forged one).
    pub expect: &'static str,
}

/// Every this many CSRs of a [`Workload`], one is forged.
const FORGED_EVERY: usize = 4;

/// kubelet-serving CSRs created as the node (impersonating `system:node:<NODE_NAME>`) at a steady
/// rate until stopped: the node's own request (its name and address, as its kubelet asks; approved)
/// and, every [`FORGED_EVERY`]th, a forged one (a DNS SAN outside the provider regex; denied).
pub struct Workload {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<Vec<Sent>>,
}

impl Workload {
    /// Starts creating CSRs `<prefix>-<number>`, `per_second` a second.
    pub async fn start(cluster: &ContainerCluster, prefix: &str, per_second: u32) -> Workload {
        let node = format!("system:node:{NODE_NAME}");
        let client = cluster.control_plane().impersonated_client(&node, &["system:nodes"]).await.unwrap();
        let api = Api::<CertificateSigningRequest>::all(client);
        let address = cluster.node().node_ip().to_string();
        let own = super::Request::node(NODE_NAME).dns(NODE_NAME).ip(&address).pem();
        let forged = super::Request::node(NODE_NAME).dns("auth.evil.io").pem();
        let (stop, prefix) = (std::sync::Arc::<std::sync::atomic::AtomicBool>::default(), prefix.to_owned());
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let mut sent = Vec::new();
            let mut tick = tokio::time::interval(Duration::from_secs(1) / per_second);
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                tick.tick().await;
                let i = sent.len();
                let (expect, pem) =
                    if i % FORGED_EVERY == FORGED_EVERY - 1 { ("Denied", &forged) } else { ("Approved", &own) };
                let name = format!("{prefix}-{i:03}");
                let csr = testkit::csr::object(&name, testkit::csr::SERVING_SIGNER, &super::SERVING_USAGES, pem);
                api.create(&kube::api::PostParams::default(), &csr)
                    .await
                    .unwrap_or_else(|error| panic!("creating {name}: {error}"));
                sent.push(Sent { name, expect });
            }
            sent
        });
        Workload { stop, task }
    }

    /// Stops creating; returns every CSR created.
    pub async fn stop(self) -> Vec<Sent> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

/// Once every CSR is decided, how long to wait for a second condition that must not come.
const SETTLE: Duration = Duration::from_secs(3);

/// Waits until every CSR of `sent` carries a condition, at most `limit`, then [`SETTLE`] more,
/// and asserts each carries exactly one condition, the expected one; returns how long the wait
/// took and prints the counts under `what`.
pub async fn assert_decided_once(cluster: &ContainerCluster, what: &str, sent: &[Sent], limit: Duration) -> Duration {
    let admin = cluster.control_plane().admin_client().await.unwrap();
    let api = Api::<CertificateSigningRequest>::all(admin);
    let conditions = || async {
        let csrs = api.list(&ListParams::default()).await.unwrap().items;
        let types = |csr: CertificateSigningRequest| {
            let conditions = csr.status.and_then(|status| status.conditions).unwrap_or_default();
            let superseded = |c: &CertificateSigningRequestCondition| c.reason.as_deref() == Some("Superseded");
            let types = conditions.iter().map(|c| if superseded(c) { "Superseded".into() } else { c.type_.clone() });
            (csr.metadata.name.unwrap_or_default(), types.collect::<Vec<_>>())
        };
        csrs.into_iter().map(types).collect::<std::collections::BTreeMap<_, _>>()
    };
    let started = Instant::now();
    let deadline = started + limit;
    let waited = loop {
        let found = conditions().await;
        let pending = sent.iter().filter(|csr| found.get(&csr.name).is_none_or(Vec::is_empty)).count();
        if pending == 0 || Instant::now() >= deadline {
            break started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    tokio::time::sleep(SETTLE).await;
    let found = conditions().await;
    // Of the node's own CSRs pending together (while no approver decides), one is approved and
    // those with a newer CSR of the node pending are denied `Superseded`: any but the last created
    // may be. A forged one is denied for what it asks, never superseded.
    let newest = sent.last().map(|csr| &csr.name);
    let mut wrong = Vec::new();
    let mut superseded = 0;
    for csr in sent {
        let got = found.get(&csr.name).cloned().unwrap_or_default();
        if csr.expect == "Approved" && Some(&csr.name) != newest && got == ["Superseded"] {
            superseded += 1;
        } else if got != [csr.expect] {
            wrong.push(format!("{}: expected [{}], got {got:?}", csr.name, csr.expect));
        }
    }
    let denied = sent.iter().filter(|csr| csr.expect == "Denied").count();
    eprintln!(
        "{what}: {} CSRs created ({} the node's own, {denied} forged), {superseded} denied Superseded, {} decided \
         wrongly, more than once or never; waited {:.1} s for the last decision",
        sent.len(),
        sent.len() - denied,
        wrong.len(),
        waited.as_secs_f64()
    );
    assert!(
        wrong.is_empty(),
        "{what}: {} of {} CSRs not decided exactly once as expected:\n{}\n{}",
        wrong.len(),
        sent.len(),
        wrong.join("\n"),
        diagnose(cluster)
    );
    waited
}

/// Waits up to `limit` until the Lease is held, by a holder other than `not` when given (matched as
/// a pod name, the holder identity's prefix); returns the holder.
pub async fn wait_holder(admin: &Client, not: Option<&str>, limit: Duration) -> Option<String> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(holder) = lease_holder(admin).await.filter(|holder| not.is_none_or(|not| !holder.starts_with(not)))
        {
            return Some(holder);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
