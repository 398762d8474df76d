//! The arguments of `audit`.

use std::time::Duration;

use clap::{Args, ValueEnum};

use super::Format;
use crate::audit::findings::{FailOn, Finding};

/// Arguments of `audit`.
#[derive(Debug, Clone, Args)]
pub struct AuditArgs {
    /// Nodes to audit, each once [default: every Node]
    #[arg(value_name = "NODE")]
    pub nodes: Vec<String>,
    /// Exit 3 when a Node has one of these findings: comma-separated unreachable, not-dialled, malformed, self-signed, untrusted, non-compliant, undetermined, expired, expiring[=DURATION] (expiring within DURATION, 7d when not given; also fails expired ones)
    #[arg(long, value_name = "FINDING[=DURATION],...", value_parser = parse_fail_on)]
    pub fail_on: Option<FailOn>,
    /// How long the connection and the TLS handshake with one kubelet may take together
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = parse_dial_timeout)]
    pub dial_timeout: Duration,
    /// How many kubelets are dialled at once, 1..=256
    #[arg(long, value_name = "N", default_value = "16", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub dial_concurrency: u16,
    /// Output format
    #[arg(short, long, value_enum, default_value_t = Format::Text)]
    pub output: Format,
}

impl AuditArgs {
    /// The findings `--fail-on` names (none when not given).
    pub fn fail_on(&self) -> FailOn {
        self.fail_on.clone().unwrap_or_default()
    }
}

/// An `audit` argument that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum AuditArgError {
    /// Not a finding's name.
    #[error(
        "{0:?} is not a finding (unreachable, not-dialled, malformed, self-signed, untrusted, non-compliant, undetermined, expired, expiring[=DURATION])"
    )]
    NotFinding(String),
    /// `=DURATION` after a finding other than `expiring`.
    #[error("only expiring takes a duration, not {0:?}")]
    DurationNotAllowed(String),
    /// Not a duration such as `7d` or `12h`, or outside the range allowed.
    #[error("{text:?} is not a duration from {min:?} to {max:?} such as 7d or 12h")]
    NotDuration {
        /// The argument.
        text: String,
        /// The shortest allowed.
        min: Duration,
        /// The longest allowed.
        max: Duration,
    },
}

/// The longest expiring threshold: about ten years.
const MAX_EXPIRING_WITHIN: Duration = Duration::from_secs(3_660 * 24 * 3600);

fn duration(text: &str, min: Duration, max: Duration) -> Result<Duration, AuditArgError> {
    humantime::parse_duration(text)
        .ok()
        .filter(|duration| (min..=max).contains(duration))
        .ok_or_else(|| AuditArgError::NotDuration { text: text.to_owned(), min, max })
}

fn parse_dial_timeout(text: &str) -> Result<Duration, AuditArgError> {
    duration(text, Duration::from_millis(10), Duration::from_secs(60))
}

fn parse_fail_on(text: &str) -> Result<FailOn, AuditArgError> {
    let mut fail_on = FailOn::default();
    for item in text.split(',').map(str::trim) {
        let (name, within) = match item.split_once('=') {
            Some((name, within)) => (name, Some(within)),
            None => (item, None),
        };
        let finding = Finding::from_str(name, false).map_err(|_| AuditArgError::NotFinding(name.to_owned()))?;
        match (finding, within) {
            (Finding::Expiring, Some(within)) => {
                fail_on.expiring_within = Some(duration(within, Duration::from_secs(1), MAX_EXPIRING_WITHIN)?);
            }
            (_, Some(_)) => return Err(AuditArgError::DurationNotAllowed(item.to_owned())),
            (_, None) => {}
        }
        fail_on.findings.insert(finding);
    }
    Ok(fail_on)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::audit::findings::DEFAULT_EXPIRING_WITHIN;

    #[test]
    fn fail_on_reads_findings_and_the_expiring_threshold() {
        let fail_on = parse_fail_on("expiring=12h,self-signed,non-compliant,unreachable").unwrap();
        let expected = [Finding::Unreachable, Finding::SelfSigned, Finding::NonCompliant, Finding::Expiring];
        assert_eq!(fail_on.findings, expected.into_iter().collect());
        assert_eq!(fail_on.expiring_within(), Duration::from_secs(12 * 3600));
        assert_eq!(parse_fail_on("expiring").unwrap().expiring_within(), DEFAULT_EXPIRING_WITHIN);
        for bad in ["", "expiring=", "expiring=soon", "self-signed=7d", "Self-Signed", "expired,bogus", "expiring=0s"] {
            assert!(parse_fail_on(bad).is_err(), "{bad:?}");
        }
    }
}
