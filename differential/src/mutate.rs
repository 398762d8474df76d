//! Mutations of a seed: of the ASN.1 structure (re-signed when the signed part changed, so the
//! signature check does not hide what the parsers disagree on) and of the PEM bytes.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rcgen::SigningKey;

use crate::der_tree::{self, Body, LengthForm, Node};
use crate::rng::Rng;
use crate::seeds::Seed;

/// One input for both readers.
#[derive(Debug, Clone)]
pub struct Input {
    /// The bytes of `spec.request`.
    pub request: Vec<u8>,
    /// The mutations applied, for reports.
    pub mutations: Vec<&'static str>,
}

const LABEL: &str = "CERTIFICATE REQUEST";
const STRING_TAGS: [u8; 7] = [0x0c, 0x13, 0x16, 0x14, 0x1e, 0x12, 0x1a];
const OIDS: [&[u8]; 6] = [
    &[0x55, 0x04, 0x03],                                     // CN
    &[0x55, 0x04, 0x0a],                                     // O
    &[0x55, 0x04, 0x0b],                                     // OU
    &[0x55, 0x1d, 0x11],                                     // subjectAltName
    &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x0e], // extensionRequest
    &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x07], // challengePassword
];
const TEXTS: [&[u8]; 10] = [
    b"system:node:n1",
    b"system:node:n2",
    b"system:nodes",
    b"system:masters",
    b"n1.nodes.example.com",
    b"n2.nodes.example.com",
    b"kubernetes.default.svc",
    b"N1.NODES.EXAMPLE.COM",
    b"n1.nodes.example.com\x00.evil.io",
    b"n1.nodes.\xc3\xa9xample.com",
];
const IPS: [&[u8]; 6] = [
    &[10, 0, 0, 11],
    &[10, 9, 9, 9],
    &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 9, 9, 9],
    &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 9, 9, 9],
    &[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x11],
    &[10, 0, 0, 11, 0],
];

/// Derives one input from `seed`: one to three structure mutations, then sometimes PEM mutations.
pub fn mutate(seed: &Seed, rng: &mut Rng) -> Input {
    let mut mutations = Vec::new();
    let mut der = seed.der.clone();
    if rng.percent(80)
        && let Some(mut nodes) = der_tree::parse(&der)
    {
        let mut signed_part_changed = false;
        for _ in 0..=rng.below(3) {
            let (name, in_signed_part) = mutate_structure(&mut nodes, rng);
            mutations.push(name);
            signed_part_changed |= in_signed_part;
        }
        if signed_part_changed && rng.percent(90) {
            resign(&mut nodes, &seed.key);
            mutations.push("re-signed");
        }
        der = der_tree::encode(&nodes);
    }
    let mut request = pem(&der).into_bytes();
    if mutations.is_empty() || rng.percent(30) {
        for _ in 0..=rng.below(2) {
            mutations.push(mutate_pem(&mut request, &der, rng));
        }
    }
    Input { request, mutations }
}

/// The canonical PEM block of `der`, as Go's `pem.EncodeToMemory` writes it.
pub fn pem(der: &[u8]) -> String {
    wrap(&STANDARD.encode(der), 64, "\n")
}

fn wrap(body: &str, width: usize, newline: &str) -> String {
    let mut out = format!("-----BEGIN {LABEL}-----{newline}");
    for chunk in body.as_bytes().chunks(width) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push_str(newline);
    }
    out.push_str(&format!("-----END {LABEL}-----{newline}"));
    out
}

/// Applies one structure mutation at a random node; returns its name and whether it touched the
/// signed part (the first child of the outer SEQUENCE).
fn mutate_structure(nodes: &mut [Node], rng: &mut Rng) -> (&'static str, bool) {
    let paths = der_tree::paths(nodes);
    let path = rng.pick(&paths).clone();
    let in_signed_part = path.len() >= 2 && path[1] == 0;
    let Some(node) = der_tree::at_mut(nodes, &path) else { return ("none", false) };
    let name = match rng.below(16) {
        0 => {
            node.ident[0] ^= [0x40, 0x80, 0xc0][rng.below(3)];
            "tag class"
        }
        1 => {
            node.ident[0] ^= 0x20;
            "constructed bit"
        }
        2 => {
            node.ident = vec![*rng.pick(&STRING_TAGS)];
            "string type"
        }
        3 => {
            node.length = LengthForm::Padded;
            "non-minimal length"
        }
        4 => {
            node.length = LengthForm::Indefinite;
            "indefinite length"
        }
        5 => {
            node.ident = vec![node.ident[0] | 0x1f, node.ident[0] & 0x1f];
            "high tag number form"
        }
        6 if matches!(node.body, Body::Bytes(_)) => {
            node.body = Body::Bytes(rng.pick(&TEXTS).to_vec());
            "text"
        }
        7 if matches!(node.body, Body::Bytes(_)) => {
            node.body = Body::Bytes(rng.pick(&IPS).to_vec());
            "ip bytes"
        }
        8 if node.ident == [0x06] => {
            node.body = Body::Bytes(rng.pick(&OIDS).to_vec());
            "oid"
        }
        9 => {
            if let Body::Bytes(bytes) = &mut node.body {
                bytes.push(0);
            } else if let Some(children) = node.children_mut() {
                children.push(Node::primitive(0x05, Vec::new()));
            }
            "trailing contents"
        }
        10 => return (sibling_mutation(nodes, &path, rng), in_signed_part),
        11 => {
            if let Some(children) = node.children_mut().filter(|c| !c.is_empty()) {
                let copy = rng.pick(children).clone();
                let at = rng.below(children.len() + 1);
                children.insert(at, copy);
            }
            "duplicate child"
        }
        12 => {
            if let Some(children) = node.children_mut().filter(|c| !c.is_empty()) {
                let at = rng.below(children.len());
                children.remove(at);
            }
            "delete child"
        }
        13 => {
            if let Some(children) = node.children_mut().filter(|c| c.len() >= 2) {
                let (a, b) = (rng.below(children.len()), rng.below(children.len()));
                children.swap(a, b);
            }
            "swap children"
        }
        14 => {
            if let Some(children) = node.children_mut() {
                children.insert(1.min(children.len()), Node::primitive(0x01, vec![*rng.pick(&[0x00, 0xff, 0x01])]));
            }
            "explicit boolean"
        }
        _ => {
            if let Body::Bytes(bytes) = &mut node.body
                && !bytes.is_empty()
            {
                let at = rng.below(bytes.len());
                bytes[at] = rng.next_u64() as u8;
            }
            "byte"
        }
    };
    (name, in_signed_part)
}

/// Moves a node next to a sibling of its parent, or merges two sibling SETs (a multi-valued RDN).
fn sibling_mutation(nodes: &mut [Node], path: &[usize], rng: &mut Rng) -> &'static str {
    let Some((index, parent_path)) = path.split_last() else { return "none" };
    let Some(parent) = der_tree::at_mut(nodes, parent_path) else { return "none" };
    let Some(siblings) = parent.children_mut() else { return "none" };
    let (Some(this), Some(next)) = (siblings.get(*index).cloned(), siblings.get(index + 1).cloned()) else {
        return "none";
    };
    if let (Some(a), Some(b)) = (this.children(), next.children())
        && rng.percent(50)
    {
        let merged = Node { body: Body::Children([a.clone(), b.clone()].concat()), ..this };
        siblings.splice(*index..index + 2, [merged]);
        return "merge siblings";
    }
    if let Some(inner) = siblings.get_mut(index + 1).and_then(Node::children_mut) {
        inner.push(this);
        siblings.remove(*index);
        return "move into sibling";
    }
    "none"
}

/// Signs the (mutated) certificationRequestInfo again with the seed's key.
pub(crate) fn resign(nodes: &mut [Node], key: &rcgen::KeyPair) {
    let Some(children) = nodes.first_mut().and_then(Node::children_mut) else { return };
    let (Some(info), Some(_)) = (children.first(), children.get(2)) else { return };
    let Ok(signature) = key.sign(&der_tree::encode(std::slice::from_ref(info))) else { return };
    children[2] = Node::primitive(0x03, [vec![0], signature].concat());
}

/// Applies one PEM-level mutation; returns its name.
fn mutate_pem(request: &mut Vec<u8>, der: &[u8], rng: &mut Rng) -> &'static str {
    let text = String::from_utf8_lossy(request).into_owned();
    let body = STANDARD.encode(der);
    let (name, mutated): (&'static str, String) = match rng.below(16) {
        0 => ("crlf", text.replace('\n', "\r\n")),
        1 => ("header", text.replacen("-----\n", "-----\nProc-Type: 4,ENCRYPTED\n\n", 1)),
        2 => ("two blocks", format!("{text}{text}")),
        3 => {
            ("end-begin on one line", text.replacen("-----END CERTIFICATE REQUEST-----\n", "-----END -----", 1) + &text)
        }
        4 => ("nested begin", text.replacen("-----\n", "-----\n-----BEGIN CERTIFICATE REQUEST-----\n", 1)),
        5 => ("junk after begin", text.replacen("REQUEST-----\n", "REQUEST----- junk\n", 1)),
        6 => ("junk after end", text.trim_end().to_owned() + " junk\n"),
        7 => ("wrong end label", text.replacen("-----END CERTIFICATE REQUEST", "-----END CERTIFICATE", 1)),
        8 => ("leading junk", format!("junk\n{text}")),
        9 => ("leading whitespace", format!("{}{text}", rng.pick(&[" ", "\t", "\n", " \n", "\r\n"]))),
        10 => ("trailing whitespace", format!("{text}{}", rng.pick(&[" ", "\n\n", "\t\n", "\r\n"]))),
        11 => ("line width", wrap(&body, *rng.pick(&[63, 65, 76, 4096]), "\n")),
        12 => ("spaces in body", text.replacen('\n', "\n ", 3)),
        13 => ("padding", text.replacen("=\n", "\n", 1).replacen("\n-----END", "=\n-----END", 1)),
        14 => ("lowercase label", text.replace("CERTIFICATE REQUEST", "certificate request")),
        _ => {
            let mut bytes = text.into_bytes();
            let at = rng.below(bytes.len());
            match rng.below(3) {
                0 => bytes[at] = rng.next_u64() as u8,
                1 => bytes.insert(at, *rng.pick(b"\n\r \t-=:A/")),
                _ => {
                    bytes.remove(at);
                }
            }
            *request = bytes;
            return "pem byte";
        }
    };
    *request = mutated.into_bytes();
    name
}
