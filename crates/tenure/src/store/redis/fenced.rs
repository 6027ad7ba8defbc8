//! Writes fenced by the lease: checked against the tenure's holder, term and
//! expiry (by the server's `TIME`) inside the same Lua script that makes them.

use redis::Script;

use super::RedisStore;
use crate::error::{Error, Result};
use crate::store::Tenure;

/// Writes that [`RedisStore::fenced`] makes only while a tenure holds its lease.
///
/// Each write names one key; all of them are made in one script, atomically,
/// or none is. Values are bytes or strings.
///
/// ```
/// use tenure::store::redis::FencedWrites;
/// let writes = FencedWrites::new()
///     .set("report:latest", "2026-11-24")
///     .hset("report:runs", "nightly", "ok")
///     .xadd("report:log", [("term", "7"), ("entry", "nightly done")]);
/// assert_eq!(writes.len(), 3);
/// ```
#[derive(Clone, Debug, Default)]
pub struct FencedWrites {
    writes: Vec<Write>,
}

/// One write: a command, its key, its other arguments.
#[derive(Clone, Debug)]
struct Write {
    command: &'static str,
    key: Vec<u8>,
    args: Vec<Vec<u8>>,
}

impl FencedWrites {
    /// No writes yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// `SET key value`.
    pub fn set(mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Self {
        self.push("SET", key, vec![value.as_ref().to_vec()]);
        self
    }

    /// `HSET key field value`.
    pub fn hset(
        mut self,
        key: impl AsRef<[u8]>,
        field: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Self {
        self.push(
            "HSET",
            key,
            vec![field.as_ref().to_vec(), value.as_ref().to_vec()],
        );
        self
    }

    /// `XADD key * field value [field value ...]`: appends an entry to a stream.
    pub fn xadd<F: AsRef<[u8]>, V: AsRef<[u8]>>(
        mut self,
        key: impl AsRef<[u8]>,
        fields: impl IntoIterator<Item = (F, V)>,
    ) -> Self {
        let mut args = vec![b"*".to_vec()];
        for (f, v) in fields {
            args.push(f.as_ref().to_vec());
            args.push(v.as_ref().to_vec());
        }
        self.push("XADD", key, args);
        self
    }

    /// `DEL key`.
    pub fn del(mut self, key: impl AsRef<[u8]>) -> Self {
        self.push("DEL", key, Vec::new());
        self
    }

    /// How many writes.
    pub fn len(&self) -> usize {
        self.writes.len()
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    fn push(&mut self, command: &'static str, key: impl AsRef<[u8]>, args: Vec<Vec<u8>>) {
        self.writes.push(Write {
            command,
            key: key.as_ref().to_vec(),
            args,
        });
    }
}

pub(super) fn script() -> Script {
    Script::new(&format!(
        "{}\n{}",
        include_str!("lua/prelude.lua"),
        include_str!("lua/fenced.lua")
    ))
}

impl RedisStore {
    /// Makes `writes` atomically, only if `tenure` still holds its lease by
    /// the server's clock: the check and the writes run in one Lua script,
    /// so a paused leader that wakes after a successor took over gets
    /// [`Error::NotLeader`] and writes nothing.
    ///
    /// The keys are the application's own (any Redis keys other than
    /// tenure's); on a Redis Cluster they must share a hash slot with the
    /// lease key, so use a single-node or sentinel deployment.
    ///
    /// ```no_run
    /// # async fn demo(store: &tenure::store::redis::RedisStore, leadership: &tenure::Leadership) -> tenure::Result<()> {
    /// use tenure::store::redis::FencedWrites;
    /// let term = leadership.term().to_string();
    /// store
    ///     .fenced(
    ///         &leadership.tenure(),
    ///         FencedWrites::new()
    ///             .set("report:latest", "done")
    ///             .xadd("report:log", [("term", term.as_str())]),
    ///     )
    ///     .await?; // Err(NotLeader) if a successor took over: nothing was written
    /// # Ok(()) }
    /// ```
    pub async fn fenced(&self, tenure: &Tenure, writes: FencedWrites) -> Result<()> {
        let script = self.fenced_script.get_or_init(script);
        let mut call = script.key(self.key("lease", &tenure.key));
        call.arg(&tenure.holder).arg(tenure.term);
        for w in &writes.writes {
            call.key(w.key.as_slice());
            call.arg(w.command).arg(w.args.len());
            for a in &w.args {
                call.arg(a.as_slice());
            }
        }
        let done: i64 = self.run(&call).await?;
        if done == 1 {
            Ok(())
        } else {
            Err(Error::NotLeader {
                election: tenure.key.to_string(),
            })
        }
    }
}
