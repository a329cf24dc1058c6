//! What both transports of a link share: who is at each end and how long to wait for them, how a waiting
//! rank waits, the message tags, and the error for a message that is not the one expected.

use std::time::Duration;

use crate::error::CollectiveError;

/// How a waiting rank waits: busy-wait, then yield the CPU, then sleep on a futex.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WaitPolicy {
    /// Busy-wait this long (a handoff then takes about a microsecond, and costs a core).
    pub spin: Duration,
    /// Then call `sched_yield` in a loop for this long before sleeping.
    pub yield_for: Duration,
}

impl WaitPolicy {
    /// `cores` is the number of CPUs the process may use, counted before a rank is pinned (a pinned rank
    /// sees one). When every local rank has a core, spin like MPI's shared-memory transport, briefly
    /// (200 µs), then sleep on the futex: a peer that has not answered by then is descheduled or busy
    /// with other work, and a rank that keeps spinning only burns the time slice it will need.
    /// When ranks outnumber cores, yield instead of spinning: the peer that must run next is waiting for
    /// a core, and `sched_yield` hands it ours at once, where a futex sleep costs a wake-up (tens of
    /// microseconds per hop of the ring); after 100 µs without news the rank sleeps.
    pub(crate) fn for_local_ranks(local_ranks: usize, cores: usize) -> Self {
        if local_ranks <= cores {
            WaitPolicy {
                spin: Duration::from_micros(200),
                yield_for: Duration::ZERO,
            }
        } else {
            WaitPolicy {
                spin: Duration::ZERO,
                yield_for: Duration::from_micros(100),
            }
        }
    }
}

/// Who is at each end of a link and how long to wait for them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LinkCtx {
    pub rank: usize,
    pub peer: usize,
    pub timeout: Duration,
    pub wait: WaitPolicy,
}

impl LinkCtx {
    pub(crate) fn timeout_error(&self, waited: Duration, during: &str) -> CollectiveError {
        CollectiveError::Timeout {
            rank: self.rank,
            peer: self.peer,
            waited,
            during: during.to_string(),
        }
    }
}

/// Message tags: the collective a message belongs to, checked by the receiver.
pub(crate) mod tag {
    pub const ALL_REDUCE: u32 = 1;
    pub const BROADCAST: u32 = 2;
    pub const REDUCE: u32 = 3;
    pub const ALL_GATHER: u32 = 4;
    pub const REDUCE_SCATTER: u32 = 5;
    pub const P2P: u32 = 6;
    pub const BARRIER: u32 = 7;
}

pub(crate) fn tag_name(tag: u32) -> &'static str {
    match tag {
        tag::ALL_REDUCE => "all_reduce",
        tag::BROADCAST => "broadcast",
        tag::REDUCE => "reduce",
        tag::ALL_GATHER => "all_gather",
        tag::REDUCE_SCATTER => "reduce_scatter",
        tag::P2P => "send/recv",
        tag::BARRIER => "barrier",
        _ => "unknown",
    }
}

/// A message other than the one expected arrived (another collective, or another length).
pub(crate) fn mismatch(
    ctx: &LinkCtx,
    tag: u32,
    len: usize,
    got_tag: u32,
    got_len: usize,
) -> CollectiveError {
    CollectiveError::Protocol {
        rank: ctx.rank,
        peer: ctx.peer,
        detail: format!(
            "expected a {} message of {len} bytes, got a {} message of {got_len} bytes",
            tag_name(tag),
            tag_name(got_tag)
        ),
    }
}
