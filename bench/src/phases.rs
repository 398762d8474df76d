//! The phases of a run, each on a fresh control plane so none sees another's objects.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Client, Resource, ResourceExt};
use node_csr_approver::kubernetes::csr_object::CsrObject;
use node_csr_approver::kubernetes::write::{WRITE_TIMEOUT, write_condition};
use node_csr_approver::policy::{Decision, DecisionKind, Reason};

use crate::apiserver::{cost_since, scrape};
use crate::approver::{Approver, Program};
use crate::cluster::{Decisions, EventCount, create_all, create_as_node, csr_name};
use crate::flood::flood;
use crate::hostile::hostile;
use crate::report::{
    Catchup, CpuRatio, Latency, Limit, Live, Machine, Memory, Mode, PeerReport, Report, Targets, cpu_ms_per_decision,
    mib,
};
use crate::setup::{Bench, control_plane, launch};
use crate::storm::storm;

/// The live phase's default rate is the measured approval rate divided by this: each live CSR
/// costs the apiserver a create, an approval and an event.
const LIVE_SHARE: f64 = 4.0;

/// How long memory settles after the last decision before "after" is read.
const SETTLE: Duration = Duration::from_secs(3);

/// Runs the burst phases (unless `--only-storm`), then the storm when asked for.
pub(crate) async fn all(bench: &Bench) -> Result<Report> {
    let mut report = if bench.options.only_storm {
        Report {
            n: bench.options.n,
            concurrency: bench.options.concurrency,
            machine: Machine::current(),
            ..Report::default()
        }
    } else {
        bursts(bench).await?
    };
    if let Some(requests) = &bench.storm {
        report.storm = Some(storm(bench, requests, bench.options.storm_relist).await?);
    }
    report.targets = Targets::of(&report);
    Ok(report)
}

/// Runs limit, then catch-up and live with and without DNS checks: ours, then the peer's; the
/// hostile and flood phases.
async fn bursts(bench: &Bench) -> Result<Report> {
    let limit = limit(bench).await?;
    let rate = bench.options.live_rate.unwrap_or(limit.writes_per_second / LIVE_SHARE).max(1.0);
    let [dns, bypass_dns] = modes(bench, &bench.ours, &limit, rate).await?;
    let hostile = hostile(bench, &bench.ours).await?;
    let flood = flood(bench, &bench.ours).await?;
    let mut events_all = catchup(bench, &bench.ours, false, true).await?;
    events_all.ratio = if limit.seconds > 0.0 { events_all.seconds / limit.seconds } else { 0.0 };
    let peer = match &bench.peer {
        Some((program, version)) => {
            let [peer_dns, peer_bypass] = modes(bench, program, &limit, rate).await?;
            Some(PeerReport {
                version: version.clone(),
                speedup_dns: speedup(&peer_dns, &dns),
                speedup_bypass_dns: speedup(&peer_bypass, &bypass_dns),
                cpu_ratio: CpuRatio::of((&dns, &bypass_dns), (&peer_dns, &peer_bypass)),
                dns: peer_dns,
                bypass_dns: peer_bypass,
            })
        }
        None => None,
    };
    Ok(Report {
        n: bench.options.n,
        concurrency: bench.options.concurrency,
        machine: Machine::current(),
        binary_bytes: 0,
        limit,
        dns,
        bypass_dns,
        events_all,
        hostile,
        flood,
        peer,
        ..Report::default()
    })
}

/// Catch-up and live of `program`, with DNS checks and with them bypassed.
async fn modes(bench: &Bench, program: &Program, limit: &Limit, rate: f64) -> Result<[Mode; 2]> {
    let mut modes = [Mode::default(), Mode::default()];
    for (mode, bypass_dns) in modes.iter_mut().zip([false, true]) {
        let mut catchup = catchup(bench, program, bypass_dns, false).await?;
        catchup.ratio = if limit.seconds > 0.0 { catchup.seconds / limit.seconds } else { 0.0 };
        let live = if bench.options.live { live(bench, program, bypass_dns, rate).await? } else { Live::default() };
        *mode = Mode { catchup, live };
    }
    Ok(modes)
}

/// How many times longer the peer's catch-up took than ours.
fn speedup(peer: &Mode, ours: &Mode) -> f64 {
    if ours.catchup.seconds > 0.0 { peer.catchup.seconds / ours.catchup.seconds } else { 0.0 }
}

async fn setup_csrs(bench: &Bench, admin: &Client, prefix: &str) -> Result<Vec<CertificateSigningRequest>> {
    let started = Instant::now();
    let created = create_all(admin, prefix, &bench.requests, bench.options.create_concurrency).await?;
    let secs = started.elapsed().as_secs_f64();
    bench.progress.say(format_args!(
        "{prefix}: created {} CSRs as their nodes in {secs:.1}s ({:.0}/s)",
        created.len(),
        created.len() as f64 / secs.max(1e-9)
    ));
    Ok(created)
}

/// The bare client: N approval writes, then N approval writes each followed by an Event.
async fn limit(bench: &Bench) -> Result<Limit> {
    let (_control_plane, admin) = control_plane(bench, "limit").await?;
    let api: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let concurrency = usize::from(bench.options.concurrency.max(1));

    let created = setup_csrs(bench, &admin, "limit").await?;
    let started = Instant::now();
    futures::stream::iter(created.iter())
        .map(|csr| approve(&api, csr))
        .buffer_unordered(concurrency)
        .try_collect::<()>()
        .await?;
    let seconds = started.elapsed().as_secs_f64();
    bench.progress.say(format_args!("limit: T_limit = {seconds:.2}s"));

    let created = setup_csrs(bench, &admin, "limit-events").await?;
    let recorder = Recorder::new(admin.clone(), Reporter { controller: "bench".into(), instance: None });
    let started = Instant::now();
    futures::stream::iter(created.iter())
        .map(|csr| async {
            approve(&api, csr).await?;
            recorder.publish(&approval_event(), &csr.object_ref(&())).await.context("publishing an event")
        })
        .buffer_unordered(concurrency)
        .try_collect::<()>()
        .await?;
    let with_events_seconds = started.elapsed().as_secs_f64();
    bench.progress.say(format_args!("limit: with events {with_events_seconds:.2}s"));
    Ok(Limit { seconds, writes_per_second: created.len() as f64 / seconds.max(1e-9), with_events_seconds })
}

/// One approval write exactly as the controller makes it ([`write_condition`]): the cached
/// conditions plus the decision's, patched through the `approval` subresource, preconditioned on
/// the resourceVersion, the metadata only in the reply.
pub(crate) async fn approve(api: &Api<CertificateSigningRequest>, csr: &CertificateSigningRequest) -> Result<()> {
    let username = csr.spec.username.clone().unwrap_or_default();
    let decision = Decision {
        kind: DecisionKind::Approve,
        reason: Reason::AutoApproved,
        message: format!(
            "kubelet serving certificate for {username} verified: signer, pending, username, groups, request, \
             subject, usages, san-types, san-present, dns-name-count, dns-name-syntax, hostname, provider-regex, \
             ip-prefixes, dns-resolves, resolved-ip-prefixes, ip-resolved, expiration"
        ),
    };
    let cached = CsrObject::from(csr.clone());
    write_condition(&api.clone().into_client(), &cached, &decision, WRITE_TIMEOUT)
        .await
        .with_context(|| format!("approving {}", csr.name_any()))
}

fn approval_event() -> Event {
    Event {
        type_: EventType::Normal,
        reason: "AutoApproved".into(),
        note: Some("kubelet serving certificate verified".into()),
        action: "Approve".into(),
        secondary: None,
    }
}

/// How long a phase may take to decide `n` CSRs before the run is declared failed.
pub(crate) fn decide_limit(n: usize) -> Duration {
    Duration::from_secs(60) + Duration::from_millis(50).saturating_mul(n as u32)
}

/// The name of a phase of `program`: its CSRs' names and its log file start with it.
fn phase_name(program: &Program, phase: &str, bypass_dns: bool) -> String {
    let mode = if bypass_dns { "bypass-dns" } else { "dns" };
    match program {
        Program::Ours(_) => format!("{phase}-{mode}"),
        Program::Peer(_) => format!("peer-{phase}-{mode}"),
    }
}

/// N CSRs waiting, then the controller started: spawn to last decision. With `events_all`, ours
/// runs with `--events=all` and the phase also waits for its N approval events.
async fn catchup(bench: &Bench, program: &Program, bypass_dns: bool, events_all: bool) -> Result<Catchup> {
    let mut phase = phase_name(program, "catchup", bypass_dns);
    if events_all {
        phase.push_str("-events-all");
    }
    let (control_plane, admin) = control_plane(bench, &phase).await?;
    let n = setup_csrs(bench, &admin, &phase).await?.len();
    let mut decisions = Decisions::watch(&admin);
    decisions.wait_synced(Duration::from_secs(60)).await?;
    // By default neither writes an Event for an approval.
    let mut events = events_all.then(|| EventCount::watch(&admin));

    let mut launch = launch(bench, program, &phase, bypass_dns, control_plane.kubeconfig_path());
    launch.events_all = events_all;
    let before = scrape(&admin).await?;
    let mut approver = Approver::start(&launch)?;
    let ready = approver.wait_ready(Duration::from_secs(120)).await?;
    decisions.wait_count(n, decide_limit(n)).await?;
    let seen = decisions.snapshot();
    let last = seen.values().map(|s| s.at).max().unwrap_or_else(Instant::now);
    let seconds = last.duration_since(approver.started()).as_secs_f64();
    let events_seconds = match events.as_mut() {
        Some(events) => events.wait_count(n, decide_limit(n)).await?.duration_since(approver.started()).as_secs_f64(),
        None => 0.0,
    };
    tokio::time::sleep(SETTLE).await;
    approver.check_alive()?;
    let memory = Memory {
        idle_mib: 0.0,
        peak_mib: mib(approver.peak_kib(approver.started(), last)),
        after_mib: mib(approver.rss_now_kib()),
    };
    let cpu_seconds = approver.cpu_seconds().unwrap_or(0.0);
    approver.stop().await?;
    let apiserver = cost_since(&admin, &before, seen.len()).await?;
    let approved = seen.values().filter(|s| s.approved).count();
    let denied = seen.len() - approved;
    bench.progress.say(format_args!("{phase}: T_catchup = {seconds:.2}s (ready after {:.2}s)", ready.as_secs_f64()));
    Ok(Catchup {
        ready_seconds: ready.as_secs_f64(),
        seconds,
        events_seconds,
        ratio: 0.0,
        approved,
        denied,
        memory,
        cpu_seconds,
        cpu_ms_per_decision: cpu_ms_per_decision(cpu_seconds, approved + denied),
        apiserver,
    })
}

/// The controller ready, then N CSRs created at `rate` per second.
async fn live(bench: &Bench, program: &Program, bypass_dns: bool, rate: f64) -> Result<Live> {
    let phase = phase_name(program, "live", bypass_dns);
    let (control_plane, admin) = control_plane(bench, &phase).await?;
    let mut decisions = Decisions::watch(&admin);
    decisions.wait_synced(Duration::from_secs(60)).await?;
    let launch = launch(bench, program, &phase, bypass_dns, control_plane.kubeconfig_path());
    let before = scrape(&admin).await?;
    let mut approver = Approver::start(&launch)?;
    let ready = approver.wait_ready(Duration::from_secs(120)).await?;
    // The peer's /healthz answers before its cache has synced; an empty cluster syncs in well under this.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = approver.rss_now_kib();
    let cpu_before = approver.cpu_seconds().unwrap_or(0.0);

    let n = bench.requests.len();
    let interval = Duration::from_secs_f64(1.0 / rate);
    let started = Instant::now();
    let phase_ref = phase.as_str();
    let created: Vec<(usize, Instant)> = futures::stream::iter(bench.requests.iter().enumerate())
        .map(|(i, request)| {
            let admin = &admin;
            async move {
                tokio::time::sleep_until((started + interval.saturating_mul(i as u32)).into()).await;
                create_as_node(admin, &csr_name(phase_ref, i), request).await?;
                Ok::<_, anyhow::Error>((i, Instant::now()))
            }
        })
        .buffer_unordered(bench.options.create_concurrency.max(1) * 4)
        .try_collect()
        .await?;
    let creating = started.elapsed();
    decisions.wait_count(n, decide_limit(n)).await?;
    let seen = decisions.snapshot();
    let last = seen.values().map(|s| s.at).max().unwrap_or_else(Instant::now);
    let latencies = created
        .iter()
        .filter_map(|(i, at)| seen.get(&csr_name(&phase, *i)).map(|s| s.at.saturating_duration_since(*at)))
        .collect::<Vec<_>>();
    tokio::time::sleep(SETTLE).await;
    approver.check_alive()?;
    let memory = Memory {
        idle_mib: mib(idle),
        peak_mib: mib(approver.peak_kib(started, last)),
        after_mib: mib(approver.rss_now_kib()),
    };
    let cpu_seconds = approver.cpu_seconds().unwrap_or(0.0) - cpu_before;
    approver.stop().await?;
    let apiserver = cost_since(&admin, &before, seen.len()).await?;
    let approved = seen.values().filter(|s| s.approved).count();
    let denied = seen.len() - approved;
    let latency_ms = Latency::of(latencies);
    bench.progress.say(format_args!(
        "{phase}: {n} CSRs at {:.0}/s, p50 {:.1} ms, p99 {:.1} ms",
        n as f64 / creating.as_secs_f64().max(1e-9),
        latency_ms.p50,
        latency_ms.p99
    ));
    Ok(Live {
        ready_seconds: ready.as_secs_f64(),
        target_rate: rate,
        achieved_rate: n as f64 / creating.as_secs_f64().max(1e-9),
        seconds: last.duration_since(started).as_secs_f64(),
        latency_ms,
        approved,
        denied,
        memory,
        cpu_seconds,
        cpu_ms_per_decision: cpu_ms_per_decision(cpu_seconds, approved + denied),
        apiserver,
    })
}
