//! Byte counts in a fixed unit, for the command's tables and pictures; counts in the unit
//! that fits them are the SDK's, in [`gpuspan::runlog::bytes`].

const MIB: f64 = 1_048_576.0;
const GIB: f64 = 1_073_741_824.0;

/// Mebibytes with `decimals` places: `1234 MiB`.
pub(crate) fn mib(bytes: f64, decimals: usize) -> String {
    format!("{:.*} MiB", decimals, bytes / MIB)
}

/// Gibibytes with `decimals` places: `1.25 GiB`.
pub(crate) fn gib(bytes: f64, decimals: usize) -> String {
    format!("{:.*} GiB", decimals, bytes / GIB)
}

#[cfg(test)]
mod tests {
    use super::{gib, mib};

    #[test]
    fn byte_counts_read_in_the_unit_asked_for() {
        assert_eq!(mib(1_293_942_784.0, 0), "1234 MiB");
        assert_eq!(gib(1_342_177_280.0, 2), "1.25 GiB");
    }
}
