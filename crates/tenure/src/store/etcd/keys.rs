//! Key layout: `<prefix>/<kind>/<ns>/<election>[/...]`, with names escaped
//! so that `/` in a name is unambiguous.

use super::Inner;
use crate::store::ElectionKey;

/// Escapes a name for use as one path segment of a key.
pub(super) fn seg(s: &str) -> String {
    s.replace('%', "%25").replace('/', "%2F")
}

pub(super) fn unseg(s: &str) -> String {
    s.replace("%2F", "/").replace("%25", "%")
}

/// The election a lease, state or hand-over key belongs to.
pub(super) fn parse_election_key(prefix: &str, key: &[u8]) -> Option<ElectionKey> {
    let key = std::str::from_utf8(key).ok()?;
    let rest = key.strip_prefix(prefix)?.strip_prefix('/')?;
    let (kind, rest) = rest.split_once('/')?;
    if !matches!(kind, "lease" | "state" | "handover") {
        return None;
    }
    let (ns, election) = rest.split_once('/')?;
    if election.contains('/') {
        return None;
    }
    Some(ElectionKey::new(unseg(ns), unseg(election)))
}

/// Whether `key` is an election's state key (`<prefix>/state/...`).
pub(super) fn is_state_key(prefix: &str, key: &[u8]) -> bool {
    std::str::from_utf8(key)
        .ok()
        .and_then(|k| k.strip_prefix(prefix))
        .is_some_and(|rest| rest.starts_with("/state/"))
}

impl Inner {
    pub(super) fn k(&self, kind: &str, key: &ElectionKey) -> String {
        format!(
            "{}/{kind}/{}/{}",
            self.prefix,
            seg(&key.namespace),
            seg(&key.election)
        )
    }

    pub(super) fn member_prefix(&self, key: &ElectionKey) -> String {
        format!("{}/", self.k("member", key))
    }

    pub(super) fn history_prefix(&self, key: &ElectionKey) -> String {
        format!("{}/", self.k("history", key))
    }

    pub(super) fn history_key(&self, key: &ElectionKey, term: u64) -> String {
        format!("{}{term:020}", self.history_prefix(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        let k = parse_election_key("p", b"p/lease/a%2Fb/c%25d").unwrap();
        assert_eq!(k, ElectionKey::new("a/b", "c%d"));
        assert_eq!(seg("a/b%"), "a%2Fb%25");
        assert!(parse_election_key("p", b"p/member/a/b/c").is_none());
        assert!(is_state_key("p", b"p/state/a/b"));
        assert!(!is_state_key("p", b"p/lease/a/b"));
    }
}
