//! The name of an Event about an object: valid (a DNS subdomain) and distinct for any name.

use crate::policy::is_dns_subdomain;

/// The longest object name (a DNS subdomain).
const MAX_NAME_LEN: usize = 253;

/// A valid Event name (a DNS subdomain) for an event about the object `regarding`:
/// `<regarding>.<unique>`, `unique` in hexadecimal. CSR names need only be path segments: a name
/// that does not make a valid Event name that way (too long, upper case, other characters) is cut
/// and made valid, and followed by a hash of the whole name, so distinct names still get distinct
/// events.
pub(super) fn event_name(regarding: &str, unique: u128) -> String {
    let unique = format!("{unique:x}");
    let plain = format!("{regarding}.{unique}");
    if is_dns_subdomain(&plain) {
        return plain;
    }
    let hash = format!("{:016x}", fnv1a(regarding.as_bytes()));
    let head = dns_subdomain_prefix(regarding, MAX_NAME_LEN - unique.len() - hash.len() - 2);
    [head.as_str(), &hash, &unique].into_iter().filter(|part| !part.is_empty()).collect::<Vec<_>>().join(".")
}

/// At most `room` bytes of `name` shaped as a DNS subdomain (possibly empty): lowercased, every
/// character but letters, digits, `.` and `-` replaced by `-`, each label stripped of leading and
/// trailing `-`, empty labels dropped.
fn dns_subdomain_prefix(name: &str, room: usize) -> String {
    let mapped: String = name
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' { c } else { '-' })
        .take(room)
        .collect();
    mapped
        .split('.')
        .map(|label| label.trim_matches('-'))
        .filter(|label| !label.is_empty())
        .collect::<Vec<_>>()
        .join(".")
}

/// The 64-bit FNV-1a hash: stable across builds, so every replica names alike.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_stay_valid_for_the_longest_object_names() {
        assert_eq!(event_name("csr-a", 255), "csr-a.ff");
        let longest = format!("{}-b", "a".repeat(MAX_NAME_LEN - 2));
        let name = event_name(&longest, u128::from(u64::MAX));
        assert_eq!(name.len(), MAX_NAME_LEN);
        assert!(name.starts_with("aaaa") && name.ends_with(".ffffffffffffffff"), "{name}");
        let dotted = format!("{}.{}", "a".repeat(235), "b".repeat(17));
        assert!(!event_name(&dotted, u128::from(u64::MAX)).contains(".."));
    }

    #[test]
    fn event_names_are_valid_and_distinct_for_any_csr_name() {
        let now = u128::from(u64::MAX);
        let long_a = format!("{}-a", "x".repeat(251));
        let long_b = format!("{}-b", "x".repeat(251));
        let long_dotted = format!("{}.{}", "y".repeat(230), "z".repeat(22));
        let odd = ["Foo_Bar", "foo-bar", "-a.", "a..b", "ünï", "a b:c", "..", "_", &"Ü".repeat(300)];
        let names = [&long_a, &long_b, &long_dotted, "csr-abc"].into_iter().chain(odd);
        let events: Vec<String> = names.clone().map(|name| event_name(name, now)).collect();
        for (name, event) in names.zip(&events) {
            assert!(is_dns_subdomain(event), "{name:?}: {event:?} ({} bytes)", event.len());
        }
        let distinct: std::collections::HashSet<&String> = events.iter().collect();
        assert_eq!(distinct.len(), events.len(), "{events:#?}");
        assert!(event_name("Foo_Bar", now).starts_with("foo-bar."));
        assert_ne!(event_name(&long_a, now), event_name(&long_a, now - 1));
    }
}
