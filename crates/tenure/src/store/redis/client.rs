//! Turns a tenure Redis URL into a `redis::Client`: tenure's own TLS
//! parameters (`cacert`, `cert`, `key`) are read here and removed, the rest of
//! the URL is the redis crate's.

use crate::error::{Error, Result};

/// Query parameters tenure reads (named like redis-cli's `--cacert`, `--cert`, `--key`).
const TLS_PARAMS: [&str; 3] = ["cacert", "cert", "key"];

pub(super) fn build(url: &str, described: &str) -> Result<redis::Client> {
    let bad = |reason: String| Error::InvalidUrl {
        url: described.to_string(),
        reason,
    };
    let mut parsed = url::Url::parse(url).map_err(|e| {
        bad(format!(
            "{e}; expected redis://[:password@]host[:port][/db] or rediss://... for TLS"
        ))
    })?;
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("no host; expected redis://host[:port][/db]".into()));
    }
    if let Some(db) = parsed.path().strip_prefix('/').filter(|p| !p.is_empty()) {
        if db.parse::<u32>().is_err() {
            return Err(bad(format!(
                "the database {db:?} is not a number; Redis databases are numbered (redis://host/0)"
            )));
        }
    }
    let mut tls: [Option<String>; 3] = Default::default();
    let mut rest = Vec::new();
    for (k, v) in parsed.query_pairs() {
        match TLS_PARAMS.iter().position(|p| *p == k) {
            Some(i) => tls[i] = Some(v.into_owned()),
            None => rest.push((k.into_owned(), v.into_owned())),
        }
    }
    let [cacert, cert, key] = tls;
    let tls_asked = cacert.is_some() || cert.is_some() || key.is_some();
    if tls_asked && parsed.scheme() != "rediss" {
        return Err(bad(
            "cacert, cert and key are TLS settings; use rediss:// to connect with TLS".into(),
        ));
    }
    if cert.is_some() != key.is_some() {
        return Err(bad(
            "a client certificate needs both cert=<PEM file> and key=<PEM file>".into(),
        ));
    }
    if rest.is_empty() {
        parsed.set_query(None);
    } else {
        parsed.query_pairs_mut().clear().extend_pairs(rest);
    }
    if parsed.scheme() == "rediss" {
        // rustls needs one process-wide crypto provider; ring is the one we
        // build. Installing fails harmlessly if one is installed already.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let open = |e: redis::RedisError| bad(super::errors::without_secrets(&e.to_string(), url));
    if !tls_asked {
        return redis::Client::open(parsed.as_str()).map_err(open);
    }
    let read = |what: &str, path: &str| -> Result<Vec<u8>> {
        std::fs::read(path).map_err(|e| {
            bad(format!(
                "cannot read the {what} file {path:?}: {e}; give a readable PEM file"
            ))
        })
    };
    let root_cert = cacert
        .as_deref()
        .map(|p| read("CA (cacert=)", p))
        .transpose()?;
    let client_tls = match (cert.as_deref(), key.as_deref()) {
        (Some(c), Some(k)) => Some(redis::ClientTlsConfig {
            client_cert: read("client certificate (cert=)", c)?,
            client_key: read("client key (key=)", k)?,
        }),
        _ => None,
    };
    redis::Client::build_with_tls(
        parsed.as_str(),
        redis::TlsCertificates {
            client_tls,
            root_cert,
        },
    )
    .map_err(open)
}
