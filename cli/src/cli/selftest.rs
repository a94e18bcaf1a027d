//! `gpuspan selftest` on the command line: a private scratch directory for the test's spans,
//! and the exit status that says whether every check passed.

use std::time::Duration;

/// `gpuspan selftest`: the table on standard output; 0 when every check passed, 1 when one
/// failed, 2 when nothing could be tested.
pub(super) fn selftest(mib: u64, interval: Duration) -> u8 {
    // A directory of its own (new, mode 0700, a name no one can guess), removed on the way
    // out: no other user can prepare it or read the spans.
    use std::os::unix::fs::PermissionsExt;
    let scratch = match tempfile::Builder::new()
        .prefix("gpuspan-selftest-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
    {
        Ok(scratch) => scratch,
        Err(e) => {
            eprintln!(
                "gpuspan selftest: cannot make a directory for the test's spans under {} \
                 ({e}); set TMPDIR to a writable directory",
                std::env::temp_dir().display()
            );
            return 2;
        }
    };
    let options = crate::selftest::Options {
        bytes: mib.saturating_mul(1 << 20),
        interval,
    };
    let outcome = crate::selftest::run(options, scratch.path());
    drop(scratch);
    match outcome {
        Ok(outcome) => {
            print!("{}", outcome.table);
            if outcome.passed {
                0
            } else {
                1
            }
        }
        Err(e) => {
            eprintln!("gpuspan selftest: {e}");
            2
        }
    }
}
