//! A row of the settings table: a setting's name, builder setter, variables, grammar,
//! default and one-line doc (a [`Setting`], what people read), with the parser and the
//! bounds its values meet ([`Row`]), and where the default is one value, that value
//! ([`Defaulted`]).

use super::error::{InvalidValue, SettingError};

/// One setting, as users see it.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// Its name: the Python keyword.
    pub name: &'static str,
    /// The `Builder` method that sets it in code (beating the variables); empty for a
    /// setting only the environment sets (see [`Setting::in_code`]).
    pub setter: &'static str,
    /// The variables that set it when code does not.
    pub vars: Vars,
    /// What a variable's value may be.
    pub expected: &'static str,
    /// What applies when nothing sets it.
    pub default: &'static str,
    /// What it does, in one line.
    pub doc: &'static str,
}

impl Setting {
    /// Whether code sets it too (a `Builder` setter and a keyword of Python's `init()`),
    /// not only the environment (the PyTorch integration's switches).
    pub fn in_code(&self) -> bool {
        !self.setter.is_empty()
    }
}

/// The variables of a setting, in precedence order.
#[derive(Debug, Clone, Copy)]
pub enum Vars {
    /// None: only code sets it.
    CodeOnly,
    /// The first of these that is set.
    Ordered(&'static [&'static str]),
    /// One per signal, each before the one for every signal.
    PerSignal {
        /// For traces.
        traces: &'static str,
        /// For metrics.
        metrics: &'static str,
        /// For every signal.
        every: &'static str,
    },
}

/// Which signal a setting is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    Traces,
    Metrics,
}

impl Vars {
    /// Every variable, in precedence order (per signal: traces', metrics', every signal's).
    pub fn names(&self) -> Vec<&'static str> {
        match *self {
            Vars::CodeOnly => Vec::new(),
            Vars::Ordered(names) => names.to_vec(),
            Vars::PerSignal {
                traces,
                metrics,
                every,
            } => vec![traces, metrics, every],
        }
    }

    /// The variable people set: the one for every signal, else the first in order; `None`
    /// for a setting only code sets.
    pub fn primary(&self) -> Option<&'static str> {
        match *self {
            Vars::CodeOnly => None,
            Vars::Ordered(names) => names.first().copied(),
            Vars::PerSignal { every, .. } => Some(every),
        }
    }

    /// The variables read for `signal`, first one first.
    pub(crate) fn precedence(&self, signal: Option<Signal>) -> Vec<&'static str> {
        match (*self, signal) {
            (Vars::PerSignal { traces, every, .. }, Some(Signal::Traces)) => vec![traces, every],
            (Vars::PerSignal { metrics, every, .. }, Some(Signal::Metrics)) => {
                vec![metrics, every]
            }
            (Vars::PerSignal { every, .. }, None) => vec![every],
            (vars, _) => vars.names(),
        }
    }
}

/// A setting with its parser and its bounds.
pub(crate) struct Row<T: 'static> {
    pub(crate) setting: Setting,
    /// Reads a variable's text (or text given in code).
    pub(crate) parse: fn(&str) -> Result<T, InvalidValue>,
    /// Bounds every value meets, from code or a variable; `Err` says what would do.
    pub(crate) check: fn(&T) -> Result<(), &'static str>,
}

fn accept<T>(_: &T) -> Result<(), &'static str> {
    Ok(())
}

impl<T> Row<T> {
    pub(crate) const fn new(
        name: &'static str,
        vars: Vars,
        expected: &'static str,
        default: &'static str,
        parse: fn(&str) -> Result<T, InvalidValue>,
    ) -> Self {
        Row {
            setting: Setting {
                name,
                setter: name,
                vars,
                expected,
                default,
                doc: "",
            },
            parse,
            check: accept::<T>,
        }
    }

    /// The row with what it does, in one line (a unit test holds every row to one).
    pub(crate) const fn doc(mut self, doc: &'static str) -> Self {
        self.setting.doc = doc;
        self
    }

    /// The row with a setter named unlike the setting (one entry per call).
    pub(crate) const fn setter(mut self, setter: &'static str) -> Self {
        self.setting.setter = setter;
        self
    }

    /// The row of a setting only the environment sets: no setter, no Python keyword.
    pub(crate) const fn environment_only(mut self) -> Self {
        self.setting.setter = "";
        self
    }

    /// The row with bounds.
    pub(crate) const fn checked(mut self, check: fn(&T) -> Result<(), &'static str>) -> Self {
        self.check = check;
        self
    }

    /// The row with a value of its own when nothing sets it: `value` gives it, and the
    /// row's default text (what people read) says it, which a unit test holds them to.
    pub(crate) const fn defaults_to(self, value: fn() -> T) -> Defaulted<T> {
        Defaulted { row: self, value }
    }

    /// Parses `text` and checks the bounds.
    pub(crate) fn read(&self, text: &str) -> Result<T, InvalidValue> {
        let value = (self.parse)(text)?;
        (self.check)(&value).map_err(|expected| InvalidValue::new(text, expected))?;
        Ok(value)
    }

    /// Reads text given to the builder, named after the setter.
    pub(crate) fn read_code(&self, text: &str) -> Result<T, SettingError> {
        self.read(text)
            .map_err(|error| error.named(self.setting.setter, text))
    }
}

/// A row whose default is one value: the one definition of that default, which code,
/// the row's default text and the documentation read.
pub(crate) struct Defaulted<T: 'static> {
    pub(crate) row: Row<T>,
    /// The value when neither code nor a variable sets one.
    pub(crate) value: fn() -> T,
}

impl<T> std::ops::Deref for Defaulted<T> {
    type Target = Row<T>;

    fn deref(&self) -> &Row<T> {
        &self.row
    }
}
