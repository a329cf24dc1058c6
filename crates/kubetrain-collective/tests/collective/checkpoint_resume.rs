//! The demo trainer's checkpoints across restarts: a run that stops after a checkpoint and a rerun that
//! resumes from it end with exactly the weights of an uninterrupted run; a damaged newest checkpoint is
//! skipped with a warning, never loaded.

use std::sync::Mutex;

use crate::common::{run_ranks, test_options};
use kubetrain_collective::checkpoint::{self, CheckpointStore, DirStore, object_name};
use kubetrain_collective::cpu::Transport;
use kubetrain_collective::demo::{CheckpointOptions, DemoConfig, DemoEvent, DemoOptions, train};

fn config(steps: usize) -> DemoConfig {
    DemoConfig {
        samples: 1200,
        steps,
        momentum: 0.5,
        ..DemoConfig::default()
    }
}

/// Runs 2 ranks with checkpoints in `store`; returns each rank's report and rank 0's event log.
fn run(
    store: &DirStore,
    steps: usize,
    every: u64,
) -> (Vec<kubetrain_collective::demo::DemoReport>, Vec<String>) {
    let log = Mutex::new(Vec::new());
    let reports = run_ranks(2, test_options(Transport::Auto), |c| {
        let options = DemoOptions {
            checkpoint: Some(CheckpointOptions {
                store,
                every,
                keep: 0,
            }),
            ..DemoOptions::default()
        };
        let rank = kubetrain_collective::Communicator::rank(c);
        train(c, &config(steps), &options, |e| {
            if rank == 0 {
                let line = match e {
                    DemoEvent::SkippedCheckpoint(w) => format!("skip: {w}"),
                    DemoEvent::Resumed { step, .. } => format!("resumed {step}"),
                    DemoEvent::Step { step, .. } => format!("step {step}"),
                    DemoEvent::Checkpointed { step, .. } => format!("ckpt {step}"),
                };
                log.lock().unwrap().push(line);
            }
        })
        .unwrap()
    });
    (reports, log.into_inner().unwrap())
}

#[test]
fn resume_continues_from_the_checkpoint_step_with_identical_results() {
    let dir = tempfile::tempdir().unwrap();
    let reference = DirStore::new(dir.path().join("reference"));
    let (full, _) = run(&reference, 12, 0);

    let store = DirStore::new(dir.path().join("ckpt"));
    let (first, log) = run(&store, 7, 4);
    assert_eq!(first[0].first_step, 0);
    assert!(
        log.contains(&"ckpt 4".to_string()) && log.contains(&"ckpt 7".to_string()),
        "{log:?}"
    );

    // The newest checkpoint is damaged, as if the node died while copying it: resume from step 4.
    let newest = store.dir().join(object_name(7));
    let bytes = std::fs::read(&newest).unwrap();
    std::fs::write(&newest, &bytes[..bytes.len() - 10]).unwrap();

    let (second, log) = run(&store, 12, 4);
    for report in &second {
        assert_eq!(
            report.first_step, 4,
            "every rank resumes at the checkpoint's step"
        );
        assert_eq!(
            report.resumed_from.as_deref(),
            Some("ckpt-0000000004.ktckpt")
        );
        // Bit-identical to the uninterrupted run: weights and optimizer state came back exactly.
        assert_eq!(report.weights, full[0].weights);
        assert_eq!(report.losses.len(), 8);
        assert_eq!(report.losses[..], full[0].losses[4..]);
    }
    assert!(
        log[0].starts_with("skip: skipping checkpoint ckpt-0000000007.ktckpt")
            && log[0].contains("partially written"),
        "{log:?}"
    );
    assert_eq!(log[1], "resumed 4");
    assert_eq!(
        log[2], "step 4",
        "the first step trained is the checkpoint's, not 0"
    );
}

#[test]
fn a_time_window_stops_every_rank_at_the_same_step_and_checkpoints_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::new(dir.path());
    let reports = run_ranks(2, test_options(Transport::Auto), |c| {
        let options = DemoOptions {
            checkpoint: Some(CheckpointOptions {
                store: &store,
                every: 0,
                keep: 1,
            }),
            time_limit: Some(std::time::Duration::ZERO),
            ..DemoOptions::default()
        };
        train(c, &config(1000), &options, |_| {}).unwrap()
    });
    assert_eq!(reports[0].losses.len(), 1);
    assert_eq!(reports[1].losses.len(), 1);
    let (found, warnings) = checkpoint::load_latest(&store).unwrap();
    assert!(warnings.is_empty());
    assert_eq!(found.unwrap().1.step, 1);
    assert_eq!(store.list().unwrap(), [object_name(1)]);
}
