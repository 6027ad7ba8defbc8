//! Private etcd clusters started from the installed `etcd` binary (free
//! loopback ports, a temporary data directory), killed when dropped, so the
//! etcd store's tests can kill members and lose quorum without touching
//! anything shared.
//!
//! ```no_run
//! use tenure_testsupport::etcd::{EtcdCluster, EtcdOptions};
//! // `true`: a missing etcd binary fails (CI); `false`: prints SKIPPED.
//! if let Some(cluster) = EtcdCluster::start_or_skip(3, false) {
//!     let url = cluster.url(); // etcd://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3
//! }
//! // TLS on the client port with a fresh test CA; client certificates required.
//! let tls = EtcdCluster::start_with(1, EtcdOptions::tls().with_client_cert_auth())?;
//! let url = tls.url(); // etcds://127.0.0.1:p1?cacert=/tmp/.../ca.pem
//! # Ok::<(), std::io::Error>(())
//! ```

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::servers::{free_port, scratch_dir};
use crate::tls::TestCa;

/// How to start an [`EtcdCluster`].
#[derive(Clone, Debug, Default)]
pub struct EtcdOptions {
    /// Serve clients over TLS only (`https://` client URLs), with a fresh
    /// test CA (see [`EtcdCluster::tls`]); peers still talk plain HTTP.
    pub tls: bool,
    /// With `tls`: `--client-cert-auth` and `--trusted-ca-file`, so clients
    /// must present a certificate signed by the test CA.
    pub client_cert_auth: bool,
}

impl EtcdOptions {
    /// TLS on the client port, client certificates optional.
    pub fn tls() -> Self {
        Self {
            tls: true,
            ..Self::default()
        }
    }

    /// Requires client certificates (`--client-cert-auth`).
    pub fn with_client_cert_auth(mut self) -> Self {
        self.client_cert_auth = true;
        self
    }
}

/// Sums a counter of etcd's Prometheus text (what [`EtcdCluster::metrics_addr`]
/// serves at `/metrics`) over all its series, or over those of one gRPC
/// method.
///
/// ```
/// let text = "grpc_server_handled_total{grpc_method=\"Txn\",grpc_code=\"OK\"} 3\n\
///             grpc_server_handled_total{grpc_method=\"Range\",grpc_code=\"OK\"} 4\n";
/// use tenure_testsupport::etcd::sum_counter;
/// assert_eq!(sum_counter(text, "grpc_server_handled_total", Some("Txn")), 3.0);
/// assert_eq!(sum_counter(text, "grpc_server_handled_total", None), 7.0);
/// ```
pub fn sum_counter(metrics: &str, name: &str, grpc_method: Option<&str>) -> f64 {
    let series = format!("{name}{{");
    let method = grpc_method.map(|m| format!("grpc_method=\"{m}\""));
    metrics
        .lines()
        .filter(|l| l.starts_with(&series))
        .filter(|l| method.as_ref().is_none_or(|m| l.contains(m.as_str())))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The etcd binary: `TENURE_ETCD_BIN`, else `etcd` on the `PATH`
/// (Debian package `etcd-server`).
pub fn binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TENURE_ETCD_BIN") {
        return Some(PathBuf::from(p));
    }
    which::which("etcd").ok()
}

/// A private etcd cluster of one or more members on loopback.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<Option<Child>>,
    client_ports: Vec<u16>,
    /// Plain-HTTP `/health` (and `/metrics`) ports, one per member.
    metrics_ports: Vec<u16>,
    peer_ports: Vec<u16>,
    /// How often each member has been started (names its keep-data flag).
    incarnations: Vec<u32>,
    bin: PathBuf,
    initial_cluster: String,
    token: String,
    client_cert_auth: bool,
    tls: Option<TestCa>,
    dir: tempfile::TempDir,
}

impl EtcdCluster {
    /// Starts `n` members and waits (up to 30 s) until every member reports
    /// itself healthy (it has a raft leader and serves reads). Election
    /// timeout 250 ms, so leases can be as short as 1 s.
    pub fn start(n: usize) -> std::io::Result<Self> {
        Self::start_with(n, EtcdOptions::default())
    }

    /// Like [`Self::start`], with TLS when `options` asks for it.
    pub fn start_with(n: usize, options: EtcdOptions) -> std::io::Result<Self> {
        let bin = binary().ok_or_else(|| {
            std::io::Error::other("no etcd binary (install etcd-server or set TENURE_ETCD_BIN)")
        })?;
        // On tmpfs where there is one: etcd fsyncs every write, and one
        // slow fsync can take longer than a 1 s TTL's 500 ms release budget.
        let dir = scratch_dir("tenure-etcd")?;
        let mut client_ports = Vec::new();
        let mut peer_ports = Vec::new();
        let mut metrics_ports = Vec::new();
        for _ in 0..n {
            client_ports.push(free_port()?);
            peer_ports.push(free_port()?);
            metrics_ports.push(free_port()?);
        }
        let tls = if options.tls {
            Some(TestCa::generate(&dir.path().join("tls"), "root")?)
        } else {
            None
        };
        let initial: Vec<String> = peer_ports
            .iter()
            .enumerate()
            .map(|(i, p)| format!("m{i}=http://127.0.0.1:{p}"))
            .collect();
        // Unique per cluster: the temporary directory's own random name.
        let token = dir
            .path()
            .file_name()
            .map_or_else(|| "tenure".into(), |n| n.to_string_lossy().into_owned());
        let mut cluster = Self {
            members: Vec::new(),
            client_ports,
            metrics_ports,
            peer_ports,
            incarnations: vec![0; n],
            bin,
            initial_cluster: initial.join(","),
            token,
            client_cert_auth: options.client_cert_auth,
            tls,
            dir,
        };
        for i in 0..n {
            let child = cluster.spawn_member(i)?;
            cluster.members.push(Some(child));
        }
        cluster.wait_healthy(Duration::from_secs(30))?;
        Ok(cluster)
    }

    /// Starts member `i` (its shell; etcd runs under it). On its data
    /// directory if it has one: etcd then ignores the initial-cluster flags
    /// and rejoins with what it had committed.
    fn spawn_member(&self, i: usize) -> std::io::Result<Child> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(i))?;
        // Through a shell that SIGKILLs etcd when its stdin (a pipe this
        // process holds) closes, and then removes the member's data (in
        // /dev/shm: memory): when this process exits, even with the
        // cluster in a `static` that is never dropped. The shell exits
        // with etcd, so a member that dies is still seen. `crash` first
        // creates this incarnation's keep flag, so the data stays for a
        // restart.
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(concat!(
                r#"exec 3<&0; "$0" "$@" </dev/null 3<&- & j=$!; "#,
                r#"(read _ <&3; kill -9 $j; sleep 0.5; "#,
                r#"[ -e "$TENURE_ETCD_KEEP" ] || rm -rf "$TENURE_ETCD_DATA") & wait $j"#
            ))
            .arg(&self.bin)
            .env("TENURE_ETCD_DATA", self.data_path(i))
            .env("TENURE_ETCD_KEEP", self.keep_path(i));
        let client_scheme = if let Some(ca) = &self.tls {
            command
                .arg(format!("--cert-file={}", ca.server_cert.display()))
                .arg(format!("--key-file={}", ca.server_key.display()));
            // etcd requires client certificates whenever it has a
            // --trusted-ca-file, whatever --client-cert-auth says.
            if self.client_cert_auth {
                command
                    .arg(format!("--trusted-ca-file={}", ca.ca_cert.display()))
                    .arg("--client-cert-auth");
            }
            "https"
        } else {
            "http"
        };
        command
            .arg(format!("--name=m{i}"))
            .arg(format!("--data-dir={}", self.data_path(i).display()))
            .arg(format!(
                "--listen-client-urls={client_scheme}://127.0.0.1:{}",
                self.client_ports[i]
            ))
            .arg(format!(
                "--advertise-client-urls={client_scheme}://127.0.0.1:{}",
                self.client_ports[i]
            ))
            .arg(format!(
                "--listen-metrics-urls=http://127.0.0.1:{}",
                self.metrics_ports[i]
            ))
            .arg(format!(
                "--listen-peer-urls=http://127.0.0.1:{}",
                self.peer_ports[i]
            ))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{}",
                self.peer_ports[i]
            ))
            .arg(format!("--initial-cluster={}", self.initial_cluster))
            .arg("--initial-cluster-state=new")
            .arg(format!("--initial-cluster-token={}", self.token))
            .arg("--heartbeat-interval=25")
            .arg("--election-timeout=250")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| std::io::Error::other(format!("cannot start {}: {e}", self.bin.display())))
    }

    fn data_path(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("m{i}"))
    }

    fn keep_path(&self, i: usize) -> PathBuf {
        self.dir
            .path()
            .join(format!("m{i}.keep{}", self.incarnations[i]))
    }

    /// SIGKILLs member `i` as a crash, keeping its data for
    /// [`Self::restart`] (no-op if it is not running).
    pub fn crash(&mut self, i: usize) -> std::io::Result<()> {
        if self.members.get(i).is_some_and(Option::is_some) {
            std::fs::File::create(self.keep_path(i))?;
            self.kill(i);
        }
        Ok(())
    }

    /// Starts member `i` again on its data after [`Self::crash`], and waits
    /// (up to 30 s) until every running member is healthy.
    pub fn restart(&mut self, i: usize) -> std::io::Result<()> {
        if self.members[i].is_none() {
            self.incarnations[i] += 1;
            let child = self.spawn_member(i)?;
            self.members[i] = Some(child);
        }
        self.wait_healthy(Duration::from_secs(30))
    }

    /// Which running member leads the raft group (its `/metrics` say
    /// `etcd_server_is_leader 1`).
    pub fn leader(&self) -> Option<usize> {
        (0..self.members.len()).find(|&i| {
            self.members[i].is_some()
                && get(self.metrics_ports[i], "/metrics")
                    .is_ok_and(|m| m.lines().any(|l| l == "etcd_server_is_leader 1"))
        })
    }

    /// Starts a cluster, or returns `None` after printing SKIPPED when etcd
    /// is not installed. Panics instead when `required` (the tests' policy,
    /// e.g. [`crate::servers::required`]) or when the start fails.
    pub fn start_or_skip(n: usize, required: bool) -> Option<Self> {
        if binary().is_none() {
            if required {
                panic!("etcd is required (CI=true or TENURE_REQUIRE_SERVERS=1) but not installed: apt-get install etcd-server");
            }
            eprintln!("SKIPPED: no etcd binary (install etcd-server or set TENURE_ETCD_BIN)");
            return None;
        }
        match Self::start(n) {
            Ok(c) => Some(c),
            Err(e) => panic!("private etcd did not start: {e}"),
        }
    }

    fn log_path(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("m{i}.log"))
    }

    /// Polls every member's `/health` until all say healthy, a member exits,
    /// or `within` passes.
    fn wait_healthy(&mut self, within: Duration) -> std::io::Result<()> {
        let start = Instant::now();
        loop {
            let mut pending = None;
            for i in 0..self.members.len() {
                if self.members[i].is_none() {
                    continue;
                }
                let exited = self.members[i]
                    .as_mut()
                    .and_then(|c| c.try_wait().ok().flatten());
                if let Some(status) = exited {
                    return Err(std::io::Error::other(format!(
                        "etcd member m{i} exited ({status}); log:\n{}",
                        self.log_tail(i)
                    )));
                }
                if let Err(e) = health(self.metrics_ports[i]) {
                    pending = Some((i, e));
                    break;
                }
            }
            match pending {
                None => return Ok(()),
                Some((i, e)) if start.elapsed() > within => {
                    return Err(std::io::Error::other(format!(
                        "etcd did not become ready within {within:?}: member m{i}: {e}; log:\n{}",
                        self.log_tail(i)
                    )))
                }
                Some(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// The last lines of member `i`'s log, for failure messages.
    pub fn log_tail(&self, i: usize) -> String {
        let log = std::fs::read_to_string(self.log_path(i)).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// The store URL naming every member: `etcd://...`, or with TLS
    /// `etcds://...?cacert=<the test CA>`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .client_ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        match &self.tls {
            None => format!("etcd://{}", hosts.join(",")),
            Some(ca) => format!(
                "etcds://{}?cacert={}",
                hosts.join(","),
                ca.ca_cert.display()
            ),
        }
    }

    /// The test CA of a TLS cluster (its `client_cert`/`client_key` are a
    /// client certificate the cluster accepts).
    pub fn tls(&self) -> Option<&TestCa> {
        self.tls.as_ref()
    }

    /// The client address (`127.0.0.1:port`) of member `i`.
    pub fn member_addr(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.client_ports[i])
    }

    /// The plain-HTTP metrics address (`127.0.0.1:port`, `/metrics`) of
    /// member `i`.
    pub fn metrics_addr(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.metrics_ports[i])
    }

    /// How many members were started.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// True for a cluster without members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Kills member `i` with SIGKILL and reaps it.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members.get_mut(i).and_then(Option::take) {
            // Closing the shell's stdin makes it SIGKILL etcd (see `start_with`).
            drop(child.stdin.take());
            let _ = child.wait();
        }
    }
}

/// Asks the member on `port` for `/health` (plain HTTP on its metrics port):
/// `Ok` when it answers `"health":"true"`, which etcd says only with a raft
/// leader and a read served.
fn health(port: u16) -> std::io::Result<()> {
    let answer = get(port, "/health")?;
    if answer.contains("\"health\":\"true\"") {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "not healthy yet: {}",
            answer.lines().last().unwrap_or_default()
        )))
    }
}

/// The whole answer (headers and body) to a plain HTTP GET of `path` on
/// the member's metrics `port`.
fn get(port: u16, path: &str) -> std::io::Result<String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(1)))?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)?;
    Ok(answer)
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
