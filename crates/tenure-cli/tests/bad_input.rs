//! Hostile store URLs, store files, environment and option values: each is
//! refused with exit code 2 and a one-line reason naming the fix, secrets
//! appear in no output (however the URL is given: --store, --store-file or
//! TENURE_STORE), and the store still works afterwards.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::text;

/// How a URL reaches tenure.
#[derive(Clone, Copy, Debug)]
enum Via {
    Flag,
    File,
    Env,
}

const EVERY_WAY: [Via; 3] = [Via::Flag, Via::File, Via::Env];

/// Runs `tenure <command> [--store URL | --store-file F] args...` (or with
/// `TENURE_STORE=URL`) in `dir`, logging at info level so that any secret a
/// log line would carry shows up.
fn tenure_with(dir: &Path, via: Via, url: &str, command: &str, args: &[&str]) -> Output {
    let mut c = Command::new(common::BIN);
    c.arg(command)
        .current_dir(dir)
        .env_remove("TENURE_STORE")
        .env("TENURE_LOG", "info")
        .stdin(Stdio::null());
    match via {
        Via::Flag => {
            c.args(["--store", url]);
        }
        Via::File => {
            let file = dir.join("store-url");
            std::fs::write(&file, format!("{url}\n")).unwrap();
            c.arg("--store-file").arg(&file);
        }
        Via::Env => {
            c.env("TENURE_STORE", url);
        }
    }
    c.args(args).output().expect("run tenure")
}

/// Exit code 2, every needle in the output, no `secret` in it, no panic.
fn assert_refused(out: &Output, what: &str, needles: &[&str], secret: Option<&str>) {
    let all = text(out);
    assert_eq!(out.status.code(), Some(2), "{what}\n{all}");
    for n in needles {
        assert!(all.contains(n), "{what}: expected {n:?} in\n{all}");
    }
    if let Some(s) = secret {
        assert!(
            !all.contains(s),
            "{what}: the secret {s:?} is shown in\n{all}"
        );
    }
    assert!(!all.contains("panicked"), "{what}\n{all}");
}

/// The store `url` still works after the bad inputs: an election on it
/// runs one job, releases, runs the next under a higher term (the terms the
/// jobs saw), and `tenure status` answers.
fn status_works(dir: &Path, url: &str) {
    let election = format!("after-bad-input-{:x}", common::rand_u32());
    let terms = dir.join(format!("{election}.terms"));
    let job = format!("echo \"$TENURE_TERM\" >> '{}'", terms.display());
    for _ in 0..2 {
        let out = tenure_with(
            dir,
            Via::Flag,
            url,
            "run",
            &["--election", &election, "--", "sh", "-c", &job],
        );
        assert_eq!(out.status.code(), Some(0), "run on {url}\n{}", text(&out));
    }
    let seen: Vec<u64> = std::fs::read_to_string(&terms)
        .unwrap_or_default()
        .lines()
        .map(|l| l.parse().expect("a term"))
        .collect();
    assert!(
        seen.len() == 2 && seen[0] < seen[1],
        "two jobs under increasing terms on {url}: {seen:?}"
    );
    let out = tenure_with(dir, Via::Flag, url, "status", &["--election", &election]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "status on {url}\n{}",
        text(&out)
    );
}

/// `tenure status` on `url`, given every way, is refused naming `needles`
/// and never showing `secret`.
fn refused_every_way(dir: &Path, url: &str, needles: &[&str], secret: &str) {
    for via in EVERY_WAY {
        let out = tenure_with(dir, via, url, "status", &[]);
        assert_refused(&out, &format!("{url} via {via:?}"), needles, Some(secret));
    }
}

/// `status_works` on each of `stores` whose server is there.
async fn stores_still_work(dir: &Path, stores: &[&str]) {
    for store in stores {
        if let Some(url) = common::store_url(store, dir).await {
            status_works(dir, &url);
        }
    }
}

#[tokio::test]
async fn unencoded_special_characters_in_a_password_are_refused_without_showing_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // (URL, the secret part, what must be named)
    let cases = [
        (
            "postgres://app:Zx9/Qw+8Lk==@127.0.0.1:5432/test",
            "Qw+8Lk",
            "postgres://app:***@127.0.0.1:5432/test",
        ),
        // Read naively this is the host "postgres", port 1234, path /x@...
        (
            "postgres://postgres:1234/x@127.0.0.1:5432/test",
            "1234",
            "postgres://postgres:***@127.0.0.1:5432/test",
        ),
        (
            "mysql://root:hunt/er2@127.0.0.1:3306/test",
            "hunt",
            "mysql://root:***@127.0.0.1:3306/test",
        ),
        (
            "mysql://root:hu#nter2@127.0.0.1:3306/test",
            "nter2",
            "mysql://root:***@127.0.0.1:3306/test",
        ),
        (
            "postgres://app:hu?nter2@127.0.0.1:5432/test",
            "nter2",
            "postgres://app:***@127.0.0.1:5432/test",
        ),
        (
            "redis://:hunt/er2@127.0.0.1:6379/0",
            "hunt",
            "redis://:***@127.0.0.1:6379/0",
        ),
        (
            "etcd://root:pa/ssw0rd@127.0.0.1:2379",
            "ssw0rd",
            "etcd://root:***@127.0.0.1:2379",
        ),
        (
            "zk://bob:pa@ssw0rd@127.0.0.1:2181",
            "ssw0rd",
            "zk://bob:***@127.0.0.1:2181",
        ),
    ];
    for (url, secret, shown) in cases {
        refused_every_way(d, url, &[shown, "percent-encode", "/ as %2F"], secret);
    }
    // The store named without the mistake still works.
    stores_still_work(d, &["postgres"]).await;
}

#[tokio::test]
async fn unknown_url_parameters_are_refused_naming_the_closest_without_the_value() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (pg, my, redis) = (
        "postgres://postgres@127.0.0.1:5432/test",
        "mysql://root@127.0.0.1:3306/test",
        "redis://127.0.0.1:6379/0",
    );
    let cases = [
        // A typo that would silently keep the default PREFERRED.
        (
            format!("{my}?ssl-mdoe=VERIFY_IDENTITY"),
            "VERIFY_IDENTITY",
            "unknown parameter \"ssl-mdoe\"",
            "did you mean \"ssl-mode\"?",
        ),
        (
            format!("{my}?pasword=s3cr3tA"),
            "s3cr3tA",
            "unknown parameter \"pasword\"",
            "mysql:// URLs take",
        ),
        (
            format!("{pg}?sslmode=require&pasword=s3cr3tB"),
            "s3cr3tB",
            "unknown parameter \"pasword\"",
            "did you mean \"password\"?",
        ),
        (
            format!("{pg}?sslmdoe=verify-full"),
            "verify-full",
            "unknown parameter \"sslmdoe\"",
            "did you mean \"sslmode\"?",
        ),
        (
            format!("{redis}?pasword=s3cr3tC"),
            "s3cr3tC",
            "unknown parameter \"pasword\"",
            "redis:// URLs take protocol, cacert, cert, key, durability",
        ),
        (
            format!("{redis}?cacrt=/etc/ca.pem"),
            "/etc/ca.pem",
            "unknown parameter \"cacrt\"",
            "did you mean \"cacert\"?",
        ),
    ];
    for (url, secret, named, hint) in &cases {
        refused_every_way(d, url, &[named, hint], secret);
    }
    stores_still_work(d, &["postgres", "mariadb", "redis"]).await;
}

#[tokio::test]
async fn ca_files_that_are_directories_or_hold_no_certificate_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let garbage = d.join("garbage.pem");
    std::fs::write(&garbage, "this is not a certificate\n").unwrap();
    let (dir_s, garbage_s) = (d.display().to_string(), garbage.display().to_string());
    let cases = [
        (
            format!(
                "postgres://postgres@127.0.0.1:5432/test?sslmode=verify-full&sslrootcert={dir_s}"
            ),
            format!("sslrootcert={dir_s} is a directory"),
        ),
        (
            format!(
                "postgres://postgres@127.0.0.1:5432/test?sslmode=verify-full&sslrootcert={garbage_s}"
            ),
            format!("no certificate in file {garbage_s} (sslrootcert=)"),
        ),
        (
            format!("mysql://root@127.0.0.1:3306/test?ssl-mode=VERIFY_CA&ssl-ca={dir_s}"),
            format!("ssl-ca={dir_s} is a directory"),
        ),
        (
            format!("mysql://root@127.0.0.1:3306/test?ssl-mode=VERIFY_CA&ssl-ca={garbage_s}"),
            format!("no certificate in file {garbage_s} (ssl-ca=)"),
        ),
        (
            format!("rediss://127.0.0.1:6379/0?cacert={dir_s}"),
            format!("cacert={dir_s} is a directory"),
        ),
        (
            format!("rediss://127.0.0.1:6379/0?cacert={garbage_s}"),
            format!("no certificate in file {garbage_s} (cacert=)"),
        ),
        (
            format!("etcds://127.0.0.1:2379?cacert={dir_s}"),
            format!("cacert={dir_s} is a directory"),
        ),
        (
            format!("etcds://127.0.0.1:2379?cacert={garbage_s}"),
            format!("no certificate in file {garbage_s} (cacert=)"),
        ),
    ];
    for (url, reason) in &cases {
        let out = tenure_with(d, Via::Flag, url, "status", &[]);
        assert_refused(&out, url, &[reason], None);
    }
    stores_still_work(d, &["postgres"]).await;
}

#[tokio::test]
async fn rediss_to_a_plain_redis_says_it_does_not_speak_tls() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Some(plain) = common::store_url("redis", d).await else {
        return;
    };
    let tls = plain.replacen("redis://", "rediss://", 1);
    let out = tenure_with(d, Via::Flag, &tls, "status", &[]);
    assert_refused(
        &out,
        &tls,
        &["the server does not speak TLS on this port", "use redis://"],
        None,
    );
    status_works(d, &plain);
}

#[tokio::test]
async fn empty_hosts_paths_and_nul_bytes_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cases = [
        ("etcd://:2379", "empty host in \":2379\""),
        ("etcd://127.0.0.1:2379/app", "etcd URLs take no path"),
        ("sqlite:///tmp/a%00b.db", "NUL character"),
    ];
    for (url, reason) in cases {
        let out = tenure_with(d, Via::Flag, url, "status", &[]);
        assert_refused(&out, url, &[reason], None);
    }
    stores_still_work(d, &["etcd"]).await;
}

#[test]
fn store_files_hold_one_url_on_one_line_of_at_most_64_kib() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let status_with_file = |file: &Path| {
        Command::new(common::BIN)
            .args(["status", "--store-file"])
            .arg(file)
            .current_dir(d)
            .env_remove("TENURE_STORE")
            .output()
            .unwrap()
    };
    let out = status_with_file(Path::new("/dev/zero"));
    assert_refused(
        &out,
        "/dev/zero",
        &["--store-file /dev/zero is larger than 64 KiB"],
        None,
    );
    let a = format!("sqlite://{}", d.join("a.db").display());
    let two = d.join("two");
    std::fs::write(&two, format!("{a}\nmysql://root:Sekr3tPw@db/app\n")).unwrap();
    let out = status_with_file(&two);
    assert_refused(
        &out,
        "two lines",
        &["has 2 lines", "a store file holds one URL on one line"],
        Some("Sekr3tPw"),
    );
    assert!(!d.join("a.db").exists(), "a store was opened");
    // Blank lines and comments around the one URL are fine.
    let made = common::tenure(d, &["migrate", "--store", &a]);
    assert_eq!(made.status.code(), Some(0), "{}", text(&made));
    let commented = d.join("commented");
    std::fs::write(&commented, format!("# the election store\n\n  {a}  \n\n")).unwrap();
    let out = status_with_file(&commented);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(d.join("a.db").exists());
}

#[test]
fn an_empty_tenure_store_is_refused_and_run_needs_a_named_store() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for value in ["", "  "] {
        let out = tenure_with(d, Via::Env, value, "status", &[]);
        assert_refused(
            &out,
            &format!("TENURE_STORE={value:?}"),
            &[
                "TENURE_STORE is set but empty; set it to the store URL",
                "or unset it",
            ],
            None,
        );
    }
    // Two replicas in different directories would each lead their own
    // default file: run (and serve --election) name the shared store.
    let out = common::tenure(d, &["run", "--election", "e", "--", "true"]);
    assert_refused(
        &out,
        "run without a store",
        &["tenure run needs a store shared by every replica: pass --store URL"],
        None,
    );
    let out = common::tenure(d, &["serve", "--http", "127.0.0.1:0", "--election", "e"]);
    assert_refused(
        &out,
        "serve --election without a store",
        &["tenure serve --election needs a store shared by every replica"],
        None,
    );
    assert!(!d.join("tenure.db").exists(), "a default store was created");
    // Read-only commands keep the documented default.
    let made = common::tenure(d, &["migrate"]);
    assert_eq!(made.status.code(), Some(0), "{}", text(&made));
    let out = common::tenure(d, &["status"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no elections in sqlite://tenure.db"),
        "{}",
        text(&out)
    );
}

#[tokio::test]
async fn run_logs_the_store_it_uses_without_its_password() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Some(url) = common::store_url("postgres", d).await else {
        return;
    };
    // The shared server trusts local connections: any password is accepted.
    let with_password = url.replacen("postgres://postgres@", "postgres://postgres:Sekr3tPw@", 1);
    assert_ne!(with_password, url, "unexpected test URL {url}");
    let election = format!("bad-input-log-{}", common::rand_u32());
    for via in EVERY_WAY {
        let out = tenure_with(
            d,
            via,
            &with_password,
            "run",
            &["--election", &election, "--", "true"],
        );
        let all = text(&out);
        assert_eq!(out.status.code(), Some(0), "{via:?}\n{all}");
        assert!(
            all.contains("store: postgres://postgres:***@127.0.0.1:"),
            "{via:?}\n{all}"
        );
        assert!(!all.contains("Sekr3tPw"), "{via:?}\n{all}");
    }
    status_works(d, &url);
}

#[test]
fn bad_durations_renew_periods_and_table_prefixes_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let store = format!("sqlite://{}", d.join("t.db").display());
    let cases: [(&[&str], &[&str]); 5] = [
        (
            &[
                "run",
                "--store",
                &store,
                "--election",
                "e",
                "--ttl",
                "-1s",
                "--",
                "true",
            ],
            &["invalid value '-1s' for '--ttl <TTL>': durations must be positive"],
        ),
        (
            &[
                "resign",
                "--store",
                &store,
                "--election",
                "e",
                "--wait",
                "-5s",
            ],
            &["durations must be positive"],
        ),
        (
            &[
                "run",
                "--store",
                &store,
                "--election",
                "e",
                "--renew-period",
                "1ns",
                "--",
                "true",
            ],
            &[
                "--renew-period: invalid renew period: 1ns is too short",
                "use at least 10ms",
            ],
        ),
        (
            &[
                "run",
                "--store",
                &store,
                "--election",
                "e",
                "--renew-period",
                "9ms",
                "--",
                "true",
            ],
            &["9ms is too short"],
        ),
        (
            &["status", "--store", &store, "--table-prefix", ""],
            &["the table prefix must not be empty"],
        ),
    ];
    for (args, needles) in cases {
        let out = common::tenure(d, args);
        assert_refused(&out, &format!("{args:?}"), needles, None);
        let all = text(&out);
        assert!(!all.contains("use '-- -1'"), "{all}");
    }
    // The smallest renew period runs.
    let out = common::tenure(
        d,
        &[
            "run",
            "--store",
            &store,
            "--election",
            "e",
            "--ttl",
            "1s",
            "--renew-period",
            "10ms",
            "--",
            "true",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    status_works(d, &store);
}
