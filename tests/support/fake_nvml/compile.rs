//! The fake NVML built from its C sources with the system `cc`, once per variant (its
//! `-D` defines) per test process, under a name of its own then renamed, since other test
//! processes may build the same variant at the same time.

use std::collections::HashMap;
use std::fs;
use std::io::ErrorKind;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The compiled fake for `defines`, built once per variant per process.
pub(super) fn compiled_library(defines: &[&str]) -> PathBuf {
    static CACHE: OnceLock<Mutex<HashMap<Vec<String>, PathBuf>>> = OnceLock::new();
    let key: Vec<String> = defines.iter().map(|d| d.to_string()).collect();
    let mut cache = CACHE
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(path) = cache.get(&key) {
        return path.clone();
    }
    let path = compile(defines);
    cache.insert(key, path.clone());
    path
}

fn compile(defines: &[&str]) -> PathBuf {
    let source = crate::repo_root().join("tests/fake_nvml/fake_nvml.c");
    let out_dir = crate::target_tmp_dir().join("fake-nvml");
    fs::create_dir_all(&out_dir).unwrap_or_else(|e| panic!("creating {}: {e}", out_dir.display()));

    let variant = if defines.is_empty() {
        "default".to_string()
    } else {
        defines
            .iter()
            .map(|d| {
                d.chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("+")
    };
    let target = out_dir.join(format!("libfake_nvml-{variant}.so"));
    // Build under a name of our own, then rename: another test process may
    // be building or copying the same variant at the same time.
    let partial = out_dir.join(format!(
        "libfake_nvml-{variant}.{}.partial",
        std::process::id()
    ));

    let mut cmd = Command::new("cc");
    cmd.args([
        "-shared",
        "-fPIC",
        "-O2",
        "-pthread",
        "-fvisibility=hidden",
        "-Wall",
        "-Wextra",
        "-Wl,-soname,libnvidia-ml.so.1",
    ]);
    for define in defines {
        cmd.arg(format!("-D{define}"));
    }
    cmd.arg("-o").arg(&partial).arg(&source);

    let output = match cmd.output() {
        Ok(output) => output,
        Err(e) if e.kind() == ErrorKind::NotFound => panic!(
            "the fake NVML library is built with a C compiler, but `cc` was not found on \
             PATH; install one (gcc or clang) to run these tests"
        ),
        Err(e) => panic!("running `cc` to build the fake NVML library: {e}"),
    };
    if !output.status.success() {
        let _ = fs::remove_file(&partial);
        panic!(
            "`cc` failed ({}) building {} with {defines:?}:\n{}{}",
            output.status,
            source.display(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    fs::rename(&partial, &target)
        .unwrap_or_else(|e| panic!("moving {} to {}: {e}", partial.display(), target.display()));
    target
}
