//! Members: one ephemeral znode each, on the process's main session (gone
//! when that session expires), live while its last heartbeat (`mtime`) is within its TTL by
//! the ZooKeeper leader's clock.

use std::time::Duration;

use zookeeper_client::{Acls, CreateMode, Error as ZkError, MultiReadResult};

use super::paths::unseg;
use super::read::us;
use super::values::MemberValue;
use super::{ms, Inner};
use crate::error::Result;
use crate::store::{identity_of, sort_successors_first, ElectionKey, Member, MemberRecord};

impl Inner {
    pub(super) async fn heartbeat(&self, member: &Member, ttl: Duration) -> Result<()> {
        // On the session the process holds anyway: liveness is the
        // heartbeat's `mtime`, so the znode's session only decides when a
        // dead member's znode is cleaned up; a session of the member TTL's
        // own would cost every replica one more connection.
        let session = self.main().await?;
        self.ensure_dir(&member.key).await?;
        let path = self.member_path(&member.key, &member.holder);
        let v = MemberValue {
            metadata: member.metadata.clone(),
            priority: member.priority,
            ttl_ms: ms(ttl),
        };
        let b = serde_json::to_vec(&v).map_err(|e| self.protocol(e.to_string()))?;
        let opts = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        for _ in 0..3 {
            match session.set_data(&path, &b, None).await {
                Ok(_) => return Ok(()),
                Err(ZkError::NoNode) => {}
                Err(e) => return Err(self.map(&path, e)),
            }
            match session.create(&path, &b, &opts).await {
                Ok(_) => return Ok(()),
                Err(ZkError::NodeExists) => continue,
                Err(e) => return Err(self.map(&path, e)),
            }
        }
        Err(self.protocol(format!("{path} kept appearing and vanishing")))
    }

    pub(super) async fn leave(&self, key: &ElectionKey, holder: &str) -> Result<bool> {
        let c = self.main().await?;
        let path = self.member_path(key, holder);
        match c.delete(&path, None).await {
            Ok(()) => Ok(true),
            Err(ZkError::NoNode) => Ok(false),
            Err(e) => Err(self.map(&path, e)),
        }
    }

    /// Every member with its znode's version, judged live at the server's `now`.
    async fn member_nodes(&self, key: &ElectionKey) -> Result<Vec<(MemberRecord, i32)>> {
        let c = self.main().await?;
        let dir = format!("{}/members", self.dir(key));
        let names = match c.list_children(&dir).await {
            Ok(n) => n,
            Err(ZkError::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(self.map(&dir, e)),
        };
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.server_now_us().await?;
        let mut r = c.new_multi_reader();
        for n in &names {
            r.add_get_data(&format!("{dir}/{n}"))
                .map_err(|e| self.map(&dir, e))?;
        }
        let res = r.commit().await.map_err(|e| self.map(&dir, e))?;
        let mut out = Vec::with_capacity(names.len());
        for (n, r) in names.iter().zip(res) {
            let MultiReadResult::Data { data, stat } = r else {
                continue; // left in between
            };
            let Ok(v) = serde_json::from_slice::<MemberValue>(&data) else {
                continue;
            };
            let holder = unseg(n);
            let heartbeat = stat.mtime.saturating_mul(1000);
            let expires = heartbeat.saturating_add(us(Duration::from_millis(v.ttl_ms)));
            out.push((
                MemberRecord {
                    key: key.clone(),
                    identity: identity_of(&holder).to_string(),
                    holder,
                    metadata: v.metadata,
                    priority: v.priority,
                    joined_at_us: stat.ctime.saturating_mul(1000),
                    heartbeat_at_us: heartbeat,
                    expires_at_us: expires,
                    live: expires > now,
                },
                stat.version,
            ));
        }
        Ok(out)
    }

    pub(super) async fn members(&self, key: &ElectionKey) -> Result<Vec<MemberRecord>> {
        let mut m: Vec<MemberRecord> = self
            .member_nodes(key)
            .await?
            .into_iter()
            .map(|(m, _)| m)
            .collect();
        sort_successors_first(&mut m);
        Ok(m)
    }

    pub(super) async fn reap(&self, key: &ElectionKey) -> Result<u64> {
        let c = self.main().await?;
        let mut n = 0;
        for (m, version) in self.member_nodes(key).await? {
            if m.live {
                continue;
            }
            let path = self.member_path(key, &m.holder);
            // Conditional on the version: a heartbeat in between keeps it.
            match c.delete(&path, Some(version)).await {
                Ok(()) => n += 1,
                Err(ZkError::NoNode | ZkError::BadVersion) => {}
                Err(e) => return Err(self.map(&path, e)),
            }
        }
        Ok(n)
    }
}
