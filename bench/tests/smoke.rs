//! The benchmark at N = 50, a storm of 50 nodes with 60 Node objects included, with the debug
//! binary: every phase runs end to end, so the benchmark cannot rot. No timing is asserted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn benchmark_runs_at_n_50() {
    // The Go peer runs too where it is built and the test runs as root.
    let peer = bench::peer::default_binary().filter(|binary| match bench::peer::unavailable(binary) {
        None => true,
        Some(why) => {
            eprintln!("not running the peer: {why}");
            false
        }
    });
    let options = bench::Options {
        n: 50,
        flood_csrs: 50,
        release: false,
        live_rate: Some(100.0),
        verbose: true,
        peer: peer.clone(),
        storm: Some(50),
        storm_nodes: Some(60),
        ..bench::Options::default()
    };
    let report = bench::run(&options).await.unwrap();
    eprintln!("{}", report.table());
    assert_eq!(report.n, 50);
    assert!(report.limit.seconds > 0.0);
    for mode in [&report.dns, &report.bypass_dns] {
        assert_eq!(mode.catchup.approved, 50, "{}", report.table());
        assert_eq!(mode.live.approved, 50, "{}", report.table());
        assert!(mode.catchup.memory.peak_mib > 0.0);
        // Start-up alone costs more than the clock tick CPU time is counted in.
        assert!(mode.catchup.cpu_ms_per_decision > 0.0, "{}", report.table());
        // Ours lists and watches the CSRs and writes 50 approvals at least.
        for cost in [&mode.catchup.apiserver, &mode.live.apiserver] {
            let cost = cost.as_ref().expect("the apiserver's counters");
            assert!(
                cost.total.requests >= 50 && cost.by_request.contains_key("PATCH certificatesigningrequests/approval")
            );
            assert!(!cost.by_request.contains_key("POST certificatesigningrequests"), "the bench's creates");
            assert!(cost.bytes_per_decision.unwrap_or(0.0) > 0.0, "{}", report.table());
        }
    }
    assert_eq!(report.events_all.approved, 50, "{}", report.table());
    assert_eq!((report.hostile.csrs, report.hostile.denied), (50, 50), "{}", report.table());
    assert!(report.hostile.request_bytes > 1024 * 1024);
    assert_eq!((report.flood.flood_csrs, report.flood.other_csrs), (50, 49), "{}", report.table());
    assert!(report.flood.others_latency_ms.max > 0.0, "{}", report.table());
    assert!(report.events_all.events_seconds > 0.0);
    assert_eq!(report.peer.is_some(), peer.is_some());
    if let Some(peer) = &report.peer {
        for mode in [&peer.dns, &peer.bypass_dns] {
            assert_eq!(mode.catchup.approved, 50, "{}", report.table());
            assert_eq!(mode.live.approved, 50, "{}", report.table());
        }
        assert!(peer.speedup_dns > 0.0);
    }
    let storm = report.storm.as_ref().unwrap();
    // Nodes 0, 10, 20, 30 and 40 have three CSRs each.
    assert_eq!((storm.nodes, storm.duplicated_nodes, storm.csrs), (50, 5, 60), "{}", report.table());
    assert_eq!((storm.approved + storm.denied, storm.pending), (60, 0), "{}", report.table());
    assert_eq!((storm.approved, storm.denied_superseded), (50, 10), "one per node: {}", report.table());
    assert_eq!((storm.approvals_per_node_max, storm.nodes_not_approved), (1, 0), "{}", report.table());
    assert!(storm.outage_seconds > 0.0 && storm.relist_peak_mib > 0.0, "{}", report.table());
    assert_eq!(storm.node_objects.map(|n| n.nodes), Some(60));
    assert!(storm.apiserver.is_none(), "the apiserver restarted: its counters cannot be told apart");
    assert_eq!(report.targets.storm.as_ref().unwrap().decided, 60);
    assert!(report.table().contains("T_catchup"));
    assert!(report.table().contains("CPU ms per decision"));
    serde_json::to_string(&report).unwrap();
}
