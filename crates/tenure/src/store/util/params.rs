//! The query parameters each store URL takes, the check that rejects any
//! other (a misspelt `ssl-mode` would otherwise silently connect without
//! verification), and the user-info check that runs before a URL is parsed.
//!
//! The lists hold every parameter the driver itself reads from a URL (sqlx's
//! `MySqlConnectOptions` and `PgConnectOptions`, the redis crate) and
//! tenure's own, so a parameter the driver would ignore or only warn about
//! (quoting its value in the log) is refused before the driver sees it.

use crate::error::{Error, Result};

/// One known parameter: its name and whether its value is a secret (hidden
/// in every message).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Param {
    pub(crate) name: &'static str,
    pub(crate) secret: bool,
}

const fn p(name: &'static str) -> Param {
    Param {
        name,
        secret: false,
    }
}

const fn secret(name: &'static str) -> Param {
    Param { name, secret: true }
}

/// PostgreSQL: what sqlx 0.8 reads (`options[NAME]` too, see [`known`]),
/// and `sslpassword`, which tenure refuses with its own message.
const POSTGRES: &[Param] = &[
    p("sslmode"),
    p("ssl-mode"),
    p("sslrootcert"),
    p("ssl-root-cert"),
    p("ssl-ca"),
    p("sslcert"),
    p("ssl-cert"),
    p("sslkey"),
    p("ssl-key"),
    p("statement-cache-capacity"),
    p("host"),
    p("hostaddr"),
    p("port"),
    p("dbname"),
    p("user"),
    secret("password"),
    p("application_name"),
    p("options"),
    // tenure's own (`sql/postgres/pooler.rs`), taken out before the driver
    // sees the URL.
    p("pooler"),
    secret("push_url"),
    secret("sslpassword"),
    secret("ssl-password"),
];

/// MySQL/MariaDB: what sqlx 0.8 reads, and `ssl-password`, which tenure
/// refuses with its own message.
const MYSQL: &[Param] = &[
    p("sslmode"),
    p("ssl-mode"),
    p("sslca"),
    p("ssl-ca"),
    p("charset"),
    p("collation"),
    p("sslcert"),
    p("ssl-cert"),
    p("sslkey"),
    p("ssl-key"),
    p("statement-cache-capacity"),
    p("socket"),
    p("timezone"),
    p("time-zone"),
    secret("sslpassword"),
    secret("ssl-password"),
];

/// Redis: the redis crate's `protocol` (a TCP URL's only one), tenure's
/// TLS files, named like redis-cli's options, and tenure's `durability`
/// (`durability=volatile` accepts a server that may lose acknowledged
/// writes).
const REDIS: &[Param] = &[
    p("protocol"),
    p("cacert"),
    p("cert"),
    p("key"),
    p("durability"),
];

/// etcd: tenure's TLS files, named like etcdctl's options; ZooKeeper over
/// TLS (`zks://`) takes the same.
const ETCD: &[Param] = &[p("cacert"), p("cert"), p("key")];

/// The parameters a scheme takes; `None` for schemes whose parameters are
/// checked elsewhere (SQLite: sqlx rejects unknown ones itself; ZooKeeper:
/// `zk://`'s parser refuses any).
pub(crate) fn known(scheme: &str) -> Option<&'static [Param]> {
    match scheme.to_ascii_lowercase().as_str() {
        "postgres" | "postgresql" => Some(POSTGRES),
        "mysql" | "mariadb" => Some(MYSQL),
        "redis" | "rediss" => Some(REDIS),
        "etcd" | "etcds" | "zks" => Some(ETCD),
        _ => None,
    }
}

/// True when a parameter's value may be shown: the scheme knows it and it is
/// not a secret. The values of unknown parameters are never shown (a
/// misspelt `password` is still a password).
pub(crate) fn shown(scheme: &str, name: &str) -> bool {
    if scheme.eq_ignore_ascii_case("sqlite") {
        let n = name.to_ascii_lowercase();
        return !(n.contains("pass") || n.contains("secret") || n.contains("token") || n == "key");
    }
    known(scheme).is_some_and(|list| {
        list.iter().any(|p| p.name == name && !p.secret)
            || (is_pg(scheme) && name.starts_with("options[") && name.ends_with(']'))
    })
}

fn is_pg(scheme: &str) -> bool {
    scheme.eq_ignore_ascii_case("postgres") || scheme.eq_ignore_ascii_case("postgresql")
}

/// Rejects a parameter `scheme` does not take, naming it and the closest
/// known one, never its value. `described` is the redacted URL.
pub(crate) fn check_known(scheme: &str, query: &str, described: &str) -> Result<()> {
    let Some(list) = known(scheme) else {
        return Ok(());
    };
    for (name, _) in url::form_urlencoded::parse(query.as_bytes()) {
        if list.iter().any(|p| p.name == name)
            || (is_pg(scheme) && name.starts_with("options[") && name.ends_with(']'))
        {
            continue;
        }
        let mut reason = format!(
            "unknown parameter {:?} (its value is not shown)",
            printable(&name)
        );
        let credential = ["password", "pass", "passwd", "pwd", "user", "username"]
            .contains(&name.to_ascii_lowercase().as_str());
        if credential {
            reason.push_str(&format!(
                "; give the user name and password before the host instead: {scheme}://user:password@host (percent-encoded)"
            ));
        }
        let closest = list
            .iter()
            .filter(|_| !credential)
            .map(|p| {
                (
                    strsim::normalized_damerau_levenshtein(&name, p.name),
                    p.name,
                )
            })
            .filter(|(score, _)| *score >= 0.5)
            .max_by(|a, b| a.0.total_cmp(&b.0));
        if let Some((_, name)) = closest {
            reason.push_str(&format!("; did you mean {name:?}?"));
        }
        let names: Vec<&str> = list.iter().map(|p| p.name).collect();
        reason.push_str(&format!("; {scheme}:// URLs take {}", names.join(", ")));
        if is_pg(scheme) {
            reason.push_str(", options[NAME]");
        }
        return Err(Error::InvalidUrl {
            url: described.to_string(),
            reason,
        });
    }
    Ok(())
}

/// A parameter name for a message: at most 40 characters, no control
/// characters.
fn printable(name: &str) -> String {
    name.chars().filter(|c| !c.is_control()).take(40).collect()
}

/// Where the user information (`user:password@`) of a `scheme://` URL ends:
/// the byte index of its `@` in `rest` (the URL after `://`), if any. A
/// password may hold any character, so this is the last `@` of the URL
/// rather than the first `@` before a `/`.
pub(crate) fn userinfo_end(rest: &str) -> Option<usize> {
    rest.rfind('@')
}

/// Rejects a URL whose user information holds a character that ends the
/// authority (`/`, `?`, `#`) or a second `@`: parsers disagree on such a URL,
/// and one reading of `postgres://u:12/x@db/app` connects to the host `u`
/// on port 12 with the password in the path. The fix is percent-encoding.
pub(crate) fn check_userinfo(url: &str, described: &str) -> Result<()> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(());
    };
    if scheme.eq_ignore_ascii_case("sqlite") || scheme.eq_ignore_ascii_case("memory") {
        return Ok(());
    }
    let Some(at) = userinfo_end(rest) else {
        return Ok(());
    };
    let userinfo = &rest[..at];
    if let Some(c) = userinfo
        .chars()
        .find(|c| matches!(c, '/' | '?' | '#' | '@'))
    {
        return Err(Error::InvalidUrl {
            url: described.to_string(),
            reason: format!(
                "the user name or password holds an unencoded {c:?} (or the URL has an '@' after its host); \
                 percent-encode special characters in the password: / as %2F, ? as %3F, # as %23, @ as %40, \
                 : as %3A, % as %25"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_parameters_name_the_closest_and_hide_the_value() {
        let e = check_known("mysql", "ssl-mdoe=VERIFY_IDENTITY", "mysql://h/db?***")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown parameter \"ssl-mdoe\""), "{e}");
        assert!(e.contains("did you mean \"ssl-mode\"?"), "{e}");
        assert!(!e.contains("VERIFY_IDENTITY"), "{e}");
        let e = check_known("postgres", "pasword=s3cr3t", "x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean \"password\"?"), "{e}");
        assert!(!e.contains("s3cr3t"), "{e}");
        assert!(check_known("postgres", "sslmode=require&options[search_path]=a", "x").is_ok());
        let e = check_known("mysql", "password=s3cr3t", "x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("mysql://user:password@host"), "{e}");
        assert!(!e.contains("did you mean") && !e.contains("s3cr3t"), "{e}");
        assert!(check_known("redis", "protocol=resp3&cacert=/ca.pem", "x").is_ok());
        assert!(check_known("sqlite", "anything=1", "x").is_ok());
    }

    #[test]
    fn userinfo_with_special_characters_is_refused() {
        for url in [
            "postgres://app:Zx9/Qw+8Lk==@127.0.0.1:5432/test",
            "postgres://postgres:1234/x@127.0.0.1:5432/test",
            "redis://:hunt/er2@127.0.0.1:6379/0",
            "mysql://root:hu#nt@127.0.0.1/test",
            "mysql://root:hu?nt@127.0.0.1/test",
            "etcd://root:p@ss@h:2379",
        ] {
            let e = check_userinfo(url, "x").unwrap_err().to_string();
            assert!(e.contains("%2F"), "{url}: {e}");
        }
        assert!(check_userinfo("postgres://app:p%2Fw@h/db", "x").is_ok());
        assert!(check_userinfo("postgres://h/db?sslmode=require", "x").is_ok());
        assert!(check_userinfo("sqlite:///tmp/a@b/c.db", "x").is_ok());
    }
}
