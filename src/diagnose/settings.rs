//! Diagnosis settings: their rows in the settings table (variable names, parsers,
//! bounds, defaults) and their resolution through the config's one resolver (code beats
//! environment beats default). Every error names the variable or setter and the fix.

use std::time::Duration;

use crate::config::error::{InvalidValue, SettingError};
use crate::config::layered::{layered, resolved, Env};
use crate::config::parse::{self, check_fraction};
use crate::config::table::{Defaulted, Row, Setting, Vars};
pub(crate) use crate::config::vars::{
    GPUSPAN_LEAK_RATIO as LEAK_RATIO, GPUSPAN_LEAK_WARMUP as LEAK_WARMUP,
    GPUSPAN_MEMORY_BUDGET as MEMORY_BUDGET, GPUSPAN_MEMORY_BUDGET_ERROR as BUDGET_ERROR,
    GPUSPAN_MEMORY_BUDGET_STOP as BUDGET_STOP, GPUSPAN_MEMORY_FORECAST_STOP as FORECAST_STOP,
    GPUSPAN_NEAR_OOM_THRESHOLD as NEAR_OOM_THRESHOLD, GPUSPAN_NEAR_OOM_WINDOW as NEAR_OOM_WINDOW,
};
use crate::error::InitError;

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
    type Err = InvalidValue;

    /// `20GiB`, `512MB`, `1024B` (a unit is required) or `80%`, as `GPUSPAN_MEMORY_BUDGET`.
    fn from_str(text: &str) -> Result<Self, InvalidValue> {
        parse_budget(text)
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
    pub(crate) budget_stop: Option<bool>,
    pub(crate) forecast_stop: Option<bool>,
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
    /// Whether the first reading over the budget asks the training loop to stop.
    pub(crate) budget_stop: bool,
    /// Whether the first OOM forecast asks the training loop to stop.
    pub(crate) forecast_stop: bool,
    pub(crate) leak_ratio: f64,
    pub(crate) leak_warmup: usize,
    pub(crate) near_oom_threshold: f64,
    pub(crate) near_oom_window: Duration,
}

impl Default for DiagnoseSettings {
    /// Every row's default.
    fn default() -> Self {
        Self {
            budget: None,
            budget_error: (BUDGET_ERROR_ROW.value)(),
            budget_stop: (BUDGET_STOP_ROW.value)(),
            forecast_stop: (FORECAST_STOP_ROW.value)(),
            leak_ratio: (LEAK_RATIO_ROW.value)(),
            leak_warmup: (LEAK_WARMUP_ROW.value)(),
            near_oom_threshold: (NEAR_OOM_THRESHOLD_ROW.value)(),
            near_oom_window: (NEAR_OOM_WINDOW_ROW.value)(),
        }
    }
}

/// What a budget may be.
const BUDGETS: &str = "bytes with a unit, such as 20GiB or 512MB, or a fraction of the \
                       device, such as 80%";
/// What the leak ratio may be.
const RATIOS: &str = "a number above 1, such as 1.5 (end memory 1.5 times the first epoch's)";
/// What the near-OOM window may be.
const WINDOWS: &str = "a duration from 100ms to 1h, such as 30s";

const BUDGET: Row<MemoryBudget> = Row::new(
    "memory_budget",
    Vars::Ordered(&[MEMORY_BUDGET]),
    BUDGETS,
    "none",
    parse_budget,
)
.doc("Memory a span may peak at on each device.")
.checked(check_budget);
const BUDGET_ERROR_ROW: Defaulted<bool> = Row::new(
    "memory_budget_error",
    Vars::Ordered(&[BUDGET_ERROR]),
    parse::BOOLEAN,
    "false",
    parse::boolean,
)
.doc("Whether a span over the budget also gets an error status.")
.defaults_to(|| false);
const BUDGET_STOP_ROW: Defaulted<bool> = Row::new(
    "memory_budget_stop",
    Vars::Ordered(&[BUDGET_STOP]),
    parse::BOOLEAN,
    "false",
    parse::boolean,
)
.doc("Whether the first reading over the budget asks the training loop to stop.")
.defaults_to(|| false);
const FORECAST_STOP_ROW: Defaulted<bool> = Row::new(
    "memory_forecast_stop",
    Vars::Ordered(&[FORECAST_STOP]),
    parse::BOOLEAN,
    "false",
    parse::boolean,
)
.doc("Whether the first OOM forecast asks the training loop to stop.")
.defaults_to(|| false);
const LEAK_RATIO_ROW: Defaulted<f64> = Row::new(
    "leak_ratio",
    Vars::Ordered(&[LEAK_RATIO]),
    RATIOS,
    "1.5",
    |text| {
        text.trim()
            .parse()
            .map_err(|_| InvalidValue::new(text, "a number above 1, such as 1.5"))
    },
)
.doc("The ratio rule's factor: end memory this many times the first epoch's.")
.checked(|ratio| check_ratio(*ratio).map(drop))
.defaults_to(|| 1.5);
const LEAK_WARMUP_ROW: Defaulted<usize> = Row::new(
    "leak_warmup",
    Vars::Ordered(&[LEAK_WARMUP]),
    "a whole number of epochs, such as 1",
    "1",
    |text| {
        parse::whole(text)
            .map_err(|_| InvalidValue::new(text, "a whole number of epochs, such as 1"))
    },
)
.doc("Epochs (and steps of each epoch) leak detection leaves out at the start.")
.defaults_to(|| 1);
const NEAR_OOM_THRESHOLD_ROW: Defaulted<f64> = Row::new(
    "near_oom_threshold",
    Vars::Ordered(&[NEAR_OOM_THRESHOLD]),
    "a fraction of the device, such as 95% or 0.95",
    "95%",
    parse::fraction,
)
.doc("The fraction of a device's total that counts as near out of memory.")
.checked(|fraction| check_fraction(*fraction).map(drop))
.defaults_to(|| 0.95);
const NEAR_OOM_WINDOW_ROW: Defaulted<Duration> = Row::new(
    "near_oom_window",
    Vars::Ordered(&[NEAR_OOM_WINDOW]),
    WINDOWS,
    "30s",
    parse::duration,
)
.doc("How much of the sampled timeline the near-OOM recorder keeps.")
.checked(|window| check_window(*window).map(drop))
.defaults_to(|| Duration::from_secs(30));

/// The diagnosis rows of the settings table.
pub(crate) const ROWS: &[Setting] = &[
    BUDGET.setting,
    BUDGET_ERROR_ROW.row.setting,
    BUDGET_STOP_ROW.row.setting,
    FORECAST_STOP_ROW.row.setting,
    LEAK_RATIO_ROW.row.setting,
    LEAK_WARMUP_ROW.row.setting,
    NEAR_OOM_THRESHOLD_ROW.row.setting,
    NEAR_OOM_WINDOW_ROW.row.setting,
];

/// Resolves from code, then `env` (a variable lookup), then defaults. Builder values are
/// checked by the same rules as the variables and named after the builder method.
pub(crate) fn resolve(
    code: &DiagnoseCode,
    env: impl Fn(&str) -> Option<String>,
) -> Result<DiagnoseSettings, InitError> {
    let env = Env::from_fn(&env);
    let settings = DiagnoseSettings {
        budget: layered(&BUDGET, code.budget, None, env)?.map(|(b, _)| b),
        budget_error: resolved(&BUDGET_ERROR_ROW, code.budget_error, env)?,
        budget_stop: resolved(&BUDGET_STOP_ROW, code.budget_stop, env)?,
        forecast_stop: resolved(&FORECAST_STOP_ROW, code.forecast_stop, env)?,
        leak_ratio: resolved(&LEAK_RATIO_ROW, code.leak_ratio, env)?,
        leak_warmup: resolved(&LEAK_WARMUP_ROW, code.leak_warmup, env)?,
        near_oom_threshold: resolved(&NEAR_OOM_THRESHOLD_ROW, code.near_oom_threshold, env)?,
        near_oom_window: resolved(&NEAR_OOM_WINDOW_ROW, code.near_oom_window, env)?,
    };
    if settings.budget_stop && settings.budget.is_none() {
        let name = match code.budget_stop {
            Some(_) => BUDGET_STOP_ROW.setting.name,
            None => BUDGET_STOP,
        };
        return Err(SettingError::new(
            name,
            "true",
            format!(
                "false unless a memory budget is set too: set {MEMORY_BUDGET} (such as 20GiB \
                 or 80%), the figure to stop on"
            ),
        )
        .into());
    }
    Ok(settings)
}

fn check_budget(budget: &MemoryBudget) -> Result<(), &'static str> {
    match *budget {
        MemoryBudget::Bytes(0) => Err("a budget above zero bytes"),
        MemoryBudget::Fraction(f) => check_fraction(f).map(drop),
        MemoryBudget::Bytes(_) => Ok(()),
    }
}

/// Parses `20GiB`, `20 GB`, `512MiB`, `1024B` (a unit is required) or `80%`.
pub(crate) fn parse_budget(text: &str) -> Result<MemoryBudget, InvalidValue> {
    let trimmed = text.trim();
    if let Some(percent) = trimmed.strip_suffix('%') {
        let value: f64 = percent
            .trim()
            .parse()
            .map_err(|_| InvalidValue::new(text, BUDGETS))?;
        return check_fraction(value / 100.0)
            .map(MemoryBudget::Fraction)
            .map_err(|expected| InvalidValue::new(text, expected));
    }
    match parse::byte_size(text) {
        Ok(bytes) => Ok(MemoryBudget::Bytes(bytes)),
        Err(error) if error.expected() == parse::BYTE_SIZE => Err(InvalidValue::new(text, BUDGETS)),
        Err(error) => Err(error),
    }
}

/// Parses the leak ratio: a number above 1, such as 1.5.
#[cfg(test)]
pub(crate) fn parse_ratio(text: &str) -> Result<f64, InvalidValue> {
    LEAK_RATIO_ROW.read(text)
}

fn check_ratio(value: f64) -> Result<f64, &'static str> {
    if value.is_finite() && value > 1.0 {
        Ok(value)
    } else {
        Err(RATIOS)
    }
}

/// Parses a fraction of a device: `95%` or `0.95`, above 0 and at most 100 %.
#[cfg(test)]
pub(crate) fn parse_fraction(text: &str) -> Result<f64, InvalidValue> {
    parse::fraction(text)
}

fn check_window(window: Duration) -> Result<Duration, &'static str> {
    if window >= Duration::from_millis(100) && window <= Duration::from_secs(3600) {
        Ok(window)
    } else {
        Err(WINDOWS)
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
    fn the_stop_action_reads_as_a_boolean_and_needs_a_budget() {
        let on = resolve_env(&[(MEMORY_BUDGET, "80%"), (BUDGET_STOP, "true")]).unwrap();
        assert!(on.budget_stop);
        assert!(!resolve_env(&[(MEMORY_BUDGET, "80%")]).unwrap().budget_stop);
        assert_eq!(
            error_names(resolve_env(&[(BUDGET_STOP, "yes")])),
            BUDGET_STOP
        );
        assert_eq!(
            error_names(resolve_env(&[
                (MEMORY_BUDGET, "80%"),
                (BUDGET_STOP, "maybe")
            ])),
            BUDGET_STOP
        );
    }

    #[test]
    fn the_forecast_s_stop_reads_as_a_boolean_and_needs_no_budget() {
        assert!(
            resolve_env(&[(FORECAST_STOP, "true")])
                .unwrap()
                .forecast_stop
        );
        assert!(!resolve_env(&[]).unwrap().forecast_stop);
        assert_eq!(
            error_names(resolve_env(&[(FORECAST_STOP, "soon")])),
            FORECAST_STOP
        );
        let code = DiagnoseCode {
            forecast_stop: Some(false),
            ..DiagnoseCode::default()
        };
        let settings = resolve(&code, |name| (name == FORECAST_STOP).then(|| "1".into()));
        assert!(!settings.unwrap().forecast_stop, "code beats the variable");
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
    fn every_default_text_reads_as_the_default_value() {
        fn says<T: PartialEq + std::fmt::Debug>(row: &Defaulted<T>) {
            let text = row.setting.default;
            assert_eq!(row.read(text).ok(), Some((row.value)()), "{text}");
        }
        says(&BUDGET_ERROR_ROW);
        says(&BUDGET_STOP_ROW);
        says(&LEAK_RATIO_ROW);
        says(&LEAK_WARMUP_ROW);
        says(&NEAR_OOM_THRESHOLD_ROW);
        says(&NEAR_OOM_WINDOW_ROW);
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
