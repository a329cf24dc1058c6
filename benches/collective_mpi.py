#!/usr/bin/env python3
"""Open MPI reference for `kubetrain collective bench`: MPI_Allreduce on float32 numpy buffers, timed the
nccl-tests way (warm-up, barrier, host timer around back-to-back calls, time averaged over ranks), printed
as the same JSON lines (`-o json`) on rank 0. Run under mpirun; see collective-vs-mpi.sh."""
import argparse
import json

import numpy as np
from mpi4py import MPI


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-b", "--min-bytes", type=int, default=8)
    p.add_argument("-e", "--max-bytes", type=int, default=64 << 20)
    p.add_argument("-f", "--step-factor", type=int, default=2)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup", type=int, default=5)
    a = p.parse_args()
    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    size = a.min_bytes
    while size <= a.max_bytes:
        count = size // 4
        send = np.full(count, rank + 1, dtype=np.float32)
        recv = np.zeros(count, dtype=np.float32)
        row = {"impl": "openmpi", "op": "all_reduce", "bytes": count * 4, "count": count, "dtype": "float",
               "redop": "sum"}
        for mode in ("out_of_place", "in_place"):
            def once():
                if mode == "out_of_place":
                    comm.Allreduce(send, recv, op=MPI.SUM)
                else:
                    comm.Allreduce(MPI.IN_PLACE, recv, op=MPI.SUM)
            for _ in range(a.warmup):
                once()
            comm.Barrier()
            t0 = MPI.Wtime()
            for _ in range(a.iters):
                once()
            mine = (MPI.Wtime() - t0) / a.iters
            secs = comm.allreduce(mine, op=MPI.SUM) / n
            # Validation pass (integer-valued floats: exact).
            recv[:] = rank + 1 if mode == "in_place" else 0
            once()
            wrong = int(np.count_nonzero(recv != n * (n + 1) / 2))
            wrong = comm.allreduce(wrong, op=MPI.SUM)
            algbw = count * 4 / 1e9 / secs if secs > 0 else 0.0
            m = {"time_us": secs * 1e6, "algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (n - 1) / n, "wrong": wrong}
            if mode == "out_of_place":
                row.update(m)
            else:
                row["in_place"] = m
        if rank == 0:
            print(json.dumps(row), flush=True)
        size *= a.step_factor


if __name__ == "__main__":
    main()
