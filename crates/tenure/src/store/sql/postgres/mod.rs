#![doc = include_str!("docs.md")]

// What only PostgreSQL needs: LISTEN/NOTIFY wakes followers and observers
// in milliseconds when a lease changes hands, instead of at their next read.
// The notification is sent by the statements shared by all databases
// (`statements.rs` names the channel); this folder holds the listening side,
// and the one statement only PostgreSQL has (a follower's heartbeat and read
// in one data-modifying CTE).

mod push;
mod statements;

pub(super) use push::PushHub;
