//! A CSR's metadata.uid as the cache keeps it ([`Uid`]): the 16 bytes of a UUID written as the
//! apiserver writes one, else the text as it came.

use std::fmt;

/// metadata.uid: 16 bytes for a UUID in its canonical form (lowercase hex, `8-4-4-4-12`, which is
/// how the apiserver writes every uid), else its own copy of the text, so any uid reads back as it
/// came ([`Uid::to_string`]) and two uids are equal exactly when their texts are.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub enum Uid {
    /// A canonical UUID's bytes.
    Uuid([u8; 16]),
    /// No uid: metadata.uid absent or empty.
    #[default]
    Empty,
    /// Any other non-empty text, as it came.
    Other(Box<str>),
}

/// Where the hyphens of a canonical UUID are.
const HYPHENS: [usize; 4] = [8, 13, 18, 23];

impl Uid {
    /// True when no uid was given (an absent or empty metadata.uid).
    pub fn is_empty(&self) -> bool {
        matches!(self, Uid::Empty)
    }

    /// The bytes of `text` when it is a UUID in canonical form.
    fn uuid(text: &str) -> Option<[u8; 16]> {
        let text = text.as_bytes();
        if text.len() != 36 || HYPHENS.iter().any(|&at| text[at] != b'-') {
            return None;
        }
        let mut digits = text.iter().enumerate().filter(|(at, _)| !HYPHENS.contains(at)).map(|(_, digit)| *digit);
        let mut bytes = [0; 16];
        for byte in &mut bytes {
            let (high, low) = (hex_digit(digits.next()?)?, hex_digit(digits.next()?)?);
            *byte = high << 4 | low;
        }
        Some(bytes)
    }
}

/// The value of a lowercase hex digit.
fn hex_digit(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        _ => None,
    }
}

impl From<&str> for Uid {
    fn from(text: &str) -> Uid {
        match Uid::uuid(text) {
            Some(bytes) => Uid::Uuid(bytes),
            None if text.is_empty() => Uid::Empty,
            None => Uid::Other(text.into()),
        }
    }
}

impl From<String> for Uid {
    fn from(text: String) -> Uid {
        match Uid::uuid(&text) {
            Some(bytes) => Uid::Uuid(bytes),
            None if text.is_empty() => Uid::Empty,
            None => Uid::Other(text.into_boxed_str()),
        }
    }
}

impl fmt::Display for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Uid::Uuid(bytes) => {
                for (at, byte) in bytes.iter().enumerate() {
                    if matches!(at, 4 | 6 | 8 | 10) {
                        f.write_str("-")?;
                    }
                    write!(f, "{byte:02x}")?;
                }
                Ok(())
            }
            Uid::Empty => Ok(()),
            Uid::Other(text) => f.write_str(text),
        }
    }
}

impl fmt::Debug for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_canonical_uuid_is_kept_as_its_bytes_and_reads_back_as_it_came() {
        let text = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
        let uid = Uid::from(text);
        assert_eq!(
            uid,
            Uid::Uuid([0x0f, 0x1e, 0x2d, 0x3c, 0x4b, 0x5a, 0x69, 0x78, 0x87, 0x96, 0xa5, 0xb4, 0xc3, 0xd2, 0xe1, 0xf0])
        );
        assert_eq!(uid.to_string(), text);
        assert_eq!(Uid::from(text.to_owned()), uid);
        assert!(!uid.is_empty());
    }

    #[test]
    fn any_other_uid_is_kept_as_it_came() {
        let others = [
            "0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0",
            "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
            "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f",
            "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f00",
            "0f1e2d3c-4b5a-6978-8796+a5b4c3d2e1f0",
            "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1g0",
            "{f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0}",
            "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1é",
            "uid-1",
        ];
        for text in others {
            let uid = Uid::from(text);
            assert_eq!(uid, Uid::Other(text.into()), "{text}");
            assert_eq!(uid.to_string(), text);
            assert_eq!(Uid::from(text.to_owned()), uid);
        }
        assert!(Uid::from("").is_empty() && Uid::from(String::new()).is_empty());
        assert_eq!(Uid::from("").to_string(), "");
    }

    #[test]
    fn two_uids_are_equal_exactly_when_their_texts_are() {
        let texts = ["0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f1", "x", "X", ""];
        for a in texts {
            for b in texts {
                assert_eq!(Uid::from(a) == Uid::from(b), a == b, "{a} {b}");
            }
        }
    }
}
