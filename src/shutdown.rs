//! The one shutdown of `run`: SIGTERM and SIGINT, caught from the moment they are registered.

use tokio::signal::unix::{Signal, SignalKind, signal};

/// SIGTERM and SIGINT, caught from the moment they are registered.
pub(crate) struct ShutdownSignals(Option<(Signal, Signal)>);

impl ShutdownSignals {
    /// Installs the handlers; if that fails the signals keep their default action.
    pub(crate) fn register() -> ShutdownSignals {
        match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
            (Ok(term), Ok(int)) => ShutdownSignals(Some((term, int))),
            (Err(error), _) | (_, Err(error)) => {
                tracing::warn!(%error, "cannot handle SIGTERM and SIGINT: they will end the process at once");
                ShutdownSignals(None)
            }
        }
    }

    /// Resolves on the next SIGTERM or SIGINT with the signal's name.
    pub(crate) async fn recv(&mut self) -> &'static str {
        let Some((term, int)) = &mut self.0 else { return std::future::pending().await };
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        }
    }
}
