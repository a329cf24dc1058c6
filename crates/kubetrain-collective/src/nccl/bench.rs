//! The nccl-tests style benchmark on device buffers: the same sizes, columns and validation as
//! [`crate::bench`], with collectives enqueued back to back on the communicator's stream and timed from
//! the host around `iters` launches and one stream wait.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};

use super::{NcclCommunicator, NcclError, NcclOptions};
use crate::bench::{self, BenchConfig, BenchOp, BenchRow, Measure};
use crate::communicator::Communicator;
use crate::dtype::{Element, ElementType, ReduceOp};
use crate::error::Result;
use crate::rendezvous::RankEnv;

fn cuda(context: &'static str) -> impl FnOnce(cudarc::driver::DriverError) -> NcclError {
    move |e| NcclError::Cuda {
        context: context.to_string(),
        message: format!("{e:?}"),
    }
}

struct DeviceBuffers {
    send: CudaSlice<u8>,
    recv: CudaSlice<u8>,
    /// Elements: per-rank send count, per-rank receive count.
    send_count: usize,
    recv_count: usize,
}

fn upload(stream: &Arc<CudaStream>, dst: &mut CudaSlice<u8>, bytes: &[u8]) -> Result<()> {
    if !bytes.is_empty() {
        let mut view = dst.slice_mut(..bytes.len());
        stream
            .memcpy_htod(bytes, &mut view)
            .map_err(cuda("copy to the device"))?;
    }
    Ok(())
}

/// Enqueues one collective; `in_place` uses NCCL's in-place layouts.
fn enqueue(
    comm: &mut NcclCommunicator,
    cfg: &BenchConfig,
    dt: ElementType,
    b: &mut DeviceBuffers,
    in_place: bool,
) -> Result<()> {
    let stream = Arc::clone(comm.stream());
    let (s, _g1) = b.send.device_ptr(&stream);
    let (r, _g2) = b.recv.device_ptr_mut(&stream);
    let elem = dt.size() as u64;
    let rank = comm.rank() as u64;
    let (sc, rc) = (b.send_count, b.recv_count);
    // SAFETY: `send` holds max(send, recv) counts and `recv` the receive count, both on this GPU, and
    // both outlive the wait that follows every enqueue in this module.
    unsafe {
        match (cfg.op, in_place) {
            (BenchOp::AllReduce, false) => comm.enqueue_all_reduce(s, r, sc, dt, cfg.redop),
            (BenchOp::AllReduce, true) => comm.enqueue_all_reduce(r, r, sc, dt, cfg.redop),
            (BenchOp::AllGather, false) => comm.enqueue_all_gather(s, r, sc, dt),
            (BenchOp::AllGather, true) => {
                comm.enqueue_all_gather(r + rank * sc as u64 * elem, r, sc, dt)
            }
            (BenchOp::ReduceScatter, false) => comm.enqueue_reduce_scatter(s, r, rc, dt, cfg.redop),
            (BenchOp::ReduceScatter, true) => {
                comm.enqueue_reduce_scatter(s, s + rank * rc as u64 * elem, rc, dt, cfg.redop)
            }
            (BenchOp::Broadcast, false) => comm.enqueue_broadcast(s, r, sc, dt, 0),
            (BenchOp::Broadcast, true) => comm.enqueue_broadcast(r, r, sc, dt, 0),
        }
    }
}

fn typed<T: Element>(bytes: &[u8]) -> Vec<T> {
    let n = bytes.len() / size_of::<T>();
    let mut v = vec![T::from_i64(0); n];
    bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(&bytes[..n * size_of::<T>()]);
    v
}

fn validate_typed<T: Element>(
    comm: &mut NcclCommunicator,
    cfg: &BenchConfig,
    b: &mut DeviceBuffers,
    in_place: bool,
) -> Result<u64> {
    let (rank, n) = (comm.rank(), comm.world_size());
    let stream = Arc::clone(comm.stream());
    let per = if cfg.op == BenchOp::ReduceScatter {
        b.recv_count
    } else {
        b.send_count
    };
    let input: Vec<T> = bench::input_data(cfg.op, cfg.redop, rank, b.send_count);
    let zeros = vec![0u8; b.recv.len()];
    upload(&stream, &mut b.recv, &zeros)?;
    upload(&stream, &mut b.send, bytemuck::cast_slice(&input))?;
    if in_place {
        // In place, the data lives in the buffer the result lands in.
        match cfg.op {
            BenchOp::AllReduce => upload(&stream, &mut b.recv, bytemuck::cast_slice(&input))?,
            BenchOp::Broadcast if rank == 0 => {
                upload(&stream, &mut b.recv, bytemuck::cast_slice(&input))?
            }
            BenchOp::AllGather => {
                let mut whole = vec![T::from_i64(0); b.recv_count];
                whole[rank * per..(rank + 1) * per].copy_from_slice(&input);
                upload(&stream, &mut b.recv, bytemuck::cast_slice(&whole))?;
            }
            _ => {}
        }
    }
    enqueue(comm, cfg, T::DTYPE, b, in_place)?;
    comm.wait("validation")?;
    let (src, len) = match (cfg.op, in_place) {
        (BenchOp::ReduceScatter, true) => (&b.send, b.send_count),
        _ => (&b.recv, b.recv_count),
    };
    let mut host = vec![0u8; len * size_of::<T>()];
    if !host.is_empty() {
        stream
            .memcpy_dtoh(&src.slice(..host.len()), host.as_mut_slice())
            .map_err(cuda("copy from the device"))?;
    }
    let got: Vec<T> = typed(&host);
    Ok(bench::count_wrong_output(
        cfg.op, cfg.redop, rank, n, per, &got, in_place,
    ))
}

fn validate(
    comm: &mut NcclCommunicator,
    cfg: &BenchConfig,
    dt: ElementType,
    b: &mut DeviceBuffers,
    in_place: bool,
) -> Result<u64> {
    match dt {
        ElementType::F32 => validate_typed::<f32>(comm, cfg, b, in_place),
        ElementType::F64 => validate_typed::<f64>(comm, cfg, b, in_place),
        ElementType::F16 => validate_typed::<half::f16>(comm, cfg, b, in_place),
        ElementType::Bf16 => validate_typed::<half::bf16>(comm, cfg, b, in_place),
        ElementType::I32 => validate_typed::<i32>(comm, cfg, b, in_place),
        ElementType::I64 => validate_typed::<i64>(comm, cfg, b, in_place),
        ElementType::U8 => validate_typed::<u8>(comm, cfg, b, in_place),
    }
}

/// Forms an NCCL communicator from `env` and runs the benchmark on device buffers.
pub fn run(
    env: &RankEnv,
    cfg: &BenchConfig,
    dt: ElementType,
    timeout: Duration,
) -> Result<Vec<BenchRow>> {
    run_with_store(env, None, cfg, dt, timeout)
}

/// [`run`] with a pre-bound store listener for rank 0.
pub fn run_with_store(
    env: &RankEnv,
    store: Option<TcpListener>,
    cfg: &BenchConfig,
    dt: ElementType,
    timeout: Duration,
) -> Result<Vec<BenchRow>> {
    let mut comm = NcclCommunicator::init(
        env,
        store,
        NcclOptions {
            timeout,
            device: None,
        },
    )?;
    let n = comm.world_size();
    let stream = Arc::clone(comm.stream());
    let elem = dt.size();
    let mut rows = Vec::new();
    for bytes in bench::sizes(cfg) {
        let (send_count, recv_count, total) = bench::counts(cfg.op, bytes, elem, n);
        let mut b = DeviceBuffers {
            send: stream
                .alloc_zeros::<u8>((send_count.max(recv_count) * elem).max(1))
                .map_err(cuda("allocate device memory"))?,
            recv: stream
                .alloc_zeros::<u8>((recv_count * elem).max(1))
                .map_err(cuda("allocate device memory"))?,
            send_count,
            recv_count,
        };
        let mut measures = [Measure::new(cfg.op, n, 0, 0.0, 0); 2];
        for (slot, in_place) in [false, true].into_iter().enumerate() {
            for _ in 0..cfg.warmup {
                enqueue(&mut comm, cfg, dt, &mut b, in_place)?;
            }
            comm.wait("warm-up")?;
            comm.barrier()?;
            let start = Instant::now();
            for _ in 0..cfg.iters.max(1) {
                enqueue(&mut comm, cfg, dt, &mut b, in_place)?;
            }
            comm.wait("timed iterations")?;
            let mut secs = [start.elapsed().as_secs_f64() / cfg.iters.max(1) as f64];
            comm.all_reduce_in_place(&mut secs, ReduceOp::Sum)?;
            let wrong = if cfg.check {
                let mut w = [validate(&mut comm, cfg, dt, &mut b, in_place)? as i64];
                comm.all_reduce_in_place(&mut w, ReduceOp::Sum)?;
                w[0] as u64
            } else {
                0
            };
            measures[slot] = Measure::new(cfg.op, n, total * elem, secs[0] / n as f64, wrong);
        }
        rows.push(BenchRow {
            op: cfg.op.name(),
            bytes: total * elem,
            count: total,
            dtype: dt.name(),
            redop: if matches!(cfg.op, BenchOp::AllReduce | BenchOp::ReduceScatter) {
                cfg.redop.name()
            } else {
                "none"
            },
            out_of_place: measures[0],
            in_place: measures[1],
        });
    }
    Ok(rows)
}

/// Device-to-device copy rate in GB/s (bytes copied per second) on device 0: the yardstick for a
/// single-GPU out-of-place all-reduce, which NCCL turns into a copy.
pub fn device_copy_gbps(bytes: usize, iters: usize) -> Result<f64> {
    if !super::cuda_driver_present() {
        return Err(NcclError::NoCudaDriver.into());
    }
    let ctx = cudarc::driver::CudaContext::new(0).map_err(cuda("open the CUDA device"))?;
    let stream = ctx.new_stream().map_err(cuda("create a CUDA stream"))?;
    let src = stream
        .alloc_zeros::<u8>(bytes.max(1))
        .map_err(cuda("allocate device memory"))?;
    let mut dst = stream
        .alloc_zeros::<u8>(bytes.max(1))
        .map_err(cuda("allocate device memory"))?;
    stream
        .memcpy_dtod(&src, &mut dst)
        .map_err(cuda("copy on the device"))?;
    stream.synchronize().map_err(cuda("synchronize"))?;
    let start = Instant::now();
    for _ in 0..iters.max(1) {
        stream
            .memcpy_dtod(&src, &mut dst)
            .map_err(cuda("copy on the device"))?;
    }
    stream.synchronize().map_err(cuda("synchronize"))?;
    Ok(bytes as f64 * iters.max(1) as f64 / 1e9 / start.elapsed().as_secs_f64())
}
