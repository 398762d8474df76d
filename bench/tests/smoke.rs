//! The benchmark at N = 50 with the debug binary: every phase runs end to end, so the benchmark
//! cannot rot. No timing is asserted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn benchmark_runs_at_n_50() {
    let options =
        bench::Options { n: 50, release: false, live_rate: Some(100.0), verbose: true, ..bench::Options::default() };
    let report = bench::run(&options).await.unwrap();
    assert_eq!(report.n, 50);
    assert!(report.limit.seconds > 0.0);
    for mode in [&report.dns, &report.bypass_dns] {
        assert_eq!(mode.catchup.approved, 50, "{}", report.table());
        assert_eq!(mode.live.approved, 50, "{}", report.table());
        assert!(mode.catchup.memory.peak_mib > 0.0);
    }
    assert!(report.table().contains("T_catchup"));
    serde_json::to_string(&report).unwrap();
}
