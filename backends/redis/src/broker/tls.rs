//! TLS material for `rediss://` connections beyond the system's trusted
//! roots: a private CA, and a client certificate for mutual TLS.

use std::fmt;
use std::path::Path;

use redis::{ClientTlsConfig, TlsCertificates};
use ruststream_core::{BrokerError, BrokerResult};

/// What a `rediss://` connection trusts and presents, beyond the defaults.
///
/// Without it (`RedisConfig::tls` is `None`), a `rediss://` URL trusts the
/// system's root certificates and presents no client certificate, which is
/// what managed services with public certificates need. Give a CA for a
/// server whose certificate a private CA signed, and a certificate and key
/// for servers that ask clients for one (`tls-auth-clients yes`).
///
/// ```no_run
/// use std::path::Path;
/// use ruststream_redis::{RedisBroker, RedisConfig, RedisTls};
///
/// # fn main() -> Result<(), ruststream_core::BrokerError> {
/// let tls = RedisTls::from_files(
///     Some(Path::new("/etc/redis/ca.pem")),
///     Some((Path::new("/etc/app/client.pem"), Path::new("/etc/app/client.key"))),
/// )?;
/// let config = RedisConfig { tls: Some(tls), ..RedisConfig::default() };
/// let broker = RedisBroker::standalone_with("rediss://app:secret@cache:6380", config);
/// # let _ = broker; Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct RedisTls {
    /// Certificates (PEM) to trust instead of the system's roots.
    pub ca_pem: Option<Vec<u8>>,
    /// A client certificate (PEM, chain allowed) and its private key (PEM),
    /// for mutual TLS.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl fmt::Debug for RedisTls {
    /// Never shows the key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTls")
            .field("ca_pem", &self.ca_pem.as_ref().map(|c| c.len()))
            .field(
                "client",
                &self.client.as_ref().map(|_| "<certificate and key>"),
            )
            .finish()
    }
}

impl RedisTls {
    /// Reads a CA file, and a client certificate and key file, each PEM.
    /// A file that cannot be read is an error naming it.
    pub fn from_files(ca: Option<&Path>, client: Option<(&Path, &Path)>) -> BrokerResult<Self> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|source| BrokerError::Io {
                path: path.to_owned(),
                source,
            })
        };
        Ok(RedisTls {
            ca_pem: ca.map(read).transpose()?,
            client: match client {
                Some((cert, key)) => Some((read(cert)?, read(key)?)),
                None => None,
            },
        })
    }

    /// The client's form of it.
    pub(super) fn certificates(&self) -> TlsCertificates {
        TlsCertificates {
            client_tls: self.client.as_ref().map(|(cert, key)| ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
            root_cert: self.ca_pem.clone(),
        }
    }
}

/// Whether `url` asks for TLS (`rediss://`).
pub(super) fn is_tls(url: &str) -> bool {
    url.starts_with("rediss://")
}
