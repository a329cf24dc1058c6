//! Ring algorithms over one send link (to rank + 1) and one receive link (from rank − 1).
//!
//! Data moves in slices of at most `slice_bytes`: for every slice index the whole sequence of ring steps
//! runs before the next, so with a queue of several slots the send of one slice overlaps the reduction of
//! the next (NCCL's pipelining). Reductions happen straight out of the received message into the outgoing
//! one (`recv_reduce_send`), so intermediate partial sums are never stored.
//!
//! Chunk `c` of an all-reduce (the first `len % n` chunks one element longer) starts at rank `c + 1` and is
//! final at rank `c`: every element is reduced in the same fixed order on every run, so results are
//! bitwise deterministic, and reduce-scatter uses the same order as all-reduce.

use std::ops::Range;

use super::link::{RecvLink, SendLink};
use crate::dtype::{Element, ReduceOp};
use crate::error::Result;

fn as_bytes<T: Element>(v: &[T]) -> &[u8] {
    bytemuck::cast_slice(v)
}

fn typed<T: Element>(b: &[u8]) -> &[T] {
    bytemuck::cast_slice(b)
}

fn typed_mut<T: Element>(b: &mut [u8]) -> &mut [T] {
    bytemuck::cast_slice_mut(b)
}

/// Bytes per tile when one pass over a message writes two outputs: small enough that the tile is still
/// in L1 when it is read the second time.
const TILE_BYTES: usize = 8 * 1024;

/// The last reduction step of a chunk: `dst = inp op own` (or `dst op= inp` in place), divided by `n` for
/// [`ReduceOp::Avg`], and copied to `fwd` if given, tile by tile.
fn reduce_final_tiles<T: Element>(
    op: ReduceOp,
    n: usize,
    own: Option<&[T]>,
    dst: &mut [T],
    inp: &[T],
    mut fwd: Option<&mut [T]>,
) {
    let tile = (TILE_BYTES / size_of::<T>()).max(1);
    let mut start = 0;
    while start < dst.len() {
        let rg = start..(start + tile).min(dst.len());
        let d = &mut dst[rg.clone()];
        match own {
            Some(own) => T::reduce_into(op, d, &inp[rg.clone()], &own[rg.clone()]),
            // Every operator is commutative, so `own op in` equals `in op own` bit for bit.
            None => T::reduce_assign(op, d, &inp[rg.clone()]),
        }
        if op == ReduceOp::Avg {
            T::div_assign(d, n);
        }
        if let Some(f) = fwd.as_deref_mut() {
            f[rg.clone()].copy_from_slice(d);
        }
        start = rg.end;
    }
}

/// Near-equal chunks: the first `len % n` are one element longer.
pub(crate) fn chunk_ranges(len: usize, n: usize) -> Vec<Range<usize>> {
    let (base, extra) = (len / n, len % n);
    let mut start = 0;
    (0..n)
        .map(|c| {
            let l = base + usize::from(c < extra);
            let r = start..start + l;
            start += l;
            r
        })
        .collect()
}

/// The `b`-th slice of `chunk` when slices hold `se` elements (empty past the end).
fn slice_of(chunk: &Range<usize>, b: usize, se: usize) -> Range<usize> {
    let s = (chunk.start + b * se).min(chunk.end);
    let e = (chunk.start + (b + 1) * se).min(chunk.end);
    s..e
}

/// This rank's contribution: from `input`, or from `out` when in place.
fn own<'a, T>(input: Option<&'a [T]>, out: &'a [T], rg: Range<usize>) -> &'a [T] {
    match input {
        Some(i) => &i[rg],
        None => &out[rg],
    }
}

/// One rank's view of the ring for one collective call.
pub(crate) struct Ring<'a> {
    pub tx: &'a mut SendLink,
    pub rx: &'a mut RecvLink,
    pub rank: usize,
    pub n: usize,
    pub slice_bytes: usize,
    pub during: &'static str,
    pub tag: u32,
}

impl Ring<'_> {
    fn slice_elems<T: Element>(&self) -> usize {
        (self.slice_bytes / size_of::<T>()).max(1)
    }

    fn send<T: Element>(&mut self, data: &[T]) -> Result<()> {
        let bytes = as_bytes(data);
        self.tx.send(self.during, self.tag, bytes.len(), |out| {
            out.copy_from_slice(bytes);
            Ok(())
        })
    }

    /// Receives a partial result, reduces our contribution into it and passes it on.
    fn recv_reduce_send<T: Element>(&mut self, op: ReduceOp, own: &[T]) -> Result<()> {
        let len = size_of_val(own);
        let (tx, during, tag) = (&mut *self.tx, self.during, self.tag);
        self.rx.recv(during, tag, len, |inp| {
            tx.send(during, tag, len, |out| {
                T::reduce_into(op, typed_mut(out), typed(inp), own);
                Ok(())
            })
        })
    }

    /// Receives the last partial result, stores the final value in `dst` (reducing `own`, or `dst` itself
    /// when in place), and passes it on if `forward`. The forwarded copy is written tile by tile right
    /// after the tile is reduced, while it is still in L1, instead of re-reading `dst` afterwards.
    fn recv_reduce_final<T: Element>(
        &mut self,
        op: ReduceOp,
        own: Option<&[T]>,
        dst: &mut [T],
        forward: bool,
    ) -> Result<()> {
        let len = size_of_val(dst);
        let (tx, during, tag, n) = (&mut *self.tx, self.during, self.tag, self.n);
        self.rx.recv(during, tag, len, |inp| {
            let inp = typed::<T>(inp);
            if !forward {
                reduce_final_tiles(op, n, own, dst, inp, None);
                return Ok(());
            }
            tx.send(during, tag, len, |out| {
                reduce_final_tiles(op, n, own, dst, inp, Some(typed_mut(out)));
                Ok(())
            })
        })
    }

    /// Receives final values into `dst` and passes them on if `forward` (both copies tile by tile, so the
    /// received tile is read from memory once).
    fn recv_copy<T: Element>(&mut self, dst: &mut [T], forward: bool) -> Result<()> {
        let len = size_of_val(dst);
        let (tx, during, tag) = (&mut *self.tx, self.during, self.tag);
        self.rx.recv(during, tag, len, |inp| {
            if !forward {
                dst.copy_from_slice(typed::<T>(inp));
                return Ok(());
            }
            tx.send(during, tag, len, |out| {
                let dst = bytemuck::cast_slice_mut::<T, u8>(dst);
                for ((d, o), i) in dst
                    .chunks_mut(TILE_BYTES)
                    .zip(out.chunks_mut(TILE_BYTES))
                    .zip(inp.chunks(TILE_BYTES))
                {
                    d.copy_from_slice(i);
                    o.copy_from_slice(i);
                }
                Ok(())
            })
        })
    }

    /// Ring all-reduce: reduce-scatter then all-gather, pipelined slice by slice. `input` is `None` in place.
    pub(crate) fn all_reduce<T: Element>(
        &mut self,
        input: Option<&[T]>,
        out: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        let (n, r) = (self.n, self.rank);
        let chunks = chunk_ranges(out.len(), n);
        let se = self.slice_elems::<T>();
        let blocks = chunks[0].len().div_ceil(se);
        for b in 0..blocks {
            let part = |c: usize| slice_of(&chunks[c], b, se);
            let rg = part((r + n - 1) % n);
            self.send(own(input, out, rg))?;
            for j in 1..n - 1 {
                let rg = part((r + 2 * n - 1 - j) % n);
                self.recv_reduce_send(op, own(input, out, rg))?;
            }
            let rg = part(r);
            match input {
                Some(i) => self.recv_reduce_final(op, Some(&i[rg.clone()]), &mut out[rg], true)?,
                None => self.recv_reduce_final(op, None, &mut out[rg], true)?,
            }
            for j in 1..n - 1 {
                let rg = part((r + n - j) % n);
                self.recv_copy(&mut out[rg], true)?;
            }
            let rg = part((r + 1) % n);
            self.recv_copy(&mut out[rg], false)?;
        }
        Ok(())
    }

    /// Ring reduce-scatter of `n` segments of `count` elements. Out of place: `input` holds the segments
    /// and `out` receives segment `rank`. In place (`input` is `None`): `out` holds the segments and
    /// segment `rank` of it receives the result.
    pub(crate) fn reduce_scatter<T: Element>(
        &mut self,
        input: Option<&[T]>,
        out: &mut [T],
        count: usize,
        op: ReduceOp,
    ) -> Result<()> {
        let (n, r) = (self.n, self.rank);
        let se = self.slice_elems::<T>();
        let segment = |c: usize| c * count..(c + 1) * count;
        for b in 0..count.div_ceil(se) {
            let part = |c: usize| slice_of(&segment(c), b, se);
            let rg = part((r + n - 1) % n);
            self.send(own(input, out, rg))?;
            for j in 1..n - 1 {
                let rg = part((r + 2 * n - 1 - j) % n);
                self.recv_reduce_send(op, own(input, out, rg))?;
            }
            let rg = part(r);
            match input {
                Some(i) => {
                    let local = rg.start - r * count..rg.end - r * count;
                    self.recv_reduce_final(op, Some(&i[rg]), &mut out[local], false)?;
                }
                None => self.recv_reduce_final(op, None, &mut out[rg], false)?,
            }
        }
        Ok(())
    }

    /// Ring all-gather: `out` has `n` segments of `count`; ours is already in segment `rank`.
    pub(crate) fn all_gather<T: Element>(&mut self, out: &mut [T], count: usize) -> Result<()> {
        let (n, r) = (self.n, self.rank);
        let se = self.slice_elems::<T>();
        let segment = |c: usize| c * count..(c + 1) * count;
        for b in 0..count.div_ceil(se) {
            let part = |c: usize| slice_of(&segment(c), b, se);
            self.send(&out[part(r)])?;
            for j in 1..n - 1 {
                let rg = part((r + n - j) % n);
                self.recv_copy(&mut out[rg], true)?;
            }
            let rg = part((r + 1) % n);
            self.recv_copy(&mut out[rg], false)?;
        }
        Ok(())
    }

    /// Pipelined chain from `root` around the ring.
    pub(crate) fn broadcast<T: Element>(&mut self, buf: &mut [T], root: usize) -> Result<()> {
        let n = self.n;
        let pos = (self.rank + n - root) % n;
        let se = self.slice_elems::<T>();
        let whole = 0..buf.len();
        for b in 0..buf.len().div_ceil(se) {
            let rg = slice_of(&whole, b, se);
            match pos {
                0 => self.send(&buf[rg])?,
                p if p == n - 1 => self.recv_copy(&mut buf[rg], false)?,
                _ => self.recv_copy(&mut buf[rg], true)?,
            }
        }
        Ok(())
    }

    /// Pipelined chain that starts at `root + 1` and ends, reduced, at `root` (into `out`).
    pub(crate) fn reduce<T: Element>(
        &mut self,
        input: &[T],
        out: &mut [T],
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        let n = self.n;
        let pos = (self.rank + 2 * n - root - 1) % n;
        let se = self.slice_elems::<T>();
        let whole = 0..input.len();
        for b in 0..input.len().div_ceil(se) {
            let rg = slice_of(&whole, b, se);
            match pos {
                0 => self.send(&input[rg])?,
                p if p == n - 1 => {
                    self.recv_reduce_final(op, Some(&input[rg.clone()]), &mut out[rg], false)?
                }
                _ => self.recv_reduce_send(op, &input[rg])?,
            }
        }
        Ok(())
    }
}

/// Sends `data` over a point-to-point link in slices.
pub(crate) fn p2p_send<T: Element>(
    link: &mut SendLink,
    data: &[T],
    slice_bytes: usize,
    tag: u32,
) -> Result<()> {
    let se = (slice_bytes / size_of::<T>()).max(1);
    for part in data.chunks(se) {
        let bytes = as_bytes(part);
        link.send("send", tag, bytes.len(), |out| {
            out.copy_from_slice(bytes);
            Ok(())
        })?;
    }
    Ok(())
}

/// Receives `data.len()` elements over a point-to-point link.
pub(crate) fn p2p_recv<T: Element>(
    link: &mut RecvLink,
    data: &mut [T],
    slice_bytes: usize,
    tag: u32,
) -> Result<()> {
    let se = (slice_bytes / size_of::<T>()).max(1);
    for part in data.chunks_mut(se) {
        let len = size_of_val(part);
        link.recv("recv", tag, len, |inp| {
            bytemuck::cast_slice_mut::<T, u8>(part).copy_from_slice(inp);
            Ok(())
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_buffer_with_the_long_ones_first() {
        for len in 0..40 {
            for n in 1..9 {
                let c = chunk_ranges(len, n);
                assert_eq!(c.len(), n);
                assert_eq!(c[0].start, 0);
                assert_eq!(c[n - 1].end, len);
                for w in c.windows(2) {
                    assert_eq!(w[0].end, w[1].start);
                    assert!(w[0].len() == w[1].len() || w[0].len() == w[1].len() + 1);
                }
            }
        }
    }

    #[test]
    fn slices_stay_inside_their_chunk() {
        let chunk = 10..17;
        assert_eq!(slice_of(&chunk, 0, 4), 10..14);
        assert_eq!(slice_of(&chunk, 1, 4), 14..17);
        assert_eq!(slice_of(&chunk, 2, 4), 17..17);
    }
}
