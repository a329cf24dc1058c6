//! [`Amount`]: the exact value of a quantity, its arithmetic and Go's canonical text form; [`Nanos`], the value in
//! nano-units for comparisons and Go's `Value()` / `MilliValue()` readings.

use std::fmt;

/// A string that is not a Kubernetes quantity (the API server's message, with the accepted forms).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {0:?} (e.g. 500m, 2, 1.5Gi or 1e3)"
)]
pub struct InvalidQuantity(pub String);

/// The error of [`Amount::parse`] and [`Quantity::parse`](crate::Quantity::parse); the same type as
/// [`InvalidQuantity`] (the name `kubetrain-merge` and the Kueue model used).
pub type QuantityError = InvalidQuantity;

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
/// Largest `e<n>` exponent accepted; far beyond any resource, small enough that exponent arithmetic never
/// overflows.
const MAX_EXPONENT: i32 = 1000;

impl Amount {
    /// Zero, printed as `0`.
    pub const ZERO: Amount = Amount {
        mantissa: 0,
        exponent: 0,
        format: Format::DecimalSi,
    };

    /// Parses a quantity string such as `500m`, `2`, `1.5Gi` or `1e3` (surrounding spaces are ignored).
    pub fn parse(text: &str) -> Result<Self, InvalidQuantity> {
        let err = || InvalidQuantity(text.to_owned());
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
        if (int_part.is_empty() && frac_part.is_empty())
            || !int_part
                .bytes()
                .chain(frac_part.bytes())
                .all(|b| b.is_ascii_digit())
        {
            return Err(err());
        }
        let mut mantissa: i128 = 0;
        for b in int_part.bytes().chain(frac_part.bytes()) {
            mantissa = mantissa
                .checked_mul(10)
                .and_then(|m| m.checked_add(i128::from(b - b'0')))
                .ok_or_else(err)?;
        }
        if negative {
            mantissa = -mantissa;
        }
        let mut exponent = -i32::try_from(frac_part.len()).map_err(|_| err())?;
        let format = if suffix.is_empty() {
            Format::DecimalSi
        } else if let Some((_, e)) = DECIMAL_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
            exponent = exponent.checked_add(*e).ok_or_else(err)?;
            Format::DecimalSi
        } else if let Some((_, p)) = BINARY_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
            mantissa = mantissa.checked_mul(1024i128.pow(*p)).ok_or_else(err)?;
            Format::BinarySi
        } else if let Some(e) = suffix.strip_prefix(['e', 'E']) {
            let e: i32 = e.parse().map_err(|_| err())?;
            if e.abs() > MAX_EXPONENT {
                return Err(err());
            }
            exponent = exponent.checked_add(e).ok_or_else(err)?;
            Format::DecimalExponent
        } else {
            return Err(err());
        };
        if exponent.abs() > 2 * MAX_EXPONENT {
            return Err(err());
        }
        Ok(Amount {
            mantissa,
            exponent,
            format,
        }
        .normalized())
    }

    /// Reads a `k8s-openapi` quantity.
    #[cfg(feature = "k8s-openapi")]
    #[cfg_attr(docsrs, doc(cfg(feature = "k8s-openapi")))]
    pub fn from_quantity(
        quantity: &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    ) -> Result<Self, InvalidQuantity> {
        Self::parse(&quantity.0)
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
        let shift = self.exponent.checked_sub(exponent)?;
        if shift < 0 {
            return None;
        }
        self.mantissa
            .checked_mul(10i128.checked_pow(u32::try_from(shift).ok()?)?)
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
            // Too far apart to align exactly: the signs, then the magnitudes, decide.
            _ => self
                .mantissa
                .signum()
                .cmp(&other.mantissa.signum())
                .then_with(|| {
                    let larger = self.exponent.cmp(&other.exponent);
                    if self.mantissa < 0 {
                        larger.reverse()
                    } else {
                        larger
                    }
                }),
        }
    }

    /// Whether the amount is zero.
    pub fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    /// The format the amount prints in.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The value rounded up to an integer, as Go's `Quantity.Value()`.
    pub fn ceil(&self) -> i64 {
        if self.exponent >= 0 {
            let v = self.at_exponent(0).unwrap_or(if self.mantissa < 0 {
                i128::MIN
            } else {
                i128::MAX
            });
            return clamp_i64(v);
        }
        let Some(div) = 10i128.checked_pow(self.exponent.unsigned_abs()) else {
            // Below 10^-38 of a unit: rounds up to 1 when positive, 0 otherwise.
            return i64::from(self.mantissa > 0);
        };
        clamp_i64(self.mantissa.div_euclid(div) + i128::from(self.mantissa.rem_euclid(div) != 0))
    }

    /// The value in nano-units, rounded away from zero below a nano (as the API server rounds).
    pub fn nanos(&self) -> Nanos {
        let power = self.exponent.saturating_add(9);
        let magnitude = self.mantissa.unsigned_abs();
        let value = if power >= 0 {
            10u128
                .checked_pow(power.unsigned_abs())
                .and_then(|f| magnitude.checked_mul(f))
                .unwrap_or(u128::MAX)
        } else {
            match 10u128.checked_pow(power.unsigned_abs()) {
                Some(div) => magnitude / div + u128::from(!magnitude.is_multiple_of(div)),
                None => u128::from(magnitude != 0),
            }
        };
        let value = i128::try_from(value).unwrap_or(i128::MAX);
        Nanos(if self.mantissa < 0 { -value } else { value })
    }
}

impl Amount {
    /// The value in units of `10^exponent`, its magnitude rounded up (away from zero, as Go's scaled readings);
    /// `None` when it does not fit an `i128`.
    pub(crate) fn scaled_away_from_zero(&self, exponent: i32) -> Option<i128> {
        let shift = self.exponent.checked_sub(exponent)?;
        if shift >= 0 {
            return self.at_exponent(exponent);
        }
        let magnitude = self.mantissa.unsigned_abs();
        let rounded = match 10u128.checked_pow(shift.unsigned_abs()) {
            Some(div) => magnitude / div + u128::from(!magnitude.is_multiple_of(div)),
            // The divisor is beyond every representable value: anything non-zero rounds up to 1.
            None => u128::from(magnitude != 0),
        };
        let rounded = i128::try_from(rounded).ok()?;
        Some(if self.mantissa < 0 { -rounded } else { rounded })
    }
}

fn clamp_i64(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

impl fmt::Display for Amount {
    /// Go's canonical form: the largest suffix that keeps an integer mantissa.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.mantissa == 0 {
            return f.write_str("0");
        }
        let mut format = self.format;
        if format == Format::BinarySi {
            // Binary suffixes only for integers of at least 1024 in magnitude, as Go.
            let small = self.at_exponent(0).is_some_and(|v| v > -1024 && v < 1024);
            if self.exponent < 0 || small {
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
        let value = if exponent > self.exponent {
            // Below nano: Go rounds away from zero to the smallest representable step (`inf.RoundUp`).
            self.scaled_away_from_zero(exponent)
                .unwrap_or(self.mantissa.signum())
        } else {
            self.at_exponent(exponent).unwrap_or(self.mantissa)
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

/// `text` in canonical form, as the API server stores it (`1000m` → `1`, `0.5` → `500m`, `1024Mi` → `1Gi`);
/// `None` when it is not a quantity.
pub fn canonical(text: &str) -> Option<String> {
    Amount::parse(text).ok().map(|a| a.to_string())
}

/// A parsed quantity in nano-units (10⁻⁹ of the base unit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Nanos(pub i128);

const NANO: i128 = 1_000_000_000;

impl Nanos {
    /// Parses a quantity string; below a nano the value rounds away from zero.
    pub fn parse(text: &str) -> Result<Self, InvalidQuantity> {
        Amount::parse(text).map(|a| a.nanos())
    }

    /// Reads a `k8s-openapi` quantity.
    #[cfg(feature = "k8s-openapi")]
    #[cfg_attr(docsrs, doc(cfg(feature = "k8s-openapi")))]
    pub fn from_quantity(
        quantity: &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    ) -> Result<Self, InvalidQuantity> {
        Self::parse(&quantity.0)
    }

    /// The value rounded up to a whole unit, like Go's `Quantity.Value()` (`2.5` → 3, `700m` → 1).
    pub fn ceil_units(self) -> i64 {
        clamp_i64(self.0.div_euclid(NANO) + i128::from(self.0.rem_euclid(NANO) != 0))
    }

    /// The value in milli-units, rounded up, like Go's `Quantity.MilliValue()`.
    pub fn ceil_millis(self) -> i64 {
        let per_milli = NANO / 1000;
        clamp_i64(self.0.div_euclid(per_milli) + i128::from(self.0.rem_euclid(per_milli) != 0))
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
            ("1000", "1k"),
            ("1024Mi", "1Gi"),
            ("1.5Gi", "1536Mi"),
            ("0.5Gi", "512Mi"),
            ("1.1Gi", "1181116006400m"),
            ("512", "512"),
            ("512Ki", "512Ki"),
            ("1k", "1k"),
            ("1e3", "1e3"),
            ("1E6", "1e6"),
            ("100M", "100M"),
            ("0", "0"),
            ("0Gi", "0"),
            ("0.7", "700m"),
            ("32Gi", "32Gi"),
            (" 8 ", "8"),
            ("+4", "4"),
            ("-1500m", "-1500m"),
            ("0.0001n", "1n"),
            ("-0.0001n", "-1n"),
        ];
        for (input, want) in cases {
            assert_eq!(canonical(input).as_deref(), Some(want), "{input}");
        }
        assert_eq!(canonical("abc"), None);
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
            ("-1.5", -1),
        ] {
            assert_eq!(a(s).ceil(), want, "{s}");
        }
        use std::cmp::Ordering::*;
        assert_eq!(a("1").compare(&a("999m")), Greater);
        assert_eq!(a("1Ki").compare(&a("1024")), Equal);
        assert_eq!(a("1e-900").compare(&a("1e900")), Less);
        assert_eq!(a("-1e900").compare(&a("-1e-900")), Less);
    }

    #[test]
    fn parses_the_suffixes_kubernetes_accepts_in_nanos() {
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
            ("1e-40", 1),
            ("-1e-40", -1),
        ];
        for (text, nanos) in cases {
            assert_eq!(Nanos::parse(text), Ok(Nanos(nanos)), "{text}");
        }
    }

    #[test]
    fn rounds_up_like_go() {
        assert_eq!(Nanos::parse("2.5").map(Nanos::ceil_units), Ok(3));
        assert_eq!(Nanos::parse("700m").map(Nanos::ceil_units), Ok(1));
        assert_eq!(Nanos::parse("4").map(Nanos::ceil_units), Ok(4));
        assert_eq!(Nanos::parse("1.0005").map(Nanos::ceil_millis), Ok(1001));
    }

    #[test]
    fn extreme_values_do_not_panic() {
        for s in [
            "0.000000000000000000000000001e-30",
            "999999999999999999999999999999e30",
            "1e-30",
            "1e-1000",
            "1e1000",
            "1Ei",
            "99999999999999999999999999999999999Ei",
        ] {
            let Ok(a) = Amount::parse(s) else { continue };
            let _ = (
                a.to_string(),
                a.ceil(),
                a.nanos(),
                a.mul(i64::MAX).to_string(),
                a.add(&Amount::parse("1n").unwrap()).to_string(),
                a.compare(&Amount::parse("1").unwrap()),
            );
        }
    }

    #[test]
    fn rejects_what_is_not_a_quantity() {
        for s in [
            "",
            "abc",
            "1x",
            "1.2.3",
            "m",
            "1Gb",
            "--1",
            "5x",
            "1e",
            ".",
            "1e1001",
            "999999999999999999999999999999999999999999",
        ] {
            assert!(Amount::parse(s).is_err(), "{s}");
            assert!(Nanos::parse(s).is_err(), "{s}");
        }
        let e = Amount::parse("1Gb").unwrap_err().to_string();
        assert!(
            e.contains("quantities must match") && e.contains("1.5Gi"),
            "{e}"
        );
    }
}

#[cfg(all(test, feature = "k8s-openapi"))]
mod k8s_tests {
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;

    #[test]
    fn reads_k8s_openapi_quantities() {
        let q = Quantity("1.5Gi".into());
        assert_eq!(Amount::from_quantity(&q).unwrap().to_string(), "1536Mi");
        assert_eq!(Nanos::from_quantity(&q).unwrap().ceil_units(), 3 << 29);
        assert!(Amount::from_quantity(&Quantity("1Gb".into())).is_err());
    }
}
