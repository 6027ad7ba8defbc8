//! Validation of election names, namespaces and identities.
//!
//! Names end up in SQL parameters, keys and log lines, so they are checked once at
//! the edge: non-empty, at most 255 bytes of UTF-8, no control characters.

use crate::error::{Error, Result};

/// Longest election name or namespace, in bytes.
pub const MAX_NAME_BYTES: usize = 255;

/// Longest identity, in bytes. The holder id is `identity#session` and must fit
/// in 255 bytes too, so identities leave room for the 17-byte session suffix.
pub const MAX_IDENTITY_BYTES: usize = 200;

/// Longest metadata string, in bytes.
pub const MAX_METADATA_BYTES: usize = 1024;

/// Checks an election name: 1–255 bytes of UTF-8 without control characters.
///
/// ```
/// assert!(tenure::validate_name("election", "billing-cron").is_ok());
/// assert!(tenure::validate_name("election", "").is_err());
/// assert!(tenure::validate_name("election", "a\nb").is_err());
/// ```
pub fn validate_name(field: &'static str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::config(
            field,
            "must not be empty (use 1 to 255 bytes of UTF-8, e.g. \"billing-cron\")",
        ));
    }
    check_text(field, name, MAX_NAME_BYTES)
}

/// Checks a candidate identity: 1 to [`MAX_IDENTITY_BYTES`] bytes of UTF-8,
/// no control characters.
///
/// ```
/// assert!(tenure::validate_identity("box1").is_ok());
/// assert!(tenure::validate_identity("").is_err());
/// ```
pub fn validate_identity(identity: &str) -> Result<()> {
    if identity.is_empty() {
        return Err(Error::config(
            "identity",
            "must not be empty (default: hostname-pid)",
        ));
    }
    if identity == crate::store::HANDOVER_ANYONE {
        return Err(Error::config(
            "identity",
            "\"*\" is reserved: the stores use it to mark a hand-over to anyone; pick another",
        ));
    }
    check_text("identity", identity, MAX_IDENTITY_BYTES)
}

/// Checks the metadata stored with a lease: at most [`MAX_METADATA_BYTES`]
/// bytes of UTF-8, no control characters.
///
/// ```
/// assert!(tenure::validate_metadata("10.0.0.5:8080").is_ok());
/// assert!(tenure::validate_metadata("a\nb").is_err());
/// ```
pub fn validate_metadata(metadata: &str) -> Result<()> {
    check_text("metadata", metadata, MAX_METADATA_BYTES)
}

fn check_text(field: &'static str, text: &str, max: usize) -> Result<()> {
    if text.len() > max {
        return Err(Error::config(
            field,
            format!("is {} bytes long; the limit is {max} bytes", text.len()),
        ));
    }
    if let Some(c) = text.chars().find(|c| c.is_control()) {
        return Err(Error::config(
            field,
            format!("contains the control character {c:?}; use printable characters only"),
        ));
    }
    Ok(())
}

/// Checks a SQL table-name prefix: an ASCII identifier of at most 40 characters,
/// so it can be pasted into DDL without quoting.
// Unused in builds with only some stores.
#[cfg_attr(
    not(any(
        feature = "sqlite",
        feature = "mysql",
        feature = "postgres",
        feature = "redis",
        feature = "etcd"
    )),
    allow(dead_code)
)]
pub(crate) fn validate_table_prefix(prefix: &str) -> Result<()> {
    let ok_start = prefix
        .chars()
        .next()
        .map(|c| c.is_ascii_alphabetic() || c == '_')
        .unwrap_or(true);
    let ok_chars = prefix
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_');
    if prefix.len() > 40 || !ok_start || !ok_chars {
        return Err(Error::config(
            "table prefix",
            format!("{prefix:?} is not a SQL identifier; use letters, digits and '_', starting with a letter or '_', at most 40 characters (default \"tenure_\")"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(validate_name("election", "x").is_ok());
        assert!(validate_name("election", "日本語").is_ok());
        assert!(validate_name("election", &"a".repeat(255)).is_ok());
        let long = validate_name("election", &"a".repeat(256))
            .unwrap_err()
            .to_string();
        assert!(long.contains("256 bytes"), "{long}");
        let ctl = validate_name("election", "a\u{7}").unwrap_err().to_string();
        assert!(ctl.contains("control character"), "{ctl}");
        assert!(validate_name("election", "")
            .unwrap_err()
            .to_string()
            .contains("empty"));
    }

    #[test]
    fn prefixes() {
        assert!(validate_table_prefix("tenure_").is_ok());
        assert!(validate_table_prefix("").is_ok());
        assert!(validate_table_prefix("1x").is_err());
        assert!(validate_table_prefix("a;drop table x").is_err());
        assert!(validate_table_prefix("a-b").is_err());
    }
}
