//! Human units for the HTML report: one function per kind of quantity, so that a measurement reads the
//! same wherever the page shows it, and nothing is ever written in scientific notation.

/// A number in fixed point with `decimals` decimals, thousands grouped with commas (`1,234.50`).
/// Not finite: `—`.
pub(crate) fn fixed(v: f64, decimals: usize) -> String {
    if !v.is_finite() {
        return "—".into();
    }
    let s = format!("{:.*}", decimals.min(12), v.abs());
    let (int, frac) = s.split_once('.').map_or((s.as_str(), ""), |(i, f)| (i, f));
    let int = if int.len() > 3 {
        group(int)
    } else {
        int.into()
    };
    // "-0.00" would read as a loss where there is none.
    let negative = v < 0.0 && s.bytes().any(|b| b.is_ascii_digit() && b != b'0');
    let sign = if negative { "-" } else { "" };
    if frac.is_empty() {
        format!("{sign}{int}")
    } else {
        format!("{sign}{int}.{frac}")
    }
}

/// `1234567` as `1,234,567`.
fn group(digits: &str) -> String {
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Decimals that give `v` three significant digits (at least 0, at most 9).
fn decimals_for(v: f64) -> usize {
    if v == 0.0 || !v.is_finite() {
        return 0;
    }
    let magnitude = v.abs().log10().floor();
    (2.0 - magnitude).clamp(0.0, 9.0) as usize
}

/// A plain number with three significant digits (`0.00912`, `44.9`, `198,152`).
pub(crate) fn number(v: f64) -> String {
    fixed(v, decimals_for(v))
}

/// Bytes in binary units: `623 B`, `256 KiB`, `1.5 MiB`, `64 MiB`, `23.5 GiB`.
pub(crate) fn bytes(b: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = b as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    // One decimal, dropped when it is 0 (power-of-two sizes read `64 MiB`).
    let rounded = (v * 10.0).round() / 10.0;
    let decimals = usize::from(unit > 0 && rounded.fract() != 0.0);
    format!("{} {}", fixed(rounded, decimals), UNITS[unit])
}

/// A duration: `< 1 ms`, `68 ms` under a second, `15.45 s` under a minute, `2 min 05 s`, `1 h 02 min`.
pub(crate) fn duration(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "—".into();
    }
    if seconds == 0.0 {
        return "0 s".into();
    }
    let ms = (seconds * 1000.0).round();
    if ms < 1.0 {
        return "< 1 ms".into();
    }
    if ms < 1000.0 {
        return format!("{ms:.0} ms");
    }
    let centis = (seconds * 100.0).round();
    if centis < 6000.0 {
        return format!("{:.2} s", centis / 100.0);
    }
    let whole = seconds.round() as u64;
    if whole < 3600 {
        format!("{} min {:02} s", whole / 60, whole % 60)
    } else {
        let minutes = (seconds / 60.0).round() as u64;
        format!("{} h {:02} min", minutes / 60, minutes % 60)
    }
}

/// Bandwidth in GB/s (10^9 bytes), three significant digits: `0.277 GB/s`, `12.3 GB/s`.
pub(crate) fn gbps(v: f64) -> String {
    format!("{} GB/s", number(v))
}

/// Throughput in MB/s (10^6 bytes), three significant digits: `44.9 MB/s`.
pub(crate) fn mbps(v: f64) -> String {
    format!("{} MB/s", number(v))
}

/// A rate of samples: `198,152 samples/s`.
pub(crate) fn samples_per_second(v: f64) -> String {
    let decimals = if v.abs() >= 100.0 { 0 } else { decimals_for(v) };
    format!("{} samples/s", fixed(v, decimals))
}

/// Money in fixed point with 2 decimals and the plan's currency: `$1,234.50`, `€0.25`, `CHF 3.00`.
/// A non-zero amount under one cent keeps two significant digits (`$0.00067`) instead of reading 0.
pub(crate) fn money(v: f64, currency: &str) -> String {
    let decimals = if v != 0.0 && v.abs() < 0.01 {
        (1.0 - v.abs().log10().floor()).clamp(2.0, 12.0) as usize
    } else {
        2
    };
    let amount = fixed(v, decimals);
    if amount == "—" {
        return amount;
    }
    let (sign, digits) = amount
        .strip_prefix('-')
        .map_or(("", amount.as_str()), |d| ("-", d));
    match currency.trim() {
        "USD" => format!("{sign}${digits}"),
        "EUR" => format!("{sign}€{digits}"),
        "GBP" => format!("{sign}£{digits}"),
        "" => format!("{sign}{digits}"),
        code => format!("{sign}{code} {digits}"),
    }
}

/// `v` in `unit` in that unit's one format: `s` as a duration, `GB/s`, `MB/s`, `samples/s`, and the
/// report's `currency` as money; any other unit as a number followed by it.
pub(crate) fn quantity(v: f64, unit: &str, currency: &str) -> String {
    match unit {
        "s" => duration(v),
        "GB/s" => gbps(v),
        "MB/s" => mbps(v),
        "samples/s" => samples_per_second(v),
        u if u == currency => money(v, currency),
        u => format!("{} {u}", number(v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_use_binary_units() {
        for (b, want) in [
            (0, "0 B"),
            (623, "623 B"),
            (1023, "1,023 B"),
            (1024, "1 KiB"),
            (1536, "1.5 KiB"),
            (256 << 10, "256 KiB"),
            (64 << 20, "64 MiB"),
            (25_276_194_816, "23.5 GiB"),
            (u64::MAX, "16 EiB"),
        ] {
            assert_eq!(bytes(b), want, "{b}");
        }
    }

    #[test]
    fn durations_read_in_one_precision_per_range() {
        for (s, want) in [
            (0.0, "0 s"),
            (0.000_01, "< 1 ms"),
            (0.0034, "3 ms"),
            (0.067_500_699, "68 ms"),
            (0.9996, "1.00 s"),
            (15.448_995_937, "15.45 s"),
            (59.999, "1 min 00 s"),
            (125.4, "2 min 05 s"),
            (3720.0, "1 h 02 min"),
            (f64::NAN, "—"),
            (-1.0, "—"),
            (f64::INFINITY, "—"),
        ] {
            assert_eq!(duration(s), want, "{s}");
        }
    }

    #[test]
    fn money_is_fixed_point_with_the_currency() {
        for (v, cur, want) in [
            (0.0, "USD", "$0.00"),
            (0.002_024_932, "USD", "$0.0020"),
            (0.000_666_264, "USD", "$0.00067"),
            (0.05, "USD", "$0.05"),
            (1234.5, "EUR", "€1,234.50"),
            (1_000_000.0, "GBP", "£1,000,000.00"),
            (3.0, "CHF", "CHF 3.00"),
            (-2.5, "USD", "-$2.50"),
            (1e-12, "USD", "$0.000000000001"),
            (f64::INFINITY, "USD", "—"),
        ] {
            let got = money(v, cur);
            assert_eq!(got, want, "{v} {cur}");
            assert!(!got.contains('e'), "no scientific notation: {got}");
        }
    }

    #[test]
    fn numbers_and_rates_have_three_significant_digits_and_no_exponent() {
        for (v, want) in [
            (0.0, "0"),
            (0.009_128_772, "0.00913"),
            (0.277_019_623, "0.277"),
            (44.873_401_932, "44.9"),
            (198_152.25, "198,152"),
            (-0.000_1, "-0.000100"),
            (3.4e-5, "0.0000340"),
        ] {
            assert_eq!(number(v), want, "{v}");
        }
        assert_eq!(gbps(0.277_019_623), "0.277 GB/s");
        assert_eq!(mbps(44.873_401_932), "44.9 MB/s");
        assert_eq!(samples_per_second(198_152.25), "198,152 samples/s");
        assert_eq!(samples_per_second(2.5), "2.50 samples/s");
        assert_eq!(fixed(-0.001, 2), "0.00", "no negative zero");
    }

    #[test]
    fn a_quantity_is_formatted_by_its_units_one_function() {
        for (v, unit, want) in [
            (0.067_500_699, "s", "68 ms"),
            (0.277, "GB/s", "0.277 GB/s"),
            (44.873, "MB/s", "44.9 MB/s"),
            (20_000.0, "samples/s", "20,000 samples/s"),
            (0.1, "USD", "$0.10"),
            (3.0, "widgets", "3.00 widgets"),
        ] {
            assert_eq!(quantity(v, unit, "USD"), want, "{v} {unit}");
        }
    }
}
