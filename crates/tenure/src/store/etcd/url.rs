//! `etcd://` URLs: endpoints, credentials, redaction.

use crate::error::{Error, Result};

/// A parsed `etcd://` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct EtcdUrl {
    pub(super) endpoints: Vec<String>,
    pub(super) user: Option<(String, String)>,
}

fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

pub(super) fn parse_url(url: &str) -> Result<EtcdUrl> {
    let bad = |reason: String| Error::InvalidUrl {
        url: redact(url),
        reason,
    };
    let rest = url
        .split_once("://")
        .filter(|(s, _)| s.eq_ignore_ascii_case("etcd"))
        .map(|(_, r)| r)
        .ok_or_else(|| bad("expected etcd://host:port[,host:port...]".into()))?;
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let user = match userinfo {
        None => None,
        Some(u) => {
            let (name, pass) = u.split_once(':').unwrap_or((u, ""));
            Some((percent_decode(name), percent_decode(pass)))
        }
    };
    let mut endpoints = Vec::new();
    for host in hosts.split(',') {
        if host.is_empty() {
            return Err(bad(
                "empty host; expected etcd://host:port[,host:port...]".into()
            ));
        }
        let with_port = match host.rsplit_once(':') {
            Some((_, port)) if !host.ends_with(']') => {
                port.parse::<u16>()
                    .map_err(|_| bad(format!("bad port in {host:?}")))?;
                host.to_string()
            }
            _ => format!("{host}:2379"),
        };
        endpoints.push(format!("http://{with_port}"));
    }
    Ok(EtcdUrl { endpoints, user })
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
        let u = parse_url("etcd://root:p%40ss@h:2379/x").unwrap();
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
    }
}
