//! etcd stopped (SIGSTOP) just after a Lease renewal while an evaluation is in flight: the
//! approval write sent then is given up before the Lease it was sent under can have expired.

use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use testdns::{DnsServer, Records};
use testenv::ControlPlane;

use crate::support::Request;
use crate::support::cluster::{Approver, SERIAL, create_serving_csr, unique, wait_decided};
use crate::support::lease::wait_holder;

/// `--lease-duration`, `--renew-deadline`: the write fence closes 4 s after a renewal, the Lease
/// can expire 6 s after it.
const LEASE_DURATION: Duration = Duration::from_secs(6);
const TIMING: [&str; 3] = ["--lease-duration=6s", "--renew-deadline=4s", "--retry-period=1s"];
/// How long the DNS server holds its answers: the evaluation is in flight across a renewal.
const SLOW_DNS: Duration = Duration::from_secs(3);
/// Bound on every wait of the scenario.
const LIMIT: Duration = Duration::from_secs(30);

/// A process stopped with SIGSTOP, continued (SIGCONT) when dropped, also when the test fails.
struct Stopped(u32);

impl Stopped {
    fn new(pid: u32) -> Stopped {
        kill("STOP", pid);
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        kill("CONT", self.0);
    }
}

fn kill(signal: &str, pid: u32) {
    let status = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().unwrap();
    assert!(status.success(), "kill -{signal} {pid}: {status}");
}

/// The Lease's `renewTime`, if it has one.
async fn renew_time(admin: &Client, lease: &str) -> Option<SystemTime> {
    let lease = Api::<Lease>::namespaced(admin.clone(), "default").get_opt(lease).await.unwrap()?;
    lease.spec?.renew_time.map(|time| SystemTime::from(time.0))
}

/// When the test first saw `approver` log that the attempt to write CSR `name` failed, and why.
async fn write_failed(approver: &Approver, name: &str, deadline: Instant) -> (SystemTime, String) {
    loop {
        let failed = approver.log_lines().into_iter().find_map(|line| {
            let error = line["error"].as_str().filter(|e| e.contains(name))?.to_owned();
            (line["message"] == "reconcile failed; retrying").then_some(error)
        });
        if let Some(error) = failed {
            return (SystemTime::now(), error);
        }
        assert!(Instant::now() < deadline, "the write never failed:\n{}", approver.logs());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_write_sent_as_etcd_stalls_is_given_up_before_the_lease_it_was_sent_under_can_expire() {
    let _serial = SERIAL.lock().await;
    let cp = ControlPlane::start().await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let node = unique("n");
    let host = format!("{node}.nodes.example.com");
    let dns = DnsServer::start_on_thread(Records::new().a(&host, "10.0.0.31")).unwrap();
    dns.set_delay(SLOW_DNS);
    let lease = unique("fence");
    let mut args = vec!["--leader-election".to_owned(), "--leader-election-namespace=default".to_owned()];
    args.extend([format!("--leader-election-id={lease}"), format!("--dns-server={}", dns.addr())]);
    args.extend(TIMING.map(String::from));
    args.push("--dns-timeout=30s".to_owned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut approver = Approver::start(cp.kubeconfig_path(), &args, &[("POD_NAME", "replica-0")]);
    approver.wait_ready().await;
    assert_eq!(wait_holder(&admin, &lease, None, Instant::now() + LIMIT).await, Some(0), "{}", approver.logs());

    let name = unique("fence");
    create_serving_csr(&cp, &name, &node, &Request::node(&node).dns(&host).ip("10.0.0.31")).await;
    let deadline = Instant::now() + LIMIT;
    while dns.queries_for(&host) < 2 {
        assert!(Instant::now() < deadline, "the DNS server was never asked:\n{}", approver.logs());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The next renewal, then etcd stops: the answer comes within the renew deadline of that
    // renewal, so the fence is open and the write is sent, to an apiserver that cannot store it.
    let before = renew_time(&admin, &lease).await;
    let renewed = loop {
        let now = renew_time(&admin, &lease).await;
        if now != before
            && let Some(renewed) = now
        {
            break renewed;
        }
        assert!(Instant::now() < deadline, "no renewal:\n{}", approver.logs());
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let etcd = Stopped::new(cp.process_ids().await[0]);
    assert!(!approver.logged(&name, "written"), "written before etcd stopped:\n{}", approver.logs());

    let (failed, error) = write_failed(&approver, &name, Instant::now() + LIMIT).await;
    drop(etcd);
    let after = |at: SystemTime| at.duration_since(renewed).unwrap_or_default();
    let lasted = after(failed);
    println!("the write failed {lasted:.2?} after the last renewal ({error}); the Lease lasts {LEASE_DURATION:?}");
    assert!(
        failed < renewed + LEASE_DURATION,
        "the write was still awaited {lasted:.2?} after the renewal it was sent under:\n{}",
        approver.logs()
    );

    let decided = wait_decided(&admin, &name, LIMIT).await;
    let types: Vec<&str> = decided.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, ["Approved"], "{decided:?}\n{}", approver.logs());
}
