#![doc = include_str!("docs.md")]

mod batch;
mod client;
mod durability;
mod errors;
mod fenced;
mod push;
mod runs;
mod scripts;

use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Value;

use super::{
    Acquire, Capabilities, Changes, Claim, ElectionKey, EndReason, Handover, HandoverReason,
    HistoryRecord, LeaseRecord, LeaseStore, Member, MemberRecord, StartReason, StoreOptions,
    Tenure,
};
use crate::error::{Error, Result};
use crate::store::{History, Membership, Wakeups};
pub use fenced::FencedWrites;
use scripts::Scripts;

/// A [`LeaseStore`] on a Redis server (or Valkey, or anything that speaks
/// Redis 5+ with Lua scripting).
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// use tenure::store::{redis::RedisStore, StoreOptions};
/// let store = RedisStore::connect("redis://127.0.0.1:6379/0", &StoreOptions::default()).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    conn: ConnectionManager,
    scripts: std::sync::Arc<Scripts>,
    prefix: String,
    described: String,
    history_retention: u64,
    push: std::sync::Arc<push::PushHub>,
    fenced_script: std::sync::Arc<std::sync::OnceLock<redis::Script>>,
    batches: std::sync::Arc<batch::Batches>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("store", &self.described)
            .field("prefix", &self.prefix)
            .finish()
    }
}

/// The oldest server whose scripts may call `TIME` before writing (effects
/// replication became the default in Redis 5).
const MIN_MAJOR_VERSION: u32 = 5;

impl RedisStore {
    /// Connects, checks that the server is a Redis 5+ with scripting, and
    /// loads nothing else: there is no schema to create. A server that may
    /// lose acknowledged writes (AOF off, or `appendfsync` other than
    /// `always`) gets a warning, once per process, unless the URL accepts
    /// it with `?durability=volatile`.
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self> {
        crate::names::validate_table_prefix(&options.table_prefix)?;
        super::check_url(url)?;
        let described = super::redact_url(url);
        let (client, accepted) = client::build(url, &described)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(options.connect_timeout))
            .set_response_timeout(Some(options.connect_timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let connected = tokio::time::timeout(
            options.connect_timeout + Duration::from_millis(500),
            ConnectionManager::new_with_config(client.clone(), config),
        )
        .await;
        let conn = match connected {
            Ok(c) => c.map_err(|e| errors::classify_first(&described, e))?,
            Err(_) if errors::speaks_plain_redis(url).await => {
                return Err(errors::no_tls(&described))
            }
            Err(_) => return Err(errors::timed_out(&described, options.connect_timeout)),
        };
        let scripts = std::sync::Arc::new(Scripts::new());
        let batches = std::sync::Arc::new(batch::Batches::new(batch::Caller {
            conn: conn.clone(),
            scripts: scripts.clone(),
            prefix: options.table_prefix.clone(),
            described: described.clone(),
        }));
        let store = Self {
            conn,
            scripts,
            batches,
            prefix: options.table_prefix.clone(),
            push: std::sync::Arc::new(push::PushHub::new(
                client,
                format!("{}changes", options.table_prefix),
                described.clone(),
            )),
            described,
            history_retention: options.history_retention.max(1),
            fenced_script: Default::default(),
        };
        store.check_server().await?;
        durability::check(&store.conn, &store.described, accepted).await;
        Ok(store)
    }

    /// Fails unless the server says it is Redis (or a fork that reports a
    /// `redis_version`) of a version whose scripts may read `TIME` and write.
    async fn check_server(&self) -> Result<()> {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| self.error(e))?;
        let version = info
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .map(str::trim)
            .ok_or_else(|| Error::Protocol {
                source: None,
                store: self.described.clone(),
                reason: "the server answered INFO without a redis_version; is this a Redis server?"
                    .into(),
            })?;
        let major: u32 = version
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        if major < MIN_MAJOR_VERSION {
            return Err(Error::Protocol { source: None,
                store: self.described.clone(),
                reason: format!(
                    "Redis {version} is too old: tenure needs Redis {MIN_MAJOR_VERSION}.0 or newer (scripts that read TIME and then write)"
                ),
            });
        }
        Ok(())
    }

    /// Runs one script on the shared connection (the manager reconnects by itself).
    async fn run<T: redis::FromRedisValue>(&self, call: &redis::ScriptInvocation<'_>) -> Result<T> {
        call.invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| self.error(e))
    }

    fn error(&self, e: redis::RedisError) -> Error {
        errors::classify(&self.described, e)
    }

    fn member(key: &ElectionKey) -> String {
        format!("{}:{}:{}", key.namespace.len(), key.namespace, key.election)
    }

    fn parse_member(member: &str) -> Option<ElectionKey> {
        let (len, rest) = member.split_once(':')?;
        let len: usize = len.parse().ok()?;
        let ns = rest.get(..len)?;
        let election = rest.get(len..)?.strip_prefix(':')?;
        Some(ElectionKey::new(ns, election))
    }

    fn key(&self, kind: &str, key: &ElectionKey) -> String {
        Self::key_for(&self.prefix, kind, key)
    }

    fn key_for(prefix: &str, kind: &str, key: &ElectionKey) -> String {
        format!("{prefix}{kind}:{}", Self::member(key))
    }

    fn channel(&self) -> String {
        format!("{}changes", self.prefix)
    }

    fn record(&self, key: &ElectionKey, f: &[String]) -> Result<LeaseRecord> {
        if f.len() != scripts::RECORD_FIELDS + 1 {
            return Err(self.protocol(format!(
                "a lease record of {} fields (expected {})",
                f.len(),
                scripts::RECORD_FIELDS + 1
            )));
        }
        // A lease field that is not an integer was not written by tenure
        // (the scripts write '%.0f'): the record is corrupt, as below.
        let n = |i: usize| -> Result<i64> {
            if f[i].is_empty() {
                return Ok(0);
            }
            f[i].parse().map_err(|_| {
                self.corrupt(
                    key,
                    format!(
                        "its field {} is {:?}, not an integer",
                        scripts::FIELD_NAMES.get(i).copied().unwrap_or("now"),
                        f[i]
                    ),
                )
            })
        };
        let text = |i: usize| (!f[i].is_empty()).then(|| f[i].clone());
        let holder = text(0);
        let expires_at_us = n(7)?;
        let read_at_us = n(14)?;
        super::check_lease(super::StoredLease {
            term: n(2)?,
            version: n(3)?,
            ttl_us: n(4)?,
            held: holder.is_some(),
            expires_us: expires_at_us,
            now_us: read_at_us,
            handover_until_us: n(9)?,
        })
        .map_err(|reason| self.corrupt(key, reason))?;
        Ok(LeaseRecord {
            key: key.clone(),
            remaining: if holder.is_some() {
                super::remaining_from_us(expires_at_us, read_at_us)
            } else {
                Duration::ZERO
            },
            holder,
            metadata: f[1].clone(),
            term: n(2)?.max(0) as u64,
            version: n(3)?.max(0) as u64,
            ttl: Duration::from_micros(n(4)?.max(0) as u64),
            acquired_at_us: n(5)?,
            renewed_at_us: n(6)?,
            expires_at_us,
            handover: Handover::from_column(&f[8]),
            handover_until_us: n(9)?,
            start_reason: StartReason::from_column(&f[13])
                .map_err(|e| self.protocol(format!("{e} for {key}")))?,
            previous_holder: text(11),
            previous_expires_at_us: n(12)?,
            read_at_us,
        })
    }

    /// The error for a lease record of `key` that tenure did not write, with
    /// the `redis-cli` command that repairs it: the lease is made vacant,
    /// and a term out of range is replaced by the highest sane term of the
    /// election's history, so the next acquisition's term is above every
    /// term handed out.
    fn corrupt(&self, key: &ElectionKey, reason: String) -> Error {
        let max = super::MAX_TERM;
        let script = format!(
            "local m={max} local t=tonumber(redis.call('HGET',KEYS[1],'term')) \
             if not t or t<0 or t>=m or t~=math.floor(t) then t=0 \
             for _,k in ipairs(redis.call('HKEYS',KEYS[2])) do local n=tonumber(k) \
             if n and n>t and n<m and n==math.floor(n) then t=n end end end \
             redis.call('HSET',KEYS[1],'term',string.format('%.0f',t),'version','1',\
             'holder','','metadata','','ttl_us','0','expires_us','0','handover_to','',\
             'handover_until_us','0','handover_reason','') return t"
        );
        let quote = |s: String| format!("'{}'", s.replace('\'', "'\\''"));
        Error::Corrupt {
            election: key.to_string(),
            store: self.described.clone(),
            reason,
            repair: format!(
                "run `redis-cli EVAL \"{script}\" 2 {} {}` (with redis-cli's -h/-p/-n options for this server)",
                quote(self.key("lease", key)),
                quote(self.key("history", key)),
            ),
        }
    }

    fn protocol(&self, what: String) -> Error {
        Error::Protocol { source: None,
            store: self.described.clone(),
            reason: format!("the server returned {what}; are other programs writing tenure's keys (prefix {:?})?", self.prefix),
        }
    }

    async fn step_down(
        &self,
        tenure: &Tenure,
        to: &str,
        window: Duration,
        reason: &str,
    ) -> Result<bool> {
        let window_us = super::handover_window_us(window)?;
        let done: i64 = self
            .run(
                self.scripts
                    .step_down
                    .key(self.key("lease", &tenure.key))
                    .key(self.key("history", &tenure.key))
                    .arg(&tenure.holder)
                    .arg(tenure.term)
                    .arg(to)
                    .arg(window_us)
                    .arg(reason)
                    .arg(self.channel())
                    .arg(Self::member(&tenure.key)),
            )
            .await?;
        Ok(done == 1)
    }
}

fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 4)
}

/// [`us`] as a batch group.
fn group_us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX / 4)
}

fn json_str(v: &serde_json::Value, field: &str) -> String {
    v.get(field)
        .and_then(|x| x.as_str())
        .unwrap_or_default()
        .to_string()
}

fn json_i64(v: &serde_json::Value, field: &str) -> i64 {
    v.get(field)
        .and_then(|x| x.as_str())
        .and_then(|x| x.parse().ok())
        .unwrap_or(0)
}

#[async_trait]
impl LeaseStore for RedisStore {
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn run_records(&self) -> Option<&dyn super::RunRecords> {
        Some(self)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            push: true,
            push_acquisitions: true,
            // `members.lua` reads the lease with the member list.
            lease_vouches_for_holder: true,
            ..Capabilities::default()
        }
    }

    fn describe(&self) -> String {
        self.described.clone()
    }

    async fn try_acquire(&self, claim: &Claim) -> Result<Acquire> {
        let (won, fields): (i64, Vec<String>) = self
            .run(
                self.scripts
                    .acquire
                    .key(self.key("lease", &claim.key))
                    .key(self.key("history", &claim.key))
                    .key(format!("{}index", self.prefix))
                    .arg(&claim.holder)
                    .arg(super::identity_of(&claim.holder))
                    .arg(&claim.metadata)
                    .arg(us(claim.ttl))
                    .arg(Self::member(&claim.key))
                    .arg(self.channel())
                    .arg(self.history_retention),
            )
            .await?;
        if won == 1 {
            return Ok(Acquire::Acquired(self.record(&claim.key, &fields)?));
        }
        if fields.is_empty() {
            return Ok(Acquire::Held(None));
        }
        Ok(Acquire::Held(Some(self.record(&claim.key, &fields)?)))
    }

    async fn renew(&self, tenure: &Tenure, ttl: Duration) -> Result<bool> {
        // Renewals of one instant go together: one script call for all the
        // process's leases with this TTL.
        self.batches
            .renewals
            .call(group_us(ttl), tenure.clone())
            .await
    }

    async fn release(&self, tenure: &Tenure) -> Result<bool> {
        self.step_down(tenure, "", Duration::ZERO, "released").await
    }

    async fn proclaim(&self, tenure: &Tenure, metadata: &str) -> Result<bool> {
        let done: i64 = self
            .run(
                self.scripts
                    .proclaim
                    .key(self.key("lease", &tenure.key))
                    .arg(&tenure.holder)
                    .arg(tenure.term)
                    .arg(metadata)
                    .arg(self.channel())
                    .arg(Self::member(&tenure.key)),
            )
            .await?;
        Ok(done == 1)
    }

    async fn read(&self, key: &ElectionKey) -> Result<Option<LeaseRecord>> {
        let fields: Vec<String> = self
            .run(&self.scripts.read.key(self.key("lease", key)))
            .await?;
        if fields.is_empty() {
            return Ok(None);
        }
        self.record(key, &fields).map(Some)
    }

    async fn list(&self, namespace: Option<&str>) -> Result<Vec<LeaseRecord>> {
        let flat: Vec<Value> = self
            .run(
                self.scripts
                    .list
                    .key(format!("{}index", self.prefix))
                    .arg(format!("{}lease:", self.prefix)),
            )
            .await?;
        let mut out = Vec::new();
        for pair in flat.chunks(2) {
            let [member, fields] = pair else {
                return Err(self.protocol("an odd-length election list".into()));
            };
            let member: String =
                redis::from_redis_value_ref(member).map_err(|e| self.protocol(e.to_string()))?;
            let Some(key) = Self::parse_member(&member) else {
                return Err(self.protocol(format!("an index member {member:?}")));
            };
            if namespace.is_some_and(|ns| ns != key.namespace) {
                continue;
            }
            let fields: Vec<String> =
                redis::from_redis_value_ref(fields).map_err(|e| self.protocol(e.to_string()))?;
            out.push(self.record(&key, &fields)?);
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    async fn hand_over(
        &self,
        tenure: &Tenure,
        to: &Handover,
        window: Duration,
        reason: HandoverReason,
    ) -> Result<bool> {
        self.step_down(tenure, to.column(), window, reason.as_str())
            .await
    }

    async fn request_handover(
        &self,
        key: &ElectionKey,
        to: &Handover,
        window: Duration,
        reason: HandoverReason,
    ) -> Result<Option<LeaseRecord>> {
        let window_us = super::handover_window_us(window)?;
        let fields: Vec<String> = self
            .run(
                self.scripts
                    .request_handover
                    .key(self.key("lease", key))
                    .arg(to.column())
                    .arg(window_us)
                    .arg(reason.as_str())
                    .arg(self.channel())
                    .arg(Self::member(key)),
            )
            .await?;
        if fields.is_empty() {
            return Ok(None);
        }
        self.record(key, &fields).map(Some)
    }

    fn membership(&self) -> Option<&dyn Membership> {
        Some(self)
    }

    fn history_log(&self) -> Option<&dyn History> {
        Some(self)
    }

    fn wakeups(&self) -> Option<&dyn Wakeups> {
        Some(self)
    }
}

#[async_trait]
impl Membership for RedisStore {
    async fn heartbeat(&self, member: &Member, ttl: Duration) -> Result<()> {
        self.batches
            .heartbeats
            .call(group_us(ttl), member.clone())
            .await
    }

    async fn heartbeat_and_read(
        &self,
        member: &Member,
        ttl: Duration,
    ) -> Result<Option<LeaseRecord>> {
        let fields: Vec<String> = self
            .run(
                self.scripts
                    .heartbeat_read
                    .key(self.key("members", &member.key))
                    .key(self.key("lease", &member.key))
                    .arg(&member.holder)
                    .arg(&member.metadata)
                    .arg(member.priority)
                    .arg(us(ttl)),
            )
            .await?;
        if fields.is_empty() {
            return Ok(None);
        }
        self.record(&member.key, &fields).map(Some)
    }

    async fn leave(&self, key: &ElectionKey, holder: &str) -> Result<bool> {
        let removed: i64 = redis::cmd("HDEL")
            .arg(self.key("members", key))
            .arg(holder)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| self.error(e))?;
        Ok(removed == 1)
    }

    async fn members(&self, key: &ElectionKey) -> Result<Vec<MemberRecord>> {
        let flat: Vec<String> = self
            .run(
                self.scripts
                    .members
                    .key(self.key("members", key))
                    .key(self.key("lease", key)),
            )
            .await?;
        let [now, lease_holder, lease_renewed, lease_expires, rest @ ..] = flat.as_slice() else {
            return Err(self.protocol("a member list without its header".into()));
        };
        let int = |v: &String| -> Result<i64> {
            v.parse()
                .map_err(|_| self.protocol(format!("a server time {v:?}")))
        };
        let now = int(now)?;
        let (lease_renewed, lease_expires) = (int(lease_renewed)?, int(lease_expires)?);
        let mut out = Vec::with_capacity(rest.len() / 2);
        for pair in rest.chunks(2) {
            let [holder, json] = pair else {
                return Err(self.protocol("an odd-length member list".into()));
            };
            let v: serde_json::Value = serde_json::from_str(json)
                .map_err(|_| self.protocol(format!("a member registration {json:?}")))?;
            let expires_at_us = json_i64(&v, "expires_us");
            let mut m = MemberRecord {
                key: key.clone(),
                holder: holder.clone(),
                identity: super::identity_of(holder).to_string(),
                metadata: json_str(&v, "metadata"),
                priority: json_str(&v, "priority").parse().unwrap_or(0),
                joined_at_us: json_i64(&v, "joined_us"),
                heartbeat_at_us: json_i64(&v, "heartbeat_us"),
                expires_at_us,
                live: expires_at_us > now,
            };
            if holder == lease_holder {
                super::vouch_for_holder(&mut m, lease_renewed, lease_expires, now);
            }
            out.push(m);
        }
        super::sort_successors_first(&mut out);
        Ok(out)
    }

    async fn reap(&self, key: &ElectionKey) -> Result<u64> {
        self.batches.reaps.call(0, key.clone()).await
    }
}

#[async_trait]
impl History for RedisStore {
    async fn history(&self, key: &ElectionKey, limit: usize) -> Result<Vec<HistoryRecord>> {
        let all: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(self.key("history", key))
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| self.error(e))?;
        let mut out = Vec::with_capacity(all.len());
        for (term, json) in all {
            let term: u64 = term
                .parse()
                .map_err(|_| self.protocol(format!("a history term {term:?}")))?;
            let v: serde_json::Value = serde_json::from_str(&json)
                .map_err(|_| self.protocol(format!("a history entry {json:?}")))?;
            let end_at_us = json_i64(&v, "end_us");
            out.push(HistoryRecord {
                key: key.clone(),
                term,
                holder: json_str(&v, "holder"),
                start_reason: StartReason::required(&json_str(&v, "start_reason"))
                    .map_err(|e| self.protocol(format!("{e} in a history entry")))?,
                start_at_us: json_i64(&v, "start_us"),
                end_reason: EndReason::from_column(&json_str(&v, "end_reason"))
                    .map_err(|e| self.protocol(format!("{e} in a history entry")))?,
                end_at_us: (end_at_us != 0).then_some(end_at_us),
            });
        }
        out.sort_by_key(|h| std::cmp::Reverse(h.term));
        out.truncate(limit);
        Ok(out)
    }
}

impl Wakeups for RedisStore {
    fn subscribe(&self) -> Option<Changes> {
        self.push.subscribe()
    }

    fn push_health(&self) -> crate::store::PushHealth {
        self.push.health()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_members_round_trip_names_with_colons() {
        for (ns, e) in [("default", "cron"), ("a:b", "c:d"), ("", "x"), ("ns", "")] {
            let key = ElectionKey::new(ns, e);
            assert_eq!(
                RedisStore::parse_member(&RedisStore::member(&key)),
                Some(key)
            );
        }
        assert_eq!(RedisStore::parse_member("99:short"), None);
        assert_eq!(RedisStore::parse_member("x:y"), None);
    }
}
