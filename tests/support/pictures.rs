//! The tools the picture tests check with, installed by `tests/pictures/install.sh`:
//! headless Chromium driven by playwright-core, and the `tensorboard` package's reader.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The repository root.
pub fn repo() -> PathBuf {
    crate::repo_root().to_path_buf()
}

/// Where the install script puts things (`target/pictures`).
pub fn tools() -> PathBuf {
    static INSTALLED: OnceLock<PathBuf> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            let script = repo().join("tests/pictures/install.sh");
            let status = Command::new("bash")
                .arg(&script)
                .status()
                .expect("bash runs the install script");
            assert!(status.success(), "{} failed", script.display());
            repo().join("target/pictures")
        })
        .clone()
}

/// Runs `tests/pictures/<script>` with node, with playwright-core on its module path, and
/// returns its standard output parsed as JSON.
pub fn node(script: &str, args: &[&Path]) -> serde_json::Value {
    let mut command = Command::new("node");
    command.env("NODE_PATH", tools().join("node_modules"));
    run_script(command, script, args)
}

/// Runs `tests/pictures/<script>` with the venv's Python and returns its output as JSON.
pub fn python(script: &str, args: &[&Path]) -> serde_json::Value {
    run_script(Command::new(tools().join("venv/bin/python")), script, args)
}

/// Runs `tests/pictures/<script>` with `interpreter`; asserts it succeeded and returns its
/// standard output parsed as JSON.
fn run_script(mut interpreter: Command, script: &str, args: &[&Path]) -> serde_json::Value {
    let output = interpreter
        .arg(repo().join("tests/pictures").join(script))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{script} does not run: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{script} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{script} printed {stdout}: {e}"))
}

/// A folder under `target/` for files a test leaves to be looked at (screenshots).
pub fn artefacts() -> PathBuf {
    let dir = repo().join("target/test-artefacts");
    std::fs::create_dir_all(&dir).expect("target/test-artefacts");
    dir
}
