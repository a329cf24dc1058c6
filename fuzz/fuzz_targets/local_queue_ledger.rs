//! Arbitrary bytes as the local queue's ledger: parsing, and Kueue's admission decisions over whatever
//! parses, must never panic.
#![no_main]

use kubetrain_client::local::capacity::Capacity;
use kubetrain_client::local::queue::QueueingStrategy;
use kubetrain_client::fuzz::{decide, parse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(ledger) = parse(data) else {
        return;
    };
    // Keep the fuzzer fast: a real ledger holds a handful of runs.
    if ledger.entries.len() > 16 {
        return;
    }
    let capacity = Capacity {
        cpu: 4,
        memory: Some(8 << 30),
        gpus: 1,
    };
    for strategy in [QueueingStrategy::BestEffortFifo, QueueingStrategy::StrictFifo] {
        let _ = decide(&ledger.entries, &capacity, strategy);
    }
});
