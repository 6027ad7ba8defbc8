//! Acquire, renew, release, hand over: each decided by one conditional
//! write (a multi-op, or a versioned set/delete).

use std::sync::Arc;
use std::time::Duration;

use zookeeper_client::{Acls, CreateMode, Error as ZkError, MultiWriteError, MultiWriteResult};

use super::clocks;
use super::read::us;
use super::values::{HandoverValue, HistoryValue, LeaderValue, State};
use super::{ms, Inner};
use crate::error::Result;
use crate::store::{identity_of, Acquire, Claim, ElectionKey, Handover, LeaseRecord, Tenure};

/// Whether a multi-op failed on one of its conditions (someone else wrote first).
pub(super) fn lost_race(e: &MultiWriteError) -> bool {
    matches!(
        e,
        MultiWriteError::OperationFailed {
            source: ZkError::NodeExists | ZkError::BadVersion | ZkError::NoNode,
            ..
        }
    )
}

impl Inner {
    pub(super) async fn try_acquire(this: &Arc<Inner>, claim: &Claim) -> Result<Acquire> {
        let key = &claim.key;
        let session = this.session(claim.ttl).await?;
        this.ensure_dir(key).await?;
        // Armed before the acquisition, so a hand-over request cannot be missed.
        Inner::watch(this, key).await;
        for attempt in 0..3 {
            if attempt > 0 {
                // Lost a race, or read a stale server: catch up first.
                this.sync(key).await?;
            }
            let snap = this.snapshot(key).await?;
            // The ZooKeeper leader's clock, read after the snapshot.
            let (now, now_epoch) = this.server_now().await?;
            let mut expired_leader = None;
            if let Some((lv, stat)) = snap.leader() {
                let ttl = Duration::from_millis(lv.ttl_ms);
                let expires = stat.mtime.saturating_mul(1000).saturating_add(us(ttl));
                let seen_for = this.sightings.unchanged_for(key, stat.czxid, stat.version);
                // Only stamps of one ZooKeeper leader compare (`clocks.rs`).
                let expired = if clocks::epoch(stat.mzxid) == now_epoch {
                    expires <= now
                } else {
                    seen_for >= clocks::unchanged_long_enough(ttl)
                };
                if !expired {
                    return Ok(Acquire::Held(this.record(key, &snap, now)?));
                }
                expired_leader = Some((lv, stat.version, expires));
            } else if snap.leader.is_some() {
                return Err(this.protocol(format!(
                    "{} holds data tenure did not write",
                    this.node(key, "leader")
                )));
            }
            if let Some((h, stat)) = snap.handover() {
                let until = stat
                    .ctime
                    .saturating_mul(1000)
                    .saturating_add(i64::try_from(h.window_ms).unwrap_or(0).saturating_mul(1000));
                let open_to_us = h.to == "*" || h.to == identity_of(&claim.holder);
                if until > now && !open_to_us {
                    return Ok(Acquire::Held(this.record(key, &snap, now)?));
                }
            }
            let prev = snap.state();
            let prev_term = prev.as_ref().map(|s| s.term).unwrap_or(0);
            let term_version = snap.term.as_ref().map(|(_, s)| s.version);
            let term = match term_version {
                Some(v) => u64::try_from(v).unwrap_or(0) + 1,
                None if prev_term > 0 => {
                    return Err(this.protocol(format!(
                        "the term counter {} is missing but the state says term {prev_term}: \
                         someone deleted part of the store's tree",
                        this.node(key, "term")
                    )))
                }
                None => 1,
            };
            let (start_reason, previous_holder, previous_expires) = match (&expired_leader, &prev) {
                (Some((lv, _, exp)), _) => ("expiry".to_string(), Some(lv.holder.clone()), *exp),
                (None, None) => ("first".to_string(), None, 0),
                (None, Some(s)) if s.holder.is_some() && s.end_reason.is_empty() => {
                    // Its session expired and took the leader znode.
                    ("expiry".to_string(), s.holder.clone(), now)
                }
                (None, Some(s)) if s.end_reason == "released" => {
                    ("release".to_string(), None, s.ended_at_us)
                }
                (None, Some(s)) => (s.end_reason.clone(), None, s.ended_at_us),
            };
            let lv = LeaderValue {
                holder: claim.holder.clone(),
                term,
                metadata: claim.metadata.clone(),
                ttl_ms: ms(claim.ttl),
                handover: None,
            };
            let state = State {
                term,
                holder: Some(claim.holder.clone()),
                metadata: claim.metadata.clone(),
                ttl_ms: ms(claim.ttl),
                start_reason: start_reason.clone(),
                previous_holder: previous_holder.clone(),
                previous_expires_at_us: previous_expires,
                end_reason: String::new(),
                ended_at_us: 0,
            };
            let history = HistoryValue {
                holder: claim.holder.clone(),
                start_reason: start_reason.clone(),
                start_at_us: now,
                end_reason: String::new(),
                end_at_us: None,
            };
            let json = |v: &dyn erased::Json| v.to_json().map_err(|e| this.protocol(e));
            let (lv_b, st_b, h_b) = (json(&lv)?, json(&state)?, json(&history)?);
            let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
            let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
            let leader_path = this.node(key, "leader");
            let term_path = this.node(key, "term");
            let state_path = this.node(key, "state");
            let handover_path = this.node(key, "handover");
            let history_path = this.history_path(key, term);
            let mut w = session.new_multi_writer();
            let add =
                |r: std::result::Result<(), ZkError>| r.map_err(|e| this.map(&leader_path, e));
            if let Some((_, version, _)) = &expired_leader {
                add(w.add_delete(&leader_path, Some(*version)))?;
            }
            if let Some((_, stat)) = &snap.handover {
                add(w.add_delete(&handover_path, Some(stat.version)))?;
            }
            let term_op = match term_version {
                Some(v) => v,
                None => {
                    add(w.add_create(&term_path, b"", &persistent))?;
                    0
                }
            };
            add(w.add_set_data(&term_path, b"", Some(term_op)))?;
            add(w.add_create(&leader_path, &lv_b, &ephemeral))?;
            match &snap.state {
                Some((_, stat)) => add(w.add_set_data(&state_path, &st_b, Some(stat.version)))?,
                None => add(w.add_create(&state_path, &st_b, &persistent))?,
            }
            add(w.add_create(&history_path, &h_b, &persistent))?;
            let results = match w.commit().await {
                Ok(r) => r,
                Err(e) if lost_race(&e) => continue,
                Err(e) => return Err(this.map(&leader_path, e.into())),
            };
            // Every op of a multi-op shares one transaction time.
            let at = results
                .iter()
                .find_map(|r| match r {
                    MultiWriteResult::SetData { stat } => Some(stat.mtime),
                    _ => None,
                })
                .map(|t| t.saturating_mul(1000))
                .unwrap_or(now);
            if let Some((lv, _, exp)) = &expired_leader {
                this.close_history(key, lv.term, "expired", *exp).await;
            } else if previous_holder.is_some() && prev_term > 0 {
                this.close_history(key, prev_term, "expired", now).await;
            }
            this.prune_history(key, term).await;
            return Ok(Acquire::Acquired(LeaseRecord {
                key: key.clone(),
                holder: Some(claim.holder.clone()),
                metadata: claim.metadata.clone(),
                term,
                version: results
                    .iter()
                    .find_map(|r| match r {
                        MultiWriteResult::SetData { stat } => u64::try_from(stat.mzxid).ok(),
                        _ => None,
                    })
                    .unwrap_or(0),
                ttl: claim.ttl,
                acquired_at_us: at,
                renewed_at_us: at,
                expires_at_us: at.saturating_add(us(claim.ttl)),
                read_at_us: at,
                remaining: claim.ttl,
                handover: None,
                handover_until_us: 0,
                start_reason: crate::store::StartReason::from_column(&start_reason)
                    .ok()
                    .flatten(),
                previous_holder,
                previous_expires_at_us: previous_expires,
            }));
        }
        let snap = this.snapshot(key).await?;
        let now = this.server_now_us().await?;
        Ok(Acquire::Held(this.record(key, &snap, now)?))
    }

    pub(super) async fn renew(&self, tenure: &Tenure, ttl: Duration) -> Result<bool> {
        self.rewrite_leader(tenure, Some(ttl), None).await
    }

    /// A holder's new metadata on its live leader znode.
    pub(super) async fn proclaim(&self, tenure: &Tenure, metadata: &str) -> Result<bool> {
        self.rewrite_leader(tenure, None, Some(metadata)).await
    }

    /// Rewrites `tenure`'s leader znode from the holder's own session,
    /// conditional on the version read: as it is (a renewal, whose `ttl`
    /// picks the session; refused while a hand-over is asked for), or with
    /// new metadata (on the session of the znode's own TTL). Either write
    /// moves `mtime`, the renewal time by the ensemble's clock.
    async fn rewrite_leader(
        &self,
        tenure: &Tenure,
        ttl: Option<Duration>,
        metadata: Option<&str>,
    ) -> Result<bool> {
        let path = self.node(&tenure.key, "leader");
        let session = match ttl {
            Some(ttl) => self.session(ttl).await?,
            None => {
                // The holder's session is the one of its TTL, read first.
                let main = self.main().await?;
                let data = match main.get_data(&path).await {
                    Ok((data, _)) => data,
                    Err(ZkError::NoNode) => return Ok(false),
                    Err(e) => return Err(self.map(&path, e)),
                };
                let Ok(lv) = serde_json::from_slice::<LeaderValue>(&data) else {
                    return Ok(false);
                };
                self.session(Duration::from_millis(lv.ttl_ms)).await?
            }
        };
        let (data, stat) = match session.get_data(&path).await {
            Ok(r) => r,
            Err(ZkError::NoNode) => return Ok(false),
            Err(e) => return Err(self.map(&path, e)),
        };
        let Ok(mut lv) = serde_json::from_slice::<LeaderValue>(&data) else {
            return Ok(false);
        };
        if lv.holder != tenure.holder
            || lv.term != tenure.term
            || (metadata.is_none() && lv.handover.is_some())
            || stat.ephemeral_owner != session.session_id().0
        {
            return Ok(false);
        }
        let data = match metadata {
            None => data,
            Some(metadata) => {
                lv.metadata = metadata.to_string();
                serde_json::to_vec(&lv).map_err(|e| self.protocol(e.to_string()))?
            }
        };
        // From the holder's own session: its answer proves the ensemble
        // heard the session after the elector's t0.
        let new = match session.set_data(&path, &data, Some(stat.version)).await {
            Ok(s) => s,
            Err(ZkError::NoNode | ZkError::BadVersion) => return Ok(false),
            Err(e) => return Err(self.map(&path, e)),
        };
        let expired_at = stat
            .mtime
            .saturating_add(i64::try_from(lv.ttl_ms).unwrap_or(i64::MAX / 2));
        // Only stamps of one ZooKeeper leader compare (`clocks.rs`): across
        // a leader change this write counts as in time. Had an acquirer
        // taken the lease meanwhile, this versioned write would have failed.
        if clocks::epoch(new.mzxid) == clocks::epoch(stat.mzxid) && new.mtime >= expired_at {
            // The lease had expired by the ZooKeeper leader's clock before
            // this write: it ends here instead (a comeback is a new term).
            let _ = self.end(tenure, None).await;
            return Ok(false);
        }
        Ok(true)
    }

    /// Ends `tenure` (release, or hand-over with target, window and reason)
    /// in one multi-op conditional on the leader znode's version.
    pub(super) async fn end(
        &self,
        tenure: &Tenure,
        handover: Option<(&Handover, Duration, &str)>,
    ) -> Result<bool> {
        let key = &tenure.key;
        let c = self.main().await?;
        self.sync(key).await?;
        let snap = self.snapshot(key).await?;
        // Each refusal says why at debug level: they look alike to the caller.
        let Some((lv, stat)) = snap.leader() else {
            tracing::debug!(election = %key, term = tenure.term, "not ended: no leader node");
            return Ok(false);
        };
        if lv.holder != tenure.holder || lv.term != tenure.term {
            tracing::debug!(
                election = %key,
                term = tenure.term,
                found_term = lv.term,
                same_holder = lv.holder == tenure.holder,
                "not ended: the leader node names another tenure"
            );
            return Ok(false);
        }
        let now = self.server_now_us().await?;
        let reason = handover.map_or("released", |(_, _, r)| r).to_string();
        let mut state = snap.state().unwrap_or_default();
        state.term = tenure.term;
        state.holder = None;
        state.metadata = String::new();
        state.end_reason = reason.clone();
        state.ended_at_us = now;
        let st_b = serde_json::to_vec(&state).map_err(|e| self.protocol(e.to_string()))?;
        let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
        let leader_path = self.node(key, "leader");
        let state_path = self.node(key, "state");
        let handover_path = self.node(key, "handover");
        let mut w = c.new_multi_writer();
        let add = |r: std::result::Result<(), ZkError>| r.map_err(|e| self.map(&leader_path, e));
        add(w.add_delete(&leader_path, Some(stat.version)))?;
        match &snap.state {
            Some((_, s)) => add(w.add_set_data(&state_path, &st_b, Some(s.version)))?,
            None => add(w.add_create(&state_path, &st_b, &persistent))?,
        }
        if let Some((_, s)) = &snap.handover {
            add(w.add_delete(&handover_path, Some(s.version)))?;
        }
        if let Some((to, window, reason)) = handover {
            let h = HandoverValue {
                to: to.column().to_string(),
                reason: reason.to_string(),
                window_ms: ms(window),
            };
            let h = serde_json::to_vec(&h).map_err(|e| self.protocol(e.to_string()))?;
            add(w.add_create(&handover_path, &h, &persistent))?;
        }
        match w.commit().await {
            Ok(_) => {}
            Err(e) if lost_race(&e) => {
                tracing::debug!(
                    election = %key,
                    term = tenure.term,
                    "not ended: the nodes changed since they were read ({e})"
                );
                return Ok(false);
            }
            Err(e) => return Err(self.map(&leader_path, e.into())),
        }
        self.close_history(key, tenure.term, &reason, now).await;
        Ok(true)
    }

    pub(super) async fn request_handover(
        &self,
        key: &ElectionKey,
        to: &Handover,
        window: Duration,
        reason: &str,
    ) -> Result<Option<LeaseRecord>> {
        let c = self.main().await?;
        let path = self.node(key, "leader");
        self.sync(key).await?;
        for _ in 0..3 {
            let (data, stat) = match c.get_data(&path).await {
                Ok(r) => r,
                Err(ZkError::NoNode) => return Ok(None),
                Err(e) => return Err(self.map(&path, e)),
            };
            let mut lv: LeaderValue =
                serde_json::from_slice(&data).map_err(|e| self.protocol(format!("{path}: {e}")))?;
            lv.handover = Some(HandoverValue {
                to: to.column().to_string(),
                reason: reason.to_string(),
                window_ms: ms(window),
            });
            let b = serde_json::to_vec(&lv).map_err(|e| self.protocol(e.to_string()))?;
            match c.set_data(&path, &b, Some(stat.version)).await {
                Ok(_) => return self.read(key).await,
                Err(ZkError::BadVersion) => continue,
                Err(ZkError::NoNode) => return Ok(None),
                Err(e) => return Err(self.map(&path, e)),
            }
        }
        Err(crate::error::Error::Unavailable {
            store: self.described.clone(),
            reason: "the lease kept changing during a hand-over request".into(),
            source: None,
        })
    }
}

/// Serialising the three values through one closure.
mod erased {
    pub(super) trait Json {
        fn to_json(&self) -> Result<Vec<u8>, String>;
    }
    impl<T: serde::Serialize> Json for T {
        fn to_json(&self) -> Result<Vec<u8>, String> {
            serde_json::to_vec(self).map_err(|e| e.to_string())
        }
    }
}
