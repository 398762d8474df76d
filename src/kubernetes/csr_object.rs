//! A CertificateSigningRequest as the approver keeps it ([`CsrObject`]): only what decisions and
//! the approval write read, read into the decision core's [`Submission`], and its decision state
//! (decided, approved).

use std::borrow::Cow;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;

use crate::csr::{CsrFacts, MAX_REQUEST_BYTES};
use crate::kubernetes::csr_cache::Named;
use crate::kubernetes::csr_name::kept_name;
use crate::kubernetes::csr_uid::Uid;
use crate::kubernetes::object_fields::{Condition, Csr};
use crate::policy::{KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER, PendingFacts, Submission, client_node};

/// Text nearly every CSR holds (the kubelet signers, the groups of a node and of a bootstrap
/// token, the usages a kubelet asks for): a CSR holding one of these refers to it rather than
/// keeping a copy.
const COMMON_TEXT: &[&str] = &[
    KUBELET_SERVING_SIGNER,
    KUBELET_CLIENT_SIGNER,
    "system:nodes",
    "system:authenticated",
    "system:bootstrappers",
    "digital signature",
    "key encipherment",
    "server auth",
    "client auth",
];

/// A signer, group or usage as a CSR keeps it: one of [`COMMON_TEXT`], or its own copy.
pub type Text = Cow<'static, str>;

/// The groups of a node and the usages of a kubelet, in the order the apiserver and kubelets
/// write them: a CSR whose groups or usages are one of these refers to it rather than keeping a
/// list of its own.
const COMMON_LISTS: &[&[Text]] = &[
    &[Cow::Borrowed("system:nodes"), Cow::Borrowed("system:authenticated")],
    &[Cow::Borrowed("digital signature"), Cow::Borrowed("server auth")],
    &[Cow::Borrowed("digital signature"), Cow::Borrowed("key encipherment"), Cow::Borrowed("server auth")],
    &[Cow::Borrowed("digital signature"), Cow::Borrowed("client auth")],
    &[Cow::Borrowed("digital signature"), Cow::Borrowed("key encipherment"), Cow::Borrowed("client auth")],
];

/// Groups or usages as a CSR keeps them: one of [`COMMON_LISTS`], or a list of its own.
pub type Texts = Cow<'static, [Text]>;

/// `value` as a [`Text`]: borrowed from [`COMMON_TEXT`] when it is one of them.
fn text(value: String) -> Text {
    match COMMON_TEXT.iter().find(|common| **common == value) {
        Some(common) => Cow::Borrowed(common),
        None => Cow::Owned(value),
    }
}

/// A CSR reduced to what decisions and the approval write read. The apiserver's object is read
/// as a [`Csr`] (one reader of the request's bytes, wherever they come from) and turned into
/// this at once, so a cache of thousands of CSRs holds no more: no labels, annotations,
/// finalizers or managedFields (the write patches the conditions only), the request cut to what
/// the canonical gate can accept plus one byte, and of a decided CSR only what triage and
/// machine mode's brake read. Of a CSR whose name is cut ([`kept_name`]), which no request can
/// name and so nothing can decide, only the signer and the username.
#[derive(Debug, Clone, PartialEq)]
pub struct CsrObject {
    /// metadata.name, cut to a prefix and a digest when longer than 253 bytes ([`kept_name`]).
    pub name: Arc<str>,
    /// The name was longer than 253 bytes and is cut: no write can address this CSR.
    pub name_cut: bool,
    /// metadata.uid.
    pub uid: Uid,
    /// metadata.resourceVersion: the write's precondition.
    pub resource_version: Option<Box<str>>,
    /// metadata.creationTimestamp.
    pub created: Option<Timestamp>,
    /// spec.signerName.
    pub signer_name: Text,
    /// spec.username (empty when absent): whose turn a reconcile takes.
    pub username: Arc<str>,
    /// What only deciding the CSR reads ([`PendingSpec`]); none when all of it is empty, as it
    /// is once the CSR is decided (but for an approved client CSR's node name).
    pub pending: Option<Box<PendingSpec>>,
    /// Of a decided CSR's conditions, what triage, the brake and the ledger read: which decision
    /// types were present, and which decision came first.
    pub decision_types: DecisionTypes,
    /// A non-empty status.certificate is present.
    pub certificate_issued: bool,
}

/// The parts of a CSR only deciding it reads, behind one pointer that a decided CSR does not
/// hold: a decided CSR is ≈ 100 bytes smaller for it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PendingSpec {
    /// spec.groups (none kept once decided).
    pub groups: Texts,
    /// spec.usages (none kept once decided).
    pub usages: Texts,
    /// spec.expirationSeconds (none kept once decided).
    pub expiration_seconds: Option<i32>,
    /// spec.request ([`Request`]); empty once decided; in the controller's cache, left in the
    /// apiserver past the cache's room, and once the CSR was held or ignored
    /// ([`Request::InApiserver`], see [`CsrObject::cached`]).
    pub request: Request,
    /// Of a kube-apiserver-client-kubelet CSR, pending or approved, the node name its request
    /// asks a certificate for ([`client_node`]), read once: the pending brake and one client
    /// certificate per Machine read it, not the request.
    pub client_node: Option<Box<str>>,
    /// status.conditions: whole while pending (the write sends them back), none once decided
    /// (then [`CsrObject::decision_types`] holds what is read of them).
    pub conditions: Box<[Condition]>,
}

/// The condition types a decided CSR keeps in place of its conditions: whether an Approved, a
/// Denied and a Failed condition were present, and whether Denied came before the first
/// Approved. A byte, where the conditions were ≈ 180 bytes each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DecisionTypes(u8);

/// The types [`DecisionTypes`] keeps, each a bit.
const KEPT_TYPES: [&str; 3] = ["Approved", "Denied", "Failed"];
/// The bit of [`DecisionTypes`] telling that Denied came before the first Approved.
const DENIED_FIRST: u8 = 1 << KEPT_TYPES.len();

impl DecisionTypes {
    /// What is kept of `conditions`.
    fn of(conditions: &[Condition]) -> DecisionTypes {
        let mut bits = 0;
        for condition in conditions {
            if let Some(bit) = KEPT_TYPES.iter().position(|kept| *kept == condition.type_) {
                if condition.type_ == "Denied" && bits & 1 == 0 {
                    bits |= DENIED_FIRST;
                }
                bits |= 1 << bit;
            }
        }
        DecisionTypes(bits)
    }

    /// True when a condition of type `type_` was present; only Approved, Denied and Failed are
    /// kept.
    fn has(self, type_: &str) -> bool {
        KEPT_TYPES.iter().position(|kept| *kept == type_).is_some_and(|bit| self.0 & 1 << bit != 0)
    }

    /// The first decision condition's type (Approved or Denied), if any.
    fn first_decision(self) -> Option<&'static str> {
        match (self.has("Approved"), self.has("Denied")) {
            (true, true) if self.0 & DENIED_FIRST != 0 => Some("Denied"),
            (true, _) => Some("Approved"),
            (false, true) => Some("Denied"),
            (false, false) => None,
        }
    }
}

impl From<CertificateSigningRequest> for CsrObject {
    fn from(csr: CertificateSigningRequest) -> CsrObject {
        CsrObject::from(Csr::from(csr))
    }
}

impl From<Csr> for CsrObject {
    fn from(csr: Csr) -> CsrObject {
        let Csr { metadata, spec, status } = csr;
        let metadata = metadata.0;
        let (name, name_cut) = kept_name(metadata.name.unwrap_or_default());
        let mut object = CsrObject {
            name,
            name_cut,
            uid: Uid::from(metadata.uid.unwrap_or_default()),
            resource_version: metadata.resource_version.map(Into::into),
            created: metadata.creation_timestamp.map(|time| time.0),
            signer_name: text(spec.signer_name),
            username: Arc::from(spec.username.unwrap_or_default()),
            pending: None,
            decision_types: DecisionTypes::default(),
            certificate_issued: status.certificate_issued,
        };
        let mut pending = PendingSpec {
            groups: texts(spec.groups),
            usages: texts(spec.usages),
            expiration_seconds: spec.expiration_seconds,
            request: Request::default(),
            client_node: None,
            conditions: status.conditions.unwrap_or_default().into(),
        };
        let mut request = spec.request.0;
        let decided = pending.conditions.iter().any(is_decision);
        if decided {
            object.decision_types = DecisionTypes::of(&pending.conditions);
            pending.conditions = Box::default();
        }
        if &*object.signer_name == KUBELET_CLIENT_SIGNER && !object.name_cut && (!decided || object.is_approved()) {
            // Read from the request whole, as deciding it reads it; the request never changes.
            let sub = Submission { signer_name: KUBELET_CLIENT_SIGNER.into(), request, ..Submission::default() };
            pending.client_node = client_node(&sub).map(Into::into);
            request = sub.request;
        }
        if object.name_cut || decided {
            // Triage needs the signer and the decided condition; the machine-mode brake the
            // signer, the username and the creation time; one client certificate per Machine the
            // node name of an approved client CSR. Nothing reads the rest.
            request = Vec::new();
            (pending.groups, pending.usages) = (Texts::default(), Texts::default());
            pending.expiration_seconds = None;
            for condition in &mut pending.conditions {
                (condition.message, condition.reason) = (None, None);
                (condition.last_update_time, condition.last_transition_time) = (None, None);
            }
        }
        pending.request = Request::new(request);
        object.pending = (pending != PendingSpec::default()).then(|| Box::new(pending));
        object
    }
}

/// True for a condition that decides a CSR: Approved or Denied.
fn is_decision(condition: &Condition) -> bool {
    matches!(condition.type_.as_str(), "Approved" | "Denied")
}

/// `strings` as [`Texts`]: borrowed from [`COMMON_LISTS`] when they are one of them.
fn texts(strings: Option<Vec<String>>) -> Texts {
    let texts: Vec<Text> = strings.unwrap_or_default().into_iter().map(text).collect();
    match COMMON_LISTS.iter().find(|common| **common == texts) {
        Some(common) => Cow::Borrowed(common),
        None if texts.is_empty() => Texts::default(),
        None => Cow::Owned(texts.into_boxed_slice().into_vec()),
    }
}

/// spec.request as the cache keeps it. A request that passes the canonical PEM gate is kept as
/// the DER inside it (1.37 × smaller than its base64) and handed to decisions as its canonical
/// block, which every check of the core reads as it reads the request itself
/// ([`CsrFacts::canonical_block`]); any other is kept as it came, so each check sees its bytes.
/// The controller's cache keeps a pending CSR's request only while it has room for it, and none
/// once the CSR was held or ignored ([`Request::InApiserver`]): its reconcile reads the CSR from
/// the apiserver when it decides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// The DER inside a request that is one canonical `CERTIFICATE REQUEST` block.
    Canonical(Box<[u8]>),
    /// Any other request: at most its first [`MAX_REQUEST_BYTES`] + 1 bytes (the canonical gate
    /// refuses a longer one on its length alone).
    Other(Box<[u8]>),
    /// A request left in the apiserver: nothing of it is kept, and whoever decides the CSR reads
    /// it from there first.
    InApiserver,
}

impl Default for Request {
    fn default() -> Request {
        Request::Other(Box::default())
    }
}

impl Request {
    /// `request` as kept: its DER when it passes the canonical gate, else its first bytes.
    fn new(mut request: Vec<u8>) -> Request {
        if request.is_empty() {
            return Request::default();
        }
        match CsrFacts::canonical_der(&request) {
            Ok(der) => Request::Canonical(der.into_boxed_slice()),
            Err(_) => {
                request.truncate(MAX_REQUEST_BYTES + 1);
                Request::Other(request.into_boxed_slice())
            }
        }
    }

    /// The bytes decisions read as spec.request (none of a request left in the apiserver).
    pub fn pem(&self) -> Vec<u8> {
        match self {
            Request::Canonical(der) => CsrFacts::canonical_block(der).into_bytes(),
            Request::Other(bytes) => bytes.to_vec(),
            Request::InApiserver => Vec::new(),
        }
    }

    /// The bytes kept of the request.
    pub fn len(&self) -> usize {
        match self {
            Request::Canonical(bytes) | Request::Other(bytes) => bytes.len(),
            Request::InApiserver => 0,
        }
    }

    /// True when nothing of the request is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A CSR as the controller's watch brings it, and whether the cache keeps its request: kept by
/// the cache as [`CsrObject::cached`].
#[derive(Debug, Clone)]
pub struct Watched {
    /// The CSR.
    pub csr: Csr,
    /// Whether a pending CSR keeps its request in the cache ([`RequestRoom::keeps`]).
    pub keep_request: bool,
}

/// The room the controller's cache has for requests: it keeps a pending CSR's request while it
/// holds fewer CSRs than `csrs_below` (`--cache-requests-below`) and the requests it keeps take
/// no more than `bytes` (`--cache-request-bytes`) with this one. Past either, the request is left
/// in the apiserver and read when the CSR is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestRoom {
    /// Requests are kept while the cache holds fewer CSRs than this.
    pub csrs_below: usize,
    /// The most bytes the requests kept may take.
    pub bytes: usize,
}

impl RequestRoom {
    /// Whether a cache holding `csrs` CSRs, whose kept requests take `kept_bytes`, keeps `csr`'s
    /// request too. A request counts as the bytes it came in, up to what the cache keeps of one
    /// at most: never fewer than are kept of it (its DER is smaller than its PEM).
    pub fn keeps(&self, csr: &Csr, csrs: usize, kept_bytes: usize) -> bool {
        let request = csr.spec.request.0.len().min(MAX_REQUEST_BYTES + 1);
        csrs < self.csrs_below && kept_bytes.saturating_add(request) <= self.bytes
    }
}

impl From<Watched> for CsrObject {
    fn from(Watched { csr, keep_request }: Watched) -> CsrObject {
        CsrObject::cached(csr, keep_request)
    }
}

impl Named for CsrObject {
    fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// A kubelet-serving CSR is grouped by its requester: the superseded rule reads a node's
    /// serving CSRs.
    fn group(&self) -> Option<&Arc<str>> {
        (&*self.signer_name == KUBELET_SERVING_SIGNER).then_some(&self.username)
    }

    /// The group is the username: a node's CSR takes the copy its cached CSRs hold.
    fn share_group(&mut self, group: &Arc<str>) {
        if self.username == *group {
            self.username = group.clone();
        }
    }

    /// The bytes of its request it keeps: the cache's room for requests is counted in them.
    fn weight(&self) -> usize {
        self.pending.as_ref().map_or(0, |pending| pending.request.len())
    }
}

impl CsrObject {
    /// `csr` as the controller's cache keeps it: as [`CsrObject::from`] does, but unless
    /// `keep_request`, a pending CSR's request is left in the apiserver
    /// ([`CsrObject::leave_request_in_apiserver`]).
    pub fn cached(csr: Csr, keep_request: bool) -> CsrObject {
        let mut object = CsrObject::from(csr);
        if !keep_request {
            object.leave_request_in_apiserver();
        }
        object
    }

    /// Leaves this pending CSR's request, of any signer and shape, in the apiserver
    /// ([`Request::InApiserver`]); answers whether anything of it was kept. Nothing but deciding
    /// the CSR reads its request (the brake and one client certificate per Machine read the
    /// client node name kept beside it), and the reconcile that decides it reads the CSR from the
    /// apiserver first.
    pub fn leave_request_in_apiserver(&mut self) -> bool {
        match self.pending.as_deref_mut() {
            Some(pending) if !pending.request.is_empty() => {
                pending.request = Request::InApiserver;
                true
            }
            _ => false,
        }
    }

    /// True when deciding this CSR needs it read from the apiserver first: its request was left
    /// there ([`CsrObject::cached`]).
    pub fn request_in_apiserver(&self) -> bool {
        self.pending.as_ref().is_some_and(|pending| pending.request == Request::InApiserver)
    }

    /// spec.groups (none once decided).
    pub fn groups(&self) -> &[Text] {
        self.pending.as_ref().map_or(&[], |pending| &pending.groups)
    }

    /// spec.usages (none once decided).
    pub fn usages(&self) -> &[Text] {
        self.pending.as_ref().map_or(&[], |pending| &pending.usages)
    }

    /// The node name a client CSR's request asks a certificate for, as kept
    /// ([`PendingSpec::client_node`]).
    pub fn client_node(&self) -> Option<&str> {
        self.pending.as_ref().and_then(|pending| pending.client_node.as_deref())
    }

    /// spec.request as kept ([`PendingSpec::request`]); none when nothing of it is kept.
    pub fn request(&self) -> Option<&Request> {
        self.pending.as_ref().map(|pending| &pending.request).filter(|request| !request.is_empty())
    }

    /// status.conditions kept whole (none once decided).
    pub fn conditions(&self) -> &[Condition] {
        self.pending.as_ref().map_or(&[], |pending| &pending.conditions)
    }

    /// The parts that decisions read.
    pub fn submission(&self) -> Submission {
        let strings = |strings: &[Text]| strings.iter().map(|s| String::from(&**s)).collect();
        Submission {
            name: String::from(&*self.name),
            created: self.created,
            signer_name: self.signer_name.clone().into_owned(),
            username: String::from(&*self.username),
            groups: strings(self.groups()),
            usages: strings(self.usages()),
            expiration_seconds: self.pending.as_ref().and_then(|pending| pending.expiration_seconds),
            request: self.request().map(Request::pem).unwrap_or_default(),
            decided: self.decided_by(),
            approved: self.is_approved(),
        }
    }

    /// True when an Approved or Denied condition or an issued certificate is present.
    pub fn is_decided(&self) -> bool {
        self.certificate_issued || self.has_condition("Approved") || self.has_condition("Denied")
    }

    /// True when a condition of type `type_` is present: among the conditions kept whole, or,
    /// for Approved, Denied and Failed, among the [`DecisionTypes`] kept of a decided CSR.
    fn has_condition(&self, type_: &str) -> bool {
        self.conditions().iter().any(|c| c.type_ == type_) || self.decision_types.has(type_)
    }

    /// What the pending brake reads of this CSR, borrowed: a count copies nothing.
    pub fn pending_facts(&self) -> PendingFacts<'_, Text> {
        let (signer_name, username, groups) = (&*self.signer_name, &*self.username, self.groups());
        PendingFacts { signer_name, username, groups, decided: self.is_decided(), created: self.created }
    }

    /// True when an Approved condition is present and no Denied or Failed one.
    pub fn is_approved(&self) -> bool {
        self.has_condition("Approved") && !self.is_refused()
    }

    /// True when a Denied or Failed condition is present.
    pub fn is_refused(&self) -> bool {
        self.has_condition("Denied") || self.has_condition("Failed")
    }

    /// What an Event about this CSR refers to: its kind, name and uid.
    pub fn object_ref(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some(CertificateSigningRequest::api_version(&()).into_owned()),
            kind: Some(CertificateSigningRequest::kind(&()).into_owned()),
            name: Some(String::from(&*self.name)),
            uid: Some(self.uid.to_string()).filter(|uid| !uid.is_empty()),
            ..ObjectReference::default()
        }
    }

    fn decided_by(&self) -> Option<String> {
        if self.certificate_issued {
            return Some("a certificate was issued".into());
        }
        let first = self.conditions().iter().find(|c| is_decision(c)).map(|c| c.type_.as_str());
        first.or_else(|| self.decision_types.first_decision()).map(|type_| format!("condition {type_} is present"))
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestCondition, CertificateSigningRequestSpec, CertificateSigningRequestStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta, OwnerReference, Time};

    use super::*;

    /// The request `csr` keeps (empty when none).
    fn kept_request(csr: CsrObject) -> Request {
        csr.pending.map(|pending| pending.request).unwrap_or_default()
    }

    fn with_status(certificate: &[u8], conditions: &[&str]) -> CsrObject {
        let conditions = conditions
            .iter()
            .map(|type_| CertificateSigningRequestCondition { type_: (*type_).into(), ..Default::default() })
            .collect();
        let status = CertificateSigningRequestStatus {
            certificate: Some(ByteString(certificate.to_vec())),
            conditions: Some(conditions),
        };
        CsrObject::from(CertificateSigningRequest { status: Some(status), ..Default::default() })
    }

    #[test]
    fn a_certificate_or_an_approved_or_denied_condition_decides_a_csr() {
        let cases = [
            (with_status(b"PEM", &[]), Some("a certificate was issued")),
            (with_status(b"", &["Approved"]), Some("condition Approved is present")),
            (with_status(b"", &["Failed", "Denied"]), Some("condition Denied is present")),
            (with_status(b"", &[]), None),
            (with_status(b"", &["Failed"]), None),
            (CsrObject::from(CertificateSigningRequest::default()), None),
        ];
        for (csr, decided) in cases {
            assert_eq!(csr.submission().decided.as_deref(), decided, "{csr:?}");
            assert_eq!((csr.is_decided(), csr.pending_facts().decided), (decided.is_some(), decided.is_some()));
        }
    }

    #[test]
    fn approved_means_an_approved_condition_and_no_denied_or_failed_one() {
        let cases = [
            (&["Approved"][..], true),
            (&["Failed", "Approved"], false),
            (&["Approved", "Denied"], false),
            (&["Denied"], false),
            (&[], false),
        ];
        for (conditions, approved) in cases {
            assert_eq!(with_status(b"", conditions).submission().approved, approved, "{conditions:?}");
        }
        assert!(!with_status(b"PEM", &[]).submission().approved, "a certificate without a condition");
    }

    fn condition(type_: &str) -> CertificateSigningRequestCondition {
        CertificateSigningRequestCondition {
            type_: type_.into(),
            status: "True".into(),
            reason: Some("R".into()),
            message: Some("M".into()),
            last_update_time: Some(Time(Timestamp::UNIX_EPOCH)),
            last_transition_time: Some(Time(Timestamp::UNIX_EPOCH)),
        }
    }

    /// A CSR with everything the approver drops, and the given conditions.
    fn full(conditions: &[&str]) -> CertificateSigningRequest {
        let strings = || Some([("k".to_owned(), "v".to_owned())].into());
        CertificateSigningRequest {
            metadata: ObjectMeta {
                name: Some("csr-1".into()),
                uid: Some("uid-1".into()),
                resource_version: Some("42".into()),
                creation_timestamp: Some(Time(Timestamp::UNIX_EPOCH)),
                labels: strings(),
                annotations: strings(),
                finalizers: Some(vec!["example.com/f".into()]),
                owner_references: Some(vec![OwnerReference::default()]),
                managed_fields: Some(vec![ManagedFieldsEntry::default()]),
                generate_name: Some("csr-".into()),
                generation: Some(1),
                namespace: Some("n".into()),
                ..ObjectMeta::default()
            },
            spec: CertificateSigningRequestSpec {
                request: ByteString(b"request".to_vec()),
                signer_name: "kubernetes.io/kubelet-serving".into(),
                username: Some("system:node:n".into()),
                groups: Some(vec!["system:nodes".into()]),
                usages: Some(vec!["server auth".into()]),
                expiration_seconds: Some(3600),
                uid: Some("u".into()),
                extra: Some([("k".to_owned(), vec!["v".to_owned()])].into()),
            },
            status: Some(CertificateSigningRequestStatus {
                certificate: Some(ByteString(b"cert".to_vec())),
                conditions: Some(conditions.iter().map(|type_| condition(type_)).collect()),
            }),
        }
    }

    #[test]
    fn a_pending_csr_keeps_what_decisions_and_the_write_read() {
        let pending = CsrObject::from(full(&["Other"]));
        let expected = CsrObject {
            name: "csr-1".into(),
            name_cut: false,
            uid: "uid-1".into(),
            resource_version: Some("42".into()),
            created: Some(Timestamp::UNIX_EPOCH),
            signer_name: "kubernetes.io/kubelet-serving".into(),
            username: "system:node:n".into(),
            pending: Some(Box::new(PendingSpec {
                groups: Cow::Owned(vec!["system:nodes".into()]),
                usages: Cow::Owned(vec!["server auth".into()]),
                expiration_seconds: Some(3600),
                request: Request::Other((*b"request").into()),
                client_node: None,
                conditions: [condition("Other").into()].into(),
            })),
            decision_types: DecisionTypes::default(),
            certificate_issued: true,
        };
        assert_eq!(pending, expected);
        let submission = pending.submission();
        assert_eq!((submission.name.as_str(), submission.created), ("csr-1", Some(Timestamp::UNIX_EPOCH)));
        assert_eq!((submission.groups, submission.usages), (vec!["system:nodes".into()], vec!["server auth".into()]));
        assert_eq!((submission.request, submission.expiration_seconds), (b"request".to_vec(), Some(3600)));
    }

    #[test]
    fn common_text_is_shared_and_any_other_kept_as_it_is() {
        let mut csr = full(&[]);
        csr.spec.groups = Some(vec!["system:nodes".into(), "system:authenticated".into(), "Other".into()]);
        csr.spec.usages = Some(vec!["digital signature".into(), "server auth".into(), "server auth ".into()]);
        let cached = CsrObject::from(csr);
        let borrowed = |texts: &[Text]| texts.iter().map(|t| matches!(t, Cow::Borrowed(_))).collect::<Vec<_>>();
        assert_eq!(borrowed(cached.groups()), [true, true, false]);
        assert_eq!(borrowed(cached.usages()), [true, true, false]);
        assert!(matches!(cached.signer_name, Cow::Borrowed(KUBELET_SERVING_SIGNER)));
        let submission = cached.submission();
        assert_eq!(submission.groups, ["system:nodes", "system:authenticated", "Other"]);
        assert_eq!(submission.usages, ["digital signature", "server auth", "server auth "]);
        for common in COMMON_TEXT {
            assert_eq!(text((*common).to_owned()), *common);
            assert!(matches!(text((*common).to_owned()), Cow::Borrowed(_)), "{common}");
            assert!(matches!(text(common.to_uppercase()), Cow::Owned(_)), "{common}");
        }
    }

    #[test]
    fn an_oversized_request_keeps_one_byte_more_than_the_gate_accepts_and_is_still_refused() {
        let with_request = |len: usize| {
            let mut csr = full(&["Other"]);
            csr.spec.request = ByteString(vec![b'A'; len]);
            csr
        };
        let refused = |request: &[u8]| crate::csr::CsrFacts::from_pem(request).err();
        let oversized = with_request(1024 * 1024);
        let cached = kept_request(CsrObject::from(oversized.clone()));
        assert_eq!(cached.pem().len(), MAX_REQUEST_BYTES + 1);
        assert_eq!(refused(&cached.pem()), Some(crate::csr::CsrError::TooLarge));
        assert_eq!(refused(&cached.pem()), refused(&oversized.spec.request.0));
        // At the limit and one over, nothing is cut.
        for len in [MAX_REQUEST_BYTES, MAX_REQUEST_BYTES + 1] {
            assert_eq!(kept_request(CsrObject::from(with_request(len))).pem().len(), len);
        }
    }

    #[test]
    fn a_decided_csr_keeps_what_triage_and_the_brake_read() {
        for decided in ["Approved", "Denied"] {
            let csr = CsrObject::from(full(&["Other", decided]));
            assert_eq!(
                (&*csr.name, csr.uid.to_string().as_str(), csr.resource_version.as_deref()),
                ("csr-1", "uid-1", Some("42"))
            );
            assert_eq!((&*csr.signer_name, &*csr.username), ("kubernetes.io/kubelet-serving", "system:node:n"));
            assert_eq!(csr.created, Some(Timestamp::UNIX_EPOCH));
            assert!(csr.request().is_none() && csr.groups().is_empty() && csr.usages().is_empty());
            assert!(csr.conditions().is_empty(), "no condition is kept whole");
            assert!(csr.pending.is_none(), "nothing only deciding it reads is kept");
            assert_eq!((csr.is_approved(), csr.is_refused()), (decided == "Approved", decided == "Denied"));
        }
    }

    /// Every order of up to three conditions among Approved, Denied, Failed and another type.
    fn condition_lists() -> Vec<Vec<&'static str>> {
        let types = ["Approved", "Denied", "Failed", "Other"];
        let mut lists = vec![vec![]];
        for len in 1..=3 {
            let mut longer = Vec::new();
            for list in lists.iter().filter(|list| list.len() == len - 1) {
                for type_ in types {
                    longer.push([list.clone(), vec![type_]].concat());
                }
            }
            lists.extend(longer);
        }
        lists
    }

    #[test]
    fn a_decided_csr_s_kept_types_answer_as_its_whole_conditions_did() {
        let mut decided = 0;
        for types in condition_lists() {
            for certificate in [&b""[..], b"PEM"] {
                let kept = with_status(certificate, &types);
                let mut whole = with_status(certificate, &[]);
                whole.pending.get_or_insert_default().conditions =
                    types.iter().map(|type_| condition(type_).into()).collect();
                let answers = |csr: &CsrObject| {
                    let sub = csr.submission();
                    (csr.is_decided(), csr.is_approved(), csr.is_refused(), sub.decided, sub.approved)
                };
                assert_eq!(answers(&kept), answers(&whole), "{types:?} {certificate:?}");
                assert_eq!(kept.pending_facts().decided, whole.pending_facts().decided, "{types:?}");
                let has_decision = types.iter().any(|type_| matches!(*type_, "Approved" | "Denied"));
                assert_eq!(kept.conditions().is_empty(), has_decision || types.is_empty(), "{types:?}");
                assert_eq!(kept.pending.is_none(), has_decision || types.is_empty(), "{types:?}");
                decided += usize::from(has_decision);
            }
        }
        assert!(decided > 50, "the decided cases are covered: {decided}");
    }

    /// A client CSR whose request asks a certificate for `node`, with the given conditions.
    fn client_of(node: &str, conditions: &[&str]) -> CertificateSigningRequest {
        let mut csr = full(conditions);
        csr.spec.signer_name = KUBELET_CLIENT_SIGNER.into();
        csr.spec.request = ByteString(testkit::request::Request::node(node).pem().into_bytes());
        csr
    }

    #[test]
    fn a_client_csr_keeps_the_node_name_of_its_request_while_pending_or_approved_and_no_request_once_decided() {
        let pending = CsrObject::from(client_of("n1", &[]));
        assert_eq!(pending.client_node(), Some("n1"));
        assert_eq!(pending.client_node().map(str::to_owned), client_node(&pending.submission()), "as read whole");
        let approved = CsrObject::from(client_of("n1", &["Approved"]));
        assert_eq!(approved.client_node(), Some("n1"), "one client certificate per Machine reads it");
        assert!(approved.request().is_none(), "the request is not kept once decided");
        for conditions in [&["Denied"][..], &["Approved", "Failed"], &["Approved", "Denied"]] {
            let refused = CsrObject::from(client_of("n1", conditions));
            assert!(refused.client_node().is_none() && refused.pending.is_none(), "{conditions:?}");
        }
        let mut unreadable = client_of("n1", &[]);
        unreadable.spec.request = ByteString(b"request".to_vec());
        assert_eq!(CsrObject::from(unreadable).client_node(), None, "a request that does not read names no node");
        let mut serving = client_of("n1", &[]);
        serving.spec.signer_name = KUBELET_SERVING_SIGNER.into();
        assert_eq!(CsrObject::from(serving).client_node(), None, "a serving CSR's request is not a client's");
        let mut cut = client_of("n1", &["Approved"]);
        cut.metadata.name = Some("x".repeat(300));
        assert_eq!(CsrObject::from(cut).client_node(), None, "a CSR whose name is cut keeps nothing of its spec");
        let left = CsrObject::cached(client_of("n1", &[]).into(), false);
        assert_eq!((left.client_node(), left.request()), (Some("n1"), None), "kept beside a request left out");
    }

    #[test]
    fn a_pending_csr_of_any_signer_and_request_leaves_its_request_in_the_apiserver_past_the_room() {
        let mut other = full(&[]);
        other.spec.request = ByteString(vec![b'A'; MAX_REQUEST_BYTES + 100]);
        let mut canonical = full(&[]);
        canonical.spec.request = ByteString(testkit::request::Request::node("n1").pem().into_bytes());
        for (case, csr) in [("refused", other), ("canonical", canonical), ("client", client_of("n1", &[]))] {
            let kept = CsrObject::cached(csr.clone().into(), true);
            assert_eq!(kept, CsrObject::from(csr.clone()), "{case}: with room, as read whole");
            assert!(kept.request().is_some() && !kept.request_in_apiserver(), "{case}");
            assert_eq!(kept.weight(), kept.request().map_or(0, Request::len), "{case}: weighed by its request");
            let left = CsrObject::cached(csr.clone().into(), false);
            assert!(left.request_in_apiserver() && left.request().is_none(), "{case}");
            assert!(left.submission().request.is_empty() && left.weight() == 0, "{case}");
            let mut slimmed = kept.clone();
            assert!(slimmed.leave_request_in_apiserver(), "{case}: it kept one");
            assert_eq!(slimmed, left, "{case}: held or ignored, as if left out from the start");
            assert!(!slimmed.leave_request_in_apiserver(), "{case}: nothing left to leave");
        }
        for decided in ["Approved", "Denied"] {
            let mut csr = CsrObject::from(full(&[decided]));
            assert!(!csr.leave_request_in_apiserver() && !csr.request_in_apiserver(), "{decided}: nothing to read");
        }
        let mut empty = full(&[]);
        empty.spec.request = ByteString(Vec::new());
        let mut empty = CsrObject::from(empty);
        assert!(!empty.leave_request_in_apiserver() && !empty.request_in_apiserver(), "an empty request");
    }

    #[test]
    fn the_room_keeps_a_request_below_the_csr_count_and_within_the_bytes() {
        let with_request = |len: usize| {
            let mut csr = Csr::from(full(&[]));
            csr.spec.request = ByteString(vec![b'A'; len]);
            csr
        };
        let room = RequestRoom { csrs_below: 10, bytes: 1000 };
        assert!(room.keeps(&with_request(100), 9, 900), "the last CSR, to the last byte");
        assert!(!room.keeps(&with_request(100), 10, 0), "the CSR count reached");
        assert!(!room.keeps(&with_request(101), 0, 900), "a byte over");
        assert!(!room.keeps(&with_request(0), 0, 1001), "already over");
        assert!(!room.keeps(&with_request(1), 0, usize::MAX), "no overflow");
        let whole = RequestRoom { csrs_below: 10, bytes: MAX_REQUEST_BYTES + 1 };
        assert!(whole.keeps(&with_request(1024 * 1024), 0, 0), "an oversized request counts as what is kept of it");
        assert!(!whole.keeps(&with_request(1024 * 1024), 0, 1));
        assert!(!RequestRoom { csrs_below: 0, bytes: usize::MAX }.keeps(&with_request(0), 0, 0), "none kept");
    }

    /// Every way of writing one request the gate tells apart: the canonical block with and without
    /// whitespace around it, and what it refuses (several blocks, data before or after, headers,
    /// CR LF, other line widths, another label).
    fn requests() -> Vec<(&'static str, String)> {
        let block = testkit::request::Request::node("node-1").pem();
        let lines: Vec<&str> = block.lines().collect();
        let body = lines[1..lines.len() - 1].concat();
        let rewrapped: String = body.as_bytes().chunks(76).map(|line| String::from_utf8_lossy(line) + "\n").collect();
        let (begin, end) = (lines[0], lines[lines.len() - 1]);
        vec![
            ("canonical", block.clone()),
            ("without its final line feed", block.trim_end().to_owned()),
            ("with whitespace around it", format!("\n \t\n{block}\n\n  ")),
            ("twice", format!("{block}{block}")),
            ("with data after it", format!("{block}trailing")),
            ("with data before it", format!("leading\n{block}")),
            ("with a header", block.replacen('\n', "\nProc-Type: 4,ENCRYPTED\n\n", 1)),
            ("in CR LF lines", block.replace('\n', "\r\n")),
            ("in 76-character lines", format!("{begin}\n{rewrapped}{end}\n")),
            ("under another label", block.replace("CERTIFICATE REQUEST", "NEW CERTIFICATE REQUEST")),
            ("empty", String::new()),
        ]
    }

    #[test]
    fn a_canonical_request_is_kept_as_its_der_and_any_other_as_it_came() {
        for (case, pem) in requests() {
            let mut csr = full(&[]);
            csr.spec.request = ByteString(pem.clone().into_bytes());
            let kept = kept_request(CsrObject::from(csr));
            match CsrFacts::canonical_der(pem.as_bytes()) {
                Ok(der) => {
                    assert_eq!(kept, Request::Canonical(der.clone().into()), "{case}");
                    assert!(der.len() * 4 < pem.len() * 3, "{case}: the DER is smaller than its base64");
                }
                Err(_) => assert_eq!(kept, Request::Other(pem.clone().into_bytes().into()), "{case}"),
            }
        }
    }

    #[test]
    fn every_check_of_the_core_reads_the_kept_request_as_the_request_itself() {
        let mut canonical = 0;
        for (case, pem) in requests() {
            let mut csr = full(&[]);
            csr.spec.request = ByteString(pem.clone().into_bytes());
            let kept = kept_request(CsrObject::from(csr)).pem();
            assert!(kept.len() <= pem.len(), "{case}: the gate's length limit reads no more bytes");
            assert_eq!(CsrFacts::from_pem(&kept), CsrFacts::from_pem(pem.as_bytes()), "{case}");
            assert_eq!(CsrFacts::canonical_der(&kept), CsrFacts::canonical_der(pem.as_bytes()), "{case}");
            canonical += usize::from(CsrFacts::from_pem(&kept).is_ok());
        }
        assert_eq!(canonical, 3, "the canonical cases are read, every other one refused");
    }

    #[test]
    fn the_common_groups_and_usages_are_shared_and_any_other_list_kept_as_it_is() {
        for common in COMMON_LISTS {
            let mut csr = full(&[]);
            csr.spec.groups = Some(common.iter().map(|text| text.to_string()).collect());
            let groups = CsrObject::from(csr).pending.map(|pending| pending.groups).unwrap_or_default();
            assert!(matches!(groups, Cow::Borrowed(_)) && groups == *common, "{common:?}");
        }
        let mut csr = full(&[]);
        csr.spec.groups = Some(vec!["system:authenticated".into(), "system:nodes".into()]);
        csr.spec.usages = Some(vec!["digital signature".into(), "server auth".into(), "client auth".into()]);
        let cached = CsrObject::from(csr);
        let pending = cached.pending.as_deref().cloned().unwrap_or_default();
        assert!(matches!(pending.groups, Cow::Owned(_)) && matches!(pending.usages, Cow::Owned(_)));
        assert_eq!(cached.submission().groups, ["system:authenticated", "system:nodes"]);
        assert_eq!(cached.submission().usages, ["digital signature", "server auth", "client auth"]);
    }

    #[test]
    fn an_event_refers_to_the_csr_by_kind_name_and_uid() {
        let mut csr = full(&[]);
        csr.metadata.namespace = None;
        let reference = CsrObject::from(csr.clone()).object_ref();
        let expected = ObjectReference {
            api_version: Some("certificates.k8s.io/v1".into()),
            kind: Some("CertificateSigningRequest".into()),
            name: Some("csr-1".into()),
            uid: Some("uid-1".into()),
            ..ObjectReference::default()
        };
        assert_eq!(reference, expected);
        assert_eq!(reference, csr.object_ref(&()), "as kube refers to it");
    }

    #[test]
    fn a_node_s_serving_csrs_share_one_copy_of_its_username_in_the_cache() {
        let (cache, mut writer) = crate::kubernetes::csr_cache::cache::<CsrObject>();
        let mut client = full(&[]);
        (client.metadata.name, client.spec.signer_name) = (Some("client".into()), KUBELET_CLIENT_SIGNER.into());
        for (name, csr) in [("csr-1", full(&[])), ("csr-2", full(&[])), ("client", client)] {
            let mut csr = csr;
            csr.metadata.name = Some(name.into());
            writer.apply(kube::runtime::watcher::Event::Apply(csr));
        }
        let username = |name: &str| cache.get(name).map(|csr| csr.username.clone()).unwrap_or_default();
        assert!(Arc::ptr_eq(&username("csr-1"), &username("csr-2")));
        assert!(!Arc::ptr_eq(&username("csr-1"), &username("client")), "a client CSR is in no group");
        assert_eq!(&*username("client"), "system:node:n");
    }
}
