//! Named inputs: the attack shapes found so far and the PEM and DER variants around them, each
//! with what the approver must make of it.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::der_tree::{self, Body, LengthForm, Node};
use crate::mutate::{self, pem};
use crate::seeds::{Seed, Seeds};

/// What the approver must do with a corpus entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Approve, with Go reading the same request.
    Approve,
    /// Refuse to read it: not canonical (denied as MalformedRequest).
    Refuse,
    /// Read it, and deny it by a policy rule.
    Deny,
}

/// One named input.
#[derive(Debug, Clone)]
pub struct Entry {
    /// What it is.
    pub name: &'static str,
    /// The bytes of `spec.request`.
    pub request: Vec<u8>,
    /// What the approver must do.
    pub expect: Expect,
}

/// Paths into a seed: the request info, its subject, attributes and the SAN list.
const INFO: [usize; 2] = [0, 0];
const SUBJECT: [usize; 3] = [0, 0, 1];
const ATTRIBUTES: [usize; 3] = [0, 0, 3];
const EXTENSION_REQUEST_VALUES: [usize; 5] = [0, 0, 3, 0, 1];
const EXTENSIONS: [usize; 6] = [0, 0, 3, 0, 1, 0];
const SAN_EXTENSION: [usize; 7] = [0, 0, 3, 0, 1, 0, 0];
const SAN_LIST: [usize; 9] = [0, 0, 3, 0, 1, 0, 0, 1, 0];
const CN_VALUE: [usize; 6] = [0, 0, 1, 0, 0, 1];

/// Every entry, built from `seeds` (the first seed is the legitimate request of node `n1`).
pub fn corpus(seeds: &Seeds) -> Vec<Entry> {
    let Some(good) = seeds.0.first() else { return Vec::new() };
    let good_pem = pem(&good.der);
    let n2 = other_node(good);
    let n2_pem = pem(&n2);
    let entry = |name, request: Vec<u8>, expect| Entry { name, request, expect };
    let text = |name, request: String, expect| entry(name, request.into_bytes(), expect);
    let der = |name, der: Vec<u8>| entry(name, pem(&der).into_bytes(), Expect::Refuse);
    let mut entries = vec![
        text("canonical", good_pem.clone(), Expect::Approve),
        text("leading line feed", format!("\n{good_pem}"), Expect::Approve),
        text("trailing blank lines", format!("{good_pem}\n\n"), Expect::Approve),
        text("no final line feed", good_pem.trim_end().to_owned(), Expect::Approve),
        text(
            "end and begin on one line: Go reads the second request",
            format!("{}-----END {}", good_pem.trim_end_matches("-----END CERTIFICATE REQUEST-----\n"), n2_pem),
            Expect::Refuse,
        ),
        text("two blocks", format!("{good_pem}{n2_pem}"), Expect::Refuse),
        text("crlf", good_pem.replace('\n', "\r\n"), Expect::Refuse),
        text("headers", good_pem.replacen("-----\n", "-----\nProc-Type: 4,ENCRYPTED\n\n", 1), Expect::Refuse),
        text(
            "nested begin",
            good_pem.replacen("-----\n", "-----\n-----BEGIN CERTIFICATE REQUEST-----\n", 1),
            Expect::Refuse,
        ),
        text("junk after begin", good_pem.replacen("REQUEST-----\n", "REQUEST----- junk\n", 1), Expect::Refuse),
        text("junk after end", format!("{} junk\n", good_pem.trim_end()), Expect::Refuse),
        text("junk before begin", format!("junk\n{good_pem}"), Expect::Refuse),
        text("spaces before begin", format!("  {good_pem}"), Expect::Refuse),
        text(
            "wrong end label",
            good_pem.replacen("-----END CERTIFICATE REQUEST", "-----END CERTIFICATE", 1),
            Expect::Refuse,
        ),
        text("wrong label", good_pem.replace("CERTIFICATE REQUEST", "CERTIFICATE"), Expect::Refuse),
        text(
            "new certificate request label",
            good_pem.replace("CERTIFICATE REQUEST", "NEW CERTIFICATE REQUEST"),
            Expect::Refuse,
        ),
        text("76-character lines", rewrap(&good.der, 76), Expect::Refuse),
        text("one base64 line", rewrap(&good.der, 4096), Expect::Refuse),
        text("spaces in the body", good_pem.replacen('\n', "\n ", 3), Expect::Refuse),
        text("over 16 KiB of whitespace", format!("{good_pem}{}", "\n".repeat(16 * 1024)), Expect::Refuse),
        text("garbage", "not a PEM block at all".into(), Expect::Refuse),
        der("trailing DER bytes", [good.der.clone(), vec![0]].concat()),
        der("non-minimal outer length", edit(good, &[0], false, |n| n.length = LengthForm::Padded)),
        der("non-minimal length in the signed part", edit(good, &SUBJECT, true, |n| n.length = LengthForm::Padded)),
        der("indefinite length", edit(good, &SUBJECT, true, |n| n.length = LengthForm::Indefinite)),
        der("cn tagged [12] context-specific", edit(good, &CN_VALUE, true, |n| n.ident = vec![0x8c])),
        der("cn as a constructed UTF8String", edit(good, &CN_VALUE, true, constructed_string)),
        der("cn as a T61String", edit(good, &CN_VALUE, true, |n| n.ident = vec![0x14])),
        der("cn with a high-tag-number form", edit(good, &CN_VALUE, true, |n| n.ident = vec![0x1f, 0x0c])),
        der("cn and o in one rdn", edit(good, &SUBJECT, true, merge_rdns)),
        der("two extensionRequest attributes", edit(good, &ATTRIBUTES, true, duplicate_first_child)),
        der("extensionRequest with two values", edit(good, &EXTENSION_REQUEST_VALUES, true, duplicate_first_child)),
        der("second SubjectAltName extension", edit(good, &EXTENSIONS, true, duplicate_first_child)),
        der("trailing bytes in the SubjectAltName value", edit(good, &SAN_EXTENSION, true, trailing_in_wrapped)),
        der(
            "non-minimal SubjectAltName oid",
            edit(good, &[0, 0, 3, 0, 1, 0, 0, 0], true, |n| n.body = Body::Bytes(vec![0x55, 0x80, 0x1d, 0x11])),
        ),
        der("explicit critical FALSE", edit(good, &SAN_EXTENSION, true, explicit_false)),
        entry(
            "ipv4-mapped ip san",
            pem(&edit(good, &SAN_LIST, true, |n| {
                set_ip(n, &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 169, 254, 169, 254])
            }))
            .into_bytes(),
            Expect::Deny,
        ),
        der("ip san of five bytes", edit(good, &SAN_LIST, true, |n| set_ip(n, &[10, 0, 0, 11, 0]))),
        der("bad signature", flip_last_byte(&good.der)),
        der(
            "signed part changed, not re-signed",
            edit(good, &CN_VALUE, false, |n| n.body = Body::Bytes(b"system:node:n2".to_vec())),
        ),
    ];
    let denied = |name, der: Vec<u8>| entry(name, pem(&der).into_bytes(), Expect::Deny);
    entries.extend([
        denied("cn of another node", edit(good, &CN_VALUE, true, |n| n.body = Body::Bytes(b"system:node:n2".to_vec()))),
        denied("extra o system:masters", edit(good, &SUBJECT, true, |n| add_rdn(n, 1, b"system:masters"))),
        denied("two cns", edit(good, &SUBJECT, true, |n| add_rdn(n, 0, b"system:node:n1"))),
        denied("email san", edit(good, &SAN_LIST, true, |n| add_san(n, 0x81, b"root@n1.nodes.example.com"))),
        denied("uri san", edit(good, &SAN_LIST, true, |n| add_san(n, 0x86, b"spiffe://cluster/ns/kube-system"))),
        denied("wildcard dns san", edit(good, &SAN_LIST, true, |n| add_san(n, 0x82, b"*.nodes.example.com"))),
        denied("node n1 asks for auth.evil.io", edit(good, &SAN_LIST, true, |n| add_san(n, 0x82, b"auth.evil.io"))),
        denied("kubernetes.default.svc", edit(good, &SAN_LIST, true, |n| add_san(n, 0x82, b"kubernetes.default.svc"))),
    ]);
    entries.push(der("10,000 ip sans", many_ips(good, 10_000)));
    entries.extend(seeds.0.iter().map(|seed| Entry {
        name: seed.name,
        request: pem(&seed.der).into_bytes(),
        expect: Expect::Approve,
    }));
    entries
}

/// The good seed with CN `system:node:n2` and the SANs of the finding, re-signed.
fn other_node(good: &Seed) -> Vec<u8> {
    edit(good, &INFO, true, |info| {
        if let Some(cn) = der_tree::at_mut(std::slice::from_mut(info), &CN_VALUE[1..]) {
            cn.body = Body::Bytes(b"system:node:n2".to_vec());
        }
        if let Some(sans) = der_tree::at_mut(std::slice::from_mut(info), &SAN_LIST[1..]).and_then(Node::children_mut) {
            sans.push(Node::primitive(0x82, b"kubernetes.default.svc".to_vec()));
            sans.push(Node::primitive(0x87, vec![10, 96, 0, 1]));
        }
    })
}

/// The seed with the node at `path` changed, re-signed if `resign`.
fn edit(seed: &Seed, path: &[usize], resign: bool, change: impl FnOnce(&mut Node)) -> Vec<u8> {
    let Some(mut nodes) = der_tree::parse(&seed.der) else { return Vec::new() };
    if let Some(node) = der_tree::at_mut(&mut nodes, path) {
        change(node);
    }
    if resign {
        mutate::resign(&mut nodes, &seed.key);
    }
    der_tree::encode(&nodes)
}

fn rewrap(der: &[u8], width: usize) -> String {
    let body = STANDARD.encode(der);
    let lines: Vec<String> = body.as_bytes().chunks(width).map(|c| String::from_utf8_lossy(c).into_owned()).collect();
    format!("-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n", lines.join("\n"))
}

fn constructed_string(node: &mut Node) {
    if let Body::Bytes(text) = &node.body {
        node.body = Body::Children(vec![Node::primitive(0x0c, text.clone())]);
        node.ident = vec![0x2c];
    }
}

fn merge_rdns(subject: &mut Node) {
    if let Some(rdns) = subject.children_mut()
        && rdns.len() >= 2
    {
        let second = rdns.remove(1);
        if let (Some(first), Some(moved)) = (rdns[0].children_mut(), second.children()) {
            first.extend(moved.iter().cloned());
        }
    }
}

/// Adds an RDN holding a copy of RDN `of`'s attribute with another value.
fn add_rdn(subject: &mut Node, of: usize, value: &[u8]) {
    if let Some(rdns) = subject.children_mut()
        && let Some(mut rdn) = rdns.get(of).cloned()
    {
        if let Some(value_node) = der_tree::at_mut(std::slice::from_mut(&mut rdn), &[0, 0, 1]) {
            value_node.body = Body::Bytes(value.to_vec());
        }
        rdns.push(rdn);
    }
}

fn add_san(sans: &mut Node, tag: u8, value: &[u8]) {
    if let Some(names) = sans.children_mut() {
        names.push(Node::primitive(tag, value.to_vec()));
    }
}

fn duplicate_first_child(node: &mut Node) {
    if let Some(children) = node.children_mut()
        && let Some(first) = children.first().cloned()
    {
        children.push(first);
    }
}

fn trailing_in_wrapped(extension: &mut Node) {
    if let Some(Node { body: Body::Wrapped { children, .. }, .. }) = extension.children_mut().and_then(|c| c.last_mut())
    {
        children.push(Node::primitive(0x05, Vec::new()));
    }
}

fn explicit_false(extension: &mut Node) {
    if let Some(children) = extension.children_mut() {
        children.insert(1, Node::primitive(0x01, vec![0x00]));
    }
}

fn set_ip(sans: &mut Node, ip: &[u8]) {
    if let Some(names) = sans.children_mut() {
        names.retain(|n| n.ident != [0x87]);
        names.push(Node::primitive(0x87, ip.to_vec()));
    }
}

fn flip_last_byte(der: &[u8]) -> Vec<u8> {
    let mut der = der.to_vec();
    if let Some(last) = der.last_mut() {
        *last ^= 1;
    }
    der
}

fn many_ips(seed: &Seed, count: u32) -> Vec<u8> {
    edit(seed, &SAN_LIST, true, |sans| {
        if let Some(names) = sans.children_mut() {
            names.extend((0..count).map(|i| {
                Node::primitive(0x87, [10, 0].into_iter().chain(i.to_be_bytes()[2..].iter().copied()).collect())
            }));
        }
    })
}
