//! `conformance_tests!`: the conformance suite as one named test per check.
//!
//! The list of checks lives here once; [`Conformance::run_all`] runs the
//! same list.
//!
//! [`Conformance::run_all`]: super::Conformance::run_all

/// Expands to a module `$store` holding one `#[tokio::test]` per conformance
/// check, each named after its check, so that
/// `cargo test --test conformance failover_without_a_herd` runs that check
/// on every store, `cargo test postgres::` every check on one store, and a
/// failing check does not hide the others.
///
/// `$setup` is an expression evaluated afresh in every test, giving a future
/// whose output is a [`Conformance`](crate::testing::Conformance) or an
/// `Option<Conformance>`: `None` skips the check (after the setup printed
/// why, as this workspace's `tenure_testsupport::servers::connect_or_skip` does).
/// Anything the store needs for the length of a check (a temporary directory,
/// a private server) can live in the suite's factory closure: the suite is
/// dropped when the check ends. The module imports its parent's names
/// (`use super::*`), so `$setup` may call helpers defined beside the macro.
///
/// The tests run on tokio's multi-threaded runtime: the calling crate needs
/// `tokio` with the `macros` and `rt-multi-thread` features (a dev-dependency).
///
/// ```
/// use std::sync::Arc;
/// use tenure::store::{memory::MemoryStore, DynStore};
/// use tenure::testing::Conformance;
///
/// fn memory_suite() -> Conformance {
///     // A memory store is private to one "connection", so share one instance.
///     let store: DynStore = Arc::new(MemoryStore::new());
///     Conformance::new("memory", move || {
///         let s = store.clone();
///         async move { s }
///     })
/// }
///
/// // Tests `memory::concurrent_candidates_one_winner_per_term`, ...
/// tenure::conformance_tests!(memory, async { memory_suite() });
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance_tests {
    ($store:ident, $setup:expr $(,)?) => {
        $crate::conformance_tests!(@with_checks [tests $store, $setup]);
    };
    // Every check, in the order `run_all` runs them.
    (@with_checks [$($then:tt)*]) => {
        $crate::conformance_tests!(@$($then)* ;
            parts_match_capabilities,
            concurrent_candidates_one_winner_per_term,
            non_holder_cannot_renew_or_release,
            renew_after_expiry_fails_and_next_term_is_higher,
            release_lets_another_acquire_at_once,
            proclaim_changes_only_the_current_tenure,
            handovers_increase_terms,
            sub_second_ttl,
            times_come_from_the_store_clock,
            same_identity_never_both_lead,
            elector_handover_on_shutdown,
            transfers_in_a_row_reach_their_targets,
            a_transfer_to_a_dead_target_ends_early,
            a_transfer_reaches_a_member_that_reads_at_the_expiry,
            shutdown_closes_the_term_before_returning,
            names_are_exact,
            push_wakes_followers_on_release,
            members_register_heartbeat_and_are_reaped,
            heartbeat_and_read_registers_and_reads,
            list_members_matches_members,
            the_lease_vouches_for_its_holder,
            handover_lets_only_the_target_acquire_within_the_window,
            handover_request_makes_renewal_fail,
            oversized_handover_windows_are_refused_and_nothing_is_written,
            history_records_every_term_with_reasons,
            run_records_are_written_once_by_compare_and_set,
            run_records_are_listed_newest_first,
            run_records_are_per_election_and_names_are_exact,
            run_records_refuse_bad_input,
            run_records_are_forgotten_after_keep,
            failover_without_a_herd,
            a_release_is_read_at_once_only_by_the_first_in_line,
            a_semaphore_never_has_more_holders_than_slots,
            observers_see_every_change_and_never_write,
        );
    };
    (@tests $store:ident, $setup:expr ; $($check:ident),* $(,)?) => {
        mod $store {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $check() {
                    let suite: ::std::option::Option<$crate::testing::Conformance> =
                        ($setup).await.into();
                    if let ::std::option::Option::Some(suite) = suite {
                        suite.$check().await;
                    }
                }
            )*
        }
    };
    (@run_all $suite:expr ; $($check:ident),* $(,)?) => {
        $( $suite.$check().await; )*
    };
}
