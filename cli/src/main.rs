//! The `gpuspan` command: see `gpuspan --help`.

fn main() -> std::process::ExitCode {
    gpuspan_cli::cli::main(std::env::args_os())
}
