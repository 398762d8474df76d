//! Child processes that cannot outlive the test process.
//!
//! Each child runs in its own process group. Beside it runs a watchdog, `sh` in a process group of
//! its own, whose stdin is a pipe whose only write end this process holds (Rust opens pipes with
//! close-on-exec, so no other child inherits it). The watchdog blocks reading that pipe; the read
//! returns end-of-file when the [`Supervised`] handle is dropped or when this process dies in any
//! way, including SIGKILL. The watchdog then sends SIGKILL to the child's process group (these are
//! throwaway test servers: a graceful kube-apiserver shutdown takes many seconds and saves
//! nothing), and removes the child's directory if it was given one. No signal handler, no
//! `prctl`, no `unsafe`.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use tokio::time::{Instant, sleep};

use crate::Error;

/// `$1`: process group to kill; `$2`: directory to remove once the group is gone, or empty; `$3`
/// and `$4`: a cleanup script run with the argument `$4` before that removal, or empty.
const WATCHDOG: &str = r#"
cat >/dev/null
kill -KILL -"$1" 2>/dev/null
i=0
while kill -0 -"$1" 2>/dev/null && [ "$i" -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
if [ -n "$3" ]; then sh -c "$3" testenv-cleanup "$4"; fi
if [ -n "$2" ]; then rm -rf "$2"; fi
"#;

/// A shell script the watchdog runs, with one argument, once the child's process group is gone:
/// for what a child leaves outside its group.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cleanup<'a> {
    pub(crate) script: &'static str,
    pub(crate) argument: &'a str,
}

/// A running child process, its output going to a log file, ended when dropped.
#[derive(Debug)]
pub(crate) struct Supervised {
    name: &'static str,
    child: Child,
    watchdog: Child,
    log: PathBuf,
}

impl Supervised {
    /// Starts `program` with `args`, stdout and stderr appended to `log`. When this process dies,
    /// the watchdog also removes `remove_on_death` if given.
    pub(crate) fn spawn(
        name: &'static str,
        program: &Path,
        args: &[String],
        log: &Path,
        remove_on_death: Option<&Path>,
    ) -> Result<Supervised, Error> {
        Self::spawn_with_cleanup(name, program, args, log, remove_on_death, None)
    }

    /// [`Supervised::spawn`], with `cleanup` run by the watchdog whenever the child is ended (when
    /// dropped, and when this process dies), after its process group and before the removal.
    pub(crate) fn spawn_with_cleanup(
        name: &'static str,
        program: &Path,
        args: &[String],
        log: &Path,
        remove_on_death: Option<&Path>,
        cleanup: Option<Cleanup<'_>>,
    ) -> Result<Supervised, Error> {
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .map_err(Error::io(format!("opening {}", log.display())))?;
        let err = out.try_clone().map_err(Error::io(format!("opening {}", log.display())))?;
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(Error::io(format!("starting {}", program.display())))?;
        let watchdog = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg(format!("testenv-watchdog-{name}"))
            .arg(child.id().to_string())
            .arg(remove_on_death.map(Path::as_os_str).unwrap_or_default())
            .arg(cleanup.map(|cleanup| cleanup.script).unwrap_or_default())
            .arg(cleanup.map(|cleanup| cleanup.argument).unwrap_or_default())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn();
        match watchdog {
            Ok(watchdog) => Ok(Supervised { name, child, watchdog, log: log.to_owned() }),
            Err(source) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(Error::Io { context: "starting the watchdog shell".to_owned(), source })
            }
        }
    }

    /// The child's process id (also its process group id).
    pub(crate) fn id(&self) -> u32 {
        self.child.id()
    }

    /// The exit status if the child has exited.
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// A start failure of this child, with the last lines of its log.
    pub(crate) fn start_error(&self, reason: String) -> Error {
        Error::Start { component: self.name, reason, log_tail: log_tail(&self.log, 40) }
    }

    /// Asks `healthz` every 200 ms until it answers `ok`; a start failure when the child exits
    /// first or `timeout` passes, naming the last answer.
    pub(crate) async fn wait_healthy<F, E>(
        &mut self,
        timeout: Duration,
        mut healthz: impl FnMut() -> F,
    ) -> Result<(), Error>
    where
        F: Future<Output = Result<String, E>>,
        E: std::fmt::Display,
    {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                return Err(self.start_error(format!("exited with {status}")));
            }
            let last = match healthz().await {
                Ok(body) if body == "ok" => return Ok(()),
                Ok(body) => format!("/healthz answered {body:?}"),
                Err(error) => error.to_string(),
            };
            if Instant::now() > deadline {
                return Err(self.start_error(format!("not healthy after {timeout:?}; last answer: {last}")));
            }
            sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        // Errors mean the child is already gone, which is the goal.
        let _ = self.child.kill();
        let _ = self.child.wait();
        drop(self.watchdog.stdin.take());
        let _ = self.watchdog.wait();
    }
}

/// The last `lines` lines of the file at `path`, or a note that it could not be read.
fn log_tail(path: &Path, lines: usize) -> String {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) => return format!("(cannot read {}: {error})", path.display()),
    };
    let all: Vec<String> = BufReader::new(file).lines().map_while(Result::ok).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
