//! The ZooKeeper store from the command line: bad input gets a clear error
//! (exit 2 for usage), secrets never appear, and nothing is written outside
//! the chroot. One private ZooKeeper server for the whole file.

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use common::{tenure, text};
use tenure_testsupport::servers;
use tenure_testsupport::ZkEnsemble;
use zookeeper_client::{Acls, Client, CreateMode};

fn zk() -> Option<&'static ZkEnsemble> {
    static ZK: OnceLock<Option<ZkEnsemble>> = OnceLock::new();
    ZK.get_or_init(|| ZkEnsemble::start_or_skip(1, servers::required()))
        .as_ref()
}

/// The tests that compare the whole tree before and after take turns: two
/// of them create a root of their own (`/foreign`, `/locked`) that the
/// others would see appear (CI saw it).
static WHOLE_TREE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `tenure args` (in a temporary directory) and checks its exit code,
/// that each needle is in its output, and that it did not panic.
fn assert_fails(args: &[&str], code: i32, needles: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = tenure(dir.path(), args);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(code), "{args:?}\n{all}");
    for n in needles {
        assert!(all.contains(n), "{args:?}: expected {n:?} in\n{all}");
    }
    assert!(!all.contains("panicked"), "{all}");
    all
}

/// Every znode path under `/` except ZooKeeper's own and the `/cli-*`
/// chroots of the tests that write (they run concurrently on one server).
async fn tree(client: &Client) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec!["/".to_string()];
    while let Some(p) = todo.pop() {
        let children = client.list_children(&p).await.unwrap_or_default();
        for c in children {
            let child = if p == "/" {
                format!("/{c}")
            } else {
                format!("{p}/{c}")
            };
            if child != "/zookeeper" && !child.starts_with("/cli-") {
                out.push(child.clone());
                todo.push(child);
            }
        }
    }
    out.sort();
    out
}

/// A TTL too short for the servers' tickTime (a session could end before
/// the leader's deadline) is a usage error at the first acquisition: exit 2,
/// naming the tick and the shortest TTL allowed, and the job never runs.
#[test]
fn a_ttl_too_short_for_the_tick_exits_2() {
    if tenure_testsupport::zookeeper::classpath().is_none() && !servers::required() {
        eprintln!("skipping: no ZooKeeper installed (apt-get install zookeeper)");
        return;
    }
    let zk = ZkEnsemble::start_with_tick(1, 1500).expect("private ZooKeeper with a 1.5 s tick");
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let job = format!("touch {}", marker.display());
    let url = zk.url();
    let all = assert_fails(
        &[
            "run",
            "--store",
            &url,
            "--election",
            "tick",
            "--ttl",
            "2s",
            "--",
            "sh",
            "-c",
            &job,
        ],
        2,
        &["tickTime", "at least 2.25s"],
    );
    assert!(!marker.exists(), "the job ran: {all}");
}

/// Creates `path` (a chroot of the tests that write) and returns its URL.
fn chroot(zk: &ZkEnsemble, path: &str) -> String {
    let rt = rt();
    rt.block_on(async {
        let client = Client::connect(&zk.hosts()).await.unwrap();
        let opts = CreateMode::Persistent.with_acls(Acls::anyone_all());
        let _ = client.create(path, b"", &opts).await;
    });
    format!("{}{path}", zk.url())
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn malformed_zk_urls_are_usage_errors() {
    for (url, needle) in [
        ("zk://", "no host"),
        ("zk://h1", "has no port"),
        ("zk://h1:2181//a", "not a valid znode path"),
        ("zk://h1:2181/a?digest=x", "no query parameters"),
    ] {
        assert_fails(
            &["status", "--store", url],
            2,
            &[needle, "expected zk://host:2181"],
        );
    }
}

#[test]
fn unreachable_ensemble_is_unavailable_and_the_password_is_redacted() {
    let all = assert_fails(
        &[
            "status",
            "--store",
            "zk://bob:hunter2secret@127.0.0.1:1,127.0.0.1:2/app",
        ],
        1,
        &["unavailable", "zk://bob:***@127.0.0.1:1,127.0.0.1:2/app"],
    );
    assert!(!all.contains("hunter2secret"), "{all}");
}

#[test]
fn wrong_chroot_is_a_usage_error_and_writes_nothing() {
    let Some(zk) = zk() else { return };
    let _turn = WHOLE_TREE.lock().unwrap_or_else(|p| p.into_inner());
    let rt = rt();
    let client = rt.block_on(Client::connect(&zk.hosts())).unwrap();
    let before = rt.block_on(tree(&client));
    let url = format!("{}/no/such/chroot", zk.url());
    assert_fails(
        &["status", "--store", &url],
        2,
        &[
            "the chroot /no/such/chroot does not exist",
            "zkCli.sh create",
        ],
    );
    assert_fails(
        &["run", "--store", &url, "--election", "e", "--", "true"],
        2,
        &["the chroot /no/such/chroot does not exist"],
    );
    assert_eq!(rt.block_on(tree(&client)), before, "nothing written");
}

#[test]
fn a_tree_another_program_owns_is_refused_untouched() {
    let Some(zk) = zk() else { return };
    let _turn = WHOLE_TREE.lock().unwrap_or_else(|p| p.into_inner());
    let rt = rt();
    let client = rt.block_on(Client::connect(&zk.hosts())).unwrap();
    let opts = CreateMode::Persistent.with_acls(Acls::anyone_all());
    rt.block_on(async {
        let _ = client.create("/foreign", b"", &opts).await;
        let _ = client
            .create("/foreign/tenure_", b"kafka brokers", &opts)
            .await;
        let _ = client.create("/foreign/tenure_/ids", b"", &opts).await;
    });
    let before = rt.block_on(tree(&client));
    let url = format!("{}/foreign", zk.url());
    assert_fails(
        &["status", "--store", &url],
        2,
        &[
            "znode /foreign/tenure_ exists but is not a tenure store",
            "another program owns it",
        ],
    );
    assert_eq!(rt.block_on(tree(&client)), before, "nothing written");
    // Another prefix in the same chroot is fine.
    let dir = tempfile::tempdir().unwrap();
    let out = tenure(
        dir.path(),
        &["status", "--store", &url, "--table-prefix", "elections"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

#[test]
fn acl_denied_names_the_znode_and_the_fix() {
    let Some(zk) = zk() else { return };
    let _turn = WHOLE_TREE.lock().unwrap_or_else(|p| p.into_inner());
    let rt = rt();
    let client = rt.block_on(Client::connect(&zk.hosts())).unwrap();
    let read_only = CreateMode::Persistent.with_acls(Acls::anyone_read());
    rt.block_on(async {
        let _ = client.create("/locked", b"", &read_only).await;
    });
    let before = rt.block_on(tree(&client));
    let url = format!("{}/locked", zk.url());
    assert_fails(
        &["status", "--store", &url],
        1,
        &["refused access", "ACL on /tenure_", "grant"],
    );
    assert_eq!(rt.block_on(tree(&client)), before, "nothing written");
}

#[test]
fn run_and_status_on_zookeeper() {
    let Some(zk) = zk() else { return };
    let url = chroot(zk, "/cli-run");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run.log");
    let marker = dir.path().join("started");
    let mut child = common::spawn_tenure(
        dir.path(),
        &[
            "run",
            "--store",
            &url,
            "--election",
            "zk-cli",
            "--ttl",
            "2s",
            "--",
            "sh",
            "-c",
            &format!("echo $TENURE_TERM > {}; sleep 60", marker.display()),
        ],
        &log,
    );
    let start = std::time::Instant::now();
    while !marker.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the job did not start: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let term: u64 = std::fs::read_to_string(&marker)
        .unwrap()
        .trim()
        .parse()
        .expect("TENURE_TERM");
    assert!(term >= 1);
    let out = tenure(dir.path(), &["status", "--store", &url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("zk-cli"), "{}", text(&out));
    let _ = child.kill();
    let _ = child.wait();
}

/// The leader's client is cut off from the ensemble (a proxy that swallows
/// all traffic, connections left open): it must step down by its own
/// deadline, before the ensemble expires its session and the follower,
/// connected directly, takes over; and the follower must take over within
/// a few TTLs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_steps_down_before_the_follower_takes_over() {
    let Some(zk) = tokio::task::spawn_blocking(zk).await.unwrap() else {
        return;
    };
    partitioned_leader_steps_down(zk, 0, 0, "/cli-partition").await;
}

/// The same on a 3-server ensemble with one server killed: the leader's
/// client reaches the ensemble only through a proxy to server 0, the
/// follower's talks to server 2; server 0 stays in the quorum (only the
/// client is cut off from it), so the ensemble keeps serving the follower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_on_an_ensemble_with_a_dead_server_steps_down_first() {
    let Some(mut zk) =
        tokio::task::spawn_blocking(|| ZkEnsemble::start_or_skip(3, servers::required()))
            .await
            .unwrap()
    else {
        return;
    };
    zk.kill(1);
    partitioned_leader_steps_down(&zk, 0, 2, "/cli-partition-ensemble").await;
}

/// A leader connected only through a proxy to server `via`, a follower
/// connected directly to server `direct`; the proxy is cut.
async fn partitioned_leader_steps_down(zk: &ZkEnsemble, via: usize, direct: usize, root: &str) {
    use tenure::store::{connect, StoreOptions};
    use tenure::Elector;

    {
        let client = Client::connect(&zk.server_addr(direct))
            .await
            .expect("zk client");
        let opts = CreateMode::Persistent.with_acls(Acls::anyone_all());
        let _ = client.create(root, b"", &opts).await;
    }
    let chrooted = format!("zk://{}{root}", zk.server_addr(direct));
    let proxy = common::Proxy::start(&zk.server_addr(via))
        .await
        .expect("start the proxy");
    let opts = StoreOptions::default().with_connect_timeout(Duration::from_secs(2));
    let ttl = Duration::from_secs(2);
    let a_store = connect(&format!("zk://127.0.0.1:{}{root}", proxy.port), &opts)
        .await
        .expect("store via proxy");
    let b_store = connect(&chrooted, &opts).await.expect("direct store");
    let a = Elector::builder(a_store)
        .election("partition")
        .identity("a")
        .ttl(ttl)
        .build()
        .expect("elector a");
    let a_leads = tokio::time::timeout(Duration::from_secs(10), a.acquired())
        .await
        .expect("a leads")
        .expect("alive");
    let b = Elector::builder(b_store)
        .election("partition")
        .identity("b")
        .ttl(ttl)
        .build()
        .expect("elector b");
    // b registered and following before the cut.
    tokio::time::sleep(ttl / 2).await;
    assert!(!b.is_leader());
    proxy.set_blackhole(true);
    let cut = std::time::Instant::now();
    let (a_lost, b_leads) = tokio::join!(
        async {
            tokio::time::timeout(ttl * 2, a_leads.lost())
                .await
                .expect("a steps down by its deadline");
            std::time::Instant::now()
        },
        async {
            tokio::time::timeout(ttl * 5, b.acquired())
                .await
                .expect("b takes over")
                .expect("alive");
            std::time::Instant::now()
        }
    );
    assert!(
        a_lost <= b_leads,
        "a stepped down {:?} after the cut, b took over {:?} after it",
        a_lost - cut,
        b_leads - cut
    );
    eprintln!(
        "partition: a stepped down after {:?}, b took over after {:?}",
        a_lost - cut,
        b_leads - cut
    );
    drop(a);
    drop(b);
}
