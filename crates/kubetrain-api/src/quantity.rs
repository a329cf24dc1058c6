//! Exact reading of Kubernetes quantities (`500m`, `2`, `1.5Gi`, `1e3`).
//!
//! Values are held as nano-units in an `i128`, enough for every quantity Kubernetes accepts, so sums and
//! comparisons are exact (no floating point).

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A parsed quantity in nano-units (10⁻⁹ of the base unit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Nanos(pub i128);

/// Why a quantity string is not a Kubernetes quantity.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {0:?}"
)]
pub struct InvalidQuantity(pub String);

const NANO: i128 = 1_000_000_000;

impl Nanos {
    /// Parses a quantity string.
    pub fn parse(text: &str) -> Result<Self, InvalidQuantity> {
        let invalid = || InvalidQuantity(text.to_owned());
        let trimmed = text.trim();
        let split = trimmed
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
            .unwrap_or(trimmed.len());
        let (number, suffix) = trimmed.split_at(split);
        if number.is_empty() {
            return Err(invalid());
        }
        let (negative, digits) = match number.as_bytes()[0] {
            b'-' => (true, &number[1..]),
            b'+' => (false, &number[1..]),
            _ => (false, number),
        };
        let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
        if whole.is_empty() && fraction.is_empty()
            || !whole.bytes().all(|b| b.is_ascii_digit())
            || !fraction.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(invalid());
        }
        // mantissa × 10^-scale
        let mut mantissa: i128 = 0;
        for b in whole.bytes().chain(fraction.bytes()) {
            mantissa = mantissa
                .checked_mul(10)
                .and_then(|m| m.checked_add(i128::from(b - b'0')))
                .ok_or_else(invalid)?;
        }
        let scale = i32::try_from(fraction.len()).map_err(|_| invalid())?;
        let (binary, decimal_exp): (i128, i32) = match suffix {
            "" => (1, 0),
            "n" => (1, -9),
            "u" => (1, -6),
            "m" => (1, -3),
            "k" => (1, 3),
            "M" => (1, 6),
            "G" => (1, 9),
            "T" => (1, 12),
            "P" => (1, 15),
            "E" => (1, 18),
            "Ki" => (1 << 10, 0),
            "Mi" => (1 << 20, 0),
            "Gi" => (1 << 30, 0),
            "Ti" => (1 << 40, 0),
            "Pi" => (1 << 50, 0),
            "Ei" => (1 << 60, 0),
            exp if exp.starts_with(['e', 'E']) => {
                (1, exp[1..].parse::<i32>().map_err(|_| invalid())?)
            }
            _ => return Err(invalid()),
        };
        // nanos = mantissa × binary × 10^(decimal_exp - scale + 9), rounded up like Kubernetes does.
        let power = decimal_exp - scale + 9;
        let mut value = mantissa.checked_mul(binary).ok_or_else(invalid)?;
        if power >= 0 {
            let factor = 10i128
                .checked_pow(u32::try_from(power).map_err(|_| invalid())?)
                .ok_or_else(invalid)?;
            value = value.checked_mul(factor).ok_or_else(invalid)?;
        } else {
            let divisor = 10i128
                .checked_pow(u32::try_from(-power).map_err(|_| invalid())?)
                .unwrap_or(i128::MAX);
            value = value / divisor + i128::from(value % divisor != 0);
        }
        Ok(Nanos(if negative { -value } else { value }))
    }

    /// Reads a `k8s-openapi` quantity.
    pub fn from_quantity(quantity: &Quantity) -> Result<Self, InvalidQuantity> {
        Self::parse(&quantity.0)
    }

    /// The value rounded up to a whole unit, like Go's `Quantity.Value()` (`2.5` → 3, `700m` → 1).
    pub fn ceil_units(self) -> i64 {
        let units = self.0.div_euclid(NANO) + i128::from(self.0.rem_euclid(NANO) != 0);
        i64::try_from(units).unwrap_or(if units < 0 { i64::MIN } else { i64::MAX })
    }

    /// The value in milli-units, rounded up, like Go's `Quantity.MilliValue()`.
    pub fn ceil_millis(self) -> i64 {
        let per_milli = NANO / 1000;
        let millis = self.0.div_euclid(per_milli) + i128::from(self.0.rem_euclid(per_milli) != 0);
        i64::try_from(millis).unwrap_or(if millis < 0 { i64::MIN } else { i64::MAX })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_suffixes_kubernetes_accepts() {
        let cases = [
            ("1", NANO),
            ("500m", NANO / 2),
            ("2.5", 5 * NANO / 2),
            ("1Ki", 1024 * NANO),
            ("1.5Gi", 3 * (1 << 29) * NANO),
            ("1e3", 1000 * NANO),
            ("1E-3", NANO / 1000),
            ("100n", 100),
            ("+4", 4 * NANO),
            ("-1", -NANO),
            (".5", NANO / 2),
        ];
        for (text, nanos) in cases {
            assert_eq!(Nanos::parse(text), Ok(Nanos(nanos)), "{text}");
        }
    }

    #[test]
    fn rejects_what_is_not_a_quantity() {
        for text in ["", "abc", "1x", "1.2.3", "m", "1Gb", "--1"] {
            assert!(Nanos::parse(text).is_err(), "{text}");
        }
    }

    #[test]
    fn rounds_up_like_go() {
        assert_eq!(Nanos::parse("2.5").map(Nanos::ceil_units), Ok(3));
        assert_eq!(Nanos::parse("700m").map(Nanos::ceil_units), Ok(1));
        assert_eq!(Nanos::parse("4").map(Nanos::ceil_units), Ok(4));
        assert_eq!(Nanos::parse("1.0005").map(Nanos::ceil_millis), Ok(1001));
    }
}
