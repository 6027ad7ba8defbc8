//! Choosing a store by URL.

use std::sync::Arc;

use super::options::StoreOptions;
use super::url::{check_url, redact_url};
use super::DynStore;
use crate::error::{Error, Result};

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
        ("zks", cfg!(feature = "zookeeper")),
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
        "zk" | "zks" => Some("zookeeper"),
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
/// | `zks://h1:2281,h2:2281/chroot?cacert=ca.pem&cert=c.pem&key=c.key` | ZooKeeper over TLS (its `secureClientPort`) |
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

fn schemes_hint() -> String {
    let list: Vec<&str> = supported_schemes()
        .into_iter()
        .filter(|(_, on)| *on)
        .map(|(s, _)| s)
        .collect();
    format!("supported: {} (e.g. sqlite://tenure.db)", list.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

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
