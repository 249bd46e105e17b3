//! Certificates for TLS tests, made by the `openssl` command line when a
//! test starts: a CA, a server certificate for 127.0.0.1 it signed, and a
//! client certificate it signed (for mutual TLS). Removed when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct TestCerts {
    dir: PathBuf,
}

impl TestCerts {
    /// Makes the CA and the two certificates in a fresh directory.
    pub fn make(what: &str) -> TestCerts {
        let dir = std::env::temp_dir().join(format!(
            "ruststream-tls-{what}-{}-{}",
            std::process::id(),
            ruststream_redis::unique_token()
        ));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let certs = TestCerts { dir };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        certs.openssl(&[
            &["req", "-x509"],
            &ec[..],
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=ruststream test CA",
            ],
        ]);
        // Servers present their certificate as clients too (a cluster's
        // bus, replication over TLS).
        for (name, usage) in [
            ("server", "serverAuth,clientAuth"),
            ("client", "clientAuth"),
        ] {
            let key = format!("{name}.key");
            let csr = format!("{name}.csr");
            let pem = format!("{name}.pem");
            let ext = format!("{name}.ext");
            let extensions = format!(
                "subjectAltName=IP:127.0.0.1\nextendedKeyUsage={usage}\nbasicConstraints=CA:FALSE\n"
            );
            std::fs::write(certs.dir.join(&ext), extensions)
                .unwrap_or_else(|e| panic!("cannot write {ext}: {e}"));
            certs.openssl(&[
                &["req"],
                &ec[..],
                &[
                    "-keyout",
                    &key,
                    "-out",
                    &csr,
                    "-subj",
                    &format!("/CN={name}"),
                ],
            ]);
            certs.openssl(&[&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "2",
                "-extfile",
                &ext,
            ]]);
        }
        certs
    }

    fn openssl(&self, args: &[&[&str]]) {
        let args: Vec<&str> = args.iter().flat_map(|a| a.iter().copied()).collect();
        let out = Command::new("openssl")
            .args(&args)
            .current_dir(&self.dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run openssl (is it installed?): {e}"));
        assert!(
            out.status.success(),
            "openssl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The `redis-server` arguments for a TLS port with these
    /// certificates; clients must present a certificate the CA signed.
    pub fn server_args(&self, tls_port: u16) -> Vec<String> {
        let path = |f: &str| self.path(f).display().to_string();
        vec![
            "--tls-port".into(),
            tls_port.to_string(),
            "--tls-cert-file".into(),
            path("server.pem"),
            "--tls-key-file".into(),
            path("server.key"),
            "--tls-ca-cert-file".into(),
            path("ca.pem"),
            "--tls-auth-clients".into(),
            "yes".into(),
        ]
    }

    /// The `redis-cli` arguments to connect with the client certificate.
    pub fn cli_args(&self) -> Vec<String> {
        let path = |f: &str| self.path(f).display().to_string();
        vec![
            "--tls".into(),
            "--cacert".into(),
            path("ca.pem"),
            "--cert".into(),
            path("client.pem"),
            "--key".into(),
            path("client.key"),
        ]
    }
}

impl Drop for TestCerts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
