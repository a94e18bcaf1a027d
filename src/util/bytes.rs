//! Byte counts for people, as the summary writes them: three significant digits in binary
//! units. Public so that `gpuspan report` and `gpuspan diff` write bytes as the summary does.

/// Bytes in binary units, three significant digits: `512 B`, `1.5 KiB`, `150 MiB`.
pub fn human(value: i64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = value.unsigned_abs() as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    let sign = if value < 0 { "-" } else { "" };
    if unit == 0 {
        format!("{sign}{v:.0} B")
    } else if v >= 100.0 {
        format!("{sign}{v:.0} {}", UNITS[unit])
    } else {
        format!("{sign}{v:.1} {}", UNITS[unit])
    }
}

/// As [`human`], with a `+` on growth.
pub fn signed(value: i64) -> String {
    if value > 0 {
        format!("+{}", human(value))
    } else {
        human(value)
    }
}

#[cfg(test)]
mod tests {
    use super::{human, signed};

    #[test]
    fn byte_counts_read_in_binary_units() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(150 << 20), "150 MiB");
        assert_eq!(human(-(3 << 30)), "-3.0 GiB");
        assert_eq!(signed(1536), "+1.5 KiB");
        assert_eq!(signed(-1536), "-1.5 KiB");
    }
}
