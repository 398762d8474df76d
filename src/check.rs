//! The `check` subcommand: runs the policy on CSRs read from files (with `--objects` standing in
//! for the cluster) or fetched from the cluster by name, and prints the decision and every check's
//! result, as text for people or JSON lines for tools.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;

use jiff::Timestamp;
use rustls::pki_types::CertificateDer;
use serde::Serialize;

use crate::config::{CheckArgs, Settings};
use crate::display::Escaped;
use crate::dns::{DnsError, HickoryResolver};
use crate::kubelet_tls::read_chain;
use crate::kubernetes::apiserver::{
    ServiceObject, SliceObject, is_apiserver_service, is_apiserver_slice, service_addresses, slice_addresses,
};
use crate::kubernetes::cluster::{COMMAND_APISERVER_WAIT, KubeCluster, StaticCluster};
use crate::kubernetes::connect::{ConnectError, connect};
use crate::kubernetes::csr_ledger::CsrLedger;
use crate::kubernetes::csr_object::CsrObject;
use crate::kubernetes::decoded::Skipped;
use crate::kubernetes::machines::{MachineSource, machine_from_json, pending_in};
use crate::kubernetes::node_object::NodeObject;
use crate::kubernetes::node_object::node_info;
use crate::kubernetes::object_fields::Csr;
use crate::object_files::{DocumentProblem, Input, InputError, NotApiserver, Object, read_objects};
use crate::policy::{
    ApiserverAddresses, ClusterView, Evaluation, Outcome, PolicyConfig, Resolver, Submission, evaluate,
    issued_client_node,
};
use crate::values::Format;

/// The kinds `--objects` may hold.
const CLUSTER_OBJECTS: &str = "Node, a Machine, the default/kubernetes Service or its EndpointSlices";

/// The CSRs to check and the Nodes standing in for the cluster, read from the inputs.
#[derive(Debug)]
pub struct Inputs {
    /// The CSRs, in input order.
    pub csrs: Vec<Submission>,
    /// The Nodes.
    pub cluster: StaticCluster,
}

/// Reads `--file` (only CertificateSigningRequests) and `--objects` (only Nodes, Machines (of
/// those only the ones `source` watches), the `default/kubernetes` Service and its
/// EndpointSlices); with no `--file`, nothing.
pub fn read_inputs(args: &CheckArgs, source: Option<&MachineSource>) -> Result<Inputs, InputError> {
    let Some(file) = &args.file else {
        return Ok(Inputs { csrs: Vec::new(), cluster: StaticCluster::default() });
    };
    let input = Input::from_arg(file);
    let csrs = read_objects(&input)?
        .iter()
        .map(|object| {
            expect_kind(&input, object, "CertificateSigningRequest")?;
            object.parse::<Csr>(&input).map(|csr| CsrObject::from(csr).submission())
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (mut nodes, mut machines, mut apiserver) = (Vec::new(), Vec::new(), ApiserverAddresses::default());
    if let Some(path) = &args.objects {
        let input = Input::from_arg(path);
        for object in read_objects(&input)? {
            if object.kind == "Node" {
                nodes.push(node_info(&object.parse::<NodeObject>(&input)?));
            } else if let Some(addresses) = apiserver_object(&input, &object)? {
                apiserver.service.extend(addresses.service);
                apiserver.endpoints.extend(addresses.endpoints);
            } else if let Some(machine) = machine_from_json(&object.value, source) {
                machines.extend(machine);
            } else {
                let found = object.kind.clone();
                return Err(object.problem(&input, DocumentProblem::WrongKind { found, expected: CLUSTER_OBJECTS }));
            }
        }
    }
    let now = args.now.unwrap_or_else(Timestamp::now);
    let pending = pending_in(&csrs, &machines, source, now);
    let issued = csrs.iter().filter_map(|csr| Some((issued_client_node(csr)?, csr.name.clone()))).collect::<Vec<_>>();
    let mut cluster =
        StaticCluster::new(nodes, machines, pending).with_apiserver(apiserver).with_client_certificates(issued);
    if let Some(ca) = source.and_then(|source| source.kubelet_ca.clone()) {
        cluster = cluster.with_kubelet_certificates(kubelet_certificates(args)?, ca, now);
    }
    Ok(Inputs { csrs, cluster })
}

/// The chains of `--kubelet-certificate NODE=PEMFILE`, by node name.
fn kubelet_certificates(args: &CheckArgs) -> Result<HashMap<String, Vec<CertificateDer<'static>>>, InputError> {
    let read = |(node, path): &(String, PathBuf)| {
        let chain = read_chain(path).map_err(|source| InputError::Document {
            input: Input::File(path.clone()),
            document: 1,
            problem: DocumentProblem::KubeletCertificate { node: node.clone(), source: Box::new(source) },
        })?;
        Ok((node.clone(), chain))
    };
    args.kubelet_certificate.iter().map(read).collect()
}

/// The apiserver's addresses from `object` when it is a Service or an EndpointSlice: only
/// `default/kubernetes` and its slices are accepted, any other is an error.
fn apiserver_object(input: &Input, object: &Object) -> Result<Option<ApiserverAddresses>, InputError> {
    let other = |what| object.problem(input, DocumentProblem::NotApiserver(what));
    match object.kind.as_str() {
        "Service" => match object.parse::<ServiceObject>(input)? {
            service if is_apiserver_service(&service) => {
                Ok(Some(ApiserverAddresses { service: service_addresses(&service), endpoints: Vec::new() }))
            }
            _ => Err(other(NotApiserver::Service)),
        },
        "EndpointSlice" => match object.parse::<SliceObject>(input)? {
            slice if is_apiserver_slice(&slice) => {
                Ok(Some(ApiserverAddresses { service: Vec::new(), endpoints: slice_addresses(&slice) }))
            }
            _ => Err(other(NotApiserver::EndpointSlice)),
        },
        _ => Ok(None),
    }
}

/// Why `check` could not report.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The resolver could not be built from `--dns-server`.
    #[error("DNS resolver (--dns-server, env DNS_SERVERS): {0}")]
    Dns(#[from] DnsError),
    /// `--file` or `--objects` could not be read.
    #[error(transparent)]
    Input(#[from] InputError),
    /// No usable cluster configuration.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The named CSRs could not be fetched.
    #[error("fetching CSRs: {0}")]
    Fetch(#[from] kube::Error),
    /// The report could not be written.
    #[error("writing the report: {0}")]
    Write(#[from] std::io::Error),
}

/// Runs `check`: evaluates the CSRs named or read from `--file` against the cluster or
/// `--objects`, and writes the reports to `out`.
pub async fn command(args: &CheckArgs, settings: &Settings, out: &mut impl Write) -> Result<(), CheckError> {
    let resolver = HickoryResolver::new(settings.dns.servers.as_deref(), settings.dns.timeout)?;
    let now = args.now.unwrap_or_else(Timestamp::now);
    let policy = &settings.policy;
    if args.names.is_empty() {
        let inputs = read_inputs(args, settings.machines.as_ref())?;
        return Ok(run(&inputs.csrs, policy, &resolver, &inputs.cluster, now, args.output, out).await?);
    }
    let skipped = Skipped::logged();
    let budget = settings.run.request_budget();
    let connection = connect(
        settings.run.kubeconfig.as_deref(),
        budget,
        settings.machines.as_ref(),
        policy.user_rules.read_node(),
        &skipped,
    )
    .await?;
    let csrs = fetch(connection.client.clone(), &args.names).await?;
    // Every CSR of the cluster, listed once: the newer serving CSRs of a node, and in machine mode
    // the brake's count and the approved client CSRs, as the controller's cache would hold them.
    let rules = settings.machines.as_ref().map(|source| source.rules.clone());
    let ledger = CsrLedger::listed(connection.client.clone(), rules, &skipped).await?;
    let machines = match (connection.machines, settings.machines.as_ref()) {
        (Some(cache), Some(_)) => {
            cache.synced().await;
            Some(cache)
        }
        _ => None,
    };
    let kubelet_dial = settings.machines.as_ref().and_then(|source| source.kubelet_dial(policy));
    let cluster =
        KubeCluster::new(connection.client, connection.nodes, machines, ledger, skipped, policy.user_rules.read_node())
            .with_kubelet_dial(kubelet_dial);
    // Until listed, a CSR with an IP SAN is reported as a retry (ClusterUnavailable).
    cluster.apiserver_first_answer(COMMAND_APISERVER_WAIT).await;
    Ok(run(&csrs, policy, &resolver, &cluster, now, args.output, out).await?)
}

/// Fetches the named CSRs from the cluster, in the order given.
async fn fetch(client: kube::Client, names: &[String]) -> Result<Vec<Submission>, kube::Error> {
    let api: kube::Api<Csr> = kube::Api::all(client);
    let mut csrs = Vec::with_capacity(names.len());
    for name in names {
        csrs.push(CsrObject::from(api.get(name).await?).submission());
    }
    Ok(csrs)
}

fn expect_kind(input: &Input, object: &Object, kind: &'static str) -> Result<(), InputError> {
    if object.kind == kind {
        Ok(())
    } else {
        Err(object.problem(input, DocumentProblem::WrongKind { found: object.kind.clone(), expected: kind }))
    }
}

/// Evaluates every CSR and writes one report each to `out`.
pub async fn run<R: Resolver, C: ClusterView>(
    csrs: &[Submission],
    cfg: &PolicyConfig,
    resolver: &R,
    cluster: &C,
    now: Timestamp,
    format: Format,
    out: &mut impl Write,
) -> std::io::Result<()> {
    for csr in csrs {
        let evaluation = evaluate(csr, cfg, resolver, cluster, now).await;
        match format {
            Format::Text => write_text(out, &csr.name, &evaluation)?,
            Format::Json => {
                serde_json::to_writer(&mut *out, &JsonReport::new(&csr.name, &evaluation))?;
                writeln!(out)?;
            }
        }
    }
    Ok(())
}

fn outcome_parts(outcome: &Outcome) -> (&'static str, &str) {
    match outcome {
        Outcome::Pass(detail) => ("pass", detail),
        Outcome::Fail(failure) => ("fail", &failure.message),
        Outcome::Skip(why) => ("skip", why),
    }
}

/// The text report: the CSR's name, the message and every detail escaped ([`Escaped`]), so a
/// name cannot start a line of its own or drive the terminal; the request's values are quoted
/// and escaped by `{:?}`.
fn write_text(out: &mut impl Write, name: &str, evaluation: &Evaluation) -> std::io::Result<()> {
    let decision = &evaluation.decision;
    writeln!(out, "{}: {} ({})", Escaped(name), decision.kind.as_str(), decision.reason)?;
    writeln!(out, "  {}", Escaped(&decision.message))?;
    if let Some(request) = &evaluation.request {
        writeln!(
            out,
            "  request: CN {:?}, O {:?}, DNS {:?}, IP {:?}",
            request.common_names, request.organizations, request.dns_names, request.ip_addresses
        )?;
    }
    writeln!(out, "  {:<22} {:<6} DETAIL", "CHECK", "RESULT")?;
    for row in &evaluation.checks {
        let (result, detail) = outcome_parts(&row.outcome);
        writeln!(out, "  {:<22} {:<6} {}", row.check.as_str(), result, Escaped(detail))?;
    }
    writeln!(out)
}

/// The JSON form of one report: `name`, `decision`, `reason`, `message`, `request` (what the
/// request asks for, when it was read) and `checks`.
#[derive(Serialize)]
struct JsonReport<'a> {
    name: &'a str,
    decision: &'static str,
    reason: &'static str,
    message: &'a str,
    request: Option<JsonRequest<'a>>,
    checks: Vec<JsonCheck<'a>>,
}

/// The subject and SANs of a request that was read.
#[derive(Serialize)]
struct JsonRequest<'a> {
    common_names: &'a [String],
    organizations: &'a [String],
    dns_names: &'a [String],
    ip_addresses: &'a [std::net::IpAddr],
    emails: &'a [String],
    uris: &'a [String],
}

#[derive(Serialize)]
struct JsonCheck<'a> {
    check: &'static str,
    result: &'static str,
    detail: &'a str,
}

impl<'a> JsonReport<'a> {
    fn new(name: &'a str, evaluation: &'a Evaluation) -> JsonReport<'a> {
        let decision = &evaluation.decision;
        JsonReport {
            name,
            decision: decision.kind.as_str(),
            reason: decision.reason.as_str(),
            message: &decision.message,
            request: evaluation.request.as_ref().map(|facts| JsonRequest {
                common_names: &facts.common_names,
                organizations: &facts.organizations,
                dns_names: &facts.dns_names,
                ip_addresses: &facts.ip_addresses,
                emails: &facts.emails,
                uris: &facts.uris,
            }),
            checks: evaluation
                .checks
                .iter()
                .map(|row| {
                    let (result, detail) = outcome_parts(&row.outcome);
                    JsonCheck { check: row.check.as_str(), result, detail }
                })
                .collect(),
        }
    }
}
