//! The apiserver's side of a phase, from its own counters: `apiserver_request_total` by verb and
//! resource and the `_sum` of `apiserver_response_sizes` (the bytes of its read responses: GET,
//! LIST and WATCH; it does not size write responses), scraped from `/metrics` with the admin
//! client just before the approver starts and again once it has stopped.
//!
//! The difference is the approver's, less what the bench itself sends in the window: requests that
//! name no resource (the scrapes themselves) and CSR creates (the live phase's; an approver never
//! creates a CSR) are left out. The bench's own CSR watch stays open across the window, and the
//! apiserver counts a watch (and sizes its bytes) only when it ends, so it is not in the
//! difference; the approver's watches end when it stops, before the second scrape, so they are.
//! The apiserver's renewals of its own identity Lease (one PUT every 10 s) are left in.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use kube::Client;
use serde::Serialize;

/// How long after the approver stopped the second scrape waits, so the apiserver has counted the
/// watches that ended with it.
const WATCHES_END: Duration = Duration::from_secs(1);

/// The counters of one scrape, keyed `VERB resource` or `VERB resource/subresource`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scrape {
    requests: BTreeMap<String, f64>,
    /// `None` when the scrape has no `apiserver_response_sizes` at all.
    bytes: Option<BTreeMap<String, f64>>,
    /// `apiserver_terminated_watchers_total`, all resources (absent until the first).
    terminated_watchers: f64,
}

/// Requests and bytes of one kind of request (or of all), in a window.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Count {
    /// Requests answered.
    pub requests: u64,
    /// Bytes of their responses; `None` when the apiserver does not expose response sizes.
    pub bytes: Option<u64>,
}

/// What the approver cost the apiserver in a phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ApiserverCost {
    /// Decisions of the phase.
    pub decisions: usize,
    /// Every request of the approver's in the window.
    pub total: Count,
    /// Requests per decision.
    pub requests_per_decision: f64,
    /// Response bytes per decision; `None` without response sizes.
    pub bytes_per_decision: Option<f64>,
    /// By `VERB resource[/subresource]`.
    pub by_request: BTreeMap<String, Count>,
    /// Watchers the apiserver closed in the window because they did not keep up, anyone's: when
    /// not 0, a closed watch of the bench's own may be among the counted ones.
    pub terminated_watchers: u64,
}

/// A counter of the first scrape is missing from, or lower in, the second: the apiserver
/// restarted between them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reset(pub String);

impl Scrape {
    /// The counters of `text`, the Prometheus text format of `/metrics`; lines of other metrics,
    /// histogram buckets, comments and lines that do not parse are skipped.
    pub fn parse(text: &str) -> Scrape {
        let mut requests = BTreeMap::new();
        let mut bytes: Option<BTreeMap<String, f64>> = None;
        let mut terminated_watchers = 0.0;
        for line in text.lines() {
            let Some((name, labels, value)) = sample(line) else { continue };
            match name {
                "apiserver_request_total" => {
                    if let Some(key) = key(&labels) {
                        *requests.entry(key).or_default() += value;
                    }
                }
                "apiserver_response_sizes_sum" => {
                    let sums = bytes.get_or_insert_with(BTreeMap::new);
                    if let Some(key) = key(&labels) {
                        *sums.entry(key).or_default() += value;
                    }
                }
                "apiserver_terminated_watchers_total" => terminated_watchers += value,
                _ => {}
            }
        }
        Scrape { requests, bytes, terminated_watchers }
    }

    /// What the approver cost between `before` and this scrape, for `decisions` decisions.
    pub fn since(&self, before: &Scrape, decisions: usize) -> Result<ApiserverCost, Reset> {
        let requests = difference(&before.requests, &self.requests)?;
        let bytes = match (&before.bytes, &self.bytes) {
            (Some(before), Some(after)) => Some(difference(before, after)?),
            _ => None,
        };
        let mut by_request: BTreeMap<String, Count> = BTreeMap::new();
        for (key, n) in requests {
            by_request.entry(key).or_default().requests = n;
        }
        for (key, n) in bytes.iter().flatten() {
            by_request.entry(key.clone()).or_default().bytes = Some(*n);
        }
        for count in by_request.values_mut() {
            count.bytes = count.bytes.or(bytes.as_ref().map(|_| 0));
        }
        by_request.retain(|key, count| !bench_own(key) && (count.requests > 0 || count.bytes.unwrap_or(0) > 0));
        let total = Count {
            requests: by_request.values().map(|c| c.requests).sum(),
            bytes: bytes.as_ref().map(|_| by_request.values().filter_map(|c| c.bytes).sum()),
        };
        let per = |n: u64| if decisions == 0 { 0.0 } else { n as f64 / decisions as f64 };
        Ok(ApiserverCost {
            decisions,
            requests_per_decision: per(total.requests),
            bytes_per_decision: total.bytes.map(per),
            total,
            by_request,
            terminated_watchers: (self.terminated_watchers - before.terminated_watchers).max(0.0).round() as u64,
        })
    }
}

/// The apiserver's counters now.
pub async fn scrape(admin: &Client) -> Result<Scrape> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = admin.request_text(request).await.context("reading the apiserver's /metrics")?;
    Ok(Scrape::parse(&text))
}

/// The approver's cost since `before`, read once its watches have ended (call it after the
/// approver stopped); `None` when the apiserver restarted in between.
pub async fn cost_since(admin: &Client, before: &Scrape, decisions: usize) -> Result<Option<ApiserverCost>> {
    tokio::time::sleep(WATCHES_END).await;
    Ok(scrape(admin).await?.since(before, decisions).ok())
}

/// Whether requests of `key` are the bench's: CSR creates.
fn bench_own(key: &str) -> bool {
    key == "POST certificatesigningrequests"
}

/// `after - before`, key by key; a key new in `after` counts from 0.
fn difference(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> Result<BTreeMap<String, u64>, Reset> {
    if let Some((key, _)) = before.iter().find(|(key, n)| after.get(*key).is_none_or(|m| m < *n)) {
        return Err(Reset(key.clone()));
    }
    Ok(after
        .iter()
        .map(|(key, n)| (key.clone(), (n - before.get(key).copied().unwrap_or(0.0)).round() as u64))
        .collect())
}

/// `VERB resource[/subresource]` of a sample's labels; `None` for a request that names no
/// resource (`/metrics`, `/readyz`, discovery).
fn key(labels: &BTreeMap<String, String>) -> Option<String> {
    let resource = labels.get("resource").filter(|r| !r.is_empty())?;
    let verb = labels.get("verb").map_or("", String::as_str);
    Some(match labels.get("subresource").filter(|s| !s.is_empty()) {
        Some(subresource) => format!("{verb} {resource}/{subresource}"),
        None => format!("{verb} {resource}"),
    })
}

/// The name, labels and value of a sample line `name{label="value",...} value [timestamp]`.
fn sample(line: &str) -> Option<(&str, BTreeMap<String, String>, f64)> {
    if line.starts_with('#') {
        return None;
    }
    let (name, rest) = match line.find('{') {
        Some(at) => (&line[..at], &line[at + 1..]),
        None => {
            let (name, value) = line.split_once(' ')?;
            return Some((name, BTreeMap::new(), value.split_whitespace().next()?.parse().ok()?));
        }
    };
    let (labels, rest) = labels(rest)?;
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some((name, labels, value))
}

/// The labels up to the closing `}` and what follows it.
fn labels(mut rest: &str) -> Option<(BTreeMap<String, String>, &str)> {
    let mut labels = BTreeMap::new();
    loop {
        rest = rest.trim_start_matches(',');
        if let Some(after) = rest.strip_prefix('}') {
            return Some((labels, after));
        }
        let (name, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (at, '"') => break at,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (_, c) => value.push(c),
            }
        };
        labels.insert(name.to_owned(), value);
        rest = &after[end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two scrapes of a real kube-apiserver v1.37.2 (the families read here, a few buckets and
    /// other metrics), with a CSR list, two Node GETs, a Node patch and an Event create between
    /// them.
    const BEFORE: &str = include_str!("../fixtures/apiserver-metrics-before.txt");
    const AFTER: &str = include_str!("../fixtures/apiserver-metrics-after.txt");

    #[test]
    fn a_real_scrape_gives_requests_and_read_bytes_by_verb_and_resource() {
        let (before, after) = (Scrape::parse(BEFORE), Scrape::parse(AFTER));
        assert_eq!(after.requests.get("LIST certificatesigningrequests"), Some(&2.0));
        assert_eq!(after.requests.get("POST clusterroles"), Some(&73.0));
        assert_eq!(after.requests.get("POST configmaps"), Some(&2.0), "codes 201 and 404 add up");
        assert!(!after.requests.keys().any(|k| k.starts_with("GET ") && k.len() == 4), "no resource, no key");
        assert_eq!(after.bytes.as_ref().and_then(|b| b.get("GET nodes")), Some(&1750.0));

        let cost = after.since(&before, 4).unwrap();
        let count = |key: &str| cost.by_request.get(key).cloned();
        assert_eq!(count("LIST certificatesigningrequests"), Some(Count { requests: 1, bytes: Some(152) }));
        // A counter missing from the first scrape counts from 0.
        assert_eq!(count("GET nodes"), Some(Count { requests: 2, bytes: Some(1750) }));
        assert_eq!(count("POST events"), Some(Count { requests: 1, bytes: Some(0) }), "writes are not sized");
        assert_eq!(count("PATCH nodes"), Some(Count { requests: 1, bytes: Some(0) }));
        assert_eq!(count("POST clusterroles"), None, "unchanged");
        assert_eq!(cost.total, Count { requests: 5, bytes: Some(1902) });
        assert_eq!((cost.requests_per_decision, cost.bytes_per_decision), (1.25, Some(475.5)));
        assert_eq!(cost.terminated_watchers, 0, "absent from both scrapes");
        let closed =
            Scrape::parse(&format!("{AFTER}apiserver_terminated_watchers_total{{group=\"\",resource=\"nodes\"}} 2\n"));
        assert_eq!(closed.since(&before, 4).map(|c| c.terminated_watchers), Ok(2));
    }

    #[test]
    fn the_benchs_own_csr_creates_and_requests_without_a_resource_are_left_out() {
        let line = |verb: &str, resource: &str, n: u32| {
            format!(
                "apiserver_request_total{{code=\"201\",group=\"\",resource=\"{resource}\",subresource=\"\",verb=\"{verb}\"}} {n}\n"
            )
        };
        let before = Scrape::parse(&(line("POST", "certificatesigningrequests", 5) + &line("GET", "", 1)));
        let after = Scrape::parse(
            &[line("POST", "certificatesigningrequests", 9), line("GET", "", 7), line("PUT", "leases", 1)].concat(),
        );
        let cost = after.since(&before, 1).unwrap();
        assert_eq!(cost.by_request.keys().collect::<Vec<_>>(), ["PUT leases"]);
        assert_eq!(cost.total, Count { requests: 1, bytes: None }, "no response sizes in the scrape: bytes unknown");
        assert_eq!(cost.bytes_per_decision, None);
    }

    #[test]
    fn a_counter_gone_or_lower_is_an_apiserver_restart() {
        let (before, after) = (Scrape::parse(BEFORE), Scrape::parse(AFTER));
        assert_eq!(before.since(&after, 1), Err(Reset("GET nodes".to_owned())), "missing from the later scrape");
        let restarted =
            Scrape::parse(&AFTER.replace("verb=\"LIST\",version=\"v1\"} 2", "verb=\"LIST\",version=\"v1\"} 0"));
        assert!(restarted.since(&before, 1).is_err(), "lower in the later scrape");
        assert_eq!(Scrape::parse("").since(&Scrape::default(), 0).map(|c| c.total), Ok(Count::default()));
    }

    #[test]
    fn label_values_may_hold_escapes_commas_and_braces() {
        let (name, labels, value) =
            sample(r#"m{a="x,\"y\"}",resource="nodes",verb="GET"} 3.5e+02 1700000000"#).unwrap();
        assert_eq!((name, value), ("m", 350.0));
        assert_eq!(labels.get("a").map(String::as_str), Some("x,\"y\"}"));
        assert_eq!(key(&labels).as_deref(), Some("GET nodes"));
        assert_eq!(sample("# TYPE m counter"), None);
        assert_eq!(sample("m{a=\"unterminated} 1"), None);
        assert_eq!(sample("process_open_fds 12").map(|(n, _, v)| (n, v)), Some(("process_open_fds", 12.0)));
    }
}
