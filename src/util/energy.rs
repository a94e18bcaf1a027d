//! Energy and power for people, as the summary, the report, the job view and `gpuspan diff`
//! write them. Public (through `runlog::energy`) so that every view rounds alike.

/// Joules in the unit a reader takes in at a glance: `812.4 J` below a kilojoule, `12.35 kJ`
/// below a megajoule, then kilowatt-hours (`1.39 kWh`), the unit of an electricity bill.
pub fn joules(value: f64) -> String {
    let size = value.abs();
    if size < 1e3 {
        format!("{value:.1} J")
    } else if size < 1e6 {
        format!("{:.2} kJ", value / 1e3)
    } else {
        format!("{:.2} kWh", value / 3.6e6)
    }
}

/// As [`joules`], with a `+` on growth.
pub fn signed_joules(value: f64) -> String {
    if value > 0.0 {
        format!("+{}", joules(value))
    } else {
        joules(value)
    }
}

/// Watts: `280 W` from 100 W up, `42.5 W` below, `1.25 kW` from a kilowatt (a job's ranks
/// together).
pub fn watts(value: f64) -> String {
    if value.abs() >= 1e3 {
        format!("{:.2} kW", value / 1e3)
    } else if value.abs() >= 100.0 {
        format!("{value:.0} W")
    } else {
        format!("{value:.1} W")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn energy_reads_in_joules_kilojoules_then_kilowatt_hours() {
        assert_eq!(joules(0.0), "0.0 J");
        assert_eq!(joules(812.44), "812.4 J");
        assert_eq!(joules(12_345.0), "12.35 kJ");
        assert_eq!(joules(5_000_000.0), "1.39 kWh");
        assert_eq!(signed_joules(28.0), "+28.0 J");
        assert_eq!(signed_joules(-1500.0), "-1.50 kJ");
        assert_eq!(watts(280.4), "280 W");
        assert_eq!(watts(42.46), "42.5 W");
        assert_eq!(watts(4_480.0), "4.48 kW");
    }
}
