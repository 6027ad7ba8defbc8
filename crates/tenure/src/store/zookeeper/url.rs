//! `zk://[user:password@]host:port[,host:port...][/chroot]`, and
//! `zks://...[?cacert=ca.pem&cert=c.pem&key=c.key]` over TLS.

use crate::error::{Error, Result};
use crate::store::redact_url;
use crate::store::util::client_tls::ClientTlsFiles;
use crate::store::util::percent;

/// A parsed ZooKeeper URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ZkUrl {
    /// `host:port,host:port[/chroot]`, as the client takes it.
    pub(super) connect: String,
    /// The chroot, `/` if none.
    pub(super) chroot: String,
    /// `user:password` for digest authentication.
    pub(super) digest: Option<String>,
    /// `Some` for `zks://`: TLS, with these files (none: the system's roots).
    pub(super) tls: Option<ClientTlsFiles>,
}

pub(super) fn parse(url: &str) -> Result<ZkUrl> {
    let bad = |reason: String| Error::InvalidUrl {
        url: redact_url(url),
        reason: format!(
            "{reason}; expected zk://host:2181[,host:2181...][/chroot] \
             (zks://host:2281/chroot?cacert=ca.pem for TLS)"
        ),
    };
    let (tls, rest) = match url.split_once("://") {
        Some((s, rest)) if s.eq_ignore_ascii_case("zk") => (false, rest),
        Some((s, rest)) if s.eq_ignore_ascii_case("zks") => (true, rest),
        _ => return Err(bad("not a zk:// or zks:// URL".into())),
    };
    if rest.contains('#') {
        return Err(bad("ZooKeeper URLs take no fragment".into()));
    }
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    // Named like etcdctl's and redis-cli's options.
    let parsed = ClientTlsFiles::from_query(query, "zks", &redact_url(url));
    let files = match parsed {
        _ if tls => parsed?,
        Ok(files) if files.any() => {
            return Err(bad(
                "cacert, cert and key are TLS settings; use zks:// to connect with TLS".into(),
            ))
        }
        _ if !query.is_empty() => return Err(bad("zk:// URLs take no query parameters".into())),
        _ => ClientTlsFiles::default(),
    };
    files.check_pair().map_err(bad)?;
    let (userinfo, rest) = match rest.rsplit_once('@') {
        Some((u, r)) => (Some(u), r),
        None => (None, rest),
    };
    let digest = match userinfo {
        None => None,
        Some(u) => match u.split_once(':') {
            Some((user, pass)) if !user.is_empty() => Some(format!(
                "{}:{}",
                percent::decode(user),
                percent::decode(pass)
            )),
            _ => return Err(bad("credentials must be user:password".into())),
        },
    };
    let (hosts, chroot) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if hosts.is_empty() {
        return Err(bad("no host".into()));
    }
    for h in hosts.split(',') {
        let Some((host, port)) = h.rsplit_once(':') else {
            return Err(bad(format!("{h:?} has no port")));
        };
        if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(bad(format!("{h:?} is not host:port")));
        }
    }
    let chroot = chroot.trim_end_matches('/');
    if chroot
        .split('/')
        .skip(1)
        .any(|s| s.is_empty() || s == "." || s == "..")
    {
        return Err(bad(format!("chroot {chroot:?} is not a valid znode path")));
    }
    let connect = format!("{hosts}{chroot}");
    Ok(ZkUrl {
        connect,
        chroot: if chroot.is_empty() {
            "/".into()
        } else {
            chroot.into()
        },
        digest,
        tls: tls.then_some(files),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = parse("zk://h1:2181,h2:2182/app/leader").unwrap();
        assert_eq!(u.connect, "h1:2181,h2:2182/app/leader");
        assert_eq!(u.chroot, "/app/leader");
        assert_eq!(u.digest, None);
        let u = parse("zk://bob:s%40cret@h1:2181").unwrap();
        assert_eq!(u.digest.as_deref(), Some("bob:s@cret"));
        assert_eq!(u.chroot, "/");
        for bad in [
            "zk://",
            "zk://h1",
            "zk://h1:x",
            "zk://h:1//a",
            "zk://h:1?x=1",
            "zk://a:SECRET@h1",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.is_usage(), "{bad}: {e}");
            assert!(!e.to_string().contains("SECRET"), "{e}");
        }
    }

    #[test]
    fn tls_urls() {
        let u = parse("zks://h1:2281,h2:2281/app?cacert=/ca.pem&cert=/c.pem&key=/c.key").unwrap();
        assert_eq!(u.connect, "h1:2281,h2:2281/app");
        assert_eq!(
            u.tls,
            Some(ClientTlsFiles {
                cacert: Some("/ca.pem".into()),
                cert: Some("/c.pem".into()),
                key: Some("/c.key".into()),
            })
        );
        assert_eq!(parse("ZKS://h:2281").unwrap().tls, Some(Default::default()));
        assert_eq!(parse("zk://h:2181").unwrap().tls, None);
        let e = parse("zk://h:2181?cacert=/ca.pem").unwrap_err();
        assert!(e.is_usage() && e.to_string().contains("zks://"), "{e}");
        let e = parse("zks://h:2281?cacert=/ca.pem&cret=/c.pem").unwrap_err();
        assert!(e.is_usage() && e.to_string().contains("cret"), "{e}");
        let e = parse("zks://h:2281?cert=/c.pem").unwrap_err();
        assert!(e.is_usage(), "{e}");
        assert_eq!(
            redact_url("zks://bob:s3cret@h:2281/app?cacert=/ca.pem"),
            "zks://bob:***@h:2281/app?***"
        );
    }
}
