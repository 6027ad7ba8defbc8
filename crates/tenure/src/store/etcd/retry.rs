//! etcd calls retried through transient failures (a broken connection to
//! one member, a cluster between leaders).

use std::time::Duration;

use etcd_client::{Client, GetOptions, Txn};

use super::errors::tonic_code;
use super::Inner;

/// Errors worth retrying at once: a connection to one member broke, or the
/// cluster is between leaders.
fn is_transient(e: &etcd_client::Error) -> bool {
    use etcd_client::Error as E;
    match e {
        E::TransportError(_) | E::IoError(_) => true,
        E::GRpcStatus(s) => {
            let code = s.code() as i32;
            let msg = s.message();
            code == tonic_code::UNAVAILABLE
                || (code == tonic_code::UNKNOWN && msg.contains("transport"))
                || msg.contains("no leader")
                || msg.contains("leader changed")
                || msg.contains("timed out")
        }
        _ => false,
    }
}

/// Runs an etcd call, retrying transient failures for about 1.5 s.
pub(super) async fn retry<T, F, Fut>(
    client: &Client,
    mut call: F,
) -> std::result::Result<T, etcd_client::Error>
where
    F: FnMut(Client) -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, etcd_client::Error>>,
{
    let mut wait = Duration::from_millis(50);
    loop {
        match call(client.clone()).await {
            Err(e) if is_transient(&e) && wait <= Duration::from_millis(800) => {
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
            other => return other,
        }
    }
}

impl Inner {
    pub(super) async fn txn(
        &self,
        txn: Txn,
    ) -> std::result::Result<etcd_client::TxnResponse, etcd_client::Error> {
        Ok(self.txn_retried(txn).await?.0)
    }

    /// Runs a transaction, retrying (for about 1.5 s) when the connection to
    /// one member fails or the cluster is electing a leader. Also says whether
    /// it retried: an earlier attempt may then have been applied, and the
    /// caller must recognise its own write instead of reading it as a loss.
    /// Every transaction here is a compare-and-set, so a repeat never applies twice.
    pub(super) async fn txn_retried(
        &self,
        txn: Txn,
    ) -> std::result::Result<(etcd_client::TxnResponse, bool), etcd_client::Error> {
        let mut retried = false;
        let mut wait = Duration::from_millis(50);
        loop {
            let mut c = self.client.clone();
            match c.txn(txn.clone()).await {
                Ok(r) => return Ok((r, retried)),
                Err(e) if is_transient(&e) && wait <= Duration::from_millis(800) => {
                    tracing::debug!(store = %self.described, "retrying a transaction: {e}");
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                    retried = true;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A plain read, retried like [`Self::txn_retried`].
    pub(super) async fn get(
        &self,
        key: impl Into<Vec<u8>>,
        options: Option<GetOptions>,
    ) -> std::result::Result<etcd_client::GetResponse, etcd_client::Error> {
        let key = key.into();
        let mut wait = Duration::from_millis(50);
        loop {
            let mut c = self.client.clone();
            match c.get(key.clone(), options.clone()).await {
                Ok(r) => return Ok(r),
                Err(e) if is_transient(&e) && wait <= Duration::from_millis(800) => {
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                }
                Err(e) => return Err(e),
            }
        }
    }
}
