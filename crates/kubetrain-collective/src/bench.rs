//! An nccl-tests style benchmark: sizes doubling from `min_bytes` to `max_bytes`, warm-up, a barrier, a
//! host timer around `iters` back-to-back collectives, times averaged over ranks, then a separate
//! validation pass with integer-exact data that counts wrong elements (`#wrong`), out of place and in
//! place.
//!
//! Bandwidths follow nccl-tests: `algbw = bytes / time`, `busbw = algbw × factor` with the factor
//! `2(n−1)/n` for all-reduce, `(n−1)/n` for all-gather and reduce-scatter (bytes = the total buffer), and
//! 1 for broadcast, so busbw compares with the hardware's link bandwidth whatever the rank count.

use std::fmt::Write as _;
use std::str::FromStr;
use std::time::Instant;

use serde::Serialize;

use crate::communicator::Communicator;
use crate::dtype::{Element, ElementType, ReduceOp};
use crate::error::Result;

/// The collectives the benchmark measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchOp {
    /// All-reduce.
    AllReduce,
    /// All-gather.
    AllGather,
    /// Reduce-scatter.
    ReduceScatter,
    /// Broadcast from rank 0.
    Broadcast,
}

impl BenchOp {
    /// The snake-case name (`all_reduce`, ...).
    pub fn name(self) -> &'static str {
        match self {
            BenchOp::AllReduce => "all_reduce",
            BenchOp::AllGather => "all_gather",
            BenchOp::ReduceScatter => "reduce_scatter",
            BenchOp::Broadcast => "broadcast",
        }
    }

    /// The nccl-tests bus bandwidth factor for `n` ranks.
    pub fn bus_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            BenchOp::AllReduce => 2.0 * (n - 1.0) / n,
            BenchOp::AllGather | BenchOp::ReduceScatter => (n - 1.0) / n,
            BenchOp::Broadcast => 1.0,
        }
    }

    /// Whether the operation reduces (prints a redop) and whether it has a root.
    fn reduces(self) -> bool {
        matches!(self, BenchOp::AllReduce | BenchOp::ReduceScatter)
    }
}

impl FromStr for BenchOp {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "all_reduce" | "allreduce" => Ok(BenchOp::AllReduce),
            "all_gather" | "allgather" => Ok(BenchOp::AllGather),
            "reduce_scatter" | "reducescatter" => Ok(BenchOp::ReduceScatter),
            "broadcast" => Ok(BenchOp::Broadcast),
            _ => Err(format!(
                "unknown op {s:?}: expected all_reduce, all_gather, reduce_scatter or broadcast"
            )),
        }
    }
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// The collective.
    pub op: BenchOp,
    /// The reduction operator (reducing collectives only).
    pub redop: ReduceOp,
    /// Smallest size in bytes.
    pub min_bytes: usize,
    /// Largest size in bytes.
    pub max_bytes: usize,
    /// Each size is the previous one times this (≥ 2).
    pub step_factor: usize,
    /// Timed iterations per size.
    pub iters: usize,
    /// Untimed iterations before timing.
    pub warmup: usize,
    /// Run the validation pass.
    pub check: bool,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            op: BenchOp::AllReduce,
            redop: ReduceOp::Sum,
            min_bytes: 8,
            max_bytes: 64 << 20,
            step_factor: 2,
            iters: 20,
            warmup: 5,
            check: true,
        }
    }
}

/// Time and bandwidth of one mode (out of place or in place) at one size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Measure {
    /// Average time per collective, microseconds (averaged over ranks).
    pub time_us: f64,
    /// Algorithm bandwidth, GB/s.
    pub algbw_gbps: f64,
    /// Bus bandwidth, GB/s.
    pub busbw_gbps: f64,
    /// Wrong elements over all ranks (0 when not checked).
    pub wrong: u64,
}

impl Measure {
    /// Derives the bandwidths from a time.
    pub fn new(op: BenchOp, n: usize, bytes: usize, seconds: f64, wrong: u64) -> Self {
        let algbw = if seconds > 0.0 {
            bytes as f64 / 1e9 / seconds
        } else {
            0.0
        };
        Measure {
            time_us: seconds * 1e6,
            algbw_gbps: algbw,
            busbw_gbps: algbw * op.bus_factor(n),
            wrong,
        }
    }
}

/// One size of the benchmark.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchRow {
    /// Collective name.
    pub op: &'static str,
    /// Total bytes (per rank buffer for all-reduce and broadcast; the gathered/scattered buffer otherwise).
    pub bytes: usize,
    /// Elements in `bytes`.
    pub count: usize,
    /// nccl-tests type name.
    pub dtype: &'static str,
    /// Reduction name, or `none`.
    pub redop: &'static str,
    /// Out-of-place figures (the top-level fields of the JSON line).
    #[serde(flatten)]
    pub out_of_place: Measure,
    /// In-place figures.
    pub in_place: Measure,
}

/// The sizes measured: `min_bytes`, then × `step_factor` until `max_bytes`.
pub fn sizes(cfg: &BenchConfig) -> Vec<usize> {
    let mut out = Vec::new();
    let mut b = cfg.min_bytes.max(1);
    while b <= cfg.max_bytes {
        out.push(b);
        match b.checked_mul(cfg.step_factor.max(2)) {
            Some(next) => b = next,
            None => break,
        }
    }
    out
}

/// Element counts for a size: (per-rank send count, per-rank receive count, total count printed).
pub fn counts(op: BenchOp, bytes: usize, elem: usize, n: usize) -> (usize, usize, usize) {
    let count = bytes / elem;
    match op {
        BenchOp::AllReduce | BenchOp::Broadcast => (count, count, count),
        BenchOp::AllGather => {
            let per = count / n;
            (per, per * n, per * n)
        }
        BenchOp::ReduceScatter => {
            let per = count / n;
            (per * n, per, per * n)
        }
    }
}

/// Validation data: small whole numbers (0..4, or 1..=2 for products) so that every reduction is exact.
pub fn check_value<T: Element>(redop: ReduceOp, rank: usize, i: usize) -> T {
    let v = if redop == ReduceOp::Prod {
        1 + ((i + rank) % 2) as i64
    } else {
        ((i * 3 + rank * 7) % 4) as i64
    };
    T::from_i64(v)
}

/// Expected result of reducing element `i` of every rank's validation data.
pub fn expected_reduced<T: Element>(redop: ReduceOp, n: usize, i: usize) -> T {
    let mut acc = [check_value::<T>(redop, 0, i)];
    for r in 1..n {
        T::reduce_assign(redop, &mut acc, &[check_value::<T>(redop, r, i)]);
    }
    if redop == ReduceOp::Avg {
        T::div_assign(&mut acc, n);
    }
    acc[0]
}

fn count_wrong<T: Element>(got: &[T], want: impl Fn(usize) -> T) -> u64 {
    got.iter()
        .enumerate()
        .filter(|(i, g)| {
            let w = want(*i);
            let (gf, wf) = (g.to_f64(), w.to_f64());
            // Whole numbers are exact; a tolerance only covers avg's division in 16-bit types.
            !(**g == w || (T::DTYPE.is_float() && (gf - wf).abs() <= 1e-2 * wf.abs().max(1.0)))
        })
        .count() as u64
}

struct Buffers<T> {
    send: Vec<T>,
    recv: Vec<T>,
    inplace: Vec<T>,
}

fn run_once<T: Element, C: Communicator>(
    comm: &mut C,
    op: BenchOp,
    redop: ReduceOp,
    b: &mut Buffers<T>,
    in_place: bool,
) -> Result<()> {
    match (op, in_place) {
        (BenchOp::AllReduce, false) => comm.all_reduce(&b.send, &mut b.recv, redop),
        (BenchOp::AllReduce, true) => comm.all_reduce_in_place(&mut b.inplace, redop),
        (BenchOp::AllGather, false) => comm.all_gather(&b.send, &mut b.recv),
        (BenchOp::AllGather, true) => comm.all_gather_in_place(&mut b.inplace),
        (BenchOp::ReduceScatter, false) => comm.reduce_scatter(&b.send, &mut b.recv, redop),
        (BenchOp::ReduceScatter, true) => comm.reduce_scatter_in_place(&mut b.inplace, redop),
        (BenchOp::Broadcast, false) => {
            // Out of place: the root's send buffer is copied to its receive buffer first, as NCCL does.
            if comm.rank() == 0 {
                b.recv.copy_from_slice(&b.send);
            }
            comm.broadcast(&mut b.recv, 0)
        }
        (BenchOp::Broadcast, true) => comm.broadcast(&mut b.inplace, 0),
    }
}

/// Validation input of `rank` for `op` (`len` elements): broadcast sends rank 0's data from the root.
pub fn input_data<T: Element>(op: BenchOp, redop: ReduceOp, rank: usize, len: usize) -> Vec<T> {
    let src = if op == BenchOp::Broadcast { 0 } else { rank };
    (0..len).map(|i| check_value(redop, src, i)).collect()
}

/// Wrong elements of a validation result. `got` is the receive buffer (out of place) or the whole
/// in-place buffer; `per` is the per-rank count of all-gather and reduce-scatter.
pub fn count_wrong_output<T: Element>(
    op: BenchOp,
    redop: ReduceOp,
    rank: usize,
    n: usize,
    per: usize,
    got: &[T],
    in_place: bool,
) -> u64 {
    match op {
        BenchOp::AllReduce => count_wrong(got, |i| expected_reduced::<T>(redop, n, i)),
        BenchOp::Broadcast => count_wrong(got, |i| check_value::<T>(redop, 0, i)),
        BenchOp::AllGather => count_wrong(got, |i| {
            check_value::<T>(redop, i / per.max(1), i % per.max(1))
        }),
        BenchOp::ReduceScatter => {
            let mine = if in_place {
                &got[rank * per..(rank + 1) * per]
            } else {
                got
            };
            count_wrong(mine, |i| expected_reduced::<T>(redop, n, rank * per + i))
        }
    }
}

/// Fills the buffers with validation data, runs the collective once, and counts wrong elements here.
fn validate<T: Element, C: Communicator>(
    comm: &mut C,
    op: BenchOp,
    redop: ReduceOp,
    b: &mut Buffers<T>,
    in_place: bool,
) -> Result<u64> {
    let (r, n) = (comm.rank(), comm.world_size());
    let per = match op {
        BenchOp::ReduceScatter => b.recv.len(),
        _ => b.send.len(),
    };
    b.send = input_data(op, redop, r, b.send.len());
    b.recv.iter_mut().for_each(|v| *v = T::from_i64(0));
    match op {
        BenchOp::AllGather => {
            b.inplace.iter_mut().for_each(|v| *v = T::from_i64(0));
            b.inplace[r * per..(r + 1) * per].copy_from_slice(&b.send);
        }
        BenchOp::Broadcast if r != 0 => b.inplace.iter_mut().for_each(|v| *v = T::from_i64(0)),
        _ => b.inplace.copy_from_slice(&b.send),
    }
    run_once(comm, op, redop, b, in_place)?;
    let got = if in_place { &b.inplace } else { &b.recv };
    Ok(count_wrong_output(op, redop, r, n, per, got, in_place))
}

fn time_mode<T: Element, C: Communicator>(
    comm: &mut C,
    cfg: &BenchConfig,
    b: &mut Buffers<T>,
    in_place: bool,
) -> Result<f64> {
    for _ in 0..cfg.warmup {
        run_once(comm, cfg.op, cfg.redop, b, in_place)?;
    }
    comm.barrier()?;
    let start = Instant::now();
    for _ in 0..cfg.iters.max(1) {
        run_once(comm, cfg.op, cfg.redop, b, in_place)?;
    }
    let mine = start.elapsed().as_secs_f64() / cfg.iters.max(1) as f64;
    // nccl-tests' default: the time averaged over ranks.
    let mut total = [mine];
    comm.all_reduce_in_place(&mut total, ReduceOp::Sum)?;
    Ok(total[0] / comm.world_size() as f64)
}

/// Runs the benchmark on host buffers of element type `T`; every rank returns the same rows.
pub fn run<T: Element, C: Communicator>(comm: &mut C, cfg: &BenchConfig) -> Result<Vec<BenchRow>> {
    let n = comm.world_size();
    let elem = size_of::<T>();
    let mut rows = Vec::new();
    for bytes in sizes(cfg) {
        let (send, recv, total) = counts(cfg.op, bytes, elem, n);
        let inplace_len = send.max(recv);
        let mut b = Buffers {
            send: (0..send)
                .map(|i| check_value::<T>(cfg.redop, comm.rank(), i))
                .collect(),
            recv: vec![T::from_i64(0); recv],
            inplace: vec![T::from_i64(0); inplace_len],
        };
        let mut measures = [None, None];
        for (slot, in_place) in [false, true].into_iter().enumerate() {
            let secs = time_mode(comm, cfg, &mut b, in_place)?;
            let wrong = if cfg.check {
                let mut w = [validate(comm, cfg.op, cfg.redop, &mut b, in_place)? as i64];
                comm.all_reduce_in_place(&mut w, ReduceOp::Sum)?;
                w[0] as u64
            } else {
                0
            };
            measures[slot] = Some(Measure::new(cfg.op, n, total * elem, secs, wrong));
        }
        rows.push(BenchRow {
            op: cfg.op.name(),
            bytes: total * elem,
            count: total,
            dtype: T::DTYPE.name(),
            redop: if cfg.op.reduces() {
                cfg.redop.name()
            } else {
                "none"
            },
            out_of_place: measures[0].expect("measured"),
            in_place: measures[1].expect("measured"),
        });
    }
    Ok(rows)
}

/// Runs [`run`] with the element type named by `dtype`.
pub fn run_dtype<C: Communicator>(
    comm: &mut C,
    cfg: &BenchConfig,
    dtype: ElementType,
) -> Result<Vec<BenchRow>> {
    match dtype {
        ElementType::F32 => run::<f32, C>(comm, cfg),
        ElementType::F64 => run::<f64, C>(comm, cfg),
        ElementType::F16 => run::<half::f16, C>(comm, cfg),
        ElementType::Bf16 => run::<half::bf16, C>(comm, cfg),
        ElementType::I32 => run::<i32, C>(comm, cfg),
        ElementType::I64 => run::<i64, C>(comm, cfg),
        ElementType::U8 => run::<u8, C>(comm, cfg),
    }
}

/// The nccl-tests table: header, one line per size (out of place, then in place), the average bus
/// bandwidth trailer.
pub fn format_table(rows: &[BenchRow]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "#{:>62}{:>35}", "out-of-place", "in-place");
    let _ = writeln!(
        s,
        "#{:>11} {:>13} {:>9} {:>7} {:>7} {:>8} {:>7} {:>7} {:>6} {:>8} {:>7} {:>7} {:>6}",
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "time",
        "algbw",
        "busbw",
        "#wrong"
    );
    let _ = writeln!(
        s,
        "#{:>11} {:>13} {:>9} {:>7} {:>7} {:>8} {:>7} {:>7} {:>6} {:>8} {:>7} {:>7} {:>6}",
        "(B)",
        "(elements)",
        "",
        "",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        ""
    );
    for r in rows {
        let root = if r.op == "broadcast" { "0" } else { "-1" };
        let m = |m: &Measure| {
            format!(
                "{:>8.1} {:>7.2} {:>7.2} {:>6}",
                m.time_us, m.algbw_gbps, m.busbw_gbps, m.wrong
            )
        };
        let _ = writeln!(
            s,
            " {:>11} {:>13} {:>9} {:>7} {:>7} {} {}",
            r.bytes,
            r.count,
            r.dtype,
            r.redop,
            root,
            m(&r.out_of_place),
            m(&r.in_place)
        );
    }
    let _ = writeln!(
        s,
        "# Out of bounds values : {} {}",
        wrong_total(rows),
        if wrong_total(rows) == 0 {
            "OK"
        } else {
            "FAILED"
        }
    );
    let _ = writeln!(s, "# Avg bus bandwidth    : {:.4}", avg_busbw(rows));
    s
}

/// Wrong elements over every row and mode.
pub fn wrong_total(rows: &[BenchRow]) -> u64 {
    rows.iter()
        .map(|r| r.out_of_place.wrong + r.in_place.wrong)
        .sum()
}

/// The nccl-tests trailer: the mean of every row's out-of-place and in-place bus bandwidth.
pub fn avg_busbw(rows: &[BenchRow]) -> f64 {
    if rows.is_empty() {
        return 0.0;
    }
    rows.iter()
        .map(|r| r.out_of_place.busbw_gbps + r.in_place.busbw_gbps)
        .sum::<f64>()
        / (2 * rows.len()) as f64
}

/// One JSON object per line per size.
pub fn format_json(rows: &[BenchRow]) -> String {
    rows.iter()
        .map(|r| serde_json::to_string(r).expect("rows serialize") + "\n")
        .collect()
}

/// Single-thread `memcpy` bandwidth in GB/s (bytes copied per second) over a `bytes` buffer: the
/// yardstick for the CPU backend.
pub fn memcpy_gbps(bytes: usize, iters: usize) -> f64 {
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    dst.copy_from_slice(&src);
    let start = Instant::now();
    for _ in 0..iters.max(1) {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
    }
    bytes as f64 * iters.max(1) as f64 / 1e9 / start.elapsed().as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_factors_match_nccl_tests() {
        assert_eq!(BenchOp::AllReduce.bus_factor(4), 1.5);
        assert_eq!(BenchOp::AllGather.bus_factor(4), 0.75);
        assert_eq!(BenchOp::ReduceScatter.bus_factor(2), 0.5);
        assert_eq!(BenchOp::Broadcast.bus_factor(8), 1.0);
        assert_eq!(BenchOp::AllReduce.bus_factor(1), 0.0);
        let m = Measure::new(BenchOp::AllReduce, 2, 1_000_000_000, 0.5, 0);
        assert_eq!(
            (m.time_us, m.algbw_gbps, m.busbw_gbps),
            (500_000.0, 2.0, 2.0)
        );
    }

    #[test]
    fn sizes_double_and_counts_split_by_rank() {
        let cfg = BenchConfig {
            min_bytes: 8,
            max_bytes: 100,
            ..BenchConfig::default()
        };
        assert_eq!(sizes(&cfg), vec![8, 16, 32, 64]);
        assert_eq!(counts(BenchOp::AllGather, 64, 4, 3), (5, 15, 15));
        assert_eq!(counts(BenchOp::ReduceScatter, 64, 4, 3), (15, 5, 15));
        assert_eq!(counts(BenchOp::AllReduce, 64, 4, 3), (16, 16, 16));
    }

    #[test]
    fn validation_data_reduces_exactly() {
        assert_eq!(expected_reduced::<f32>(ReduceOp::Sum, 3, 0), 5.0);
        assert_eq!(expected_reduced::<i32>(ReduceOp::Prod, 3, 0), 2);
        assert_eq!(expected_reduced::<u8>(ReduceOp::Max, 4, 1), 3);
    }

    #[test]
    fn table_and_json_carry_the_figures() {
        let m = Measure::new(BenchOp::AllReduce, 2, 1024, 1e-6, 0);
        let row = BenchRow {
            op: "all_reduce",
            bytes: 1024,
            count: 256,
            dtype: "float",
            redop: "sum",
            out_of_place: m,
            in_place: m,
        };
        let t = format_table(std::slice::from_ref(&row));
        assert!(
            t.contains("1024")
                && t.contains("float")
                && t.contains("# Avg bus bandwidth    : 1.0240"),
            "{t}"
        );
        let j: serde_json::Value = serde_json::from_str(format_json(&[row]).trim()).unwrap();
        for k in [
            "op",
            "bytes",
            "count",
            "dtype",
            "redop",
            "time_us",
            "algbw_gbps",
            "busbw_gbps",
            "wrong",
        ] {
            assert!(j.get(k).is_some(), "missing {k} in {j}");
        }
        assert_eq!(j["busbw_gbps"], 1.024);
    }
}
