//! Memory under hostile content: CSRs at the apiserver's object size limit, all pending when the
//! controller starts. Each is a real request followed by junk that Go's PEM reader skips (the
//! apiserver accepts it), which the canonical gate refuses as too large.

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::approver::{Approver, Program};
use crate::cluster::{Decisions, create_all};
use crate::report::{Hostile, mib};
use crate::setup::{Bench, control_plane, launch};

/// Hostile CSRs created.
pub const HOSTILE_CSRS: usize = 100;

/// Bytes of each hostile `spec.request`: under etcd's 1.5 MiB request limit with the rest of the
/// object, the largest CSR the apiserver stores.
pub const HOSTILE_REQUEST_BYTES: usize = 1400 * 1024;

/// Measures ours: idle on an empty cluster, then started again with the hostile CSRs pending.
pub(crate) async fn hostile(bench: &Bench, program: &Program) -> Result<Hostile> {
    let phase = "hostile";
    let (control_plane, admin) = control_plane(bench, phase).await?;
    let launch = launch(bench, program, phase, false, control_plane.kubeconfig_path());
    let mut approver = Approver::start(&launch)?;
    approver.wait_ready(Duration::from_secs(120)).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = approver.rss_now_kib();
    approver.stop().await?;

    let junk = "A".repeat(63) + "\n";
    let requests: Vec<_> = bench
        .requests
        .iter()
        .take(HOSTILE_CSRS)
        .cloned()
        .map(|mut request| {
            let mut pem = std::mem::take(&mut request.pem);
            while pem.len() + junk.len() <= HOSTILE_REQUEST_BYTES {
                pem.push_str(&junk);
            }
            request.pem = pem;
            request
        })
        .collect();
    let n = create_all(&admin, phase, &requests, 8).await?.len();
    let mut decisions = Decisions::watch(&admin);
    decisions.wait_synced(Duration::from_secs(60)).await?;
    let approver = Approver::start(&launch)?;
    decisions.wait_count(n, Duration::from_secs(120)).await?;
    let last = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let peak = approver.peak_kib(approver.started(), last);
    let after = approver.rss_now_kib();
    approver.stop().await?;
    let denied = decisions.snapshot().values().filter(|seen| !seen.approved).count();
    bench.progress.say(format_args!(
        "{phase}: {n} CSRs of {HOSTILE_REQUEST_BYTES} bytes: RSS {:.1} MiB idle, {:.1} MiB peak",
        mib(idle),
        mib(peak)
    ));
    Ok(Hostile {
        csrs: n,
        request_bytes: requests.first().map(|r| r.pem.len()).unwrap_or(0),
        denied,
        idle_mib: mib(idle),
        peak_mib: mib(peak),
        after_mib: mib(after),
        growth_mib: mib(peak.saturating_sub(idle)),
    })
}
