//! A child process run the way every caller runs the approver: stderr to a log file, readiness
//! awaited against a time limit, stopped with SIGTERM then SIGKILL, and killed when dropped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// How often the process and its probe are looked at while waiting.
const POLL: Duration = Duration::from_millis(5);

/// What went wrong with the process.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The log file could not be created.
    #[error("creating the log {path}: {source}")]
    Log {
        /// The log file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The program could not be started.
    #[error("starting {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// The process could not be waited for or killed.
    #[error("waiting for or killing the process: {0}")]
    Wait(std::io::Error),
    /// It exited before its probe said ready.
    #[error("exited with {status} before it was ready; its log:\n{log}")]
    ExitedEarly {
        /// How it exited.
        status: ExitStatus,
        /// Everything it logged.
        log: String,
    },
    /// Its probe did not say ready within the limit.
    #[error("not ready within {limit:?}; its log:\n{log}")]
    NotReady {
        /// The limit.
        limit: Duration,
        /// Everything it logged.
        log: String,
    },
    /// The `kill` command could not be run.
    #[error("running kill -{signal}: {source}")]
    Kill {
        /// The signal's name.
        signal: String,
        /// Why.
        source: std::io::Error,
    },
    /// The `kill` command failed.
    #[error("kill -{signal} {pid} failed: {status}")]
    Signal {
        /// The signal's name.
        signal: String,
        /// The process id.
        pid: u32,
        /// How `kill` exited.
        status: ExitStatus,
    },
}

/// A running child (usually the approver, from [`super::command`]), its stderr going to a log
/// file. Dropping it kills the process (resuming it first, should it be stopped).
#[derive(Debug)]
pub struct Process {
    child: Child,
    log: PathBuf,
    started: Instant,
}

impl Process {
    /// Spawns `command` with its stderr to a new file at `log` (stdin and stdout as `command`
    /// has them).
    pub fn spawn(mut command: Command, log: &Path) -> Result<Process, ProcessError> {
        let file = std::fs::File::create(log).map_err(|source| ProcessError::Log { path: log.to_owned(), source })?;
        let started = Instant::now();
        let child = command.stderr(file).spawn().map_err(|source| ProcessError::Spawn {
            program: command.get_program().to_string_lossy().into_owned(),
            source,
        })?;
        Ok(Process { child, log: log.to_owned(), started })
    }

    /// When the process was spawned.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the process logged so far (empty when the log cannot be read).
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Where the approver listens for `endpoints` (`health` or `metrics`), once it logged it
    /// (see [`super::listening`]).
    pub fn listening(&self, endpoints: &str) -> Option<SocketAddr> {
        super::listening(&self.logs(), endpoints)
    }

    /// How the process exited, if it has.
    pub fn exited(&mut self) -> Result<Option<ExitStatus>, ProcessError> {
        self.child.try_wait().map_err(ProcessError::Wait)
    }

    /// Waits until `probe` says ready, at most `limit`; fails, with the log, when the process
    /// exits first or the limit passes.
    pub async fn wait_until<F>(
        &mut self,
        limit: Duration,
        mut probe: impl FnMut(&Process) -> F,
    ) -> Result<(), ProcessError>
    where
        F: Future<Output = bool>,
    {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.exited()? {
                return Err(ProcessError::ExitedEarly { status, log: self.logs() });
            }
            if probe(self).await {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(ProcessError::NotReady { limit, log: self.logs() });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// [`Process::wait_until`] the approver's `/readyz`, on the health port it logged, answers 200.
    pub async fn wait_ready(&mut self, limit: Duration) -> Result<(), ProcessError> {
        self.wait_until(limit, |process| {
            let health = process.listening("health");
            async move {
                match health {
                    Some(address) => crate::http::ready(address.port()).await,
                    None => false,
                }
            }
        })
        .await
    }

    /// Waits for the process to exit, at most `limit` (`None`: still running).
    pub async fn wait_exit(&mut self, limit: Duration) -> Result<Option<ExitStatus>, ProcessError> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.exited()? {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Sends a signal by name (`TERM`, `KILL`, `STOP`, `CONT`) with the system `kill` command.
    pub fn signal(&self, name: &str) -> Result<(), ProcessError> {
        let pid = self.pid();
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string())
            .status()
            .map_err(|source| ProcessError::Kill { signal: name.to_owned(), source })?;
        if !status.success() {
            return Err(ProcessError::Signal { signal: name.to_owned(), pid, status });
        }
        Ok(())
    }

    /// Stops the process: SIGTERM, then SIGKILL when it has not exited within `limit`.
    pub async fn stop(mut self, limit: Duration) -> Result<ExitStatus, ProcessError> {
        if let Some(status) = self.exited()? {
            return Ok(status);
        }
        // It may exit between the look and the signal; the wait below tells.
        let _ = self.signal("TERM");
        if let Some(status) = self.wait_exit(limit).await? {
            return Ok(status);
        }
        self.child.kill().map_err(ProcessError::Wait)?;
        self.child.wait().map_err(ProcessError::Wait)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // Resume a stopped process, so it dies of SIGKILL at once.
            let _ = self.signal("CONT");
        }
        // Errors mean the child is already gone, which is the goal.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// `sh -c script` with stdin and stdout closed.
    fn sh(script: &str) -> Command {
        let mut command = Command::new("sh");
        command.arg("-c").arg(script).stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
        command
    }

    /// A log file of the test `name`, removed first should an earlier run have left it.
    fn log(name: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!("testkit-{}-{name}.log", std::process::id()));
        let _ = std::fs::remove_file(&path);
        path
    }

    #[tokio::test]
    async fn an_early_exit_fails_the_wait_with_the_log() {
        let log = log("exit");
        let mut process = Process::spawn(sh("echo dying >&2; exit 3"), &log).unwrap();
        match process.wait_ready(Duration::from_secs(10)).await {
            Err(ProcessError::ExitedEarly { status, log }) => {
                assert_eq!((status.code(), log.as_str()), (Some(3), "dying\n"))
            }
            other => panic!("{other:?}"),
        }
        std::fs::remove_file(log).unwrap();
    }

    #[tokio::test]
    async fn ready_once_the_logged_health_port_answers_then_stopped_with_sigterm() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                // The whole request first: closing with unread data resets the connection.
                let _ = stream.read(&mut [0; 1024]).await;
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").await;
            }
        });
        let log = log("ready");
        let line = format!(r#"{{"message":"listening","endpoints":"health","address":"127.0.0.1:{port}"}}"#);
        let mut process = Process::spawn(sh(&format!("echo '{line}' >&2; exec sleep 30")), &log).unwrap();
        process.wait_ready(Duration::from_secs(10)).await.unwrap();
        assert_eq!(process.listening("health").map(|a| a.port()), Some(port));
        assert_eq!(process.stop(Duration::from_secs(10)).await.unwrap().signal(), Some(15));
        std::fs::remove_file(log).unwrap();
    }

    #[tokio::test]
    async fn not_ready_within_the_limit_then_killed_when_sigterm_is_ignored() {
        let log = log("slow");
        let script = "trap '' TERM; echo starting >&2; exec sleep 30";
        let mut process = Process::spawn(sh(script), &log).unwrap();
        match process.wait_until(Duration::from_millis(500), |_| async { false }).await {
            Err(ProcessError::NotReady { log, .. }) => assert_eq!(log, "starting\n"),
            other => panic!("{other:?}"),
        }
        assert_eq!(process.stop(Duration::from_millis(200)).await.unwrap().signal(), Some(9));
        std::fs::remove_file(log).unwrap();
    }
}
