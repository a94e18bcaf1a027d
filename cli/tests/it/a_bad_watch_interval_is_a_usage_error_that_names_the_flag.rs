//! `gpuspan watch --every` reads durations with the same grammar as the settings
//! (`GPUSPAN_SAMPLE_INTERVAL`): a value it cannot take is a usage error that names the flag
//! and the accepted form, never a panic, whatever the size of the number.

use gpuspan_test_support as support;

use std::process::{Command, Output};

use support::fake_nvml::FakeNvml;

fn watch(every: &str, fake: &FakeNvml) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuspan"))
        // `--every=VALUE`, so that a value starting with `-` is still the flag's.
        .args(["watch", &format!("--every={every}"), "--count", "1"])
        .env("GPUSPAN_NVML_LIB", fake.path())
        .env("FAKE_NVML_DEVICES", "1")
        .output()
        .expect("run gpuspan watch")
}

#[test]
fn a_value_out_of_range_or_unreadable_is_a_usage_error() {
    let fake = FakeNvml::build();
    for every in [
        "100000000000000000000s",
        "18446744073709551616ms",
        "1e308s",
        "inf",
        "NaN",
        "-1s",
        "5 parsecs",
        "2d",
    ] {
        let out = watch(every, &fake);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{every}: {stderr}");
        assert_eq!(out.status.code(), Some(2), "{every}: {stderr}");
        assert!(stderr.contains("--every"), "{every}: {stderr}");
        assert!(stderr.contains(every), "{every}: {stderr}");
        assert!(
            stderr.contains("a duration such as 5ms, 500us or 1s"),
            "{every}: {stderr}"
        );
    }
}

#[test]
fn an_interval_under_10ms_is_a_usage_error_that_says_the_least() {
    let fake = FakeNvml::build();
    let out = watch("5ms", &fake);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--every"), "{stderr}");
    assert!(stderr.contains("at least 10ms"), "{stderr}");
}

#[test]
fn every_unit_of_the_settings_grammar_is_taken() {
    let fake = FakeNvml::build();
    for every in ["20ms", "20000us", "0.02s", "20"] {
        let out = watch(every, &fake);
        assert!(
            out.status.success(),
            "{every}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
    }
}
