//! [`Seen`]: one request the proxy passed on or answered itself, named as kube-apiserver's
//! request counters name it (verb and resource), for tests that count what a client costs the
//! apiserver.

use std::time::SystemTime;

/// One request the proxy saw (every request but those a [`super::Block`] refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// When it arrived.
    pub at: SystemTime,
    /// `GET`, `POST`, `PUT`, `PATCH`, `DELETE`...
    pub method: String,
    /// Its path, without the query.
    pub path: String,
    /// Whether it is a watch (`watch=true` or `watch=1`).
    pub watch: bool,
    /// Whether it asks for a further page of a list (its query holds a `continue` token).
    pub continued: bool,
    /// The `Retry-After` seconds of the 429 the proxy answered it with
    /// ([`super::FaultProxy::throttle`], [`super::FaultProxy::throttle_upkeep`]); `None` when it
    /// was not throttled.
    pub throttled: Option<u32>,
}

impl Seen {
    /// Its verb as kube-apiserver names it: `watch`, `list`, `get`, `create`, `update`, `patch`,
    /// `delete`, `deletecollection`; `other` for any other method.
    pub fn verb(&self) -> &'static str {
        // A request of no resource (`/version`) reads one thing, as a `get` does.
        let named = resource_path(&self.path).is_none_or(|(_, name, _)| name.is_some());
        match self.method.as_str() {
            "GET" | "HEAD" if self.watch => "watch",
            "GET" | "HEAD" if named => "get",
            "GET" | "HEAD" => "list",
            "POST" => "create",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" if named => "delete",
            "DELETE" => "deletecollection",
            _ => "other",
        }
    }

    /// Its resource, with its subresource after a `/` (`nodes`, `leases`,
    /// `certificatesigningrequests/approval`); the path itself for a request of no resource
    /// (`/version`).
    pub fn resource(&self) -> String {
        match resource_path(&self.path) {
            Some((resource, _, Some(subresource))) => format!("{resource}/{subresource}"),
            Some((resource, _, None)) => resource.to_owned(),
            None => self.path.clone(),
        }
    }

    /// `<verb> <resource>`, as a key to count requests by.
    pub fn key(&self) -> String {
        format!("{} {}", self.verb(), self.resource())
    }
}

/// The resource, name and subresource of a resource path (`/api/<version>/…` or
/// `/apis/<group>/<version>/…`, namespaced or not); `None` for any other path.
fn resource_path(path: &str) -> Option<(&str, Option<&str>, Option<&str>)> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] | ["apis", _, _version, rest @ ..] => rest,
        _ => return None,
    };
    let rest = match rest {
        ["namespaces", _namespace, inner @ ..] if !inner.is_empty() => inner,
        other => other,
    };
    match rest {
        [resource] => Some((resource, None, None)),
        [resource, name] => Some((resource, Some(name), None)),
        [resource, name, subresource, ..] => Some((resource, Some(name), Some(subresource))),
        [] => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(method: &str, path: &str, watch: bool) -> String {
        Seen {
            at: SystemTime::UNIX_EPOCH,
            method: method.to_owned(),
            path: path.to_owned(),
            watch,
            continued: false,
            throttled: None,
        }
        .key()
    }

    #[test]
    fn requests_are_named_by_verb_and_resource_as_the_apiserver_counts_them() {
        assert_eq!(seen("GET", "/api/v1/nodes", false), "list nodes");
        assert_eq!(seen("GET", "/api/v1/nodes", true), "watch nodes");
        assert_eq!(seen("GET", "/api/v1/nodes/n1", false), "get nodes");
        let approval = "/apis/certificates.k8s.io/v1/certificatesigningrequests/csr-1/approval";
        assert_eq!(seen("PUT", approval, false), "update certificatesigningrequests/approval");
        let leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
        assert_eq!(seen("PATCH", &format!("{leases}/l"), false), "patch leases");
        assert_eq!(seen("GET", leases, true), "watch leases");
        assert_eq!(seen("POST", "/apis/events.k8s.io/v1/namespaces/default/events", false), "create events");
        assert_eq!(seen("GET", "/api/v1/namespaces/default", false), "get namespaces");
        assert_eq!(seen("GET", "/api/v1/namespaces", false), "list namespaces");
        assert_eq!(seen("GET", "/version", false), "get /version");
    }
}
