//! Arbitrary text as a rank's environment and Open MPI hostfile: `RankEnv::from_sources` must never panic,
//! and what it accepts must be a usable rank (rank below world size, a store address).
#![no_main]

use kubetrain_collective::rendezvous::{RankEnv, hostfile_first_host};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // `KEY=VALUE` lines, then (after a line `%%`) the hostfile.
    let (vars, hostfile) = text.split_once("\n%%\n").unwrap_or((text, ""));
    let vars: Vec<(&str, &str)> = vars.lines().filter_map(|l| l.split_once('=')).collect();
    let _ = hostfile_first_host(hostfile);
    let found = RankEnv::from_sources(
        |k| vars.iter().rev().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()),
        |_path| Ok(hostfile.to_string()),
    );
    if let Ok(env) = found {
        assert!(env.rank < env.world_size, "{env:?}");
        assert!(!env.master_addr.is_empty(), "{env:?}");
    }
});
