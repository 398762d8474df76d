//! The watched Nodes ([`NodeIndex`]): one watch of every Node, each kept as what decisions read
//! of it ([`NodeFacts`]), indexed by name and by address. A CSR's Node, the kubelet a renewal
//! dials and who claims an apiserver's advertise address are lookups, whatever the number of
//! Nodes, where each was a GET (or a list of every Node) per CSR.
//!
//! The watch runs from when it is started: by the controller's first read of a Node
//! (`--verify-node-addresses`, rules that read `node`, the renewal dial) or first question of
//! who claims an advertise address; the one-shot commands read a Node by a GET. The index
//! answers only while its watch is live: its first list complete, no relist under way, and
//! nothing but events since the watch's last error. Events come in the apiserver's order, so a
//! live index shows each Node as it was a watch delivery ago, never a state it did not have.
//! Otherwise a Node is read by a GET, as the index would have shown it, and the claims of an
//! address are unknown (the CSR is retried). A relist keeps the Nodes that did not change as they
//! were kept (one copy, shared) and replaces the index when it completes. A Node that cannot be
//! decoded might list any address: while one is held, the claims are unknown too, never read
//! without it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::kubernetes::decoded::{Decoded, Skipped};
use crate::kubernetes::kube_watch;
use crate::kubernetes::node_object::{NodeFacts, NodeObject};
use crate::kubernetes::object_fields::{ObjectKind, UndecodableError};
use crate::policy::{AddressClaim, ClusterError, RequestError, Unlisted};

/// What the watch lists, as an error names it.
const NODE_ADDRESSES: &str = "the Nodes' addresses";

/// How long a question of the claims waits for the watch to be live.
const FIRST_LIST: Duration = Duration::from_secs(5);
/// How often that wait looks again.
const FIRST_LIST_POLL: Duration = Duration::from_millis(20);

/// What is kept of one Node.
#[derive(Debug, Clone, PartialEq)]
pub enum Kept {
    /// What is read of it.
    Read(Arc<NodeFacts>),
    /// It could not be decoded: its addresses are unknown.
    Undecodable(UndecodableError),
}

/// The names of the Nodes listing one address: nearly always one, kept without a set of its own.
#[derive(Debug, Clone, PartialEq)]
enum Listing {
    /// One Node lists it.
    One(Arc<str>),
    /// Several do, in name order.
    Many(BTreeSet<Arc<str>>),
}

impl Listing {
    fn add(&mut self, name: Arc<str>) {
        match self {
            Listing::One(one) if *one == name => {}
            Listing::One(one) => *self = Listing::Many(BTreeSet::from([one.clone(), name])),
            Listing::Many(names) => {
                names.insert(name);
            }
        }
    }

    /// Takes `name` off the listing; `false` when no Node is left on it.
    fn remove(&mut self, name: &str) -> bool {
        match self {
            Listing::One(one) => **one != *name,
            Listing::Many(names) => {
                names.remove(name);
                let left = !names.is_empty();
                if names.len() == 1
                    && let Some(last) = names.pop_first()
                {
                    *self = Listing::One(last);
                }
                left
            }
        }
    }

    fn names(&self) -> impl Iterator<Item = &Arc<str>> + Clone {
        let (one, many) = match self {
            Listing::One(one) => (Some(one), None),
            Listing::Many(names) => (None, Some(names.iter())),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }
}

/// The Nodes by name, the names of those listing each address, and why each Node that could not
/// be decoded could not (so a lookup never passes over every Node).
#[derive(Debug, Default)]
struct Index {
    nodes: HashMap<Arc<str>, Kept>,
    by_address: HashMap<IpAddr, Listing>,
    undecodable: BTreeMap<Arc<str>, UndecodableError>,
}

impl Index {
    fn insert(&mut self, name: Arc<str>, kept: Kept) {
        self.remove(&name);
        match &kept {
            Kept::Read(facts) => {
                for address in facts.ips() {
                    match self.by_address.get_mut(&address) {
                        Some(listing) => listing.add(name.clone()),
                        None => {
                            self.by_address.insert(address, Listing::One(name.clone()));
                        }
                    }
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
        let Some(Kept::Read(facts)) = self.nodes.remove(name) else { return };
        for address in facts.ips() {
            if let Some(listing) = self.by_address.get_mut(&address)
                && !listing.remove(name)
            {
                self.by_address.remove(&address);
            }
        }
    }

    /// The claims of `ips`, or why they are unknown.
    fn claims(&self, ips: &[IpAddr]) -> Result<Vec<AddressClaim>, UndecodableError> {
        if let Some(why) = self.undecodable.values().next() {
            return Err(why.clone());
        }
        let claim = |ip: &IpAddr| {
            let names = self.by_address.get(&ip.to_canonical()).into_iter().flat_map(Listing::names);
            let labelled =
                |name: &&Arc<str>| matches!(self.nodes.get(*name), Some(Kept::Read(facts)) if facts.control_plane);
            AddressClaim {
                ip: *ip,
                nodes: names.clone().map(|name| name.to_string()).collect(),
                control_plane: names.filter(labelled).map(|name| name.to_string()).collect(),
            }
        };
        Ok(ips.iter().map(claim).collect())
    }
}

/// What the index tells of one Node.
#[derive(Debug, Clone, PartialEq)]
pub enum Known {
    /// The watch is live: the Node as last delivered, or none.
    Live(Option<Arc<NodeFacts>>),
    /// The watch is live and the Node could not be decoded.
    Undecodable(UndecodableError),
    /// The watch is not live (not yet listed, relisting, or failed since its last event): read
    /// the Node.
    Unknown,
}

/// The watch's state: the index, a relist under way, whether the first list completed and the
/// watch's error since its last event.
#[derive(Debug, Default)]
struct State {
    index: Index,
    relist: Option<Vec<(Arc<str>, Kept)>>,
    synced: bool,
    error: Option<RequestError>,
    for_rules: bool,
}

impl State {
    fn for_rules(for_rules: bool) -> State {
        State { for_rules, ..State::default() }
    }

    fn live(&self) -> bool {
        self.synced && self.relist.is_none() && self.error.is_none()
    }

    fn apply(&mut self, event: Result<watcher::Event<Decoded<NodeObject>>, watcher::Error>, skipped: &Skipped) {
        match event {
            Ok(watcher::Event::Init) => self.relist = Some(Vec::new()),
            Ok(watcher::Event::InitApply(node)) => {
                let (name, kept) = self.kept(&node, skipped);
                self.relist.get_or_insert_default().push((name, kept));
            }
            Ok(watcher::Event::InitDone) => {
                let listed = self.relist.take().unwrap_or_default();
                // The old index goes before the new one is built: what did not change is shared.
                self.index = Index::default();
                self.index.nodes.reserve(listed.len());
                for (name, kept) in listed {
                    self.index.insert(name, kept);
                }
                self.synced = true;
                self.error = None;
            }
            Ok(watcher::Event::Apply(node)) => {
                let (name, kept) = self.kept(&node, skipped);
                self.index.insert(name, kept);
                self.error = None;
            }
            Ok(watcher::Event::Delete(node)) => {
                self.index.remove(&name_of(&node));
                self.error = None;
            }
            Err(error) => {
                tracing::warn!(%error, "watching Nodes");
                self.error = Some(RequestError::new(error));
            }
        }
    }

    /// What is kept of `node` (one that cannot be decoded is reported to `skipped`): the facts
    /// already kept when they did not change, so a relist holds no second copy of them.
    fn kept(&self, node: &Decoded<NodeObject>, skipped: &Skipped) -> (Arc<str>, Kept) {
        let name = name_of(node);
        let (name, current) = match self.index.nodes.get_key_value(&*name) {
            Some((name, current)) => (name.clone(), Some(current)),
            None => (name, None),
        };
        let kept = match node {
            Decoded::Object(node) => {
                let facts = NodeFacts::kept(node, self.for_rules);
                match current {
                    Some(Kept::Read(current)) if **current == facts => Kept::Read(current.clone()),
                    _ => Kept::Read(Arc::new(facts)),
                }
            }
            Decoded::Undecodable(undecodable) => Kept::Undecodable(skipped.report(ObjectKind::Node, undecodable)),
        };
        (name, kept)
    }

    /// What the index tells of Node `name`.
    fn known(&self, name: &str) -> Known {
        if !self.live() {
            return Known::Unknown;
        }
        match self.index.nodes.get(name) {
            None => Known::Live(None),
            Some(Kept::Read(facts)) => Known::Live(Some(facts.clone())),
            Some(Kept::Undecodable(why)) => Known::Undecodable(why.clone()),
        }
    }

    /// Why the claims are unknown now, or `None` when the watch is live.
    fn not_live(&self) -> Option<Unlisted> {
        match (&self.error, self.synced, &self.relist) {
            (Some(error), _, _) => Some(Unlisted::Failed(error.clone())),
            (None, false, _) => Some(Unlisted::FirstList("the first list of Nodes")),
            (None, true, Some(_)) => Some(Unlisted::FirstList("a new list of Nodes")),
            (None, true, None) => None,
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

/// The watched Nodes, watched once first asked. Cheap to clone.
#[derive(Clone)]
pub struct NodeIndex {
    client: Client,
    skipped: Skipped,
    state: Arc<Mutex<State>>,
    changes: Arc<watch::Sender<u64>>,
    watch: Arc<OnceLock<Watch>>,
}

/// The watch's task, aborted when the last handle goes.
struct Watch(JoinHandle<()>);

impl Drop for Watch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl NodeIndex {
    /// Reads Nodes through `client` once asked, keeping of each what the rules see of it when
    /// `for_rules`; what cannot be decoded is reported to `skipped`.
    pub fn new(client: Client, skipped: Skipped, for_rules: bool) -> NodeIndex {
        let state = Arc::new(Mutex::new(State::for_rules(for_rules)));
        let changes = Arc::new(watch::channel(0).0);
        NodeIndex { client, skipped, state, changes, watch: Arc::default() }
    }

    /// Starts the watch, unless it runs already.
    pub fn watch(&self) {
        self.watch.get_or_init(|| self.start());
    }

    /// Changes whenever a Node is added, changed or removed, and when a list completes.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Starts the watch, unless it runs already, and resolves once its first list completed.
    pub async fn synced(&self) {
        self.watch();
        let mut changes = self.changes();
        while !self.state.lock().unwrap_or_else(PoisonError::into_inner).synced {
            if changes.changed().await.is_err() {
                return;
            }
        }
    }

    /// How many Nodes the last completed list and the events since hold: also those that could
    /// not be decoded, which exist all the same.
    pub fn count(&self) -> usize {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).index.nodes.len()
    }

    /// Every Node as the watch holds it, by name, once it is live: starts the watch when first
    /// asked and waits at most `wait` for it to be live; `None` when it is not by then.
    pub async fn every_node(&self, wait: Duration) -> Option<Vec<(Arc<str>, Kept)>> {
        self.watch();
        let deadline = tokio::time::Instant::now() + wait;
        let mut changes = self.changes();
        loop {
            {
                let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                if state.live() {
                    let nodes = state.index.nodes.iter().map(|(name, kept)| (name.clone(), kept.clone()));
                    return Some(nodes.collect());
                }
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return None,
            }
        }
    }

    /// What the index tells of Node `name` now: [`Known::Unknown`] until [`NodeIndex::watch`]
    /// (or a question of the claims) started the watch and it is live.
    pub fn known(&self, name: &str) -> Known {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).known(name)
    }

    /// Who claims each of `ips`: the Nodes listing it, and which of them carry the control-plane
    /// role label. Starts the watch when first asked and waits at most [`FIRST_LIST`] for it to
    /// be live; unknown (an error) until then, or while a Node cannot be decoded.
    pub async fn claims(&self, ips: &[IpAddr]) -> Result<Vec<AddressClaim>, ClusterError> {
        self.watch.get_or_init(|| self.start());
        let deadline = tokio::time::Instant::now() + FIRST_LIST;
        loop {
            {
                let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                let why = match state.not_live() {
                    None => {
                        let unlisted = |undecodable| Unlisted::Failed(RequestError::new(undecodable));
                        let claims = state.index.claims(ips).map_err(unlisted);
                        return claims.map_err(|why| ClusterError::NotListed { what: NODE_ADDRESSES, why });
                    }
                    Some(why) => why,
                };
                if tokio::time::Instant::now() >= deadline {
                    return Err(ClusterError::NotListed { what: NODE_ADDRESSES, why });
                }
            }
            tokio::time::sleep(FIRST_LIST_POLL).await;
        }
    }

    fn start(&self) -> Watch {
        let api = Api::<Decoded<NodeObject>>::all(self.client.clone());
        let (state, skipped, changes) = (self.state.clone(), self.skipped.clone(), self.changes.clone());
        Watch(tokio::spawn(async move {
            let mut events = std::pin::pin!(kube_watch::stream(api, watcher::Config::default()));
            while let Some(event) = events.next().await {
                let changed = matches!(
                    event,
                    Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone)
                );
                state.lock().unwrap_or_else(PoisonError::into_inner).apply(event, &skipped);
                if changed {
                    changes.send_modify(|n| *n = n.wrapping_add(1));
                }
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
    use crate::policy::CONTROL_PLANE_LABEL;

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
        assert!(state.not_live().is_some(), "but not read while the relist runs");
        apply(&mut state, watcher::Event::InitDone);
        assert_eq!(claims(&state, "10.0.0.5"), Ok((names(&["w2"]), Vec::new())));
        assert!(
            state.index.by_address.keys().all(|ip| *ip == "10.0.0.5".parse::<IpAddr>().unwrap()),
            "nothing left over"
        );
    }

    #[test]
    fn an_address_listed_by_several_nodes_keeps_every_one_left_and_one_alone_without_a_set() {
        let skipped = Skipped::logged();
        let mut state = State::default();
        let apply = |state: &mut State, event| state.apply(Ok(event), &skipped);
        let listing = |state: &State| state.index.by_address.get(&"10.0.0.5".parse().unwrap()).cloned();
        apply(&mut state, watcher::Event::Init);
        apply(&mut state, watcher::Event::InitApply(node("a", &["10.0.0.5", "10.0.0.5"], false)));
        apply(&mut state, watcher::Event::InitDone);
        assert_eq!(listing(&state), Some(Listing::One("a".into())), "an address listed twice by one Node");
        for name in ["b", "c"] {
            apply(&mut state, watcher::Event::Apply(node(name, &["10.0.0.5"], false)));
        }
        assert_eq!(claims(&state, "10.0.0.5"), Ok((names(&["a", "b", "c"]), Vec::new())));
        apply(&mut state, watcher::Event::Delete(node("b", &[], false)));
        assert_eq!(claims(&state, "10.0.0.5"), Ok((names(&["a", "c"]), Vec::new())), "both left still claim it");
        apply(&mut state, watcher::Event::Delete(node("a", &[], false)));
        assert_eq!(listing(&state), Some(Listing::One("c".into())), "one left: no set");
        apply(&mut state, watcher::Event::Delete(node("c", &[], false)));
        assert_eq!(listing(&state), None);
    }

    /// The controller's index and `check --objects` (a `StaticCluster` of the same Nodes) read the
    /// same claims, whatever the spelling of an address.
    #[tokio::test]
    async fn the_index_and_check_read_the_same_claims_of_the_same_nodes() {
        use crate::kubernetes::cluster::StaticCluster;
        use crate::kubernetes::node_object::node_info;
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

    #[test]
    fn a_node_is_told_only_while_the_watch_is_live() {
        let skipped = Skipped::logged();
        let mut state = State::default();
        let told = |state: &State| match state.known("w1") {
            Known::Live(found) => Some(found.map(|facts| facts.info.addresses.len())),
            Known::Unknown => None,
            Known::Undecodable(why) => panic!("{why}"),
        };
        assert_eq!(told(&state), None, "before the first list");
        state.apply(Ok(watcher::Event::Init), &skipped);
        state.apply(Ok(watcher::Event::InitApply(node("w1", &["10.0.0.6"], false))), &skipped);
        assert_eq!(told(&state), None, "while it is listed");
        state.apply(Ok(watcher::Event::InitDone), &skipped);
        assert_eq!(told(&state), Some(Some(1)));
        assert_eq!(state.known("w2"), Known::Live(None), "a Node the live watch has not seen does not exist yet");
        state.apply(Err(watcher::Error::NoResourceVersion), &skipped);
        assert_eq!(told(&state), None, "after an error, until the watch delivers again");
        assert!(state.not_live().is_some());
        state.apply(Ok(watcher::Event::Apply(node("w1", &["10.0.0.6", "10.0.0.7"], false))), &skipped);
        assert_eq!(told(&state), Some(Some(2)));
        state.apply(Ok(watcher::Event::Init), &skipped);
        assert_eq!(told(&state), None, "while it is listed again");
        state.apply(Ok(watcher::Event::InitDone), &skipped);
        assert_eq!(told(&state), Some(None), "gone from the new list");
    }

    #[test]
    fn a_relist_keeps_one_copy_of_what_did_not_change() {
        let skipped = Skipped::logged();
        let mut state = State::default();
        let list = |state: &mut State, nodes: [Decoded<NodeObject>; 2]| {
            state.apply(Ok(watcher::Event::Init), &skipped);
            for node in nodes {
                state.apply(Ok(watcher::Event::InitApply(node)), &skipped);
            }
            state.apply(Ok(watcher::Event::InitDone), &skipped);
        };
        let facts = |state: &State, name: &str| match state.known(name) {
            Known::Live(Some(facts)) => facts,
            other => panic!("{other:?}"),
        };
        list(&mut state, [node("same", &["10.0.0.1"], false), node("moved", &["10.0.0.2"], false)]);
        let (same, moved) = (facts(&state, "same"), facts(&state, "moved"));
        list(&mut state, [node("same", &["10.0.0.1"], false), node("moved", &["10.0.0.3"], false)]);
        assert!(Arc::ptr_eq(&same, &facts(&state, "same")), "the unchanged Node is the one kept");
        assert!(!Arc::ptr_eq(&moved, &facts(&state, "moved")));
        assert_eq!(claims(&state, "10.0.0.3"), Ok((names(&["moved"]), Vec::new())));
        assert_eq!(claims(&state, "10.0.0.2"), Ok((Vec::new(), Vec::new())));
    }

    /// A scan holds one handle per Node (docs/audit.md says how many bytes): the Node's facts are
    /// shared with the index, not copied.
    #[test]
    fn a_scan_holds_a_handle_of_a_few_dozen_bytes_per_node() {
        let handle = std::mem::size_of::<(Arc<str>, Kept)>();
        eprintln!("one Node's handle: {handle} bytes");
        assert!(handle <= 64, "{handle} bytes");
    }

    #[test]
    fn what_the_rules_see_is_kept_only_when_they_read_nodes() {
        let skipped = Skipped::logged();
        for for_rules in [false, true] {
            let mut state = State::for_rules(for_rules);
            state.apply(Ok(watcher::Event::Init), &skipped);
            state.apply(Ok(watcher::Event::InitApply(node("cp", &["10.0.0.5"], true))), &skipped);
            state.apply(Ok(watcher::Event::InitDone), &skipped);
            let Known::Live(Some(facts)) = state.known("cp") else { panic!("not told") };
            assert_eq!(facts.node_info().unwrap().object.is_some(), for_rules);
            assert!(facts.control_plane);
        }
    }
}
