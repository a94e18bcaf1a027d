//! Diagnosis settings: the variable names, pure parsers for their values, and the resolver
//! (code beats environment beats default). Every error names the variable and the fix.

use std::time::Duration;

use crate::error::InitError;

/// Highest memory a span may reach: `20GiB`, `512MB`, or `80%` of each device.
pub(crate) const MEMORY_BUDGET: &str = "GPUSPAN_MEMORY_BUDGET";
/// `true`: a span over the budget also gets an error status.
pub(crate) const BUDGET_ERROR: &str = "GPUSPAN_MEMORY_BUDGET_ERROR";
/// The ratio rule's factor: end memory against the first epoch's (default 1.5).
pub(crate) const LEAK_RATIO: &str = "GPUSPAN_LEAK_RATIO";
/// Epochs (and steps of each epoch) left out of leak detection at the start (default 1).
pub(crate) const LEAK_WARMUP: &str = "GPUSPAN_LEAK_WARMUP";
/// Fraction of a device's total that counts as near out of memory (default 95%).
pub(crate) const NEAR_OOM_THRESHOLD: &str = "GPUSPAN_NEAR_OOM_THRESHOLD";
/// How much of the timeline the near-OOM recorder keeps (default 30s).
pub(crate) const NEAR_OOM_WINDOW: &str = "GPUSPAN_NEAR_OOM_WINDOW";

/// Default of [`LEAK_RATIO`].
pub(crate) const DEFAULT_LEAK_RATIO: f64 = 1.5;
/// Default of [`LEAK_WARMUP`].
pub(crate) const DEFAULT_LEAK_WARMUP: usize = 1;
/// Default of [`NEAR_OOM_THRESHOLD`].
pub(crate) const DEFAULT_NEAR_OOM_THRESHOLD: f64 = 0.95;
/// Default of [`NEAR_OOM_WINDOW`].
pub(crate) const DEFAULT_NEAR_OOM_WINDOW: Duration = Duration::from_secs(30);

/// A memory budget: bytes, or a fraction of each device's total.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum MemoryBudget {
    /// At most this many bytes per device.
    Bytes(u64),
    /// At most this fraction (0 to 1) of each device's total.
    Fraction(f64),
}

impl std::str::FromStr for MemoryBudget {
    type Err = String;

    /// `20GiB`, `512MB`, `1024B` (a unit is required) or `80%`, as `GPUSPAN_MEMORY_BUDGET`.
    fn from_str(text: &str) -> Result<Self, String> {
        parse_budget(text).map_err(str::to_owned)
    }
}

impl MemoryBudget {
    /// The budget in bytes for a device with `total` bytes (`None`: a fraction of an
    /// unknown total).
    pub(crate) fn bytes_for(self, total: Option<u64>) -> Option<u64> {
        match self {
            Self::Bytes(bytes) => Some(bytes),
            Self::Fraction(f) => total.map(|t| (t as f64 * f).floor() as u64),
        }
    }
}

/// What code set through the builder; `None` falls back to the environment.
#[derive(Debug, Clone, Default)]
pub(crate) struct DiagnoseCode {
    pub(crate) budget: Option<MemoryBudget>,
    pub(crate) budget_error: Option<bool>,
    pub(crate) leak_ratio: Option<f64>,
    pub(crate) leak_warmup: Option<usize>,
    pub(crate) near_oom_threshold: Option<f64>,
    pub(crate) near_oom_window: Option<Duration>,
}

/// The resolved settings.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DiagnoseSettings {
    pub(crate) budget: Option<MemoryBudget>,
    pub(crate) budget_error: bool,
    pub(crate) leak_ratio: f64,
    pub(crate) leak_warmup: usize,
    pub(crate) near_oom_threshold: f64,
    pub(crate) near_oom_window: Duration,
}

impl Default for DiagnoseSettings {
    fn default() -> Self {
        Self {
            budget: None,
            budget_error: false,
            leak_ratio: DEFAULT_LEAK_RATIO,
            leak_warmup: DEFAULT_LEAK_WARMUP,
            near_oom_threshold: DEFAULT_NEAR_OOM_THRESHOLD,
            near_oom_window: DEFAULT_NEAR_OOM_WINDOW,
        }
    }
}

fn invalid(name: &str, value: &str, expected: &str) -> InitError {
    InitError::InvalidSetting {
        name: name.to_owned(),
        value: value.to_owned(),
        expected: expected.to_owned(),
    }
}

/// Resolves from code, then `env` (a variable lookup), then defaults. Builder values are
/// checked by the same rules as the variables and named after the builder method.
pub(crate) fn resolve(
    code: &DiagnoseCode,
    env: impl Fn(&str) -> Option<String>,
) -> Result<DiagnoseSettings, InitError> {
    let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let budget = match code.budget {
        Some(budget) => Some(check_budget(budget, "memory_budget")?),
        None => env(MEMORY_BUDGET)
            .map(|v| parse_budget(&v).map_err(|e| invalid(MEMORY_BUDGET, &v, e)))
            .transpose()?,
    };
    let mut settings = DiagnoseSettings {
        budget,
        ..DiagnoseSettings::default()
    };
    if let Some(flag) = code.budget_error {
        settings.budget_error = flag;
    } else if let Some(v) = env(BUDGET_ERROR) {
        settings.budget_error = parse_bool(&v).map_err(|e| invalid(BUDGET_ERROR, &v, e))?;
    }
    match code.leak_ratio {
        Some(ratio) => {
            settings.leak_ratio =
                check_ratio(ratio).map_err(|e| invalid("leak_ratio", &ratio.to_string(), e))?
        }
        None => {
            if let Some(v) = env(LEAK_RATIO) {
                settings.leak_ratio = parse_ratio(&v).map_err(|e| invalid(LEAK_RATIO, &v, e))?;
            }
        }
    }
    if let Some(warmup) = code.leak_warmup {
        settings.leak_warmup = warmup;
    } else if let Some(v) = env(LEAK_WARMUP) {
        settings.leak_warmup = v
            .trim()
            .parse()
            .map_err(|_| invalid(LEAK_WARMUP, &v, "a whole number of epochs, such as 1"))?;
    }
    match code.near_oom_threshold {
        Some(f) => {
            settings.near_oom_threshold =
                check_fraction(f).map_err(|e| invalid("near_oom_threshold", &f.to_string(), e))?
        }
        None => {
            if let Some(v) = env(NEAR_OOM_THRESHOLD) {
                settings.near_oom_threshold =
                    parse_fraction(&v).map_err(|e| invalid(NEAR_OOM_THRESHOLD, &v, e))?;
            }
        }
    }
    match code.near_oom_window {
        Some(window) => {
            settings.near_oom_window = check_window(window)
                .map_err(|e| invalid("near_oom_window", &format!("{window:?}"), e))?
        }
        None => {
            if let Some(v) = env(NEAR_OOM_WINDOW) {
                let window = crate::config::parse::duration(&v)
                    .map_err(|_| "a duration such as 30s or 2m")
                    .and_then(check_window)
                    .map_err(|e| invalid(NEAR_OOM_WINDOW, &v, e))?;
                settings.near_oom_window = window;
            }
        }
    }
    Ok(settings)
}

fn check_budget(budget: MemoryBudget, name: &str) -> Result<MemoryBudget, InitError> {
    match budget {
        MemoryBudget::Bytes(0) => Err(invalid(name, "0", "a budget above zero bytes")),
        MemoryBudget::Fraction(f) => check_fraction(f)
            .map(MemoryBudget::Fraction)
            .map_err(|e| invalid(name, &f.to_string(), e)),
        budget => Ok(budget),
    }
}

/// Parses `20GiB`, `20 GB`, `512MiB`, `1024B` (a unit is required) or `80%`.
pub(crate) fn parse_budget(text: &str) -> Result<MemoryBudget, &'static str> {
    const EXPECTED: &str = "bytes with a unit, such as 20GiB or 512MB, or a fraction of the \
                            device, such as 80%";
    let text = text.trim();
    if let Some(percent) = text.strip_suffix('%') {
        let value: f64 = percent.trim().parse().map_err(|_| EXPECTED)?;
        return check_fraction(value / 100.0).map(MemoryBudget::Fraction);
    }
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or(EXPECTED)?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().map_err(|_| EXPECTED)?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(EXPECTED),
    };
    let bytes = number * scale;
    if !bytes.is_finite() || bytes < 1.0 || bytes > u64::MAX as f64 {
        return Err("a budget above zero bytes, such as 20GiB");
    }
    Ok(MemoryBudget::Bytes(bytes.round() as u64))
}

/// Parses the leak ratio: a number above 1, such as 1.5.
pub(crate) fn parse_ratio(text: &str) -> Result<f64, &'static str> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| "a number above 1, such as 1.5")?;
    check_ratio(value)
}

fn check_ratio(value: f64) -> Result<f64, &'static str> {
    if value.is_finite() && value > 1.0 {
        Ok(value)
    } else {
        Err("a number above 1, such as 1.5 (end memory 1.5 times the first epoch's)")
    }
}

/// Parses a fraction of a device: `95%` or `0.95`, above 0 and at most 100 %.
pub(crate) fn parse_fraction(text: &str) -> Result<f64, &'static str> {
    let text = text.trim();
    let value = match text.strip_suffix('%') {
        Some(percent) => percent.trim().parse::<f64>().map(|p| p / 100.0),
        None => text.parse::<f64>(),
    };
    check_fraction(value.map_err(|_| "a fraction of the device, such as 95% or 0.95")?)
}

fn check_fraction(value: f64) -> Result<f64, &'static str> {
    if value.is_finite() && value > 0.0 && value <= 1.0 {
        Ok(value)
    } else {
        Err("a fraction of the device above 0 and at most 100%, such as 95%")
    }
}

fn check_window(window: Duration) -> Result<Duration, &'static str> {
    if window >= Duration::from_millis(100) && window <= Duration::from_secs(3600) {
        Ok(window)
    } else {
        Err("a duration from 100ms to 1h, such as 30s")
    }
}

fn parse_bool(text: &str) -> Result<bool, &'static str> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err("true or false"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve_env(vars: &[(&str, &str)]) -> Result<DiagnoseSettings, InitError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        resolve(&DiagnoseCode::default(), |name| {
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
    }

    fn error_names(result: Result<DiagnoseSettings, InitError>) -> String {
        match result {
            Err(InitError::InvalidSetting { name, .. }) => name,
            other => panic!("expected an invalid setting, got {other:?}"),
        }
    }

    #[test]
    fn budgets_read_binary_and_decimal_units_and_percentages() {
        assert_eq!(parse_budget("20GiB"), Ok(MemoryBudget::Bytes(20 << 30)));
        assert_eq!(
            parse_budget(" 20 GB "),
            Ok(MemoryBudget::Bytes(20_000_000_000))
        );
        assert_eq!(parse_budget("512MiB"), Ok(MemoryBudget::Bytes(512 << 20)));
        assert_eq!(parse_budget("1.5kib"), Ok(MemoryBudget::Bytes(1536)));
        assert_eq!(parse_budget("80%"), Ok(MemoryBudget::Fraction(0.8)));
        assert_eq!(
            MemoryBudget::Fraction(0.8).bytes_for(Some(80 << 30)),
            Some(64 << 30)
        );
    }

    #[test]
    fn a_budget_without_a_unit_or_over_the_device_is_an_error_naming_the_variable() {
        for bad in ["20", "20 apples", "120%", "0%", "0GiB", "GiB"] {
            assert!(parse_budget(bad).is_err(), "{bad} parsed");
            assert_eq!(
                error_names(resolve_env(&[(MEMORY_BUDGET, bad)])),
                MEMORY_BUDGET
            );
        }
    }

    #[test]
    fn a_leak_ratio_of_one_or_less_is_an_error() {
        for bad in ["1", "0.9", "-2", "x"] {
            assert_eq!(error_names(resolve_env(&[(LEAK_RATIO, bad)])), LEAK_RATIO);
        }
        assert_eq!(resolve_env(&[(LEAK_RATIO, "1.2")]).unwrap().leak_ratio, 1.2);
    }

    #[test]
    fn thresholds_and_windows_are_checked() {
        assert_eq!(
            error_names(resolve_env(&[(NEAR_OOM_THRESHOLD, "101%")])),
            NEAR_OOM_THRESHOLD
        );
        assert_eq!(
            error_names(resolve_env(&[(NEAR_OOM_WINDOW, "5ms")])),
            NEAR_OOM_WINDOW
        );
        assert_eq!(
            error_names(resolve_env(&[(LEAK_WARMUP, "-1")])),
            LEAK_WARMUP
        );
        let settings = resolve_env(&[
            (NEAR_OOM_THRESHOLD, "90%"),
            (NEAR_OOM_WINDOW, "10s"),
            (BUDGET_ERROR, "true"),
        ])
        .unwrap();
        assert_eq!(settings.near_oom_threshold, 0.9);
        assert_eq!(settings.near_oom_window, Duration::from_secs(10));
        assert!(settings.budget_error);
    }

    #[test]
    fn defaults_apply_without_settings_and_code_beats_the_environment() {
        assert_eq!(resolve_env(&[]).unwrap(), DiagnoseSettings::default());
        let code = DiagnoseCode {
            leak_ratio: Some(2.0),
            budget: Some(MemoryBudget::Bytes(1 << 30)),
            ..DiagnoseCode::default()
        };
        let settings = resolve(&code, |name| {
            (name == LEAK_RATIO || name == MEMORY_BUDGET).then(|| "1.1".to_owned())
        })
        .unwrap();
        assert_eq!(settings.leak_ratio, 2.0);
        assert_eq!(settings.budget, Some(MemoryBudget::Bytes(1 << 30)));
        let bad = DiagnoseCode {
            leak_ratio: Some(1.0),
            ..DiagnoseCode::default()
        };
        assert_eq!(error_names(resolve(&bad, |_| None)), "leak_ratio");
    }
}
