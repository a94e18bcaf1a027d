//! `gpuspan run` passes SIGINT, SIGQUIT and SIGTERM on to its command only while the
//! command runs. Once it has ended, they take their usual course again: a Ctrl-C while the
//! spans drain to a slow backend ends gpuspan at once, and a program that calls
//! `gpuspan_cli::collect::run` gets back the dispositions it had (the default action, or its
//! own handler).

use gpuspan_test_support as support;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::commands::wait_within;
use support::example::clean_command;
use support::fake_nvml::FakeNvml;
use support::terminal::without_a_terminal;

/// The command writes its pid and ends; gpuspan then drains its spans to a forward target
/// where nothing listens, which takes the whole of its drain bound.
fn draining_gpuspan(dir: &Path, fake: &FakeNvml) -> std::process::Child {
    let endpoint = support::receiver::unused_endpoint();
    let mut gpuspan = clean_command(
        env!("CARGO_BIN_EXE_gpuspan"),
        &[
            "run",
            "--",
            "sh",
            "-c",
            "echo $$ > pid.tmp && mv pid.tmp pid",
        ],
        &[
            ("GPUSPAN_NVML_LIB", fake.path().to_str().unwrap()),
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_METRICS_EXPORTER", "none"),
        ],
    );
    gpuspan
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    without_a_terminal(&mut gpuspan);
    gpuspan.spawn().unwrap()
}

/// Waits until the command has ended and gpuspan has collected it (its pid is gone).
fn wait_for_the_command_to_be_collected(dir: &Path, gpuspan: &mut std::process::Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let pid = loop {
        if let Ok(pid) = std::fs::read_to_string(dir.join("pid")) {
            break pid.trim().to_owned();
        }
        assert!(gpuspan.try_wait().unwrap().is_none(), "gpuspan ended early");
        assert!(Instant::now() < deadline, "the command never ran");
        std::thread::sleep(Duration::from_millis(5));
    };
    while Path::new("/proc").join(&pid).exists() {
        assert!(Instant::now() < deadline, "the command was never collected");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn ends_gpuspan_during_the_drain(signal: libc::c_int) {
    let fake = FakeNvml::build();
    let dir = tempfile::tempdir().unwrap();
    let mut gpuspan = draining_gpuspan(dir.path(), &fake);
    wait_for_the_command_to_be_collected(dir.path(), &mut gpuspan);
    support::signalled::send(gpuspan.id() as i32, signal);
    let status = wait_within(&mut gpuspan, Duration::from_secs(60));
    assert_eq!(
        status.signal(),
        Some(signal),
        "gpuspan ended by the signal's default action, not after its drain: {status}"
    );
}

#[test]
fn a_sigint_during_the_drain_ends_gpuspan() {
    ends_gpuspan_during_the_drain(libc::SIGINT);
}

#[test]
fn a_sigterm_during_the_drain_ends_gpuspan() {
    ends_gpuspan_during_the_drain(libc::SIGTERM);
}

/// Set in the copy of this test binary that plays the program calling
/// `gpuspan_cli::collect::run`.
const HOST: &str = "GPUSPAN_TEST_RUN_HOST";

static HANDLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn host_handler(_: libc::c_int) {
    HANDLED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// The program: its own SIGINT handler, SIGTERM left to its default; a command run; then
/// SIGINT raised (its handler says so) and SIGTERM raised (which should end it).
fn host() {
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        libc::signal(
            libc::SIGINT,
            host_handler as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
        libc::signal(libc::SIGTERM, libc::SIG_DFL);
    }
    let command: Vec<std::ffi::OsString> = ["sh", "-c", "exit 3"].map(Into::into).to_vec();
    let outcome = gpuspan_cli::collect::run(&command, gpuspan::Protocol::Grpc).unwrap();
    assert_eq!(outcome.exit_code, 3);
    // SAFETY: raising signals at this process.
    unsafe { libc::raise(libc::SIGINT) };
    println!(
        "own SIGINT handler ran: {}",
        HANDLED.load(std::sync::atomic::Ordering::SeqCst)
    );
    // SAFETY: as above.
    unsafe { libc::raise(libc::SIGTERM) };
    println!("still running after SIGTERM");
    std::process::exit(0);
}

#[test]
fn a_program_that_ran_a_command_keeps_its_own_handler_and_the_default_action() {
    const NAME: &str = "a_program_that_ran_a_command_keeps_its_own_handler_and_the_default_action";
    if std::env::var_os(HOST).is_some() {
        host();
    }
    let fake = FakeNvml::build();
    let dir = tempfile::tempdir().unwrap();
    let out = clean_command(
        std::env::current_exe().unwrap(),
        &[
            &support::test_name(module_path!(), NAME),
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ],
        &[
            (HOST, "1"),
            ("GPUSPAN_NVML_LIB", fake.path().to_str().unwrap()),
            ("GPUSPAN_RUN_DIR", dir.path().to_str().unwrap()),
            ("OTEL_TRACES_EXPORTER", "none"),
            ("OTEL_METRICS_EXPORTER", "none"),
        ],
    )
    .stdin(Stdio::null())
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("own SIGINT handler ran: true"),
        "{stdout}{stderr}"
    );
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGTERM),
        "the program ends by SIGTERM's default action: {stdout}{stderr}"
    );
}
