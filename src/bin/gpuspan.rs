//! The `gpuspan` command: see `gpuspan --help`.

fn main() -> std::process::ExitCode {
    gpuspan::cli::main(std::env::args_os())
}
