//! Client TLS named the way redis-cli and etcdctl name it (`cacert=`, `cert=`,
//! `key=` in the URL), shared by the Redis, etcd and ZooKeeper stores:
//! reading the PEM files with errors that name the parameter, and
//! explaining rustls failures.

/// The TLS files a URL names (paths as given).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ClientTlsFiles {
    /// `cacert=`: the CA(s) to trust instead of the system's roots.
    pub(crate) cacert: Option<String>,
    /// `cert=`: the client certificate.
    pub(crate) cert: Option<String>,
    /// `key=`: the client certificate's private key.
    pub(crate) key: Option<String>,
}

impl ClientTlsFiles {
    /// The files a URL's `query` names (percent-decoded). Any other
    /// parameter is refused by [`check_known`](super::params::check_known)
    /// for `scheme` (naming it and the closest known one, never its value).
    #[cfg(any(feature = "etcd", feature = "zookeeper"))]
    pub(crate) fn from_query(query: &str, scheme: &str, described: &str) -> crate::Result<Self> {
        use super::percent::decode;
        let mut files = Self::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if files.take(&decode(k), decode(v)).is_some() {
                super::params::check_known(scheme, query, described)?;
            }
        }
        Ok(files)
    }

    /// Takes `cacert`, `cert` or `key`; gives the pair back for any other name.
    pub(crate) fn take(&mut self, name: &str, value: String) -> Option<(String, String)> {
        match name {
            "cacert" => self.cacert = Some(value),
            "cert" => self.cert = Some(value),
            "key" => self.key = Some(value),
            _ => return Some((name.to_string(), value)),
        }
        None
    }

    /// True when the URL names any TLS file.
    pub(crate) fn any(&self) -> bool {
        self.cacert.is_some() || self.cert.is_some() || self.key.is_some()
    }

    /// A client certificate comes with its key: the reason when not.
    pub(crate) fn check_pair(&self) -> Result<(), String> {
        if self.cert.is_some() != self.key.is_some() {
            return Err(
                "a client certificate needs both cert=<PEM file> and key=<PEM file>".into(),
            );
        }
        Ok(())
    }

    /// The CA file's contents, if one is named.
    pub(crate) fn read_cacert(&self) -> Result<Option<Vec<u8>>, String> {
        self.cacert
            .as_deref()
            .map(|p| super::ca_file::read_ca_file("cacert", p))
            .transpose()
    }

    /// The client certificate and key, if named.
    pub(crate) fn read_identity(&self) -> Result<Option<ClientIdentity>, String> {
        match (self.cert.as_deref(), self.key.as_deref()) {
            (Some(c), Some(k)) => Ok(Some(ClientIdentity {
                cert: read("client certificate (cert=)", c)?,
                key: read("client key (key=)", k)?,
            })),
            _ => Ok(None),
        }
    }
}

/// A client certificate and its private key, PEM.
pub(crate) struct ClientIdentity {
    pub(crate) cert: Vec<u8>,
    pub(crate) key: Vec<u8>,
}

fn read(what: &str, path: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path)
        .map_err(|e| format!("cannot read the {what} file {path:?}: {e}; give a readable PEM file"))
}

/// What the server side calls the settings a message points at.
#[derive(Clone, Copy, Debug)]
// The ZooKeeper client keeps no handshake error to explain.
#[cfg_attr(not(any(feature = "redis", feature = "etcd")), allow(dead_code))]
pub(crate) struct ServerHints {
    /// Appended to "check cacert=": how to skip verification, or where the
    /// right CA is found.
    pub(crate) unknown_issuer: &'static str,
    /// The server's setting for the CA it checks client certificates against.
    pub(crate) client_ca: &'static str,
}

/// Explains a rustls failure, naming the URL parameter that fixes it.
// The ZooKeeper client keeps no handshake error to explain.
#[cfg_attr(not(any(feature = "redis", feature = "etcd")), allow(dead_code))]
pub(crate) fn explain(e: &rustls::Error, cacert: Option<&str>, hints: ServerHints) -> String {
    use rustls::{AlertDescription as A, CertificateError as C};
    let skip = hints.unknown_issuer;
    match e {
        rustls::Error::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => match cacert {
            Some(ca) => format!(
                "the server's certificate is not signed by the CA in cacert={ca}; check cacert={skip}"
            ),
            None => format!("the server's certificate is not signed by a CA this machine trusts; pass cacert=/path/to/ca.pem{skip}"),
        },
        rustls::Error::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
            "the server's certificate is not valid for the host name in the URL; connect by a name or address the certificate lists".into()
        }
        rustls::Error::InvalidCertificate(c) => {
            format!("the server's certificate was rejected ({c:?}); check it and cacert=")
        }
        rustls::Error::AlertReceived(
            a @ (A::CertificateRequired | A::BadCertificate | A::UnknownCA | A::CertificateUnknown),
        ) => format!(
            "the server rejected or requires a client certificate (TLS alert {a:?}); pass cert=client.pem&key=client.key signed by a CA the server trusts ({})",
            hints.client_ca
        ),
        other => format!("TLS handshake failed: {other}"),
    }
}

/// Some clients keep only the text of a handshake failure (rustls's Display
/// of the error); recognises those.
// The ZooKeeper client keeps no handshake error to explain.
#[cfg_attr(not(any(feature = "redis", feature = "etcd")), allow(dead_code))]
pub(crate) fn explain_text(text: &str, cacert: Option<&str>, hints: ServerHints) -> Option<String> {
    use rustls::{AlertDescription as A, CertificateError as C};
    if let Some(cert) = text.split("invalid peer certificate: ").nth(1) {
        let error = match cert.split_whitespace().next().unwrap_or_default() {
            c if c.starts_with("UnknownIssuer") => C::UnknownIssuer,
            c if c.starts_with("BadSignature") => C::BadSignature,
            c if c.starts_with("NotValidForName") => C::NotValidForName,
            c if c.starts_with("Expired") => C::Expired,
            _ => C::Other(rustls::OtherError(std::sync::Arc::new(
                std::io::Error::other(cert.to_string()),
            ))),
        };
        return Some(explain(
            &rustls::Error::InvalidCertificate(error),
            cacert,
            hints,
        ));
    }
    let alert = text.split("received fatal alert: ").nth(1)?;
    let alert = match alert.split_whitespace().next().unwrap_or_default() {
        a if a.starts_with("CertificateRequired") => A::CertificateRequired,
        a if a.starts_with("BadCertificate") => A::BadCertificate,
        a if a.starts_with("UnknownCA") => A::UnknownCA,
        a if a.starts_with("CertificateUnknown") => A::CertificateUnknown,
        _ => return Some(format!("TLS handshake failed: {text}")),
    };
    Some(explain(&rustls::Error::AlertReceived(alert), cacert, hints))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HINTS: ServerHints = ServerHints {
        unknown_issuer: " (the CA that signed the server's certificate)",
        client_ca: "its client CA",
    };

    #[test]
    fn files_and_pairs() {
        let mut f = ClientTlsFiles::default();
        assert_eq!(f.take("cacert", "/ca.pem".into()), None);
        assert_eq!(f.take("x", "y".into()), Some(("x".into(), "y".into())));
        assert!(f.any());
        assert!(f.check_pair().is_ok());
        f.take("cert", "/c.pem".into());
        assert!(f.check_pair().unwrap_err().contains("key="));
        let e = f.read_cacert().unwrap_err();
        assert!(e.contains("cannot read cacert=/ca.pem"), "{e}");
    }

    #[test]
    fn texts_are_recognised() {
        let r = explain_text(
            "transport error: invalid peer certificate: UnknownIssuer",
            Some("/ca.pem"),
            HINTS,
        )
        .unwrap();
        assert!(r.contains("not signed by the CA in cacert=/ca.pem"), "{r}");
        let r = explain_text("received fatal alert: CertificateRequired", None, HINTS).unwrap();
        assert!(r.contains("cert=client.pem&key=client.key"), "{r}");
        assert_eq!(explain_text("connection refused", None, HINTS), None);
    }
}
