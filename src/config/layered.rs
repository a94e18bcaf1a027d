//! The one resolver every setting goes through: the value set in code, then each of the
//! row's variables in order (a signal's own before the one for every signal), then the
//! caller's default. A value from anywhere meets the row's bounds, and an error names the
//! variable or the builder setter it came from.

use std::fmt::Debug;

use super::error::{InvalidValue, SettingError};
use super::table::{Defaulted, Row, Signal};

/// Where a resolved value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The builder setter of that name.
    Code(&'static str),
    /// The environment variable of that name.
    Env(&'static str),
}

/// Where variables are read: the process environment, or a fixed list in tests.
#[derive(Clone, Copy)]
pub(crate) struct Env<'a>(&'a dyn Fn(&str) -> Option<String>);

/// A variable of the process environment, as set (blank included).
pub(crate) fn process_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

impl<'a> Env<'a> {
    /// The process environment.
    pub(crate) fn process() -> Env<'static> {
        Env(&process_var)
    }

    /// Variables read through `lookup`.
    pub(crate) fn from_fn(lookup: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Env(lookup)
    }

    /// A variable's value, or `None` when unset or blank.
    pub(crate) fn get(&self, var: &str) -> Option<String> {
        (self.0)(var).filter(|v| !v.trim().is_empty())
    }

    /// A variable's value even when blank (where blank means something).
    pub(crate) fn raw(&self, var: &str) -> Option<String> {
        (self.0)(var)
    }
}

/// The value set in code, else the first of the row's variables that is set (for
/// `signal` where the row has one per signal); `None` when nothing is set.
pub(crate) fn layered<T: Debug>(
    row: &Row<T>,
    code: Option<T>,
    signal: Option<Signal>,
    env: Env<'_>,
) -> Result<Option<(T, Origin)>, SettingError> {
    let setter = row.setting.setter;
    if let Some(value) = code {
        (row.check)(&value)
            .map_err(|expected| SettingError::new(setter, &format!("{value:?}"), expected))?;
        return Ok(Some((value, Origin::Code(setter))));
    }
    let vars = row.setting.vars.precedence(signal);
    Ok(first_var(&vars, |text| row.read(text), env)?.map(|(v, var)| (v, Origin::Env(var))))
}

/// As [`layered`], without where it came from, and the row's default when nothing is set.
pub(crate) fn resolved<T: Debug>(
    row: &Defaulted<T>,
    code: Option<T>,
    env: Env<'_>,
) -> Result<T, SettingError> {
    Ok(layered(&row.row, code, None, env)?.map_or_else(row.value, |(value, _)| value))
}

/// As [`resolved`], for `signal` where the row has one variable per signal.
pub(crate) fn resolved_for<T: Debug>(
    row: &Defaulted<T>,
    code: Option<T>,
    signal: Option<Signal>,
    env: Env<'_>,
) -> Result<T, SettingError> {
    Ok(layered(&row.row, code, signal, env)?.map_or_else(row.value, |(value, _)| value))
}

/// The first of `vars` that is set, read with `read`; an error names the variable and
/// its text.
pub(crate) fn first_var<T>(
    vars: &[&'static str],
    read: impl Fn(&str) -> Result<T, InvalidValue>,
    env: Env<'_>,
) -> Result<Option<(T, &'static str)>, SettingError> {
    for var in vars {
        if let Some(text) = env.get(var) {
            return match read(&text) {
                Ok(value) => Ok(Some((value, var))),
                Err(error) => Err(error.named(*var, &text)),
            };
        }
    }
    Ok(None)
}
