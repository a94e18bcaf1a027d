//! Unsigned numbers as OTel integers: a `u64`, `usize` or 128-bit field that fits in an
//! i64 reaches the OTel layer as an i64.
//!
//! tracing-opentelemetry has no `record_u64`: such a field falls back to its Debug form and
//! is exported as a string, which a backend cannot sum or plot and the batch-size fit cannot
//! read. Its visitor cannot be wrapped (it is made inside the layer) and tracing's `Value`
//! is sealed, so when a span's values hold such a number, they are replayed to the OTel
//! layer instead: a value set of the same fields with each value in the form the layer's
//! visitor would have seen (the number as an i64, a Debug value as its text). Spans without
//! such a number pass untouched, after one pass of a visitor that does nothing but look.
//!
//! Runs on the thread that creates or records the span. Nothing is allocated per span: the
//! values live on the stack, and text (strings, Debug forms) in one buffer per thread.

use std::cell::RefCell;
use std::fmt::{self, Write as _};

use tracing::field::{display, DisplayValue, Field, FieldSet, Value, ValueSet, Visit};

/// Fields a span may have for its values to be replayed; past that they pass untouched
/// (a macro span declares 14 of its own).
const MAX_FIELDS: usize = 48;

thread_local! {
    /// The text of the values being replayed, reused from span to span.
    static TEXT: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Whether `record` (a span's `Attributes::record` or `Record::record`) visits an unsigned
/// or 128-bit integer that fits in an i64.
pub(super) fn has_unsigned(record: impl FnOnce(&mut dyn Visit)) -> bool {
    let mut look = Look(false);
    record(&mut look);
    look.0
}

/// Calls `f` with `fields`' values as visited by `record`, each unsigned or 128-bit
/// integer that fits in an i64 as an i64. Returns `None`, without calling `f`, when they
/// cannot be replayed faithfully: more than [`MAX_FIELDS`] fields, an error value (the OTel
/// layer records its source chain), or the text buffer in use.
#[inline(never)]
pub(super) fn replay<R>(
    fields: &FieldSet,
    record: impl FnOnce(&mut dyn Visit),
    f: impl FnOnce(&ValueSet<'_>) -> R,
) -> Option<R> {
    if fields.len() > MAX_FIELDS {
        return None;
    }
    TEXT.try_with(|text| {
        let mut text = text.try_borrow_mut().ok()?;
        text.clear();
        let mut capture = Capture {
            values: [Captured::Absent; MAX_FIELDS],
            text: &mut text,
            faithful: true,
        };
        record(&mut capture);
        let Capture {
            values, faithful, ..
        } = capture;
        if !faithful {
            return None;
        }
        let result = with_value_set(fields, &values, &text, f);
        if text.capacity() > 1 << 16 {
            *text = String::new();
        }
        Some(result)
    })
    .ok()
    .flatten()
}

/// Builds the value set of `values` (text ranges into `text`) and calls `f` with it.
fn with_value_set<R>(
    fields: &FieldSet,
    values: &[Captured; MAX_FIELDS],
    text: &str,
    f: impl FnOnce(&ValueSet<'_>) -> R,
) -> R {
    let mut handles: [Option<Field>; MAX_FIELDS] = std::array::from_fn(|_| None);
    for field in fields.iter() {
        if let Some(slot) = handles.get_mut(field.index()) {
            *slot = Some(field);
        }
    }
    let strs: [&str; MAX_FIELDS] = std::array::from_fn(|i| match values[i] {
        Captured::Str(start, end) => &text[start..end],
        _ => "",
    });
    let shown: [Option<DisplayValue<&str>>; MAX_FIELDS] =
        std::array::from_fn(|i| match values[i] {
            Captured::Debug(start, end) => Some(display(&text[start..end])),
            _ => None,
        });
    let Some(placeholder) = handles.iter().flatten().next() else {
        let none: [(&Field, Option<&dyn Value>); 0] = [];
        return f(&fields.value_set(&none));
    };
    let entries: [(&Field, Option<&dyn Value>); MAX_FIELDS] = std::array::from_fn(|i| {
        let value: Option<&dyn Value> = match &values[i] {
            Captured::Absent => None,
            Captured::Bool(v) => Some(v),
            Captured::Int(v) => Some(v),
            Captured::Float(v) => Some(v),
            Captured::Str(..) => Some(&strs[i]),
            Captured::Debug(..) => shown[i].as_ref().map(|v| v as &dyn Value),
        };
        match &handles[i] {
            Some(field) => (field, value),
            // Entries past the fields carry no value, so the value set skips them.
            None => (placeholder, None),
        }
    });
    f(&fields.value_set(&entries))
}

/// A value as the OTel layer's visitor would have seen it.
#[derive(Debug, Clone, Copy)]
enum Captured {
    Absent,
    Bool(bool),
    Int(i64),
    Float(f64),
    /// A string: start and end in the text buffer.
    Str(usize, usize),
    /// A Debug form (recorded again through `record_debug`).
    Debug(usize, usize),
}

/// Looks for an unsigned or 128-bit integer that fits in an i64; ignores everything else.
struct Look(bool);

impl Visit for Look {
    fn record_u64(&mut self, _: &Field, value: u64) {
        self.0 |= i64::try_from(value).is_ok();
    }

    fn record_u128(&mut self, _: &Field, value: u128) {
        self.0 |= i64::try_from(value).is_ok();
    }

    fn record_i128(&mut self, _: &Field, value: i128) {
        self.0 |= i64::try_from(value).is_ok();
    }

    fn record_debug(&mut self, _: &Field, _: &dyn fmt::Debug) {}
}

struct Capture<'a> {
    values: [Captured; MAX_FIELDS],
    text: &'a mut String,
    /// False once a value was seen that the replay would change.
    faithful: bool,
}

impl Capture<'_> {
    fn set(&mut self, field: &Field, value: Captured) {
        match self.values.get_mut(field.index()) {
            Some(slot) => *slot = value,
            None => self.faithful = false,
        }
    }

    fn text(&mut self, field: &Field, write: impl FnOnce(&mut String) -> fmt::Result) {
        let start = self.text.len();
        if write(self.text).is_err() {
            self.faithful = false;
        }
        self.set(field, Captured::Debug(start, self.text.len()));
    }

    fn integer(&mut self, field: &Field, value: Option<i64>, shown: &dyn fmt::Debug) {
        match value {
            Some(value) => self.set(field, Captured::Int(value)),
            None => self.text(field, |text| write!(text, "{shown:?}")),
        }
    }
}

impl Visit for Capture<'_> {
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.set(field, Captured::Bool(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.set(field, Captured::Int(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.integer(field, i64::try_from(value).ok(), &value);
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        self.integer(field, i64::try_from(value).ok(), &value);
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        self.integer(field, i64::try_from(value).ok(), &value);
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.set(field, Captured::Float(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        let start = self.text.len();
        self.text.push_str(value);
        self.set(field, Captured::Str(start, self.text.len()));
    }

    fn record_error(&mut self, _: &Field, _: &(dyn std::error::Error + 'static)) {
        self.faithful = false;
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.text(field, |text| write!(text, "{value:?}"));
    }
}
