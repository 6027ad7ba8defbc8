//! Metrics through the [`metrics`](https://docs.rs/metrics) facade: recorded
//! by every elector, exported by whatever recorder the application installs
//! (none: nothing is recorded, at the cost of a few atomic loads).
//!
//! Names and labels are a public interface (dashboards and alerts use them):
//! - `leader_election_master_status{name}`: 1 while leading, else 0, with
//!   client-go's meaning (`name` is the election), so its dashboards work;
//! - `tenure_is_leader{namespace,election}`: the same, by namespace;
//! - `tenure_term{namespace,election}`: the latest term this candidate saw;
//! - `tenure_leader_changes_total{namespace,election}`: new leaders seen;
//! - `tenure_lease_remaining_seconds{namespace,election}`: time to the local
//!   deadline at the last renewal (0 when not leading);
//! - `tenure_renew_duration_seconds{namespace,election}`: histogram of renewals;
//! - `tenure_store_errors_total{kind}`: failed store calls by operation
//!   (`read`, `acquire`, `renew`, `release`, `handover`);
//! - `tenure_push_up{channel}`: 1 while the store's push channel (`PostgreSQL
//!   LISTEN`, `Redis pub/sub`, `etcd watch`) is open, 0 while it is down and
//!   followers read every TTL/10 instead ([`PushHealth`](crate::store::PushHealth));
//!   set when the channel first opens or fails;
//! - `tenure_members{namespace,election}`: live members (registrations not
//!   lapsed by the store's clock) at this process's last read of the
//!   election's member list: a follower's when a lease frees up
//!   (succession), a leader's preemption check, [`Elector::members`], and the
//!   HTTP API's election reads, one of which precedes every `GET /metrics`
//!   answer. A steady elector alone reads no member list, so without the
//!   HTTP API the value is as of the last read.
//! - `tenure_store_statements_total{store,statement}`: calls a store sent
//!   to its server, by kind (`sqlite`, `mysql`, `postgres`, `redis`,
//!   `etcd`, `memory`) and by what they do: `renew`, `heartbeat` and `reap`
//!   statements (SQL), script calls (Redis) or transactions (etcd), where
//!   the calls of one instant share one; etcd's `keepalive` rounds (and
//!   lease grants), `heartbeat_read`s (a heartbeat that read the key first)
//!   and batched `member_read`s; the memory store's `lease_write`s
//!   (acquire, renew, release and hand-over attempts) and `member_write`s.
//!   A store registers these when it is built, with the recorder current
//!   then.
//!
//! [`Elector::members`]: crate::Elector::members
//!
//! Labels are names only: never a URL, never a holder id.

use std::time::Duration;

use crate::store::record::{ElectionKey, MemberRecord};

fn labels(key: &ElectionKey) -> [(&'static str, String); 2] {
    [
        ("namespace", key.namespace.clone()),
        ("election", key.election.clone()),
    ]
}

/// Leading or not, and the time left when leading.
pub(crate) fn leading(key: &ElectionKey, leading: bool, remaining: Duration) {
    let v = if leading { 1.0 } else { 0.0 };
    metrics::gauge!("leader_election_master_status", "name" => key.election.clone()).set(v);
    metrics::gauge!("tenure_is_leader", &labels(key)).set(v);
    metrics::gauge!("tenure_lease_remaining_seconds", &labels(key)).set(remaining.as_secs_f64());
}

/// A new leader (this candidate or another) under `term`.
pub(crate) fn new_leader(key: &ElectionKey, term: u64) {
    metrics::counter!("tenure_leader_changes_total", &labels(key)).increment(1);
    metrics::gauge!("tenure_term", &labels(key)).set(term as f64);
}

/// A successful renewal that took `took`.
pub(crate) fn renewed(key: &ElectionKey, took: Duration) {
    metrics::histogram!("tenure_renew_duration_seconds", &labels(key)).record(took.as_secs_f64());
}

/// A failed store call; `what` is the campaign's description of it.
pub(crate) fn store_error(what: &str) {
    let kind = match what.split_whitespace().next() {
        Some("reading") => "read",
        Some("acquiring") => "acquire",
        Some("renewing") => "renew",
        Some("releasing") => "release",
        Some("handing") => "handover",
        _ => "other",
    };
    metrics::counter!("tenure_store_errors_total", "kind" => kind).increment(1);
}

/// The counter of the `statement` calls a store of kind `store` sends (see
/// the module docs); registered now, with the current recorder.
// Not every store is compiled in every build.
#[allow(dead_code)]
pub(crate) fn store_statements(store: &'static str, statement: &'static str) -> metrics::Counter {
    metrics::counter!("tenure_store_statements_total", "store" => store, "statement" => statement)
}

/// A member list just read: how many of its members are live.
pub(crate) fn members(key: &ElectionKey, members: &[MemberRecord]) {
    let live = members.iter().filter(|m| m.live).count();
    metrics::gauge!("tenure_members", &labels(key)).set(live as f64);
}

/// A store's push channel opened (`true`) or failed.
#[cfg(any(feature = "postgres", feature = "redis", feature = "etcd"))]
pub(crate) fn push_up(channel: &'static str, up: bool) {
    metrics::gauge!("tenure_push_up", "channel" => channel).set(if up { 1.0 } else { 0.0 });
}
