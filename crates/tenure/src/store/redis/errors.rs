//! Turns redis crate errors into tenure errors that say what to do.

use std::time::Duration;

use redis::{ErrorKind, RedisError};

use crate::error::Error;
use crate::store::util::client_tls::{self, ServerHints};

/// The redis crate may quote the URL it was given; never let a password through.
pub(super) fn without_secrets(text: &str, url: &str) -> String {
    match url::Url::parse(url)
        .ok()
        .and_then(|u| u.password().map(str::to_owned))
    {
        Some(pw) if !pw.is_empty() => text.replace(&pw, "***"),
        _ => text.to_string(),
    }
}

pub(super) fn timed_out(store: &str, after: Duration) -> Error {
    Error::Unavailable {
        source: None,
        store: store.to_string(),
        reason: format!("no answer within {after:?}; is the server up and is this its Redis port?"),
    }
}

/// For a URL that got no answer: whether it is `rediss://` and a plain-text Redis
/// answers on that host and port. Such a server reads the TLS hello as the
/// start of a command and waits for its end, so the handshake only times out.
pub(super) async fn speaks_plain_redis(url: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(parsed) = url::Url::parse(url) else {
        return false;
    };
    if parsed.scheme() != "rediss" {
        return false;
    }
    let Some(host) = parsed.host_str() else {
        return false;
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = parsed.port().unwrap_or(6379);
    let probe = async move {
        let mut conn = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .ok()?;
        conn.write_all(b"PING\r\n").await.ok()?;
        let mut first = [0u8; 1];
        conn.read_exact(&mut first).await.ok()?;
        // +PONG, or -NOAUTH / -ERR: either way a Redis in plain text.
        Some(matches!(first[0], b'+' | b'-'))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(1), probe).await,
        Ok(Some(true))
    )
}

/// The error for a `rediss://` URL naming a plain-text Redis.
pub(super) fn no_tls(store: &str) -> Error {
    Error::Tls {
        source: None,
        store: store.to_string(),
        reason: "the server does not speak TLS on this port (a plain-text Redis answers there); use redis:// for it, or enable TLS on the server (tls-port, tls-cert-file, tls-key-file)".into(),
    }
}

fn not_redis(store: String, what: &str) -> Error {
    Error::Protocol {
        source: None,
        store,
        reason: format!("{what}; is this a Redis server? (a TLS-only Redis needs rediss://)"),
    }
}

/// Like [`classify`], for the first connection: a server that accepts the TCP
/// connection and then drops it at the first command is not speaking Redis.
pub(super) fn classify_first(store: &str, e: RedisError) -> Error {
    let tls = crate::store::util::rustls_cause::find(&e).is_some()
        || client_tls::explain_text(&e.to_string(), None, HINTS).is_some();
    if !tls && e.code().is_none() && dropped(&e) {
        return not_redis(
            store.to_string(),
            "the server closed the connection at the first command",
        );
    }
    classify(store, e)
}

/// True if the connection was cut after it was made (not refused, not timed out).
fn dropped(e: &RedisError) -> bool {
    use std::io::ErrorKind as K;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                K::BrokenPipe | K::ConnectionReset | K::ConnectionAborted | K::UnexpectedEof
            );
        }
        cause = c.source();
    }
    // The redis crate often keeps only the text of an I/O error.
    e.is_connection_dropped() && !e.to_string().contains("refused")
}

/// What Redis calls the settings our TLS messages point at.
const HINTS: ServerHints = ServerHints {
    unknown_issuer: " (or add #insecure to the URL to skip verification)",
    client_ca: "tls-ca-cert-file",
};

/// The `cacert=` of a store URL, for messages.
fn cacert(store: &str) -> Option<String> {
    url::Url::parse(store).ok().and_then(|u| {
        u.query_pairs()
            .find(|(k, _)| k == "cacert")
            .map(|(_, v)| v.into_owned())
    })
}

/// The redis error itself is not kept as the source: its text can quote the
/// URL, password included (see [`without_secrets`]).
pub(super) fn classify(store: &str, e: RedisError) -> Error {
    let text = e.to_string();
    let code = e.code().unwrap_or_default().to_string();
    let store = store.to_string();
    let lower = text.to_ascii_lowercase();
    if e.kind() == ErrorKind::AuthenticationFailed
        || matches!(code.as_str(), "NOAUTH" | "WRONGPASS")
        || lower.contains("invalid password")
    {
        return Error::PermissionDenied { source: None,
            store,
            reason: format!(
                "{text}; check the user and password in the URL (redis://user:password@host) or pass the URL with --store-file"
            ),
        };
    }
    if code == "NOPERM" {
        return Error::PermissionDenied { source: None,
            store,
            reason: format!(
                "{text}; the ACL user needs EVALSHA, EVAL, HGETALL, HDEL, INFO and PUBLISH/SUBSCRIBE on tenure's keys and channel"
            ),
        };
    }
    if lower.contains("db index is out of range") || lower.contains("invalid db index") {
        return Error::InvalidUrl {
            url: store,
            reason: format!(
                "{text}: the database number in the URL does not exist on this server (databases are 0..N-1, N set by `databases` in redis.conf)"
            ),
        };
    }
    let ca = cacert(&store);
    if let Some(reason) = crate::store::util::rustls_cause::find(&e)
        .map(|tls| client_tls::explain(tls, ca.as_deref(), HINTS))
        .or_else(|| client_tls::explain_text(&text, ca.as_deref(), HINTS))
    {
        return Error::Tls {
            source: None,
            reason,
            store,
        };
    }
    if e.kind() == ErrorKind::Parse || matches!(e.kind(), ErrorKind::UnexpectedReturnType) {
        return not_redis(store, "its reply is not in the Redis protocol (RESP)");
    }
    if code == "NOSCRIPT" || lower.contains("unknown command") {
        return Error::Protocol {
            source: None,
            store,
            reason: format!("{text}; the server lacks Lua scripting (EVAL), which tenure needs"),
        };
    }
    if e.is_timeout() {
        return Error::Unavailable {
            source: None,
            store,
            reason: format!("{text}; the server did not answer in time"),
        };
    }
    Error::Unavailable {
        source: None,
        store,
        reason: text,
    }
}
