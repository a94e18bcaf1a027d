//! The errors of reading a setting: a value a grammar does not take, and the same named
//! after the variable or builder setter it came from.

use std::borrow::Cow;

use crate::error::InitError;

/// A value that a setting's grammar does not accept, with what would be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not valid: expected {expected}")]
pub struct InvalidValue {
    value: String,
    expected: Cow<'static, str>,
}

impl InvalidValue {
    pub(crate) fn new(value: &str, expected: impl Into<Cow<'static, str>>) -> Self {
        Self {
            value: value.to_owned(),
            expected: expected.into(),
        }
    }

    /// The value as given.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// What would be accepted, such as `grpc or http/protobuf`.
    pub fn expected(&self) -> &str {
        &self.expected
    }

    /// Names the variable or setter the value came from; `value` is the text as given
    /// there (a variable's, before trimming).
    pub(crate) fn named(self, name: impl Into<Cow<'static, str>>, value: &str) -> SettingError {
        SettingError {
            name: name.into(),
            value: value.to_owned(),
            expected: self.expected,
        }
    }

    /// Whether the message says `text` (for tests).
    #[cfg(test)]
    pub(crate) fn contains(&self, text: &str) -> bool {
        self.to_string().contains(text)
    }
}

/// A setting that does not parse, named after its variable or builder setter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}={value:?} is not valid: expected {expected}")]
pub(crate) struct SettingError {
    name: Cow<'static, str>,
    value: String,
    expected: Cow<'static, str>,
}

impl SettingError {
    pub(crate) fn new(
        name: impl Into<Cow<'static, str>>,
        value: &str,
        expected: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self {
            name: name.into(),
            value: value.to_owned(),
            expected: expected.into(),
        }
    }
}

impl From<SettingError> for InitError {
    fn from(error: SettingError) -> Self {
        InitError::InvalidSetting {
            name: error.name.into_owned(),
            value: error.value,
            expected: error.expected.into_owned(),
        }
    }
}
