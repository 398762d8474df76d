//! [`Relay`]: a TCP relay from one listening address to another, on a thread of its own.

use std::net::SocketAddr;
use std::thread::JoinHandle;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use crate::Error;

/// Forwards every TCP connection accepted on its listening address to `upstream`, bytes unchanged
/// (TLS passes through), until dropped. It runs on its own thread and runtime, so it keeps
/// relaying while the test's runtime is busy or blocked.
#[derive(Debug)]
pub(crate) struct Relay {
    address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Relay {
    /// Listens on `listen` (port 0: any free port) and relays to `upstream`.
    pub(crate) fn start(listen: SocketAddr, upstream: SocketAddr) -> Result<Relay, Error> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(Error::io("building the relay's runtime"))?;
        let std_listener =
            std::net::TcpListener::bind(listen).map_err(Error::io(format!("relay: listening on {listen}")))?;
        std_listener.set_nonblocking(true).map_err(Error::io("relay: making the listener non-blocking"))?;
        let address = std_listener.local_addr().map_err(Error::io("relay: reading its address"))?;
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name(format!("testenv-relay-{address}"))
            .spawn(move || runtime.block_on(serve(std_listener, upstream, stopped)))
            .map_err(Error::io("starting the relay's thread"))?;
        Ok(Relay { address, stop: Some(stop), thread: Some(thread) })
    }

    /// Where it listens.
    pub(crate) fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Accepts and relays until `stopped` resolves (its sender sent or dropped); dropping the runtime
/// then ends the connections still open.
async fn serve(listener: std::net::TcpListener, upstream: SocketAddr, mut stopped: oneshot::Receiver<()>) {
    let Ok(listener) = TcpListener::from_std(listener) else {
        return;
    };
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => {
                if let Ok((client, _)) = accepted {
                    tokio::spawn(relay(client, upstream));
                }
            }
        }
    }
}

/// Copies both ways between `client` and a new connection to `upstream` until either side closes.
async fn relay(mut client: TcpStream, upstream: SocketAddr) {
    if let Ok(mut server) = TcpStream::connect(upstream).await {
        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
    }
}
