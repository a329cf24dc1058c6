//! Helpers shared by the integration tests: ranks as threads on loopback, test data and a naive reference.
#![allow(dead_code)]

use std::net::TcpListener;
use std::time::Duration;

use half::{bf16, f16};
use kubetrain_collective::cpu::{CpuCommunicator, CpuOptions, Transport};
use kubetrain_collective::rendezvous::{EnvFlavour, RankEnv};
use kubetrain_collective::{Communicator, Element, ReduceOp};

/// Small slices and few slots so that short buffers already cross several pipeline blocks.
pub fn test_options(transport: Transport) -> CpuOptions {
    CpuOptions {
        timeout: Duration::from_secs(20),
        slice_bytes: 256,
        slots: 3,
        transport,
        ..CpuOptions::default()
    }
}

pub fn env(rank: usize, world_size: usize, port: u16) -> RankEnv {
    RankEnv {
        rank,
        world_size,
        local_rank: rank,
        local_world_size: world_size,
        master_addr: "127.0.0.1".into(),
        master_port: port,
        flavour: EnvFlavour::Generic,
    }
}

/// Runs `f` on `n` ranks, one thread each, and returns every rank's result in rank order.
pub fn run_ranks<R: Send>(
    n: usize,
    opts: CpuOptions,
    f: impl Fn(&mut CpuCommunicator) -> R + Sync,
) -> Vec<R> {
    let store = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = store.local_addr().unwrap().port();
    let mut store = Some(store);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|r| {
                let opts = opts.clone();
                let store = if r == 0 { store.take() } else { None };
                let f = &f;
                s.spawn(move || {
                    let mut comm = CpuCommunicator::init(&env(r, n, port), store, opts).unwrap();
                    f(&mut comm)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Rank `r`'s value at index `i`: small whole numbers in -4..=4 (exact in every type), scaled by 0.37 for
/// floats so that float sums round.
pub fn value<T: Element>(r: usize, i: usize) -> T {
    let v = ((r * 5 + i * 3 + r * i) % 9) as i64 - 4;
    if T::DTYPE.is_float() {
        from_f64::<T>(v as f64 * 0.37)
    } else {
        T::from_i64(v)
    }
}

fn from_f64<T: Element>(v: f64) -> T {
    // Element has no from_f64; go through the 16-bit types' rounding via bytes of the exact type.
    match T::DTYPE {
        kubetrain_collective::ElementType::F32 => {
            bytemuck::pod_read_unaligned(&(v as f32).to_ne_bytes())
        }
        kubetrain_collective::ElementType::F64 => bytemuck::pod_read_unaligned(&v.to_ne_bytes()),
        kubetrain_collective::ElementType::F16 => {
            bytemuck::pod_read_unaligned(&half::f16::from_f64(v).to_bits().to_ne_bytes())
        }
        kubetrain_collective::ElementType::Bf16 => {
            bytemuck::pod_read_unaligned(&half::bf16::from_f64(v).to_bits().to_ne_bytes())
        }
        _ => T::from_i64(v as i64),
    }
}

pub fn rank_data<T: Element>(r: usize, len: usize) -> Vec<T> {
    (0..len).map(|i| value::<T>(r, i)).collect()
}

/// Left-to-right reduction over ranks 0..n, element by element (then / n for avg).
pub fn naive_reduce<T: Element>(n: usize, len: usize, op: ReduceOp) -> Vec<T> {
    let mut acc = rank_data::<T>(0, len);
    for r in 1..n {
        T::reduce_assign(op, &mut acc, &rank_data::<T>(r, len));
    }
    if op == ReduceOp::Avg {
        T::div_assign(&mut acc, n);
    }
    acc
}

/// Exact for integers; for floats a tolerance that grows with the number of rounding steps.
pub fn assert_close<T: Element>(got: &[T], want: &[T], n: usize, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let (rel, abs) = match T::DTYPE {
        kubetrain_collective::ElementType::F32 => (1e-5, 1e-5),
        kubetrain_collective::ElementType::F64 => (1e-12, 1e-12),
        kubetrain_collective::ElementType::F16 | kubetrain_collective::ElementType::Bf16 => {
            (0.02, 0.02 * n as f64)
        }
        _ => (0.0, 0.0),
    };
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (g.to_f64(), w.to_f64());
        let ok = if T::DTYPE.is_float() {
            g == w || (g - w).abs() <= abs + rel * w.abs()
        } else {
            g == w
        };
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}

/// Lengths around the chunk and slice boundaries (slices are 256 bytes in tests).
const LENGTHS: [usize; 5] = [0, 1, 7, 67, 1031];

pub fn check_reductions<T: Element>(c: &mut CpuCommunicator) {
    let (r, n) = (c.rank(), c.world_size());
    for &len in &LENGTHS {
        let mine = rank_data::<T>(r, len);
        for op in ReduceOp::ALL {
            let want = naive_reduce::<T>(n, len, op);
            let what = format!("{} n={n} len={len} {op} rank={r}", T::DTYPE);

            let mut out = vec![T::from_i64(0); len];
            c.all_reduce(&mine, &mut out, op).unwrap();
            assert_close(&out, &want, n, &format!("all_reduce {what}"));

            let mut inplace = mine.clone();
            c.all_reduce_in_place(&mut inplace, op).unwrap();
            assert_eq!(
                bytemuck::cast_slice::<T, u8>(&inplace),
                bytemuck::cast_slice::<T, u8>(&out),
                "in place = out of place: {what}"
            );

            let root = len % n;
            let mut red = vec![T::from_i64(0); if r == root { len } else { 0 }];
            c.reduce(&mine, &mut red, op, root).unwrap();
            if r == root {
                assert_close(&red, &want, n, &format!("reduce root={root} {what}"));
            }

            // reduce-scatter: each rank contributes n segments of `len`; segment s of rank q is data(q, s*len..).
            let big = rank_data::<T>(r, n * len);
            let want_full = naive_reduce::<T>(n, n * len, op);
            let mut seg = vec![T::from_i64(0); len];
            c.reduce_scatter(&big, &mut seg, op).unwrap();
            assert_close(
                &seg,
                &want_full[r * len..(r + 1) * len],
                n,
                &format!("reduce_scatter {what}"),
            );
            let mut big_inplace = big.clone();
            c.reduce_scatter_in_place(&mut big_inplace, op).unwrap();
            assert_eq!(
                &big_inplace[r * len..(r + 1) * len],
                &seg[..],
                "reduce_scatter in place {what}"
            );
        }
    }
}

pub fn check_movement<T: Element>(c: &mut CpuCommunicator) {
    let (r, n) = (c.rank(), c.world_size());
    for &len in &LENGTHS {
        let what = format!("{} n={n} len={len} rank={r}", T::DTYPE);
        let mine = rank_data::<T>(r, len);
        let mut all = vec![T::from_i64(0); n * len];
        c.all_gather(&mine, &mut all).unwrap();
        let want: Vec<T> = (0..n).flat_map(|q| rank_data::<T>(q, len)).collect();
        assert_eq!(all, want, "all_gather {what}");
        let mut inplace = vec![T::from_i64(0); n * len];
        inplace[r * len..(r + 1) * len].copy_from_slice(&mine);
        c.all_gather_in_place(&mut inplace).unwrap();
        assert_eq!(inplace, want, "all_gather in place {what}");

        for root in [0, n - 1] {
            let mut buf = if r == root {
                rank_data::<T>(root, len)
            } else {
                vec![T::from_i64(0); len]
            };
            c.broadcast(&mut buf, root).unwrap();
            assert_eq!(
                buf,
                rank_data::<T>(root, len),
                "broadcast root={root} {what}"
            );
        }

        // Send/recv around the ring in both directions (even ranks send first to avoid relying on buffering).
        if n > 1 {
            let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
            let mut got = vec![T::from_i64(0); len];
            if r % 2 == 0 {
                c.send(&mine, next).unwrap();
                c.recv(&mut got, prev).unwrap();
            } else {
                c.recv(&mut got, prev).unwrap();
                c.send(&mine, next).unwrap();
            }
            assert_eq!(got, rank_data::<T>(prev, len), "send/recv {what}");
        }
    }
    c.barrier().unwrap();
}

pub fn check_all_types(c: &mut CpuCommunicator) {
    check_reductions::<f32>(c);
    check_reductions::<f64>(c);
    check_reductions::<i32>(c);
    check_reductions::<i64>(c);
    check_reductions::<u8>(c);
    check_reductions::<f16>(c);
    check_reductions::<bf16>(c);
    check_movement::<f32>(c);
    check_movement::<f64>(c);
    check_movement::<i32>(c);
    check_movement::<i64>(c);
    check_movement::<u8>(c);
    check_movement::<bf16>(c);
}
