//! What `tenure run` campaigns with: one election, or the slots of a
//! semaphore (`--slots N`), behind one interface.

use tenure::{Elector, Leadership, Semaphore};

/// One election's elector, or a semaphore's.
#[derive(Clone, Debug)]
pub enum Candidacy {
    One(Elector),
    Slots(Semaphore),
}

/// A tenure this replica holds: the elector it belongs to (for a
/// semaphore, its slot's), the tenure, and the slot.
pub struct Held {
    pub elector: Elector,
    pub leadership: Leadership,
    pub slot: Option<u32>,
}

impl Candidacy {
    /// The electors: one, or one per slot.
    pub fn electors(&self) -> &[Elector] {
        match self {
            Candidacy::One(e) => std::slice::from_ref(e),
            Candidacy::Slots(s) => s.electors(),
        }
    }

    /// This replica's holder id (the same in every slot).
    pub fn holder_id(&self) -> &str {
        self.electors()[0].holder_id()
    }

    /// The elector the HTTP API serves as this replica's own (one election only).
    pub fn single(&self) -> Option<Elector> {
        match self {
            Candidacy::One(e) => Some(e.clone()),
            Candidacy::Slots(_) => None,
        }
    }

    /// The tenure held now, if any.
    pub fn current(&self) -> Option<Held> {
        match self {
            Candidacy::One(e) => e.current().map(|leadership| Held {
                elector: e.clone(),
                leadership,
                slot: None,
            }),
            Candidacy::Slots(s) => s.current().map(|p| held_slot(s, p)),
        }
    }

    /// Waits until this replica holds a tenure.
    pub async fn acquired(&self) -> tenure::Result<Held> {
        match self {
            Candidacy::One(e) => Ok(Held {
                elector: e.clone(),
                leadership: e.acquired().await?,
                slot: None,
            }),
            Candidacy::Slots(s) => Ok(held_slot(s, s.acquired().await?)),
        }
    }

    /// Stops campaigning, releasing what is held.
    pub async fn shutdown(&self) -> tenure::Result<()> {
        match self {
            Candidacy::One(e) => e.shutdown().await,
            Candidacy::Slots(s) => s.shutdown().await,
        }
    }
}

fn held_slot(s: &Semaphore, p: tenure::Permit) -> Held {
    let slot = p.slot();
    Held {
        elector: s.electors()[slot].clone(),
        leadership: p.into_leadership(),
        // At most MAX_SLOTS (64).
        slot: Some(slot as u32),
    }
}
