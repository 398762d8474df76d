//! The real binary under the chart's memory limit (128 MiB, a cgroup v1 memory controller as the
//! kubelet sets it) while one node has filled the cluster with CSRs whose names are 300,000
//! characters long: it keeps each as a prefix and a digest, tells each once, stays up and decides
//! a legitimate CSR. Needs root and cgroup v1's memory controller at `/sys/fs/cgroup/memory`.
//!
//! `NODE_CSR_APPROVER_BIN` runs another build of the binary (for example an older one).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use support::Request;
use support::cluster::{Approver, PREFIXES, REGEX, SERIAL, control_plane, create_serving_csr, unique, wait_decided};
use testdns::{DnsServer, Records};

/// The chart's memory limit.
const LIMIT_BYTES: u64 = 128 * 1024 * 1024;
/// CSRs with long names, and their names' length: 90 MB of names in all, which etcd and the
/// apiserver take (each object well under etcd's 1.5 MiB request limit).
const LONG_CSRS: usize = 300;
const LONG_NAME: usize = 300_000;
/// What the approver may hold in anonymous memory with them all cached: a CSR that can never be
/// decided costs a few hundred bytes, so this is the approver's own memory with room to spare.
const ANONYMOUS_BOUND: u64 = 32 * 1024 * 1024;

/// A memory cgroup of its own, removed when dropped (its processes killed first).
struct MemoryCgroup(PathBuf);

impl MemoryCgroup {
    fn create(limit: u64) -> MemoryCgroup {
        let path = PathBuf::from(format!("/sys/fs/cgroup/memory/node-csr-approver-test-{}", std::process::id()));
        std::fs::create_dir(&path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        let cgroup = MemoryCgroup(path);
        std::fs::write(cgroup.0.join("memory.limit_in_bytes"), limit.to_string()).unwrap();
        cgroup
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.0.join(file)).unwrap_or_default()
    }

    /// A count of `memory.stat` (`rss`: the anonymous memory charged to the cgroup now).
    fn stat(&self, name: &str) -> u64 {
        let stat = self.read("memory.stat");
        let value = stat.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' '));
        value.and_then(|value| value.trim().parse().ok()).unwrap()
    }

    /// The `oom_kill` count of `memory.oom_control` (0 where the kernel does not report it).
    fn oom_kills(&self) -> u64 {
        let control = self.read("memory.oom_control");
        let kills = control.lines().find_map(|line| line.strip_prefix("oom_kill "));
        kills.and_then(|count| count.trim().parse().ok()).unwrap_or(0)
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            for pid in self.read("cgroup.procs").split_whitespace() {
                let _ = Command::new("kill").args(["-KILL", pid]).status();
            }
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("could not remove {}", self.0.display());
    }
}

#[tokio::test]
async fn under_the_charts_memory_limit_hundreds_of_csrs_with_huge_names_cost_little() {
    let _serial = SERIAL.lock().await;
    let cp = control_plane().await;
    let admin = cp.admin_client().await.unwrap();
    let api = Api::<CertificateSigningRequest>::all(admin.clone());
    let label = unique("memory");
    let node = unique("n");
    let request = Request::node(&node).dns(&format!("{node}.nodes.example.com")).ip("10.0.0.31");

    // What a node can do: the apiserver takes any name that is a path segment.
    let client = cp.impersonated_client(&format!("system:node:{node}"), &["system:nodes"]).await.unwrap();
    let as_node = Api::<CertificateSigningRequest>::all(client);
    let pem = request.pem();
    let started = Instant::now();
    let create = |i: usize| {
        let mut csr = testkit::csr::object(
            &format!("{label}-{i:03}-{}", "x".repeat(LONG_NAME)),
            testkit::csr::SERVING_SIGNER,
            &support::SERVING_USAGES,
            &pem,
        );
        csr.metadata.labels = Some([("test".to_owned(), label.clone())].into());
        let as_node = as_node.clone();
        async move { as_node.create(&PostParams::default(), &csr).await.map(drop) }
    };
    let created: Vec<_> = futures::stream::iter(0..LONG_CSRS).map(create).buffer_unordered(8).collect().await;
    created.into_iter().collect::<Result<(), _>>().unwrap();
    println!("{LONG_CSRS} CSRs of {LONG_NAME}-character names created in {:?}", started.elapsed());
    // The legitimate CSR below comes at least a second later, so that it is the node's newest
    // serving CSR by creation time, not only by name (the long-named ones are the same node's).
    let legit_after = tokio::time::Instant::now() + Duration::from_millis(1100);

    let cgroup = MemoryCgroup::create(LIMIT_BYTES);
    let dns = DnsServer::start_on_thread(Records::new().a(&format!("{node}.nodes.example.com"), "10.0.0.31")).unwrap();
    let built = PathBuf::from(env!("CARGO_BIN_EXE_node-csr-approver"));
    let binary = std::env::var_os(testkit::approver::BINARY_ENV).map_or(built, PathBuf::from);
    // The shell joins the cgroup, then becomes the approver: everything it allocates is counted.
    let command = testkit::approver::command(&binary, cp.kubeconfig_path(), REGEX, PREFIXES);
    let program = command.get_program().to_owned();
    let args: Vec<_> = command.get_args().map(ToOwned::to_owned).collect();
    let mut joined = Command::new("sh");
    joined.args(["-c", r#"echo $$ > "$0" && exec "$@""#]).arg(cgroup.0.join("cgroup.procs")).arg(program).args(args);
    joined.env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
    joined.args([&format!("--dns-server={}", dns.addr()), "--log-format", "json", "--log-level", "info"]);
    joined.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
    let mut approver = Approver::spawn(joined);
    approver.wait_ready().await;

    let name = unique("legit");
    tokio::time::sleep_until(legit_after).await;
    create_serving_csr(cp, &name, &node, &request).await;
    let decided = wait_decided(&admin, &name, Duration::from_secs(30)).await;
    let (peak, failcnt, kills) =
        (cgroup.read("memory.max_usage_in_bytes"), cgroup.read("memory.failcnt"), cgroup.oom_kills());
    let anonymous = cgroup.stat("rss");
    println!(
        "anonymous memory {anonymous} bytes; peak usage {} bytes (limit {LIMIT_BYTES}, page cache included), failcnt {}, oom kills {kills}",
        peak.trim(),
        failcnt.trim()
    );
    let running = approver.wait_exit(Duration::ZERO).await.is_none();
    let told = |approver: &Approver| {
        let lines = approver.log_lines();
        lines.iter().filter(|l| l["message"].as_str().is_some_and(|m| m.starts_with("cannot decide this CSR"))).count()
    };
    let told_once = told(&approver);
    let counted = approver.metric("node_csr_approver_unaddressable_csrs_total").await;

    let _ =
        api.delete_collection(&DeleteParams::default(), &ListParams::default().labels(&format!("test={label}"))).await;
    let _ = api.delete(&name, &DeleteParams::default()).await;
    assert!(running && kills == 0, "the approver did not stay up (oom kills: {kills}):\n{}", approver.logs());
    assert_eq!(decided.first().map(|c| c.type_.as_str()), Some("Approved"), "{decided:?}\n{}", approver.logs());
    // The approver alone takes about 10 MiB; the names, 90 MB, would take most of the limit.
    assert!(anonymous < ANONYMOUS_BOUND, "{anonymous} bytes of anonymous memory with the long-named CSRs cached");
    assert_eq!(told_once, LONG_CSRS, "each long name told once:\n{}", approver.logs());
    assert_eq!(counted, Some(LONG_CSRS as f64));
    drop(cgroup);
}
