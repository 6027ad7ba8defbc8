//! The leader's race: a store call against its local deadline and the command channel.
//!
//! A leader steps down at its local deadline whether or not the store
//! answers, and a hung store must delay neither a shutdown nor a resign. So
//! every store call a leader waits on while it still leads, and the wait
//! for its work to stop before a hand-over, goes through [`Campaign::race`]:
//! whichever of the call, the deadline and a command comes first ends the
//! wait, and the call is dropped unless it came first.

use std::future::Future;
use std::time::Duration;

use super::{Campaign, Command};

/// How a race ended.
pub(super) enum Raced<T> {
    /// The operation finished first.
    Done(T),
    /// The local deadline passed first: the tenure is over.
    Deadline,
    /// A command came first (`None`: the elector was dropped).
    Command(Option<Command>),
}

/// How the command channel takes part in a race.
#[derive(Clone, Copy)]
pub(super) enum Commands {
    /// Commands wait until the race has ended.
    Wait,
    /// A command ends the race; the deadline wins when both are ready at once.
    AfterDeadline,
    /// A command ends the race, and wins when the deadline is ready at the
    /// same time (the preemption check's order).
    BeforeDeadline,
}

impl Campaign {
    /// Runs `op` until it finishes, the local `deadline` passes, or (as
    /// `commands` says) a command arrives, whichever comes first; when
    /// several are ready at once, the operation wins, then the deadline and
    /// a command in the order `commands` gives.
    pub(super) async fn race<T>(
        &mut self,
        op: impl Future<Output = T>,
        deadline: Duration,
        commands: Commands,
    ) -> Raced<T> {
        let listen = !matches!(commands, Commands::Wait);
        let command_first = matches!(commands, Commands::BeforeDeadline);
        // The deadline is listed twice, before and after the commands; one of
        // the two is enabled, as `commands` orders them.
        tokio::select! {
            biased;
            r = op => Raced::Done(r),
            _ = self.shared.clock.sleep_until(deadline), if !command_first => Raced::Deadline,
            cmd = self.commands.recv(), if listen => Raced::Command(cmd),
            _ = self.shared.clock.sleep_until(deadline), if command_first => Raced::Deadline,
        }
    }

    /// `op`'s result, or `None` if the local `deadline` passes first;
    /// commands wait meanwhile.
    pub(super) async fn before_deadline<T>(
        &mut self,
        op: impl Future<Output = T>,
        deadline: Duration,
    ) -> Option<T> {
        match self.race(op, deadline, Commands::Wait).await {
            Raced::Done(r) => Some(r),
            Raced::Deadline => None,
            Raced::Command(_) => unreachable!("commands wait in this race"),
        }
    }
}
