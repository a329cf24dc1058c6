//! CPU-backend collectives with ranks as threads over shared memory: all-reduce latency (8 B) and
//! bandwidth (1 MiB, 64 MiB) on 2 and 4 ranks, plus single-thread memcpy of 64 MiB as the yardstick.
//!
//! Rank 0 runs inside criterion's timing loop; the other ranks are helper threads told how many
//! iterations to run, so every timed iteration is one complete collective on all ranks.
//! Run: `cargo bench -p kubetrain-benches --bench collective_cpu`.

use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kubetrain_collective::cpu::{CpuCommunicator, CpuOptions};
use kubetrain_collective::rendezvous::{EnvFlavour, RankEnv};
use kubetrain_collective::{Communicator, ReduceOp};

fn env(rank: usize, world_size: usize, port: u16) -> RankEnv {
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

/// Rank 0's communicator plus helper ranks that run `iters` all-reduces of `len` floats on request.
struct Group {
    root: CpuCommunicator,
    orders: Vec<mpsc::Sender<u64>>,
    done: mpsc::Receiver<()>,
    helpers: Vec<std::thread::JoinHandle<()>>,
}

impl Group {
    fn new(n: usize, len: usize) -> Self {
        let store = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = store.local_addr().unwrap().port();
        let opts = CpuOptions {
            timeout: Duration::from_secs(120),
            ..CpuOptions::default()
        };
        let (done_tx, done) = mpsc::channel();
        let mut orders = Vec::new();
        let mut helpers = Vec::new();
        for r in 1..n {
            let (tx, rx) = mpsc::channel::<u64>();
            orders.push(tx);
            let (opts, done_tx) = (opts.clone(), done_tx.clone());
            helpers.push(std::thread::spawn(move || {
                let mut comm = CpuCommunicator::init(&env(r, n, port), None, opts).unwrap();
                let mut buf = vec![1.0f32; len];
                for iters in rx {
                    for _ in 0..iters {
                        comm.all_reduce_in_place(&mut buf, ReduceOp::Sum).unwrap();
                    }
                    done_tx.send(()).unwrap();
                }
            }));
        }
        let root = CpuCommunicator::init(&env(0, n, port), Some(store), opts).unwrap();
        Group {
            root,
            orders,
            done,
            helpers,
        }
    }

    fn run(&mut self, buf: &mut [f32], iters: u64) -> Duration {
        for o in &self.orders {
            o.send(iters).unwrap();
        }
        let start = Instant::now();
        for _ in 0..iters {
            self.root.all_reduce_in_place(buf, ReduceOp::Sum).unwrap();
        }
        let elapsed = start.elapsed();
        for _ in &self.orders {
            self.done.recv().unwrap();
        }
        elapsed
    }

    fn finish(self) {
        drop(self.orders);
        for h in self.helpers {
            h.join().unwrap();
        }
    }
}

fn all_reduce(c: &mut Criterion) {
    let mut group = c.benchmark_group("collective_cpu_all_reduce");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for n in [2usize, 4] {
        for bytes in [8usize, 1 << 20, 64 << 20] {
            let len = bytes / 4;
            let mut g = Group::new(n, len);
            let mut buf = vec![1.0f32; len];
            group.throughput(Throughput::Bytes(bytes as u64));
            group.bench_with_input(
                BenchmarkId::new(format!("{n}_ranks"), bytes),
                &bytes,
                |b, _| b.iter_custom(|iters| g.run(&mut buf, iters)),
            );
            g.finish();
        }
    }
    group.finish();
}

fn memcpy(c: &mut Criterion) {
    let mut group = c.benchmark_group("collective_cpu_memcpy");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(3));
    let bytes = 64usize << 20;
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    group.throughput(Throughput::Bytes(bytes as u64));
    group.bench_function("64MiB_single_thread", |b| {
        b.iter(|| dst.copy_from_slice(std::hint::black_box(&src)))
    });
    group.finish();
}

criterion_group!(benches, all_reduce, memcpy);
criterion_main!(benches);
