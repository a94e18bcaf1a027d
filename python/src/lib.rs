//! `gpuspan._native`: the Python package's bridge to the gpuspan crate. Every call goes to
//! the same public Rust API that Rust programs use; the Python idioms (context managers,
//! decorators, the allocator's peak stack) live in the `gpuspan` package around it.

use pyo3::prelude::*;

mod cli;
mod diff;
mod report;
mod settings;
mod span;
mod telemetry;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(telemetry::init, m)?)?;
    m.add_class::<telemetry::Telemetry>()?;
    m.add_function(wrap_pyfunction!(span::open_span, m)?)?;
    m.add_class::<span::ActiveSpan>()?;
    m.add_function(wrap_pyfunction!(span::record_allocator, m)?)?;
    m.add_function(wrap_pyfunction!(span::record_oom, m)?)?;
    m.add_function(wrap_pyfunction!(report::read_run, m)?)?;
    m.add_function(wrap_pyfunction!(diff::diff, m)?)?;
    m.add_function(wrap_pyfunction!(cli::cli_main, m)?)?;
    m.add_function(wrap_pyfunction!(settings::check_settings, m)?)?;
    m.add_function(wrap_pyfunction!(settings::torch_phases, m)?)?;
    m.add_function(wrap_pyfunction!(settings::torch_memory_history, m)?)?;
    m.add_function(wrap_pyfunction!(settings::launcher_rank, m)?)?;
    m.add_function(wrap_pyfunction!(settings::devices_chosen, m)?)?;
    m.add_function(wrap_pyfunction!(settings::cuda_device, m)?)?;
    m.add_function(wrap_pyfunction!(settings::hip_device, m)?)?;
    m.add_function(wrap_pyfunction!(settings::run_root, m)?)?;
    m.add("SETTINGS", settings::listing(m.py())?)?;
    m.add("SETTING_DOCS", settings::docs(m.py())?)?;
    m.add(
        "DEFAULT_MEMORY_HISTORY_ENTRIES",
        gpuspan::settings::DEFAULT_MEMORY_HISTORY_ENTRIES,
    )?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_submodule(&names(m.py())?)?;
    Ok(())
}

/// `gpuspan._native.names`: the names the Python package writes itself, from the crate's
/// one vocabulary.
fn names(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    use gpuspan::names::{attribute, span};
    let names = PyModule::new(py, "names")?;
    for (key, value) in [
        ("FORWARD", span::FORWARD),
        ("BACKWARD", span::BACKWARD),
        ("OPTIMIZER", span::OPTIMIZER),
        ("VALIDATION", span::VALIDATION),
        ("SANITY_CHECK", span::SANITY_CHECK),
        ("TEST", span::TEST),
        ("PREDICT", span::PREDICT),
        ("EVALUATION", span::EVALUATION),
        ("ML_PARAMS_BYTES", attribute::ML_PARAMS_BYTES),
        ("ML_GRADS_BYTES", attribute::ML_GRADS_BYTES),
        (
            "ML_OPTIMIZER_STATE_BYTES",
            attribute::ML_OPTIMIZER_STATE_BYTES,
        ),
    ] {
        names.add(key, value)?;
    }
    Ok(names)
}
