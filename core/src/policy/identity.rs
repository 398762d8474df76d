//! Who a kubelet is: the signers it asks, the identity the apiserver gives it, and node names as
//! the apiserver requires them (a lowercase RFC 1123 subdomain). One canonical spelling per node,
//! so `PANDA4`, `panda4.` and `panda4` can never name three different nodes.

/// The signer of kubelet serving certificates.
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// The signer of kubelet client certificates.
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The username prefix of node identities.
pub const NODE_USER_PREFIX: &str = "system:node:";
/// The group every node identity belongs to.
pub const NODES_GROUP: &str = "system:nodes";

/// The longest RFC 1123 subdomain.
const MAX_LEN: usize = 253;

/// Why `name` is not a valid Node name, or `None` when it is.
pub(crate) fn problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("the node name is empty".into());
    }
    if name.len() > MAX_LEN {
        return Some(format!("the node name has {} characters, at most {MAX_LEN} are allowed", name.len()));
    }
    if is_dns_subdomain(name) {
        None
    } else {
        Some(format!(
            "node name {name:?} is not a lowercase RFC 1123 subdomain (lowercase letters, digits, '-' and '.', \
             each dot-separated part starting and ending with a letter or digit)"
        ))
    }
}

/// Whether `name` is a lowercase RFC 1123 subdomain, as the apiserver checks object names: at most
/// 253 characters, dot-separated labels of lowercase letters, digits and `-` that start and end
/// with a letter or digit.
pub fn is_dns_subdomain(name: &str) -> bool {
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    name.len() <= MAX_LEN && name.split('.').all(label_ok)
}

#[cfg(test)]
mod tests {
    use super::problem;

    #[test]
    fn only_lowercase_rfc1123_subdomains_are_node_names() {
        for ok in ["a", "n1", "worker-1.example.com", "0", &"a".repeat(253)] {
            assert_eq!(problem(ok), None, "{ok}");
        }
        for bad in ["", "PANDA4", "panda4.", "panda4...", ".a", "-a", "a-", "a_b", "a b", "ä", &"a".repeat(254)] {
            assert!(problem(bad).is_some(), "{bad}");
        }
    }
}
