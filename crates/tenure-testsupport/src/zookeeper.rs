//! Private ZooKeeper servers started with `java` from Debian's `zookeeper`
//! package (its jars, never its service): a free loopback port per server,
//! a temporary data directory, killed when dropped. One server, or an
//! ensemble of three whose members can be killed and restarted.
//!
//! ```no_run
//! use tenure_testsupport::zookeeper::ZkEnsemble;
//! // `true`: a missing ZooKeeper fails (CI); `false`: prints SKIPPED.
//! if let Some(zk) = ZkEnsemble::start_or_skip(1, false) {
//!     let url = zk.url(); // zk://127.0.0.1:p1
//! }
//! ```

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::servers::{free_port, scratch_dir};

/// The tick of the private servers: session timeouts from 2 to 1200 ticks
/// (200 ms to 120 s), so the suite's short TTLs are honoured and its 60 s
/// TTL gets its 120 s lease session.
pub const TICK_MS: u64 = 100;

/// The classpath of the installed ZooKeeper: `TENURE_ZOOKEEPER_CLASSPATH`,
/// else Debian's `/usr/share/java/zookeeper.jar` (its manifest names its
/// dependencies) with slf4j's no-op logger. `None` if not installed.
pub fn classpath() -> Option<String> {
    if let Ok(cp) = std::env::var("TENURE_ZOOKEEPER_CLASSPATH") {
        return Some(cp);
    }
    let jar = Path::new("/usr/share/java/zookeeper.jar");
    if !jar.is_file() || which::which("java").is_err() {
        return None;
    }
    let mut cp = jar.display().to_string();
    let nop = Path::new("/usr/share/java/slf4j-nop.jar");
    if nop.is_file() {
        cp.push_str(&format!(":{}", nop.display()));
    }
    Some(cp)
}

/// A private ZooKeeper server or ensemble on loopback.
#[derive(Debug)]
pub struct ZkEnsemble {
    servers: Vec<Option<Child>>,
    client_ports: Vec<u16>,
    /// Each server's `secureClientPort`, when started with TLS.
    secure_ports: Vec<u16>,
    dir: tempfile::TempDir,
    classpath: String,
    /// Per server, a libfaketime offset of its wall clock (`"+10s"`).
    clock_offsets: Vec<Option<String>>,
}

/// libfaketime, which shifts a process's wall clock (Debian's `libfaketime`).
const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

impl ZkEnsemble {
    /// Starts `n` servers (1 standalone, or an ensemble) and waits (up to
    /// 60 s) until every one answers `ruok` and a quorum serves (`srvr`).
    pub fn start(n: usize) -> std::io::Result<Self> {
        Self::start_with(n, None, Vec::new(), TICK_MS)
    }

    /// Like [`Self::start`] with a `tickTime` of `tick_ms` (sessions of 2 to
    /// 1200 ticks, as always).
    pub fn start_with_tick(n: usize, tick_ms: u64) -> std::io::Result<Self> {
        Self::start_with(n, None, Vec::new(), tick_ms)
    }

    /// Like [`Self::start`], server `i`'s wall clock shifted by
    /// `offsets[i]` (libfaketime's syntax, `"+10s"`; `None`: the host's).
    /// ZooKeeper stamps each transaction's `mtime` with its leader's wall
    /// clock, so a shifted server stamps shifted times while it leads.
    pub fn start_with_clocks(n: usize, offsets: &[Option<&str>]) -> std::io::Result<Self> {
        if offsets.iter().any(Option::is_some) && !Path::new(FAKETIME_LIB).is_file() {
            return Err(std::io::Error::other(format!(
                "no {FAKETIME_LIB}: apt-get install libfaketime"
            )));
        }
        let offsets = offsets.iter().map(|o| o.map(str::to_string)).collect();
        Self::start_with(n, None, offsets, TICK_MS)
    }

    /// Like [`Self::start`], each server also serving TLS on a
    /// `secureClientPort` (Netty) with `ca`'s server certificate, trusting
    /// `ca`, and demanding a client certificate if `client_auth`.
    pub fn start_tls(
        n: usize,
        ca: &crate::tls::TestCa,
        client_auth: bool,
    ) -> std::io::Result<Self> {
        Self::start_with(n, Some((ca, client_auth)), Vec::new(), TICK_MS)
    }

    fn start_with(
        n: usize,
        tls: Option<(&crate::tls::TestCa, bool)>,
        clock_offsets: Vec<Option<String>>,
        tick_ms: u64,
    ) -> std::io::Result<Self> {
        let mut classpath = classpath().ok_or_else(|| {
            std::io::Error::other(
                "no ZooKeeper (apt-get install zookeeper, or set TENURE_ZOOKEEPER_CLASSPATH)",
            )
        })?;
        if tls.is_some() {
            // Netty's codec and resolver, which Debian's zookeeper.jar
            // manifest does not name but its TLS (Netty) transport needs.
            for jar in ["netty-codec.jar", "netty-resolver.jar"] {
                let jar = Path::new("/usr/share/java").join(jar);
                if jar.is_file() {
                    classpath.push_str(&format!(":{}", jar.display()));
                }
            }
        }
        let dir = scratch_dir("tenure-zk")?;
        // ZooKeeper's PEM key store holds the key and its certificate.
        let tls = match tls {
            Some((ca, client_auth)) => {
                let keystore = dir.path().join("server-keystore.pem");
                let mut pem = std::fs::read_to_string(&ca.server_key)?;
                pem.push_str(&std::fs::read_to_string(&ca.server_cert)?);
                std::fs::write(&keystore, pem)?;
                Some(format!(
                    "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
                     ssl.keyStore.location={}\nssl.keyStore.type=PEM\n\
                     ssl.trustStore.location={}\nssl.trustStore.type=PEM\n\
                     ssl.clientAuth={}\n",
                    keystore.display(),
                    ca.ca_cert.display(),
                    if client_auth { "need" } else { "none" },
                ))
            }
            None => None,
        };
        let mut client_ports = Vec::new();
        let mut secure_ports = Vec::new();
        let mut quorum = Vec::new();
        for i in 0..n {
            client_ports.push(free_port()?);
            if tls.is_some() {
                secure_ports.push(free_port()?);
            }
            if n > 1 {
                quorum.push(format!(
                    "server.{}=127.0.0.1:{}:{}",
                    i + 1,
                    free_port()?,
                    free_port()?
                ));
            }
        }
        for (i, port) in client_ports.iter().enumerate() {
            let data = dir.path().join(format!("s{i}"));
            std::fs::create_dir_all(&data)?;
            std::fs::write(data.join("myid"), format!("{}\n", i + 1))?;
            let mut cfg = format!(
                "tickTime={tick_ms}\ninitLimit=50\nsyncLimit=20\ndataDir={}\nclientPort={port}\n\
                 clientPortAddress=127.0.0.1\nminSessionTimeout={}\nmaxSessionTimeout={}\n\
                 admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,stat,mntr,cons\n\
                 forceSync=no\nmaxClientCnxns=0\n",
                data.display(),
                2 * tick_ms,
                1200 * tick_ms,
            );
            for q in &quorum {
                cfg.push_str(q);
                cfg.push('\n');
            }
            if let Some(tls) = &tls {
                cfg.push_str(&format!(
                    "secureClientPort={}\nsecureClientPortAddress=127.0.0.1\n{tls}",
                    secure_ports[i]
                ));
            }
            std::fs::write(dir.path().join(format!("zoo{i}.cfg")), cfg)?;
        }
        let mut zk = Self {
            servers: Vec::new(),
            client_ports,
            secure_ports,
            dir,
            classpath,
            clock_offsets,
        };
        for i in 0..n {
            let child = zk.spawn(i)?;
            zk.servers.push(Some(child));
        }
        zk.wait_serving(Duration::from_secs(60))?;
        Ok(zk)
    }

    fn spawn(&self, i: usize) -> std::io::Result<Child> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(i))?;
        let main = if self.client_ports.len() == 1 {
            "org.apache.zookeeper.server.ZooKeeperServerMain"
        } else {
            "org.apache.zookeeper.server.quorum.QuorumPeerMain"
        };
        // Through a shell that SIGKILLs java when its stdin (a pipe this
        // process holds) closes: when this process exits, even with the
        // ensemble in a `static` that is never dropped, or on `kill`.
        let mut command = Command::new("sh");
        if let Some(offset) = self.clock_offsets.get(i).cloned().flatten() {
            // The wall clock only: the JVM's timeouts run on the monotonic one.
            command
                .env("LD_PRELOAD", FAKETIME_LIB)
                .env("FAKETIME", offset)
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
                .env("FAKETIME_NO_CACHE", "1");
        }
        command
            .arg("-c")
            .arg(r#"java "$@" </dev/null & j=$!; read _; kill -9 $j; wait $j"#)
            .arg("sh")
            .args([
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-Xshare:auto",
            ])
            .arg("-Dzookeeper.admin.enableServer=false")
            .arg("-cp")
            .arg(&self.classpath)
            .arg(main)
            .arg(self.dir.path().join(format!("zoo{i}.cfg")))
            .stdin(Stdio::piped())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
    }

    fn log_path(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("s{i}.log"))
    }

    /// Waits until every running server answers `srvr` with a mode (it has
    /// joined a quorum, or is standalone).
    pub fn wait_serving(&self, within: Duration) -> std::io::Result<()> {
        let start = Instant::now();
        for (i, s) in self.servers.iter().enumerate() {
            if s.is_none() {
                continue;
            }
            loop {
                let answer = four_letters(self.client_ports[i], "srvr").unwrap_or_default();
                if answer.contains("Mode:") {
                    break;
                }
                if start.elapsed() > within {
                    return Err(std::io::Error::other(format!(
                        "ZooKeeper server {i} not serving after {within:?}: {}",
                        self.log_tail(i)
                    )));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    /// Like [`Self::start`]; a missing ZooKeeper skips (prints SKIPPED and
    /// returns `None`) unless `required`, where it panics.
    pub fn start_or_skip(n: usize, required: bool) -> Option<Self> {
        if classpath().is_none() {
            if required {
                panic!("ZooKeeper is required (CI=true or TENURE_REQUIRE_SERVERS=1) but not installed: apt-get install zookeeper");
            }
            eprintln!("SKIPPED: no ZooKeeper (apt-get install zookeeper, or set TENURE_ZOOKEEPER_CLASSPATH)");
            return None;
        }
        match Self::start(n) {
            Ok(z) => Some(z),
            Err(e) => panic!("private ZooKeeper did not start: {e}"),
        }
    }

    /// `zk://127.0.0.1:p1[,127.0.0.1:p2...]`.
    pub fn url(&self) -> String {
        format!("zk://{}", self.hosts())
    }

    /// `zks://127.0.0.1:s1[,127.0.0.1:s2...]`: the secure client ports
    /// (started with [`Self::start_tls`]), without parameters.
    pub fn tls_url(&self) -> String {
        let hosts = self
            .secure_ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",");
        format!("zks://{hosts}")
    }

    /// `127.0.0.1:p1[,127.0.0.1:p2...]`.
    pub fn hosts(&self) -> String {
        self.client_ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Server `i`'s client address.
    pub fn server_addr(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.client_ports[i])
    }

    /// The end of server `i`'s log.
    pub fn log_tail(&self, i: usize) -> String {
        let log = std::fs::read_to_string(self.log_path(i)).unwrap_or_default();
        let start = log.len().saturating_sub(2000);
        log.get(start..).unwrap_or_default().to_string()
    }

    /// How many servers the ensemble has.
    pub fn len(&self) -> usize {
        self.client_ports.len()
    }

    /// Whether the ensemble has no servers (never, once started).
    pub fn is_empty(&self) -> bool {
        self.client_ports.is_empty()
    }

    /// SIGKILLs server `i` and waits until it is gone (no-op if it is not running).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.servers.get_mut(i).and_then(Option::take) {
            // Closing the pipe makes the shell SIGKILL java and reap it.
            drop(c.stdin.take());
            let _ = c.wait();
        }
    }

    /// Starts server `i` again (after [`Self::kill`]) on its data and port.
    pub fn restart(&mut self, i: usize) -> std::io::Result<()> {
        if self.servers[i].is_none() {
            let child = self.spawn(i)?;
            self.servers[i] = Some(child);
        }
        self.wait_serving(Duration::from_secs(60))
    }

    /// Which running server leads the ensemble (`srvr` says `Mode: leader`).
    pub fn leader(&self) -> Option<usize> {
        (0..self.servers.len()).find(|&i| {
            self.servers[i].is_some()
                && four_letters(self.client_ports[i], "srvr")
                    .is_ok_and(|a| a.contains("Mode: leader"))
        })
    }

    /// The server's answer to a four-letter command (`mntr`, `srvr`, `cons`).
    pub fn four_letters(&self, i: usize, cmd: &str) -> std::io::Result<String> {
        four_letters(self.client_ports[i], cmd)
    }
}

fn four_letters(port: u16, cmd: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(500),
    )?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(cmd.as_bytes())?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

impl Drop for ZkEnsemble {
    fn drop(&mut self) {
        for i in 0..self.servers.len() {
            self.kill(i);
        }
    }
}
