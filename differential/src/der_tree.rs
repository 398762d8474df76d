//! A loose BER tree, enough to take a DER request apart, change one node and put it back together:
//! identifier octets, a length form and either raw contents or children. OCTET STRINGs and BIT
//! STRINGs that hold DER (the SubjectAltName extension, an RSA key) are opened too.

/// How a node's length is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LengthForm {
    /// The shortest form (DER).
    Minimal,
    /// The long form with one more octet than needed (not DER).
    Padded,
    /// `0x80` ... `00 00` (BER, never DER).
    Indefinite,
}

/// What a node holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// Primitive contents.
    Bytes(Vec<u8>),
    /// A constructed node's children.
    Children(Vec<Node>),
    /// A primitive string (OCTET or BIT STRING) whose contents, after `prefix`, are DER.
    Wrapped { prefix: Vec<u8>, children: Vec<Node> },
}

/// One TLV.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The identifier octets (class, constructed bit, tag number).
    pub ident: Vec<u8>,
    /// How the length is written.
    pub length: LengthForm,
    /// The contents.
    pub body: Body,
}

impl Node {
    /// A primitive node with a one-octet identifier.
    pub fn primitive(ident: u8, contents: Vec<u8>) -> Node {
        Node { ident: vec![ident], length: LengthForm::Minimal, body: Body::Bytes(contents) }
    }

    /// The children, for constructed and wrapped nodes.
    pub fn children_mut(&mut self) -> Option<&mut Vec<Node>> {
        match &mut self.body {
            Body::Children(children) | Body::Wrapped { children, .. } => Some(children),
            Body::Bytes(_) => None,
        }
    }

    /// The children, for constructed and wrapped nodes.
    pub fn children(&self) -> Option<&Vec<Node>> {
        match &self.body {
            Body::Children(children) | Body::Wrapped { children, .. } => Some(children),
            Body::Bytes(_) => None,
        }
    }
}

/// Parses `der` as a sequence of definite-length TLVs covering every byte.
pub fn parse(der: &[u8]) -> Option<Vec<Node>> {
    let mut nodes = Vec::new();
    let mut rest = der;
    while !rest.is_empty() {
        let (node, after) = parse_one(rest)?;
        nodes.push(node);
        rest = after;
    }
    Some(nodes)
}

fn parse_one(input: &[u8]) -> Option<(Node, &[u8])> {
    let first = *input.first()?;
    let mut ident_len = 1;
    if first & 0x1f == 0x1f {
        while input.get(ident_len)? & 0x80 != 0 {
            ident_len += 1;
        }
        ident_len += 1;
    }
    let ident = input.get(..ident_len)?.to_vec();
    let length_octet = *input.get(ident_len)?;
    let (length, header) = match length_octet {
        0x00..=0x7f => (usize::from(length_octet), ident_len + 1),
        0x80 => return None,
        _ => {
            let count = usize::from(length_octet & 0x7f);
            let octets = input.get(ident_len + 1..ident_len + 1 + count)?;
            (
                octets.iter().fold(0usize, |n, b| n.saturating_mul(256).saturating_add(usize::from(*b))),
                ident_len + 1 + count,
            )
        }
    };
    let contents = input.get(header..header.checked_add(length)?)?;
    let rest = &input[header + length..];
    let body = if first & 0x20 != 0 {
        parse(contents).filter(|c| !c.is_empty()).map_or_else(|| Body::Bytes(contents.to_vec()), Body::Children)
    } else {
        wrapped(first, contents).unwrap_or_else(|| Body::Bytes(contents.to_vec()))
    };
    Some((Node { ident, length: LengthForm::Minimal, body }, rest))
}

/// OCTET STRING or BIT STRING (no unused bits) contents that are one DER SEQUENCE.
fn wrapped(tag: u8, contents: &[u8]) -> Option<Body> {
    let (prefix, inner) = match tag {
        0x04 => (Vec::new(), contents),
        0x03 if contents.first() == Some(&0) => (vec![0], &contents[1..]),
        _ => return None,
    };
    if inner.first() != Some(&0x30) {
        return None;
    }
    let children = parse(inner)?;
    (children.len() == 1).then_some(Body::Wrapped { prefix, children })
}

/// Encodes nodes back to bytes, each with its length form.
pub fn encode(nodes: &[Node]) -> Vec<u8> {
    let mut out = Vec::new();
    for node in nodes {
        encode_one(node, &mut out);
    }
    out
}

fn encode_one(node: &Node, out: &mut Vec<u8>) {
    let contents = match &node.body {
        Body::Bytes(bytes) => bytes.clone(),
        Body::Children(children) => encode(children),
        Body::Wrapped { prefix, children } => [prefix.clone(), encode(children)].concat(),
    };
    out.extend_from_slice(&node.ident);
    match node.length {
        LengthForm::Indefinite => {
            out.push(0x80);
            out.extend_from_slice(&contents);
            out.extend_from_slice(&[0, 0]);
            return;
        }
        LengthForm::Minimal => push_length(contents.len(), false, out),
        LengthForm::Padded => push_length(contents.len(), true, out),
    }
    out.extend_from_slice(&contents);
}

fn push_length(length: usize, padded: bool, out: &mut Vec<u8>) {
    if length < 0x80 && !padded {
        out.push(length as u8);
        return;
    }
    let mut octets: Vec<u8> = length.to_be_bytes().into_iter().skip_while(|b| *b == 0).collect();
    // One octet more than needed: the long form for a short length, a leading zero otherwise.
    if octets.is_empty() || (padded && length >= 0x80) {
        octets.insert(0, 0);
    }
    out.push(0x80 | octets.len() as u8);
    out.extend_from_slice(&octets);
}

/// The path (child indexes from the roots) of every node, depth first.
pub fn paths(nodes: &[Node]) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        out.push(vec![i]);
        if let Some(children) = node.children() {
            out.extend(paths(children).into_iter().map(|p| [vec![i], p].concat()));
        }
    }
    out
}

/// The node at `path`.
pub fn at_mut<'a>(nodes: &'a mut [Node], path: &[usize]) -> Option<&'a mut Node> {
    let (first, rest) = path.split_first()?;
    let node = nodes.get_mut(*first)?;
    if rest.is_empty() { Some(node) } else { at_mut(node.children_mut()?, rest) }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn der_round_trips_and_length_forms_are_written_as_asked() {
        let der = [0x30, 0x06, 0x04, 0x04, 0x30, 0x02, 0x05, 0x00];
        let mut nodes = parse(&der).unwrap();
        assert_eq!(encode(&nodes), der);
        assert!(matches!(nodes[0].children().unwrap()[0].body, Body::Wrapped { .. }));
        nodes[0].length = LengthForm::Padded;
        assert_eq!(encode(&nodes)[..3], [0x30, 0x81, 0x06]);
        nodes[0].length = LengthForm::Indefinite;
        assert_eq!(encode(&nodes)[..2], [0x30, 0x80]);
        assert_eq!(encode(&nodes)[8..], [0, 0]);
    }
}
