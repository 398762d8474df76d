//! Long differential runs: libFuzzer's input either is `spec.request` itself (raw PEM bytes) or, when
//! its first byte is odd, seeds a structure mutation of a valid kubelet request. Every input is
//! read by the approver and by Go's own reader (`csr-oracle`); any disagreement aborts the run.

#![no_main]

use std::sync::{Mutex, OnceLock};

use differential::{Input, Judge, Rng, Seeds, mutate};
use libfuzzer_sys::fuzz_target;

static STATE: OnceLock<Mutex<(Seeds, Judge)>> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let state = STATE.get_or_init(|| {
        let seeds = Seeds::new().unwrap_or_else(|e| panic!("making the seed requests: {e}"));
        let judge = Judge::start().unwrap_or_else(|e| panic!("starting the Go oracle: {e}"));
        Mutex::new((seeds, judge))
    });
    let mut guard = state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let (seeds, judge) = &mut *guard;
    let input = match data.split_first() {
        Some((first, rest)) if first % 2 == 1 => {
            let seed = rest.iter().take(8).fold(0u64, |n, b| (n << 8) | u64::from(*b));
            let mut rng = Rng::new(seed);
            mutate(rng.pick(&seeds.0), &mut rng)
        }
        _ => Input { request: data.to_vec(), mutations: vec!["raw bytes"] },
    };
    let verdict = judge.judge(&input).unwrap_or_else(|e| panic!("asking the Go oracle: {e}"));
    if let Some(disagreement) = verdict.disagreement {
        panic!("{:?}: {}", disagreement.input.mutations, disagreement.what);
    }
});
