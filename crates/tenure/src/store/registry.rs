//! Choosing a store by URL, and keeping secrets out of URLs we print.

use std::sync::Arc;
use std::time::Duration;

use super::DynStore;
use crate::error::{Error, Result};

/// Settings shared by the stores [`connect`] can open.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct StoreOptions {
    /// Prefix of the SQL table names (`<prefix>leases`, `<prefix>schema`); an identifier.
    pub table_prefix: String,
    /// Create missing tables on first use. Turn off where a DBA owns the schema.
    pub auto_migrate: bool,
    /// How long to wait for a connection before reporting the store unavailable.
    pub connect_timeout: Duration,
    /// Connections per process.
    pub max_connections: u32,
    /// Terms kept in the history table per election (older ones are deleted).
    pub history_retention: u64,
    /// How often a store whose push channel can be tested end to end
    /// (PostgreSQL LISTEN) checks that it still delivers: it notifies itself
    /// through another connection, and a notification that does not arrive
    /// within [`PUSH_PROBE_TIMEOUT`](Self::PUSH_PROBE_TIMEOUT) marks the
    /// channel down (followers then read every tenth of a TTL) and reopens it.
    /// Also checked each time the channel opens. A connection that stays open
    /// but delivers nothing (half-open, or behind a pooler that drops
    /// notifications) is otherwise never noticed.
    pub push_probe_period: Duration,
}

impl StoreOptions {
    /// The default table prefix.
    pub const DEFAULT_TABLE_PREFIX: &'static str = "tenure_";

    /// The default [`push_probe_period`](Self::push_probe_period): one
    /// statement per store per five minutes.
    pub const DEFAULT_PUSH_PROBE_PERIOD: Duration = Duration::from_secs(300);

    /// How long a push probe's notification may take to arrive.
    pub const PUSH_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

    /// Sets the table prefix.
    pub fn with_table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.table_prefix = prefix.into();
        self
    }

    /// Sets whether missing tables are created.
    pub fn with_auto_migrate(mut self, on: bool) -> Self {
        self.auto_migrate = on;
        self
    }

    /// Sets how many terms of history are kept per election (at least 1).
    pub fn with_history_retention(mut self, terms: u64) -> Self {
        self.history_retention = terms.max(1);
        self
    }

    /// Sets how often the push channel is checked end to end (at least
    /// [`PUSH_PROBE_TIMEOUT`](Self::PUSH_PROBE_TIMEOUT)).
    ///
    /// ```
    /// use std::time::Duration;
    /// let options = tenure::store::StoreOptions::default()
    ///     .with_push_probe_period(Duration::from_secs(60));
    /// assert_eq!(options.push_probe_period, Duration::from_secs(60));
    /// ```
    pub fn with_push_probe_period(mut self, period: Duration) -> Self {
        self.push_probe_period = period.max(Self::PUSH_PROBE_TIMEOUT);
        self
    }

    /// Sets the connection timeout.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            table_prefix: Self::DEFAULT_TABLE_PREFIX.to_string(),
            auto_migrate: true,
            connect_timeout: Duration::from_secs(5),
            max_connections: 4,
            history_retention: 1000,
            push_probe_period: Self::DEFAULT_PUSH_PROBE_PERIOD,
        }
    }
}

/// The URL schemes [`connect`] knows, and whether this build includes each.
pub fn supported_schemes() -> Vec<(&'static str, bool)> {
    vec![
        ("sqlite", cfg!(feature = "sqlite")),
        ("mysql", cfg!(feature = "mysql")),
        ("mariadb", cfg!(feature = "mysql")),
        ("postgres", cfg!(feature = "postgres")),
        ("postgresql", cfg!(feature = "postgres")),
        ("redis", cfg!(feature = "redis")),
        ("rediss", cfg!(feature = "redis")),
        ("etcd", cfg!(feature = "etcd")),
        ("etcds", cfg!(feature = "etcd")),
        ("zk", cfg!(feature = "zookeeper")),
        ("memory", true),
    ]
}

fn scheme_feature(scheme: &str) -> Option<&'static str> {
    match scheme {
        "sqlite" => Some("sqlite"),
        "mysql" | "mariadb" => Some("mysql"),
        "postgres" | "postgresql" => Some("postgres"),
        "redis" | "rediss" => Some("redis"),
        "etcd" | "etcds" => Some("etcd"),
        "zk" => Some("zookeeper"),
        _ => None,
    }
}

/// Opens the store a URL names, checking (and by default creating) its schema.
///
/// | URL | store |
/// |---|---|
/// | `sqlite://tenure.db`, `sqlite:///var/lib/app/tenure.db` | SQLite file (created if missing) |
/// | `mysql://user:pass@host/db`, `mariadb://...` | MySQL 8 / MariaDB 10.5+ |
/// | `postgres://user:pass@host/db`, `postgresql://...` | PostgreSQL 12+ |
/// | `redis://[:pass@]host[:port][/db]`, `rediss://...?cacert=ca.pem` | Redis 5+ (Lua scripts, pub/sub) |
/// | `etcd://host:2379`, `etcd://user:pass@h1:2379,h2:2379,h3:2379` | etcd v3 cluster (leases are whole seconds) |
/// | `etcds://user:pass@h1:2379,h2:2379?cacert=ca.pem&cert=c.pem&key=c.key` | etcd v3 over TLS |
/// | `zk://h1:2181,h2:2181,h3:2181/chroot`, `zk://user:pass@h1:2181` | ZooKeeper 3.6+ ensemble (the chroot must exist) |
/// | `memory://` | a new in-process store (tests, demos; not shared between processes) |
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// let store = tenure::store::connect("memory://", &Default::default()).await?;
/// let err = tenure::store::connect("ftp://x", &Default::default()).await.unwrap_err();
/// assert!(err.to_string().contains("supported: sqlite"));
/// # Ok(()) }
/// ```
pub async fn connect(url: &str, options: &StoreOptions) -> Result<DynStore> {
    let scheme = url
        .split_once(':')
        .map(|(s, _)| s.to_ascii_lowercase())
        .ok_or_else(|| Error::InvalidUrl {
            url: redact_url(url),
            reason: format!("missing scheme; {}", schemes_hint()),
        })?;
    if scheme == "memory" {
        return Ok(Arc::new(super::memory::MemoryStore::new()));
    }
    check_url(url)?;
    let Some(feature) = scheme_feature(&scheme) else {
        return Err(Error::InvalidUrl {
            url: redact_url(url),
            reason: format!("unknown scheme {scheme:?}; {}", schemes_hint()),
        });
    };
    let built = supported_schemes()
        .iter()
        .any(|(s, on)| *s == scheme && *on);
    if !built {
        return Err(Error::InvalidUrl {
            url: redact_url(url),
            reason: format!("this build of tenure lacks the `{feature}` cargo feature"),
        });
    }
    if feature == "redis" {
        return connect_redis(url, options).await;
    }
    if feature == "etcd" {
        return connect_etcd(url, options).await;
    }
    if feature == "zookeeper" {
        return connect_zookeeper(url, options).await;
    }
    connect_sql(url, options).await
}

#[cfg(feature = "redis")]
async fn connect_redis(url: &str, options: &StoreOptions) -> Result<DynStore> {
    Ok(Arc::new(
        super::redis::RedisStore::connect(url, options).await?,
    ))
}

#[cfg(not(feature = "redis"))]
async fn connect_redis(url: &str, _options: &StoreOptions) -> Result<DynStore> {
    Err(Error::InvalidUrl {
        url: redact_url(url),
        reason: "this build of tenure lacks the `redis` cargo feature".into(),
    })
}

#[cfg(feature = "etcd")]
async fn connect_etcd(url: &str, options: &StoreOptions) -> Result<DynStore> {
    Ok(Arc::new(
        super::etcd::EtcdStore::connect(url, options).await?,
    ))
}

#[cfg(not(feature = "etcd"))]
async fn connect_etcd(url: &str, _options: &StoreOptions) -> Result<DynStore> {
    Err(Error::InvalidUrl {
        url: redact_url(url),
        reason: "this build of tenure lacks the `etcd` cargo feature".into(),
    })
}

#[cfg(feature = "zookeeper")]
async fn connect_zookeeper(url: &str, options: &StoreOptions) -> Result<DynStore> {
    Ok(Arc::new(
        super::zookeeper::ZkStore::connect(url, options).await?,
    ))
}

#[cfg(not(feature = "zookeeper"))]
async fn connect_zookeeper(url: &str, _options: &StoreOptions) -> Result<DynStore> {
    Err(Error::InvalidUrl {
        url: redact_url(url),
        reason: "this build of tenure lacks the `zookeeper` cargo feature".into(),
    })
}

#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
async fn connect_sql(url: &str, options: &StoreOptions) -> Result<DynStore> {
    Ok(Arc::new(super::sql::SqlStore::connect(url, options).await?))
}

#[cfg(not(any(feature = "sqlite", feature = "mysql", feature = "postgres")))]
async fn connect_sql(url: &str, _options: &StoreOptions) -> Result<DynStore> {
    Err(Error::InvalidUrl {
        url: redact_url(url),
        reason: "this build of tenure has no SQL store features".into(),
    })
}

/// The checks every store URL passes before a driver sees it: user
/// information without unencoded special characters, and no query parameter
/// the scheme does not take (see the `params` module).
pub(crate) fn check_url(url: &str) -> Result<()> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(());
    };
    let described = redact_url(url);
    super::params::check_userinfo(url, &described)?;
    let after_userinfo = super::params::userinfo_end(rest).map_or(rest, |at| &rest[at + 1..]);
    if let Some((_, query)) = after_userinfo.split_once('?') {
        let query = query.split_once('#').map_or(query, |(q, _)| q);
        super::params::check_known(scheme, query, &described)?;
    }
    Ok(())
}

fn schemes_hint() -> String {
    let list: Vec<&str> = supported_schemes()
        .into_iter()
        .filter(|(_, on)| *on)
        .map(|(s, _)| s)
        .collect();
    format!("supported: {} (e.g. sqlite://tenure.db)", list.join(", "))
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
        .is_some_and(|(s, _)| s.eq_ignore_ascii_case("zk"))
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
    let secret = |k: &str| !super::params::shown(&scheme, k);
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
    let Some(at) = super::params::userinfo_end(rest) else {
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

    #[tokio::test]
    async fn unknown_scheme_lists_supported() {
        let e = connect("oracle://x", &StoreOptions::default())
            .await
            .unwrap_err();
        let s = e.to_string();
        assert!(s.contains("unknown scheme \"oracle\""), "{s}");
        assert!(s.contains("sqlite"), "{s}");
        assert!(e.is_usage());
    }
}
