//! The arguments of the `audit` command, read as the flag groups read theirs ([`Checked`]); they have no env
//! var.

use std::time::Duration;

use clap::{Args, ValueEnum};

use super::findings::{FailOn, Finding};
use super::flags::{DEFAULT_EXPIRING_WITHIN, DIAL_CONCURRENCY};
use crate::kubelet_tls::DIAL_LIMIT;
use crate::values::{Checked, Format, ValueError};

/// Arguments of `audit`.
#[derive(Debug, Clone, Args)]
pub struct AuditArgs {
    /// Nodes to audit, each once [default: every Node]
    #[arg(value_name = "NODE")]
    pub nodes: Vec<String>,
    /// Exit 3 when a Node has one of these findings: comma-separated unreachable, not-dialled, malformed, self-signed, untrusted, non-compliant, undetermined, expired, expiring[=DURATION] (expiring within DURATION, 7d when not given; also fails expired ones)
    #[arg(long, value_name = "FINDING[=DURATION],...", value_parser = Checked(fail_on))]
    pub fail_on: Option<FailOn>,
    /// How long the connection and the TLS handshake with one kubelet may take together
    #[arg(long, value_name = "DURATION", default_value_t = DIAL_LIMIT.into(), value_parser = Checked(dial_timeout))]
    pub dial_timeout: humantime::Duration,
    /// How many kubelets are dialled at once, 1..=256
    #[arg(long, value_name = "N", default_value_t = DIAL_CONCURRENCY, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub dial_concurrency: u16,
    /// Output format
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Format,
}

impl AuditArgs {
    /// The findings `--fail-on` names (none when not given).
    pub fn fail_on(&self) -> FailOn {
        self.fail_on.clone().unwrap_or_default()
    }

    /// The expiring threshold: `--fail-on expiring=DURATION`'s, else the periodic audit's default
    /// ([`DEFAULT_EXPIRING_WITHIN`]).
    pub fn expiring_within(&self) -> Duration {
        self.fail_on.as_ref().and_then(|fail_on| fail_on.expiring_within).unwrap_or(DEFAULT_EXPIRING_WITHIN)
    }
}

/// The longest expiring threshold: about ten years.
const MAX_EXPIRING_WITHIN: Duration = Duration::from_secs(3_660 * 24 * 3600);

/// A duration such as `7d` or `12h` from `min` to `max`.
fn within(text: &str, min: Duration, max: Duration) -> Result<Duration, ValueError> {
    humantime::parse_duration(text)
        .ok()
        .filter(|duration| (min..=max).contains(duration))
        .ok_or_else(|| ValueError::NotDurationWithin(text.to_owned(), min, max))
}

/// `--dial-timeout`: 10ms to 60s.
fn dial_timeout(text: &str) -> Result<humantime::Duration, ValueError> {
    within(text, Duration::from_millis(10), Duration::from_secs(60)).map(humantime::Duration::from)
}

/// `--fail-on`: comma-separated findings, `expiring` with an optional `=DURATION`.
fn fail_on(text: &str) -> Result<FailOn, ValueError> {
    let mut fail_on = FailOn::default();
    for item in text.split(',').map(str::trim) {
        let (name, within_text) = match item.split_once('=') {
            Some((name, within)) => (name, Some(within)),
            None => (item, None),
        };
        let finding = Finding::from_str(name, false).map_err(|_| ValueError::NotFinding(name.to_owned()))?;
        match (finding, within_text) {
            (Finding::Expiring, Some(text)) => {
                fail_on.expiring_within = Some(within(text, Duration::from_secs(1), MAX_EXPIRING_WITHIN)?);
            }
            (_, Some(_)) => return Err(ValueError::DurationNotAllowed(item.to_owned())),
            (_, None) => {}
        }
        fail_on.findings.insert(finding);
    }
    Ok(fail_on)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use clap::{Command, FromArgMatches};

    use super::*;
    use crate::audit::flags::DEFAULT_EXPIRING_WITHIN_TEXT;

    fn read(args: &[&str]) -> AuditArgs {
        let command = AuditArgs::augment_args(Command::new("audit").no_binary_name(true));
        AuditArgs::from_arg_matches(&command.try_get_matches_from(args).unwrap()).unwrap()
    }

    #[test]
    fn fail_on_reads_findings_and_the_expiring_threshold() {
        let args = read(&["--fail-on=expiring=12h,self-signed,non-compliant,unreachable"]);
        let expected = [Finding::Unreachable, Finding::SelfSigned, Finding::NonCompliant, Finding::Expiring];
        assert_eq!(args.fail_on().findings, expected.into_iter().collect());
        assert_eq!(args.expiring_within(), Duration::from_secs(12 * 3600));
        assert_eq!(read(&["--fail-on=expiring"]).expiring_within(), DEFAULT_EXPIRING_WITHIN);
        assert_eq!(read(&[]).expiring_within(), DEFAULT_EXPIRING_WITHIN);
        for bad in ["", "expiring=", "expiring=soon", "self-signed=7d", "Self-Signed", "expired,bogus", "expiring=0s"] {
            assert!(super::fail_on(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn fail_on_says_the_default_expiring_threshold() {
        let command = AuditArgs::augment_args(Command::new("audit"));
        let fail_on = command.get_arguments().find(|arg| arg.get_id() == "fail_on").unwrap();
        let help = fail_on.get_help().unwrap().to_string();
        assert!(help.contains(&format!("{} when not given", *DEFAULT_EXPIRING_WITHIN_TEXT)), "{help}");
    }
}
