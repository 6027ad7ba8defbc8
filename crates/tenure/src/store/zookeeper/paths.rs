//! Znode layout: `<base>/e/<ns>/<election>/{term,state,leader,handover,members/,history/,runs/}`
//! and `<base>/clock`, with names escaped so that every name is one valid
//! znode segment (no `/`, no `.`/`..`, none of the characters ZooKeeper refuses).

use super::Inner;
use crate::store::ElectionKey;

/// The data of the base znode: marks a tree as tenure's.
pub(super) const MARKER: &[u8] = b"tenure zookeeper store v1";

fn needs_escape(c: char) -> bool {
    c == '%'
        || c == '/'
        || c.is_control()
        || ('\u{e000}'..='\u{f8ff}').contains(&c)
        || ('\u{fff0}'..='\u{ffff}').contains(&c)
}

/// Escapes a name for use as one znode name.
pub(super) fn seg(s: &str) -> String {
    let all_dots = s.chars().all(|c| c == '.');
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if needs_escape(c) || (all_dots && c == '.') {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Reverses [`seg`].
pub(super) fn unseg(s: &str) -> String {
    crate::store::util::percent::decode(s)
}

impl Inner {
    pub(super) fn elections_root(&self) -> String {
        format!("{}/e", self.base)
    }

    pub(super) fn dir(&self, key: &ElectionKey) -> String {
        format!(
            "{}/{}/{}",
            self.elections_root(),
            seg(&key.namespace),
            seg(&key.election)
        )
    }

    pub(super) fn node(&self, key: &ElectionKey, name: &str) -> String {
        format!("{}/{name}", self.dir(key))
    }

    pub(super) fn member_path(&self, key: &ElectionKey, holder: &str) -> String {
        format!("{}/members/{}", self.dir(key), seg(holder))
    }

    pub(super) fn history_path(&self, key: &ElectionKey, term: u64) -> String {
        format!("{}/history/{term:020}", self.dir(key))
    }

    pub(super) fn runs_dir(&self, key: &ElectionKey) -> String {
        format!("{}/runs", self.dir(key))
    }

    pub(super) fn run_path(&self, key: &ElectionKey, name: &str) -> String {
        format!("{}/{}", self.runs_dir(key), seg(name))
    }

    pub(super) fn clock_path(&self) -> String {
        format!("{}/clock", self.base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_valid_znode_names() {
        for name in ["a/b", "100%", ".", "..", "x.y", "é\u{e000}", "tab\tx"] {
            let s = seg(name);
            assert!(!s.contains('/'), "{s}");
            assert!(s != "." && s != "..", "{s}");
            assert_eq!(unseg(&s), name);
        }
        assert_eq!(seg("a/b%"), "a%2Fb%25");
    }
}
