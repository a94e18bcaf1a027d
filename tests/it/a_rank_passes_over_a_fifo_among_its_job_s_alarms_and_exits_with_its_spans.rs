//! A rank of a job of two whose `alarms/` holds a FIFO named as another rank's alarm:
//! opening it for reading would wait for a writer. The rank's thread that reads the alarms
//! passes over it with one line naming it, so the rank trains, keeps every span, and exits
//! without its shutdown having to give up on that thread.

use gpuspan_test_support as support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use support::example::{read_spans, train_command};
use support::fake_nvml::FakeNvml;

#[test]
fn the_rank_exits_with_its_spans_and_names_the_fifo_once() {
    let fake = FakeNvml::build();
    let root = tempfile::tempdir().unwrap();
    let alarms = root.path().join("job").join("alarms");
    std::fs::create_dir_all(&alarms).unwrap();
    let fifo = alarms.join("rank-1-1.json");
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);

    let mut rank = train_command(
        &["--epochs", "1", "--steps", "5"],
        &[
            ("GPUSPAN_NVML_LIB", fake.path().to_str().unwrap()),
            ("GPUSPAN_RUN_DIR", root.path().to_str().unwrap()),
            ("GPUSPAN_RUN_ID", "job"),
            ("RANK", "0"),
            ("LOCAL_RANK", "0"),
            ("WORLD_SIZE", "2"),
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("train starts");

    // Shutdown waits at most 5 s for gpuspan's local files; a minute is far past that.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut hung = false;
    while rank.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            hung = true;
            let _ = rank.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = rank.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!hung, "the rank hung at exit: {stderr}");
    assert!(out.status.success(), "{stderr}");
    let passing_over = format!("gpuspan: warning: passing over {}", fifo.display());
    assert_eq!(stderr.matches(&passing_over).count(), 1, "{stderr}");
    assert!(!stderr.contains("gave up waiting"), "{stderr}");
    let steps = read_spans(&root.path().join("job").join("rank-0"))
        .into_iter()
        .filter(|s| s.name == "step")
        .count();
    assert_eq!(steps, 5, "every step span is kept");
}
