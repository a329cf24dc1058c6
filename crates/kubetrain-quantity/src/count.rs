//! Resource counts as Kueue and the Kubernetes scheduler keep them: exact integers, cpu in milli-units, every
//! other resource in base units rounded up, saturating at an [`UNLIMITED`] sentinel.

/// An amount of one resource as an integer: milli-cpu for `cpu`, base units (bytes, GPUs, pods…) otherwise.
/// [`Quantity::count_for`](crate::Quantity::count_for) reads one from a quantity.
pub type Count = i64;

/// The sentinel for counts too large to represent; it stays unlimited under [`add`] and [`sub`].
pub const UNLIMITED: Count = i64::MAX;

/// Whether `resource` prints in binary units (memory-like resources).
fn is_binary(resource: &str) -> bool {
    resource == "memory" || resource == "ephemeral-storage" || resource.starts_with("hugepages-")
}

/// Formats a count the way Kueue prints it in messages: cpu as a milli-quantity ("500m", "5"),
/// memory-like resources in binary SI ("10Mi"), everything else in decimal SI ("4", "1k").
///
/// ```
/// use kubetrain_quantity::count::format_count;
/// assert_eq!(format_count("cpu", 500), "500m");
/// assert_eq!(format_count("cpu", 60_000), "60");
/// assert_eq!(format_count("memory", 3 << 30), "3Gi");
/// assert_eq!(format_count("nvidia.com/gpu", 4), "4");
/// ```
pub fn format_count(resource: &str, count: Count) -> String {
    if count == UNLIMITED {
        return "unlimited".to_string();
    }
    if resource == "cpu" {
        if count % 1000 == 0 {
            return decimal_si(count / 1000);
        }
        return format!("{count}m");
    }
    if is_binary(resource) {
        return binary_si(count);
    }
    decimal_si(count)
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
pub fn add(a: Count, b: Count) -> Count {
    if a == UNLIMITED || b == UNLIMITED {
        UNLIMITED
    } else {
        a.saturating_add(b)
    }
}

/// Saturating subtraction that keeps [`UNLIMITED`] unlimited.
pub fn sub(a: Count, b: Count) -> Count {
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
            ("pods", UNLIMITED, "unlimited"),
        ];
        for (res, count, want) in cases {
            assert_eq!(format_count(res, *count), *want);
        }
    }

    #[test]
    fn saturating_arithmetic_keeps_unlimited() {
        assert_eq!(add(UNLIMITED, 5), UNLIMITED);
        assert_eq!(sub(UNLIMITED, 5), UNLIMITED);
        assert_eq!(add(i64::MAX - 1, 5), UNLIMITED);
        assert_eq!(sub(3, 5), -2);
        assert_eq!(sub(3, UNLIMITED), i64::MIN);
    }
}
