//! Kubernetes quantities as Kueue counts them: exact integers, cpu in milli-units, every other
//! resource in base units rounded up, saturating at an `Unlimited` sentinel (kueue.md §2.1).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An amount of one resource: milli-cpu for `cpu`, base units (bytes, GPUs, pods…) otherwise.
pub type Amount = i64;

/// The sentinel for quantities too large to represent; it stays unlimited under add and subtract.
pub const UNLIMITED: Amount = i64::MAX;

/// Why a quantity string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$', got {0:?}"
)]
pub struct QuantityError(pub String);

/// A parsed Kubernetes quantity (`500m`, `36Gi`, `4`, `1e3`), kept exactly in milli-units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantity {
    /// The value in milli-units, rounded up; `None` when it does not fit an `i128`.
    milli: Option<i128>,
    /// The text it was parsed from, for messages.
    text: String,
}

impl Quantity {
    /// Parses the Kubernetes quantity syntax.
    ///
    /// ```
    /// use kubetrain_kueue::quantity::Quantity;
    /// assert_eq!(Quantity::parse("500m").unwrap().amount_for("cpu"), 500);
    /// assert_eq!(Quantity::parse("1Ki").unwrap().amount_for("memory"), 1024);
    /// assert_eq!(Quantity::parse("1500m").unwrap().amount_for("nvidia.com/gpu"), 2);
    /// ```
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let err = || QuantityError(text.to_string());
        let s = text.trim();
        let (negative, rest) = match s.as_bytes().first() {
            Some(b'-') => (true, &s[1..]),
            Some(b'+') => (false, &s[1..]),
            _ => (false, s),
        };
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(num_end);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(err());
        }
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        let (exp10, exp2) = parse_suffix(suffix).ok_or_else(err)?;
        let mut digits: i128 = 0;
        let mut overflow = false;
        for c in int_part.chars().chain(frac_part.chars()) {
            let d = i128::from(c as u8 - b'0');
            match digits.checked_mul(10).and_then(|v| v.checked_add(d)) {
                Some(v) => digits = v,
                None => overflow = true,
            }
        }
        let scale = exp10 + 3 - frac_part.len() as i64;
        let milli = if overflow {
            None
        } else {
            scale_exact(digits, scale, exp2)
        };
        let milli = milli.map(|m| if negative { -m } else { m });
        Ok(Self {
            milli,
            text: text.to_string(),
        })
    }

    /// A quantity of `units` base units.
    pub fn from_units(units: i64) -> Self {
        Self {
            milli: Some(i128::from(units) * 1000),
            text: units.to_string(),
        }
    }

    /// The value in milli-units rounded up (`None` = too large for an `i64`).
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

    /// The amount Kueue counts for `resource`: milli-units for `cpu`, base units (rounded up)
    /// otherwise; [`UNLIMITED`] when out of range.
    pub fn amount_for(&self, resource: &str) -> Amount {
        let v = match self.milli {
            None => return UNLIMITED,
            Some(m) if resource == "cpu" => m,
            Some(m) => m.div_euclid(1000) + i128::from(m.rem_euclid(1000) != 0),
        };
        i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { UNLIMITED })
    }
}

fn parse_suffix(suffix: &str) -> Option<(i64, u32)> {
    Some(match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        s if s.starts_with(['e', 'E']) => {
            let exp: i64 = s[1..].parse().ok()?;
            if !(-100..=100).contains(&exp) {
                return None;
            }
            (exp, 0)
        }
        _ => return None,
    })
}

/// `digits × 10^scale × 2^exp2`, rounded up, if it fits an `i128`.
fn scale_exact(digits: i128, scale: i64, exp2: u32) -> Option<i128> {
    let mut v = digits.checked_mul(1i128.checked_shl(exp2)?)?;
    if scale >= 0 {
        for _ in 0..scale {
            v = v.checked_mul(10)?;
        }
    } else {
        let mut div: i128 = 1;
        for _ in 0..(-scale) {
            div = match div.checked_mul(10) {
                Some(d) => d,
                // The divisor is beyond every representable value: anything non-zero rounds up to 1.
                None => return Some(i128::from(v != 0)),
            };
        }
        v = v / div + i128::from(v % div != 0);
    }
    Some(v)
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

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
                    return Err(E::custom(QuantityError(v.to_string())));
                }
                Quantity::parse(&format!("{v}")).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// Whether `resource` prints in binary units (memory-like resources, kueue.md §2.1).
fn is_binary(resource: &str) -> bool {
    resource == "memory" || resource == "ephemeral-storage" || resource.starts_with("hugepages-")
}

/// Formats an amount the way Kueue prints it in messages: cpu as a milli-quantity ("500m", "5"),
/// memory-like resources in binary SI ("10Mi"), everything else in decimal SI ("4", "1k").
///
/// ```
/// use kubetrain_kueue::quantity::format_amount;
/// assert_eq!(format_amount("cpu", 500), "500m");
/// assert_eq!(format_amount("cpu", 60_000), "60");
/// assert_eq!(format_amount("memory", 3 << 30), "3Gi");
/// assert_eq!(format_amount("nvidia.com/gpu", 4), "4");
/// ```
pub fn format_amount(resource: &str, amount: Amount) -> String {
    if amount == UNLIMITED {
        return "unlimited".to_string();
    }
    if resource == "cpu" {
        if amount % 1000 == 0 {
            return decimal_si(amount / 1000);
        }
        return format!("{amount}m");
    }
    if is_binary(resource) {
        return binary_si(amount);
    }
    decimal_si(amount)
}

fn decimal_si(v: i64) -> String {
    const SUFFIXES: [&str; 7] = ["", "k", "M", "G", "T", "P", "E"];
    if v == 0 {
        return "0".to_string();
    }
    let mut v = v;
    let mut i = 0;
    while v % 1000 == 0 && i + 1 < SUFFIXES.len() {
        v /= 1000;
        i += 1;
    }
    format!("{v}{}", SUFFIXES[i])
}

fn binary_si(v: i64) -> String {
    const SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    if v == 0 {
        return "0".to_string();
    }
    let mut v = v;
    let mut i = 0;
    while v % 1024 == 0 && i + 1 < SUFFIXES.len() {
        v /= 1024;
        i += 1;
    }
    if i == 0 {
        return decimal_si(v);
    }
    format!("{v}{}", SUFFIXES[i])
}

/// Saturating addition that keeps [`UNLIMITED`] unlimited.
pub fn add(a: Amount, b: Amount) -> Amount {
    if a == UNLIMITED || b == UNLIMITED {
        UNLIMITED
    } else {
        a.saturating_add(b)
    }
}

/// Saturating subtraction that keeps [`UNLIMITED`] unlimited.
pub fn sub(a: Amount, b: Amount) -> Amount {
    if a == UNLIMITED {
        UNLIMITED
    } else if b == UNLIMITED {
        i64::MIN
    } else {
        a.saturating_sub(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_table() {
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
            ("99999999999999999999999", "cpu", UNLIMITED),
            ("9E", "memory", 9_000_000_000_000_000_000),
            ("10E", "memory", UNLIMITED),
        ];
        for (text, res, want) in cases {
            let q = Quantity::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(q.amount_for(res), *want, "{text} as {res}");
        }
    }

    #[test]
    fn rejects_garbage() {
        for text in ["", "abc", "1.2.3", "5Xi", "m", ".", "1e999", "--1"] {
            assert!(Quantity::parse(text).is_err(), "{text:?} should fail");
        }
    }

    #[test]
    fn formats_like_kueue() {
        let cases: &[(&str, i64, &str)] = &[
            ("cpu", 500, "500m"),
            ("cpu", 5000, "5"),
            ("cpu", 1_000_000, "1k"),
            ("memory", 10 << 20, "10Mi"),
            ("memory", 1536, "1536"),
            ("memory", 1000, "1k"),
            ("nvidia.com/gpu", 4, "4"),
            ("pods", 0, "0"),
        ];
        for (res, amount, want) in cases {
            assert_eq!(format_amount(res, *amount), *want);
        }
    }

    #[test]
    fn saturating_arithmetic_keeps_unlimited() {
        assert_eq!(add(UNLIMITED, 5), UNLIMITED);
        assert_eq!(sub(UNLIMITED, 5), UNLIMITED);
        assert_eq!(add(i64::MAX - 1, 5), UNLIMITED);
        assert_eq!(sub(3, 5), -2);
    }
}
