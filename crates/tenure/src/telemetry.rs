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
//!
//! Every election a process reads the lease of as an observer (the HTTP
//! API's election reads, one of which precedes every `GET /metrics` answer;
//! [`observe`](crate::observe::observe)), whether or not it campaigns:
//! - `tenure_election_leader_present{namespace,election}`: 1 while the
//!   lease is held and unexpired as last read, else 0;
//! - `tenure_election_term{namespace,election}`: the term as last read;
//! - `tenure_election_lease_remaining_seconds{namespace,election}`: the
//!   lease time left as last read (0 without a leader);
//! - `tenure_election_leader_changes_total{namespace,election}`: changes of
//!   leader (a new term, or no leader after one) seen after the first read;
//! - `tenure_election_leader_info{namespace,election,leader}`: 1 for the
//!   leader's identity as last read, 0 for identities that led before;
//! - `tenure_elections_observed`: elections seen; past
//!   [`set_metrics_election_cap`](crate::observe::set_metrics_election_cap)
//!   (1,000 by default) the later ones get no series of their own, and
//!   `tenure_elections_unexported` and
//!   `tenure_elections_unexported_without_leader` count them instead.
//!
//! [`Elector::members`]: crate::Elector::members
//!
//! Labels are names only: never a URL, never a holder id (an identity is
//! a name).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::store::record::{ElectionKey, LeaseRecord, MemberRecord};

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

/// How many elections get series of their own by default; see
/// [`set_metrics_election_cap`](crate::observe::set_metrics_election_cap).
pub(crate) const DEFAULT_ELECTION_CAP: usize = 1_000;

static ELECTION_CAP: AtomicUsize = AtomicUsize::new(DEFAULT_ELECTION_CAP);

/// See [`set_metrics_election_cap`](crate::observe::set_metrics_election_cap).
pub(crate) fn set_election_cap(cap: usize) {
    ELECTION_CAP.store(cap, Ordering::Relaxed);
}

/// What [`observed`] last recorded of one election.
struct Observed {
    term: u64,
    /// The leader's identity, if the lease was held.
    leader: Option<String>,
    /// Whether it has series of its own (it came within the cap).
    exported: bool,
}

/// Every election observed in this process, and how many of those beyond
/// the cap had no leader at their last read.
#[derive(Default)]
struct ObservedElections {
    elections: HashMap<ElectionKey, Observed>,
    unexported: usize,
    unexported_without_leader: usize,
}

fn observed_elections() -> std::sync::MutexGuard<'static, ObservedElections> {
    static OBSERVED: OnceLock<Mutex<ObservedElections>> = OnceLock::new();
    OBSERVED
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// An observer's read of `key`'s lease (`None`: no lease row).
pub(crate) fn observed(key: &ElectionKey, rec: Option<&LeaseRecord>) {
    let leader = rec
        .and_then(|r| r.live_holder())
        .map(|h| crate::store::identity_of(h).to_string());
    let term = rec.map_or(0, |r| r.term);
    let left = match rec {
        Some(r) if leader.is_some() => r.remaining.as_secs_f64(),
        _ => 0.0,
    };
    let mut all = observed_elections();
    let cap = ELECTION_CAP.load(Ordering::Relaxed);
    let seen = all.elections.len();
    let all = &mut *all;
    let (was, exported) = match all.elections.get_mut(key) {
        Some(o) => {
            let was = (o.term, o.leader.take());
            o.term = term;
            o.leader = leader.clone();
            (Some(was), o.exported)
        }
        None => {
            let exported = seen < cap;
            all.elections.insert(
                key.clone(),
                Observed {
                    term,
                    leader: leader.clone(),
                    exported,
                },
            );
            if !exported {
                all.unexported += 1;
            }
            metrics::gauge!("tenure_elections_observed").set(all.elections.len() as f64);
            (None, exported)
        }
    };
    if !exported {
        let had_leader = match &was {
            Some((_, l)) => l.is_some(),
            // A new one counts as without a leader until now.
            None => {
                all.unexported_without_leader += 1;
                false
            }
        };
        match (had_leader, leader.is_some()) {
            (true, false) => all.unexported_without_leader += 1,
            (false, true) => all.unexported_without_leader -= 1,
            _ => {}
        }
        metrics::gauge!("tenure_elections_unexported").set(all.unexported as f64);
        metrics::gauge!("tenure_elections_unexported_without_leader")
            .set(all.unexported_without_leader as f64);
        return;
    }
    let l = labels(key);
    metrics::gauge!("tenure_election_leader_present", &l).set(if leader.is_some() {
        1.0
    } else {
        0.0
    });
    metrics::gauge!("tenure_election_term", &l).set(term as f64);
    metrics::gauge!("tenure_election_lease_remaining_seconds", &l).set(left);
    let changes = metrics::counter!("tenure_election_leader_changes_total", &l);
    let info = |who: &str, v: f64| {
        metrics::gauge!(
            "tenure_election_leader_info",
            "namespace" => key.namespace.clone(),
            "election" => key.election.clone(),
            "leader" => who.to_string()
        )
        .set(v);
    };
    match was {
        None => changes.increment(0),
        Some((was_term, was_leader)) => {
            let changed = match (&was_leader, &leader) {
                (Some(_), None) => true,
                (_, Some(_)) => was_term != term || was_leader != leader,
                (None, None) => false,
            };
            if changed {
                changes.increment(1);
            }
            if let Some(old) = was_leader.filter(|old| Some(old) != leader.as_ref()) {
                info(&old, 0.0);
            }
        }
    }
    if let Some(now) = &leader {
        info(now, 1.0);
    }
}
