//! TLS for `etcds://` URLs: the client configuration from `cacert=`, `cert=`
//! and `key=`, and handshake failures turned into errors that name the fix.

use etcd_client::{Certificate, Identity, TlsOptions};

use crate::error::{Error, Result};
use crate::store::util::client_tls::{self, ClientTlsFiles, ServerHints};

/// What etcd calls the settings our messages point at.
const HINTS: ServerHints = ServerHints {
    unknown_issuer: " (it must hold the CA that signed the server's --cert-file)",
    client_ca: "etcd's --trusted-ca-file",
};

/// The client TLS configuration: the CA in `cacert=` (else the system's
/// roots), and the client certificate when `cert=` and `key=` are given.
/// Always verifies the server's certificate and host name.
pub(super) fn options(files: &ClientTlsFiles, store: &str) -> Result<TlsOptions> {
    let fail = |reason: String| Error::Tls {
        source: None,
        store: store.to_string(),
        reason,
    };
    // etcd serves gRPC over HTTP/2 on its TLS port whether or not it
    // negotiates ALPN (etcd 3.4 does not always).
    let mut tls = TlsOptions::new().assume_http2(true);
    tls = match files.read_cacert().map_err(fail)? {
        Some(pem) => tls.ca_certificate(Certificate::from_pem(pem)),
        None => tls.with_native_roots(),
    };
    if let Some(id) = files.read_identity().map_err(fail)? {
        tls = tls.identity(Identity::from_pem(id.cert, id.key));
    }
    Ok(tls)
}

/// An [`Error::Tls`] when `e` is a TLS failure; `None` otherwise.
pub(super) fn classify(
    files: &ClientTlsFiles,
    store: &str,
    e: &etcd_client::Error,
) -> Option<Error> {
    let cacert = files.cacert.as_deref();
    let text = chain_text(e);
    let reason = crate::store::util::rustls_cause::find(e)
        .map(|r| client_tls::explain(r, cacert, HINTS))
        .or_else(|| client_tls::explain_text(&text, cacert, HINTS))
        .or_else(|| {
            // What tonic reports when the server hangs up on our hello: a
            // plain-text etcd does exactly that.
            text.contains("tls handshake eof").then(|| {
                "the server closed the connection during the TLS handshake: it does not serve TLS on this port; use etcd:// for a plain etcd, or start etcd with --cert-file, --key-file and https:// client URLs".to_string()
            })
        })?;
    Some(Error::Tls {
        source: None,
        store: store.to_string(),
        reason,
    })
}

/// The error and its sources as one line: tonic keeps the TLS failure in
/// the chain, sometimes only as text.
fn chain_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}
