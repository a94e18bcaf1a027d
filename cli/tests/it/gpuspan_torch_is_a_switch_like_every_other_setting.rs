//! `GPUSPAN_TORCH` takes what every switch takes: `no` turns the PyTorch bootstrap off as
//! `0` does (the command's Python path stays as it was), and a value that is not a switch
//! stops `gpuspan run` with the error every setting gives, before the command starts.

use gpuspan_test_support as support;

use support::example::clean_command;
use support::fake_nvml::FakeNvml;

/// `gpuspan run -- sh -c 'echo "[$PYTHONPATH]"'` with `GPUSPAN_TORCH=value`.
fn python_path_under(value: &str) -> (Option<i32>, String, String) {
    let fake = FakeNvml::build();
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let mut command = clean_command(
        env!("CARGO_BIN_EXE_gpuspan"),
        &["run", "--", "sh", "-c", "echo \"[$PYTHONPATH]\""],
        &[
            ("GPUSPAN_NVML_LIB", &fake.path().to_string_lossy()),
            ("GPUSPAN_RUN_DIR", &runs.to_string_lossy()),
            ("GPUSPAN_TORCH", value),
        ],
    );
    command.env_remove("PYTHONPATH").current_dir(dir.path());
    let out = command.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_switch_spelling_turns_the_bootstrap_on_or_off() {
    for off in ["0", "no", "OFF", "false"] {
        let (code, path, stderr) = python_path_under(off);
        assert_eq!(code, Some(0), "GPUSPAN_TORCH={off}: {stderr}");
        assert_eq!(path, "[]", "GPUSPAN_TORCH={off} leaves the bootstrap out");
    }
    for on in ["1", "yes", "on"] {
        let (code, path, stderr) = python_path_under(on);
        assert_eq!(code, Some(0), "GPUSPAN_TORCH={on}: {stderr}");
        assert_ne!(path, "[]", "GPUSPAN_TORCH={on} gives the bootstrap");
    }
}

#[test]
fn a_value_that_is_not_a_switch_is_named_with_what_would_do() {
    let (code, path, stderr) = python_path_under("maybe");
    assert_ne!(code, Some(0), "{stderr}");
    assert!(path.is_empty(), "the command ran: {path}");
    assert!(
        stderr.contains("GPUSPAN_TORCH=\"maybe\" is not valid") && stderr.contains("yes or no"),
        "{stderr}"
    );
}
