//! The [`Semaphore`]: up to N leaders at once, each with its own slot.
//!
//! A semaphore of N slots is N elections (`{election}.slot-0` to
//! `{election}.slot-{N-1}`, see [`slot_election`]), and a candidate
//! campaigns for all of them with one elector each. Each slot is a lease
//! like any other: its own term (the fencing token of the work under it),
//! the same succession, hand-over, preemption and step-down rules, on every
//! store. So at most N tenures run at once, whatever fails: never N + 1.
//!
//! One candidate holds one slot at a time: its electors share a gate
//! (reserved before an acquisition is sent, held while a slot is), and
//! while one slot is held the others stand aside, out of their member lists
//! so that no succession waits for them. A fleet of M ≥ N candidates
//! therefore runs N different candidates' work.

mod gate;

pub(crate) use gate::Seat;

use std::ops::Deref;

use futures_util::future::select_all;

use crate::elector::{Elector, ElectorBuilder};
use crate::error::{Error, Result};
use crate::leadership::Leadership;

/// Most slots one semaphore may have: each slot is an election with an
/// elector in every candidate.
pub const MAX_SLOTS: usize = 64;

/// The election that slot `slot` of the semaphore `election` runs as:
/// `{election}.slot-{slot}`, counted from 0.
///
/// ```
/// assert_eq!(tenure::slot_election("workers", 1), "workers.slot-1");
/// ```
pub fn slot_election(election: &str, slot: usize) -> String {
    format!("{election}.slot-{slot}")
}

/// Up to N leaders at once: one candidate's place in a semaphore of N slots.
///
/// Built by [`ElectorBuilder::build_semaphore`] from the settings an
/// [`Elector`] would have (the election name is the semaphore's). A handle:
/// clones speak for the same candidate.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// let store = tenure::store::connect("memory://", &Default::default()).await?;
/// let workers = tenure::Elector::builder(store)
///     .election("workers")
///     .build_semaphore(3)?;
/// let permit = workers.acquired().await?;
/// // Work under slot `permit.slot()` (0, 1 or 2), fenced by `permit.term()`.
/// assert!(permit.slot() < 3);
/// workers.shutdown().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Semaphore {
    election: String,
    electors: std::sync::Arc<[Elector]>,
}

/// One slot held: the slot's number and its tenure (a [`Leadership`], which
/// the permit dereferences to).
#[derive(Clone, Debug)]
pub struct Permit {
    slot: usize,
    leadership: Leadership,
}

impl Permit {
    /// The slot, from 0.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// The slot's tenure.
    pub fn leadership(&self) -> &Leadership {
        &self.leadership
    }

    /// The slot's tenure, owned.
    pub fn into_leadership(self) -> Leadership {
        self.leadership
    }
}

impl Deref for Permit {
    type Target = Leadership;

    fn deref(&self) -> &Leadership {
        &self.leadership
    }
}

impl ElectorBuilder {
    /// Builds a [`Semaphore`] of `slots` slots (1 to [`MAX_SLOTS`]) rather
    /// than an elector: every slot is the election
    /// [`slot_election`]`(election, slot)`, campaigned for with these
    /// settings, and this candidate holds at most one slot at a time.
    pub fn build_semaphore(self, slots: usize) -> Result<Semaphore> {
        if slots == 0 || slots > MAX_SLOTS {
            return Err(Error::config(
                "slots",
                format!("{slots} is out of range; use 1 to {MAX_SLOTS}"),
            ));
        }
        let election = self.request.election.clone().ok_or_else(|| {
            Error::config("election", "is required (e.g. .election(\"workers\"))")
        })?;
        crate::names::validate_name("election", &slot_election(&election, slots - 1))?;
        let gate = gate::Gate::new();
        let session = crate::config::random_session();
        let mut electors = Vec::with_capacity(slots);
        for slot in 0..slots {
            let mut builder = self.clone().election(slot_election(&election, slot));
            builder.request.session = Some(session.clone());
            builder.seat = Some(Seat {
                gate: gate.clone(),
                slot,
            });
            // On an error the slots built so far are dropped, which stops them.
            let elector = builder.build()?;
            gate.seat(elector.shared());
            electors.push(elector);
        }
        Ok(Semaphore {
            election,
            electors: electors.into(),
        })
    }
}

impl Semaphore {
    /// The semaphore's name (its slots are [`slot_election`]s of it).
    pub fn election(&self) -> &str {
        &self.election
    }

    /// How many slots it has.
    pub fn slots(&self) -> usize {
        self.electors.len()
    }

    /// The elector of each slot, by slot.
    pub fn electors(&self) -> &[Elector] {
        &self.electors
    }

    /// This candidate's holder id, the same in every slot.
    pub fn holder_id(&self) -> &str {
        self.electors[0].holder_id()
    }

    /// The slot this candidate holds now, if any (not once it is stepping down).
    pub fn current(&self) -> Option<Permit> {
        self.electors
            .iter()
            .enumerate()
            .find_map(|(slot, e)| e.current().map(|leadership| Permit { slot, leadership }))
    }

    /// Waits until this candidate holds a slot. Errors with
    /// [`Error::Shutdown`] once the semaphore has shut down.
    pub async fn acquired(&self) -> Result<Permit> {
        let waits = self.electors.iter().map(|e| Box::pin(e.acquired()));
        let (leadership, slot, _) = select_all(waits).await;
        Ok(Permit {
            slot,
            leadership: leadership?,
        })
    }

    /// Hands the held slot over, as [`Elector::resign`] does;
    /// [`Error::NotLeader`] when no slot is held.
    pub async fn resign(&self) -> Result<()> {
        match self.electors.iter().find(|e| e.is_leader()) {
            Some(e) => e.resign().await,
            None => Err(Error::NotLeader {
                election: format!(
                    "{}/{}",
                    self.electors[0].election().namespace,
                    self.election
                ),
            }),
        }
    }

    /// Shuts every slot's elector down (releasing the held slot), as
    /// [`Elector::shutdown`] does; the first error, if any.
    pub async fn shutdown(&self) -> Result<()> {
        let all = self.electors.iter().map(|e| e.shutdown());
        futures_util::future::join_all(all)
            .await
            .into_iter()
            .collect::<Result<Vec<()>>>()
            .map(|_| ())
    }
}
