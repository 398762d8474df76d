//! Runs a tool (crane, cosign, helm) to completion and hands back what it printed.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::Error;

/// What a tool that exited successfully printed.
#[derive(Debug)]
pub(crate) struct Ran {
    /// Its standard output.
    pub(crate) stdout: String,
    /// Its standard error.
    pub(crate) stderr: String,
}

/// Runs `program` with `args`, the variables `env` added to its environment and `input` on its
/// standard input (none: `/dev/null`); [`Error::ToolFailed`] when it exits unsuccessfully.
pub(crate) fn run(program: &Path, args: &[&str], env: &[(&str, &str)], input: Option<&str>) -> Result<Ran, Error> {
    let command = format!("{} {}", program.display(), args.join(" "));
    let mut child = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(Error::io(format!("starting {command}")))?;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(input.as_bytes()).map_err(Error::io(format!("writing to {command}")))?;
    }
    let output = child.wait_with_output().map_err(Error::io(format!("running {command}")))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if output.status.success() {
        Ok(Ran { stdout, stderr })
    } else {
        Err(Error::ToolFailed { command, status: output.status.to_string(), output: format!("{stderr}{stdout}") })
    }
}
