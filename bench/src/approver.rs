//! The real `node-csr-approver` binary as a child process, and what the bench reads about it:
//! `/readyz`, resident memory (`VmRSS`, sampled every 100 ms) and CPU time (`utime + stime`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use testkit::policy::{PREFIXES, REGEX};
use tokio::process::{Child, Command};

/// How often resident memory is sampled.
pub const SAMPLE_PERIOD: Duration = Duration::from_millis(100);

/// How to run the controller.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The binary.
    pub binary: PathBuf,
    /// Admin kubeconfig of the control plane.
    pub kubeconfig: PathBuf,
    /// The test DNS server.
    pub dns: SocketAddr,
    /// `--concurrency`.
    pub concurrency: u16,
    /// `--bypass-dns-resolution`.
    pub bypass_dns: bool,
    /// Where its stderr (JSON logs) goes.
    pub log: PathBuf,
}

/// A running controller process with its memory sampler.
pub struct Approver {
    child: Child,
    pid: u32,
    log: PathBuf,
    /// When the process was spawned.
    pub started: Instant,
    samples: Arc<Mutex<Vec<(Instant, u64)>>>,
    sampler: tokio::task::JoinHandle<()>,
}

impl Approver {
    /// Spawns the binary and starts sampling its resident memory.
    pub fn start(launch: &Launch) -> Result<Approver> {
        let log = std::fs::File::create(&launch.log).with_context(|| format!("creating {}", launch.log.display()))?;
        let mut command = testkit::approver::command(&launch.binary, &launch.kubeconfig, REGEX, PREFIXES);
        command
            .arg(format!("--dns-server={}", launch.dns))
            .arg(format!("--concurrency={}", launch.concurrency))
            .args(["--log-format", "json", "--log-level", "info"])
            .stderr(log);
        if launch.bypass_dns {
            command.arg("--bypass-dns-resolution");
        }
        let mut command = Command::from(command);
        command.kill_on_drop(true);
        let started = Instant::now();
        let child = command.spawn().with_context(|| format!("starting {}", launch.binary.display()))?;
        let pid = child.id().context("the approver exited at once")?;
        let samples = Arc::new(Mutex::new(Vec::new()));
        let sink = samples.clone();
        let sampler = tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE_PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(rss) = rss_kib(pid) else { return };
                if let Ok(mut samples) = sink.lock() {
                    samples.push((Instant::now(), rss));
                }
            }
        });
        Ok(Approver { child, pid, log: launch.log.clone(), started, samples, sampler })
    }

    /// Waits until `/readyz` answers 200; returns the time from spawn.
    pub async fn wait_ready(&mut self, limit: Duration) -> Result<Duration> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("the approver exited with {status} before it was ready");
            }
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let health = testkit::approver::listening(&log, "health");
            if let Some(health) = health
                && testkit::http::ready(health.port()).await
            {
                return Ok(self.started.elapsed());
            }
            if Instant::now() > deadline {
                bail!("the approver was not ready within {limit:?}");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Fails when the process has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            Some(status) => bail!("the approver exited with {status}"),
            None => Ok(()),
        }
    }

    /// CPU seconds used so far (user + system).
    pub fn cpu_seconds(&self) -> Option<f64> {
        cpu_seconds(self.pid)
    }

    /// Largest resident memory sampled in `[from, to]`, in KiB.
    pub fn peak_kib(&self, from: Instant, to: Instant) -> u64 {
        self.samples
            .lock()
            .map(|s| s.iter().filter(|(at, _)| *at >= from && *at <= to).map(|(_, kib)| *kib).max().unwrap_or(0))
            .unwrap_or(0)
    }

    /// Resident memory now, in KiB.
    pub fn rss_now_kib(&self) -> u64 {
        rss_kib(self.pid).unwrap_or(0)
    }

    /// Stops the process with SIGTERM (SIGKILL after 10 s) and the sampler.
    pub async fn stop(mut self) -> Result<()> {
        self.sampler.abort();
        let _ = std::process::Command::new("kill").arg("-TERM").arg(self.pid.to_string()).status();
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await.is_err() {
            self.child.kill().await?;
        }
        Ok(())
    }
}

/// `VmRSS` of `pid` in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    procfs::process::Process::new(i32::try_from(pid).ok()?).ok()?.status().ok()?.vmrss
}

/// `utime + stime` of `pid` in seconds, in the kernel's clock ticks (`CLK_TCK`).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = procfs::process::Process::new(i32::try_from(pid).ok()?).ok()?.stat().ok()?;
    Some((stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64)
}
