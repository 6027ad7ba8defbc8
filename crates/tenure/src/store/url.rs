//! The checks every store URL passes before a driver sees it, and keeping
//! secrets out of the URLs tenure prints.

use crate::error::Result;

/// The checks every store URL passes before a driver sees it: user
/// information without unencoded special characters, and no query parameter
/// the scheme does not take (see the `params` module).
pub(crate) fn check_url(url: &str) -> Result<()> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(());
    };
    let described = redact_url(url);
    super::util::params::check_userinfo(url, &described)?;
    let after_userinfo = super::util::params::userinfo_end(rest).map_or(rest, |at| &rest[at + 1..]);
    if let Some((_, query)) = after_userinfo.split_once('?') {
        let query = query.split_once('#').map_or(query, |(q, _)| q);
        super::util::params::check_known(scheme, query, &described)?;
    }
    Ok(())
}

/// Replaces the password (and any query parameter that looks like a secret) in a
/// URL with `***`, for logs, errors and status output.
///
/// ```
/// assert_eq!(
///     tenure::store::redact_url("postgres://app:s3cret@db:5432/app?sslpassword=x&sslmode=require"),
///     "postgres://app:***@db:5432/app?sslpassword=***&sslmode=require"
/// );
/// assert_eq!(
///     tenure::store::redact_url("mysql://app:s3cret@db:99999/app?password=x"),
///     "mysql://app:***@db:99999/app?***"
/// );
/// ```
pub fn redact_url(url: &str) -> String {
    let masked = mask_userinfo(url);
    let url: &str = &masked;
    if url
        .split_once("://")
        .is_some_and(|(s, _)| s.eq_ignore_ascii_case("etcd") || s.eq_ignore_ascii_case("etcds"))
    {
        // Several comma-separated hosts: not a URL the `url` crate parses.
        return redact_etcd(url);
    }
    if url
        .split_once("://")
        .is_some_and(|(s, _)| s.eq_ignore_ascii_case("zk") || s.eq_ignore_ascii_case("zks"))
    {
        return redact_zk(url);
    }
    let Ok(mut parsed) = url::Url::parse(url) else {
        return redact_unparseable(url);
    };
    if parsed.password().is_some() {
        let _ = parsed.set_password(Some("***"));
    }
    let scheme = parsed.scheme().to_string();
    let secret = |k: &str| !super::util::params::shown(&scheme, k);
    if parsed.query_pairs().any(|(k, _)| secret(&k)) {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(k, v)| {
                let v = if secret(&k) {
                    "***".to_string()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        let query = pairs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&");
        parsed.set_query(Some(&query));
    }
    parsed.to_string()
}

/// The URL with everything between `://` and its last `@` replaced by
/// `user:***` (or `***` when the user name itself holds a character that
/// ends an authority), before any parser reads it: a password with an
/// unencoded `/`, `?`, `#` or `@` would otherwise be read as host, path or
/// query and printed. SQLite paths have no user information and are kept.
fn mask_userinfo(url: &str) -> std::borrow::Cow<'_, str> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.into();
    };
    if scheme.eq_ignore_ascii_case("sqlite") {
        return url.into();
    }
    let Some(at) = super::util::params::userinfo_end(rest) else {
        return url.into();
    };
    let (userinfo, host) = (&rest[..at], &rest[at + 1..]);
    let unsafe_char = |s: &str| s.contains(['/', '?', '#', '@']);
    match userinfo.split_once(':') {
        Some((user, _)) if !unsafe_char(user) => format!("{scheme}://{user}:***@{host}").into(),
        None if !unsafe_char(userinfo) => url.into(),
        _ => format!("{scheme}://***@{host}").into(),
    }
}

/// A URL the `url` crate cannot parse (a port out of range, say): keep the
/// scheme, user, host and path, which show what is wrong, and hide the
/// password and the whole query, which may hold secrets.
fn redact_unparseable(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return match url.split_once(':') {
            Some((scheme, _)) if scheme.chars().all(|c| c.is_ascii_alphanumeric()) => {
                format!("{scheme}:(unparseable URL)")
            }
            _ => "(unparseable URL)".to_string(),
        };
    };
    if !scheme.chars().all(|c| c.is_ascii_alphanumeric()) {
        return "(unparseable URL)".to_string();
    }
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => format!("{userinfo}@{host}"),
        },
        None => authority.to_string(),
    };
    let query = if url.contains('?') { "?***" } else { "" };
    format!("{scheme}://{authority}{path}{query}")
}

/// `etcd://user:pass@h1,h2/...` with the password (and anything after the hosts) hidden.
fn redact_etcd(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "etcd:(unparseable URL)".into();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let authority = match authority.rsplit_once('@') {
        Some((user, hosts)) => match user.split_once(':') {
            Some((name, _)) => format!("{name}:***@{hosts}"),
            None => format!("{user}@{hosts}"),
        },
        None => authority.to_string(),
    };
    let tail = if tail.is_empty() { "" } else { "/..." };
    format!("{scheme}://{authority}{tail}")
}

/// `zk://user:pass@h1,h2/chroot` with the password hidden; the chroot
/// is kept (it names where tenure writes), anything after `?` or `#` is not.
fn redact_zk(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "zk:(unparseable URL)".into();
    };
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, path) = match rest.rsplit_once('@') {
        Some((user, tail)) => {
            let user = match user.split_once(':') {
                Some((name, _)) => format!("{name}:***@"),
                None => format!("{user}@"),
            };
            (user, tail)
        }
        None => (String::new(), rest),
    };
    let query = if url.contains(['?', '#']) { "?***" } else { "" };
    format!("{scheme}://{authority}{path}{query}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction() {
        assert_eq!(redact_url("mysql://root:pw@h/db"), "mysql://root:***@h/db");
        assert_eq!(redact_url("mysql://root@h/db"), "mysql://root@h/db");
        assert_eq!(redact_url("sqlite://tenure.db"), "sqlite://tenure.db");
        assert!(!redact_url("mysql://a:SECRET@@@:::").contains("SECRET"));
        assert_eq!(
            redact_url("etcd://root:s3cret@h1:2379,h2:2379"),
            "etcd://root:***@h1:2379,h2:2379"
        );
        assert_eq!(
            redact_url("etcds://root:s3cret@h1:2379,h2:2379?cacert=/ca.pem"),
            "etcds://root:***@h1:2379,h2:2379/..."
        );
        assert_eq!(redact_url("etcd://h1:2379"), "etcd://h1:2379");
        assert_eq!(
            redact_url("zk://bob:s3cret@h1:2181,h2:2181/app"),
            "zk://bob:***@h1:2181,h2:2181/app"
        );
        assert_eq!(redact_url("zk://h1:2181/a?x=SECRET"), "zk://h1:2181/a?***");
        // A password with an unencoded special character, whatever the parser makes of it.
        for (url, shown) in [
            (
                "postgres://app:Zx9/Qw+8Lk==@127.0.0.1:5432/test",
                "postgres://app:***@127.0.0.1:5432/test",
            ),
            (
                "postgres://postgres:1234/x@127.0.0.1:5432/test",
                "postgres://postgres:***@127.0.0.1:5432/test",
            ),
            ("mysql://root:hu#nt@h/db", "mysql://root:***@h/db"),
            ("redis://:a?b@h:6379/0", "redis://:***@h:6379/0"),
            ("mysql://ro/ot:pw@h/db", "mysql://***@h/db"),
        ] {
            assert_eq!(redact_url(url), shown);
        }
        // Values of parameters a scheme does not know are hidden.
        assert_eq!(
            redact_url("postgres://h/db?pasword=s3cr3t&sslmode=require"),
            "postgres://h/db?pasword=***&sslmode=require"
        );
        assert_eq!(
            redact_url("sqlite:///tmp/a@b.db?mode=rwc"),
            "sqlite:///tmp/a@b.db?mode=rwc"
        );
    }
}
