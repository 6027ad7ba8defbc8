//! TLS for `zks://` URLs: the client configuration from `cacert=`, `cert=`
//! and `key=`. The server's certificate and host name are always verified.

use zookeeper_client::TlsOptions;

use crate::error::{Error, Result};
use crate::store::util::client_tls::ClientTlsFiles;

/// Where Debian (and most Linux distributions) keep the system's CA
/// bundle, used without `cacert=`: the ZooKeeper client takes its
/// roots as PEM text only.
const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The client TLS configuration: the CA in `cacert=` (else the system's
/// bundle), and the client certificate when `cert=` and `key=` are given.
pub(super) fn options(files: &ClientTlsFiles, store: &str) -> Result<TlsOptions> {
    let fail = |reason: String| Error::Tls {
        source: None,
        store: store.to_string(),
        reason,
    };
    crate::store::util::crypto::use_ring_unless_chosen();
    let ca = match files.read_cacert().map_err(fail)? {
        Some(pem) => pem,
        None => std::fs::read(SYSTEM_ROOTS).map_err(|e| {
            fail(format!(
                "no cacert= given, and the system's CA bundle {SYSTEM_ROOTS} cannot be read \
                 ({e}): name the CA that signed the servers' certificates with cacert="
            ))
        })?,
    };
    let pem = |bytes: Vec<u8>, what: &str| {
        String::from_utf8(bytes).map_err(|_| fail(format!("the {what} is not PEM text")))
    };
    let mut tls = TlsOptions::new()
        .with_pem_ca(&pem(ca, "CA file")?)
        .map_err(|e| fail(format!("the CA file holds no usable certificate: {e}")))?;
    if let Some(id) = files.read_identity().map_err(fail)? {
        tls = tls
            .with_pem_identity(
                &pem(id.cert, "client certificate")?,
                &pem(id.key, "client key")?,
            )
            .map_err(|e| fail(format!("the client certificate or key cannot be used: {e}")))?;
    }
    Ok(tls)
}
