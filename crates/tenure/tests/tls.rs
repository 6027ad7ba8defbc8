//! TLS to PostgreSQL, MariaDB and etcd (and the Redis TLS launcher): private servers (free ports, temp data
//! directories, started from the installed binaries) with a throwaway test CA,
//! so the machine's shared servers are never reconfigured.
//!
//! Each server test checks, in order: verification with the right CA (by IP and
//! by name) and the conformance suite over it; a wrong CA is refused with an
//! error that names the CA parameter and the fix; the no-verification mode
//! connects anyway; a user that must present a client certificate gets in with
//! one and is refused clearly without. Without the server binaries the tests
//! print SKIPPED, or fail in CI (`tenure_testsupport::servers::required()`).

use std::path::Path;
use std::time::Instant;

use sqlx::Connection;
use tenure::store::{connect, StoreOptions};
use tenure::testing::Conformance;
use tenure::Error;
use tenure_testsupport::servers::required;
use tenure_testsupport::{Kind, Server, ServerOptions, TestCa};

const CERT_USER: &str = "tenure_cert";

/// Starts a private TLS server, or returns `None` (SKIPPED) when its binaries
/// are missing and servers are not required.
fn tls_server(kind: Kind) -> Option<Server> {
    let started = Instant::now();
    let options = ServerOptions::tls().with_cert_user(CERT_USER);
    let server = tokio::task::block_in_place(|| Server::start_or_skip(kind, options, required()))?;
    eprintln!(
        "{kind:?} with TLS on port {} in {:?}",
        server.port,
        started.elapsed()
    );
    Some(server)
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

async fn must_connect(url: &str) -> tenure::store::DynStore {
    connect(url, &StoreOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{url} should connect: {e}"))
}

async fn must_fail(url: &str) -> Error {
    match connect(url, &StoreOptions::default()).await {
        Ok(_) => panic!("{url} must not connect"),
        Err(e) => {
            eprintln!("refused as expected: {e}");
            e
        }
    }
}

fn assert_tls_error(e: &Error, needles: &[&str]) {
    let s = e.to_string();
    assert!(
        matches!(e, Error::Tls { .. }),
        "expected Error::Tls, got {e:?}"
    );
    assert!(e.is_usage(), "a TLS failure is a configuration error: {s}");
    assert!(!e.is_retryable(), "a TLS failure is not retryable: {s}");
    for n in needles {
        assert!(s.contains(n), "error should mention {n:?}: {s}");
    }
}

async fn conformance_over(name: &'static str, url: String) {
    let started = Instant::now();
    Conformance::new(name, move || {
        let url = url.clone();
        async move { must_connect(&url).await }
    })
    .with_handovers(100)
    .run_all()
    .await;
    eprintln!("{name}: conformance over TLS in {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_tls() {
    let Some(server) = tls_server(Kind::Postgres) else {
        return;
    };
    let ca = server.tls().expect("tls");
    let port = server.port;
    let base = |user: &str, host: &str| format!("postgres://{user}@{host}:{port}/test");
    let verify_full = format!(
        "{}?sslmode=verify-full&sslrootcert={}",
        base("postgres", "127.0.0.1"),
        path(&ca.ca_cert)
    );

    // Right CA, host name checked: by IP and by name.
    must_connect(&verify_full).await;
    must_connect(&format!(
        "{}?sslmode=verify-full&sslrootcert={}",
        base("postgres", "localhost"),
        path(&ca.ca_cert)
    ))
    .await;
    // The connection really is encrypted.
    let mut conn = sqlx::postgres::PgConnection::connect(&verify_full)
        .await
        .expect("sqlx connects");
    let ssl: bool = sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(&mut conn)
        .await
        .expect("pg_stat_ssl");
    assert!(ssl, "verify-full connection must use TLS");
    conn.close().await.ok();

    // A CA that did not sign the server certificate.
    let other_dir = tempfile::tempdir().unwrap();
    let other = TestCa::generate(other_dir.path(), "nobody").unwrap();
    let wrong = format!(
        "{}?sslmode=verify-full&sslrootcert={}",
        base("postgres:s3cret-pw", "127.0.0.1"),
        path(&other.ca_cert)
    );
    let e = must_fail(&wrong).await;
    assert_tls_error(
        &e,
        &[
            "server certificate for 127.0.0.1 is not signed by the CA in sslrootcert=",
            &path(&other.ca_cert),
            "sslmode=require",
        ],
    );
    assert!(!e.to_string().contains("s3cret-pw"), "password leaked: {e}");
    // verify-ca fails the same way.
    let e = must_fail(&wrong.replace("verify-full", "verify-ca")).await;
    assert_tls_error(&e, &["not signed by the CA"]);

    // Encryption without verification connects even with the wrong CA.
    let require = format!("{}?sslmode=require", base("postgres", "127.0.0.1"));
    must_connect(&require).await;
    must_connect(&wrong.replace("verify-full", "require")).await;

    // A CA file that does not exist is named.
    let missing = format!(
        "{}?sslmode=verify-full&sslrootcert=/nonexistent/tenure-ca.pem",
        base("postgres", "127.0.0.1")
    );
    assert_tls_error(
        &must_fail(&missing).await,
        &["sslrootcert=/nonexistent/tenure-ca.pem", "No such file"],
    );

    // Client certificate: the server admits CERT_USER only with one.
    let with_cert = format!(
        "{}?sslmode=verify-full&sslrootcert={}&sslcert={}&sslkey={}",
        base(CERT_USER, "127.0.0.1"),
        path(&ca.ca_cert),
        path(&ca.client_cert),
        path(&ca.client_key)
    );
    let store = must_connect(&with_cert).await;
    let key = tenure::store::ElectionKey::new("tls", "cert-user");
    let claim = tenure::store::Claim {
        key: key.clone(),
        holder: "a#1".into(),
        metadata: String::new(),
        ttl: std::time::Duration::from_secs(5),
    };
    let rec = match store.try_acquire(&claim).await.expect("acquire") {
        tenure::store::Acquire::Acquired(rec) => rec,
        other => panic!("should acquire: {other:?}"),
    };
    let tenure = tenure::store::Tenure {
        key: key.clone(),
        holder: "a#1".into(),
        term: rec.term,
    };
    assert!(store.renew(&tenure, claim.ttl).await.expect("renew"));
    assert!(store.release(&tenure).await.expect("release"));
    let e = must_fail(&format!(
        "{}?sslmode=verify-full&sslrootcert={}",
        base(CERT_USER, "127.0.0.1"),
        path(&ca.ca_cert)
    ))
    .await;
    assert_tls_error(
        &e,
        &["requires a valid client certificate", "sslcert=", "sslkey="],
    );
    let e = must_fail(&format!("{}?sslmode=disable", base(CERT_USER, "127.0.0.1"))).await;
    assert_tls_error(&e, &["only over TLS", "sslmode=require"]);

    // The whole conformance suite over verify-full (push included: the
    // LISTEN connection uses the same URL).
    conformance_over("postgres-tls", verify_full).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_tls() {
    let Some(server) = tls_server(Kind::MariaDb) else {
        return;
    };
    let ca = server.tls().expect("tls");
    let port = server.port;
    let base = |user: &str, host: &str| format!("mariadb://{user}@{host}:{port}/test");
    let verify_identity = format!(
        "{}?ssl-mode=VERIFY_IDENTITY&ssl-ca={}",
        base("root", "127.0.0.1"),
        path(&ca.ca_cert)
    );

    must_connect(&verify_identity).await;
    must_connect(&format!(
        "{}?ssl-mode=VERIFY_IDENTITY&ssl-ca={}",
        base("root", "localhost"),
        path(&ca.ca_cert)
    ))
    .await;
    let mut conn =
        sqlx::mysql::MySqlConnection::connect(&verify_identity.replacen("mariadb:", "mysql:", 1))
            .await
            .expect("sqlx connects");
    let (_, cipher): (String, String) = sqlx::query_as("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        .fetch_one(&mut conn)
        .await
        .expect("Ssl_cipher");
    assert!(
        !cipher.is_empty(),
        "VERIFY_IDENTITY connection must use TLS"
    );
    conn.close().await.ok();

    let other_dir = tempfile::tempdir().unwrap();
    let other = TestCa::generate(other_dir.path(), "nobody").unwrap();
    let wrong = format!(
        "{}?ssl-mode=VERIFY_IDENTITY&ssl-ca={}",
        base("root:s3cret-pw", "127.0.0.1"),
        path(&other.ca_cert)
    );
    let e = must_fail(&wrong).await;
    assert_tls_error(
        &e,
        &[
            "server certificate for 127.0.0.1 is not signed by the CA in ssl-ca=",
            &path(&other.ca_cert),
            "ssl-mode=REQUIRED",
        ],
    );
    assert!(!e.to_string().contains("s3cret-pw"), "password leaked: {e}");
    let e = must_fail(&wrong.replace("VERIFY_IDENTITY", "VERIFY_CA")).await;
    assert_tls_error(&e, &["not signed by the CA in ssl-ca="]);

    must_connect(&format!("{}?ssl-mode=REQUIRED", base("root", "127.0.0.1"))).await;
    must_connect(
        &wrong
            .replace("VERIFY_IDENTITY", "REQUIRED")
            .replace(":s3cret-pw", ""),
    )
    .await;

    assert_tls_error(
        &must_fail(&format!(
            "{}?ssl-mode=VERIFY_CA&ssl-ca=/nonexistent/tenure-ca.pem",
            base("root", "127.0.0.1")
        ))
        .await,
        &["ssl-ca=/nonexistent/tenure-ca.pem", "No such file"],
    );

    // An account created with REQUIRE X509.
    must_connect(&format!(
        "{}?ssl-mode=VERIFY_IDENTITY&ssl-ca={}&ssl-cert={}&ssl-key={}",
        base(CERT_USER, "127.0.0.1"),
        path(&ca.ca_cert),
        path(&ca.client_cert),
        path(&ca.client_key)
    ))
    .await;
    let e = must_fail(&format!(
        "{}?ssl-mode=VERIFY_IDENTITY&ssl-ca={}",
        base(CERT_USER, "127.0.0.1"),
        path(&ca.ca_cert)
    ))
    .await;
    let s = e.to_string();
    assert!(
        s.contains("REQUIRE X509") && s.contains("ssl-cert=") && s.contains("ssl-key="),
        "the refusal should point at the client certificate: {s}"
    );

    conformance_over("mariadb-tls", verify_identity).await;
}

/// The Redis TLS launcher (for the Redis store's tests): a private
/// `redis-server` that speaks only TLS, checked with `redis-cli` when present.
#[test]
fn redis_tls_launcher() {
    let Some(server) = Server::start_or_skip(Kind::Redis, ServerOptions::tls(), required()) else {
        return;
    };
    let ca = server.tls().expect("tls");
    assert!(
        server.url().starts_with("rediss://127.0.0.1:"),
        "{}",
        server.url()
    );
    let cli = |extra: &[&str]| {
        std::process::Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &server.port.to_string()])
            .args(extra)
            .arg("PING")
            .output()
    };
    let Ok(out) = cli(&["--tls", "--cacert", &path(&ca.ca_cert)]) else {
        eprintln!(
            "SKIPPED: redis-cli not installed; the server started on {}",
            server.url()
        );
        return;
    };
    let answer = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        answer.trim(),
        "PONG",
        "redis-cli over TLS: {answer} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// TLS to etcd (`etcds://`): private single-member clusters serving clients
/// over TLS with a fresh test CA.
#[cfg(feature = "etcd")]
mod etcd {
    use std::time::Duration;

    use tenure::Elector;
    use tenure_testsupport::{EtcdCluster, EtcdOptions, TestCa};

    use super::{assert_tls_error, must_connect, must_fail, path, required};

    fn start(options: EtcdOptions) -> Option<EtcdCluster> {
        if tenure_testsupport::etcd::binary().is_none() {
            if required() {
                panic!("etcd is required for the TLS tests (CI=true or TENURE_REQUIRE_SERVERS=1): apt-get install etcd-server");
            }
            eprintln!("SKIPPED: etcd TLS tests: no etcd binary");
            return None;
        }
        Some(
            tokio::task::block_in_place(|| EtcdCluster::start_with(1, options))
                .unwrap_or_else(|e| panic!("private etcd with TLS did not start: {e}")),
        )
    }

    /// The URL's hosts (`127.0.0.1:port`), without scheme or parameters.
    fn hosts(cluster: &EtcdCluster) -> String {
        cluster.member_addr(0)
    }

    async fn elects(url: &str, election: &str) {
        let elector = Elector::builder(must_connect(url).await)
            .election(election)
            .ttl(Duration::from_secs(2))
            .build()
            .expect("elector");
        tokio::time::timeout(Duration::from_secs(10), elector.acquired())
            .await
            .unwrap_or_else(|_| panic!("{url} should lead within 10 s"))
            .expect("leads");
        elector.shutdown().await.expect("shutdown");
    }

    /// An admin client over TLS (for enabling authentication).
    async fn admin(cluster: &EtcdCluster) -> etcd_client::Client {
        let ca = cluster.tls().expect("tls");
        let tls = etcd_client::TlsOptions::new()
            .assume_http2(true)
            .ca_certificate(etcd_client::Certificate::from_pem(
                std::fs::read(&ca.ca_cert).expect("ca"),
            ));
        etcd_client::Client::connect(
            [format!("https://{}", hosts(cluster))],
            Some(etcd_client::ConnectOptions::new().with_tls(tls)),
        )
        .await
        .expect("admin client over TLS")
    }

    /// Verified by the right CA (by IP and by name), an election over it, and
    /// the refusals: another CA, no CA file, TLS parameters on `etcd://`, the
    /// scheme not matching the server; the conformance suite over TLS; then
    /// user and password over TLS.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_tls() {
        let Some(cluster) = start(EtcdOptions::tls()) else {
            return;
        };
        let ca = cluster.tls().expect("tls").clone();
        let url = cluster.url();
        assert!(url.starts_with("etcds://127.0.0.1:"), "{url}");
        elects(&url, "tls").await;
        let by_name = url.replace("127.0.0.1", "localhost");
        must_connect(&by_name).await;

        // A CA that did not sign the server certificate.
        let other_dir = tempfile::tempdir().unwrap();
        let other = TestCa::generate(other_dir.path(), "nobody").unwrap();
        let e = must_fail(&format!(
            "etcds://root:s3cret-pw@{}?cacert={}",
            hosts(&cluster),
            path(&other.ca_cert)
        ))
        .await;
        assert_tls_error(
            &e,
            &[
                "the server's certificate is not signed by the CA in cacert=",
                &path(&other.ca_cert),
                "--cert-file",
            ],
        );
        assert!(!e.to_string().contains("s3cret-pw"), "password leaked: {e}");

        // A CA file that does not exist is named.
        let e = must_fail(&format!(
            "etcds://{}?cacert=/nonexistent/tenure-ca.pem",
            hosts(&cluster)
        ))
        .await;
        assert_tls_error(
            &e,
            &["cacert=", "/nonexistent/tenure-ca.pem", "No such file"],
        );
        // Also when nothing listens: the files are checked first.
        let e = must_fail("etcds://127.0.0.1:1?cacert=/nonexistent/tenure-ca.pem").await;
        assert_tls_error(&e, &["cacert=", "/nonexistent/tenure-ca.pem"]);

        // TLS parameters need etcds://.
        let e = must_fail(&format!(
            "etcd://{}?cacert={}",
            hosts(&cluster),
            path(&ca.ca_cert)
        ))
        .await;
        assert!(
            e.is_usage() && e.to_string().contains("use etcds://"),
            "{e}"
        );

        // The scheme does not match the server.
        let e = must_fail(&format!("etcd://{}", hosts(&cluster))).await;
        assert!(e.to_string().contains("etcds://"), "{e}");
        let plain = start(EtcdOptions::default()).expect("plain etcd");
        let e = must_fail(&format!(
            "etcds://{}?cacert={}",
            hosts(&plain),
            path(&ca.ca_cert)
        ))
        .await;
        assert_tls_error(&e, &["does not serve TLS", "use etcd://"]);
        drop(plain);

        // The whole conformance suite over TLS (watches included).
        super::conformance_over("etcd-tls", url.clone()).await;

        // User and password over TLS: a wrong password is refused without
        // being echoed; the right one elects.
        let mut admin = admin(&cluster).await;
        admin.user_add("root", "rootpw", None).await.expect("root");
        admin
            .user_grant_role("root", "root")
            .await
            .expect("root role");
        admin.auth_enable().await.expect("auth on");
        let with_user = |user: &str| {
            format!(
                "etcds://{user}@{}?cacert={}",
                hosts(&cluster),
                path(&ca.ca_cert)
            )
        };
        let e = must_fail(&with_user("root:wrong-pw")).await;
        assert!(matches!(e, tenure::Error::PermissionDenied { .. }), "{e:?}");
        assert!(!e.to_string().contains("wrong-pw"), "password leaked: {e}");
        assert!(
            !format!("{e:?}").contains("wrong-pw"),
            "password leaked: {e:?}"
        );
        elects(&with_user("root:rootpw"), "tls-auth").await;
    }

    /// `--client-cert-auth`: the test CA's client certificate gets in; without
    /// one the refusal names cert= and key=.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_tls_client_certificate() {
        let Some(cluster) = start(EtcdOptions::tls().with_client_cert_auth()) else {
            return;
        };
        let ca = cluster.tls().expect("tls").clone();
        let url = cluster.url();
        elects(
            &format!(
                "{url}&cert={}&key={}",
                path(&ca.client_cert),
                path(&ca.client_key)
            ),
            "client-cert",
        )
        .await;
        let e = must_fail(&url).await;
        assert_tls_error(
            &e,
            &["client certificate", "cert=client.pem&key=client.key"],
        );
    }
}
