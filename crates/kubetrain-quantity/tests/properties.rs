//! Properties of the one quantity parser: its readings agree with each other, and the canonical form reads
//! back as the same value.

use std::cmp::Ordering;

use kubetrain_quantity::{Amount, Nanos, Quantity, canonical, count::UNLIMITED};
use proptest::prelude::*;

/// Quantity strings as people write them: an optional sign, up to 12 integer digits, up to 6 decimals and a
/// suffix (none, decimal SI, binary SI or an exponent).
fn quantity_text() -> impl Strategy<Value = String> {
    let suffix = prop_oneof![
        Just(String::new()),
        prop::sample::select(vec!["n", "u", "m", "k", "M", "G", "T", "P", "E"])
            .prop_map(String::from),
        prop::sample::select(vec!["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]).prop_map(String::from),
        (-12i32..=12).prop_map(|e| format!("e{e}")),
    ];
    (
        prop::sample::select(vec!["", "+", "-"]),
        "[0-9]{1,12}",
        prop::option::of("[0-9]{0,6}"),
        suffix,
    )
        .prop_map(|(sign, int, frac, suffix)| match frac {
            Some(f) => format!("{sign}{int}.{f}{suffix}"),
            None => format!("{sign}{int}{suffix}"),
        })
}

/// Whether the exact value is a whole number of nano-units (so [`Nanos`] holds it without rounding).
fn whole_nanos(a: &Amount) -> bool {
    let n = a.nanos();
    Amount::parse(&format!("{}n", n.0)).is_ok_and(|b| b.compare(a) == Ordering::Equal)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The canonical form reads back as the same value (Go's `String()` round trip), at or above a nano.
    #[test]
    fn canonical_form_reads_back(text in quantity_text()) {
        let a = Amount::parse(&text).unwrap();
        let c = canonical(&text).unwrap();
        let b = Amount::parse(&c).unwrap();
        if whole_nanos(&a) {
            prop_assert_eq!(a.compare(&b), Ordering::Equal, "{} -> {}", text, c);
            prop_assert_eq!(canonical(&c), Some(c.clone()), "canonical is a fixed point");
        } else {
            // Below a nano Go rounds the printed value up to the next nano.
            prop_assert_eq!(b.nanos(), a.nanos(), "{} -> {}", text, c);
        }
    }

    /// Kueue's counts equal Go's rounded readings of the same value (for values that are not negative).
    #[test]
    fn counts_agree_with_go_readings(text in quantity_text()) {
        let q = Quantity::parse(&text).unwrap();
        let n = Nanos::parse(&text).unwrap();
        prop_assume!(n.0 >= 0);
        let clamp = |v: i64| if v == i64::MAX { UNLIMITED } else { v };
        prop_assert_eq!(q.count_for("cpu"), clamp(n.ceil_millis()), "{}", text);
        prop_assert_eq!(q.count_for("nvidia.com/gpu"), clamp(n.ceil_units()), "{}", text);
        prop_assert_eq!(q.count_for("memory"), clamp(n.ceil_units()), "{}", text);
    }

    /// Ordering and sums agree with the nano-unit values whenever those are exact.
    #[test]
    fn compare_and_add_agree_with_nanos(a in quantity_text(), b in quantity_text()) {
        let (x, y) = (Amount::parse(&a).unwrap(), Amount::parse(&b).unwrap());
        prop_assume!(whole_nanos(&x) && whole_nanos(&y));
        prop_assert_eq!(x.compare(&y), x.nanos().cmp(&y.nanos()), "{} vs {}", a, b);
        prop_assert_eq!(x.add(&y).nanos().0, x.nanos().0 + y.nanos().0, "{} + {}", a, b);
        prop_assert_eq!(x.add(&y).compare(&y.add(&x)), Ordering::Equal);
    }

    /// Any string: parsing never panics, and the parsers agree on what is a quantity.
    #[test]
    fn any_text_is_answered(text in "\\PC{0,24}") {
        let a = Amount::parse(&text);
        prop_assert_eq!(a.is_ok(), Quantity::parse(&text).is_ok());
        prop_assert_eq!(a.is_ok(), Nanos::parse(&text).is_ok());
        if let Ok(a) = a {
            let _ = (a.to_string(), a.ceil(), a.nanos());
        }
    }
}
