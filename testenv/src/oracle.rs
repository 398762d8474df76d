//! [`Oracle`]: Go's reading of a CSR, from the `csr-oracle` tool (`tools/csr-oracle`).

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::net::IpAddr;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use base64::Engine;
use base64::prelude::BASE64_STANDARD;
use serde::Deserialize;

use crate::Error;
use crate::tools::{existing, tools_dir};

/// A running `csr-oracle`: reads `spec.request` bytes exactly as kube-apiserver (validation) and
/// the kube-controller-manager signer do, with the Kubernetes and Go code they run. One process
/// answers any number of requests, one at a time. Ended when dropped.
#[derive(Debug)]
pub struct Oracle {
    child: Child,
    stdin: BufWriter<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// Reused buffer for the request line sent and the answer line read.
    line: String,
}

/// What Go makes of one request: the JSON line `csr-oracle` answers.
///
/// Accepted (`ok`): the subject and SANs of the certificate the signer would issue, and every CN
/// of the request. Rejected: `stage` names the step that refused the request and `error` is Go's
/// message; the other fields are empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GoView {
    /// Both the apiserver and the signer take the request.
    pub ok: bool,
    /// When refused: `pem` (no PEM block), `type` (the block is not a `CERTIFICATE REQUEST`),
    /// `x509` (the PKCS#10 does not parse), `signature` (the self-signature does not verify) or
    /// `sign` (the signer could not issue a certificate).
    #[serde(default)]
    pub stage: Option<String>,
    /// When refused: Go's error message.
    #[serde(default)]
    pub error: Option<String>,
    /// `Subject.CommonName`: the last CN, the only one the signer writes into the certificate.
    #[serde(default)]
    pub common_name: String,
    /// Every CN with a string value, in the request's order.
    #[serde(default)]
    pub common_names: Vec<String>,
    /// `Subject.Organization`, in order.
    #[serde(default)]
    pub organizations: Vec<String>,
    /// DNS SANs.
    #[serde(default)]
    pub dns_names: Vec<String>,
    /// IP SANs as written into the certificate (an IPv4-mapped IPv6 address becomes IPv4).
    #[serde(default)]
    pub ip_addresses: Vec<IpAddr>,
    /// Email SANs.
    #[serde(default)]
    pub emails: Vec<String>,
    /// URI SANs, as Go's `URL.String()` prints them.
    #[serde(default)]
    pub uris: Vec<String>,
}

impl Oracle {
    /// Starts `csr-oracle` from [`crate::tools_dir`] (building the tools first if needed).
    pub fn start() -> Result<Oracle, Error> {
        let binary = existing(&tools_dir()?, "csr-oracle")?;
        let mut child = Command::new(&binary)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(Error::io(format!("starting {}", binary.display())))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::Oracle("started without its standard input and output pipes".to_owned()));
        };
        Ok(Oracle { child, stdin: BufWriter::new(stdin), stdout: BufReader::new(stdout), line: String::new() })
    }

    /// Go's reading of `request`, the raw bytes of a CSR's `spec.request`.
    pub fn read(&mut self, request: &[u8]) -> Result<GoView, Error> {
        self.line.clear();
        BASE64_STANDARD.encode_string(request, &mut self.line);
        self.line.push('\n');
        self.stdin
            .write_all(self.line.as_bytes())
            .and_then(|()| self.stdin.flush())
            .map_err(|error| self.failure(format!("writing the request: {error}")))?;
        self.line.clear();
        let read = self.stdout.read_line(&mut self.line).map_err(|error| self.failure(format!("reading: {error}")))?;
        if read == 0 {
            return Err(self.failure("no answer".to_owned()));
        }
        serde_json::from_str(&self.line)
            .map_err(|error| Error::Oracle(format!("unreadable answer {:?}: {error}", self.line.trim_end())))
    }

    /// An error saying what failed, and how the oracle ended if it has.
    fn failure(&mut self, what: String) -> Error {
        match self.child.try_wait() {
            Ok(Some(status)) => Error::Oracle(format!("{what} (exited with {status})")),
            _ => Error::Oracle(what),
        }
    }
}

impl Drop for Oracle {
    fn drop(&mut self) {
        // Errors mean it has already exited, which is the goal.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
