//! The one API every backend implements.

use crate::dtype::{Element, ReduceOp};
use crate::error::{CollectiveError, Result};

/// A group of ranks that run collectives together. Every rank must make the same calls in the same order
/// with the same lengths; calls block until this rank's part is done.
///
/// Lengths follow NCCL: `all_gather` sends `count` and receives `world_size × count`; `reduce_scatter`
/// sends `world_size × count` and receives `count`.
pub trait Communicator {
    /// This rank, `0..world_size`.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn world_size(&self) -> usize;
    /// `"cpu"` or `"nccl"`.
    fn backend(&self) -> &'static str;

    /// `recv = op over all ranks of send`.
    fn all_reduce<T: Element>(&mut self, send: &[T], recv: &mut [T], op: ReduceOp) -> Result<()>;
    /// In-place all-reduce.
    fn all_reduce_in_place<T: Element>(&mut self, buf: &mut [T], op: ReduceOp) -> Result<()>;
    /// Copies `root`'s `buf` into every rank's `buf`.
    fn broadcast<T: Element>(&mut self, buf: &mut [T], root: usize) -> Result<()>;
    /// Reduces every rank's `send` into `root`'s `recv` (other ranks' `recv` is untouched and may be empty).
    fn reduce<T: Element>(
        &mut self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
        root: usize,
    ) -> Result<()>;
    /// `recv[r × count ..][..count] = send of rank r`.
    fn all_gather<T: Element>(&mut self, send: &[T], recv: &mut [T]) -> Result<()>;
    /// In-place all-gather: this rank's part is already at `buf[rank × count ..]`.
    fn all_gather_in_place<T: Element>(&mut self, buf: &mut [T]) -> Result<()>;
    /// `recv = op over all ranks of send[rank × count ..][..count]`.
    fn reduce_scatter<T: Element>(
        &mut self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<()>;
    /// In-place reduce-scatter: the result lands in `buf[rank × count ..][..count]`.
    fn reduce_scatter_in_place<T: Element>(&mut self, buf: &mut [T], op: ReduceOp) -> Result<()>;
    /// Sends `buf` to `peer` (which calls [`Communicator::recv`] with the same length).
    fn send<T: Element>(&mut self, buf: &[T], peer: usize) -> Result<()>;
    /// Receives `buf.len()` elements from `peer`.
    fn recv<T: Element>(&mut self, buf: &mut [T], peer: usize) -> Result<()>;
    /// Returns once every rank has called `barrier`.
    fn barrier(&mut self) -> Result<()>;
}

/// Checks the NCCL length rules before anything is sent, so a wrong call fails on its own rank only.
pub(crate) mod check {
    use super::*;

    fn invalid(msg: String) -> CollectiveError {
        CollectiveError::InvalidArgument(msg)
    }

    pub(crate) fn same_len(op: &str, send: usize, recv: usize) -> Result<()> {
        if send != recv {
            return Err(invalid(format!(
                "{op}: send has {send} elements but recv has {recv}; they must be equal"
            )));
        }
        Ok(())
    }

    pub(crate) fn rank(op: &str, what: &str, r: usize, n: usize) -> Result<()> {
        if r >= n {
            return Err(invalid(format!(
                "{op}: {what} {r} is not a rank of this {n}-rank communicator"
            )));
        }
        Ok(())
    }

    /// `reduce`: `root` is a rank, and on the root `recv` is as long as `send`.
    pub(crate) fn reduce(send: usize, recv: usize, root: usize, me: usize, n: usize) -> Result<()> {
        rank("reduce", "root", root, n)?;
        if me == root {
            same_len("reduce", send, recv)?;
        }
        Ok(())
    }

    /// `all_gather`: `recv` is `n × send`; returns the per-rank count.
    pub(crate) fn all_gather(send: usize, recv: usize, n: usize) -> Result<usize> {
        times_world("all_gather", "send", send, "recv", recv, n)
    }

    /// `reduce_scatter`: `send` is `n × recv`; returns the per-rank count.
    pub(crate) fn reduce_scatter(send: usize, recv: usize, n: usize) -> Result<usize> {
        times_world("reduce_scatter", "recv", recv, "send", send, n)
    }

    /// `send`/`recv`: `peer` is another rank of the communicator.
    pub(crate) fn peer(op: &str, peer: usize, me: usize, n: usize) -> Result<()> {
        rank(op, "peer", peer, n)?;
        if peer == me {
            let what = if op == "send" {
                "send to"
            } else {
                "receive from"
            };
            return Err(invalid(format!("{op}: rank {peer} cannot {what} itself")));
        }
        Ok(())
    }

    /// `big` must be `n × small`; returns `small`.
    fn times_world(
        op: &str,
        small_name: &str,
        small: usize,
        big_name: &str,
        big: usize,
        n: usize,
    ) -> Result<usize> {
        if big != small * n {
            return Err(invalid(format!(
                "{op}: {big_name} has {big} elements but must be world_size ({n}) × {small_name} ({small})"
            )));
        }
        Ok(small)
    }

    /// An in-place buffer for all-gather / reduce-scatter must split evenly into `n` parts; returns a part.
    pub(crate) fn divisible(op: &str, len: usize, n: usize) -> Result<usize> {
        if !len.is_multiple_of(n) {
            return Err(invalid(format!(
                "{op}: in-place buffer of {len} elements does not split into world_size ({n}) equal parts"
            )));
        }
        Ok(len / n)
    }
}
