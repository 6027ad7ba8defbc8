//! TLS settings in MySQL/MariaDB and PostgreSQL URLs: checking them before the
//! first connection, and turning TLS failures into errors that say what to fix.
//!
//! sqlx (rustls) reads the parameters itself, also through the `Any` driver; this
//! module only reads the same parameters to check the files and to name them in
//! errors:
//!
//! | | PostgreSQL | MySQL/MariaDB |
//! |---|---|---|
//! | mode | `sslmode=disable\|prefer\|require\|verify-ca\|verify-full` | `ssl-mode=DISABLED\|PREFERRED\|REQUIRED\|VERIFY_CA\|VERIFY_IDENTITY` |
//! | CA | `sslrootcert=` | `ssl-ca=` |
//! | client certificate | `sslcert=`, `sslkey=` | `ssl-cert=`, `ssl-key=` |

use crate::error::Error;

/// Which parameter spelling family a URL uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Postgres,
    MySql,
}

/// The TLS parameters of a store URL, as the user spelled them.
#[derive(Debug)]
pub(crate) struct TlsParams {
    family: Family,
    host: String,
    mode: Option<(String, String)>,
    ca: Option<(String, String)>,
    cert: Option<(String, String)>,
    key: Option<(String, String)>,
    password: Option<String>,
}

const MODE_KEYS: &[&str] = &["sslmode", "ssl-mode"];
const CA_KEYS: &[&str] = &["sslrootcert", "ssl-root-cert", "ssl-ca", "sslca"];
const CERT_KEYS: &[&str] = &["sslcert", "ssl-cert"];
const KEY_KEYS: &[&str] = &["sslkey", "ssl-key"];

impl TlsParams {
    /// Reads the TLS parameters of a MySQL/MariaDB or PostgreSQL URL (also a
    /// redacted one); `None` for other schemes and unparseable URLs.
    pub(crate) fn parse(url: &str) -> Option<Self> {
        let parsed = url::Url::parse(url).ok()?;
        let family = match parsed.scheme().to_ascii_lowercase().as_str() {
            "postgres" | "postgresql" => Family::Postgres,
            "mysql" | "mariadb" => Family::MySql,
            _ => return None,
        };
        let mut p = TlsParams {
            family,
            host: parsed.host_str().unwrap_or("localhost").to_string(),
            mode: None,
            ca: None,
            cert: None,
            key: None,
            password: None,
        };
        for (k, v) in parsed.query_pairs() {
            let pair = Some((k.to_string(), v.to_string()));
            match &*k {
                k if MODE_KEYS.contains(&k) => p.mode = pair,
                k if CA_KEYS.contains(&k) => p.ca = pair,
                k if CERT_KEYS.contains(&k) => p.cert = pair,
                k if KEY_KEYS.contains(&k) => p.key = pair,
                "sslpassword" | "ssl-password" => p.password = Some(k.to_string()),
                "host" | "hostaddr" => p.host = v.to_string(),
                _ => {}
            }
        }
        Some(p)
    }

    fn mode_key(&self) -> &str {
        match (&self.mode, self.family) {
            (Some((k, _)), _) => k,
            (None, Family::Postgres) => "sslmode",
            (None, Family::MySql) => "ssl-mode",
        }
    }

    fn ca_key(&self) -> &str {
        match (&self.ca, self.family) {
            (Some((k, _)), _) => k,
            (None, Family::Postgres) => "sslrootcert",
            (None, Family::MySql) => "ssl-ca",
        }
    }

    fn cert_key(&self) -> &str {
        match (&self.cert, self.family) {
            (Some((k, _)), _) => k,
            (None, Family::Postgres) => "sslcert",
            (None, Family::MySql) => "ssl-cert",
        }
    }

    fn key_key(&self) -> &str {
        match (&self.key, self.family) {
            (Some((k, _)), _) => k,
            (None, Family::Postgres) => "sslkey",
            (None, Family::MySql) => "ssl-key",
        }
    }

    /// The mode that encrypts without verifying the server certificate.
    fn no_verify_mode(&self) -> String {
        match self.family {
            Family::Postgres => format!("{}=require", self.mode_key()),
            Family::MySql => format!("{}=REQUIRED", self.mode_key()),
        }
    }

    /// The mode that verifies the CA but not the host name.
    fn verify_ca_mode(&self) -> String {
        match self.family {
            Family::Postgres => format!("{}=verify-ca", self.mode_key()),
            Family::MySql => format!("{}=VERIFY_CA", self.mode_key()),
        }
    }

    fn ca_setting(&self) -> String {
        match &self.ca {
            Some((k, v)) => format!("{k}={}", shown(v)),
            None => format!("{}= (none given)", self.ca_key()),
        }
    }

    /// Checks what can be checked without a connection: that the certificate
    /// and key files exist and are readable, that certificate and key come as a
    /// pair, and that no encrypted-key password is asked for.
    pub(crate) fn check(&self, store: &str) -> Result<(), Error> {
        let fail = |reason: String| Error::Tls {
            source: None,
            store: store.to_string(),
            reason,
        };
        if let Some(k) = &self.password {
            return Err(fail(format!(
                "{k} is not supported: tenure's TLS (rustls) cannot read encrypted private keys; \
                 decrypt the key (`openssl pkey -in client.key -out client-plain.key`), protect it \
                 with file permissions and pass it as {}=",
                self.key_key()
            )));
        }
        // A directory opens like a file and a file without a certificate
        // reads fine: both would fail only at the handshake, as an
        // unreachable server or an unknown issuer.
        if let Some((k, v)) = &self.ca {
            if !is_inline_pem(v) {
                crate::store::util::ca_file::read_ca_file(k, v).map_err(fail)?;
            }
        }
        for (what, param) in [
            ("the client certificate", &self.cert),
            ("the client's private key", &self.key),
        ] {
            let Some((k, v)) = param else { continue };
            if is_inline_pem(v) {
                continue;
            }
            if v.is_empty() {
                return Err(fail(format!(
                    "{k}= is empty; give the path of a PEM file with {what}"
                )));
            }
            if let Err(e) = std::fs::File::open(v) {
                return Err(fail(format!(
                    "cannot read {k}={v}: {e}; give the path of a PEM file with {what}"
                )));
            }
        }
        match (&self.cert, &self.key) {
            (Some((k, _)), None) => Err(fail(format!(
                "{k}= is given without {}=: a client certificate needs its private key",
                self.key_key()
            ))),
            (None, Some((k, _))) => Err(fail(format!(
                "{k}= is given without {}=: a client key needs its certificate",
                self.cert_key()
            ))),
            _ => Ok(()),
        }
    }
}

/// For an access-denied error of MySQL/MariaDB (which does not say that an
/// account demands a client certificate): a hint when the URL has none.
pub(crate) fn access_denied_hint(store: &str) -> String {
    match TlsParams::parse(store) {
        Some(p) if p.family == Family::MySql && p.cert.is_none() => {
            "; if the account is created with REQUIRE X509 (or SSL/SUBJECT/ISSUER), connect with ssl-mode=VERIFY_IDENTITY (or REQUIRED) and pass ssl-cert= and ssl-key=".to_string()
        }
        _ => String::new(),
    }
}

/// sqlx takes a value that looks like PEM as the certificate itself.
fn is_inline_pem(v: &str) -> bool {
    let t = v.trim();
    t.starts_with("-----BEGIN") && t.ends_with("-----")
}

/// A parameter value for a message: paths as given, inline PEM abbreviated.
fn shown(v: &str) -> String {
    if is_inline_pem(v) {
        "(inline PEM)".to_string()
    } else {
        v.to_string()
    }
}

/// Recognises a TLS failure among sqlx errors and explains it; `None` for
/// errors that have nothing to do with TLS.
pub(crate) fn classify(store: &str, e: &sqlx::Error) -> Option<Error> {
    let params = TlsParams::parse(store)?;
    let reason = match e {
        sqlx::Error::Tls(inner) => {
            if let Some(r) = crate::store::util::rustls_cause::find(inner.as_ref()) {
                explain_rustls(&params, r)
            } else {
                let msg = inner.to_string();
                if msg.contains("does not support TLS") {
                    format!(
                        "the server at {} does not accept TLS connections, but {} requires TLS; \
                         enable TLS on the server (PostgreSQL: ssl=on; MariaDB: ssl-cert/ssl-key) \
                         or choose a mode that allows plain connections",
                        params.host,
                        params
                            .mode
                            .as_ref()
                            .map(|(k, v)| format!("{k}={v}"))
                            .unwrap_or_else(|| params.mode_key().to_string())
                    )
                } else {
                    format!(
                        "TLS setup failed: {msg}; check {} (PEM certificates)",
                        params.ca_setting()
                    )
                }
            }
        }
        sqlx::Error::Io(io) => {
            let r = io
                .get_ref()
                .and_then(|inner| crate::store::util::rustls_cause::find(inner))?;
            explain_rustls(&params, r)
        }
        sqlx::Error::Configuration(c) => {
            let msg = c.to_string();
            if msg.contains("pem") || msg.contains("key and certs") {
                format!(
                    "cannot use the client certificate/key ({}, {}): {msg}; give PEM files \
                     (the key unencrypted, PKCS#8, PKCS#1 or SEC1)",
                    params
                        .cert
                        .as_ref()
                        .map_or("no sslcert".into(), |(k, v)| format!("{k}={}", shown(v))),
                    params
                        .key
                        .as_ref()
                        .map_or("no sslkey".into(), |(k, v)| format!("{k}={}", shown(v)))
                )
            } else {
                return None;
            }
        }
        sqlx::Error::Database(db) if params.family == Family::Postgres => {
            let msg = db.message();
            if msg.contains("requires a valid client certificate") {
                format!(
                    "{msg}: the server accepts this user only with a client certificate; pass {}=client.pem and {}=client.key (signed by a CA the server trusts, common name = the user name)",
                    params.cert_key(),
                    params.key_key()
                )
            } else if msg.contains("certificate authentication failed") {
                format!(
                    "{msg}: the client certificate's common name must be the user name in the URL (or be mapped to it in pg_ident.conf); check {}=",
                    params.cert_key()
                )
            } else if (msg.contains("no pg_hba.conf entry") || msg.contains("pg_hba.conf rejects"))
                && msg.contains("no encryption")
            {
                format!(
                    "{msg}: the server accepts this user only over TLS; use {}=require or stronger",
                    params.mode_key()
                )
            } else {
                return None;
            }
        }
        _ => return None,
    };
    Some(Error::Tls {
        source: None,
        store: store.to_string(),
        reason,
    })
}

fn explain_rustls(p: &TlsParams, e: &rustls::Error) -> String {
    use rustls::{AlertDescription as A, CertificateError as C};
    let host = &p.host;
    match e {
        rustls::Error::InvalidCertificate(c) => match c {
            C::UnknownIssuer | C::BadSignature => match &p.ca {
                Some((k, v)) => format!(
                    "server certificate for {host} is not signed by the CA in {k}={}; check {k} or use {} to skip verification",
                    shown(v),
                    p.no_verify_mode()
                ),
                None => format!(
                    "server certificate for {host} is not signed by a CA this client trusts (no {}= given, so only the built-in public root CAs are trusted); pass {}=/path/to/ca.pem or use {} to skip verification",
                    p.ca_key(),
                    p.ca_key(),
                    p.no_verify_mode()
                ),
            },
            C::NotValidForName | C::NotValidForNameContext { .. } => format!(
                "server certificate is not valid for the host name {host}; connect by a name or address the certificate lists, or use {} to skip the host name check",
                p.verify_ca_mode()
            ),
            C::Expired
            | C::ExpiredContext { .. }
            | C::NotValidYet
            | C::NotValidYetContext { .. } => format!(
                "server certificate for {host} is expired or not yet valid ({c:?}); renew the server certificate or check this machine's clock"
            ),
            C::Revoked => format!("server certificate for {host} has been revoked"),
            C::InvalidPurpose | C::InvalidPurposeContext { .. } => format!(
                "server certificate for {host} is not meant for TLS servers (extended key usage); issue one with serverAuth"
            ),
            other => format!(
                "server certificate for {host} was rejected ({other:?}); check the server certificate and {}",
                p.ca_setting()
            ),
        },
        rustls::Error::AlertReceived(
            a @ (A::CertificateRequired
            | A::BadCertificate
            | A::UnknownCA
            | A::CertificateUnknown
            | A::UnsupportedCertificate
            | A::CertificateExpired
            | A::CertificateRevoked
            | A::AccessDenied),
        ) => match &p.cert {
            Some((k, v)) => format!(
                "the server at {host} rejected the client certificate {k}={} (TLS alert {a:?}); check that a CA the server trusts (its ssl_ca_file / ssl-ca) signed it and that it has not expired",
                shown(v)
            ),
            None => format!(
                "the server at {host} requires a client certificate (TLS alert {a:?}); pass {}=client.pem and {}=client.key",
                p.cert_key(),
                p.key_key()
            ),
        },
        other => format!("TLS handshake with {host} failed: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(e: Error) -> String {
        match e {
            Error::Tls { reason, .. } => reason,
            other => panic!("expected a TLS error, got {other:?}"),
        }
    }

    #[test]
    fn missing_files_are_named() {
        let p = TlsParams::parse(
            "postgres://u@h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
        )
        .unwrap();
        let r = reason(p.check("postgres://u@h/db").unwrap_err());
        assert!(r.contains("sslrootcert=/nonexistent/ca.pem"), "{r}");
        assert!(r.contains("No such file"), "{r}");

        let p = TlsParams::parse("mysql://u@h/db?ssl-mode=VERIFY_CA&ssl-ca=/nope.pem").unwrap();
        let r = reason(p.check("mysql://u@h/db").unwrap_err());
        assert!(r.contains("ssl-ca=/nope.pem"), "{r}");
    }

    #[test]
    fn cert_and_key_come_together() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("c.pem");
        std::fs::write(&cert, "x").unwrap();
        let url = format!("postgres://u@h/db?sslcert={}", cert.display());
        let r = reason(TlsParams::parse(&url).unwrap().check(&url).unwrap_err());
        assert!(r.contains("without sslkey="), "{r}");
    }

    #[test]
    fn sslpassword_is_refused_without_echoing_it() {
        let url = "postgres://u@h/db?sslpassword=hunter2";
        let e = TlsParams::parse(url)
            .unwrap()
            .check("postgres://u@h/db?sslpassword=***");
        let s = e.unwrap_err().to_string();
        assert!(s.contains("sslpassword is not supported"), "{s}");
        assert!(!s.contains("hunter2"), "{s}");
    }

    #[test]
    fn unknown_issuer_names_the_ca_and_the_fix() {
        let p = TlsParams::parse(
            "postgres://u@127.0.0.1/db?sslmode=verify-full&sslrootcert=/etc/ca.pem",
        )
        .unwrap();
        let r = explain_rustls(
            &p,
            &rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        assert_eq!(
            r,
            "server certificate for 127.0.0.1 is not signed by the CA in sslrootcert=/etc/ca.pem; check sslrootcert or use sslmode=require to skip verification"
        );
        let p = TlsParams::parse("mariadb://u@db.example/db?ssl-mode=VERIFY_IDENTITY").unwrap();
        let r = explain_rustls(
            &p,
            &rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName),
        );
        assert!(
            r.contains("db.example") && r.contains("ssl-mode=VERIFY_CA"),
            "{r}"
        );
    }

    #[test]
    fn server_without_tls() {
        let e = classify(
            "mysql://u@h/db?ssl-mode=REQUIRED",
            &sqlx::Error::Tls("server does not support TLS".into()),
        )
        .unwrap();
        assert!(e.is_usage());
        let s = e.to_string();
        assert!(
            s.contains("does not accept TLS") && s.contains("ssl-mode=REQUIRED"),
            "{s}"
        );
    }
}
