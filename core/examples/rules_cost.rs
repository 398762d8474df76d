//! `cargo run --release -p node-csr-approver-core --example rules_cost`: what one rule of `--rules` adds to the decision
//! on one serving CSR (docs/rules.md#cost). Decides the same CSR, with a labelled Node of a
//! realistic size, without rules and with each rule, and prints the time per decision and the
//! difference; the last row is the widest loop the bounds allow (two nested loops over 1,000 DNS
//! SANs, `--allowed-dns-names=1000`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use node_csr_approver_core::policy::{
    ApiserverAddresses, Evidence, HostnameMatch, KUBELET_SERVING_SIGNER, Lookup, NodeInfo, PolicyConfig, Submission,
    UserRule, UserRules, decide, object_for_rules,
};
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};

const RULES: [(&str, &str); 4] = [
    (
        "pool-domain",
        "node.metadata.labels['node-restriction.kubernetes.io/pool'] == 'gpu' ? \
         request.dnsNames.all(n, n.endsWith('.gpu.example.com')) : true",
    ),
    (
        "pool-prefixes",
        "node.metadata.labels['node-restriction.kubernetes.io/pool'] == 'cpu' ? \
         request.ipAddresses.all(a, cidr('10.0.0.0/16').containsIP(a)) : true",
    ),
    (
        "pool-ipv4-only",
        "node.metadata.labels['node-restriction.kubernetes.io/pool'] == 'cpu' ? \
         request.ipAddresses.all(a, ip(a).family() == 4) : true",
    ),
    ("request-only", "request.nodeName.matches('^n[0-9]+$') && request.expirationSeconds == null"),
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let node = node_object();
    let sub = serving(&["n1.nodes.example.com"], Some("10.0.0.11"))?;
    let evidence = Evidence {
        apiserver: Some(Ok(ApiserverAddresses::default())),
        node: Some(Lookup::Found(NodeInfo { name: "n1".into(), addresses: Vec::new(), object: Some(node) })),
        ..Evidence::default()
    };
    let base = config()?;
    let none = per_decision(&sub, &base, &evidence, 20_000, "approve");
    println!("{:<16} {:>12} {:>14}", "RULE", "DECISION", "RULE'S COST");
    println!("{:<16} {:>10.1}µs {:>14}", "(no rules)", micros(none), "-");
    for (name, expression) in RULES {
        let cfg = PolicyConfig { user_rules: rules(name, expression)?, ..base.clone() };
        let with = per_decision(&sub, &cfg, &evidence, 20_000, "approve");
        println!("{name:<16} {:>10.1}µs {:>12.1}µs", micros(with), micros(with.saturating_sub(none)));
    }
    let inflated = Evidence {
        node: Some(Lookup::Found(NodeInfo { name: "n1".into(), addresses: Vec::new(), object: Some(inflated_node()) })),
        ..evidence.clone()
    };
    let cfg = PolicyConfig { user_rules: rules("inflated-node", RULES[0].1)?, ..base.clone() };
    let with = per_decision(&sub, &cfg, &inflated, 200, "deny");
    println!("{:<16} {:>10.1}µs {:>12.1}µs", "inflated-node", micros(with), micros(with.saturating_sub(none)));
    let names: Vec<String> = (0..1000).map(|i| format!("n1.x{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let wide_cfg = PolicyConfig {
        provider_regex: regex::Regex::new(r"^n1(\.[a-z0-9-]+)*$")?,
        allowed_dns_names: 1000,
        ..base.clone()
    };
    let wide_sub = serving(&names, None)?;
    let plain = per_decision(&wide_sub, &wide_cfg, &evidence, 3, "approve");
    let nested = "request.dnsNames.all(a, request.dnsNames.exists(b, b == a))";
    let cfg = PolicyConfig { user_rules: rules("widest-loop", nested)?, ..wide_cfg };
    let with = per_decision(&wide_sub, &cfg, &evidence, 3, "approve");
    println!("{:<16} {:>10.1}µs {:>12.1}µs", "widest-loop", micros(with), micros(with.saturating_sub(plain)));
    Ok(())
}

fn rules(name: &str, expression: &str) -> Result<UserRules, Box<dyn std::error::Error>> {
    Ok(UserRules::new(vec![UserRule::compile(name, expression, "bench")?])?)
}

/// The mean time of one decision over `rounds`, after one unmeasured decision (which also checks
/// that the decision is `expected`: approve, so every rule ran).
fn per_decision(sub: &Submission, cfg: &PolicyConfig, evidence: &Evidence, rounds: u32, expected: &str) -> Duration {
    let now = jiff::Timestamp::now();
    let first = decide(sub, cfg, evidence, now);
    assert_eq!(first.decision.kind.as_str(), expected, "{first:?}");
    let start = Instant::now();
    for _ in 0..rounds {
        std::hint::black_box(decide(sub, cfg, evidence, now));
    }
    start.elapsed() / rounds
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

/// The settings the tests run with (the documented defaults, DNS bypassed).
fn config() -> Result<PolicyConfig, Box<dyn std::error::Error>> {
    Ok(PolicyConfig {
        provider_regex: regex::Regex::new(r"^[a-z0-9-]+\.nodes\.example\.com$")?,
        ip_prefixes: vec!["10.0.0.0/16".parse()?],
        max_expiration_secs: 367 * 24 * 3600,
        allowed_dns_names: 1,
        allowed_ip_addresses: 16,
        bypass_dns_resolution: true,
        bypass_hostname_check: false,
        hostname_match: HostnameMatch::Strict,
        ignore_non_system_node: false,
        skip_deny_step: false,
        dns_grace_period: Duration::from_secs(300),
        verify_node_addresses: false,
        cluster_domain: "cluster.local".into(),
        machine: None,
        user_rules: UserRules::default(),
    })
}

/// A serving CSR of node `n1` with these SANs, made with rcgen.
fn serving(dns_names: &[&str], ip: Option<&str>) -> Result<Submission, Box<dyn std::error::Error>> {
    let mut params = CertificateParams::default();
    let mut subject = DistinguishedName::new();
    subject.push(DnType::CommonName, "system:node:n1");
    subject.push(DnType::OrganizationName, "system:nodes");
    params.distinguished_name = subject;
    for name in dns_names {
        params.subject_alt_names.push(SanType::DnsName((*name).try_into()?));
    }
    if let Some(ip) = ip {
        params.subject_alt_names.push(SanType::IpAddress(ip.parse()?));
    }
    let request = params.serialize_request(&KeyPair::generate()?)?.pem()?;
    Ok(Submission {
        name: "csr-n1".into(),
        signer_name: KUBELET_SERVING_SIGNER.into(),
        username: "system:node:n1".into(),
        groups: vec!["system:nodes".into(), "system:authenticated".into()],
        usages: vec!["digital signature".into(), "server auth".into()],
        request: request.into_bytes(),
        ..Submission::default()
    })
}

/// A Node that inflated its own object: 1 MiB of annotations and 10,000 labels beside what
/// [`node_object`] has (the rules refuse it, after counting at most 64 KiB of it).
fn inflated_node() -> Arc<serde_json::Value> {
    let mut node = (*node_object()).clone();
    let labels: serde_json::Map<String, serde_json::Value> =
        (0..10_000).map(|i| (format!("example.com/inflated-{i}"), "x".repeat(60).into())).collect();
    node["metadata"]["annotations"] = serde_json::json!({ "example.com/blob": "x".repeat(1 << 20) });
    node["metadata"]["labels"].as_object_mut().into_iter().for_each(|all| all.extend(labels.clone()));
    Arc::new(node)
}

/// A Node as a kubelet reports it: 20 labels, 3 addresses, conditions and 50 images.
fn node_object() -> Arc<serde_json::Value> {
    let mut labels: serde_json::Map<String, serde_json::Value> =
        (0..19).map(|i| (format!("example.com/label-{i}"), format!("value-{i}").into())).collect();
    labels.insert("node-restriction.kubernetes.io/pool".into(), "cpu".into());
    let images: Vec<serde_json::Value> = (0..50)
        .map(|i| serde_json::json!({ "names": [format!("registry.example.com/image-{i}@sha256:{i:064}"), format!("registry.example.com/image-{i}:v1")], "sizeBytes": 100_000_000 + i }))
        .collect();
    object_for_rules(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": "n1", "labels": labels, "uid": "0e6a5b8c-1c1d-4f7e-9a1b-2c3d4e5f6a7b" },
        "spec": { "podCIDR": "10.244.1.0/24", "providerID": "example://n1" },
        "status": {
            "addresses": [
                { "type": "InternalIP", "address": "10.0.0.11" },
                { "type": "Hostname", "address": "n1" },
                { "type": "InternalDNS", "address": "n1.nodes.example.com" },
            ],
            "conditions": (0..5).map(|i| serde_json::json!({ "type": format!("Condition{i}"), "status": "False", "reason": "Fine", "message": "all fine" })).collect::<Vec<_>>(),
            "images": images,
        },
    }))
}
