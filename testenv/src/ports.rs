//! Ephemeral loopback ports.

use std::net::{Ipv4Addr, TcpListener};

use crate::Error;

/// A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it; another process may
/// take it before it is used).
pub fn free_port() -> Result<u16, Error> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(Error::io("binding an ephemeral port"))?;
    let address = listener.local_addr().map_err(Error::io("reading an ephemeral port"))?;
    Ok(address.port())
}
