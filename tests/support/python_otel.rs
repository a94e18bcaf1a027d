//! The Python interpreter of a venv holding the OpenTelemetry SDK and its OTLP exporters,
//! installed by `tests/python/install.sh` (idempotent; CI runs it too).

use std::path::PathBuf;
use std::process::Command;

/// `target/python-otel/venv/bin/python`, installing the venv first when needed.
pub fn python() -> PathBuf {
    let repo = crate::repo_root();
    let status = Command::new("bash")
        .arg(repo.join("tests/python/install.sh"))
        .status()
        .expect("running tests/python/install.sh");
    assert!(
        status.success(),
        "tests/python/install.sh failed ({status}): it installs the OpenTelemetry Python SDK \
         from PyPI"
    );
    let dir = std::env::var_os("PYTHON_OTEL_DIR")
        .map_or_else(|| repo.join("target/python-otel"), PathBuf::from);
    dir.join("venv/bin/python")
}

/// The training program the Python tests run.
pub fn train_py() -> PathBuf {
    crate::repo_root().join("tests/python/train.py")
}
