//! Command-line arguments.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tenure::store::{DynStore, StoreOptions};

use crate::failure::Failure;

/// Leader election for services that already run a database.
#[derive(Debug, Parser)]
#[command(name = "tenure", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Campaign for an election and run a command while leader.
    Run(RunArgs),
    /// Show every election: leader, term, since, lease time left.
    Status(StatusArgs),
    /// Ask the current leader (wherever it runs) to step down; the next takes over at once.
    Resign(ResignArgs),
    /// Ask the current leader to hand over to one member (by identity).
    Transfer(TransferArgs),
    /// Stream leadership changes as they happen, without competing.
    Watch(WatchArgs),
    /// Serve every election over HTTP (JSON, events, health, metrics, dashboard); with --election also campaign.
    Serve(ServeArgs),
    /// Create the tables, or print their DDL for a DBA.
    Migrate(MigrateArgs),
    /// Three candidates on a temporary SQLite file: a crash takeover and a graceful handover.
    Demo(DemoArgs),
}

/// Where the store is.
#[derive(Debug, Args, Clone)]
pub struct StoreArgs {
    /// Store URL: sqlite://FILE, mysql://, mariadb://, postgres://, redis://, etcd://, zk://, zks://. Default: $TENURE_STORE; `tenure run` and `tenure serve --election` need one of them, the other commands fall back to sqlite://tenure.db.
    #[arg(long, value_name = "URL", conflicts_with = "store_file")]
    pub store: Option<String>,
    /// Read the store URL from this file (keeps passwords out of `ps` and shell history): one URL on one line; blank lines and lines starting with # are ignored; at most 64 KiB.
    #[arg(long, value_name = "PATH")]
    pub store_file: Option<PathBuf>,
    /// Prefix of the SQL table names (the key prefix on Redis and etcd, the top znode on ZooKeeper).
    #[arg(long, env = "TENURE_TABLE_PREFIX", default_value = StoreOptions::DEFAULT_TABLE_PREFIX, value_parser = table_prefix)]
    pub table_prefix: String,
}

/// The largest store file read: a URL is far shorter, and a device such as
/// /dev/zero must not be read until memory runs out.
const MAX_STORE_FILE: u64 = 64 * 1024;

/// The store used when none is named, by the commands that allow that.
const DEFAULT_STORE: &str = "sqlite://tenure.db";

fn table_prefix(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err(format!(
            "the table prefix must not be empty; leave the option out for the default {:?}, or give one such as app_",
            StoreOptions::DEFAULT_TABLE_PREFIX
        ));
    }
    Ok(s.to_string())
}

impl StoreArgs {
    /// The URL from --store, --store-file, $TENURE_STORE or the default.
    pub fn url(&self) -> Result<String, Failure> {
        Ok(self
            .named_url()?
            .unwrap_or_else(|| DEFAULT_STORE.to_string()))
    }

    /// The URL from --store, --store-file or $TENURE_STORE; `None` when
    /// none of them is given.
    fn named_url(&self) -> Result<Option<String>, Failure> {
        if let Some(u) = &self.store {
            return Ok(Some(u.clone()));
        }
        if let Some(path) = &self.store_file {
            return read_store_file(path).map(Some);
        }
        match std::env::var_os("TENURE_STORE") {
            None => Ok(None),
            Some(u) => match u.to_str().map(str::trim) {
                Some("") => Err(Failure::Usage(
                    "TENURE_STORE is set but empty; set it to the store URL (e.g. TENURE_STORE=postgres://app@db/app) or unset it"
                        .into(),
                )),
                Some(u) => Ok(Some(u.to_string())),
                None => Err(Failure::Usage(
                    "TENURE_STORE is not valid UTF-8; set it to the store URL or unset it".into(),
                )),
            },
        }
    }

    /// For commands that campaign: replicas share an election only through a
    /// store they all name, so a default file relative to each one's working
    /// directory would let two of them lead at once.
    pub fn require_named(&self, command: &str) -> Result<(), Failure> {
        match self.named_url()? {
            Some(_) => Ok(()),
            None => Err(Failure::Usage(format!(
                "{command} needs a store shared by every replica: pass --store URL (or --store-file PATH, or set TENURE_STORE), e.g. --store sqlite:///var/lib/app/tenure.db or --store postgres://app@db/app"
            ))),
        }
    }

    pub fn options(&self) -> StoreOptions {
        StoreOptions::default().with_table_prefix(self.table_prefix.clone())
    }

    /// Connects, once, with a message that says what to do on failure.
    pub async fn connect(&self) -> Result<DynStore, Failure> {
        self.connect_with(self.options()).await
    }

    /// Connects for a command that only reads (or changes existing rows):
    /// it creates no tables, so a mistyped `--table-prefix` is reported
    /// instead of leaving a set of empty tables behind.
    pub async fn connect_read_only(&self) -> Result<DynStore, Failure> {
        self.connect_with(self.options().with_auto_migrate(false))
            .await
    }

    async fn connect_with(&self, options: StoreOptions) -> Result<DynStore, Failure> {
        let url = self.url()?;
        tenure::store::connect(&url, &options)
            .await
            .map_err(explained)
    }

    /// Connects for a command that campaigns or serves for long, asking
    /// again with backoff (100 ms doubling to 5 s) while the server is full
    /// (it has no connection left to give, or is too busy to answer: other
    /// clients hold it, and the replicas of a fleet starting together must
    /// not exit for it), and with
    /// `always` while the store is unavailable for any reason. Each refusal
    /// is logged in the server's words.
    pub async fn connect_waiting(&self, always: bool) -> Result<DynStore, Failure> {
        let url = self.url()?;
        let mut delay = Duration::from_millis(100);
        loop {
            match tenure::store::connect(&url, &self.options()).await {
                Ok(s) => return Ok(s),
                Err(e) if e.is_server_full() || (always && e.is_retryable()) => {
                    tracing::warn!("{e}; retrying in {delay:?}");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
                Err(e) => return Err(explained(e)),
            }
        }
    }
}

/// A connection error with what to do about it.
fn explained(e: tenure::Error) -> Failure {
    match e {
        tenure::Error::Unavailable { .. } => Failure::Runtime(format!(
            "{e}\n  hint: start the store or fix --store; `tenure run --wait` keeps retrying instead"
        )),
        other => other.into(),
    }
}

/// Reads a store file: one URL on one line, blank lines and `#` comments
/// around it ignored, at most [`MAX_STORE_FILE`] bytes. Messages never quote
/// the file's contents (they hold a password).
fn read_store_file(path: &std::path::Path) -> Result<String, Failure> {
    use std::io::Read;
    let shown = path.display();
    let cannot =
        |e: std::io::Error| Failure::Usage(format!("cannot read --store-file {shown}: {e}"));
    let file = std::fs::File::open(path).map_err(cannot)?;
    let mut bytes = Vec::new();
    file.take(MAX_STORE_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > MAX_STORE_FILE {
        return Err(Failure::Usage(format!(
            "--store-file {shown} is larger than 64 KiB; a store file holds one URL on one line"
        )));
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        Failure::Usage(format!(
            "--store-file {shown} is not UTF-8 text; a store file holds one URL on one line"
        ))
    })?;
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    match lines.as_slice() {
        [url] => Ok(url.to_string()),
        [] => Err(Failure::Usage(format!(
            "--store-file {shown} is empty; put the store URL in it"
        ))),
        more => Err(Failure::Usage(format!(
            "--store-file {shown} has {} lines that are not blank or comments; a store file holds one URL on one line (blank lines and lines starting with # are ignored)",
            more.len()
        ))),
    }
}

fn duration(s: &str) -> Result<Duration, String> {
    if s.trim_start().starts_with('-') {
        return Err("durations must be positive (e.g. 10s, 500ms, 1m)".into());
    }
    humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 10s, 500ms, 1m)"))
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Election name (1-255 bytes, no control characters).
    #[arg(long)]
    pub election: String,
    /// Namespace of the election.
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// Lease time to live: a crashed leader is replaced within about this long.
    #[arg(long, default_value = "10s", value_parser = duration, allow_hyphen_values = true)]
    pub ttl: Duration,
    /// How often the leader renews (default ttl/3; must be below ttl/2).
    #[arg(long, value_parser = duration, allow_hyphen_values = true)]
    pub renew_period: Option<Duration>,
    /// This candidate's identity (default hostname-pid).
    #[arg(long = "id", value_name = "ID")]
    pub identity: Option<String>,
    /// Free text stored with the lease while leading (e.g. an address).
    #[arg(long, default_value = "")]
    pub metadata: String,
    /// Succession priority, 0 to 1000: higher takes over first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i64,
    /// Hand over to a live member of higher priority after leading this long.
    #[arg(long, value_parser = duration, allow_hyphen_values = true)]
    pub preempt_after: Option<Duration>,
    /// Exit (code 3) when leadership is lost, instead of campaigning again.
    #[arg(long)]
    pub exit_on_loss: bool,
    /// Restart the command when it exits while still leader, instead of exiting.
    #[arg(long)]
    pub restart: bool,
    /// Keep retrying if the store is unreachable at start, instead of failing
    /// (a full server, one with no connection left to give, or an etcd that
    /// answers but is too busy to serve a read, is always waited for, unless
    /// --no-wait).
    #[arg(long)]
    pub wait: bool,
    /// Time between SIGTERM and SIGKILL when stopping the command (default ttl/4, at most 5s).
    /// On leadership loss the command is always killed before the lease can expire.
    #[arg(long, value_parser = duration, allow_hyphen_values = true)]
    pub kill_grace: Option<Duration>,
    /// Also serve the HTTP API (as `tenure serve`) on this address (HOST:PORT, or a port on 127.0.0.1).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// File holding the bearer token that enables POST resign/transfer/proclaim over --http.
    #[arg(long, value_name = "PATH", requires = "http")]
    pub token_file: Option<PathBuf>,
    #[command(flatten)]
    pub http_limits: HttpLimitArgs,
    /// Run the command once for KEY across all replicas: until one run exits 0,
    /// recorded in the store; then every replica exits 0 without running it
    /// (e.g. --once "$(date +%F)" from cron).
    #[arg(long, value_name = "KEY", conflicts_with = "restart")]
    pub once: Option<String>,
    /// With --once: give up after this many runs (over all replicas) that did
    /// not succeed; every replica then exits with the last run's code.
    /// Default: no limit.
    #[arg(long, value_name = "N", requires = "once")]
    pub attempts: Option<u32>,
    /// With --once: keep the record of KEY's runs at least this long.
    #[arg(long, value_name = "DURATION", requires = "once", default_value = "7d", value_parser = duration, allow_hyphen_values = true)]
    pub keep: Duration,
    /// Exit at once with code 75 unless this replica leads at its first try
    /// (like `flock -n`): the command does not run.
    #[arg(long, conflicts_with = "timeout")]
    pub no_wait: bool,
    /// Exit with code 75 unless this replica leads within this long (like
    /// `consul lock -timeout`): the command does not run.
    #[arg(long, value_name = "DURATION", value_parser = duration, allow_hyphen_values = true)]
    pub timeout: Option<Duration>,
    /// Let up to N replicas run the command at once (like `consul lock -n N`):
    /// N slots, the elections ELECTION.slot-0 to ELECTION.slot-{N-1}, each
    /// with its own lease and term; a replica holds one slot at a time and
    /// its command gets TENURE_SLOT. 1 to 64.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=tenure::MAX_SLOTS as i64),
          conflicts_with_all = ["once", "no_wait"])]
    pub slots: u32,
    /// The command to run while leader, after `--`.
    #[arg(last = true, required = true, num_args = 1.., value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Only this namespace (with --election: the election's, default "default").
    #[arg(long)]
    pub namespace: Option<String>,
    /// Only this election; exits 1 if it was never acquired.
    #[arg(long)]
    pub election: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also show each election's recent terms (how many).
    #[arg(long, num_args = 0..=1, default_missing_value = "10", value_name = "N")]
    pub history: Option<usize>,
}

#[derive(Debug, Args)]
pub struct ResignArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Election name.
    #[arg(long)]
    pub election: String,
    /// Namespace of the election.
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// How long to wait for the next leader before returning.
    #[arg(long, default_value = "15s", value_parser = duration, allow_hyphen_values = true)]
    pub wait: Duration,
}

#[derive(Debug, Args)]
pub struct TransferArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Election name.
    #[arg(long)]
    pub election: String,
    /// Namespace of the election.
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// Identity of the member to hand over to (see `tenure status`).
    #[arg(long, value_name = "IDENTITY")]
    pub to: String,
    /// At most how long only the target may take over (default 10s); then
    /// anyone. The leader ends it sooner, once a live target would have
    /// taken over, so a target that just died does not hold the election
    /// leaderless for the whole window.
    #[arg(long, value_parser = duration, allow_hyphen_values = true)]
    pub window: Option<Duration>,
    /// How long to wait for the next leader before returning.
    #[arg(long, default_value = "15s", value_parser = duration, allow_hyphen_values = true)]
    pub wait: Duration,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Only this namespace (with --election: the namespace of those elections).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Only these elections (repeatable); they need not exist yet.
    #[arg(long)]
    pub election: Vec<String>,
    /// One JSON object per line.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct MigrateArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Print the DDL instead of running it.
    #[arg(long)]
    pub print_sql: bool,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Lease TTL of the demo candidates.
    #[arg(long, default_value = "2s", value_parser = duration, allow_hyphen_values = true)]
    pub ttl: Duration,
}

/// Limits of the HTTP server (`tenure serve`, `tenure run --http`).
#[derive(Debug, Args, Clone)]
pub struct HttpLimitArgs {
    /// Connections served at once; past them only /healthz and /readyz are answered (others 503). Default: from the open-file limit (`ulimit -n`), below it.
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Close a connection that has not sent complete request headers this long after opening or after its previous answer (idle keep-alive connections too).
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub header_timeout: Duration,
    /// Close a connection whose client has taken no byte of an answer for this long (e.g. an event stream nobody reads).
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub write_timeout: Duration,
    /// Elections with /metrics series of their own (leader present, term, lease left, leader changes, leader); those seen after them are only counted (tenure_elections_unexported, ..._without_leader).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub metrics_elections: usize,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Listen here: HOST:PORT, or a port on 127.0.0.1.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub http: String,
    /// Also campaign for this election (the Kubernetes leader-elector sidecar: `GET /` names the leader).
    #[arg(long)]
    pub election: Option<String>,
    /// Namespace of --election.
    #[arg(long, default_value = "default", requires = "election")]
    pub namespace: String,
    /// This candidate's identity (default hostname-pid), what `GET /` answers when it leads.
    #[arg(long = "id", value_name = "ID", requires = "election")]
    pub identity: Option<String>,
    /// Lease time to live of --election.
    #[arg(long, default_value = "10s", value_parser = duration, allow_hyphen_values = true, requires = "election")]
    pub ttl: Duration,
    /// Succession priority of --election, 0 to 1000.
    #[arg(
        long,
        default_value_t = 0,
        allow_negative_numbers = true,
        requires = "election"
    )]
    pub priority: i64,
    /// Free text stored with the lease while leading.
    #[arg(long, default_value = "", requires = "election")]
    pub metadata: String,
    /// File holding the bearer token that enables POST resign/transfer/proclaim (without it they answer 403).
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// How often an idle /v1/events stream carries a keep-alive comment.
    #[arg(long, default_value = "15s", value_parser = duration, allow_hyphen_values = true)]
    pub sse_keep_alive: Duration,
    #[command(flatten)]
    pub http_limits: HttpLimitArgs,
    /// Keep retrying if the store is unreachable at start, instead of failing
    /// (a full server, one with no connection left to give, is always waited
    /// for).
    #[arg(long)]
    pub wait: bool,
}
