//! The whole settings table: the configuration's rows, then diagnosis' and the pictures'.
//! Assembled here, above every module that keeps rows, so that no module below imports
//! one above it.

use crate::config::Setting;

/// Every setting: the configuration's rows, then the pictures', diagnosis' and the PyTorch
/// integration's.
pub fn settings() -> impl Iterator<Item = &'static Setting> {
    crate::config::ROWS
        .iter()
        .chain(crate::runlog::setup::ROWS)
        .chain(crate::diagnose::settings::ROWS)
        .chain(crate::config::torch::ROWS)
}

/// The setting named `name` (its Python keyword).
pub fn setting(name: &str) -> Option<&'static Setting> {
    settings().find(|s| s.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse::{boolean, BOOLEAN};
    use crate::config::table::DISABLED;
    use crate::config::vars::*;

    /// Read, but not settings: the sampler is ignored with a warning (see `Sampling`).
    const NOT_SETTINGS: &[&str] = &[OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG];

    #[test]
    fn every_gpuspan_and_otel_variable_read_is_in_one_row() {
        let in_rows: Vec<&str> = settings().flat_map(|s| s.vars.names()).collect();
        for var in ALL
            .iter()
            .filter(|v| v.starts_with("GPUSPAN_") || v.starts_with("OTEL_"))
            .filter(|v| !NOT_SETTINGS.contains(v))
        {
            let rows = in_rows.iter().filter(|v| *v == var).count();
            assert_eq!(rows, 1, "{var} is in {rows} rows of the settings table");
        }
        for var in &in_rows {
            assert!(ALL.contains(var), "{var} is not in config::vars");
        }
    }

    /// Python's `init()` docstring and the guide show each row's doc: one line, a sentence.
    #[test]
    fn every_row_says_what_it_does_in_one_line() {
        for setting in settings() {
            let doc = setting.doc;
            assert!(
                !doc.is_empty() && !doc.contains('\n') && doc.ends_with('.') && doc.len() <= 100,
                "{}: the doc {doc:?} is not one line of at most 100 characters ending in a period",
                setting.name
            );
        }
    }

    #[test]
    fn a_switch_takes_the_same_words_in_every_row() {
        let rows = settings().filter(|s| s.expected == BOOLEAN).count();
        assert!(rows >= 6, "{rows} switches");
        for (text, value) in [("on", true), ("TRUE", true), ("no", false), (" 0 ", false)] {
            assert_eq!(boolean(text), Ok(value), "{text}");
        }
        let error = DISABLED.read("maybe").unwrap_err().to_string();
        assert!(
            error.contains("\"maybe\"") && error.contains("on or off"),
            "{error}"
        );
    }
}
