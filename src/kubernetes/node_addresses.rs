//! Who claims each address among the Nodes ([`NodeAddresses`]): one watch of every Node, kept as
//! its name, the addresses its status lists and whether it carries the control-plane role label,
//! indexed by address. A CSR that names an apiserver's advertise address asks it which Nodes list
//! that address, a lookup where it was a list of every Node per CSR. The watch starts when first
//! asked (most clusters never ask: only a control-plane node's own serving certificate names an
//! advertise address) and runs from then on; until its first list completes the claims are
//! unknown (the CSR is retried). A relist replaces the index whole when it completes. A Node that
//! cannot be decoded might list any address: while one is held, the claims are unknown too, never
//! read without it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::task::JoinHandle;

use crate::kubernetes::decoded::{Decoded, Skipped};
use crate::kubernetes::kube_watch;
use crate::kubernetes::node_object::NodeObject;
use crate::kubernetes::object_fields::{ObjectKind, UndecodableError};
use crate::policy::{AddressClaim, CONTROL_PLANE_LABEL, ClusterError, RequestError, Unlisted};

/// What the watch lists, as an error names it.
const NODE_ADDRESSES: &str = "the Nodes' addresses";

/// How long a first question waits for the first list.
const FIRST_LIST: Duration = Duration::from_secs(5);
/// How often the wait for the first list looks again.
const FIRST_LIST_POLL: Duration = Duration::from_millis(20);

/// What is kept of one Node.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kept {
    /// Its addresses (canonical) and whether it carries the control-plane role label.
    Read { addresses: Vec<IpAddr>, control_plane: bool },
    /// It could not be decoded: its addresses are unknown.
    Undecodable(UndecodableError),
}

/// The Nodes by name, the names of those listing each address, and why each Node that could not
/// be decoded could not (so a lookup never passes over every Node).
#[derive(Debug, Default)]
struct Index {
    nodes: HashMap<Arc<str>, Kept>,
    by_address: HashMap<IpAddr, BTreeSet<Arc<str>>>,
    undecodable: BTreeMap<Arc<str>, UndecodableError>,
}

impl Index {
    fn insert(&mut self, name: Arc<str>, kept: Kept) {
        self.remove(&name);
        match &kept {
            Kept::Read { addresses, .. } => {
                for address in addresses {
                    self.by_address.entry(*address).or_default().insert(name.clone());
                }
            }
            Kept::Undecodable(why) => {
                self.undecodable.insert(name.clone(), why.clone());
            }
        }
        self.nodes.insert(name, kept);
    }

    fn remove(&mut self, name: &str) {
        self.undecodable.remove(name);
        let Some(Kept::Read { addresses, .. }) = self.nodes.remove(name) else { return };
        for address in addresses {
            if let Some(names) = self.by_address.get_mut(&address) {
                names.remove(name);
                if names.is_empty() {
                    self.by_address.remove(&address);
                }
            }
        }
    }

    /// The claims of `ips`, or why they are unknown.
    fn claims(&self, ips: &[IpAddr]) -> Result<Vec<AddressClaim>, UndecodableError> {
        if let Some(why) = self.undecodable.values().next() {
            return Err(why.clone());
        }
        let claim = |ip: &IpAddr| {
            let names = self.by_address.get(&ip.to_canonical()).into_iter().flatten();
            let labelled =
                |name: &&Arc<str>| matches!(self.nodes.get(*name), Some(Kept::Read { control_plane: true, .. }));
            AddressClaim {
                ip: *ip,
                nodes: names.clone().map(|name| name.to_string()).collect(),
                control_plane: names.filter(labelled).map(|name| name.to_string()).collect(),
            }
        };
        Ok(ips.iter().map(claim).collect())
    }
}

/// The watch's state: the index, a relist under way, and whether the first list completed.
#[derive(Debug, Default)]
struct State {
    index: Index,
    relist: Option<Index>,
    synced: bool,
    error: Option<RequestError>,
}

impl State {
    fn apply(&mut self, event: Result<watcher::Event<Decoded<NodeObject>>, watcher::Error>, skipped: &Skipped) {
        match event {
            Ok(watcher::Event::Init) => self.relist = Some(Index::default()),
            Ok(watcher::Event::InitApply(node)) => {
                let (name, kept) = kept(&node, skipped);
                self.relist.get_or_insert_default().insert(name, kept);
            }
            Ok(watcher::Event::InitDone) => {
                self.index = self.relist.take().unwrap_or_default();
                self.synced = true;
                self.error = None;
            }
            Ok(watcher::Event::Apply(node)) => {
                let (name, kept) = kept(&node, skipped);
                self.index.insert(name, kept);
            }
            Ok(watcher::Event::Delete(node)) => self.index.remove(&name_of(&node)),
            Err(error) => {
                tracing::warn!(%error, "watching Nodes for the addresses they claim");
                self.error = Some(RequestError::new(error));
            }
        }
    }
}

/// The name of a Node as listed, decoded or not.
fn name_of(node: &Decoded<NodeObject>) -> Arc<str> {
    let name = match node {
        Decoded::Object(node) => node.metadata.0.name.as_deref(),
        Decoded::Undecodable(undecodable) => undecodable.metadata.name.as_deref(),
    };
    Arc::from(name.unwrap_or_default())
}

/// What is kept of `node`; one that cannot be decoded is reported to `skipped`.
fn kept(node: &Decoded<NodeObject>, skipped: &Skipped) -> (Arc<str>, Kept) {
    let kept = match node {
        Decoded::Object(node) => {
            let listed = node.status.iter().flat_map(|status| status.addresses.iter().flatten());
            let addresses = listed.filter_map(|a| a.address.trim().parse::<IpAddr>().ok()).map(|ip| ip.to_canonical());
            let labels = node.metadata.0.labels.as_ref();
            let control_plane = labels.is_some_and(|labels| labels.contains_key(CONTROL_PLANE_LABEL));
            Kept::Read { addresses: addresses.collect(), control_plane }
        }
        Decoded::Undecodable(undecodable) => Kept::Undecodable(skipped.report(ObjectKind::Node, undecodable)),
    };
    (name_of(node), kept)
}

/// The Nodes' addresses, watched once first asked. Cheap to clone.
#[derive(Clone)]
pub struct NodeAddresses {
    client: Client,
    skipped: Skipped,
    state: Arc<Mutex<State>>,
    watch: Arc<OnceLock<Watch>>,
}

/// The watch's task, aborted when the last handle goes.
struct Watch(JoinHandle<()>);

impl Drop for Watch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl NodeAddresses {
    /// Reads Nodes through `client` once asked; what cannot be decoded is reported to `skipped`.
    pub fn new(client: Client, skipped: Skipped) -> NodeAddresses {
        NodeAddresses { client, skipped, state: Arc::default(), watch: Arc::default() }
    }

    /// Who claims each of `ips`: the Nodes listing it, and which of them carry the control-plane
    /// role label. Starts the watch when first asked and waits at most [`FIRST_LIST`] for its
    /// first list; unknown (an error) until then, or while a Node cannot be decoded.
    pub async fn claims(&self, ips: &[IpAddr]) -> Result<Vec<AddressClaim>, ClusterError> {
        self.watch.get_or_init(|| self.start());
        let deadline = tokio::time::Instant::now() + FIRST_LIST;
        loop {
            {
                let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                if state.synced {
                    let unlisted = |undecodable| Unlisted::Failed(RequestError::new(undecodable));
                    let claims = state.index.claims(ips).map_err(unlisted);
                    return claims.map_err(|why| ClusterError::NotListed { what: NODE_ADDRESSES, why });
                }
                if tokio::time::Instant::now() >= deadline {
                    let why =
                        state.error.clone().map_or(Unlisted::FirstList("the first list of Nodes"), Unlisted::Failed);
                    return Err(ClusterError::NotListed { what: NODE_ADDRESSES, why });
                }
            }
            tokio::time::sleep(FIRST_LIST_POLL).await;
        }
    }

    fn start(&self) -> Watch {
        let api = Api::<Decoded<NodeObject>>::all(self.client.clone());
        let (state, skipped) = (self.state.clone(), self.skipped.clone());
        Watch(tokio::spawn(async move {
            let mut events = std::pin::pin!(kube_watch::stream(api, watcher::Config::default()));
            while let Some(event) = events.next().await {
                state.lock().unwrap_or_else(PoisonError::into_inner).apply(event, &skipped);
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::NodeAddress;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::kubernetes::decoded::Undecodable;
    use crate::kubernetes::node_object::NodeStatus;
    use crate::kubernetes::object_fields::Meta;

    fn node(name: &str, addresses: &[&str], control_plane: bool) -> Decoded<NodeObject> {
        let labels = control_plane.then(|| [(CONTROL_PLANE_LABEL.to_owned(), String::new())].into());
        let addresses = addresses.iter().map(|a| NodeAddress { address: (*a).into(), type_: "InternalIP".into() });
        Decoded::Object(NodeObject {
            metadata: Meta(ObjectMeta { name: Some(name.into()), labels, ..ObjectMeta::default() }),
            spec: None,
            status: Some(NodeStatus { addresses: Some(addresses.collect()), daemon_endpoints: None }),
        })
    }

    fn claims(state: &State, ip: &str) -> Result<(Vec<String>, Vec<String>), UndecodableError> {
        let claims = state.index.claims(&[ip.parse().unwrap()])?;
        Ok((claims[0].nodes.clone(), claims[0].control_plane.clone()))
    }

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn each_address_is_claimed_by_the_nodes_listing_it_as_their_events_say() {
        let skipped = Skipped::logged();
        let mut state = State::default();
        let apply = |state: &mut State, event| state.apply(Ok(event), &skipped);
        apply(&mut state, watcher::Event::Init);
        apply(&mut state, watcher::Event::InitApply(node("cp", &["10.0.0.5", "fd00::5"], true)));
        apply(&mut state, watcher::Event::InitApply(node("w1", &["10.0.0.6"], false)));
        apply(&mut state, watcher::Event::InitDone);
        assert!(state.synced);
        assert_eq!(claims(&state, "10.0.0.5"), Ok((names(&["cp"]), names(&["cp"]))));
        assert_eq!(claims(&state, "::ffff:10.0.0.5"), Ok((names(&["cp"]), names(&["cp"]))), "compared canonically");
        apply(&mut state, watcher::Event::Apply(node("w1", &["10.0.0.5", "10.0.0.7"], false)));
        assert_eq!(claims(&state, "10.0.0.5"), Ok((names(&["cp", "w1"]), names(&["cp"]))));
        assert_eq!(claims(&state, "10.0.0.6"), Ok((Vec::new(), Vec::new())), "an address no longer listed");
        apply(&mut state, watcher::Event::Delete(node("cp", &[], false)));
        assert_eq!(claims(&state, "10.0.0.5"), Ok((names(&["w1"]), Vec::new())));
        assert_eq!(claims(&state, "fd00::5"), Ok((Vec::new(), Vec::new())));
        // A relist replaces the index whole when it completes.
        apply(&mut state, watcher::Event::Init);
        apply(&mut state, watcher::Event::InitApply(node("w2", &["10.0.0.5"], false)));
        assert_eq!(claims(&state, "10.0.0.5"), Ok((names(&["w1"]), Vec::new())), "the old index until it completes");
        apply(&mut state, watcher::Event::InitDone);
        assert_eq!(claims(&state, "10.0.0.5"), Ok((names(&["w2"]), Vec::new())));
        assert!(
            state.index.by_address.keys().all(|ip| *ip == "10.0.0.5".parse::<IpAddr>().unwrap()),
            "nothing left over"
        );
    }

    /// The controller's index and `check --objects` (a `StaticCluster` of the same Nodes) read the
    /// same claims, whatever the spelling of an address.
    #[tokio::test]
    async fn the_index_and_check_read_the_same_claims_of_the_same_nodes() {
        use crate::kubernetes::cluster::{StaticCluster, node_info};
        use crate::policy::ClusterView;
        let listed: [(&str, &[&str], bool); 4] = [
            ("cp", &["10.0.0.5", "fd00::5"], true),
            ("w1", &[" 10.0.0.5", "10.0.0.6 "], false),
            ("w2", &["::ffff:10.0.0.6", "not an address"], true),
            ("w3", &["10.0.0.7"], false),
        ];
        let nodes: Vec<Decoded<NodeObject>> = listed.iter().map(|(name, at, cp)| node(name, at, *cp)).collect();
        let skipped = Skipped::logged();
        let mut state = State::default();
        state.apply(Ok(watcher::Event::Init), &skipped);
        for node in &nodes {
            state.apply(Ok(watcher::Event::InitApply(node.clone())), &skipped);
        }
        state.apply(Ok(watcher::Event::InitDone), &skipped);
        let infos = nodes.iter().filter_map(Decoded::as_object).map(node_info);
        let offline = StaticCluster::new(infos, [], 0);
        let ips: Vec<IpAddr> =
            ["10.0.0.5", "::ffff:10.0.0.6", "fd00::5", "10.0.0.9"].map(|ip| ip.parse().unwrap()).into();
        let sorted = |mut claims: Vec<AddressClaim>| {
            for claim in &mut claims {
                claim.nodes.sort();
                claim.control_plane.sort();
            }
            claims
        };
        let watched = sorted(state.index.claims(&ips).unwrap());
        assert_eq!(watched, sorted(offline.nodes_claiming(&ips).await.unwrap()));
        assert_eq!(watched[1].nodes, ["w1", "w2"], "{watched:?}");
        assert_eq!(watched[1].control_plane, ["w2"], "{watched:?}");
    }

    #[test]
    fn a_node_that_cannot_be_decoded_makes_every_claim_unknown_until_it_changes_or_goes() {
        let skipped = Skipped::logged();
        let mut state = State::default();
        let undecodable = || {
            let metadata = ObjectMeta { name: Some("bad".into()), ..ObjectMeta::default() };
            Decoded::Undecodable(Box::new(Undecodable { metadata, error: "a time out of range".into() }))
        };
        state.apply(Ok(watcher::Event::Init), &skipped);
        state.apply(Ok(watcher::Event::InitApply(node("cp", &["10.0.0.5"], true))), &skipped);
        state.apply(Ok(watcher::Event::InitApply(undecodable())), &skipped);
        state.apply(Ok(watcher::Event::InitDone), &skipped);
        let unknown = claims(&state, "10.0.0.5").unwrap_err().to_string();
        assert!(unknown.contains("could not be decoded: a time out of range"), "{unknown}");
        state.apply(Ok(watcher::Event::Apply(node("bad", &["10.0.0.9"], false))), &skipped);
        assert_eq!(claims(&state, "10.0.0.5"), Ok((names(&["cp"]), names(&["cp"]))));
        state.apply(Ok(watcher::Event::Apply(undecodable())), &skipped);
        assert!(claims(&state, "10.0.0.9").is_err(), "changed into one that cannot be read: not its old addresses");
        state.apply(Ok(watcher::Event::Delete(undecodable())), &skipped);
        assert_eq!(claims(&state, "10.0.0.9"), Ok((Vec::new(), Vec::new())));
        assert!(state.index.undecodable.is_empty(), "nothing left over");
    }
}
