//! What every benchmark's `main` does: parse the command line, then run the
//! benchmark on a multi-threaded runtime in a scratch directory until it
//! ends, Ctrl-C or SIGTERM.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use crate::args::Args;
use crate::sys;

/// Parses the command line (`switches` take no value). On `--help` prints
/// `usage` and returns `Err(SUCCESS)`; on a bad argument prints the error
/// and `usage` and returns `Err` with exit code 2.
pub fn parse_args(switches: &[&str], usage: &str) -> Result<Args, ExitCode> {
    let args = Args::from_env(switches).map_err(|e| {
        eprintln!("{e}\n\n{usage}");
        ExitCode::from(2)
    })?;
    if args.flag("help") {
        println!("{usage}");
        return Err(ExitCode::SUCCESS);
    }
    Ok(args)
}

/// Parses the command line as [`parse_args`] does, then reads the
/// benchmark's configuration from it with `read`; a configuration error is
/// printed with `usage` and ends with exit code 2.
pub fn parse_config<C>(
    switches: &[&str],
    usage: &str,
    read: impl FnOnce(&Args) -> Result<C, String>,
) -> Result<C, ExitCode> {
    read(&parse_args(switches, usage)?).map_err(|e| {
        eprintln!("{e}\n\n{usage}");
        ExitCode::from(2)
    })
}

/// Runs `bench` with a fresh scratch directory (on a real disk, see
/// [`sys::scratch_dir`]) on a multi-threaded runtime. Ctrl-C and SIGTERM
/// stop it; the directory is removed only after every task has ended.
pub fn run_in_scratch(name: &str, bench: impl AsyncFnOnce(&Path) -> Result<(), String>) -> ExitCode {
    // Declared before the runtime, so dropped after it: every task holding a
    // store has ended (and RocksDB closed) before the directory is removed.
    let scratch = match sys::scratch_dir(&format!("orchestra-{name}-bench-")) {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("cannot create a scratch directory: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let outcome = runtime.block_on(async {
        let mut sigterm =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            result = bench(scratch.path()) => result,
            _ = tokio::signal::ctrl_c() => Err("interrupted".to_string()),
            _ = sigterm.recv() => Err("terminated".to_string()),
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(10));
    drop(scratch);
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name} bench failed: {e}");
            ExitCode::FAILURE
        }
    }
}
