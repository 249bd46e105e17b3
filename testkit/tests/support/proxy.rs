//! A TCP proxy to a server on loopback that can hold back the server's
//! answers, as a slow or partitioned network would, seen from the client:
//! what the client sends goes through at once; what the server sends waits
//! while the proxy holds, and goes on, in order, once it lets go.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// A running proxy; it stops taking connections when dropped.
pub struct Proxy {
    port: u16,
    /// The flag the connections opened from now on hold by (see
    /// [`Proxy::hold_only_new_connections`]).
    holding: Arc<Mutex<Arc<AtomicBool>>>,
    closed: Arc<AtomicBool>,
}

impl Proxy {
    /// A proxy on a free loopback port to the server on `server_port`.
    pub fn to(server_port: u16) -> Proxy {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a loopback port");
        listener
            .set_nonblocking(true)
            .expect("a listener can be made non-blocking");
        let port = listener.local_addr().expect("a bound address").port();
        let holding = Arc::new(Mutex::new(Arc::new(AtomicBool::new(false))));
        let closed = Arc::new(AtomicBool::new(false));
        let (hold, stop) = (Arc::clone(&holding), Arc::clone(&closed));
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let _ = client.set_nonblocking(false);
                        if let Ok(server) = TcpStream::connect((Ipv4Addr::LOCALHOST, server_port)) {
                            pump(&client, &server, None);
                            let flag =
                                Arc::clone(&hold.lock().unwrap_or_else(PoisonError::into_inner));
                            pump(&server, &client, Some(flag));
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Proxy {
            port,
            holding,
            closed,
        }
    }

    /// The URL a Redis client connects to the server through.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Holds back what the server sends from now on.
    pub fn hold(&self) {
        self.flag().store(true, Ordering::SeqCst);
    }

    /// Lets what was held, and what follows, go on.
    pub fn release(&self) {
        self.flag().store(false, Ordering::SeqCst);
    }

    /// From now on [`Proxy::hold`] holds only connections opened after
    /// this call: those open now go on answering (a client's shared
    /// connection, while its new blocking ones stall).
    pub fn hold_only_new_connections(&self) {
        *self.holding.lock().unwrap_or_else(PoisonError::into_inner) =
            Arc::new(AtomicBool::new(false));
    }

    fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.holding.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` on a thread of its own until either closes,
/// waiting before each write while `hold` is set.
fn pump(from: &TcpStream, to: &TcpStream, hold: Option<Arc<AtomicBool>>) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let mut buffer = [0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            while hold.as_ref().is_some_and(|h| h.load(Ordering::SeqCst)) {
                std::thread::sleep(Duration::from_millis(5));
            }
            if to.write_all(&buffer[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}
