//! The real binary run as a process: `check` output, exit codes, and every configuration error (`audit`'s too).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use support::process::{binary, repo, run, stderr};
use testkit::policy::REGEX;

/// `check` on the committed examples, as docs/check.md shows it.
fn check_examples(extra: &[&str]) -> Command {
    let mut command = binary();
    command.args(["check", "--file"]).arg(repo("examples/csrs.yaml"));
    command.arg("--objects").arg(repo("examples/nodes.yaml"));
    command.args(["--provider-regex", REGEX, "--provider-ip-prefixes", "10.0.0.0/16"]);
    command.args(["--bypass-dns-resolution", "--verify-node-addresses", "--now", "2026-01-01T00:01:00Z"]);
    command.args(extra);
    command
}

fn json_lines(output: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&output.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The `| name | decision | reason |` rows of the examples table of docs/check.md.
fn readme_decisions() -> BTreeMap<String, (String, String)> {
    let readme = std::fs::read_to_string(repo("docs/check.md")).unwrap();
    let table = readme.split("<!-- examples-decisions -->").nth(1).expect("docs/check.md marks the examples table");
    let table = table.split("<!-- end -->").next().unwrap();
    table
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|line| {
            let cells: Vec<String> = line.split('|').map(|c| c.trim().trim_matches('`').to_owned()).collect();
            (cells[1].clone(), (cells[2].clone(), cells[3].clone()))
        })
        .collect()
}

#[test]
fn examples_decide_as_the_readme_documents() {
    let output = run(&mut check_examples(&["-o", "json"]));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let got: BTreeMap<String, (String, String)> = json_lines(&output)
        .iter()
        .map(|r| {
            let text = |key: &str| r[key].as_str().unwrap().to_owned();
            (text("name"), (text("decision"), text("reason")))
        })
        .collect();
    let documented = readme_decisions();
    assert_eq!(documented.len(), 7, "docs/check.md table rows: {documented:?}");
    assert_eq!(got, documented);
}

#[test]
fn json_reports_carry_every_check() {
    let output = run(&mut check_examples(&["-o", "json"]));
    let reports = json_lines(&output);
    let legit = reports.iter().find(|r| r["name"] == "legit-n1").unwrap();
    assert!(legit["message"].as_str().unwrap().contains("system:node:n1"));
    let checks = legit["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 24, "every built-in check, superseded last");
    let request = &legit["request"];
    assert_eq!(request["common_names"], serde_json::json!(["system:node:n1"]));
    assert_eq!(request["organizations"], serde_json::json!(["system:nodes"]));
    assert!(request["dns_names"].as_array().is_some_and(|names| !names.is_empty()), "{request}");
    for check in checks {
        assert!(check["check"].is_string() && check["detail"].is_string());
        assert!(["pass", "skip"].contains(&check["result"].as_str().unwrap()), "{check}");
    }
    let forged = reports.iter().find(|r| r["name"] == "forged-hostname").unwrap();
    let hostname = forged["checks"].as_array().unwrap().iter().find(|c| c["check"] == "hostname").unwrap();
    assert_eq!(hostname["result"], "fail");
    assert!(hostname["detail"].as_str().unwrap().contains("auth.evil.io"));
}

#[test]
fn text_report_shows_decision_and_check_table() {
    let output = run(&mut check_examples(&[]));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(text.contains("legit-n1: approve (AutoApproved)"), "{text}");
    assert!(text.contains("forged-hostname: deny (HostnameMismatch)"), "{text}");
    assert!(text.lines().any(|l| l.trim_start().starts_with("hostname") && l.contains("fail")), "{text}");
    assert!(stderr(&output).contains("warning: --bypass-dns-resolution"), "{}", stderr(&output));
}

#[test]
fn every_unanchored_regex_alternative_is_named_in_a_warning() {
    let mut command = binary();
    command.args(["check", "--file"]).arg(repo("examples/csrs.yaml"));
    command.args(["--provider-regex", r"^[a-z0-9-]+\.test\.ch|^x$", "--bypass-dns-resolution"]);
    let output = run(&mut command);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let err = stderr(&output);
    let warning = err.lines().find(|l| l.contains("warning: --provider-regex")).unwrap_or_default();
    assert!(warning.contains(r#""^[a-z0-9-]+\\.test\\.ch" is not anchored"#), "{err}");
    assert!(!warning.contains(r#""^x$" is not anchored"#), "{err}");
}

#[test]
fn skip_deny_step_holds_instead_of_denying() {
    let output = run(&mut check_examples(&["-o", "json", "--skip-deny-step"]));
    let reports = json_lines(&output);
    let forged = reports.iter().find(|r| r["name"] == "forged-hostname").unwrap();
    assert_eq!((forged["decision"].as_str(), forged["reason"].as_str()), (Some("hold"), Some("HostnameMismatch")));
}

#[test]
fn stdin_is_read_with_a_dash() {
    let mut child = binary()
        .args(["check", "-f", "-", "-o", "json", "--provider-regex", REGEX, "--bypass-dns-resolution"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let yaml = std::fs::read(repo("examples/csrs.yaml")).unwrap();
    child.stdin.take().unwrap().write_all(&yaml).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(json_lines(&output).len(), 7);
}

#[test]
fn environment_variables_configure_and_flags_win() {
    let mut command = check_examples(&["-o", "json"]);
    command.env("PROVIDER_REGEX", "[").env("SKIP_DENY_STEP", "TRUE");
    let output = run(&mut command);
    assert_eq!(output.status.code(), Some(0), "the valid --provider-regex flag wins: {}", stderr(&output));
    let forged = json_lines(&output).into_iter().find(|r| r["name"] == "forged-hostname").unwrap();
    assert_eq!(forged["decision"], "hold", "SKIP_DENY_STEP=TRUE applies");
}

/// Runs `check` on the examples with `args` and `env`, expecting exit 2 and one error line naming
/// the flag, its env var and the value.
fn assert_config_error(args: &[&str], env: &[(&str, &str)], flag: &str, var: &str, value: &str) {
    let mut command = binary();
    command.args(["check", "--file"]).arg(repo("examples/csrs.yaml"));
    if !args.iter().any(|a| a.starts_with("--provider-regex")) && !env.iter().any(|(k, _)| *k == "PROVIDER_REGEX") {
        command.args(["--provider-regex", REGEX]);
    }
    command.args(args).envs(env.iter().copied());
    let output = run(&mut command);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{args:?} {env:?}: {err}");
    let line = err.lines().find(|l| l.starts_with("error:")).unwrap_or_else(|| panic!("no error line: {err}"));
    for needle in [flag, var, value] {
        assert!(line.contains(needle), "{args:?} {env:?}: {line:?} does not name {needle:?}");
    }
    assert!(output.stdout.is_empty(), "nothing is evaluated on a configuration error");
}

#[test]
fn every_invalid_value_stops_with_exit_2_naming_flag_env_and_value() {
    let cases: &[(&str, &str, &[&str])] = &[
        ("--provider-regex", "PROVIDER_REGEX", &["node-(["]),
        ("--provider-ip-prefixes", "PROVIDER_IP_PREFIXES", &["10.0.0.0/33", "10.0.0.0/8,,fd00::/8"]),
        ("--provider-ip-prefixes", "PROVIDER_IP_PREFIXES", &["10.0.0.0/8, nonsense"]),
        ("--max-expiration-sec", "MAX_EXPIRATION_SEC", &["31708801", "599", "a year"]),
        ("--allowed-dns-names", "ALLOWED_DNS_NAMES", &["0", "1001"]),
        ("--allowed-ip-addresses", "ALLOWED_IP_ADDRESSES", &["1001", "-1"]),
        ("--bypass-dns-resolution", "BYPASS_DNS_RESOLUTION", &["yes"]),
        ("--bypass-hostname-check", "BYPASS_HOSTNAME_CHECK", &["on"]),
        ("--ignore-non-system-node", "IGNORE_NON_SYSTEM_NODE", &["2"]),
        ("--skip-deny-step", "SKIP_DENY_STEP", &["nope"]),
        ("--verify-node-addresses", "VERIFY_NODE_ADDRESSES", &["tRUE"]),
        ("--level", "LEVEL", &["11"]),
        ("--hostname-match", "HOSTNAME_MATCH", &["suffix"]),
        ("--dns-server", "DNS_SERVERS", &["dns.example.com"]),
        ("--dns-timeout", "DNS_TIMEOUT", &["2 parsecs", "0s"]),
        ("--dns-grace-period", "DNS_GRACE_PERIOD", &["-5m", "25h"]),
        ("--cluster-domain", "CLUSTER_DOMAIN", &["cluster..local", "*.local", "svc_local"]),
        ("--machine-api", "MACHINE_API", &["machine.openshift.io/v1"]),
        ("--machine-namespace", "MACHINE_NAMESPACE", &["Not_A_Namespace"]),
        ("--node-client-approval", "NODE_CLIENT_APPROVAL", &["maybe"]),
        ("--bootstrapper-username", "BOOTSTRAPPER_USERNAME", &["system:node:*", "system:*"]),
        ("--bootstrapper-groups", "BOOTSTRAPPER_GROUPS", &["system:authenticated,,x"]),
        ("--max-pending-delta", "MAX_PENDING_DELTA", &["-1"]),
        ("--machine-approver-config", "MACHINE_APPROVER_CONFIG", &["/nonexistent/config.yaml"]),
        ("--kubelet-serving-ca-file", "KUBELET_SERVING_CA_FILE", &["/nonexistent/ca.crt", ""]),
        ("--kubelet-port", "KUBELET_PORT", &["0", "65536", "https"]),
        ("--kube-api-qps", "KUBE_API_QPS", &["-1", "100001", "fast", "NaN"]),
        ("--kube-api-burst", "KUBE_API_BURST", &["0", "100001", "1.5"]),
    ];
    for (flag, var, value) in cases.iter().flat_map(|(flag, var, values)| values.iter().map(move |v| (flag, var, v))) {
        let as_flag = format!("{flag}={value}");
        // clap reads every value whatever the mode; the approver-config file is read in machine mode.
        let machine_mode: &[&str] =
            if flag.starts_with("--machine-api") { &[] } else { &["--machine-api=cluster.x-k8s.io/v1beta1"] };
        assert_config_error(&[&[as_flag.as_str()], machine_mode].concat(), &[], flag, var, value);
        assert_config_error(machine_mode, &[(var, value)], flag, var, value);
    }
}

#[test]
fn a_missing_or_empty_provider_regex_stops_with_exit_2() {
    let output = run(binary().args(["check", "--file"]).arg(repo("examples/csrs.yaml")));
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(err.contains("--provider-regex") && err.contains("PROVIDER_REGEX") && err.contains("required"), "{err}");
    assert_config_error(&["--provider-regex", ""], &[], "--provider-regex", "PROVIDER_REGEX", "\"\"");
}

/// Boolean values: Go's `strconv.ParseBool` spellings, and others it refuses.
const GO_TRUE: [&str; 6] = ["1", "t", "T", "TRUE", "true", "True"];
const GO_FALSE: [&str; 6] = ["0", "f", "F", "FALSE", "false", "False"];
const NOT_GO_BOOLEANS: [&str; 8] = ["", "yes", "no", "tRUE", " true", "true ", "2", "on"];

#[test]
fn a_boolean_reads_as_go_reads_it_in_the_env_var_and_the_flag() {
    let cases = GO_TRUE.iter().map(|v| (*v, Some("hold")));
    let cases = cases.chain(GO_FALSE.iter().map(|v| (*v, Some("deny"))));
    for (value, expect) in cases.chain(NOT_GO_BOOLEANS.iter().map(|v| (*v, None))) {
        let by_env = run(check_examples(&["-o", "json"]).env("SKIP_DENY_STEP", value));
        let by_flag = run(&mut check_examples(&["-o", "json", &format!("-skip-deny-step={value}")]));
        for (how, output) in [("SKIP_DENY_STEP", &by_env), ("-skip-deny-step", &by_flag)] {
            let Some(expect) = expect else {
                assert_eq!(output.status.code(), Some(2), "{how}={value:?}: {}", stderr(output));
                let err = stderr(output);
                assert!(err.contains("--skip-deny-step") && err.contains("SKIP_DENY_STEP"), "{err}");
                continue;
            };
            assert_eq!(output.status.code(), Some(0), "{how}={value:?}: {}", stderr(output));
            let forged = json_lines(output).into_iter().find(|r| r["name"] == "forged-hostname").unwrap();
            assert_eq!(forged["decision"], expect, "{how}={value:?}");
        }
    }
}

#[test]
fn go_spellings_of_the_flags_mean_what_clap_spellings_mean() {
    let clap_style = run(&mut check_examples(&["-o", "json", "--skip-deny-step", "--max-expiration-sec", "86400"]));
    assert_eq!(clap_style.status.code(), Some(0), "{}", stderr(&clap_style));
    for go_style in [
        &["-o", "json", "-skip-deny-step", "-max-expiration-sec", "86400"][..],
        &["-o", "json", "-skip-deny-step=true", "-max-expiration-sec=86400"],
        &["-o", "json", "--skip-deny-step=T", "--max-expiration-sec=86400"],
    ] {
        let output = run(&mut check_examples(go_style));
        assert_eq!(output.status.code(), Some(0), "{go_style:?}: {}", stderr(&output));
        assert_eq!(json_lines(&output), json_lines(&clap_style), "{go_style:?}");
    }
    // The Go tool's own -level: a number from -5 to 10; --log-level wins over it.
    for (args, code) in
        [(&["-level", "2"][..], 0), (&["-level=-5"], 0), (&["-level", "11"], 2), (&["-level=1", "--log-level=info"], 0)]
    {
        let output = run(&mut check_examples(args));
        assert_eq!(output.status.code(), Some(code), "{args:?}: {}", stderr(&output));
    }
}

#[test]
fn usage_errors_exit_2() {
    let bad_values = [&["check", "-f", "x", "--output", "xml"][..], &["check", "-f", "x", "--now", "yesterday"]];
    for args in [&["check"][..], &["frobnicate"]].into_iter().chain(bad_values) {
        let output = run(binary().args(args).env("PROVIDER_REGEX", REGEX));
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", stderr(&output));
    }
}

#[test]
fn unreadable_or_wrong_inputs_exit_1_naming_file_and_document() {
    let dir = tempfile::tempdir().unwrap();
    let not_yaml = dir.path().join("broken.yaml");
    std::fs::write(&not_yaml, "kind: [unclosed\n").unwrap();
    let a_node = repo("examples/nodes.yaml");
    let garbage = dir.path().join("garbage.bin");
    std::fs::write(&garbage, [0xff, 0xfe, 0x00, 0x12, 0x80]).unwrap();
    let bad_csr = dir.path().join("bad.yaml");
    std::fs::write(&bad_csr, "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nspec: 42\n")
        .unwrap();
    let missing = dir.path().join("missing.yaml");
    let cases: [(&Path, &str); 5] = [
        (&missing, "cannot read"),
        (&not_yaml, "not valid YAML or JSON"),
        (&a_node, "document 1: a Node where a CertificateSigningRequest was expected"),
        (&garbage, "garbage.bin"),
        (&bad_csr, "document 1: not a valid CertificateSigningRequest"),
    ];
    for (path, needle) in cases {
        let output = run(binary().args(["check", "--provider-regex", REGEX, "--file"]).arg(path));
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(1), "{}: {err}", path.display());
        assert!(err.contains(&path.display().to_string()) && err.contains(needle), "{err}");
    }
}

#[test]
fn check_resolves_through_the_given_dns_server() {
    let server = testdns::DnsServer::start_on_thread(
        testdns::Records::new().a("n1.nodes.example.com", "10.0.0.11").a("n2.nodes.example.com", "10.0.0.12"),
    )
    .unwrap();
    let mut command = binary();
    command.args(["check", "-o", "json", "--file"]).arg(repo("examples/csrs.yaml"));
    command.args(["--provider-regex", REGEX, "--provider-ip-prefixes", "10.0.0.0/16", "--dns-timeout", "500ms"]);
    command.arg(format!("--dns-server={}", server.addr()));
    let output = run(&mut command);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let legit = json_lines(&output).into_iter().find(|r| r["name"] == "legit-n1").unwrap();
    assert_eq!(
        (legit["decision"].as_str(), legit["reason"].as_str()),
        (Some("approve"), Some("AutoApproved")),
        "{legit}"
    );
    assert!(server.queries_for("n1.nodes.example.com") > 0);
    assert_eq!(server.queries_for("auth.evil.io"), 0, "forged names are never looked up");
}

/// A bootstrap client CSR for `node` and a Machine carrying its name, as YAML files.
fn machine_mode_inputs(dir: &Path, node: &str) -> (PathBuf, PathBuf) {
    let pem = support::Request::node(node).pem();
    let csr = format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  name: boot-{node}\n  creationTimestamp: \"2026-01-01T00:01:00Z\"\nspec:\n  signerName: kubernetes.io/kube-apiserver-client-kubelet\n  username: system:serviceaccount:openshift-machine-config-operator:node-bootstrapper\n  groups: [system:serviceaccounts:openshift-machine-config-operator, system:serviceaccounts, system:authenticated]\n  usages: [digital signature, client auth]\n  request: {}\n",
        base64(pem.as_bytes())
    );
    let machine = format!(
        "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Machine\nmetadata:\n  name: m-{node}\n  namespace: default\n  creationTimestamp: \"2026-01-01T00:00:00Z\"\nstatus:\n  addresses:\n    - {{type: InternalDNS, address: {node}}}\n"
    );
    let (csr_path, machine_path) = (dir.join("csr.yaml"), dir.join("machines.yaml"));
    std::fs::write(&csr_path, csr).unwrap();
    std::fs::write(&machine_path, machine).unwrap();
    (csr_path, machine_path)
}

fn base64(bytes: &[u8]) -> String {
    let block = support::pem_block("X", bytes);
    block.lines().filter(|l| !l.starts_with("-----")).collect()
}

#[test]
fn check_decides_bootstrap_csrs_against_machines_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let (csr, machines) = machine_mode_inputs(dir.path(), "n7");
    let decide = |extra: &[&str]| {
        let mut command = binary();
        command
            .args(["check", "-o", "json", "--provider-regex", REGEX, "--now", "2026-01-01T00:02:00Z", "--file"])
            .arg(&csr);
        command.arg("--objects").arg(&machines).arg("--machine-api=cluster.x-k8s.io/v1beta1").args(extra);
        let output = run(&mut command);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let report = json_lines(&output).remove(0);
        (report["decision"].as_str().unwrap().to_owned(), report["reason"].as_str().unwrap().to_owned())
    };
    assert_eq!(decide(&[]), ("approve".to_owned(), "AutoApproved".to_owned()));
    assert_eq!(decide(&["--node-client-approval=false"]), ("ignore".to_owned(), "SignerNotHandled".to_owned()));
    let config = dir.path().join("machine-approver-config.yaml");
    std::fs::write(&config, "nodeClientCert:\n  disabled: true\n").unwrap();
    let flag = format!("--machine-approver-config={}", config.display());
    assert_eq!(decide(&[&flag]), ("ignore".to_owned(), "SignerNotHandled".to_owned()));
}

#[test]
fn text_output_escapes_names_that_would_forge_lines_or_drive_the_terminal() {
    let examples = std::fs::read_to_string(repo("examples/csrs.yaml")).unwrap();
    let mut csr = serde_saphyr::from_str::<serde_json::Value>(&examples).unwrap()["items"][0].take();
    csr["metadata"]["name"] = "evil\nlegit-n1: approve (AutoApproved)\u{1b}[2K\u{202e}".into();
    csr["spec"]["username"] = "system:node:n1\r\u{1b}]0;x\u{7}".into();
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), csr.to_string()).unwrap();
    let output = run(binary().args(["check", "-o", "text", "--provider-regex", REGEX, "--file"]).arg(file.path()));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.starts_with(r"evil\nlegit-n1: approve (AutoApproved)\u{1b}[2K\u{202e}: deny ("), "{text}");
    assert!(!text.lines().skip(1).any(|l| l.starts_with("legit-n1")), "{text}");
    assert!(!text.chars().any(|c| c != '\n' && node_csr_approver::display::needs_escape(c)), "{text:?}");
    assert!(text.contains(r"system:node:n1\r\u{1b}]0;x\u{7}"), "the username in the message: {text}");
}

#[test]
fn text_log_lines_escape_what_they_quote() {
    let kubeconfig = "/nonexistent/x\n2026-01-01T00:00:00Z  INFO forged line\u{1b}[2K";
    let output = run(binary().args(["--provider-regex", REGEX, "--log-format", "text", "--kubeconfig", kubeconfig]));
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let err = stderr(&output);
    let line = err.lines().find(|l| l.contains("stopped")).unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains(r"/nonexistent/x\n2026-01-01T00:00:00Z  INFO forged line\u{1b}[2K"), "{err}");
    assert!(!err.lines().any(|l| l.starts_with("2026-01-01")) && !err.contains('\u{1b}'), "{err:?}");
}

#[test]
fn audit_stops_with_exit_2_naming_the_flag_of_an_invalid_value() {
    let cases = [
        ("--fail-on", "bogus"),
        ("--fail-on", "self-signed=7d"),
        ("--fail-on", "expiring=soon"),
        ("--dial-timeout", "0s"),
        ("--dial-concurrency", "0"),
    ];
    for (flag, value) in cases {
        let output = run(binary().args(["audit", "--provider-regex", REGEX, &format!("{flag}={value}")]));
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{flag}={value}: {err}");
        assert!(err.contains(flag) && err.contains(value.split('=').next_back().unwrap()), "{flag}={value}: {err}");
        assert!(output.stdout.is_empty(), "nothing is dialled on a usage error");
    }
}

/// `--version` names the version, the commit of the source tree it was built from (git's HEAD, or
/// `unknown` outside a git work tree) and the target, here the host's.
#[test]
fn version_names_the_commit_and_the_target() {
    let output = run(binary().arg("--version"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let git = Command::new("git").arg("-C").arg(repo(".")).args(["rev-parse", "--verify", "HEAD"]).output();
    let commit = match git {
        Ok(git) if git.status.success() => String::from_utf8(git.stdout).unwrap()[..12].to_owned(),
        _ => "unknown".to_owned(),
    };
    let stdout = String::from_utf8(output.stdout).unwrap();
    let prefix = format!("node-csr-approver {} (commit {commit}, ", env!("CARGO_PKG_VERSION"));
    let target = stdout.strip_prefix(&prefix).and_then(|rest| rest.strip_suffix(")\n"));
    let target = target.unwrap_or_else(|| panic!("{stdout:?} does not start with {prefix:?}"));
    assert!(target.starts_with(std::env::consts::ARCH) && target.contains("-linux-"), "{stdout:?}");
}
