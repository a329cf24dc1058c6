//! Times as Kueue's objects and our annotations write them: RFC 3339 timestamps and short durations, in
//! milliseconds.

/// Milliseconds since the Unix epoch of an RFC 3339 timestamp as Kubernetes writes it
/// (`2025-01-02T03:04:05Z`; fractional seconds and `+hh:mm` offsets accepted).
///
/// ```
/// use kubetrain_kueue::model::parse_rfc3339_ms;
/// assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:01Z"), Some(1000));
/// assert_eq!(parse_rfc3339_ms("2024-03-01T01:00:00.5+01:00"), Some(1_709_251_200_500));
/// assert_eq!(parse_rfc3339_ms("yesterday"), None);
/// ```
pub fn parse_rfc3339_ms(v: &str) -> Option<i64> {
    let v = v.trim();
    let b = v.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = v.get(r)?;
        if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut frac_ms = 0;
    if b[i] == b'.' {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let digits = v.get(start..i.min(start + 3))?;
        frac_ms = num(start..i.min(start + 3))? * 10_i64.pow(3 - digits.len() as u32);
    }
    let offset_min = match *b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        c @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let m = num(i + 1..i + 3)? * 60 + num(i + 4..i + 6)?;
            if c == b'-' { -m } else { m }
        }
        _ => return None,
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + h) * 60 + mi - offset_min) * 60_000 + sec * 1000 + frac_ms)
}

/// Parses `1500`, `1500ms`, `30s`, `10m`, `2h` into milliseconds.
pub fn parse_duration_ms(v: &str) -> Option<i64> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (n, unit) = v.split_at(split);
    let n: i64 = n.parse().ok()?;
    let mult = match unit {
        "" | "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return None,
    };
    n.checked_mul(mult)
}
