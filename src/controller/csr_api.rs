//! The two apiserver calls of a reconcile, behind one trait ([`CsrApi`]): the read of a CSR by
//! name and the approval write. The controller sends them through the client; the reconcile's
//! unit tests through fakes that answer as the apiserver can (a conflict, 404, no answer).

use std::time::Duration;

use kube::Client;

use crate::kubernetes::csr_object::CsrObject;
use crate::kubernetes::request::{RequestError, read_csr};
use crate::kubernetes::write::write_condition;
use crate::policy::Decision;

/// The apiserver as one reconcile calls it.
pub(super) trait CsrApi: Send + Sync + 'static {
    /// The CSR named `name` as the apiserver holds it, whole, given up after `timeout`; `None`
    /// when there is none.
    fn read(
        &self,
        name: &str,
        timeout: Duration,
    ) -> impl Future<Output = Result<Option<CsrObject>, RequestError>> + Send;

    /// Writes `decision` as `csr`'s condition, preconditioned on its resourceVersion, given up
    /// after `timeout` ([`write_condition`]).
    fn write(
        &self,
        csr: &CsrObject,
        decision: &Decision,
        timeout: Duration,
    ) -> impl Future<Output = Result<(), RequestError>> + Send;
}

impl CsrApi for Client {
    async fn read(&self, name: &str, timeout: Duration) -> Result<Option<CsrObject>, RequestError> {
        Ok(read_csr(self, name, timeout).await?.map(CsrObject::from))
    }

    async fn write(&self, csr: &CsrObject, decision: &Decision, timeout: Duration) -> Result<(), RequestError> {
        write_condition(self, csr, decision, timeout).await
    }
}
