use super::*;
use proptest::prelude::*;

fn key(name: &str) -> Key {
    ("team-a".to_owned(), name.to_owned())
}

fn line(period_s: u64, burst: u32, start: Instant) -> CountWrites {
    let budget = CountWriteBudget {
        period: Duration::from_secs(period_s),
        burst,
    };
    CountWrites::new(budget, start, Gauge::default())
}

/// A line of one token per 5 s whose token "a" took at the start; `at(s)` is `s` seconds after the start.
fn spent_line() -> (CountWrites, impl Fn(u64) -> Instant) {
    let start = Instant::now();
    let writes = line(5, 1, start);
    assert_eq!(writes.request(&key("a"), "ua", start), Verdict::Write);
    (writes, move |secs| start + Duration::from_secs(secs))
}

fn everyone_exists(_: &Key, _: &str) -> bool {
    true
}

#[test]
fn the_burst_goes_out_at_once_and_the_rest_waits_in_line() {
    let start = Instant::now();
    let writes = line(5, 2, start);
    assert_eq!(writes.request(&key("a"), "ua", start), Verdict::Write);
    assert_eq!(writes.request(&key("b"), "ub", start), Verdict::Write);
    assert_eq!(writes.request(&key("c"), "uc", start), Verdict::Wait);
    // A later change of the same TrainJob keeps its place and does not jump the line.
    assert_eq!(writes.request(&key("c"), "uc", start), Verdict::Wait);
    assert_eq!(writes.request(&key("d"), "ud", start), Verdict::Wait);
    assert_eq!(writes.waiting(), 2);
    assert_eq!(
        writes.next_turn(start, everyone_exists),
        Turn::After(Duration::from_secs(5))
    );
}

#[test]
fn turns_come_oldest_first_one_per_period_and_are_taken_by_the_next_request() {
    let (writes, at) = spent_line();
    for name in ["b", "c"] {
        assert_eq!(writes.request(&key(name), name, at(1)), Verdict::Wait);
    }
    assert_eq!(
        writes.next_turn(at(5), everyone_exists),
        Turn::Reconcile(key("b"))
    );
    assert_eq!(
        writes.next_turn(at(5), everyone_exists),
        Turn::After(Duration::from_secs(5))
    );
    // A TrainJob joining now waits behind "c", though "b" has not written yet.
    assert_eq!(writes.request(&key("d"), "d", at(6)), Verdict::Wait);
    assert_eq!(writes.request(&key("b"), "b", at(6)), Verdict::Write);
    assert_eq!(
        writes.next_turn(at(10), everyone_exists),
        Turn::Reconcile(key("c"))
    );
    assert_eq!(writes.request(&key("c"), "c", at(10)), Verdict::Write);
    assert_eq!(
        writes.next_turn(at(15), everyone_exists),
        Turn::Reconcile(key("d"))
    );
    assert_eq!(writes.request(&key("d"), "d", at(15)), Verdict::Write);
    assert_eq!(writes.next_turn(at(15), everyone_exists), Turn::Idle);
    assert_eq!(writes.waiting(), 0);
}

#[test]
fn a_withdrawn_turn_gives_its_token_back_and_a_withdrawn_place_is_skipped() {
    let (writes, at) = spent_line();
    for name in ["b", "c", "d"] {
        assert_eq!(writes.request(&key(name), name, at(0)), Verdict::Wait);
    }
    // "c" finished meanwhile: its final write carried the counts.
    writes.withdraw(&key("c"));
    assert_eq!(
        writes.next_turn(at(5), everyone_exists),
        Turn::Reconcile(key("b"))
    );
    // "b"'s reconcile found a condition to write after all: the token goes to "d" at once.
    writes.withdraw(&key("b"));
    assert_eq!(
        writes.next_turn(at(5), everyone_exists),
        Turn::Reconcile(key("d"))
    );
    assert_eq!(writes.request(&key("d"), "d", at(5)), Verdict::Write);
    assert_eq!(writes.waiting(), 0);
}

#[test]
fn a_deleted_trainjob_leaves_the_line_without_a_token_and_an_untaken_turn_expires() {
    let (writes, at) = spent_line();
    assert_eq!(
        writes.request(&key("gone"), "old-uid", at(0)),
        Verdict::Wait
    );
    assert_eq!(writes.request(&key("b"), "ub", at(0)), Verdict::Wait);
    let b_only = |k: &Key, uid: &str| k == &key("b") && uid == "ub";
    assert_eq!(writes.next_turn(at(5), b_only), Turn::Reconcile(key("b")));
    // "b" never takes its turn (its reconcile was skipped): after a minute it no longer counts as waiting.
    assert_eq!(writes.waiting(), 1);
    assert_eq!(writes.next_turn(at(66), everyone_exists), Turn::Idle);
    assert_eq!(writes.waiting(), 0);
}

#[test]
fn a_zero_period_never_makes_anyone_wait() {
    let start = Instant::now();
    let writes = line(0, 1, start);
    for name in ["a", "b", "c"] {
        assert_eq!(writes.request(&key(name), name, start), Verdict::Write);
    }
}

#[derive(Clone, Debug)]
enum Op {
    Request(u8),
    Withdraw(u8),
    Pump,
    Advance(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..12).prop_map(Op::Request),
        1 => (0u8..12).prop_map(Op::Withdraw),
        3 => Just(Op::Pump),
        2 => (0u16..3_000).prop_map(Op::Advance),
    ]
}

proptest! {
    /// However requests, withdrawals and turns interleave, no more count writes go out than the budget earned
    /// (the burst plus one per period), and every waiting TrainJob gets its turn once tokens come.
    #[test]
    fn writes_never_exceed_the_budget_and_every_waiter_gets_a_turn(
        ops in prop::collection::vec(op(), 1..200),
        burst in 1u32..5,
    ) {
        let start = Instant::now();
        let period = Duration::from_millis(1_000);
        let writes = CountWrites::new(CountWriteBudget { period, burst }, start, Gauge::default());
        let (mut now, mut written) = (start, 0u64);
        for op in ops {
            match op {
                Op::Request(i) => {
                    if writes.request(&key(&i.to_string()), "uid", now) == Verdict::Write {
                        written += 1;
                    }
                }
                Op::Withdraw(i) => writes.withdraw(&key(&i.to_string())),
                Op::Pump => {
                    if let Turn::Reconcile(k) = writes.next_turn(now, everyone_exists) {
                        prop_assert_eq!(writes.request(&k, "uid", now), Verdict::Write);
                        written += 1;
                    }
                }
                Op::Advance(ms) => now += Duration::from_millis(u64::from(ms)),
            }
            let earned = u64::from(burst) + (now - start).as_millis() as u64 / 1_000;
            prop_assert!(written <= earned, "{written} writes with {earned} tokens earned");
        }
        // Liveness: with time enough, the pump serves everyone still waiting.
        for _ in 0..24 {
            now += period;
            if let Turn::Reconcile(k) = writes.next_turn(now, everyone_exists) {
                prop_assert_eq!(writes.request(&k, "uid", now), Verdict::Write);
            }
        }
        prop_assert_eq!(writes.waiting(), 0);
    }
}
