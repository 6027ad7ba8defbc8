//! `zk://[user:password@]host:port[,host:port...][/chroot]`.

use crate::error::{Error, Result};
use crate::store::redact_url;
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
}

pub(super) fn parse(url: &str) -> Result<ZkUrl> {
    let bad = |reason: String| Error::InvalidUrl {
        url: redact_url(url),
        reason: format!("{reason}; expected zk://host:2181[,host:2181...][/chroot]"),
    };
    let rest = match url.split_once("://") {
        Some((s, rest)) if s.eq_ignore_ascii_case("zk") => rest,
        _ => return Err(bad("not a zk:// URL".into())),
    };
    if rest.contains(['?', '#']) {
        return Err(bad("zk:// URLs take no query parameters".into()));
    }
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
}
