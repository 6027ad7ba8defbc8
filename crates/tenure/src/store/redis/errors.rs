//! Turns redis crate errors into tenure errors that say what to do.

use std::time::Duration;

use redis::{ErrorKind, RedisError};

use crate::error::Error;

/// The redis crate may quote the URL it was given; never let a password through.
pub(super) fn without_secrets(text: &str, url: &str) -> String {
    match url::Url::parse(url).ok().and_then(|u| u.password().map(str::to_owned)) {
        Some(pw) if !pw.is_empty() => text.replace(&pw, "***"),
        _ => text.to_string(),
    }
}

pub(super) fn timed_out(store: &str, after: Duration) -> Error {
    Error::Unavailable {
        store: store.to_string(),
        reason: format!(
            "no answer within {after:?}; is the server up and is this its Redis port?"
        ),
    }
}

fn not_redis(store: String, what: &str) -> Error {
    Error::Protocol {
        store,
        reason: format!(
            "{what}; is this a Redis server? (a TLS-only Redis needs rediss://)"
        ),
    }
}

/// Like [`classify`], for the first connection: a server that accepts the TCP
/// connection and then drops it at the first command is not speaking Redis.
pub(super) fn classify_first(store: &str, e: RedisError) -> Error {
    let dropped = e.is_connection_dropped()
        || (e.is_io_error() && !e.is_connection_refusal() && !e.is_timeout());
    if dropped && e.code().is_none() {
        return not_redis(
            store.to_string(),
            "the server closed the connection at the first command",
        );
    }
    classify(store, e)
}

pub(super) fn classify(store: &str, e: RedisError) -> Error {
    let text = e.to_string();
    let code = e.code().unwrap_or_default().to_string();
    let store = store.to_string();
    let lower = text.to_ascii_lowercase();
    if e.kind() == ErrorKind::AuthenticationFailed
        || matches!(code.as_str(), "NOAUTH" | "WRONGPASS")
        || lower.contains("invalid password")
    {
        return Error::PermissionDenied {
            store,
            reason: format!(
                "{text}; check the user and password in the URL (redis://user:password@host) or pass the URL with --store-file"
            ),
        };
    }
    if code == "NOPERM" {
        return Error::PermissionDenied {
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
    if lower.contains("certificate") || lower.contains("tls") || lower.contains("handshake") {
        return Error::Unavailable {
            store,
            reason: format!(
                "TLS: {text}; check that cacert= names the CA that signed the server's certificate and that the host name matches it"
            ),
        };
    }
    if e.kind() == ErrorKind::Parse || matches!(e.kind(), ErrorKind::UnexpectedReturnType) {
        return not_redis(store, "its reply is not in the Redis protocol (RESP)");
    }
    if code == "NOSCRIPT" || lower.contains("unknown command") {
        return Error::Protocol {
            store,
            reason: format!("{text}; the server lacks Lua scripting (EVAL), which tenure needs"),
        };
    }
    if e.is_timeout() {
        return Error::Unavailable {
            store,
            reason: format!("{text}; the server did not answer in time"),
        };
    }
    Error::Unavailable {
        store,
        reason: text,
    }
}
