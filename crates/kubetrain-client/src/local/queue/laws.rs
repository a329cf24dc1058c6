//! Laws of the local queue's admission decisions, on random ledgers: what every process decides from the
//! same ledger must be consistent, whichever order they poll in.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::QueueingStrategy;
use super::decide::{Verdict, decide};
use super::ledger::{Entry, EntryState, PodSetEntry};
use crate::local::capacity::Capacity;

const CORES: u64 = 8;

fn entry(i: usize, cpu_milli: u32, pods: i32, state: EntryState) -> Entry {
    Entry {
        id: format!("run-{i}"),
        job: format!("default/run-{i}"),
        seq: i as u64 + 1,
        pid: std::process::id(),
        start_ticks: None,
        state,
        queued_at_ms: 0,
        pod_sets: vec![PodSetEntry {
            name: "node".into(),
            count: pods,
            requests: BTreeMap::from([("cpu".to_string(), format!("{cpu_milli}m"))]),
        }],
    }
}

fn milli(e: &Entry) -> u64 {
    let p = &e.pod_sets[0];
    let per_pod: u64 = p.requests["cpu"].trim_end_matches('m').parse().unwrap();
    per_pod * p.count as u64
}

/// A ledger whose admitted runs fit the capacity, followed by waiting runs, in arrival order.
fn ledger() -> impl Strategy<Value = Vec<Entry>> {
    prop::collection::vec((1u32..=4000, 1i32..=3, any::<bool>()), 0..8).prop_map(|runs| {
        let mut used = 0u64;
        runs.into_iter()
            .enumerate()
            .map(|(i, (cpu, pods, admitted))| {
                let fits = used + u64::from(cpu) * pods as u64 <= CORES * 1000;
                let state = if admitted && fits {
                    used += u64::from(cpu) * pods as u64;
                    EntryState::Admitted
                } else {
                    EntryState::Waiting
                };
                entry(i, cpu, pods, state)
            })
            .collect()
    })
}

fn strategy() -> impl Strategy<Value = QueueingStrategy> {
    prop_oneof![
        Just(QueueingStrategy::BestEffortFifo),
        Just(QueueingStrategy::StrictFifo)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Admitting every run Kueue admits never exceeds the capacity, and a run is refused only when it
    /// does not fit (or, under StrictFIFO, waits behind one that does not).
    #[test]
    fn admitted_runs_fit_and_refusals_have_a_reason(entries in ledger(), strategy in strategy()) {
        let capacity = Capacity { cpu: CORES, memory: None, gpus: 0 };
        let verdicts = decide(&entries, &capacity, strategy).unwrap();
        let mut used: u64 = entries.iter().filter(|e| e.state == EntryState::Admitted).map(milli).sum();
        let mut blocked = false;
        for e in entries.iter().filter(|e| e.state == EntryState::Waiting) {
            match &verdicts[&e.id] {
                Verdict::Admit => {
                    prop_assert!(!(blocked && strategy == QueueingStrategy::StrictFifo), "passed a blocked head");
                    used += milli(e);
                }
                Verdict::Wait(reason) => {
                    prop_assert!(!reason.is_empty());
                    blocked = true;
                }
            }
        }
        prop_assert!(used <= CORES * 1000, "{used} millicores admitted on {CORES} cores");
    }

    /// Processes poll in any order: once the runs Kueue admitted are booked as admitted, asking again gives
    /// the remaining runs the same verdicts (nobody admitted earlier loses its place, nobody new fits).
    #[test]
    fn booking_the_admitted_runs_changes_no_other_verdict(entries in ledger(), strategy in strategy()) {
        let capacity = Capacity { cpu: CORES, memory: None, gpus: 0 };
        let first = decide(&entries, &capacity, strategy).unwrap();
        let booked: Vec<Entry> = entries
            .iter()
            .cloned()
            .map(|mut e| {
                if first.get(&e.id) == Some(&Verdict::Admit) {
                    e.state = EntryState::Admitted;
                }
                e
            })
            .collect();
        let second = decide(&booked, &capacity, strategy).unwrap();
        for (id, verdict) in &second {
            prop_assert_eq!(matches!(verdict, Verdict::Admit), false, "{} became admissible", id);
            prop_assert!(matches!(first[id], Verdict::Wait(_)));
        }
    }
}
