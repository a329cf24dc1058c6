//! Arbitrary text as Kueue YAML: loading, validation, model building and a few scheduling
//! cycles must never panic.
#![no_main]

use kubetrain_kueue::load::Setup;
use kubetrain_kueue::model::Model;
use kubetrain_kueue::sched::Scheduler;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(mut setup) = Setup::from_yaml(text) else {
        return;
    };
    // Generator configs can ask for millions of workloads; keep the fuzzer fast.
    setup.generators.clear();
    let _ = setup.to_yaml();
    let Ok(model) = Model::build(&setup) else {
        return;
    };
    if model.workloads.len() > 64 {
        return;
    }
    let mut s = Scheduler::new(model);
    s.arrive_all();
    s.run_until_stable(Some(4));
    for wl in 0..s.states().len() {
        let _ = kubetrain_kueue::explain::explain(&s, wl);
    }
});
