//! `etcd://` and `etcds://` URLs: endpoints, credentials, TLS files, redaction.

use crate::error::{Error, Result};
use crate::store::util::client_tls::ClientTlsFiles;
use crate::store::util::percent;

const EXPECTED: &str = "expected etcd://host:port[,host:port...] (etcd://user:password@host:port with authentication, etcds://...?cacert=ca.pem for TLS)";

/// A parsed `etcd://` or `etcds://` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct EtcdUrl {
    /// `http://host:port` or, with TLS, `https://host:port`.
    pub(super) endpoints: Vec<String>,
    pub(super) user: Option<(String, String)>,
    /// `Some` for `etcds://` (possibly with no files: the system's roots).
    pub(super) tls: Option<ClientTlsFiles>,
}

pub(super) fn parse_url(url: &str) -> Result<EtcdUrl> {
    let bad = |reason: String| Error::InvalidUrl {
        url: redact(url),
        reason,
    };
    let (scheme, rest) = url.split_once("://").ok_or_else(|| bad(EXPECTED.into()))?;
    let tls_scheme = if scheme.eq_ignore_ascii_case("etcds") {
        true
    } else if scheme.eq_ignore_ascii_case("etcd") {
        false
    } else {
        return Err(bad(EXPECTED.into()));
    };
    crate::store::util::params::check_userinfo(url, &redact(url))?;
    let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = before_query
        .split_once('/')
        .map_or((before_query, ""), |(a, p)| (a, p));
    if !path.is_empty() {
        return Err(bad(format!(
            "etcd URLs take no path (here /{}); tenure's keys start with the table prefix (--table-prefix, default tenure_), so give a prefix of your own there",
            path.chars().filter(|c| !c.is_control()).take(64).collect::<String>()
        )));
    }
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let user = match userinfo {
        None => None,
        Some(u) => {
            let (name, pass) = u.split_once(':').unwrap_or((u, ""));
            Some((percent::decode(name), percent::decode(pass)))
        }
    };
    // Named like etcdctl's `--cacert`, `--cert`, `--key` (and redis-cli's).
    let scheme = if tls_scheme { "etcds" } else { "etcd" };
    let files = ClientTlsFiles::from_query(query, scheme, &redact(url))?;
    if files.any() && !tls_scheme {
        return Err(bad(
            "cacert, cert and key are TLS settings; use etcds:// to connect with TLS".into(),
        ));
    }
    files.check_pair().map_err(bad)?;
    let http = if tls_scheme { "https" } else { "http" };
    let mut endpoints = Vec::new();
    for host in hosts.split(',') {
        if host.is_empty() {
            return Err(bad(format!("empty host; {EXPECTED}")));
        }
        let with_port = match host.rsplit_once(':') {
            Some(("", _)) => return Err(bad(format!("empty host in {host:?}; {EXPECTED}"))),
            Some((_, port)) if !host.ends_with(']') => {
                port.parse::<u16>()
                    .map_err(|_| bad(format!("bad port in {host:?}")))?;
                host.to_string()
            }
            _ => format!("{host}:2379"),
        };
        endpoints.push(format!("{http}://{with_port}"));
    }
    Ok(EtcdUrl {
        endpoints,
        user,
        tls: tls_scheme.then_some(files),
    })
}

/// The `host:port` of an endpoint URL.
pub(super) fn address(endpoint: &str) -> &str {
    endpoint
        .split_once("://")
        .map_or(endpoint, |(_, address)| address)
}

pub(super) fn redact(url: &str) -> String {
    crate::store::redact_url(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = parse_url("etcd://a:1,b,c:3").unwrap();
        assert_eq!(u.endpoints, ["http://a:1", "http://b:2379", "http://c:3"]);
        assert_eq!(u.user, None);
        assert_eq!(u.tls, None);
        let u = parse_url("etcd://root:p%40ss@h:2379/").unwrap();
        assert_eq!(u.user, Some(("root".into(), "p@ss".into())));
        assert!(parse_url("etcd://h:x").is_err());
        assert!(parse_url("etcd://").is_err());
        assert_eq!(
            redact("etcd://root:secret@h:1,g:2"),
            "etcd://root:***@h:1,g:2"
        );
        assert!(!parse_url("etcd://u:SECRET@h:bad")
            .unwrap_err()
            .to_string()
            .contains("SECRET"));
        assert_eq!(address("https://h:1"), "h:1");
        let e = parse_url("etcd://h:2379/app").unwrap_err();
        assert!(e.is_usage() && e.to_string().contains("no path"), "{e}");
        let e = parse_url("etcd://:2379").unwrap_err();
        assert!(e.is_usage() && e.to_string().contains("empty host"), "{e}");
        let e = parse_url("etcd://u:pa/ss@h:2379").unwrap_err();
        assert!(
            e.to_string().contains("%2F") && !e.to_string().contains("pa/ss"),
            "{e}"
        );
    }

    #[test]
    fn tls_urls() {
        let u = parse_url("etcds://u:pw@a:1,b?cacert=/ca.pem&cert=/c.pem&key=/c.key").unwrap();
        assert_eq!(u.endpoints, ["https://a:1", "https://b:2379"]);
        assert_eq!(
            u.tls,
            Some(ClientTlsFiles {
                cacert: Some("/ca.pem".into()),
                cert: Some("/c.pem".into()),
                key: Some("/c.key".into()),
            })
        );
        assert_eq!(
            parse_url("ETCDS://h").unwrap().tls,
            Some(Default::default())
        );
        let e = parse_url("etcd://h?cacert=/ca.pem")
            .unwrap_err()
            .to_string();
        assert!(e.contains("use etcds://"), "{e}");
        let e = parse_url("etcds://h?cert=/c.pem").unwrap_err().to_string();
        assert!(e.contains("key="), "{e}");
        let e = parse_url("etcds://u:SECRET@h?sslmode=require")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown parameter \"sslmode\""), "{e}");
        let e = parse_url("etcds://h?cacrt=/ca.pem")
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean \"cacert\"?"), "{e}");
        assert!(!e.contains("SECRET"), "{e}");
    }
}
