//! The one layered lookup every setting goes through: code, then each variable in order
//! (a signal's own before the one for every signal), then the caller's default.

use crate::error::InitError;

/// Where a resolved value came from, to name it in an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The builder setter of that name.
    Code(&'static str),
    /// The environment variable of that name, with the text it held.
    Env(&'static str),
    /// Nothing was set.
    Default,
}

impl Origin {
    /// The name to show: the variable or setter, else `fallback`.
    pub(crate) fn name(&self, fallback: &'static str) -> &'static str {
        match self {
            Origin::Code(name) | Origin::Env(name) => name,
            Origin::Default => fallback,
        }
    }

    /// The value as given: the variable's text, else `shown`.
    pub(crate) fn value(&self, shown: &str) -> String {
        match self {
            Origin::Env(var) => env(var).unwrap_or_else(|| shown.to_owned()),
            _ => shown.to_owned(),
        }
    }
}

/// A variable's value, or `None` when unset or blank.
pub(crate) fn env(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.trim().is_empty())
}

/// The value set in code, else the first variable set, parsed with `parse`; `None` when
/// nothing is set. A variable that does not parse is an error naming it and its value.
pub(crate) fn layered<T>(
    code: Option<T>,
    setter: &'static str,
    vars: &[&'static str],
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Option<(T, Origin)>, InitError> {
    if let Some(value) = code {
        return Ok(Some((value, Origin::Code(setter))));
    }
    for var in vars {
        if let Some(text) = env(var) {
            return match parse(&text) {
                Ok(value) => Ok(Some((value, Origin::Env(var)))),
                Err(expected) => Err(InitError::InvalidSetting {
                    name: (*var).to_owned(),
                    value: text,
                    expected,
                }),
            };
        }
    }
    Ok(None)
}
