//! The storage contract every backend implements, and the backends themselves.
//!
//! A [`LeaseStore`] keeps one lease record per election and changes it only by
//! compare-and-set writes whose conditions, including expiry, are judged by the
//! store's own clock. It is deliberately small, in the
//! way `object_store::ObjectStore` is: timing, retries and state live in the
//! [`Elector`](crate::Elector), not here.

mod contract;
#[cfg(feature = "etcd")]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
pub mod etcd;
mod ext;
mod integrity;
pub mod memory;
mod options;
mod reason;
pub(crate) mod record;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
mod registry;
mod runs;
#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres")))
)]
pub mod sql;
mod url;
pub(crate) mod util;
mod wake;
#[cfg(feature = "zookeeper")]
#[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
pub mod zookeeper;

pub use contract::{Capabilities, DynStore, History, LeaseStore, Membership, Wakeups};
pub use ext::{members_by_election, members_of, LeaseStoreExt};
// Each store uses some of these; a build without that store leaves them unused.
#[allow(unused_imports)]
pub(crate) use integrity::{check_lease, check_record, CorruptLease, StoredLease};
pub use integrity::{EXPIRY_SLACK, MAX_TERM};
pub use options::StoreOptions;
pub use reason::{EndReason, Handover, HandoverReason, StartReason, HANDOVER_ANYONE};
pub(crate) use record::{
    handover_window_us, remaining_from_us, sort_successors_first, vouch_for_holder,
};
pub use record::{
    identity_of, Acquire, Claim, ElectionKey, HistoryRecord, LeaseRecord, Member, MemberRecord,
    Tenure, MAX_HANDOVER_WINDOW,
};
pub use registry::{connect, supported_schemes};
pub use runs::{RunRecord, RunRecords, MAX_RUN_KEEP, MAX_RUN_VALUE_BYTES};
#[cfg(any(
    feature = "sqlite",
    feature = "mysql",
    feature = "postgres",
    feature = "redis"
))]
pub(crate) use url::check_url;
pub use url::redact_url;
pub use util::push_health::PushHealth;
pub(crate) use wake::{changed, changed_matching, Woken};
pub use wake::{AcquisitionWatch, Changes};
