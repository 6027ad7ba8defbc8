//! Conformance checks. The parts a store offers beside the lease agree with
//! what its [`Capabilities`](crate::store::Capabilities) promise; and the
//! check every part's group starts with, which lets a store without that
//! part pass the group's checks with a printed note.

use super::{shared, Conformance};
use crate::store::DynStore;

/// A part of a store, as the checks of its group name it.
#[derive(Clone, Copy, Debug)]
pub(super) enum Part {
    Membership,
    History,
}

impl Conformance {
    /// Whether `store` offers `part`; if not, says so on stderr, and the
    /// calling check does not apply.
    pub(super) fn offers(&self, store: &DynStore, part: Part) -> bool {
        let offered = match part {
            Part::Membership => store.membership().is_some(),
            Part::History => store.history_log().is_some(),
        };
        if !offered {
            eprintln!(
                "[{}] offers no {part:?}: its checks do not apply",
                self.name
            );
        }
        offered
    }

    /// A store that promises pushes offers wake-ups; one that lists members
    /// in one request, or counts the lease's holder as a member, offers a
    /// member list.
    pub async fn parts_match_capabilities(&self) {
        let _turn = shared().await;
        let s = self.store().await;
        let c = s.capabilities();
        for (promised, what) in [
            (c.push, "push"),
            (c.push_acquisitions, "push_acquisitions"),
            (c.push_expiry, "push_expiry"),
        ] {
            assert!(
                !promised || s.wakeups().is_some(),
                "[{}] capabilities promise {what} but the store offers no wake-ups",
                self.name
            );
        }
        for (promised, what) in [
            (c.list_members, "list_members"),
            (c.lease_vouches_for_holder, "lease_vouches_for_holder"),
        ] {
            assert!(
                !promised || s.membership().is_some(),
                "[{}] capabilities promise {what} but the store offers no member list",
                self.name
            );
        }
    }
}
