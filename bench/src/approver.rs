//! The approver under test as a child process (the real `node-csr-approver` binary, or the Go
//! peer), and what the bench reads about it: its health endpoint, resident memory (`VmRSS`,
//! sampled every 100 ms) and CPU time (`utime + stime`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use testkit::approver::Process;
use testkit::policy::REGEX;

use crate::csrs::NODE_PREFIXES;

use crate::peer::Peer;

/// How often resident memory is sampled.
pub const SAMPLE_PERIOD: Duration = Duration::from_millis(100);

/// Which approver runs.
#[derive(Debug, Clone)]
pub enum Program {
    /// node-csr-approver, this binary.
    Ours(PathBuf),
    /// The Go kubelet-csr-approver.
    Peer(Peer),
}

impl Program {
    /// A short name for progress lines and log files.
    pub fn name(&self) -> &'static str {
        match self {
            Program::Ours(_) => "ours",
            Program::Peer(_) => "peer",
        }
    }
}

/// How to run the controller.
#[derive(Debug, Clone)]
pub struct Launch {
    /// Which approver.
    pub program: Program,
    /// Admin kubeconfig of the control plane.
    pub kubeconfig: PathBuf,
    /// The test DNS server (ours is told; the peer finds it in its `resolv.conf`).
    pub dns: SocketAddr,
    /// `--concurrency` (ours; the peer has no such setting).
    pub concurrency: u16,
    /// `--bypass-dns-resolution`.
    pub bypass_dns: bool,
    /// `--events=all` (ours; otherwise its default, problems only).
    pub events_all: bool,
    /// Further flags of ours (`--ours-arg`; the storm with Nodes: `--verify-node-addresses`,
    /// `--rules`).
    pub extra_args: Vec<String>,
    /// Where its logs go.
    pub log: PathBuf,
}

/// Where the health endpoint is, and what it answers when ready.
enum Health {
    /// Ours: the port its JSON log names; `/readyz` (the CSR watch has listed what exists).
    FromLog,
    /// The peer: the port the bench gave it; `/healthz` (it has no readiness endpoint).
    Port(u16),
}

/// A running controller process ([`Process`]) with its memory sampler.
pub struct Approver {
    process: Process,
    health: Health,
    samples: Arc<Mutex<Vec<(Instant, u64)>>>,
    sampler: tokio::task::JoinHandle<()>,
}

impl Approver {
    /// Spawns the approver and starts sampling its resident memory.
    pub fn start(launch: &Launch) -> Result<Approver> {
        let (command, health) = match &launch.program {
            Program::Ours(binary) => {
                let mut command = testkit::approver::command(binary, &launch.kubeconfig, REGEX, NODE_PREFIXES);
                command
                    .arg(format!("--dns-server={}", launch.dns))
                    .arg(format!("--concurrency={}", launch.concurrency))
                    .args(["--log-format", "json", "--log-level", "info"]);
                if launch.bypass_dns {
                    command.arg("--bypass-dns-resolution");
                }
                if launch.events_all {
                    command.arg("--events=all");
                }
                command.args(&launch.extra_args);
                (command, Health::FromLog)
            }
            Program::Peer(peer) => {
                let port = testenv::free_port()?;
                (peer.command(&launch.kubeconfig, launch.bypass_dns, port), Health::Port(port))
            }
        };
        let process = Process::spawn(command, &launch.log)
            .with_context(|| format!("starting the {} approver", launch.program.name()))?;
        let pid = process.pid();
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
        Ok(Approver { process, health, samples, sampler })
    }

    /// When the process was spawned.
    pub fn started(&self) -> Instant {
        self.process.started()
    }

    /// Waits until the health endpoint says ready (`/readyz` 200; the peer: `/healthz` 200);
    /// returns the time from spawn.
    pub async fn wait_ready(&mut self, limit: Duration) -> Result<Duration> {
        match self.health {
            Health::FromLog => self.process.wait_ready(limit).await,
            Health::Port(port) => {
                let healthy = move |_: &Process| async move {
                    testkit::http::get(port, "/healthz").await.is_some_and(|(code, _)| code == 200)
                };
                self.process.wait_until(limit, healthy).await
            }
        }
        .context("the approver did not become ready")?;
        Ok(self.started().elapsed())
    }

    /// Fails when the process has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        match self.process.exited()? {
            Some(status) => bail!("the approver exited with {status}"),
            None => Ok(()),
        }
    }

    /// CPU seconds used so far (user + system).
    pub fn cpu_seconds(&self) -> Option<f64> {
        cpu_seconds(self.process.pid())
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
        rss_kib(self.process.pid()).unwrap_or(0)
    }

    /// Stops the process with SIGTERM (SIGKILL after 10 s) and the sampler.
    pub async fn stop(self) -> Result<()> {
        self.sampler.abort();
        self.process.stop(Duration::from_secs(10)).await?;
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
