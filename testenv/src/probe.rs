//! Small predicates tests use to assert on the control plane.

/// Whether `error` is the apiserver refusing a request with 403 Forbidden (authenticated, but
/// not authorized).
pub fn is_forbidden(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 403)
}

/// Whether process `pid` exists and is not a zombie, for checking that
/// [`crate::ControlPlane::process_ids`] are gone after the control plane is.
pub fn process_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(") ").is_some_and(|(_, state)| !state.starts_with('Z')),
        Err(_) => false,
    }
}
