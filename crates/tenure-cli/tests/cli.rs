//! Bad input gets a clear error and exit code 2; store problems exit 1 with a
//! message that names the fix; secrets never appear.

mod common;

use common::{tenure, text};
use tenure::store::LeaseStoreExt;
use tenure_testsupport::servers;

fn assert_fails(args: &[&str], code: i32, needles: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let out = tenure(dir.path(), args);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(code), "{args:?}\n{all}");
    for n in needles {
        assert!(all.contains(n), "{args:?}: expected {n:?} in\n{all}");
    }
    assert!(!all.contains("panicked"), "{all}");
}

#[test]
fn usage_errors_exit_2_with_the_reason() {
    let long = "x".repeat(256);
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec!["status", "--store", "oracle://db"],
            vec![
                "unknown scheme \"oracle\"",
                "supported: sqlite, mysql, mariadb, postgres",
            ],
        ),
        (
            vec!["status", "--store", "no-scheme-here"],
            vec!["missing scheme"],
        ),
        (
            vec!["status", "--store", "sqlite::memory:"],
            vec!["in-memory SQLite"],
        ),
        (
            vec!["run", "--election", "", "--", "true"],
            vec!["invalid election: must not be empty"],
        ),
        (
            vec!["run", "--election", &long, "--", "true"],
            vec!["invalid election: is 256 bytes long; the limit is 255"],
        ),
        (
            vec!["run", "--election", "a\u{1}b", "--", "true"],
            vec!["control character"],
        ),
        (
            vec!["run", "--election", "e", "--namespace", "", "--", "true"],
            vec!["invalid namespace"],
        ),
        (
            vec!["run", "--election", "e", "--ttl", "50ms", "--", "true"],
            vec!["invalid ttl: 50ms is too small; the minimum is 100ms"],
        ),
        (
            vec!["run", "--election", "e", "--ttl", "ten", "--", "true"],
            vec!["invalid value 'ten' for '--ttl"],
        ),
        (
            vec![
                "run",
                "--election",
                "e",
                "--ttl",
                "1s",
                "--renew-period",
                "600ms",
                "--",
                "true",
            ],
            vec!["renew period: 600ms must be above zero and below ttl/2 = 500ms"],
        ),
        (
            vec!["run", "--election", "e"],
            vec!["required arguments were not provided", "<CMD>"],
        ),
        (
            vec!["run", "--election", "e", "--", "/no/such/cmd"],
            vec!["command not found or not executable"],
        ),
        (
            vec![
                "run",
                "--election",
                "e",
                "--ttl",
                "2s",
                "--kill-grace",
                "1500ms",
                "--",
                "true",
            ],
            vec!["--kill-grace"],
        ),
        // The TTL is judged first, not through the kill grace derived from it.
        (
            vec!["run", "--election", "e", "--ttl", "0s", "--", "true"],
            vec!["--ttl: invalid ttl: 0ns is too small; the minimum is 100ms"],
        ),
        // Each value passes alone; together they leave no time to renew.
        (
            vec![
                "run", "--election", "e", "--ttl", "1s", "--renew-period", "490ms", "--kill-grace",
                "490ms", "--", "true",
            ],
            vec![
                "--kill-grace: invalid kill grace: 490ms does not fit: with ttl 1s and renew period 490ms",
                "use a kill grace of at most",
                "or a ttl of at least",
            ],
        ),
        (
            vec!["status", "--table-prefix", "bad-prefix"],
            vec!["not a SQL identifier"],
        ),
        (
            vec!["status", "--store-file", "/no/such/file"],
            vec!["cannot read --store-file /no/such/file"],
        ),
        (
            vec!["migrate", "--print-sql", "--store", "memory://"],
            vec!["not a SQL scheme"],
        ),
        (vec!["frobnicate"], vec!["unrecognized subcommand"]),
        (
            vec!["run", "--election", "e", "--priority", "-1", "--", "true"],
            vec!["invalid priority: -1 is out of range; use 0 to 1000"],
        ),
        (
            vec![
                "run",
                "--election",
                "e",
                "--priority",
                "100000",
                "--",
                "true",
            ],
            vec!["invalid priority: 100000 is out of range"],
        ),
        (
            vec!["resign", "--election", ""],
            vec!["invalid election: must not be empty"],
        ),
        (vec!["transfer", "--election", "e"], vec!["--to <IDENTITY>"]),
    ];
    for (args, needles) in cases {
        assert_fails(&args, 2, &needles);
    }
}

#[test]
fn unreachable_store_says_so_and_suggests_wait_without_leaking_the_password() {
    assert_fails(
        &[
            "status",
            "--store",
            "mysql://root:hunter2secret@127.0.0.1:1/test",
        ],
        1,
        &[
            "unavailable",
            "Connection refused",
            "--wait",
            "mysql://root:***@127.0.0.1:1/test",
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let out = tenure(
        dir.path(),
        &[
            "status",
            "--store",
            "postgres://u:hunter2secret@127.0.0.1:1/x",
        ],
    );
    assert!(!text(&out).contains("hunter2secret"), "{}", text(&out));
}

#[test]
fn tls_setup_errors_exit_2_and_name_the_parameter() {
    // Checked before connecting: no server needed, and `--wait` does not retry.
    assert_fails(
        &[
            "run",
            "--wait",
            "--election",
            "e",
            "--store",
            "postgres://u:hunter2secret@127.0.0.1:1/x?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
            "--",
            "true",
        ],
        2,
        &["TLS to store", "cannot read sslrootcert=/nonexistent/ca.pem"],
    );
    assert_fails(
        &[
            "status",
            "--store",
            "mariadb://u@127.0.0.1:1/x?ssl-mode=VERIFY_IDENTITY&ssl-ca=/nonexistent/ca.pem",
        ],
        2,
        &["cannot read ssl-ca=/nonexistent/ca.pem"],
    );
    assert_fails(
        &[
            "run",
            "--wait",
            "--election",
            "e",
            "--store",
            "etcds://root:hunter2secret@127.0.0.1:1,127.0.0.1:2?cacert=/nonexistent/ca.pem",
            "--",
            "true",
        ],
        2,
        &[
            "TLS to store etcds://root:***@",
            "cannot read cacert=/nonexistent/ca.pem: No such file",
        ],
    );
    assert_fails(
        &["status", "--store", "etcd://127.0.0.1:1?cacert=/ca.pem"],
        2,
        &["use etcds://"],
    );
    let dir = tempfile::tempdir().unwrap();
    let out = tenure(
        dir.path(),
        &[
            "status",
            "--store",
            "postgres://u:hunter2secret@127.0.0.1:1/x?sslpassword=keypass99&sslkey=/k",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("sslpassword is not supported"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("hunter2secret") && !text(&out).contains("keypass99"));
}

#[test]
fn store_file_keeps_the_url_out_of_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("store.url");
    std::fs::write(&f, "mysql://root:filesecret@127.0.0.1:1/test\n").unwrap();
    let out = tenure(dir.path(), &["status", "--store-file", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!text(&out).contains("filesecret"), "{}", text(&out));
    assert!(text(&out).contains("root:***@"), "{}", text(&out));
}

#[tokio::test]
async fn unknown_schema_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let out = tenure(dir.path(), &["migrate", "--store", &url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let current = tenure::store::sql::SCHEMA_VERSION;
    assert!(text(&out).contains(&format!("schema version {current} is in place")));
    {
        use sqlx::Connection;
        let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::query("UPDATE tenure_schema SET version = 99")
            .execute(&mut c)
            .await
            .unwrap();
    }
    assert_fails(
        &["status", "--store", &url],
        1,
        &[
            "schema version 99",
            &format!("understands only up to {current}"),
            "upgrade tenure",
        ],
    );
}

#[test]
fn missing_table_without_create_permission_names_the_fix_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ro.db");
    std::fs::write(&path, b"").unwrap();
    // mode=ro: the connection may read but not create tables.
    let url = format!("sqlite://{}?mode=ro", path.display());
    assert_fails(
        &["run", "--store", &url, "--election", "e", "--", "true"],
        1,
        &["cannot create the tenure_leases", "migrate --print-sql"],
    );
}

#[tokio::test]
async fn missing_table_without_create_permission_names_the_fix_postgres() {
    let admin = servers::postgres_url();
    let Some(_) = servers::connect_or_skip(&admin, &Default::default()).await else {
        return;
    };
    {
        use sqlx::Connection;
        let mut c = sqlx::PgConnection::connect(&admin).await.unwrap();
        // A login role with no privileges: since PostgreSQL 15 only the owner may
        // create tables in the public schema. No server setting is changed.
        let _ = sqlx::query("CREATE ROLE tenure_test_noperm LOGIN")
            .execute(&mut c)
            .await;
    }
    let url = admin.replacen("postgres@", "tenure_test_noperm@", 1);
    assert!(
        url.contains("tenure_test_noperm@"),
        "test expects a postgres@ URL, got {url}"
    );
    assert_fails(
        &[
            "run",
            "--store",
            &url,
            "--table-prefix",
            "noperm_",
            "--election",
            "e",
            "--",
            "true",
        ],
        1,
        &[
            "refused access",
            "cannot create the noperm_leases",
            "migrate --print-sql --store URL --table-prefix noperm_",
        ],
    );
}

#[tokio::test]
async fn migrate_prints_ddl_for_each_dialect() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let out = tenure(
        dir.path(),
        &[
            "migrate",
            "--print-sql",
            "--store",
            &url,
            "--table-prefix",
            "app_",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let sql = String::from_utf8_lossy(&out.stdout);
    assert!(
        sql.contains("CREATE TABLE IF NOT EXISTS app_leases"),
        "{sql}"
    );
    assert!(sql.contains("INSERT INTO app_schema"), "{sql}");
    assert!(
        !dir.path().join("t.db").exists(),
        "printing the SQL creates nothing"
    );
    for (url, needle) in [
        (servers::mysql_url(), "utf8mb4_nopad_bin"),
        (servers::postgres_url(), "BIGINT"),
    ] {
        if servers::connect_or_skip(&url, &Default::default())
            .await
            .is_none()
        {
            continue;
        }
        let out = tenure(dir.path(), &["migrate", "--print-sql", "--store", &url]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(needle),
            "{}",
            text(&out)
        );
    }
}

#[test]
fn store_comes_from_tenure_store_when_no_flag_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("env.db").display());
    let out = std::process::Command::new(common::BIN)
        .args(["status"])
        .current_dir(dir.path())
        .env("TENURE_STORE", &url)
        .output()
        .unwrap();
    // `status` creates nothing, not even an empty file behind a mistyped
    // path: it names the store it looked in and the missing file.
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("store {url} schema problem"))
            && stderr.contains("there is no database file"),
        "{}",
        text(&out)
    );
    assert!(
        !dir.path().join("env.db").exists(),
        "status created the file"
    );
    assert!(
        !dir.path().join("tenure.db").exists(),
        "the default was not used"
    );
}

/// A leader (this test, holding the lease through the library) and one member
/// on a fresh SQLite file; returns the URL, the store and the leader's tenure.
async fn sqlite_with_a_leader_and_a_member(
    dir: &std::path::Path,
    ttl: std::time::Duration,
) -> (String, tenure::store::DynStore, tenure::store::Tenure) {
    use tenure::store::{Acquire, Claim, ElectionKey, Member, StoreOptions, Tenure};
    let url = format!("sqlite://{}", dir.join("t.db").display());
    let store = tenure::store::connect(&url, &StoreOptions::default())
        .await
        .unwrap();
    let key = ElectionKey::new("default", "jobs");
    let claim = Claim {
        key: key.clone(),
        holder: "lead#1".into(),
        metadata: String::new(),
        ttl,
    };
    let Acquire::Acquired(rec) = store.try_acquire(&claim).await.unwrap() else {
        panic!("a fresh file has no leader")
    };
    let member = Member {
        key: key.clone(),
        holder: "target#1".into(),
        metadata: String::new(),
        priority: 0,
    };
    store
        .heartbeat(&member, std::time::Duration::from_secs(3600))
        .await
        .unwrap();
    let tenure = Tenure {
        key,
        holder: "lead#1".into(),
        term: rec.term,
    };
    (url, store, tenure)
}

/// `tenure transfer --election jobs --to target --wait 0s EXTRA...`.
fn transfer_to_target(dir: &std::path::Path, url: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "transfer",
        "--store",
        url,
        "--election",
        "jobs",
        "--to",
        "target",
        "--wait",
        "0s",
    ];
    args.extend_from_slice(extra);
    tenure(dir, &args)
}

/// `--window` is bounded: an overflowing or absurd window is a usage error
/// (exit 2) before anything is written, and the store stays readable (an
/// unbounded 18446744073709551615s would panic, and 300000y would store a
/// REAL in SQLite that fails every later read of the election).
#[tokio::test]
async fn transfer_window_is_bounded_and_nothing_is_corrupted() {
    let dir = tempfile::tempdir().unwrap();
    let (url, store, _) =
        sqlite_with_a_leader_and_a_member(dir.path(), std::time::Duration::from_secs(60)).await;
    for window in ["300000y", "18446744073709551615s", "0s", "2h"] {
        let out = transfer_to_target(dir.path(), &url, &["--window", window]);
        let all = text(&out);
        assert_eq!(out.status.code(), Some(2), "--window {window}: {all}");
        assert!(
            all.contains("--window") && all.contains("at most 3600s"),
            "{all}"
        );
        assert!(!all.contains("panicked"), "{all}");
        let out = tenure(dir.path(), &["status", "--store", &url]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "status after --window {window}: {}",
            text(&out)
        );
    }
    let key = tenure::store::ElectionKey::new("default", "jobs");
    let rec = store.read(&key).await.unwrap().unwrap();
    assert_eq!(rec.handover, None, "no hand-over was written");
    // The library refuses the same windows, and every store refuses windows
    // that could overflow now + window.
    let err = tenure::handover::transfer(
        &store,
        &key,
        "target",
        std::time::Duration::from_secs(u64::MAX),
    )
    .await
    .unwrap_err();
    assert!(err.is_usage(), "{err}");
    let err = store
        .request_handover(
            &key,
            &tenure::store::Handover::Anyone,
            std::time::Duration::from_secs(300_000 * 365 * 86_400),
            tenure::store::HandoverReason::Transfer,
        )
        .await
        .unwrap_err();
    assert!(err.is_usage(), "{err}");
    assert!(store.read(&key).await.is_ok());
    // A sane window still works.
    let out = transfer_to_target(dir.path(), &url, &["--window", "5s"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

/// `*` is what the stores keep for a hand-over to anyone: `transfer --to '*'`
/// is a usage error (exit 2), in the CLI and in the library, even where a
/// member registered under that identity, and it writes nothing; no
/// candidate may take `*` as its identity (stored, the request would read
/// as a resignation).
#[tokio::test]
async fn transfer_to_the_anyone_sentinel_is_refused() {
    use tenure::store::{ElectionKey, Member};
    let dir = tempfile::tempdir().unwrap();
    let (url, store, _) =
        sqlite_with_a_leader_and_a_member(dir.path(), std::time::Duration::from_secs(60)).await;
    let key = ElectionKey::new("default", "jobs");
    let sentinel = Member {
        key: key.clone(),
        holder: "*#1".into(),
        metadata: String::new(),
        priority: 0,
    };
    store
        .heartbeat(&sentinel, std::time::Duration::from_secs(3600))
        .await
        .unwrap();
    let out = tenure(
        dir.path(),
        &[
            "transfer",
            "--store",
            &url,
            "--election",
            "jobs",
            "--to",
            "*",
            "--wait",
            "0s",
        ],
    );
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(
        all.contains("--to") && all.contains("\"*\" is not an identity") && all.contains("resign"),
        "{all}"
    );
    let err = tenure::handover::transfer(&store, &key, "*", std::time::Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(err.is_usage(), "{err}");
    assert!(err.to_string().contains("not an identity"), "{err}");
    let rec = store.read(&key).await.unwrap().unwrap();
    assert_eq!(rec.handover, None, "no hand-over was written");
    assert_eq!(
        rec.holder.as_deref(),
        Some("lead#1"),
        "the leader still leads"
    );
    let out = tenure(
        dir.path(),
        &[
            "run",
            "--store",
            &url,
            "--election",
            "jobs",
            "--id",
            "*",
            "--",
            "true",
        ],
    );
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(
        all.contains("identity") && all.contains("reserved"),
        "{all}"
    );
    let out = tenure(dir.path(), &["status", "--store", &url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

/// A transfer target that is registered but has not sent a heartbeat for
/// longer than the TTL (crashed, its registration not yet lapsed) is refused,
/// by the rule succession uses.
#[tokio::test]
async fn transfer_to_a_member_with_a_stale_heartbeat_is_refused() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let ttl = Duration::from_millis(300);
    let (url, store, held) = sqlite_with_a_leader_and_a_member(dir.path(), ttl).await;
    // Keep leading while the member's one heartbeat grows older than 2 TTLs.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(750) {
        assert!(
            store.renew(&held, ttl).await.unwrap(),
            "the test's lease renews"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let renewing = {
        let store = store.clone();
        let held = held.clone();
        tokio::spawn(async move {
            loop {
                let _ = store.renew(&held, ttl).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let out = transfer_to_target(dir.path(), &url, &[]);
    renewing.abort();
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(
        all.contains("\"target\" is registered") && all.contains("not heard from"),
        "{all}"
    );
}

/// The deliberate bugs of the chaos harness are not in a normal build, even
/// one with every feature of the workspace (before, a cargo feature unified
/// them into the CLI): `TENURE_CHAOS_BUG` changes nothing.
#[test]
fn chaos_bugs_are_not_in_normal_builds() {
    assert!(
        !tenure::chaos_bugs_compiled_in(),
        "this test build (--all-features) must not have the deliberate bugs"
    );
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    for bug in [
        "renew-unchecked",
        "loss-on-failed-renew",
        "wall-clock",
        "whole-seconds",
        "no-margin",
        "deadline-after-reply",
        "term-not-incremented",
        "late-reply-accepted",
        "keep-alive-reused",
        "batch-wrong-item",
    ] {
        let out = std::process::Command::new(common::BIN)
            .args(["run", "--store", &url, "--election", "e", "--", "true"])
            .env("TENURE_CHAOS_BUG", bug)
            .env("TENURE_LOG", "info")
            .output()
            .unwrap();
        let all = text(&out);
        assert_eq!(out.status.code(), Some(0), "{all}");
        assert!(!all.contains("DELIBERATE BUG"), "{bug}: {all}");
    }
}

/// A file that is not an SQLite database: one clear message, exit 2, and none
/// of the pool's raw "error returned from after_connect" lines.
#[test]
fn a_file_that_is_not_an_sqlite_database_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.db");
    let noise: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&path, noise).unwrap();
    let url = format!("sqlite://{}", path.display());
    for args in [
        vec!["status", "--store", url.as_str()],
        vec![
            "run",
            "--store",
            url.as_str(),
            "--election",
            "e",
            "--",
            "true",
        ],
    ] {
        let out = tenure(dir.path(), &args);
        let all = text(&out);
        assert_eq!(out.status.code(), Some(2), "{all}");
        assert_eq!(all.matches("is not an SQLite database").count(), 1, "{all}");
        assert!(
            !all.contains("after_connect") && !all.contains("no connection could be opened"),
            "{all}"
        );
    }
}

/// Tables named like tenure's that belong to another program: the message
/// says so and points to --table-prefix, on SQLite and PostgreSQL.
#[tokio::test]
async fn a_foreign_table_with_tenures_name_points_to_table_prefix() {
    use sqlx::{Connection, Executor};
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
    let mut c = sqlx::SqliteConnection::connect(&sqlite).await.unwrap();
    c.execute("CREATE TABLE tenure_leases (id INTEGER PRIMARY KEY, payload TEXT)")
        .await
        .unwrap();
    c.close().await.unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let dir2 = tempfile::tempdir().unwrap();
    let sqlite2 = format!("sqlite://{}?mode=rwc", dir2.path().join("t.db").display());
    let mut c = sqlx::SqliteConnection::connect(&sqlite2).await.unwrap();
    c.execute("CREATE TABLE tenure_schema (name TEXT, version INTEGER)")
        .await
        .unwrap();
    c.close().await.unwrap();
    let url2 = format!("sqlite://{}", dir2.path().join("t.db").display());
    let mut urls = vec![(url, ""), (url2, "")];
    let pg = servers::postgres_url();
    let prefix = format!("foreign{}_", std::process::id());
    if let Some(_store) =
        servers::connect_or_skip(&pg, &tenure::store::StoreOptions::default()).await
    {
        let mut c = sqlx::PgConnection::connect(&pg).await.unwrap();
        c.execute(
            format!("CREATE TABLE {prefix}leases (id INT PRIMARY KEY, payload TEXT)").as_str(),
        )
        .await
        .unwrap();
        urls.push((pg.clone(), prefix.as_str()));
    }
    for (url, prefix) in &urls {
        let mut args = vec!["status", "--store", url.as_str()];
        if !prefix.is_empty() {
            args.extend(["--table-prefix", prefix]);
        }
        let out = tenure(dir.path(), &args);
        let all = text(&out);
        assert_ne!(out.status.code(), Some(0), "{all}");
        assert!(
            all.contains("exists here but is not tenure's") && all.contains("--table-prefix"),
            "{all}"
        );
    }
    if urls.len() == 3 {
        let mut c = sqlx::PgConnection::connect(&pg).await.unwrap();
        let created: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM pg_tables WHERE tablename LIKE '{prefix}%' AND tablename <> '{prefix}leases'"
        ))
        .fetch_one(&mut c)
        .await
        .unwrap();
        assert_eq!(created, 0, "nothing is created beside the foreign table");
        for t in ["leases", "members", "history", "schema"] {
            c.execute(format!("DROP TABLE IF EXISTS {prefix}{t}").as_str())
                .await
                .unwrap();
        }
    }
}

/// Bad store URLs and settings, each with its exit code, the words the
/// message must contain, and words it must not (secrets). Cases that need a
/// local server run when it is there (always in CI).
#[tokio::test]
async fn bad_urls_and_settings_each_get_a_message_that_names_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let long_metadata = "x".repeat(5000);
    let empty_file = dir.path().join("empty-url");
    std::fs::write(&empty_file, "\n").unwrap();
    let empty_file = empty_file.display().to_string();
    type Case<'a> = (Vec<&'a str>, i32, Vec<&'a str>, Vec<&'a str>);
    let mut cases: Vec<Case> = vec![
        (
            vec!["status", "--store", "sqlite://"],
            2,
            vec!["in-memory SQLite database is private to one connection"],
            vec![],
        ),
        (
            vec!["status", "--store", "sqlite:///nonexistent-dir/x.db"],
            1,
            vec![
                "there is no database file /nonexistent-dir/x.db",
                "check the path",
            ],
            vec![],
        ),
        (
            vec!["status", "--store", "sqlite://."],
            1,
            vec!["unable to open database file"],
            vec![],
        ),
        (
            vec!["status", "--store", "http://x"],
            2,
            vec!["unknown scheme \"http\"", "supported: sqlite"],
            vec![],
        ),
        (
            vec!["status", "--store", ""],
            2,
            vec!["missing scheme"],
            vec![],
        ),
        (
            vec![
                "status",
                "--store",
                "mysql://root:pw7x@127.0.0.1:99999/test?ssl-password=s3",
            ],
            2,
            vec![
                "invalid port number",
                "mysql://root:***@127.0.0.1:99999/test?***",
            ],
            vec!["pw7x", "s3"],
        ),
        (
            vec!["status", "--store", "sqlite://x.db?mode=bogus"],
            2,
            vec!["unknown value \"bogus\" for `mode`"],
            vec![],
        ),
        (
            vec![
                "status",
                "--store",
                "mysql://root@127.0.0.1:3306/test?ssl-mode=BOGUS",
            ],
            2,
            vec!["unknown value \"BOGUS\" for `ssl_mode`"],
            vec![],
        ),
        (
            vec![
                "status",
                "--store",
                "postgres://postgres@127.0.0.1/test?sslmode=bogus",
            ],
            2,
            vec!["unknown value \"bogus\" for `ssl_mode`"],
            vec![],
        ),
        (
            vec!["status", "--store", "etcd://"],
            2,
            vec!["empty host; expected etcd://host:port"],
            vec![],
        ),
        (
            vec!["status", "--store", "etcd://127.0.0.1:1"],
            1,
            vec!["no endpoint accepts connections"],
            vec![],
        ),
        (
            vec!["status", "--store", "mysql://root:hunter2@127.0.0.1:1/test"],
            1,
            vec![
                "Connection refused",
                "root:***@127.0.0.1:1",
                "tenure run --wait",
            ],
            vec!["hunter2"],
        ),
        (
            vec![
                "status",
                "--store",
                "postgres://u:hunter2@no-such-host.invalid/test",
            ],
            1,
            vec![
                "u:***@no-such-host.invalid",
                "(is the server running and reachable?)",
            ],
            vec!["hunter2"],
        ),
        (
            vec!["migrate", "--store", "redis://127.0.0.1:6379/0"],
            2,
            vec!["not a SQL scheme"],
            vec![],
        ),
        (
            vec!["resign", "--store", "http://x", "--election", "e"],
            2,
            vec!["unknown scheme \"http\""],
            vec![],
        ),
        (
            vec!["watch", "--store", "sqlite://"],
            2,
            vec!["in-memory SQLite database"],
            vec![],
        ),
        (
            vec!["status", "--store-file", &empty_file],
            2,
            vec!["is empty; put the store URL in it"],
            vec![],
        ),
        (
            vec!["status", "--history", "-1"],
            2,
            vec!["unexpected argument '-1'"],
            vec![],
        ),
        (
            vec!["run", "--election", "e", "--ttl", "25h", "--", "true"],
            2,
            vec!["--ttl: invalid ttl: 90000s is too large; the maximum is 86400s"],
            vec![],
        ),
        (
            vec![
                "run",
                "--election",
                "e",
                "--renew-period",
                "0s",
                "--",
                "true",
            ],
            2,
            vec!["--renew-period: invalid renew period: 0ns must be above zero"],
            vec![],
        ),
        (
            vec![
                "run",
                "--election",
                "e",
                "--renew-period",
                "6s",
                "--",
                "true",
            ],
            2,
            vec!["below ttl/2 = 5s"],
            vec![],
        ),
        (
            vec!["run", "--election", "e", "--kill-grace", "7s", "--", "true"],
            2,
            vec!["--kill-grace: invalid kill grace: 7s does not fit"],
            vec![],
        ),
        (
            vec!["run", "--election", "a\tb", "--", "true"],
            2,
            vec!["invalid election: contains the control character '\\t'"],
            vec![],
        ),
        (
            vec!["run", "--election", "e", "--namespace", "", "--", "true"],
            2,
            vec!["invalid namespace: must not be empty"],
            vec![],
        ),
        (
            vec!["run", "--election", "e", "--id", "", "--", "true"],
            2,
            vec!["invalid identity: must not be empty"],
            vec![],
        ),
        (
            vec![
                "run",
                "--election",
                "e",
                "--metadata",
                &long_metadata,
                "--",
                "true",
            ],
            2,
            vec!["invalid metadata: is 5000 bytes long; the limit is 1024 bytes"],
            vec![],
        ),
        (
            vec!["run", "--election", "e"],
            2,
            vec!["required arguments were not provided", "<CMD>"],
            vec![],
        ),
        (
            vec!["transfer", "--election", "e", "--to", "x", "--window", "0s"],
            2,
            vec!["--window", "out of range"],
            vec![],
        ),
    ];
    let opts = tenure::store::StoreOptions::default();
    if servers::connect_or_skip(&servers::mysql_url(), &opts)
        .await
        .is_some()
    {
        cases.extend([
            (
                vec!["status", "--store", "mysql://root@127.0.0.1:3306"],
                1,
                vec!["No database selected; create the database or fix its name in the URL"],
                vec![],
            ),
            (
                vec![
                    "status",
                    "--store",
                    "postgres://postgres@127.0.0.1:3306/test",
                ],
                1,
                vec!["is this a PostgreSQL server? (check the port in the URL)"],
                vec![],
            ),
            (
                vec!["status", "--store", "redis://127.0.0.1:3306/0"],
                1,
                vec!["is this a Redis server?"],
                vec![],
            ),
        ]);
    }
    if servers::connect_or_skip(&servers::postgres_url(), &opts)
        .await
        .is_some()
    {
        cases.extend([(
            vec![
                "status",
                "--store",
                "postgres://postgres@127.0.0.1:5432/nosuchdb",
            ],
            1,
            vec!["database \"nosuchdb\" does not exist; create the database or fix its name"],
            vec![],
        )]);
    }
    if servers::connect_or_skip(&servers::redis_url(), &opts)
        .await
        .is_some()
    {
        cases.extend([(
            vec!["status", "--store", "redis://127.0.0.1:6379/99"],
            2,
            vec!["DB index is out of range", "databases are 0..N-1"],
            vec![],
        )]);
    }
    let n = cases.len();
    for (args, code, needles, forbidden) in cases {
        let out = tenure(dir.path(), &args);
        let all = text(&out);
        assert_eq!(out.status.code(), Some(code), "{args:?}\n{all}");
        for needle in needles {
            assert!(
                all.contains(needle),
                "{args:?}: expected {needle:?} in\n{all}"
            );
        }
        for secret in forbidden {
            assert!(
                !all.contains(secret),
                "{args:?}: {secret:?} must not appear in\n{all}"
            );
        }
        assert!(!all.contains("panicked"), "{all}");
    }
    eprintln!("{n} bad inputs checked");
}

/// Three processes creating the tables of a fresh SQLite file at once: none
/// mistakes the half-created tables of another for a foreign table (a first
/// version of that check did, between two migration steps).
#[test]
fn concurrent_first_use_of_a_fresh_file_succeeds_everywhere() {
    for round in 0..10 {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("t.db").display());
        let procs: Vec<_> = (0..3)
            .map(|_| {
                std::process::Command::new(common::BIN)
                    .args(["migrate", "--store", &url])
                    .env("TENURE_LOG", "warn")
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for p in procs {
            let out = p.wait_with_output().unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// A leader sends no member heartbeats while it leads, and
/// `tenure status` still lists it as the live leader, last heard from at its
/// last renewal, after it has led for longer than a registration lasts
/// without a heartbeat (three TTLs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_a_long_serving_leader_as_live() {
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let store = tenure::store::connect(&url, &Default::default())
        .await
        .unwrap();
    let ttl = Duration::from_secs(1);
    let leader = tenure::Elector::builder(store)
        .election("long")
        .identity("boss")
        .ttl(ttl)
        .build()
        .unwrap();
    leader.acquired().await.unwrap();
    tokio::time::sleep(ttl * 5).await;
    assert!(leader.is_leader());
    let out = tenure(
        dir.path(),
        &["status", "--store", &url, "--election", "long", "--json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let members = rows[0]["members"].as_array().expect("members");
    let boss = members
        .iter()
        .find(|m| m["identity"] == "boss")
        .unwrap_or_else(|| panic!("the leader is listed: {rows}"));
    assert_eq!(boss["live"], true, "{rows}");
    let heard_us = boss["heartbeat_at_us"].as_i64().unwrap();
    // Heard from within a TTL of a later read (it renews every ttl/3), not
    // at its registration five TTLs ago.
    let later = tenure::store::connect(&url, &Default::default())
        .await
        .unwrap()
        .read(&tenure::store::ElectionKey::new("default", "long"))
        .await
        .unwrap()
        .unwrap();
    let age_us = later.read_at_us - heard_us;
    assert!(
        age_us < 1_000_000,
        "last heard from {age_us} µs before a later read: {rows}"
    );
    let out = tenure(
        dir.path(),
        &["status", "--store", &url, "--election", "long"],
    );
    let table = text(&out);
    // The member list's row (after the elections' table): role "leader".
    let members_at = table.find("members:").unwrap_or_else(|| panic!("{table}"));
    let row = table[members_at..]
        .lines()
        .find(|l| l.contains("boss#"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(row.trim_start().starts_with("leader"), "{table}");
    leader.shutdown().await.unwrap();
}

#[tokio::test]
async fn status_shows_one_election_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let store = tenure::store::connect(&url, &Default::default())
        .await
        .unwrap();
    for election in ["alpha", "beta"] {
        let claim = tenure::store::Claim {
            key: tenure::store::ElectionKey::new("default", election),
            holder: format!("{election}-holder#1"),
            metadata: String::new(),
            ttl: std::time::Duration::from_secs(60),
        };
        store.try_acquire(&claim).await.unwrap();
    }
    let out = tenure(
        dir.path(),
        &["status", "--store", &url, "--election", "alpha"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("alpha-holder"), "{}", text(&out));
    assert!(!text(&out).contains("beta"), "{}", text(&out));
    let out = tenure(
        dir.path(),
        &["status", "--store", &url, "--election", "beta", "--json"],
    );
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.as_array().map(Vec::len), Some(1), "{rows}");
    // Unknown: exit 1, named; a bad name: a usage error, exit 2.
    assert_fails(
        &["status", "--store", &url, "--election", "gamma"],
        1,
        &["no election default/gamma", "tenure status"],
    );
    assert_fails(
        &[
            "status",
            "--store",
            &url,
            "--namespace",
            "other",
            "--election",
            "alpha",
        ],
        1,
        &["no election other/alpha"],
    );
    assert_fails(
        &["status", "--store", &url, "--election", "a\nb"],
        2,
        &["election", "control"],
    );
}

/// A Redis that may lose acknowledged writes, and so hand out terms again
/// after a restart, is named when a command connects: on a private server
/// without AOF (`--save "" --appendonly no`) `tenure status` warns once,
/// with the reason and the fix; `?durability=volatile` accepts it and
/// silences the warning; AOF with `appendfsync always` draws none; an
/// unknown value is a usage error that names the one value.
#[tokio::test]
async fn a_redis_that_may_lose_writes_is_named() {
    use tenure_testsupport::servers::{Kind, Server, ServerOptions};
    let required = tenure_testsupport::servers::required();
    let Some(volatile) = Server::start_or_skip(Kind::Redis, ServerOptions::default(), required)
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let warning = "may lose acknowledged writes";
    let url = volatile.url();
    let out = tenure(dir.path(), &["status", "--store", &url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches(warning).count(), 1, "{}", text(&out));
    for said in ["appendonly no", "appendfsync always", "durability=volatile"] {
        assert!(stderr.contains(said), "{said}: {}", text(&out));
    }
    let accepted = format!("{url}/0?durability=volatile");
    let out = tenure(dir.path(), &["status", "--store", &accepted]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!text(&out).contains(warning), "{}", text(&out));
    let unknown = format!("{url}/0?durability=maybe");
    let out = tenure(dir.path(), &["status", "--store", &unknown]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("durability=volatile"), "{}", text(&out));
    let options =
        ServerOptions::default().with_args(&["--appendonly", "yes", "--appendfsync", "always"]);
    let Some(durable) = Server::start_or_skip(Kind::Redis, options, required) else {
        return;
    };
    let out = tenure(dir.path(), &["status", "--store", &durable.url()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!text(&out).contains(warning), "{}", text(&out));
}

/// `tenure status` says whether the store's push gets through from this
/// host: up for a user who may SUBSCRIBE, DOWN (with the reason, never the
/// password) for one who may not, on a private Redis.
#[tokio::test]
async fn status_says_whether_push_gets_through() {
    use tenure_testsupport::servers::{Kind, Server, ServerOptions};
    let options = ServerOptions::default().with_redis_user_without_subscribe();
    let Some(server) = Server::start_or_skip(
        Kind::Redis,
        options,
        tenure_testsupport::servers::required(),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = server.url();
    let out = tenure(dir.path(), &["status", "--store", &url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("push: Redis pub/sub up"),
        "{}",
        text(&out)
    );
    let denied = url.replacen("redis://", "redis://nosub:secret@", 1);
    let out = tenure(dir.path(), &["status", "--store", &denied]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("push: Redis pub/sub DOWN"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("secret"), "{}", text(&out));
}

/// Through PgBouncer in transaction mode, `status` works and says so: no
/// LISTEN through the pooler, unless `push_url` names a direct connection
/// (whose password never shows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_through_a_transaction_pooler_says_where_listen_goes() {
    let dir = tempfile::tempdir().unwrap();
    let Some(url) = common::store_url("pgbouncer", dir.path()).await else {
        return;
    };
    let out = tenure(dir.path(), &["status", "--store", &url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains("pooler: transaction mode"), "{said}");
    assert!(said.contains("LISTEN is not attempted"), "{said}");
    assert!(said.contains("push: none"), "{said}");
    // The shared server trusts local connections: any password is accepted.
    let direct = tenure_testsupport::servers::postgres_url().replacen(
        "postgres://postgres@",
        "postgres://postgres:pushs3cret@",
        1,
    );
    let direct: String = url::form_urlencoded::byte_serialize(direct.as_bytes()).collect();
    let with_push = format!("{url}&push_url={direct}");
    let out = tenure(dir.path(), &["status", "--store", &with_push]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains("LISTEN goes to postgres://postgres:***@"),
        "{said}"
    );
    assert!(said.contains("push: PostgreSQL LISTEN up"), "{said}");
    assert!(!said.contains("pushs3cret"), "{said}");
}
