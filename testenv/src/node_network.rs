//! [`NodeNetwork`]: a network namespace of its own for a test node, joined to this machine's by a
//! veth pair, with addresses from documentation ranges that exist only in these two namespaces.

mod ranges;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::Error;
use crate::process::Supervised;

pub use ranges::{IPV4_RANGE, IPV6_RANGE};

/// Host-side link names are this prefix and a slot number (`ncsr0` to `ncsr63`); the slot chooses
/// the addresses, and creating the link claims it, atomically, among all processes of the machine.
const LINK_PREFIX: &str = "ncsr";

/// How many nodes can have a network at once on this machine (64 IPv4 `/30`s in [`IPV4_RANGE`]).
const SLOTS: u8 = 64;

/// The node's end of the veth pair, inside its namespace.
const NODE_LINK: &str = "eth0";

/// How long the namespace and links may take to come up.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(10);

/// The address families a node has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressFamilies {
    /// One IPv4 address.
    Ipv4,
    /// One IPv6 address (global; no IPv4 address but 127.0.0.1 on its own loopback).
    Ipv6,
    /// One IPv4 and one IPv6 address, IPv4 first (the kubelet's primary family, the one its first
    /// InternalIP and the apiserver's connections to it use).
    DualStack,
    /// One IPv6 and one IPv4 address, IPv6 first: an IPv6-primary dual-stack node.
    DualStackIpv6Primary,
}

/// A network namespace for one node, linked to this machine's namespace by a veth pair: the host
/// end `ncsr<slot>` holds `198.51.100.<4·slot+1>/30` and `2001:db8:0:<slot>::1/64`, the node end
/// (`eth0` in the namespace) `.<4·slot+2>` and `::2`, as [`AddressFamilies`] says. The node has no
/// other route, so whatever runs in it can reach only the host end's addresses, and this machine
/// reaches the node only through the link. IPv6 addresses skip duplicate address detection
/// (`nodad`), so they are usable at once, and IPv6 is enabled on both ends whatever the machine's
/// `disable_ipv6` defaults are.
///
/// The namespace lives as long as a holder process (`unshare --net sleep infinity`), supervised
/// like every testenv child: dropping the network deletes the link and ends the holder, and if
/// this process dies in any way, the watchdog ends the holder, the kernel destroys the namespace
/// once the processes in it are gone, and the veth pair, addresses and routes with it. Slots are
/// claimed by creating the link, so parallel test processes never share one, and a link left by a
/// run whose namespace outlived it only takes its slot out of use.
#[derive(Debug)]
pub struct NodeNetwork {
    holder: Supervised,
    link: String,
    node_addresses: Vec<IpAddr>,
    host_addresses: Vec<IpAddr>,
}

impl NodeNetwork {
    /// Creates a namespace whose node has `families`, after checking that [`IPV4_RANGE`] and
    /// [`IPV6_RANGE`] overlap none of this machine's addresses and routes (but for other
    /// `ncsr*` links). Needs root (`CAP_NET_ADMIN`, `CAP_SYS_ADMIN`), `ip` (iproute2), `unshare`
    /// and `nsenter`, and for IPv6 a kernel with IPv6.
    pub fn create(families: AddressFamilies) -> Result<NodeNetwork, Error> {
        ranges::check_unused(&ip(&["-j", "address", "show"])?, &routes()?, LINK_PREFIX)?;
        let args = ["--net", "sleep", "infinity"].map(str::to_owned);
        let mut holder =
            Supervised::spawn("network namespace", Path::new("unshare"), &args, Path::new("/dev/null"), None)?;
        let namespace = wait_for_namespace(&mut holder)?;
        let slot = claim_slot(holder.id())?;
        let mut network = NodeNetwork {
            holder,
            link: format!("{LINK_PREFIX}{slot}"),
            node_addresses: Vec::new(),
            host_addresses: Vec::new(),
        };
        let (v4, v6) = (families != AddressFamilies::Ipv6, families != AddressFamilies::Ipv4);
        // Refuses to touch links unless it runs in the node's namespace, not this machine's.
        let mut configure_node = vec![format!("test \"$(readlink /proc/self/ns/net)\" = '{namespace}'")];
        configure_node.push("ip link set lo up".to_owned());
        if v6 {
            enable_ipv6(&network.link)?;
            configure_node.push(format!("echo 0 > /proc/sys/net/ipv6/conf/{NODE_LINK}/disable_ipv6"));
        }
        let v4_pair = (Ipv4Addr::from(ranges::ipv4_base() + 4 * u32::from(slot)), 30);
        let v6_pair = (Ipv6Addr::from(ranges::ipv6_base() + (u128::from(slot) << 64)), 64);
        let mut pairs = [(v4, IpAddr::V4(v4_pair.0), v4_pair.1), (v6, IpAddr::V6(v6_pair.0), v6_pair.1)];
        if families == AddressFamilies::DualStackIpv6Primary {
            pairs.reverse();
        }
        for (_, subnet, bits) in pairs.into_iter().filter(|(wanted, _, _)| *wanted) {
            let (host, node) = (offset(subnet, 1), offset(subnet, 2));
            let flags = if subnet.is_ipv6() { " nodad" } else { "" };
            let host_address = format!("{host}/{bits}");
            let mut add = vec!["address", "add", &host_address, "dev", &network.link];
            add.extend(subnet.is_ipv6().then_some("nodad"));
            ip(&add)?;
            configure_node.push(format!("ip address add {node}/{bits} dev {NODE_LINK}{flags}"));
            network.host_addresses.push(host);
            network.node_addresses.push(node);
        }
        configure_node.push(format!("ip link set {NODE_LINK} up"));
        ip(&["link", "set", &network.link, "up"])?;
        run(Command::new("nsenter").arg(network.namespace_flag()).args(["sh", "-ec", &configure_node.join("\n")]))?;
        wait_until_up(&network.link)?;
        Ok(network)
    }

    /// The node's addresses, the primary family's first.
    pub fn addresses(&self) -> &[IpAddr] {
        &self.node_addresses
    }

    /// The host end's addresses (this machine's side of the link), in the same order.
    pub fn host_addresses(&self) -> &[IpAddr] {
        &self.host_addresses
    }

    /// The host end's link name (`ncsr<slot>`), in this machine's namespace.
    pub fn link_name(&self) -> &str {
        &self.link
    }

    /// The namespace's file, `/proc/<holder>/ns/net`.
    pub fn namespace_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/ns/net", self.holder.id()))
    }

    /// The command prefix that runs a command in the namespace (`nsenter --net=...`).
    pub(crate) fn enter(&self) -> Vec<String> {
        vec!["nsenter".to_owned(), self.namespace_flag()]
    }

    fn namespace_flag(&self) -> String {
        format!("--net={}", self.namespace_path().display())
    }
}

impl Drop for NodeNetwork {
    fn drop(&mut self) {
        // Deleting one end deletes the pair, its addresses and routes; the holder ends next.
        let _ = ip(&["link", "delete", &self.link]);
    }
}

/// `subnet`'s address number `n`.
fn offset(subnet: IpAddr, n: u8) -> IpAddr {
    match subnet {
        IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(u32::from(v4) + u32::from(n))),
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) + u128::from(n))),
    }
}

/// Waits until the holder has left this process's network namespace for its own; returns that
/// namespace's identity (`net:[<inode>]`).
fn wait_for_namespace(holder: &mut Supervised) -> Result<String, Error> {
    let ours = std::fs::read_link("/proc/self/ns/net").map_err(Error::io("reading /proc/self/ns/net"))?;
    let path = format!("/proc/{}/ns/net", holder.id());
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    loop {
        if let Some(status) = holder.exited() {
            let reason = format!("unshare --net exited with {status} (it needs root: CAP_SYS_ADMIN)");
            return Err(holder.start_error(reason));
        }
        if let Ok(theirs) = std::fs::read_link(&path)
            && theirs != ours
        {
            return Ok(theirs.display().to_string());
        }
        if Instant::now() > deadline {
            return Err(holder.start_error(format!("no namespace of its own after {SETTLE_TIMEOUT:?}")));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Creates the veth pair of the first free slot, its node end in the namespace of process `pid`.
fn claim_slot(pid: u32) -> Result<u8, Error> {
    for slot in 0..SLOTS {
        let link = format!("{LINK_PREFIX}{slot}");
        let created = Command::new("ip")
            .args(["link", "add", &link, "type", "veth", "peer", "name", NODE_LINK, "netns", &pid.to_string()])
            .output()
            .map_err(Error::io("running ip link add"))?;
        if created.status.success() {
            return Ok(slot);
        }
        let stderr = String::from_utf8_lossy(&created.stderr);
        if !stderr.contains("File exists") {
            return Err(Error::Network(format!("ip link add {link}: {}", stderr.trim())));
        }
    }
    Err(Error::Network(format!("all {SLOTS} links {LINK_PREFIX}0..{LINK_PREFIX}{} exist", SLOTS - 1)))
}

/// Enables IPv6 on this machine's `link` (`disable_ipv6` may default to 1).
fn enable_ipv6(link: &str) -> Result<(), Error> {
    let path = format!("/proc/sys/net/ipv6/conf/{link}/disable_ipv6");
    std::fs::write(&path, "0").map_err(Error::io(format!("enabling IPv6 (writing {path}; is IPv6 in the kernel?)")))
}

/// Waits until `link` is up (both ends are) and none of its addresses is tentative.
fn wait_until_up(link: &str) -> Result<(), Error> {
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    loop {
        let shown = ip(&["-j", "address", "show", "dev", link])?;
        if ranges::link_ready(&shown) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::Network(format!("{link} not up after {SETTLE_TIMEOUT:?}: {shown}")));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// This machine's IPv4 and IPv6 routes of every table, as `ip -j route` prints them.
fn routes() -> Result<Vec<String>, Error> {
    ["-4", "-6"].into_iter().map(|family| ip(&["-j", family, "route", "show", "table", "all"])).collect()
}

/// Runs `ip args`; its standard output.
fn ip(args: &[&str]) -> Result<String, Error> {
    run(Command::new("ip").args(args))
}

/// Runs `command`; its standard output, or an error with its standard error.
fn run(command: &mut Command) -> Result<String, Error> {
    let shown = format!("{command:?}");
    let output = command.output().map_err(Error::io(format!("running {shown}")))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(Error::Network(format!("{shown} failed ({}): {}", output.status, stderr.trim())));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
