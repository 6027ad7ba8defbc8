//! Turns a tenure Redis URL into a `redis::Client`: tenure's own parameters
//! (TLS: `cacert`, `cert`, `key`; `durability`) are read here and removed,
//! the rest of the URL is the redis crate's.

use crate::error::{Error, Result};
use crate::store::util::client_tls::ClientTlsFiles;

/// The client for `url`, and what the URL accepts of the server's
/// durability (`durability.rs`).
pub(super) fn build(
    url: &str,
    described: &str,
) -> Result<(redis::Client, super::durability::Accepted)> {
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
    // Named like redis-cli's `--cacert`, `--cert`, `--key`.
    let mut tls = ClientTlsFiles::default();
    let mut durability = None;
    let rest: Vec<(String, String)> = parsed
        .query_pairs()
        .filter_map(|(k, v)| {
            if k == super::durability::PARAM {
                durability = Some(v.into_owned());
                return None;
            }
            tls.take(&k, v.into_owned())
        })
        .collect();
    let accepted = match durability {
        Some(value) => super::durability::Accepted::parse(&value).map_err(bad)?,
        None => Default::default(),
    };
    let tls_asked = tls.any();
    if tls_asked && parsed.scheme() != "rediss" {
        return Err(bad(
            "cacert, cert and key are TLS settings; use rediss:// to connect with TLS".into(),
        ));
    }
    tls.check_pair().map_err(bad)?;
    if rest.is_empty() {
        parsed.set_query(None);
    } else {
        parsed.query_pairs_mut().clear().extend_pairs(rest);
    }
    if parsed.scheme() == "rediss" {
        crate::store::util::crypto::use_ring_unless_chosen();
    }
    let open = |e: redis::RedisError| bad(super::errors::without_secrets(&e.to_string(), url));
    if !tls_asked {
        return Ok((
            redis::Client::open(parsed.as_str()).map_err(open)?,
            accepted,
        ));
    }
    let root_cert = tls.read_cacert().map_err(bad)?;
    let client_tls = tls
        .read_identity()
        .map_err(bad)?
        .map(|id| redis::ClientTlsConfig {
            client_cert: id.cert,
            client_key: id.key,
        });
    let client = redis::Client::build_with_tls(
        parsed.as_str(),
        redis::TlsCertificates {
            client_tls,
            root_cert,
        },
    )
    .map_err(open)?;
    Ok((client, accepted))
}
