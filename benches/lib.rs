//! Criterion benchmarks for kubetrain; each file under `benches/` is one bench target.
