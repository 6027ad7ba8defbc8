//! `tenure run --once KEY`: the job runs until one run succeeds for KEY,
//! across all replicas, with failover.
//!
//! The store keeps one run record per election and KEY
//! ([`tenure::store::RunRecords`]), written by compare-and-set on its
//! version. A leader reads it before starting the job: done (or given up)
//! means it exits without running; otherwise it writes the attempt it
//! starts, runs the job, and writes the outcome before it lets the lease go.
//! Followers read it whenever leadership moves, so a success ends every
//! waiting replica within milliseconds of the runner's release.
//!
//! "Once" is at least once per KEY until a success: a runner that dies (or
//! loses its lease) mid-job leaves the attempt open, and the next leader
//! runs the job again. A job that must not repeat its effects fences them
//! with `TENURE_TERM` and `TENURE_ATTEMPT`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tenure::store::{DynStore, ElectionKey, RunRecord};
use tenure::Leadership;

use crate::failure::Failure;

/// Where KEY's runs stand, as the record's value says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// An attempt was started and has not reported (it runs, or its runner died).
    Running,
    /// The last attempt failed; the next leader tries again.
    Failed,
    /// An attempt succeeded: nobody runs the job for this KEY again.
    Done,
    /// `--attempts` ran out: nobody runs it again, every replica fails.
    GaveUp,
}

/// The record's value (JSON).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunState {
    pub outcome: Outcome,
    /// Attempts started so far, over all replicas.
    pub attempts: u32,
    /// The term of the last attempt.
    pub term: u64,
    /// The holder id of the last attempt's runner.
    pub holder: String,
    /// When the outcome was written (the writer's wall clock, ms since the epoch).
    pub at_ms: u64,
    /// The last attempt's exit code, once it ended.
    pub code: Option<u8>,
}

impl RunState {
    /// The exit code every replica reports once KEY is settled; `None`
    /// while the job may still (or again) run.
    pub fn settled_code(&self) -> Option<u8> {
        match self.outcome {
            Outcome::Done => Some(0),
            Outcome::GaveUp => Some(self.code.filter(|c| *c != 0).unwrap_or(1)),
            Outcome::Running | Outcome::Failed => None,
        }
    }

    /// One line for the log and `tenure status`.
    pub fn describe(&self) -> String {
        let at = humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(self.at_ms));
        let who = tenure::store::identity_of(&self.holder);
        match self.outcome {
            Outcome::Done => format!(
                "done by {who} at {at} under term {} (attempt {})",
                self.term, self.attempts
            ),
            Outcome::GaveUp => format!(
                "gave up after {} attempts; the last, by {who} under term {}, exited {}",
                self.attempts,
                self.term,
                self.code.unwrap_or(1)
            ),
            Outcome::Failed => format!(
                "attempt {} by {who} under term {} exited {} at {at}; the next leader tries again",
                self.attempts,
                self.term,
                self.code.unwrap_or(1)
            ),
            Outcome::Running => format!(
                "attempt {} started by {who} under term {} at {at}",
                self.attempts, self.term
            ),
        }
    }
}

/// Parses a record's value; a value this version cannot read is an error
/// naming the record (never read as "not done", which would run the job again).
pub fn parse(record: &RunRecord) -> Result<RunState, Failure> {
    serde_json::from_str(&record.value).map_err(|e| {
        Failure::Runtime(format!(
            "the run record {:?} of {} cannot be read ({e}); delete it from the store or use another --once key",
            record.name, record.key
        ))
    })
}

/// What the leader is to do.
pub enum Begin {
    /// Run the job as this attempt (from 1).
    Run(Attempt),
    /// KEY is settled: exit with this code without running.
    Settled(u8),
}

/// A started attempt, to be finished with its outcome.
pub struct Attempt {
    pub number: u32,
    version: u64,
    state: RunState,
}

/// One replica's `--once KEY`.
pub struct Once {
    store: DynStore,
    key: ElectionKey,
    name: String,
    attempts: Option<u32>,
    keep: Duration,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Once {
    /// Checks that the store keeps run records and the KEY is a valid name.
    pub fn new(
        store: DynStore,
        key: ElectionKey,
        name: String,
        attempts: Option<u32>,
        keep: Duration,
    ) -> Result<Self, Failure> {
        if store.run_records().is_none() {
            return Err(Failure::Usage(format!(
                "--once: {} keeps no run records",
                store.describe()
            )));
        }
        tenure::validate_name("--once key", &name).map_err(|e| Failure::Usage(e.to_string()))?;
        if attempts == Some(0) {
            return Err(Failure::Usage(
                "--attempts 0 would never run the command; use 1 or more".into(),
            ));
        }
        Ok(Self {
            store,
            key,
            name,
            attempts,
            keep,
        })
    }

    fn records(&self) -> Result<&dyn tenure::store::RunRecords, Failure> {
        self.store.run_records().ok_or_else(|| {
            Failure::Runtime(format!("{} keeps no run records", self.store.describe()))
        })
    }

    /// The record as it stands, if KEY has one.
    pub async fn read(&self) -> Result<Option<(RunState, u64)>, Failure> {
        match self.records()?.get(&self.key, &self.name).await? {
            Some(r) => Ok(Some((parse(&r)?, r.version))),
            None => Ok(None),
        }
    }

    /// The code to exit with if KEY is settled, logging by whom.
    pub async fn settled(&self) -> Result<Option<u8>, Failure> {
        Ok(match self.read().await? {
            Some((state, _)) => self.settled_code(&state),
            None => None,
        })
    }

    /// `state`'s settled code, logged as the reason not to run the command.
    fn settled_code(&self, state: &RunState) -> Option<u8> {
        state.settled_code().inspect(|code| {
            tracing::info!(once = %self.name, code, "{}; not running the command", state.describe())
        })
    }

    /// As leader: settled, or the attempt to run (written before the job starts).
    pub async fn begin(&self, leadership: &Leadership) -> Result<Begin, Failure> {
        loop {
            let current = self.read().await?;
            let (prior, version) = match current {
                Some((state, version)) => {
                    if let Some(code) = self.settled_code(&state) {
                        return Ok(Begin::Settled(code));
                    }
                    if state.outcome == Outcome::Running {
                        tracing::warn!(once = %self.name, "{}, and never reported: its runner died or lost its lease; running it again", state.describe());
                    }
                    (Some(state), version)
                }
                None => (None, 0),
            };
            let done_so_far = prior.as_ref().map_or(0, |s| s.attempts);
            if self.attempts.is_some_and(|max| done_so_far >= max) {
                // An attempt whose runner never reported used the last one.
                let mut state = prior.unwrap_or_else(|| self.state(leadership, 0));
                state.outcome = Outcome::GaveUp;
                state.at_ms = now_ms();
                match self.write(&state, version).await? {
                    Some(_) => {
                        tracing::warn!(once = %self.name, "{}", state.describe());
                        return Ok(Begin::Settled(state.settled_code().unwrap_or(1)));
                    }
                    None => continue,
                }
            }
            let mut state = self.state(leadership, done_so_far + 1);
            state.outcome = Outcome::Running;
            if let Some(version) = self.write(&state, version).await? {
                return Ok(Begin::Run(Attempt {
                    number: state.attempts,
                    version,
                    state,
                }));
            }
            // Another replica wrote first (a stale leader): read again.
        }
    }

    /// Records how `attempt` ended; returns the code to exit with if KEY is
    /// now settled, `None` if the job is to be tried again.
    pub async fn finish(&self, attempt: Attempt, code: u8) -> Result<Option<u8>, Failure> {
        let mut state = attempt.state;
        state.code = Some(code);
        state.at_ms = now_ms();
        state.outcome = if code == 0 {
            Outcome::Done
        } else if self.attempts.is_some_and(|max| state.attempts >= max) {
            Outcome::GaveUp
        } else {
            Outcome::Failed
        };
        match self.write(&state, attempt.version).await? {
            Some(_) => {
                match state.outcome {
                    Outcome::Done => tracing::info!(once = %self.name, "{}", state.describe()),
                    _ => tracing::warn!(once = %self.name, "{}", state.describe()),
                }
                Ok(state.settled_code())
            }
            None => {
                // A newer attempt took over while this one ran (this
                // replica's lease lapsed): its outcome stands.
                tracing::warn!(once = %self.name, code, "another attempt was started while this one ran; its record stands");
                self.settled().await
            }
        }
    }

    fn state(&self, leadership: &Leadership, attempts: u32) -> RunState {
        RunState {
            outcome: Outcome::Running,
            attempts,
            term: leadership.term(),
            holder: leadership.holder_id().to_string(),
            at_ms: now_ms(),
            code: None,
        }
    }

    /// Writes `state` over `version`; the new version, or `None` if the
    /// record had moved on.
    async fn write(&self, state: &RunState, version: u64) -> Result<Option<u64>, Failure> {
        let value = serde_json::to_string(state)
            .map_err(|e| Failure::Runtime(format!("cannot encode the run record: {e}")))?;
        let written = self
            .records()?
            .put(&self.key, &self.name, &value, version, self.keep)
            .await?;
        Ok(written.map(|r| r.version))
    }
}
