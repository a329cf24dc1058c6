//! A peer that stalls or leaves turns into an error on every other rank within the timeout.

use std::time::Duration;

use crate::common::{run_ranks, test_options};
use kubetrain_collective::cpu::Transport;
use kubetrain_collective::{CollectiveError, Communicator, ReduceOp};

const TIMEOUT: Duration = Duration::from_millis(800);

fn stalled_rank_fails_the_others(transport: Transport) {
    let opts = kubetrain_collective::cpu::CpuOptions {
        timeout: TIMEOUT,
        ..test_options(transport)
    };
    // Rank 2 stalls until every other rank has failed (an event, not a sleep): the others can only have
    // failed through their own timeout. Then it tries to join in and must find the communicator dead.
    let others_failed = std::sync::Barrier::new(4);
    let results = run_ranks(4, opts, |c| {
        if c.rank() == 2 {
            others_failed.wait();
            let mut v = vec![1.0f32; 4096];
            return c.all_reduce_in_place(&mut v, ReduceOp::Sum).err();
        }
        let mut v = vec![1.0f32; 4096];
        let err = c.all_reduce_in_place(&mut v, ReduceOp::Sum).err();
        others_failed.wait();
        // Once failed, the communicator refuses further work at once.
        let again = c.barrier().unwrap_err();
        assert!(matches!(again, CollectiveError::Poisoned(_)), "{again}");
        err
    });
    for (rank, err) in results.into_iter().enumerate() {
        let err = err.unwrap_or_else(|| panic!("rank {rank} did not fail"));
        if rank == 2 {
            continue;
        }
        assert!(
            matches!(
                err,
                CollectiveError::Timeout { .. }
                    | CollectiveError::Aborted { .. }
                    | CollectiveError::PeerLost { .. }
            ),
            "rank {rank}: {err}"
        );
    }
}

#[test]
fn stalled_rank_over_shm() {
    stalled_rank_fails_the_others(Transport::Auto);
}

#[test]
fn stalled_rank_over_tcp() {
    stalled_rank_fails_the_others(Transport::Tcp);
}

#[test]
fn a_rank_that_leaves_early_is_lost_not_waited_for_over_tcp() {
    let opts = kubetrain_collective::cpu::CpuOptions {
        timeout: Duration::from_secs(30),
        ..test_options(Transport::Tcp)
    };
    let results = run_ranks(3, opts, |c| {
        if c.rank() == 1 {
            return None; // drops its communicator: connections close
        }
        let mut v = vec![1i64; 1000];
        let err = c.all_reduce_in_place(&mut v, ReduceOp::Sum).unwrap_err();
        Some(err)
    });
    // Lost or aborted, not a timeout: the closed connections were noticed, the 30 s were not waited out.
    for err in results.into_iter().flatten() {
        assert!(
            matches!(
                err,
                CollectiveError::PeerLost { .. } | CollectiveError::Aborted { .. }
            ),
            "{err}"
        );
    }
}

#[test]
fn mismatched_collectives_are_a_protocol_error() {
    let opts = kubetrain_collective::cpu::CpuOptions {
        timeout: Duration::from_secs(5),
        ..test_options(Transport::Auto)
    };
    let results = run_ranks(2, opts, |c| {
        let mut v = vec![1i32; 10];
        if c.rank() == 0 {
            c.all_reduce_in_place(&mut v, ReduceOp::Sum).err()
        } else {
            c.broadcast(&mut v, 1).err()
        }
    });
    let msgs: Vec<String> = results
        .into_iter()
        .flatten()
        .map(|e| e.to_string())
        .collect();
    assert!(
        msgs.iter()
            .any(|m| m.contains("protocol mismatch") && m.contains("broadcast")),
        "{msgs:?}"
    );
}
