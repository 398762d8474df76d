//! A seeded, bounded differential campaign: PEM-byte and ASN.1-structure mutations of valid kubelet
//! requests, each read by the approver and by Go's own reader (the apiserver's and the signer's).
//! `DIFFERENTIAL_CASES` and `DIFFERENTIAL_SEED` change its size and seed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::Engine;
use differential::{Judge, Rng, Seeds, Tally, mutate};

const DEFAULT_CASES: u64 = 30_000;
const DEFAULT_SEED: u64 = 0x6e63_7361_7070_7276;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[test]
fn go_reads_every_request_we_accept_exactly_as_we_do() {
    let cases = env_number("DIFFERENTIAL_CASES", DEFAULT_CASES);
    let seed = env_number("DIFFERENTIAL_SEED", DEFAULT_SEED);
    let seeds = Seeds::new().unwrap();
    let mut judge = Judge::start().expect("the Go oracle starts (scripts/build-tools.sh builds it)");
    let mut rng = Rng::new(seed);
    let mut tally = Tally::default();
    let mut found = Vec::new();
    for _ in 0..cases {
        let input = mutate(rng.pick(&seeds.0), &mut rng);
        let verdict = judge.judge(&input).unwrap();
        tally.add(&verdict);
        found.extend(verdict.disagreement);
    }
    println!("differential: seed {seed:#x}: {tally:?}");
    for disagreement in found.iter().take(5) {
        println!(
            "  {:?}: {}\n  request (base64): {}",
            disagreement.input.mutations,
            disagreement.what,
            base64::engine::general_purpose::STANDARD.encode(&disagreement.input.request)
        );
    }
    assert_eq!(tally.disagreements, 0, "the approver and Go read requests differently");
    // The campaign must reach every outcome, or it proves nothing.
    assert!(tally.approved * 50 >= tally.tried, "too few approvals: {tally:?}");
    assert!(tally.only_go_accepted > 0, "no input Go accepts was refused as non-canonical: {tally:?}");
    assert!(tally.go_accepted < tally.tried, "Go refused nothing: {tally:?}");
}
