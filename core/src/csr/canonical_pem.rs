//! The canonical PEM gate: `spec.request` must be exactly what Go's `pem.EncodeToMemory` writes for
//! one `CERTIFICATE REQUEST` block, so that Go's `pem.Decode` (kube-apiserver, the signer) and this
//! reader can only see the same block. Each rule gets its own message; a final comparison with the
//! re-encoded block catches anything the rules did not name.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::CsrError;

/// The largest `spec.request` accepted, in bytes (a kubelet's request is under 2 KiB).
pub const MAX_REQUEST_BYTES: usize = 16 * 1024;
/// The only label accepted.
const LABEL: &str = "CERTIFICATE REQUEST";
const BEGIN: &[u8] = b"-----BEGIN";
const END: &[u8] = b"-----END";
/// Go writes base64 lines of this many characters, the last one shorter.
const LINE_WIDTH: usize = 64;

/// Why `spec.request` is not one canonical `CERTIFICATE REQUEST` PEM block; the parts quoted are
/// the request's own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotCanonical {
    /// No BEGIN line.
    #[error("no -----BEGIN line")]
    NoBegin,
    /// BEGIN or END other than once each.
    #[error("-----BEGIN occurs {begins} and -----END {ends} times; each must occur exactly once")]
    Delimiters {
        /// How many times `-----BEGIN` occurs.
        begins: usize,
        /// How many times `-----END` occurs.
        ends: usize,
    },
    /// Something other than whitespace before the block.
    #[error("bytes other than whitespace come before -----BEGIN")]
    BytesBefore,
    /// Whitespace before the block that does not end with a line feed.
    #[error("the whitespace before -----BEGIN does not end with a line feed")]
    NoLineFeedBefore,
    /// Something other than whitespace after the block.
    #[error("bytes other than whitespace come after the -----END line")]
    BytesAfter,
    /// Bytes that are not text.
    #[error("the block is not ASCII")]
    NotAscii,
    /// CR LF line ends.
    #[error("lines end in CR LF; only LF is accepted")]
    CrLf,
    /// A BEGIN or END line with another label.
    #[error("the {which} label is {label:?}, expected {LABEL:?}")]
    Label {
        /// `BEGIN` or `END`.
        which: &'static str,
        /// The label found.
        label: String,
    },
    /// A BEGIN or END line that is not one.
    #[error("the {which} line {line:?} is not -----{which} {LABEL}-----")]
    LabelLine {
        /// `BEGIN` or `END`.
        which: &'static str,
        /// The line found.
        line: String,
    },
    /// Nothing between BEGIN and END.
    #[error("the block has no body")]
    NoBody,
    /// A header line.
    #[error("PEM headers are not accepted")]
    Headers,
    /// A body line with other characters than base64.
    #[error("the body line {0:?} holds characters other than base64")]
    NotBase64Line(String),
    /// A body line, not the last, of another width.
    #[error("a body line has {0} characters; every line but the last has {LINE_WIDTH}")]
    LineWidth(usize),
    /// A last body line of another width.
    #[error("the last body line has {0} characters, expected 1 to {LINE_WIDTH}")]
    LastLineWidth(usize),
    /// The body does not decode as canonical base64.
    #[error("the body is not canonical base64: {0}")]
    Base64(base64::DecodeError),
    /// The block is not what encoding its contents gives.
    #[error("the block differs from the canonical encoding of its contents")]
    NotReencoded,
}

/// Returns the DER inside a canonical `CERTIFICATE REQUEST` PEM block.
pub(super) fn decode(pem: &[u8]) -> Result<Vec<u8>, CsrError> {
    if pem.len() > MAX_REQUEST_BYTES {
        return Err(CsrError::TooLarge);
    }
    block(pem).map_err(CsrError::NotCanonicalPem)
}

/// The DER of `pem`, a canonical block, or why it is not one.
fn block(pem: &[u8]) -> Result<Vec<u8>, NotCanonical> {
    match (occurrences(pem, BEGIN), occurrences(pem, END)) {
        (0, _) => return Err(NotCanonical::NoBegin),
        (1, 1) => {}
        (begins, ends) => return Err(NotCanonical::Delimiters { begins, ends }),
    }
    let block = surrounded_by_whitespace(pem)?;
    let text = std::str::from_utf8(block).map_err(|_| NotCanonical::NotAscii)?;
    if text.contains('\r') {
        return Err(NotCanonical::CrLf);
    }
    let mut lines = text.split('\n');
    let begin = lines.next().unwrap_or_default();
    let end = lines.next_back().unwrap_or_default();
    check_label_line(begin, "BEGIN")?;
    check_label_line(end, "END")?;
    let body: Vec<&str> = lines.collect();
    check_body_lines(&body)?;
    let der = STANDARD.decode(body.concat()).map_err(NotCanonical::Base64)?;
    if encode(&der).trim_end_matches('\n') != text {
        return Err(NotCanonical::NotReencoded);
    }
    Ok(der)
}

/// The PEM block as Go's `pem.EncodeToMemory` writes it.
pub(super) fn encode(der: &[u8]) -> String {
    let body = STANDARD.encode(der);
    let mut out = format!("-----BEGIN {LABEL}-----\n");
    for chunk in body.as_bytes().chunks(LINE_WIDTH) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {LABEL}-----\n"));
    out
}

fn occurrences(haystack: &[u8], needle: &[u8]) -> usize {
    haystack.windows(needle.len()).filter(|window| *window == needle).count()
}

/// The block without the whitespace around it. Leading whitespace must end with a line feed: Go
/// finds a BEGIN line only at the start of the input or right after a `\n`.
fn surrounded_by_whitespace(pem: &[u8]) -> Result<&[u8], NotCanonical> {
    let is_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    let start = pem.iter().position(|b| !is_space(b)).unwrap_or(pem.len());
    let end = pem.iter().rposition(|b| !is_space(b)).map_or(start, |i| i + 1);
    if !pem[start..].starts_with(BEGIN) {
        return Err(NotCanonical::BytesBefore);
    }
    if start > 0 && pem[start - 1] != b'\n' {
        return Err(NotCanonical::NoLineFeedBefore);
    }
    let block = &pem[start..end];
    let last_line = block.rsplit(|b| *b == b'\n').next().unwrap_or_default();
    if !last_line.starts_with(END) {
        return Err(NotCanonical::BytesAfter);
    }
    Ok(block)
}

/// `-----BEGIN CERTIFICATE REQUEST-----` or `-----END CERTIFICATE REQUEST-----`, nothing else.
fn check_label_line(line: &str, which: &'static str) -> Result<(), NotCanonical> {
    let label = line
        .strip_prefix("-----")
        .and_then(|rest| rest.strip_prefix(which))
        .and_then(|rest| rest.strip_prefix(' '))
        .and_then(|rest| rest.strip_suffix("-----"));
    match label {
        Some(LABEL) => Ok(()),
        Some(other) => Err(NotCanonical::Label { which, label: other.to_owned() }),
        None => Err(NotCanonical::LabelLine { which, line: line.to_owned() }),
    }
}

/// Base64 lines of exactly [`LINE_WIDTH`] characters, the last one 1 to [`LINE_WIDTH`]; no headers.
fn check_body_lines(body: &[&str]) -> Result<(), NotCanonical> {
    let Some((last, full)) = body.split_last() else {
        return Err(NotCanonical::NoBody);
    };
    if body.iter().any(|line| line.contains(':')) {
        return Err(NotCanonical::Headers);
    }
    if let Some(line) = body.iter().find(|line| !line.bytes().all(is_base64_char)) {
        return Err(NotCanonical::NotBase64Line((*line).to_owned()));
    }
    if let Some(line) = full.iter().find(|line| line.len() != LINE_WIDTH) {
        return Err(NotCanonical::LineWidth(line.len()));
    }
    if last.is_empty() || last.len() > LINE_WIDTH {
        return Err(NotCanonical::LastLineWidth(last.len()));
    }
    Ok(())
}

fn is_base64_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn canonical_blocks_round_trip() {
        for len in [1, 47, 48, 49, 96, 1000] {
            let der: Vec<u8> = (0..len).map(|i| i as u8).collect();
            assert_eq!(decode(encode(&der).as_bytes()).unwrap(), der, "{len} bytes");
        }
    }

    /// The message of the error `pem` is refused with.
    fn refusal(pem: &str) -> String {
        match decode(pem.as_bytes()) {
            Err(error) => error.to_string(),
            Ok(der) => panic!("accepted {pem:?} as {der:?}"),
        }
    }

    #[test]
    fn the_size_limit_counts_every_byte() {
        let block = encode(&[7; 600]);
        let exactly = format!("{block}{}", "\n".repeat(MAX_REQUEST_BYTES - block.len()));
        assert_eq!(decode(exactly.as_bytes()).unwrap(), [7; 600]);
        let over = format!("{exactly}\n");
        assert_eq!(decode(over.as_bytes()), Err(CsrError::TooLarge));
    }

    #[test]
    fn each_rule_is_named_in_the_refusal() {
        let block = encode(&[1; 100]);
        let lines: Vec<&str> = block.lines().collect();
        let (begin, end, body) = (lines[0], lines[lines.len() - 1], &lines[1..lines.len() - 1]);
        let cases: Vec<(String, &str)> = vec![
            ("no pem here".into(), "no -----BEGIN line"),
            (format!("{block}{block}"), "-----BEGIN occurs 2 and -----END 2 times"),
            (block.replacen("-----END CERTIFICATE REQUEST-----", "", 1), "-----BEGIN occurs 1 and -----END 0 times"),
            (block.replace('\n', "\r\n"), "CR LF"),
            (block.replace("BEGIN CERTIFICATE REQUEST", "BEGIN CERTIFICATE"), r#"the BEGIN label is "CERTIFICATE""#),
            (block.replace("END CERTIFICATE REQUEST", "END CERTIFICATE"), r#"the END label is "CERTIFICATE""#),
            (
                block.replace("-----BEGIN CERTIFICATE REQUEST-----", "-----BEGIN CERTIFICATE REQUEST----- x"),
                "the BEGIN line",
            ),
            (block.replacen("-----\n", "-----\nProc-Type: 4,ENCRYPTED\n", 1), "PEM headers are not accepted"),
            (block.replacen(body[0], &format!("{}!", &body[0][..63]), 1), "characters other than base64"),
            (format!("{begin}\n{}\n{end}\n", body.concat()), "the last body line has 136 characters"),
            (
                format!("{begin}\n{}\n{}\n{}\n{end}\n", &body[0][..32], &body[0][32..], body[1..].join("\n")),
                "a body line has 32 characters",
            ),
            (format!("{begin}\n{end}\n"), "the block has no body"),
            (encode(&[1; 96]).replacen("\n-----END", "\n\n-----END", 1), "the last body line has 0 characters"),
            (block.replacen(&body[2][..4], "AQ=A", 1), "not canonical base64"),
            (format!(" {block}"), "does not end with a line feed"),
            (format!("x\n{block}"), "before -----BEGIN"),
            (format!("{block}x"), "after the -----END line"),
        ];
        for (pem, named) in cases {
            let refusal = refusal(&pem);
            assert!(refusal.contains(named), "{pem:?}: {refusal:?} does not say {named:?}");
        }
    }

    #[test]
    fn surrounding_whitespace_is_accepted_only_where_go_reads_the_block() {
        let block = encode(b"request");
        for ok in [block.clone(), format!("\n{block}"), format!(" \t\n{block}\n \n"), block.trim_end().into()] {
            assert!(decode(ok.as_bytes()).is_ok(), "{ok:?}");
        }
        for bad in [format!(" {block}"), format!("x\n{block}"), format!("{block}x")] {
            assert!(decode(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }
}
