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
                // The client's own "operation was canceled" when the
                // connection under a call closed (a member was killed): a
                // status with an underlying error was made by the transport,
                // not sent by a server.
                || (code == tonic_code::CANCELLED && std::error::Error::source(s).is_some())
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
    call: F,
) -> std::result::Result<T, etcd_client::Error>
where
    F: FnMut(Client) -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, etcd_client::Error>>,
{
    retry_noting(client, call).await.0
}

/// As [`retry`], and says whether it retried: an earlier attempt may then
/// have been applied.
async fn retry_noting<T, F, Fut>(
    client: &Client,
    mut call: F,
) -> (std::result::Result<T, etcd_client::Error>, bool)
where
    F: FnMut(Client) -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, etcd_client::Error>>,
{
    let mut wait = Duration::from_millis(50);
    let mut retried = false;
    loop {
        match call(client.clone()).await {
            Err(e) if is_transient(&e) && wait <= Duration::from_millis(800) => {
                tracing::debug!("retrying an etcd call: {e}");
                tokio::time::sleep(wait).await;
                wait *= 2;
                retried = true;
            }
            other => return (other, retried),
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
        let (result, retried) = retry_noting(&self.client, |mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await;
        result.map(|r| (r, retried))
    }

    /// A plain read, retried like [`Self::txn_retried`].
    pub(super) async fn get(
        &self,
        key: impl Into<Vec<u8>>,
        options: Option<GetOptions>,
    ) -> std::result::Result<etcd_client::GetResponse, etcd_client::Error> {
        let key = key.into();
        retry(&self.client, |mut c| {
            let (key, options) = (key.clone(), options.clone());
            async move { c.get(key, options).await }
        })
        .await
    }
}
