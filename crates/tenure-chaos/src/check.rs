//! The history checker. It reads what the candidates logged and what the
//! fenced resource recorded, on the host's shared clock, and checks:
//!
//! 1. one holder per term;
//! 2. terms strictly increase in acquisition order;
//! 3. no two belief intervals (first to last leader-only write of a tenure)
//!    of different terms overlap;
//! 4. no fenced write accepted with a stale term (after a higher term was acquired),
//!    and a replayed renew/release of a stale tenure is refused by the store;
//! 5. `lost()` never fired later than the deadline in force (beyond timer slack);
//! 6. after each fault heals, a leader acts within ttl + retry (+ restart slack);
//! 7. no acquisitions in quiet periods (no flapping).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::history::{read_lines, Event, Fault, Write_};

#[derive(Debug, Serialize)]
pub struct Violation {
    pub check: &'static str,
    pub message: String,
    pub at_s: f64,
    pub excerpt: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub seed: u64,
    pub ttl_ms: f64,
    pub duration_s: f64,
    pub faults_by_kind: BTreeMap<String, usize>,
    pub acquisitions: usize,
    pub handovers: usize,
    pub writes: usize,
    pub rejected_writes: usize,
    pub violations: Vec<Violation>,
    pub heal_ms: Vec<f64>,
    pub heal_p50_ms: Option<f64>,
    pub heal_p99_ms: Option<f64>,
    pub max_lost_late_ms: f64,
    #[serde(skip)]
    pub intervals: Vec<Interval>,
    #[serde(skip)]
    pub faults: Vec<Fault>,
    #[serde(skip)]
    pub start: u64,
    #[serde(skip)]
    pub end: u64,
}

/// One tenure's belief, as seen by its leader-only writes.
#[derive(Clone, Debug)]
pub struct Interval {
    pub cand: String,
    pub inc: u32,
    pub term: u64,
    pub start: u64,
    pub end: u64,
    pub rejected: usize,
}

/// Slack for timer wake-ups under load when judging `lost()`.
const LOST_SLACK: Duration = Duration::from_millis(100);

fn secs(t: u64, start: u64) -> f64 {
    (t as f64 - start as f64) / 1e9
}

pub fn percentile(v: &[f64], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    Some(s[(((s.len() - 1) as f64) * p).round() as usize])
}

pub fn check(
    out: &Path,
    ttl: Duration,
    start: u64,
    end: u64,
    faults: &[Fault],
    seed: u64,
) -> Report {
    let mut events: Vec<Event> = Vec::new();
    if let Ok(dir) = std::fs::read_dir(out) {
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("events-") && name.ends_with(".jsonl") {
                events.extend(read_lines::<Event>(&entry.path()));
            }
        }
    }
    let writes: Vec<Write_> =
        read_lines(&crate::resource::Resource::log_path(&out.join("resource")));
    check_history(&events, &writes, ttl, start, end, faults, seed)
}

/// The checks over a recorded history, wherever it came from: the chaos
/// harness's files ([`check`]) or the deterministic simulation's memory
/// (`crate::sim`). Times are nanoseconds on one shared clock.
pub fn check_history(
    events: &[Event],
    writes: &[Write_],
    ttl: Duration,
    start: u64,
    end: u64,
    faults: &[Fault],
    seed: u64,
) -> Report {
    let ttl_ns = ttl.as_nanos() as u64;
    let mut violations = Vec::new();

    let mut acquisitions: Vec<(u64, u64, String)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Acquired { cand, inc, term, t } => Some((*t, *term, format!("{cand}#{inc}"))),
            _ => None,
        })
        .collect();
    acquisitions.sort();

    // Belief intervals from leader-only writes.
    let mut by_tenure: BTreeMap<(String, u32, u64), Interval> = BTreeMap::new();
    for w in writes {
        let iv = by_tenure
            .entry((w.cand.clone(), w.inc, w.term))
            .or_insert(Interval {
                cand: w.cand.clone(),
                inc: w.inc,
                term: w.term,
                start: w.t,
                end: w.t,
                rejected: 0,
            });
        iv.start = iv.start.min(w.t);
        iv.end = iv.end.max(w.t);
        iv.rejected += (!w.accepted) as usize;
    }
    let mut intervals: Vec<Interval> = by_tenure.into_values().collect();
    intervals.sort_by_key(|i| i.start);

    let excerpt = |t: u64| -> Vec<String> {
        let lo = t.saturating_sub(2 * ttl_ns);
        let hi = t + ttl_ns;
        let mut lines: Vec<(u64, String)> = Vec::new();
        for e in events {
            match e {
                Event::Acquired { cand, inc, term, t } if (lo..=hi).contains(t) => {
                    lines.push((*t, format!("{cand}#{inc} acquired term {term}")));
                }
                Event::Lost {
                    cand, inc, term, t, ..
                } if (lo..=hi).contains(t) => {
                    lines.push((*t, format!("{cand}#{inc} lost term {term}")));
                }
                _ => {}
            }
        }
        for i in &intervals {
            if i.end >= lo && i.start <= hi {
                lines.push((
                    i.start,
                    format!(
                        "{}#{} term {} wrote from {:+.3}s to {:+.3}s ({} rejected)",
                        i.cand,
                        i.inc,
                        i.term,
                        secs(i.start, start),
                        secs(i.end, start),
                        i.rejected
                    ),
                ));
            }
        }
        for f in faults {
            if f.heal >= lo && f.start <= hi {
                lines.push((
                    f.start,
                    format!(
                        "FAULT {} on {} until {:+.3}s: {}",
                        f.kind,
                        f.target,
                        secs(f.heal, start),
                        f.detail
                    ),
                ));
            }
        }
        lines.sort();
        lines
            .into_iter()
            .map(|(t, s)| format!("{:+9.3}s  {s}", secs(t, start)))
            .collect()
    };

    // 1. One holder per term.
    let mut holders: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for (_, term, who) in &acquisitions {
        holders.entry(*term).or_default().insert(who.clone());
    }
    for w in writes {
        holders
            .entry(w.term)
            .or_default()
            .insert(format!("{}#{}", w.cand, w.inc));
    }
    for (term, who) in &holders {
        if who.len() > 1 {
            let t = acquisitions
                .iter()
                .find(|a| a.1 == *term)
                .map(|a| a.0)
                .unwrap_or(start);
            violations.push(Violation {
                check: "one holder per term",
                message: format!("term {term} held by {who:?}"),
                at_s: secs(t, start),
                excerpt: excerpt(t),
            });
        }
    }

    // 2. Terms strictly increase in acquisition order.
    for pair in acquisitions.windows(2) {
        if pair[1].1 <= pair[0].1 {
            violations.push(Violation {
                check: "terms increase",
                message: format!(
                    "term {} ({}) acquired after term {} ({})",
                    pair[1].1, pair[1].2, pair[0].1, pair[0].2
                ),
                at_s: secs(pair[1].0, start),
                excerpt: excerpt(pair[1].0),
            });
        }
    }

    // 3. Belief intervals of different terms never overlap.
    let mut widest: Option<&Interval> = None;
    for iv in &intervals {
        if let Some(w) = widest {
            if iv.start < w.end && iv.term != w.term {
                violations.push(Violation {
                    check: "no overlapping leaders",
                    message: format!(
                        "{}#{} (term {}) acted at {:+.3}s while {}#{} (term {}) acted until {:+.3}s: overlap {:.1}ms",
                        iv.cand, iv.inc, iv.term, secs(iv.start, start), w.cand, w.inc, w.term, secs(w.end, start),
                        (w.end - iv.start) as f64 / 1e6
                    ),
                    at_s: secs(iv.start, start),
                    excerpt: excerpt(iv.start),
                });
            }
        }
        if widest.is_none_or(|w| iv.end > w.end) {
            widest = Some(iv);
        }
    }

    // 4. No fenced write accepted under a stale term.
    let mut max_term_by_time: Vec<(u64, u64)> = Vec::new();
    let mut m = 0;
    for (t, term, _) in &acquisitions {
        m = m.max(*term);
        max_term_by_time.push((*t, m));
    }
    for w in writes.iter().filter(|w| w.accepted) {
        let idx = max_term_by_time.partition_point(|(t, _)| *t < w.t);
        if idx > 0 && max_term_by_time[idx - 1].1 > w.term {
            violations.push(Violation {
                check: "no stale fenced write",
                message: format!(
                    "{}#{} wrote under term {} after term {} was acquired",
                    w.cand,
                    w.inc,
                    w.term,
                    max_term_by_time[idx - 1].1
                ),
                at_s: secs(w.t, start),
                excerpt: excerpt(w.t),
            });
            break; // one is enough to fail; the excerpt shows the rest
        }
    }

    // 4b. Replayed statements of stale tenures are refused.
    for f in faults
        .iter()
        .filter(|f| f.kind == "replay" && f.detail.contains("ACCEPTED"))
    {
        violations.push(Violation {
            check: "stale tenure refused",
            message: f.detail.clone(),
            at_s: secs(f.start, start),
            excerpt: excerpt(f.start),
        });
    }

    // 5. lost() not later than the deadline (unless the process was stopped then).
    let mut max_late = 0.0f64;
    for e in events {
        if let Event::Lost {
            cand,
            inc,
            term,
            t,
            lost_ns,
            deadline_ns,
        } = e
        {
            let late = *lost_ns as f64 - *deadline_ns as f64;
            let stopped = faults.iter().any(|f| {
                f.kind == "stop" && &f.target == cand && f.start <= *t && f.heal + 3 * ttl_ns >= *t
            });
            if stopped {
                continue;
            }
            max_late = max_late.max(late / 1e6);
            if late > LOST_SLACK.as_nanos() as f64 {
                violations.push(Violation {
                    check: "loss signal by the deadline",
                    message: format!(
                        "{cand}#{inc} term {term}: lost() fired {:.1}ms after the deadline",
                        late / 1e6
                    ),
                    at_s: secs(*t, start),
                    excerpt: excerpt(*t),
                });
            }
        }
    }

    // 6. A leader soon after each fault heals; 7. no flapping in quiet periods.
    let bound = ttl + ttl / 10 + Duration::from_secs(2);
    let accepted_times: Vec<u64> = {
        let mut v: Vec<u64> = writes.iter().filter(|w| w.accepted).map(|w| w.t).collect();
        v.sort();
        v
    };
    let mut heal_ms = Vec::new();
    let mut sorted_faults: Vec<&Fault> = faults.iter().collect();
    sorted_faults.sort_by_key(|f| f.start);
    for (i, f) in sorted_faults.iter().enumerate() {
        let next = sorted_faults.get(i + 1).map(|n| n.start).unwrap_or(end);
        let idx = accepted_times.partition_point(|t| *t < f.heal);
        match accepted_times.get(idx) {
            Some(t) if *t < next => heal_ms.push((*t - f.heal) as f64 / 1e6),
            _ if next.saturating_sub(f.heal) > bound.as_nanos() as u64 => {
                violations.push(Violation {
                    check: "leader after heal",
                    message: format!(
                        "no leader acted within {:?} after the {} fault healed",
                        Duration::from_nanos(next - f.heal),
                        f.kind
                    ),
                    at_s: secs(f.heal, start),
                    excerpt: excerpt(f.heal),
                })
            }
            _ => {}
        }
        let quiet_from = f.heal + bound.as_nanos() as u64;
        if next > quiet_from && next - f.heal >= 4 * ttl_ns {
            let flaps: Vec<_> = acquisitions
                .iter()
                .filter(|a| a.0 > quiet_from && a.0 < next)
                .collect();
            if let Some(a) = flaps.first() {
                violations.push(Violation {
                    check: "no flapping when quiet",
                    message: format!(
                        "{} acquisition(s) in a quiet period, first term {} by {}",
                        flaps.len(),
                        a.1,
                        a.2
                    ),
                    at_s: secs(a.0, start),
                    excerpt: excerpt(a.0),
                });
            }
        }
    }

    let mut by_kind = BTreeMap::new();
    for f in faults {
        *by_kind.entry(f.kind.clone()).or_insert(0) += 1;
    }
    Report {
        seed,
        ttl_ms: ttl.as_secs_f64() * 1000.0,
        duration_s: secs(end, start),
        faults_by_kind: by_kind,
        acquisitions: acquisitions.len(),
        handovers: acquisitions.len().saturating_sub(1),
        writes: writes.len(),
        rejected_writes: writes.iter().filter(|w| !w.accepted).count(),
        heal_p50_ms: percentile(&heal_ms, 0.5),
        heal_p99_ms: percentile(&heal_ms, 0.99),
        heal_ms,
        violations,
        max_lost_late_ms: max_late,
        intervals,
        faults: faults.to_vec(),
        start,
        end,
    }
}

impl Report {
    /// The reports of a semaphore's slots (each an election of its own,
    /// checked on its own) as one: counts added, violations named by slot.
    pub fn of_slots(reports: Vec<Report>) -> Option<Report> {
        Self::combined(reports, |slot| format!("slot {slot}"))
    }

    /// The reports of several elections of one run, each checked on its own,
    /// as one: counts added, violations named by `name` of their index.
    pub fn combined(reports: Vec<Report>, name: impl Fn(usize) -> String) -> Option<Report> {
        let mut parts = reports.into_iter().enumerate();
        let (_, mut all) = parts.next()?;
        for v in &mut all.violations {
            v.message = format!("{}: {}", name(0), v.message);
        }
        for (i, r) in parts {
            all.acquisitions += r.acquisitions;
            all.handovers += r.handovers;
            all.writes += r.writes;
            all.rejected_writes += r.rejected_writes;
            all.heal_ms.extend(r.heal_ms);
            all.max_lost_late_ms = all.max_lost_late_ms.max(r.max_lost_late_ms);
            all.intervals.extend(r.intervals);
            all.violations.extend(r.violations.into_iter().map(|mut v| {
                v.message = format!("{}: {}", name(i), v.message);
                v
            }));
        }
        all.heal_p50_ms = percentile(&all.heal_ms, 0.5);
        all.heal_p99_ms = percentile(&all.heal_ms, 0.99);
        Some(all)
    }
}
