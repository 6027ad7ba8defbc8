//! `tenure status`: every election with leader, term, since, lease time left.

use std::time::Duration;

use tenure::http::ElectionView;
use tenure::store::{HistoryRecord, LeaseRecord, LeaseStoreExt, MemberRecord, RunRecord};

use crate::args::StatusArgs;
use crate::failure::Failure;
use crate::output::out;

pub async fn status(a: StatusArgs) -> Result<u8, Failure> {
    let key = match &a.election {
        Some(election) => {
            let namespace = a.namespace.as_deref().unwrap_or("default");
            tenure::validate_name("election", election)?;
            tenure::validate_name("namespace", namespace)?;
            Some(tenure::store::ElectionKey::new(
                namespace,
                election.as_str(),
            ))
        }
        None => None,
    };
    let store = a.store.connect_read_only().await?;
    // Opens this process's push channel (where the store opens one on the
    // first subscription), to report below whether pushes get through.
    let _changes = (!a.json).then(|| store.subscribe());
    let records = match &key {
        Some(key) => match store.read(key).await? {
            Some(r) => vec![r],
            // A semaphore (`tenure run --slots`) is its slots' elections.
            None => {
                let slots = slots_of(&*store, key).await?;
                if slots.is_empty() {
                    return Err(Failure::Runtime(format!(
                        "no election {key} in {}: it was never acquired (`tenure status` lists them)",
                        store.describe()
                    )));
                }
                slots
            }
        },
        None => store.list(a.namespace.as_deref()).await?,
    };
    let mut by_election =
        tenure::store::members_of(&*store, &records, a.namespace.as_deref()).await?;
    let mut members = Vec::new();
    let mut histories = Vec::new();
    let mut runs = Vec::new();
    for r in &records {
        members.push(by_election.remove(&r.key).unwrap_or_default());
        histories.push(match a.history {
            Some(n) => store.history(&r.key, n).await?,
            None => Vec::new(),
        });
        runs.push(match (a.history, store.run_records()) {
            (Some(n), Some(records)) => records.list(&r.key, n).await?,
            _ => Vec::new(),
        });
    }
    if a.json {
        // The same type as `GET /v1/elections` answers (tenure::http).
        let rows: Vec<ElectionView> = records
            .iter()
            .zip(members.into_iter().zip(histories))
            .map(|(r, (m, h))| ElectionView::new(r, m, h))
            .collect();
        let text = serde_json::to_string_pretty(&rows)
            .map_err(|e| Failure::Runtime(format!("cannot encode JSON: {e}")))?;
        out!("{text}");
    } else if records.is_empty() {
        out!("no elections in {}", store.describe());
    } else {
        crate::output::write(&render_table(&records))?;
        for (((r, m), h), runs) in records
            .iter()
            .zip(members.iter())
            .zip(histories.iter())
            .zip(runs.iter())
        {
            crate::output::write(&render_members(r, m))?;
            if a.history.is_some() {
                crate::output::write(&render_history(r, h))?;
                crate::output::write(&render_runs(r, runs))?;
            }
        }
    }
    if !a.json {
        out!("push: {}", push_health(&store).await);
        if let Some(line) = connections(&store).await {
            out!("connections: {line}");
        }
        if let Some(line) = pooler(&store) {
            out!("pooler: {line}");
        }
    }
    Ok(0)
}

/// What a SQL store's connections are: how many this command holds, and
/// where the server can tell (PostgreSQL), how many tenure holds on it
/// from every process. `None` for the other stores (one session each).
async fn connections(store: &tenure::store::DynStore) -> Option<String> {
    let sql = store
        .as_any()?
        .downcast_ref::<tenure::store::sql::SqlStore>()?;
    let here = format!("{} held by this command", sql.connections_held());
    Some(match sql.server_connections().await {
        Ok(Some(n)) => format!("{here}; {n} held by tenure on the server (pg_stat_activity, application_name 'tenure', this one included)"),
        Ok(None) => here,
        Err(e) => format!("{here}; the server's count is unavailable: {e}"),
    })
}

/// What a PostgreSQL URL declares of a pooler in between, and where
/// `LISTEN` goes because of it; `None` without one.
fn pooler(store: &tenure::store::DynStore) -> Option<String> {
    store
        .as_any()?
        .downcast_ref::<tenure::store::sql::SqlStore>()?
        .pooler()
}

/// The store's push channel as this process finds it, after waiting (up to
/// the time a connection attempt takes) for its first attempt: what
/// followers on this host would get. Candidates report outages in their
/// own logs (a warning when the channel goes down, once).
async fn push_health(store: &tenure::store::DynStore) -> tenure::store::PushHealth {
    let until = std::time::Instant::now() + Duration::from_secs(3);
    loop {
        let h = store.push_health();
        if !matches!(h, tenure::store::PushHealth::NotOpen { .. })
            || std::time::Instant::now() >= until
        {
            return h;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn ago(now_us: i64, then_us: i64) -> String {
    format!(
        "{} ago",
        short(Duration::from_micros(
            now_us.saturating_sub(then_us).max(0) as u64
        ))
    )
}

fn render_members(r: &LeaseRecord, members: &[MemberRecord]) -> String {
    let mut rows = vec![[
        "ROLE".to_string(),
        "MEMBER".into(),
        "PRIORITY".into(),
        "JOINED".into(),
        "LAST HEARTBEAT".into(),
    ]];
    for m in members {
        let role = if r.live_holder() == Some(m.holder.as_str()) {
            "leader"
        } else if m.live {
            "follower"
        } else {
            "lapsed"
        };
        rows.push([
            role.into(),
            m.holder.clone(),
            m.priority.to_string(),
            ago(r.read_at_us, m.joined_at_us),
            ago(r.read_at_us, m.heartbeat_at_us),
        ]);
    }
    let mut out = format!("\n{} members:\n", r.key);
    if members.is_empty() {
        out.push_str("  (none registered)\n");
        return out;
    }
    out.push_str(&columns(&rows, "  "));
    out
}

fn render_history(r: &LeaseRecord, history: &[HistoryRecord]) -> String {
    let mut rows = vec![[
        "TERM".to_string(),
        "HOLDER".into(),
        "BEGAN".into(),
        "WHY".into(),
        "ENDED".into(),
        "WHY".into(),
    ]];
    for h in history {
        rows.push([
            h.term.to_string(),
            h.holder.clone(),
            timestamp(h.start_at_us),
            h.start_reason.to_string(),
            h.end_at_us.map(timestamp).unwrap_or_else(|| "-".into()),
            h.end_reason.map(|r| r.to_string()).unwrap_or_default(),
        ]);
    }
    let mut out = format!("\n{} recent terms:\n", r.key);
    out.push_str(&columns(&rows, "  "));
    out
}

/// The slots of the semaphore `key` names (`tenure run --slots`), by slot;
/// none when it is no semaphore.
async fn slots_of(
    store: &dyn tenure::store::LeaseStore,
    key: &tenure::store::ElectionKey,
) -> Result<Vec<LeaseRecord>, Failure> {
    let prefix = tenure::slot_election(&key.election, 0);
    let prefix = prefix.trim_end_matches('0');
    let mut slots: Vec<(usize, LeaseRecord)> = store
        .list(Some(&key.namespace))
        .await?
        .into_iter()
        .filter_map(|r| {
            let slot = r.key.election.strip_prefix(prefix)?.parse().ok()?;
            Some((slot, r))
        })
        .collect();
    slots.sort_by_key(|(slot, _)| *slot);
    Ok(slots.into_iter().map(|(_, r)| r).collect())
}

/// The `--once` keys of an election, most recent first; nothing if none.
fn render_runs(r: &LeaseRecord, runs: &[RunRecord]) -> String {
    if runs.is_empty() {
        return String::new();
    }
    let mut rows = vec![["ONCE KEY".to_string(), "UPDATED".into(), "STATE".into()]];
    for run in runs {
        let state = match crate::once::parse(run) {
            Ok(state) => state.describe(),
            Err(_) => format!("unreadable record: {:?}", run.value),
        };
        rows.push([run.name.clone(), timestamp(run.updated_at_us), state]);
    }
    let mut out = format!("\n{} recent --once keys:\n", r.key);
    out.push_str(&columns(&rows, "  "));
    out
}

/// Left-aligned columns, widths from the widest cell.
fn columns<const N: usize>(rows: &[[String; N]], indent: &str) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, c) in widths.iter_mut().zip(row.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(widths.iter())
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(indent);
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// Store-clock microseconds as RFC 3339 UTC with milliseconds.
pub fn timestamp(us: i64) -> String {
    tenure::http::timestamp(us)
}

fn short(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
    }
}

/// A plain-text table of elections.
pub fn render_table(records: &[LeaseRecord]) -> String {
    let header = ["ELECTION", "LEADER", "TERM", "SINCE", "LEASE LEFT"];
    let mut rows: Vec<[String; 5]> = Vec::new();
    for r in records {
        let leader = match (r.live_holder(), &r.holder) {
            (Some(h), _) => h.to_string(),
            (None, Some(h)) => format!("(none; {h} expired)"),
            (None, None) => "(none)".to_string(),
        };
        let since = if r.term == 0 {
            "-".to_string()
        } else {
            let ago =
                Duration::from_micros(r.read_at_us.saturating_sub(r.acquired_at_us).max(0) as u64);
            format!("{} ({} ago)", timestamp(r.acquired_at_us), short(ago))
        };
        let left = if r.is_held() {
            short(r.remaining)
        } else {
            "-".to_string()
        };
        rows.push([r.key.to_string(), leader, r.term.to_string(), since, left]);
    }
    let mut all = vec![header.map(String::from)];
    all.extend(rows);
    columns(&all, "")
}
