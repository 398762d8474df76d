//! The binary run as a process by the CLI tests: a clean environment, its output, repository files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A file of the repository.
pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The binary with a clean environment: none of the product's env vars leak in from the caller.
pub fn binary() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_node-csr-approver"));
    command.env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
    command
}

/// Runs `command` with stdin closed and collects its output.
pub fn run(command: &mut Command) -> Output {
    command.stdin(Stdio::null()).output().unwrap()
}

/// What the process wrote to stderr.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}
