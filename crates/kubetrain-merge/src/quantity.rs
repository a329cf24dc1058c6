//! Kubernetes quantities (`resource.Quantity`): parsing, exact arithmetic and canonical formatting.
//!
//! Only what rendering needs: sums and multiples of pod requests (PodGroup `minResources`) printed the way
//! Go's `Quantity.String()` prints them, and `Value()` (rounded up to an integer) for CPU and GPU counts.
//!
//! ```
//! use kubetrain_merge::quantity::Amount;
//! let cpu = Amount::parse("500m").unwrap().add(&Amount::parse("1.8").unwrap());
//! assert_eq!(cpu.to_string(), "2300m");
//! assert_eq!(Amount::parse("1Gi").unwrap().mul(3).to_string(), "3Gi");
//! assert_eq!(Amount::parse("2.5").unwrap().ceil(), 3);
//! ```

use std::fmt;

/// How a quantity prints, as Go's `resource.Format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Powers of 1024: `Ki`, `Mi`, `Gi`, ...
    BinarySi,
    /// Powers of 1000: `m`, `k`, `M`, ...
    DecimalSi,
    /// `e<n>` exponents.
    DecimalExponent,
}

/// An exact quantity `mantissa × 10^exponent` with the format it prints in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Amount {
    mantissa: i128,
    exponent: i32,
    format: Format,
}

/// A string that is not a Kubernetes quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid quantity {0:?}: expected a number with an optional suffix such as 500m, 2, 1.5Gi or 1e3"
)]
pub struct QuantityError(pub String);

const DECIMAL_SUFFIXES: [(&str, i32); 9] = [
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];
const BINARY_SUFFIXES: [(&str, u32); 6] = [
    ("Ki", 1),
    ("Mi", 2),
    ("Gi", 3),
    ("Ti", 4),
    ("Pi", 5),
    ("Ei", 6),
];

impl Amount {
    /// Zero, printed as `0`.
    pub const ZERO: Amount = Amount {
        mantissa: 0,
        exponent: 0,
        format: Format::DecimalSi,
    };

    /// Parses a quantity string such as `500m`, `2`, `1.5Gi` or `1e3`.
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let err = || QuantityError(text.to_owned());
        let s = text.trim();
        let split = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
            .unwrap_or(s.len());
        let (number, suffix) = s.split_at(split);
        let (negative, digits) = match number.as_bytes().first() {
            Some(b'-') => (true, &number[1..]),
            Some(b'+') => (false, &number[1..]),
            _ => (false, number),
        };
        let (int_part, frac_part) = digits.split_once('.').unwrap_or((digits, ""));
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(err());
        }
        if !int_part
            .bytes()
            .chain(frac_part.bytes())
            .all(|b| b.is_ascii_digit())
            || int_part.len() + frac_part.len() > 30
        {
            return Err(err());
        }
        let mut mantissa: i128 = 0;
        for b in int_part.bytes().chain(frac_part.bytes()) {
            mantissa = mantissa * 10 + i128::from(b - b'0');
        }
        if negative {
            mantissa = -mantissa;
        }
        let mut exponent = -(frac_part.len() as i32);
        let format = if suffix.is_empty() {
            Format::DecimalSi
        } else if let Some((_, e)) = DECIMAL_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
            exponent += e;
            Format::DecimalSi
        } else if let Some((_, p)) = BINARY_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
            mantissa = mantissa.checked_mul(1024i128.pow(*p)).ok_or_else(err)?;
            Format::BinarySi
        } else if let Some(e) = suffix.strip_prefix(['e', 'E']) {
            let e: i32 = e.parse().map_err(|_| err())?;
            if e.abs() > 30 {
                return Err(err());
            }
            exponent += e;
            Format::DecimalExponent
        } else {
            return Err(err());
        };
        Ok(Amount {
            mantissa,
            exponent,
            format,
        }
        .normalized())
    }

    /// Strips trailing zeros into the exponent so that equal values compare equal.
    fn normalized(mut self) -> Self {
        if self.mantissa == 0 {
            self.exponent = 0;
            return self;
        }
        while self.mantissa % 10 == 0 {
            self.mantissa /= 10;
            self.exponent += 1;
        }
        self
    }

    fn at_exponent(&self, exponent: i32) -> Option<i128> {
        let shift = self.exponent - exponent;
        if shift < 0 {
            return None;
        }
        self.mantissa.checked_mul(10i128.checked_pow(shift as u32)?)
    }

    /// The sum; the result keeps this amount's format unless this amount is zero (as Go's `Quantity.Add`).
    pub fn add(&self, other: &Amount) -> Amount {
        let exponent = self.exponent.min(other.exponent);
        let (Some(a), Some(b)) = (self.at_exponent(exponent), other.at_exponent(exponent)) else {
            return *self;
        };
        let format = if self.mantissa == 0 {
            other.format
        } else {
            self.format
        };
        Amount {
            mantissa: a.saturating_add(b),
            exponent,
            format,
        }
        .normalized()
    }

    /// The product with an integer count.
    pub fn mul(&self, count: i64) -> Amount {
        Amount {
            mantissa: self.mantissa.saturating_mul(i128::from(count)),
            ..*self
        }
        .normalized()
    }

    /// Orders two amounts by value.
    pub fn compare(&self, other: &Amount) -> std::cmp::Ordering {
        let exponent = self.exponent.min(other.exponent);
        match (self.at_exponent(exponent), other.at_exponent(exponent)) {
            (Some(a), Some(b)) => a.cmp(&b),
            _ => self.as_f64().total_cmp(&other.as_f64()),
        }
    }

    fn as_f64(&self) -> f64 {
        self.mantissa as f64 * 10f64.powi(self.exponent)
    }

    /// Whether the amount is zero.
    pub fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    /// The value rounded up to an integer, as Go's `Quantity.Value()`.
    pub fn ceil(&self) -> i64 {
        if self.exponent >= 0 {
            let v = self.at_exponent(0).unwrap_or(i128::MAX);
            return v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
        }
        let div = 10i128
            .checked_pow((-self.exponent) as u32)
            .unwrap_or(i128::MAX);
        let q = self.mantissa.div_euclid(div) + i128::from(self.mantissa.rem_euclid(div) != 0);
        q.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }
}

impl fmt::Display for Amount {
    /// Go's canonical form: the largest suffix that keeps an integer mantissa.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.mantissa == 0 {
            return f.write_str("0");
        }
        let mut format = self.format;
        if format == Format::BinarySi {
            let integer = self.exponent >= 0;
            let small = self.at_exponent(0).is_some_and(|v| v > -1024 && v < 1024) || !integer;
            if small || !integer {
                format = Format::DecimalSi;
            }
        }
        if format == Format::BinarySi {
            let mut value = self.at_exponent(0).unwrap_or(self.mantissa);
            let mut power = 0;
            while power < 6 && value % 1024 == 0 {
                value /= 1024;
                power += 1;
            }
            let suffix = if power == 0 {
                ""
            } else {
                BINARY_SUFFIXES[power - 1].0
            };
            return write!(f, "{value}{suffix}");
        }
        // Lower the exponent to a multiple of three (towards minus infinity), and at least nano.
        let mut exponent = self.exponent - self.exponent.rem_euclid(3);
        if format == Format::DecimalSi {
            exponent = exponent.clamp(-9, 18);
        }
        let value = self.at_exponent(exponent).unwrap_or(self.mantissa);
        let value = if exponent > self.exponent {
            // Below nano: Go rounds up to the smallest representable step.
            match 10i128.checked_pow((exponent - self.exponent) as u32) {
                Some(div) => {
                    self.mantissa.div_euclid(div) + i128::from(self.mantissa.rem_euclid(div) != 0)
                }
                None => i128::from(self.mantissa > 0),
            }
        } else {
            value
        };
        match format {
            Format::DecimalExponent if exponent == 0 => write!(f, "{value}"),
            Format::DecimalExponent => write!(f, "{value}e{exponent}"),
            _ => {
                let suffix = DECIMAL_SUFFIXES
                    .iter()
                    .find(|(_, e)| *e == exponent)
                    .map_or("", |(s, _)| *s);
                write!(f, "{value}{suffix}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_forms_match_go() {
        let cases = [
            ("2", "2"),
            ("0.5", "500m"),
            ("1.5", "1500m"),
            ("2300m", "2300m"),
            ("1000m", "1"),
            ("1024Mi", "1Gi"),
            ("1.5Gi", "1536Mi"),
            ("512", "512"),
            ("1k", "1k"),
            ("1e3", "1e3"),
            ("100M", "100M"),
            ("0", "0"),
            ("0.7", "700m"),
        ];
        for (input, want) in cases {
            assert_eq!(Amount::parse(input).unwrap().to_string(), want, "{input}");
        }
    }

    #[test]
    fn arithmetic() {
        let a = |s: &str| Amount::parse(s).unwrap();
        assert_eq!(
            a("1").add(&a("300m")).mul(1).add(&a("1")).to_string(),
            "2300m"
        );
        assert_eq!(a("1Gi").mul(2).add(&a("1Gi")).to_string(), "3Gi");
        assert_eq!(Amount::ZERO.add(&a("1Gi")).to_string(), "1Gi");
        assert_eq!(a("2").mul(0).to_string(), "0");
        for (s, want) in [
            ("2.5", 3),
            ("0.7", 1),
            ("3", 3),
            ("100m", 1),
            ("0", 0),
            ("1Ki", 1024),
        ] {
            assert_eq!(a(s).ceil(), want, "{s}");
        }
    }

    #[test]
    fn extreme_exponents_do_not_panic() {
        for s in [
            "0.000000000000000000000000001e-30",
            "999999999999999999999999999999e30",
            "1e-30",
            "1Ei",
        ] {
            let a = Amount::parse(s).unwrap();
            let _ = (
                a.to_string(),
                a.ceil(),
                a.mul(i64::MAX).to_string(),
                a.add(&Amount::parse("1n").unwrap()).to_string(),
            );
        }
    }

    #[test]
    fn rejects_garbage() {
        for s in ["", "abc", "1.2.3", "5x", "--1", "1e", "."] {
            assert!(Amount::parse(s).is_err(), "{s}");
        }
    }
}
