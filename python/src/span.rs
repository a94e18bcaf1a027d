//! Spans opened from Python: the crate's `epoch_span!`, `step_span!` and `memory_span!`
//! guards, kept in a structure that only the opening thread may touch (the guard marks
//! the span current on that thread, so it is not `Send`).

use std::sync::Mutex;
use std::thread::ThreadId;

use opentelemetry::trace::{
    SpanContext, SpanId, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{Context, ContextGuard, KeyValue, Value};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Which macro opens the span.
const EPOCH: u8 = 0;
const STEP: u8 = 1;
const OTHER: u8 = 2;

/// The guard and the parent context it was opened in, dropped in that order when the span
/// ends (the span closes, then the parent stops being current).
struct Opened {
    guard: gpuspan::MemorySpan,
    _parent: ContextGuard,
}

/// Holds `Opened` across Python threads. Only ever touched on `ActiveSpan::thread`: every
/// access checks the thread first, and a span dropped elsewhere is leaked, not closed.
struct OnOpeningThread(Opened);

// SAFETY: the value is created, used and dropped only on the thread that created it; the
// checks in `ActiveSpan::end` and `Drop for ActiveSpan` enforce it.
unsafe impl Send for OnOpeningThread {}

/// An open gpuspan span.
#[pyclass(frozen, module = "gpuspan")]
pub(crate) struct ActiveSpan {
    /// 0: epoch, 1: step, 2: any other span.
    #[pyo3(get)]
    kind: u8,
    thread: ThreadId,
    name: String,
    opened: Mutex<Option<OnOpeningThread>>,
    /// The span's own context, to parent spans opened inside it.
    context: Context,
    #[pyo3(get)]
    trace_id: u128,
    #[pyo3(get)]
    span_id: u64,
    #[pyo3(get)]
    trace_flags: u8,
    /// Whether the span has a valid context (gpuspan is set up and the span is recorded):
    /// cheaper to read than `trace_id`, which is a 128-bit integer.
    #[pyo3(get)]
    valid: bool,
}

/// Opens a span: `kind` 0 = epoch, 1 = step, 2 = a named span.
///
/// `parent` is the span to nest under: an `ActiveSpan`, a `(trace_id, span_id, flags)`
/// triple from the program's own OpenTelemetry span, or `None` for a new trace.
#[pyfunction]
#[pyo3(signature = (kind, index, name, attributes = None, parent = None))]
pub(crate) fn open_span(
    kind: u8,
    index: i64,
    name: &str,
    attributes: Option<&Bound<'_, PyDict>>,
    parent: Option<&Bound<'_, PyAny>>,
) -> PyResult<ActiveSpan> {
    let parent_cx = match parent {
        None => Context::new(),
        Some(p) => parent_context(p)?,
    };
    let values = match attributes {
        Some(dict) => convert(dict)?,
        None => Vec::new(),
    };
    // With the parent current, the new span takes it as parent (tracing-opentelemetry reads
    // the current OTel context for contextual spans).
    let parent_guard = parent_cx.attach();
    let guard = match kind {
        EPOCH => gpuspan::epoch_span!(index),
        STEP => gpuspan::step_span!(index),
        OTHER => gpuspan::memory_span!("span", otel.name = name),
        _ => return Err(PyValueError::new_err("span kind must be 0, 1 or 2")),
    };
    let span = guard.span();
    for kv in values {
        span.set_attribute(kv.key, kv.value);
    }
    let context = span.context();
    let (trace_id, span_id, trace_flags) = {
        let otel = context.span();
        let sc = otel.span_context();
        (
            u128::from_be_bytes(sc.trace_id().to_bytes()),
            u64::from_be_bytes(sc.span_id().to_bytes()),
            sc.trace_flags().to_u8(),
        )
    };
    Ok(ActiveSpan {
        kind,
        thread: std::thread::current().id(),
        name: name.to_owned(),
        opened: Mutex::new(Some(OnOpeningThread(Opened {
            guard,
            _parent: parent_guard,
        }))),
        context,
        trace_id,
        span_id,
        trace_flags,
        valid: trace_id != 0,
    })
}

fn parent_context(parent: &Bound<'_, PyAny>) -> PyResult<Context> {
    if let Ok(active) = parent.downcast::<ActiveSpan>() {
        return Ok(active.get().context.clone());
    }
    let (trace_id, span_id, flags): (u128, u64, u8) = parent.extract().map_err(|_| {
        PyTypeError::new_err("parent must be a gpuspan span or a (trace_id, span_id, flags) tuple")
    })?;
    let remote = SpanContext::new(
        TraceId::from(trace_id),
        SpanId::from(span_id),
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    );
    Ok(Context::new().with_remote_span_context(remote))
}

/// Keyword attributes as OTel values.
fn convert(dict: &Bound<'_, PyDict>) -> PyResult<Vec<KeyValue>> {
    let mut out = Vec::with_capacity(dict.len());
    for (key, value) in dict.iter() {
        out.push(KeyValue::new(key.extract::<String>()?, value_of(&value)?));
    }
    Ok(out)
}

/// bool, int, float and str as themselves; an int beyond 64 bits and anything else as its
/// `str()`.
fn value_of(value: &Bound<'_, PyAny>) -> PyResult<Value> {
    Ok(if value.is_instance_of::<PyBool>() {
        value.extract::<bool>()?.into()
    } else if value.is_instance_of::<PyInt>() {
        match value.extract::<i64>() {
            Ok(v) => v.into(),
            Err(_) => value.str()?.to_string().into(),
        }
    } else if value.is_instance_of::<PyFloat>() {
        value.extract::<f64>()?.into()
    } else if let Ok(text) = value.downcast::<PyString>() {
        text.to_cow()?.into_owned().into()
    } else {
        value.str()?.to_string().into()
    })
}

#[pymethods]
impl ActiveSpan {
    /// Ends the span on the thread that opened it, after recording the allocator figures
    /// (`(allocated start, end, peak, reserved start, end, peak)`) and an error message.
    #[pyo3(signature = (allocator = None, error = None))]
    fn end(&self, allocator: Option<[i64; 6]>, error: Option<String>) -> PyResult<()> {
        let here = std::thread::current().id();
        if here != self.thread {
            return Err(PyRuntimeError::new_err(format!(
                "gpuspan span {:?} was opened on thread {:?} and cannot be ended on thread \
                 {:?}: end a span on the thread that opened it (a `with` block does), and \
                 open a new span in each thread",
                self.name, self.thread, here
            )));
        }
        let opened = self
            .opened
            .lock()
            .ok()
            .and_then(|mut o| o.take())
            .ok_or_else(|| {
                PyRuntimeError::new_err(format!("gpuspan span {:?} has already ended", self.name))
            })?;
        let span = opened.0.guard.span();
        if let Some([a_start, a_end, a_peak, r_start, r_end, r_peak]) = allocator {
            // Declared fields, so the crate's own recording of these stays consistent.
            span.record("gpu.allocator.allocated.peak", a_peak);
            span.record("gpu.allocator.reserved.peak", r_peak);
            span.set_attribute("gpu.allocator.allocated.start", a_start);
            span.set_attribute("gpu.allocator.allocated.end", a_end);
            span.set_attribute("gpu.allocator.reserved.start", r_start);
            span.set_attribute("gpu.allocator.reserved.end", r_end);
        }
        if let Some(message) = error {
            span.set_status(Status::error(message));
        }
        drop(opened);
        Ok(())
    }

    /// Closes the span without exporting it (a step opened ahead of an optimizer step that
    /// never came); the span it was opened in ends as usual. See `MemorySpan::abandon`.
    fn abandon(&self) -> PyResult<()> {
        let here = std::thread::current().id();
        if here != self.thread {
            return Err(PyRuntimeError::new_err(format!(
                "gpuspan span {:?} was opened on thread {:?}: abandon it on that thread",
                self.name, self.thread
            )));
        }
        let opened = self.opened.lock().ok().and_then(|mut o| o.take());
        if let Some(OnOpeningThread(opened)) = opened {
            opened.guard.abandon();
        }
        Ok(())
    }

    /// Sets an attribute on the open span (a figure known only at the end of a step, such
    /// as the loss): bool, int, float and str as themselves, anything else as its `str()`.
    fn set_attribute(&self, key: String, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let here = std::thread::current().id();
        if here != self.thread {
            return Err(PyRuntimeError::new_err(format!(
                "gpuspan span {:?} was opened on thread {:?}: set its attributes on that thread",
                self.name, self.thread
            )));
        }
        let guard = self
            .opened
            .lock()
            .map_err(|_| PyRuntimeError::new_err("gpuspan span is unusable after a crash"))?;
        let opened = guard.as_ref().ok_or_else(|| {
            PyRuntimeError::new_err(format!("gpuspan span {:?} has already ended", self.name))
        })?;
        opened.0.guard.span().set_attribute(key, value_of(value)?);
        Ok(())
    }

    /// Whether the span is still open.
    #[getter]
    fn is_open(&self) -> bool {
        self.opened.lock().is_ok_and(|o| o.is_some())
    }

    fn __repr__(&self) -> String {
        format!(
            "<gpuspan span {:?} trace_id={:032x} span_id={:016x}{}>",
            self.name,
            self.trace_id,
            self.span_id,
            if self.is_open() { "" } else { " ended" }
        )
    }
}

impl Drop for ActiveSpan {
    fn drop(&mut self) {
        let Some(opened) = self.opened.get_mut().ok().and_then(Option::take) else {
            return;
        };
        if std::thread::current().id() == self.thread {
            drop(opened);
        } else {
            // Closing it here would pop another thread's span stack: leave it open.
            eprintln!(
                "gpuspan: span {:?} was never ended on the thread that opened it; it is left \
                 open (end spans with `with` on the thread that opens them)",
                self.name
            );
            std::mem::forget(opened);
        }
    }
}

/// Records an out-of-memory error the program caught: `gpu.memory.oom` on the innermost
/// open span, and the near-OOM timeline file in the run directory.
#[pyfunction]
pub(crate) fn record_oom(py: Python<'_>, message: String) {
    py.detach(|| gpuspan::record_oom(&message));
}

/// Records the framework allocator's counters, in bytes: spans open now record the highest
/// values as `gpu.allocator.allocated.peak` and `gpu.allocator.reserved.peak`.
#[pyfunction]
pub(crate) fn record_allocator(allocated: u64, reserved: u64) {
    gpuspan::record_allocator(allocated, reserved);
}
