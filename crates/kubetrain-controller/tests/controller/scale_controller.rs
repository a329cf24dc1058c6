//! The whole controller (`kubetrain_controller::run`: watches, scheduler, reconciles) against the in-memory API
//! server with 10,000 TrainJobs: every one must end up with its runtime snapshot and its JobSet, owned by it.
//!
//! `scale_report` (ignored) prints throughput and peak memory for docs/benchmarks.md:
//! `cargo test --release -p kubetrain-controller --test controller scale_controller -- --ignored --nocapture`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kubetrain_controller::{ControllerMetrics, Leadership, Settings};
use kubetrain_test_support::fixtures::trainjob;
use kubetrain_test_support::{FakeApiServer, builtin_runtime};
use prometheus_client::registry::Registry;
use serde_json::json;

const JOBSETS: (&str, &str) = ("jobset.x-k8s.io/v1alpha2", "jobsets");
const CONFIGMAPS: (&str, &str) = ("v1", "configmaps");

fn server_with(jobs: usize, namespaces: usize) -> FakeApiServer {
    let server = FakeApiServer::start();
    server.insert(builtin_runtime("torch-distributed"));
    for i in 0..jobs {
        let job = trainjob(&format!("job-{i}"))
            .namespace(&format!("team-{}", i % namespaces))
            .uid(&format!("trainjob-uid-{i}"))
            .num_nodes(1 + (i % 4) as i64);
        server.insert(job.json());
    }
    server
}

/// Peak resident set of this process (Linux `VmHWM`), in KiB.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

struct Outcome {
    elapsed: Duration,
    metrics: Arc<ControllerMetrics>,
    registry: Registry,
}

/// Runs the controller until every TrainJob has a JobSet, then shuts it down gracefully.
async fn reconcile_all(server: &FakeApiServer, jobs: usize, settings: Settings) -> Outcome {
    let mut registry = Registry::default();
    let metrics = ControllerMetrics::register(&mut registry);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let start = Instant::now();
    let controller = tokio::spawn(kubetrain_controller::run(
        server.client(),
        settings,
        Leadership::always(),
        metrics.clone(),
        async move {
            let _ = stopped.await;
        },
    ));
    let deadline = Instant::now() + Duration::from_secs(900);
    while server.count(JOBSETS.0, JOBSETS.1) < jobs {
        assert!(
            Instant::now() < deadline,
            "only {} of {jobs} JobSets after 15 minutes",
            server.count(JOBSETS.0, JOBSETS.1)
        );
        assert!(!controller.is_finished(), "the controller stopped early");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = start.elapsed();
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(30), controller)
        .await
        .expect("graceful shutdown")
        .expect("controller task")
        .expect("controller result");
    Outcome {
        elapsed,
        metrics,
        registry,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_trainjobs_are_all_applied() {
    const JOBS: usize = 10_000;
    let server = server_with(JOBS, 10);
    let outcome = reconcile_all(&server, JOBS, Settings::default()).await;

    assert_eq!(server.count(JOBSETS.0, JOBSETS.1), JOBS);
    // One runtime snapshot per TrainJob.
    assert_eq!(server.count(CONFIGMAPS.0, CONFIGMAPS.1), JOBS);
    for i in (0..JOBS).step_by(997) {
        let ns = format!("team-{}", i % 10);
        let jobset = server
            .get(JOBSETS.0, JOBSETS.1, &ns, &format!("job-{i}"))
            .expect("JobSet");
        let owner = &jobset["metadata"]["ownerReferences"][0];
        assert_eq!(owner["uid"], format!("trainjob-uid-{i}"));
        assert_eq!(owner["controller"], true);
        let parallelism = &jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"];
        assert_eq!(parallelism, &json!(1 + (i % 4)));
        let snapshot = server
            .get(
                CONFIGMAPS.0,
                CONFIGMAPS.1,
                &ns,
                &format!("job-{i}-runtime-snapshot"),
            )
            .expect("snapshot");
        assert!(
            snapshot["data"]["runtime"]
                .as_str()
                .unwrap()
                .contains("torch-distributed")
        );
    }
    let stats = server.stats();
    assert_eq!(
        stats.applies,
        2 * JOBS as u64,
        "snapshot + JobSet, once each"
    );
    assert_eq!(stats.events, 0, "no failures to report");
    assert!(outcome.metrics.reconciles() >= JOBS as u64);
    assert_eq!(outcome.metrics.errors("conflict"), 0);

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &outcome.registry).unwrap();
    assert!(
        text.contains(&format!("kubetrain_trainjobs{{state=\"Created\"}} {JOBS}")),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "prints figures; run with --release --ignored --nocapture"]
async fn scale_report() {
    for (jobs, concurrency) in [(10_000, 5u16), (10_000, 32)] {
        let server = server_with(jobs, 10);
        let settings = Settings {
            concurrency,
            ..Settings::default()
        };
        let outcome = reconcile_all(&server, jobs, settings).await;
        let stats = server.stats();
        println!(
            "{jobs} TrainJobs, concurrency {concurrency}: {:.2} s, {:.0} reconciles/s, {} API requests \
             ({} gets, {} applies, {} lists), fake server holds {:.1} MiB of JSON, peak RSS so far {} MiB",
            outcome.elapsed.as_secs_f64(),
            jobs as f64 / outcome.elapsed.as_secs_f64(),
            stats.gets + stats.applies + stats.lists + stats.watches + stats.discovery,
            stats.gets,
            stats.applies,
            stats.lists,
            server.stored_bytes() as f64 / 1048576.0,
            peak_rss_kib().map_or("?".to_owned(), |k| (k / 1024).to_string()),
        );
    }
}
