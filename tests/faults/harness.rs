//! What the scenarios share: replicas of the real binary each behind a fault proxy of its own, and
//! nodes creating CSRs through impersonation, in bursts or continuously.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use testenv::{ControlPlane, FaultProxy};
use tokio::task::JoinSet;

use crate::support::Request;
use crate::support::cluster::{Approver, unique};
use crate::support::lease::{LeaseLog, wait_holder};

/// Leader election timings of every scenario.
pub const TIMING: [&str; 3] = ["--lease-duration=10s", "--renew-deadline=3s", "--retry-period=1s"];
/// `--lease-duration` of [`TIMING`].
pub const LEASE_DURATION: Duration = Duration::from_secs(10);
/// Once a fault is over, every CSR is decided within this.
pub const RECOVERY: Duration = Duration::from_secs(10);
/// How long a creation is retried while the apiserver cannot be reached.
const CREATE_DEADLINE: Duration = Duration::from_secs(90);
/// Every this many CSRs, one is forged (a hostname not of its node) and must be denied.
const FORGED_EVERY: usize = 4;

/// One replica: the binary, reaching the apiserver only through `proxy`.
pub struct Replica {
    /// `replica-<i>`, its `POD_NAME`.
    pub name: String,
    /// The proxy in front of it: its faults and its record of writes.
    pub proxy: FaultProxy,
    /// The process.
    pub approver: Approver,
}

/// A scenario's world: a control plane of its own, its admin client, the Lease the replicas elect
/// a leader on and its log, the replicas, which of them leads, and the nodes that create CSRs.
pub struct Scenario {
    /// The control plane, the scenario's alone.
    pub cp: ControlPlane,
    /// An admin client of it.
    pub admin: Client,
    /// The Lease's name.
    pub lease_name: String,
    /// Every state the Lease went through.
    pub lease: LeaseLog,
    /// The replicas.
    pub replicas: Vec<Replica>,
    /// The index of the replica that took the Lease first.
    pub leader: usize,
    /// The nodes.
    pub nodes: Nodes,
}

impl Scenario {
    /// Starts a control plane of its own, `replicas` replicas (see [`replicas`]) and its nodes.
    pub async fn start(replicas: usize) -> Scenario {
        Scenario::start_with(replicas, &[]).await
    }

    /// As [`Scenario::start`], each replica with `extra` arguments.
    pub async fn start_with(replicas: usize, extra: &[&str]) -> Scenario {
        let cp = ControlPlane::start().await.unwrap();
        let admin = cp.admin_client().await.unwrap();
        let lease_name = unique("faults");
        let lease = LeaseLog::start(&admin, &lease_name);
        let (replicas, leader) = self::replicas(&cp, &lease_name, replicas, extra).await;
        let nodes = Nodes::new(&cp).await;
        Scenario { cp, admin, lease_name, lease, replicas, leader, nodes }
    }
}

/// Starts `count` replicas named `replica-<i>`, each behind a fault proxy of its own, electing a
/// leader on Lease `lease` in `default` with [`TIMING`], DNS bypassed, plus `extra` arguments;
/// waits until each is ready and one holds the Lease, whose index it returns.
pub async fn replicas(cp: &ControlPlane, lease: &str, count: usize, extra: &[&str]) -> (Vec<Replica>, usize) {
    let mut started = Vec::new();
    for i in 0..count {
        let proxy = FaultProxy::start(cp).await.unwrap();
        let lease_id = format!("--leader-election-id={lease}");
        let mut args = vec!["--leader-election", "--leader-election-namespace=default", &lease_id];
        args.extend(TIMING);
        args.push("--bypass-dns-resolution");
        args.extend(extra);
        let name = format!("replica-{i}");
        let approver = Approver::start(proxy.kubeconfig_path(), &args, &[("POD_NAME", &name)]);
        started.push(Replica { name, proxy, approver });
    }
    for replica in &mut started {
        replica.approver.wait_ready().await;
    }
    let admin = cp.admin_client().await.unwrap();
    let leader = wait_holder(&admin, lease, None, Instant::now() + Duration::from_secs(30)).await;
    let leader = leader.unwrap_or_else(|| panic!("no replica took Lease {lease}:\n{}", logs(&started)));
    (started, leader)
}

/// The last lines of every replica's log that say more than a debug line or a decision written,
/// for failure messages.
pub fn logs(replicas: &[Replica]) -> String {
    let telling = |line: &&str| !line.contains(r#""level":"DEBUG""#) && !line.contains(r#""message":"written""#);
    let told = |replica: &Replica| replica.approver.logs().lines().filter(telling).collect::<Vec<_>>().join("\n");
    replicas.iter().map(|replica| format!("--- {} ---\n{}\n", replica.name, tail(&told(replica), 40))).collect()
}

/// The last `lines` lines of `text`, each cut to 600 characters.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    let cut = |line: &&str| line.chars().take(600).collect::<String>();
    all[all.len().saturating_sub(lines)..].iter().map(cut).collect::<Vec<_>>().join("\n")
}

/// The decision a CSR must end with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// A node's own request.
    Approved,
    /// A forged one.
    Denied,
}

impl Expect {
    /// The condition type it must carry.
    pub fn condition(self) -> &'static str {
        match self {
            Expect::Approved => "Approved",
            Expect::Denied => "Denied",
        }
    }
}

/// A CSR a scenario created, and how it must be decided.
#[derive(Debug, Clone)]
pub struct Created {
    /// Its name.
    pub name: String,
    /// Its decision.
    pub expect: Expect,
}

/// Node identities creating CSRs through impersonation, straight at the apiserver (never through
/// a proxy): each CSR is of a node of its own (`<base>-<number>`, with a DNS name and an address
/// of its own), as of one node's serving CSRs only the newest is approved. Cheap to clone.
#[derive(Clone)]
pub struct Nodes {
    /// The admin's connection to the apiserver, which each node's client impersonates the node on.
    admin: Arc<Config>,
    /// What every node name starts with.
    base: Arc<str>,
    next: Arc<AtomicUsize>,
}

impl Nodes {
    /// Nodes of `cp`, of unique names.
    pub async fn new(cp: &ControlPlane) -> Nodes {
        let kubeconfig = Kubeconfig::read_from(cp.kubeconfig_path()).unwrap();
        let admin = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.unwrap();
        Nodes { admin: Arc::new(admin), base: unique("n").into(), next: Arc::default() }
    }

    /// Creates CSR `name` as `expect` says: the node's own request, or one for a hostname not of
    /// the node. Retries while the apiserver cannot be reached; an AlreadyExists answer means an
    /// earlier attempt got through.
    pub async fn create_as(&self, name: &str, expect: Expect) -> Created {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        self.create_numbered(i, name, expect).await
    }

    /// Creates the next CSR of a workload, named `<prefix>-<number>`: every [`FORGED_EVERY`]th
    /// one forged.
    pub async fn create(&self, prefix: &str) -> Created {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        let expect = if i % FORGED_EVERY == FORGED_EVERY - 1 { Expect::Denied } else { Expect::Approved };
        self.create_numbered(i, &format!("{prefix}-{i:04}"), expect).await
    }

    /// Creates CSR number `i` as node number `i`: its own request names the node's DNS name and
    /// address.
    async fn create_numbered(&self, i: usize, name: &str, expect: Expect) -> Created {
        let node = format!("{}-{i:04}", self.base);
        let request = match expect {
            Expect::Approved => Request::node(&node).dns(&format!("{node}.nodes.example.com")).ip(&address(i)),
            Expect::Denied => Request::node(&node).dns("auth.evil.io"),
        };
        let usages = &crate::support::SERVING_USAGES;
        let csr = testkit::csr::object(name, testkit::csr::SERVING_SIGNER, usages, &request.pem());
        create_object(&self.client(&node), &csr).await;
        Created { name: name.to_owned(), expect }
    }

    /// A client acting as `node` (user `system:node:<node>`, group `system:nodes`).
    fn client(&self, node: &str) -> Client {
        let mut config = Config::clone(&self.admin);
        config.auth_info.impersonate = Some(format!("system:node:{node}"));
        config.auth_info.impersonate_groups = Some(vec!["system:nodes".to_owned()]);
        Client::try_from(config).unwrap()
    }
}

/// The address of node number `i`, its own, inside the provider prefixes of the other tests
/// ([`testkit::policy::PREFIXES`], 10.0.0.0/16).
fn address(i: usize) -> String {
    format!("10.0.{}.{}", 1 + i / 254, 1 + i % 254)
}

/// Creates serving CSR `name` of `node` (as the node, through impersonation) asking for its own
/// name, its DNS name `<node>.nodes.example.com` and `address`.
pub async fn create_serving(cp: &ControlPlane, name: &str, node: &str, address: &str, expect: Expect) -> Created {
    let client = cp.impersonated_client(&format!("system:node:{node}"), &["system:nodes"]).await.unwrap();
    let request = Request::node(node).dns(&format!("{node}.nodes.example.com")).ip(address);
    let usages = &crate::support::SERVING_USAGES;
    let csr = testkit::csr::object(name, testkit::csr::SERVING_SIGNER, usages, &request.pem());
    create_object(&client, &csr).await;
    Created { name: name.to_owned(), expect }
}

/// Creates `csr`, retrying for [`CREATE_DEADLINE`] while the apiserver cannot be reached or is
/// not ready.
pub async fn create_object(client: &Client, csr: &CertificateSigningRequest) {
    let api = Api::<CertificateSigningRequest>::all(client.clone());
    let deadline = Instant::now() + CREATE_DEADLINE;
    loop {
        match api.create(&PostParams::default(), csr).await {
            Ok(_) => return,
            Err(kube::Error::Api(status)) if status.is_already_exists() => return,
            // An apiserver coming back may refuse requests until it has loaded its RBAC rules.
            Err(kube::Error::Api(status)) if !matches!(status.code, 401 | 403 | 429 | 500..) => {
                panic!("creating {:?}: {status:?}", csr.metadata.name)
            }
            Err(error) => assert!(Instant::now() < deadline, "creating {:?}: {error}", csr.metadata.name),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Creates `count` CSRs `<prefix>-<number>`, `per_second` of them started each second, each
/// concurrently; returns once all are created.
pub async fn burst(nodes: &Nodes, prefix: &str, count: usize, per_second: u32) -> Vec<Created> {
    let creator = Creator::start(nodes, prefix, per_second, Some(count));
    creator.finish().await
}

/// CSRs created continuously until stopped.
pub struct Creator {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<Created>>,
}

impl Creator {
    /// Starts creating CSRs `<prefix>-<number>`, `per_second` of them started each second, each
    /// concurrently (a creation waits out an unreachable apiserver), at most `limit` when given.
    pub fn start(nodes: &Nodes, prefix: &str, per_second: u32, limit: Option<usize>) -> Creator {
        let stop = Arc::new(AtomicBool::new(false));
        let (nodes, prefix, stopped) = (nodes.clone(), prefix.to_owned(), stop.clone());
        let task = tokio::spawn(async move {
            let mut creations = JoinSet::new();
            let mut tick = tokio::time::interval(Duration::from_secs(1) / per_second);
            let mut started = 0;
            while !stopped.load(Ordering::Relaxed) && limit.is_none_or(|limit| started < limit) {
                tick.tick().await;
                let (nodes, prefix) = (nodes.clone(), prefix.clone());
                creations.spawn(async move { nodes.create(&prefix).await });
                started += 1;
            }
            creations.join_all().await
        });
        Creator { stop, task }
    }

    /// Stops creating and waits for the creations under way; returns every CSR created.
    pub async fn stop(self) -> Vec<Created> {
        self.stop.store(true, Ordering::Relaxed);
        self.finish().await
    }

    /// Waits until the limit is reached and every creation is done.
    pub async fn finish(self) -> Vec<Created> {
        self.task.await.unwrap()
    }
}
