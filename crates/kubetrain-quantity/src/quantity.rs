//! [`Quantity`]: a quantity as it was written, with its exact value, read the way Kueue counts it.

use std::fmt;

use crate::amount::{Amount, InvalidQuantity};
use crate::count::{Count, UNLIMITED};

/// A parsed quantity that keeps the text it was written as (`500m`, `36Gi`, `4`, `1e3`) for messages and
/// serialization, and its exact [`Amount`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantity {
    amount: Amount,
    /// The value in milli-units, its magnitude rounded up; `None` when it does not fit an `i128`.
    milli: Option<i128>,
    text: String,
}

impl Quantity {
    /// Parses the Kubernetes quantity syntax (the grammar of [`Amount::parse`]).
    ///
    /// ```
    /// use kubetrain_quantity::Quantity;
    /// assert_eq!(Quantity::parse("500m").unwrap().count_for("cpu"), 500);
    /// assert_eq!(Quantity::parse("1Ki").unwrap().count_for("memory"), 1024);
    /// assert_eq!(Quantity::parse("1500m").unwrap().count_for("nvidia.com/gpu"), 2);
    /// ```
    pub fn parse(text: &str) -> Result<Self, InvalidQuantity> {
        let amount = Amount::parse(text)?;
        Ok(Self {
            milli: amount.scaled_away_from_zero(-3),
            amount,
            text: text.to_string(),
        })
    }

    /// A quantity of `units` base units.
    pub fn from_units(units: i64) -> Self {
        Self {
            amount: Amount::parse(&units.to_string()).unwrap_or(Amount::ZERO),
            milli: Some(i128::from(units) * 1000),
            text: units.to_string(),
        }
    }

    /// The exact value.
    pub fn amount(&self) -> &Amount {
        &self.amount
    }

    /// The value in milli-units, its magnitude rounded up (`None` = too large for an `i64`).
    pub fn milli(&self) -> Option<i64> {
        self.milli.and_then(|m| i64::try_from(m).ok())
    }

    /// Whether the quantity is below zero.
    pub fn is_negative(&self) -> bool {
        self.milli.is_some_and(|m| m < 0)
    }

    /// The text it was written as.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The [`Count`] Kueue keeps for `resource`: milli-units for `cpu`, base units (rounded up) otherwise;
    /// [`UNLIMITED`] when out of range.
    pub fn count_for(&self, resource: &str) -> Count {
        let v = match self.milli {
            None => return UNLIMITED,
            Some(m) if resource == "cpu" => m,
            Some(m) => m.div_euclid(1000) + i128::from(m.rem_euclid(1000) != 0),
        };
        i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { UNLIMITED })
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(feature = "serde")]
mod serde_impls {
    use std::fmt;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Quantity;
    use crate::amount::InvalidQuantity;

    impl Serialize for Quantity {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(&self.text)
        }
    }

    impl<'de> Deserialize<'de> for Quantity {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl serde::de::Visitor<'_> for V {
                type Value = Quantity;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a quantity such as 4, 500m or 36Gi")
                }
                fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Quantity, E> {
                    Quantity::parse(v).map_err(E::custom)
                }
                fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Quantity, E> {
                    Quantity::parse(&v.to_string()).map_err(E::custom)
                }
                fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Quantity, E> {
                    Quantity::parse(&v.to_string()).map_err(E::custom)
                }
                fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Quantity, E> {
                    if !v.is_finite() {
                        return Err(E::custom(InvalidQuantity(v.to_string())));
                    }
                    Quantity::parse(&format!("{v}")).map_err(E::custom)
                }
            }
            d.deserialize_any(V)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_like_kueue() {
        let cases: &[(&str, &str, i64)] = &[
            ("4", "cpu", 4000),
            ("500m", "cpu", 500),
            ("0.5", "cpu", 500),
            ("1.5", "nvidia.com/gpu", 2),
            ("36Gi", "memory", 36 << 30),
            ("1k", "pods", 1000),
            ("1e3", "pods", 1000),
            ("1E-3", "cpu", 1),
            ("100u", "cpu", 1),
            ("1n", "memory", 1),
            ("+2", "cpu", 2000),
            ("-1", "cpu", -1000),
            ("-1500u", "cpu", -2),
            ("99999999999999999999999", "cpu", UNLIMITED),
            ("9E", "memory", 9_000_000_000_000_000_000),
            ("10E", "memory", UNLIMITED),
            ("1e999", "memory", UNLIMITED),
            ("1e-999", "cpu", 1),
        ];
        for (text, res, want) in cases {
            let q = Quantity::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(q.count_for(res), *want, "{text} as {res}");
        }
    }

    #[test]
    fn rejects_garbage() {
        for text in ["", "abc", "1.2.3", "5Xi", "m", ".", "1e1001", "--1"] {
            assert!(Quantity::parse(text).is_err(), "{text:?} should fail");
        }
    }

    #[test]
    fn keeps_its_text() {
        let q = Quantity::parse("1.5Gi").unwrap();
        assert_eq!((q.text(), q.to_string()), ("1.5Gi", "1.5Gi".to_string()));
        assert_eq!(q.amount().to_string(), "1536Mi");
        assert_eq!(Quantity::from_units(8).text(), "8");
        assert_eq!(Quantity::from_units(8).count_for("cpu"), 8000);
        assert_eq!(
            Quantity::from_units(8).amount(),
            Quantity::parse("8").unwrap().amount()
        );
        assert!(Quantity::parse("-1").unwrap().is_negative());
        assert_eq!(Quantity::parse("10E").unwrap().milli(), None);
    }

    #[cfg(feature = "serde")]
    #[test]
    fn serde_reads_strings_and_numbers() {
        let q: Quantity = serde_json::from_str("\"500m\"").unwrap();
        assert_eq!(q.count_for("cpu"), 500);
        let q: Quantity = serde_json::from_str("2").unwrap();
        assert_eq!(q.count_for("cpu"), 2000);
        let q: Quantity = serde_json::from_str("0.5").unwrap();
        assert_eq!(q.count_for("cpu"), 500);
        assert_eq!(serde_json::to_string(&q).unwrap(), "\"0.5\"");
        let e = serde_json::from_str::<Quantity>("\"5Xi\"").unwrap_err();
        assert!(e.to_string().contains("quantities must match"), "{e}");
    }
}
