//! Node networks: the addresses of each family exist only in the node's namespace and on the host
//! end of its link, parallel networks never share a link or an address, and nothing is left once
//! the owner drops them, panics or is killed. Needs root, `ip`, `unshare` and `nsenter`.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use testenv::{AddressFamilies, NodeNetwork};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Held by every test that creates node networks: a slot another test takes as soon as it is free
/// reuses the link name, so a test that checks a name is gone must not share the machine's slots.
static SERIAL: Mutex<()> = Mutex::new(());

/// Waits for this binary's other network-creating tests to finish.
fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The global (not link-local) addresses of this machine's namespace, or of the `namespace` file's.
fn global_addresses(namespace: Option<&Path>) -> Result<Vec<IpAddr>, Box<dyn std::error::Error>> {
    let mut command = Command::new("nsenter");
    command.arg(format!("--net={}", namespace.unwrap_or(Path::new("/proc/self/ns/net")).display()));
    let output = command.args(["ip", "-j", "address", "show"]).output()?;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let links: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout)?;
    let infos = links.iter().flat_map(|link| link["addr_info"].as_array().cloned().unwrap_or_default());
    let global = infos.filter(|info| info["scope"] == "global");
    Ok(global.filter_map(|info| info["local"].as_str()?.parse().ok()).collect())
}

fn link_exists(name: &str) -> bool {
    Command::new("ip").args(["link", "show", "dev", name]).output().is_ok_and(|output| output.status.success())
}

#[test]
fn each_family_lives_in_its_own_namespace_and_goes_with_the_network() -> TestResult {
    let _serial = serial();
    let families = [
        AddressFamilies::Ipv4,
        AddressFamilies::Ipv6,
        AddressFamilies::DualStack,
        AddressFamilies::DualStackIpv6Primary,
    ];
    let created: Vec<_> = std::thread::scope(|scope| {
        let handles = families.map(|family| scope.spawn(move || NodeNetwork::create(family)));
        handles.into_iter().map(|handle| handle.join().expect("creating panicked")).collect()
    });
    let networks = created.into_iter().collect::<Result<Vec<_>, _>>()?;
    let links: HashSet<&str> = networks.iter().map(NodeNetwork::link_name).collect();
    assert_eq!(links.len(), 4, "links shared: {links:?}");
    let kinds: Vec<Vec<bool>> =
        networks.iter().map(|network| network.addresses().iter().map(IpAddr::is_ipv4).collect()).collect();
    assert_eq!(kinds, [vec![true], vec![false], vec![true, false], vec![false, true]]);

    let host = global_addresses(None)?;
    for network in &networks {
        for (node, host_end) in network.addresses().iter().zip(network.host_addresses()) {
            assert!(!host.contains(node), "node address {node} on this machine");
            assert!(host.contains(host_end), "host end {host_end} missing");
        }
        let mut inside = global_addresses(Some(&network.namespace_path()))?;
        let mut own = network.addresses().to_vec();
        inside.sort();
        own.sort();
        assert_eq!(inside, own, "the node's namespace has exactly its addresses");
        // Nothing listens there: a refusal, sent by the node's namespace, proves the route.
        for node in network.addresses() {
            let refused = TcpStream::connect_timeout(&SocketAddr::new(*node, 9), Duration::from_secs(2)).unwrap_err();
            assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused, "{node}: {refused}");
        }
    }
    let paths: Vec<_> = networks.iter().map(NodeNetwork::namespace_path).collect();
    let links: Vec<String> = links.into_iter().map(str::to_owned).collect();
    drop(networks);
    for link in &links {
        assert!(!link_exists(link), "{link} survived");
    }
    assert!(paths.iter().all(|path| !path.exists()), "a namespace holder survived");
    Ok(())
}

#[test]
fn a_panicking_owner_leaves_no_link() {
    let _serial = serial();
    let mut link = String::new();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let network = NodeNetwork::create(AddressFamilies::DualStack).unwrap();
        link = network.link_name().to_owned();
        panic!("the test fails while the network exists");
    }));
    assert!(panicked.is_err());
    assert!(!link.is_empty() && !link_exists(&link), "{link:?} survived the panic");
}

/// Set for [`owner_killed_by_its_parent`] when [`a_killed_owner_leaves_no_link`] runs it.
const CHILD_ENV: &str = "TESTENV_NODE_NETWORK_CHILD";

#[test]
#[ignore = "the owner a_killed_owner_leaves_no_link starts and kills"]
fn owner_killed_by_its_parent() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let network = NodeNetwork::create(AddressFamilies::Ipv6).unwrap();
    println!("node network link {}", network.link_name());
    std::thread::sleep(Duration::from_secs(120));
}

#[test]
fn a_killed_owner_leaves_no_link() -> TestResult {
    let _serial = serial();
    let mut child = Command::new(std::env::current_exe()?)
        .args(["--ignored", "--exact", "owner_killed_by_its_parent", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let link = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        // libtest writes "test <name> ... " before the test's own output, on the same line.
        .find_map(|line| line.rsplit_once("node network link ").map(|(_, link)| link.to_owned()))
        .ok_or("the child printed no link")?;
    assert!(link_exists(&link), "{link} missing while its owner runs");
    child.kill()?;
    child.wait()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while link_exists(&link) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!link_exists(&link), "{link} outlived its killed owner");
    Ok(())
}
