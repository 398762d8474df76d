//! The standard `process_*` metrics, read from `/proc` (through procfs) on each scrape.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

/// Emits the process metrics. A value that cannot be read (another OS, a restricted `/proc`) is
/// left out rather than failing the scrape.
#[derive(Debug)]
pub(super) struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let stats = ProcessStats::read();
        if let Some(seconds) = stats.cpu_seconds {
            let metric = ConstCounter::new(seconds);
            let help = "Total user and system CPU time spent in seconds.";
            let unit = Some(&Unit::Seconds);
            metric.encode(encoder.encode_descriptor("process_cpu", help, unit, metric.metric_type())?)?;
        }
        if let Some(bytes) = stats.resident_memory_bytes {
            let metric = ConstGauge::new(bytes);
            let help = "Resident memory size in bytes.";
            let unit = Some(&Unit::Bytes);
            metric.encode(encoder.encode_descriptor("process_resident_memory", help, unit, metric.metric_type())?)?;
        }
        if let Some(fds) = stats.open_fds {
            let metric = ConstGauge::new(fds);
            let help = "Number of open file descriptors.";
            metric.encode(encoder.encode_descriptor("process_open_fds", help, None, metric.metric_type())?)?;
        }
        if let Some(seconds) = stats.start_time_seconds {
            let metric = ConstGauge::new(seconds);
            let help = "Start time of the process since unix epoch in seconds.";
            let unit = Some(&Unit::Seconds);
            metric.encode(encoder.encode_descriptor("process_start_time", help, unit, metric.metric_type())?)?;
        }
        Ok(())
    }
}

/// This process's statistics; `None` where a value could not be read.
#[derive(Debug, Default, Clone, PartialEq)]
struct ProcessStats {
    cpu_seconds: Option<f64>,
    resident_memory_bytes: Option<u64>,
    open_fds: Option<u64>,
    start_time_seconds: Option<f64>,
}

impl ProcessStats {
    /// CPU time and start time from `/proc/self/stat` in the kernel's clock ticks (`CLK_TCK`),
    /// the start time relative to the boot time; resident memory from `VmRSS` (in kB, so no
    /// page-size assumption); open descriptors by counting `/proc/self/fd`.
    fn read() -> Self {
        let Ok(process) = procfs::process::Process::myself() else { return Self::default() };
        let ticks = procfs::ticks_per_second() as f64;
        let stat = process.stat().ok();
        let boot = procfs::boot_time_secs().ok();
        Self {
            cpu_seconds: stat.as_ref().map(|stat| (stat.utime + stat.stime) as f64 / ticks),
            resident_memory_bytes: process.status().ok().and_then(|status| status.vmrss?.checked_mul(1024)),
            open_fds: process.fd_count().ok().map(|count| count as u64),
            start_time_seconds: stat.zip(boot).map(|(stat, boot)| boot as f64 + stat.starttime as f64 / ticks),
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::ProcessStats;

    #[test]
    fn reads_this_process() {
        let stats = ProcessStats::read();
        assert!(stats.cpu_seconds.is_some());
        assert!(stats.resident_memory_bytes.is_some_and(|bytes| bytes > 0));
        assert!(stats.open_fds.is_some_and(|fds| fds >= 3));
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs_f64();
        assert!(stats.start_time_seconds.is_some_and(|start| start > now - 3600.0 && start <= now + 1.0));
    }
}
