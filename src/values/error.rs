//! What is wrong with a flag's or an argument's value: one typed cause per problem, the
//! offending value kept where the line would not name it otherwise.

use std::time::Duration;

use super::BindAddressError;

/// What is wrong with a flag's or an argument's value; each variant's message says it (an
/// argument's names the value too: clap's line of a command's own argument does not).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ValueError {
    #[error("not UTF-8")]
    NotUtf8,
    #[error("expected a boolean as Go reads it: 1, t, T, TRUE, true, True, 0, f, F, FALSE, false or False")]
    NotBoolean,
    #[error("expected a whole number from {0} to {1}")]
    Number(i64, i64),
    #[error("expected a duration such as 500ms, 2s or 5m, from {} to {}", humantime::format_duration(*.0), humantime::format_duration(*.1))]
    Duration(Duration, Duration),
    #[error("expected a number of requests a second, 0 or from {min} to {0}, such as 20 or 0.5", min = crate::values::MIN_RATE)]
    Rate(u32),
    #[error("whole seconds only")]
    NotWholeSeconds,
    #[error("expected {}", one_of(.0))]
    Keyword(Vec<&'static str>),
    #[error("empty entry in the comma-separated list")]
    EmptyEntry,
    #[error("empty entry in the list")]
    EmptyServer,
    #[error("expected a namespace name")]
    NotNamespace,
    #[error("expected a lowercase DNS subdomain name")]
    NotLeaseName,
    #[error("not a DNS name such as cluster.local")]
    NotDomain,
    #[error("{0:?} is not ip[:port], e.g. 10.96.0.10 or [fd00::a]:53")]
    NotServer(String),
    #[error("{0:?} is not a CIDR prefix such as 10.0.0.0/8 or fd00::/8")]
    NotPrefix(String),
    #[error("{0:?} is not machine.openshift.io/v1beta1 or cluster.x-k8s.io/v1beta1")]
    NotMachineApi(String),
    #[error("required, and must not be empty")]
    Required,
    #[error("{}", one_line(&.0.to_string()))]
    Regex(#[from] regex::Error),
    #[error("must not match node identities (system:node:<name>)")]
    NodeIdentity,
    #[error(
        "the prefix {0:?} also matches node identities (system:node:<name>); name the bootstrap identity more \
         narrowly, e.g. system:bootstrap:*"
    )]
    NodePrefix(String),
    #[error("a prefix must end with ':' before the '*', e.g. system:bootstrap:*")]
    PrefixWithoutColon,
    #[error("expected a username or a prefix ending in :*")]
    NotBootstrapper,
    #[error(transparent)]
    KubeletServingCa(#[from] crate::kubelet_tls::PemError),
    #[error(transparent)]
    BindAddress(#[from] BindAddressError),
    #[error("the health endpoints cannot be disabled")]
    HealthOff,
    #[error(transparent)]
    LogFilter(#[from] tracing_subscriber::filter::ParseError),
    #[error("cannot read: {0}")]
    Unreadable(#[from] std::io::Error),
    #[error("{0}")]
    ApproverConfig(Box<serde_saphyr::Error>),
    #[error("required with --leader-election outside a pod")]
    OutsidePod,
    #[error("{0:?} is not NODE=PEMFILE")]
    NotNodeCertificate(String),
    #[error("{0:?} is not an RFC 3339 time such as 2026-01-02T15:04:05Z")]
    NotTime(String, #[source] jiff::Error),
    #[error(
        "{0:?} is not a finding (unreachable, not-dialled, malformed, self-signed, untrusted, non-compliant, undetermined, expired, expiring[=DURATION])"
    )]
    NotFinding(String),
    #[error("only expiring takes a duration, not {0:?}")]
    DurationNotAllowed(String),
    #[error("{0:?} is not a duration from {1:?} to {2:?} such as 7d or 12h")]
    NotDurationWithin(String, Duration, Duration),
}

/// `a`, `a or b`, `a, b or c`.
fn one_of(names: &[&str]) -> String {
    match names.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// `text` with every run of blanks and line breaks made one space.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
