//! The discrete-event simulation in virtual time: arrivals, scheduling cycles, run times,
//! finishes and preemptions, with utilization integrals and the cost view.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::hash::{Hash, Hasher};

use serde::Serialize;

use super::scenario::ScenarioSpec;
use crate::model::{CqId, WlId};
use crate::quantity::{Count, UNLIMITED};
use crate::quota::FrId;
use crate::sched::{CycleResult, Phase, Scheduler};

/// One sample of the time series drawn in the report.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    /// Virtual time (ms).
    pub t_ms: i64,
    /// Pending workloads (arrived, not admitted, not finished).
    pub pending: usize,
    /// The mean over ClusterQueues of the share of each one's nominal quota in use, in percent (0 to 100;
    /// see [`QueueStats::utilization_pct`]).
    pub utilization: f64,
}

/// Time-to-admission statistics of one workload class (ms).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClassStats {
    /// Workloads of the class.
    pub workloads: usize,
    /// Admitted at least once.
    pub admitted: usize,
    /// Mean time to admission.
    pub mean_ms: f64,
    /// Median.
    pub p50_ms: i64,
    /// 90th percentile.
    pub p90_ms: i64,
    /// Maximum.
    pub max_ms: i64,
}

/// Per-ClusterQueue figures.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueStats {
    /// The share of its nominal quota in use over the run, in percent (0 to 100): per flavor-resource it
    /// has a nominal quota for, ∫min(used, nominal) / (nominal × elapsed), each resource in its own unit,
    /// averaged over those flavor-resources. Usage above the nominal quota is borrowed from the cohort and
    /// does not count here; a queue without nominal quota is at 0.
    pub utilization_pct: f64,
    /// Admissions.
    pub admissions: usize,
}

/// The platform's cost view (prices from the scenario, per unit-hour).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cost {
    /// Cost of runs that finished.
    pub compute: f64,
    /// Cost of nominal capacity nobody used.
    pub idle: f64,
    /// Cost of runs cut short by preemption.
    pub preempted_runs: f64,
    /// Workloads that finished.
    pub accepted: usize,
    /// (compute + idle + preempted runs) / accepted.
    pub effective_per_accepted: f64,
}

/// Simulation metrics.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SimMetrics {
    /// Virtual time simulated (ms).
    pub elapsed_ms: i64,
    /// Time to admission per class.
    pub classes: BTreeMap<String, ClassStats>,
    /// Per ClusterQueue.
    pub cluster_queues: BTreeMap<String, QueueStats>,
    /// Mean utilization over ClusterQueues, percent (0 to 100).
    pub mean_utilization_pct: f64,
    /// Preemptions issued.
    pub preemptions: usize,
    /// Cost view (present when the scenario has prices).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost>,
}

/// The result of a simulation.
#[derive(Debug, Clone)]
pub struct SimOutcome {
    /// Final scheduler state.
    pub sched: Scheduler,
    /// Cycles run.
    pub cycles: u64,
    /// Metrics.
    pub metrics: SimMetrics,
    /// Time series for the report (at most ~600 points).
    pub samples: Vec<Sample>,
    /// Set when the run stopped on a livelock: with no arrival, finish, flush or timer left, the cycles kept
    /// changing the state (e.g. a preemptor evicts a workload that is readmitted before it in the next cycle)
    /// and the state after the last cycle equals the one this many cycles earlier, so it would repeat forever.
    pub repeating_every: Option<u64>,
    /// With [`SimOutcome::repeating_every`], the workloads caught in the livelock: admitted or preempted
    /// within its last period (in id order). Empty otherwise.
    pub repeating: Vec<WlId>,
}

/// Per ClusterQueue, the share of its nominal quota in use and its integral over time (see [`cq_share`]).
struct Integrals {
    /// The flavor-resources each queue has a nominal quota for, with that quota.
    nominal: Vec<Vec<(FrId, Count)>>,
    /// The current share (0 to 1).
    share: Vec<f64>,
    last: Vec<i64>,
    /// ∫share dt (ms).
    acc: Vec<f64>,
}

/// The flavor-resources `cq` has a nominal quota for (above 0, not unlimited), with that quota.
fn cq_nominal_frs(s: &Scheduler, cq: CqId) -> Vec<(FrId, Count)> {
    let t = &s.model.tree;
    let node = s.model.cqs[cq].node;
    (0..t.nfr)
        .map(|fr| (fr, t.nominal[t.ix(node, fr)]))
        .filter(|&(_, n)| n > 0 && n != UNLIMITED)
        .collect()
}

/// The share of `cq`'s nominal quota its admitted workloads use now: per flavor-resource it has a nominal
/// quota for, the usage in that resource's own unit (milli-cpu and GPUs never add up) capped at the quota
/// (what it borrows above it is its cohort's quota, not its own), averaged over those flavor-resources.
/// Between 0 and 1; 0 for a queue without nominal quota.
fn cq_share(s: &Scheduler, cq: CqId, nominal: &[(FrId, Count)]) -> f64 {
    if nominal.is_empty() {
        return 0.0;
    }
    let mut used = vec![0 as Count; nominal.len()];
    for a in s.admitted[cq]
        .iter()
        .filter_map(|&w| s.wls[w].admission.as_ref())
    {
        for &(fr, v) in &a.usage {
            if let Some(i) = nominal.iter().position(|&(f, _)| f == fr) {
                used[i] = crate::quantity::add(used[i], v);
            }
        }
    }
    let sum: f64 = nominal
        .iter()
        .zip(&used)
        .map(|(&(_, n), &u)| u.clamp(0, n) as f64 / n as f64)
        .sum();
    sum / nominal.len() as f64
}

impl Integrals {
    fn new(s: &Scheduler) -> Self {
        let ncq = s.model.cqs.len();
        let nominal: Vec<_> = (0..ncq).map(|c| cq_nominal_frs(s, c)).collect();
        Integrals {
            share: (0..ncq).map(|c| cq_share(s, c, &nominal[c])).collect(),
            nominal,
            last: vec![0; ncq],
            acc: vec![0.0; ncq],
        }
    }

    /// The current share of `cq` (what [`Integrals::touch`] would record now).
    fn current(&self, s: &Scheduler, cq: CqId) -> f64 {
        cq_share(s, cq, &self.nominal[cq])
    }

    fn touch(&mut self, s: &Scheduler, cq: CqId, now: i64) {
        self.acc[cq] += self.share[cq] * (now - self.last[cq]) as f64;
        self.last[cq] = now;
        self.share[cq] = self.current(s, cq);
    }
}

/// Price of one unit-ms of an FR amount.
fn price_per_amount_ms(
    s: &Scheduler,
    prices: &BTreeMap<String, BTreeMap<String, f64>>,
    fr: usize,
) -> f64 {
    let (f, r) = s.model.frs[fr];
    let res = &s.model.resources[r];
    let p = prices
        .get(&s.model.flavors[f].name)
        .and_then(|m| m.get(res))
        .copied()
        .unwrap_or(0.0);
    let unit = if res == "cpu" { 1000.0 } else { 1.0 };
    p / unit / 3_600_000.0
}

/// The event loop's state: pending events, counters and integrals.
struct Run<'a> {
    scenario: &'a ScenarioSpec,
    arrivals: Vec<WlId>,
    next_arrival: usize,
    finishes: BinaryHeap<Reverse<(i64, WlId, i64)>>,
    integ: Integrals,
    admissions: Vec<usize>,
    preemptions: usize,
    wasted: f64,
    compute: f64,
    raw_samples: Vec<Sample>,
    // Counters for the time series (workloads that start admitted are not counted as arrivals).
    initially_admitted: usize,
    running: usize,
    finished: usize,
    /// Cycles booked so far, and per workload the last one that admitted or preempted it (0: none).
    cycles: u64,
    changed: Vec<u64>,
}

impl<'a> Run<'a> {
    /// Queues the arrivals in time order and the finishes of workloads that start admitted.
    fn new(s: &Scheduler, scenario: &'a ScenarioSpec) -> Self {
        let n = s.wls.len();
        let mut arrivals: Vec<WlId> = (0..n)
            .filter(|&w| s.wls[w].phase == Phase::NotArrived)
            .collect();
        arrivals.sort_by_key(|&w| (s.model.workloads[w].arrival_ms, w));
        let mut finishes = BinaryHeap::new();
        let ncq = s.model.cqs.len();
        let integ = Integrals::new(s);
        // Jobs of workloads recorded as admitted run from their admission time; reserved ones
        // start when their checks are ready (`take_started`).
        for w in 0..n {
            if s.wls[w].phase == Phase::Admitted
                && let (Some(rt), Some(at)) =
                    (s.model.workloads[w].runtime_ms, s.wls[w].admitted_ms)
            {
                finishes.push(Reverse((at.saturating_add(rt).max(0), w, at)));
            }
        }
        let initially_admitted = n - arrivals.len();
        Run {
            scenario,
            arrivals,
            next_arrival: 0,
            finishes,
            integ,
            admissions: vec![0usize; ncq],
            preemptions: 0,
            wasted: 0.0,
            compute: 0.0,
            raw_samples: Vec::new(),
            initially_admitted,
            running: initially_admitted,
            finished: 0,
            cycles: 0,
            changed: vec![0; n],
        }
    }

    /// Cost of `usage` held for `ms`.
    fn usage_cost(&self, s: &Scheduler, usage: &[(FrId, Count)], ms: i64) -> f64 {
        usage
            .iter()
            .map(|&(fr, v)| {
                v as f64 * ms as f64 * price_per_amount_ms(s, &self.scenario.prices, fr)
            })
            .sum::<f64>()
    }

    /// Lets every workload whose arrival time has come arrive.
    fn arrive_due(&mut self, s: &mut Scheduler, now: i64) {
        while self.next_arrival < self.arrivals.len()
            && s.model.workloads[self.arrivals[self.next_arrival]].arrival_ms <= now
        {
            s.arrive(self.arrivals[self.next_arrival]);
            self.next_arrival += 1;
        }
    }

    /// Finishes the runs due by `now` (skipping stale entries of evicted runs), charging
    /// their compute cost.
    fn finish_due(&mut self, s: &mut Scheduler, now: i64) {
        while let Some(Reverse((t, w, at))) = self.finishes.peek().copied() {
            if t > now {
                break;
            }
            self.finishes.pop();
            if s.wls[w].phase == Phase::Admitted && s.wls[w].admitted_ms == Some(at) {
                let cq = s.wls[w].admission.as_ref().map(|a| a.cq);
                if let Some(a) = &s.wls[w].admission {
                    self.compute += self.usage_cost(s, &a.usage, t - at);
                }
                s.finish(w);
                self.finished += 1;
                self.running -= 1;
                if let Some(cq) = cq {
                    self.integ.touch(s, cq, now);
                }
            }
        }
    }

    /// Books a cycle's admissions, started runs, preemptions and lifecycle evictions.
    fn record_cycle(&mut self, s: &mut Scheduler, r: &CycleResult, now: i64) {
        self.cycles += 1;
        for &w in r.admitted.iter().chain(&r.preempted) {
            self.changed[w] = self.cycles;
        }
        for &w in &r.admitted {
            let cq = s.wls[w].admission.as_ref().map(|a| a.cq).unwrap_or(0);
            self.admissions[cq] += 1;
            self.integ.touch(s, cq, now);
        }
        // A job runs once its workload is Admitted (quota reserved and every check ready).
        for w in s.take_started() {
            if let Some(rt) = s.model.workloads[w].runtime_ms {
                self.finishes.push(Reverse((now + rt, w, now)));
            }
        }
        self.record_preemptions(s, r, now);
        let evicted = s.take_lifecycle_evictions();
        for &cq in &evicted {
            self.integ.touch(s, cq, now);
        }
        self.running =
            (self.running + r.admitted.len()).saturating_sub(r.preempted.len() + evicted.len());
    }

    /// Re-integrates the queues whose usage changed and charges the preempted runs.
    fn record_preemptions(&mut self, s: &Scheduler, r: &CycleResult, now: i64) {
        self.preemptions += r.preempted.len();
        if r.preempted.is_empty() {
            return;
        }
        for c in 0..s.model.cqs.len() {
            if (self.integ.current(s, c) - self.integ.share[c]).abs() > f64::EPSILON {
                self.integ.touch(s, c, now);
            }
        }
        for &w in &r.preempted {
            let ran = now - s.wls[w].admitted_ms.unwrap_or(now);
            if let Some(usage) = s.last_evicted_usage(w) {
                self.wasted += self.usage_cost(s, usage, ran);
            }
        }
    }

    /// Appends one point of the time series.
    fn sample(&mut self, now: i64) {
        let pending = (self.next_arrival + self.initially_admitted)
            .saturating_sub(self.running + self.finished);
        let shares = &self.integ.share;
        self.raw_samples.push(Sample {
            t_ms: now,
            pending,
            utilization: if shares.is_empty() {
                0.0
            } else {
                100.0 * shares.iter().sum::<f64>() / shares.len() as f64
            },
        });
    }

    /// The earliest pending arrival, finish, flush or timer.
    fn next_event(&self, s: &Scheduler) -> Option<i64> {
        [
            self.arrivals
                .get(self.next_arrival)
                .map(|&w| s.model.workloads[w].arrival_ms),
            self.finishes.peek().map(|r| r.0.0),
            s.next_flush_due(),
            s.next_timer(),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

/// What decides the cycles to come, every time relative to now: each workload's phase, reservation,
/// conditions and lifecycle flags, the order of the reservations, each queue's order and parked set, and the
/// pending arrivals, finishes (of live runs), flushes and timers. Equal fingerprints after two cycles mean
/// the cycles in between repeat forever (the livelock check of [`simulate_until`]).
fn state_fingerprint(s: &Scheduler, run: &Run) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let now = s.now_ms;
    // A pending arrival comes closer every cycle, so a state before the last arrival never recurs.
    run.arrivals[run.next_arrival..]
        .iter()
        .map(|&w| s.model.workloads[w].arrival_ms - now)
        .collect::<Vec<_>>()
        .hash(&mut h);
    let mut finishes: Vec<(i64, WlId)> = run
        .finishes
        .iter()
        .filter(|Reverse((_, w, at))| {
            s.wls[*w].phase == Phase::Admitted && s.wls[*w].admitted_ms == Some(*at)
        })
        .map(|Reverse((t, w, _))| (t - now, *w))
        .collect();
    finishes.sort_unstable();
    finishes.hash(&mut h);
    s.timed_fingerprint(&mut h);
    let mut reserved: Vec<(i64, WlId)> = s
        .wls
        .iter()
        .enumerate()
        .filter_map(|(w, st)| st.admission.as_ref().map(|a| (a.reserved_ms, w)))
        .collect();
    reserved.sort_unstable();
    reserved
        .iter()
        .map(|r| r.1)
        .collect::<Vec<_>>()
        .hash(&mut h);
    for w in &s.wls {
        std::mem::discriminant(&w.phase).hash(&mut h);
        match &w.admission {
            Some(a) => {
                a.cq.hash(&mut h);
                a.usage.hash(&mut h);
                for ps in &a.pod_sets {
                    (&ps.name, ps.count, &ps.resources).hash(&mut h);
                    format!("{:?}", ps.topology).hash(&mut h);
                }
            }
            None => usize::MAX.hash(&mut h),
        }
        for c in &w.conditions {
            (&c.type_, &c.status, &c.reason, &c.message).hash(&mut h);
        }
        let life = &w.life;
        (
            life.pods_ready,
            life.deactivated,
            life.requeues,
            life.check_retries,
        )
            .hash(&mut h);
        life.backoff_until.map(|t| t - now).hash(&mut h);
        format!("{:?}", life.checks).hash(&mut h);
        // The answer lists of admission checks are indexed by the reservation count.
        if !s.model.checks.is_empty() {
            life.reservations.hash(&mut h);
        }
    }
    for q in &s.queues {
        q.fingerprint(&mut h);
    }
    s.admitted.hash(&mut h);
    h.finish()
}

/// When a simulation stops (besides when nothing is left to happen).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stop {
    /// After this many scheduling cycles.
    pub cycles: Option<u64>,
    /// At this virtual time (ms): the state then, every event up to it included.
    pub until_ms: Option<i64>,
}

/// Runs the simulation: every workload arrives at its `arrival_ms`; cycles run every
/// `cycle_ms` while something changes, otherwise time jumps to the next event. Stops when
/// nothing is left to happen or after `max_cycles`; without `max_cycles`, also on a livelock (the state
/// after a cycle that changed something equals an earlier one: [`SimOutcome::repeating_every`]).
pub fn simulate(s: Scheduler, scenario: &ScenarioSpec, max_cycles: Option<u64>) -> SimOutcome {
    simulate_until(
        s,
        scenario,
        Stop {
            cycles: max_cycles,
            until_ms: None,
        },
    )
}

/// The cycles Kueue runs back to back at the stop instant: a cycle that parks its heads makes the next
/// ones heads, so a snapshot taken at `now` has every queued head evaluated (each cycle would otherwise move
/// the clock past `now`). Bounded by the workload count (each cycle pops at least one head, and a head is
/// popped again only after something changed) and by the cycles left; returns the cycles run.
fn catch_up(s: &mut Scheduler, run: &mut Run, now: i64, cycles_left: Option<u64>) -> u64 {
    let bound = u64::try_from(s.model.workloads.len())
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    let bound = cycles_left.map_or(bound, |left| left.min(bound));
    let mut ran = 0;
    while ran < bound {
        let r = s.cycle();
        ran += 1;
        run.record_cycle(s, &r, now);
        if r.heads == 0 {
            break;
        }
    }
    ran
}

/// [`simulate`] that also stops at a virtual time: with `stop.until_ms`, the report is the state
/// at that time (arrivals, finishes and timers due by then are applied, then the cycles Kueue runs
/// back to back at that instant, until every queued head was evaluated; a cycle due later is not run).
pub fn simulate_until(mut s: Scheduler, scenario: &ScenarioSpec, stop: Stop) -> SimOutcome {
    let max_cycles = stop.cycles;
    s.heads_per_cycle = scenario.heads_per_cycle.max(1);
    s.requeue_batch_ms = scenario.requeue_batch_ms.max(0);
    let cycle_ms = scenario.cycle_ms.max(1);
    let mut run = Run::new(&s, scenario);
    let mut cycles = 0u64;
    let mut now = 0i64;
    // The fingerprint after each cycle, with its cycle number.
    let mut seen: HashMap<u64, u64> = HashMap::new();
    let mut repeating_every = None;
    let mut repeating = Vec::new();
    loop {
        if let Some(until) = stop.until_ms
            && now > until
        {
            now = until;
            s.now_ms = now;
            run.arrive_due(&mut s, now);
            run.finish_due(&mut s, now);
            s.run_due_flushes();
            s.run_timers();
            cycles += catch_up(
                &mut s,
                &mut run,
                now,
                max_cycles.map(|m| m.saturating_sub(cycles)),
            );
            break;
        }
        s.now_ms = now;
        run.arrive_due(&mut s, now);
        run.finish_due(&mut s, now);
        s.run_due_flushes();
        if max_cycles.is_some_and(|m| cycles >= m) {
            break;
        }
        let r = s.cycle();
        cycles += 1;
        run.record_cycle(&mut s, &r, now);
        run.sample(now);
        let next_event = run.next_event(&s);
        // Without a bound, a cycle that changed something and led to a state seen before (times relative to
        // now) repeats forever: stop on the livelock. A bound keeps its meaning: the state after that many
        // cycles, or at that time, a livelock's phase included.
        if r.progressed()
            && max_cycles.is_none()
            && stop.until_ms.is_none()
            && let Some(before) = seen.insert(state_fingerprint(&s, &run), cycles)
        {
            repeating_every = Some(cycles - before);
            repeating = (0..s.wls.len())
                .filter(|&w| run.changed[w] > before)
                .collect();
            now += cycle_ms;
            break;
        }
        if r.progressed() {
            now += cycle_ms;
        } else {
            match (next_event, stop.until_ms) {
                (Some(t), _) => now = t.max(now + cycle_ms),
                // Nothing left to happen: the state holds until then.
                (None, Some(until)) if until > now => {
                    now = until;
                    break;
                }
                (None, _) => break,
            }
        }
    }
    s.now_ms = now;
    let elapsed = now.max(1);
    for c in 0..s.model.cqs.len() {
        run.integ.touch(&s, c, elapsed);
    }
    let (cluster_queues, mean_utilization_pct) =
        queue_stats(&s, &run.admissions, &run.integ, elapsed);
    let metrics = SimMetrics {
        elapsed_ms: now,
        classes: class_stats(&s),
        cluster_queues,
        mean_utilization_pct,
        preemptions: run.preemptions,
        cost: (!scenario.prices.is_empty())
            .then(|| cost(&s, scenario, run.compute, run.wasted, elapsed)),
    };
    let step = run.raw_samples.len().div_ceil(600).max(1);
    let samples = run.raw_samples.into_iter().step_by(step).collect();
    SimOutcome {
        sched: s,
        cycles,
        metrics,
        samples,
        repeating_every,
        repeating,
    }
}

/// Time-to-admission statistics per workload class.
fn class_stats(s: &Scheduler) -> BTreeMap<String, ClassStats> {
    let mut per_class: BTreeMap<String, (usize, Vec<i64>)> = BTreeMap::new();
    for w in 0..s.wls.len() {
        let wl = &s.model.workloads[w];
        let e = per_class.entry(wl.class.clone()).or_default();
        e.0 += 1;
        if let Some(a) = s.wls[w].first_admitted_ms {
            // Recorded admissions lie before the snapshot: they waited 0 here.
            e.1.push((a - wl.arrival_ms).max(0));
        }
    }
    let mut classes = BTreeMap::new();
    for (class, (count, mut waits)) in per_class {
        waits.sort_unstable();
        let pct = |p: usize| -> i64 {
            if waits.is_empty() {
                0
            } else {
                waits[((waits.len() - 1) * p) / 100]
            }
        };
        classes.insert(
            class,
            ClassStats {
                workloads: count,
                admitted: waits.len(),
                mean_ms: if waits.is_empty() {
                    0.0
                } else {
                    waits.iter().sum::<i64>() as f64 / waits.len() as f64
                },
                p50_ms: pct(50),
                p90_ms: pct(90),
                max_ms: waits.last().copied().unwrap_or(0),
            },
        );
    }
    classes
}

/// Per-ClusterQueue utilization and admissions, and the mean utilization over queues.
fn queue_stats(
    s: &Scheduler,
    admissions: &[usize],
    integ: &Integrals,
    elapsed: i64,
) -> (BTreeMap<String, QueueStats>, f64) {
    let mut out = BTreeMap::new();
    let mut util_sum = 0.0;
    for (c, &admitted) in admissions.iter().enumerate() {
        let u = 100.0 * integ.acc[c] / elapsed as f64;
        util_sum += u;
        out.insert(
            s.model.cqs[c].name.clone(),
            QueueStats {
                utilization_pct: u,
                admissions: admitted,
            },
        );
    }
    let ncq = s.model.cqs.len();
    let mean = if ncq > 0 { util_sum / ncq as f64 } else { 0.0 };
    (out, mean)
}

/// The cost view: nominal capacity over `elapsed` split into compute, preempted runs and idle.
fn cost(s: &Scheduler, scenario: &ScenarioSpec, compute: f64, wasted: f64, elapsed: i64) -> Cost {
    let t = &s.model.tree;
    let mut capacity = 0.0;
    for c in 0..s.model.cqs.len() {
        let node = s.model.cqs[c].node;
        for fr in 0..t.nfr {
            capacity += t.nominal[t.ix(node, fr)] as f64
                * elapsed as f64
                * price_per_amount_ms(s, &scenario.prices, fr);
        }
    }
    let accepted = (0..s.wls.len())
        .filter(|&w| s.wls[w].phase == Phase::Finished)
        .count();
    let idle = (capacity - compute - wasted).max(0.0);
    Cost {
        compute,
        idle,
        preempted_runs: wasted,
        accepted,
        effective_per_accepted: if accepted > 0 {
            (compute + idle + wasted) / accepted as f64
        } else {
            0.0
        },
    }
}
