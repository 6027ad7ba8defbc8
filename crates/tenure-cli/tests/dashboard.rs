//! The dashboard (`GET /ui`) in a real headless Chromium, driven through
//! chromedriver (WebDriver): a real `tenure serve` with a token file on a
//! SQLite store and two real `tenure run` candidates. The page must show the
//! leader `tenure status` reports, refuse a wrong token, resign with the right
//! one, and show the new term on its timeline. It saves a screenshot
//! (`$CARGO_TARGET_TMPDIR/dashboard.png`). Before the driver: the page as
//! served carries the state without any script (its first paint), and
//! headless Chromium without a driver (`--dump-dom`, `--screenshot`)
//! finishes and shows the leader. A second test cuts the store
//! (PostgreSQL behind a blackholed proxy) and expects the stale marker.
//!
//! Needs Debian's `chromium` and `chromium-driver` (.ci/run installs them):
//! without them the test is skipped with a reason, or fails when servers are
//! required (`CI=true` or `TENURE_REQUIRE_SERVERS=1`).

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{migrated_tables, postgres_behind_a_proxy, spawn_tenure, tenure};
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{json, Value};
use tenure_testsupport::http::try_get;
use tenure_testsupport::servers;

const TOKEN: &str = "dashboard-test-token";
/// The second candidate's identity is markup: the page must show it as text.
const MARKUP_ID: &str = "<i>beta</i>";
const ELECTION: &str = "default/web";

/// Kills and reaps a child process when the test ends, passing or not.
struct Reap(Child);
impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Chromium and chromedriver, or why the test cannot run.
fn browser() -> Result<(PathBuf, PathBuf), String> {
    let chromium = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|b| which::which(b).ok())
        .ok_or("no chromium on PATH (Debian: apt-get install chromium)")?;
    let driver = which::which("chromedriver")
        .map_err(|_| "no chromedriver on PATH (Debian: apt-get install chromium-driver)")?;
    Ok((chromium, driver))
}

/// Polls `probe` until it returns Some, or panics naming `what` after `within`.
async fn eventually<T, F, Fut>(what: &str, within: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            start.elapsed() < within,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `tenure status --json --history 50` for the one election; None before
/// its first term (`tenure status --election` then exits 1).
fn try_status(dir: &Path, store: &str) -> Option<Value> {
    let o = tenure(
        dir,
        &[
            "status",
            "--store",
            store,
            "--election",
            "web",
            "--json",
            "--history",
            "50",
        ],
    );
    if !o.status.success() {
        return None;
    }
    let rows: Value = serde_json::from_slice(&o.stdout).expect("status JSON");
    Some(rows[0].clone())
}

fn status(dir: &Path, store: &str) -> Value {
    try_status(dir, store).expect("`tenure status --election web` answers")
}

fn identity(holder: &str) -> &str {
    holder.rsplit_once('#').map(|(i, _)| i).unwrap_or(holder)
}

/// What the page shows for the election, read from its DOM.
async fn page(c: &Client) -> Option<Value> {
    let v = c
        .execute(
            r#"const c = document.querySelector('section.card[data-election="' + arguments[0] + '"]');
               if (!c) return null;
               const b = c.querySelector('button.resign');
               return {
                 leader: c.querySelector('.leader-name').textContent,
                 noLeader: !!c.querySelector('.leader.none'),
                 terms: [...c.querySelectorAll('tr.term')].map(t => Number(t.dataset.term)),
                 segments: c.querySelectorAll('.timeline .seg').length,
                 current: (c.querySelector('tr.term.current') || {}).textContent || '',
                 text: c.textContent,
                 markup: c.querySelectorAll('i, img, script').length,
                 resignEnabled: !!b && !b.disabled,
                 notice: document.getElementById('notice').textContent,
                 banner: document.getElementById('banner').textContent,
                 stale: c.classList.contains('stale'),
                 conn: document.getElementById('conn').textContent,
               };"#,
            vec![json!(ELECTION)],
        )
        .await
        .ok()?;
    (!v.is_null()).then_some(v)
}

/// Waits until the page's state for the election satisfies `cond`; the
/// panic shows the last state seen (notice, banner, terms...).
async fn wait_page(
    c: &Client,
    what: &str,
    within: Duration,
    cond: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    loop {
        let p = page(c).await;
        if let Some(p) = p.as_ref().filter(|p| cond(p)) {
            return p.clone();
        }
        assert!(
            start.elapsed() < within,
            "timed out after {within:?} waiting for {what}; the page shows: {p:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Clicks the first element matching `css`, again if a re-render replaced it
/// between finding and clicking (the page redraws on every change).
async fn click(c: &Client, css: &str) {
    eventually(
        &format!("a clickable {css}"),
        Duration::from_secs(10),
        || async {
            let e = c.find(Locator::Css(css)).await.ok()?;
            e.click().await.ok()
        },
    )
    .await
}

async fn set_token(c: &Client, token: &str) {
    let input = c.find(Locator::Id("token")).await.expect("token field");
    input.clear().await.expect("clear token field");
    input.send_keys(token).await.expect("type token");
    click(c, "#token-save").await;
}

/// Starts chromedriver (reaped with `keep`) and opens a headless Chromium
/// session through it.
async fn session(chromium: &Path, driver: &Path, dir: &Path, keep: &mut Vec<Reap>) -> Client {
    let driver_port = servers::free_port().expect("a free port");
    keep.push(Reap(
        Command::new(driver)
            .arg(format!("--port={driver_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver"),
    ));
    eventually(
        "chromedriver to answer",
        Duration::from_secs(20),
        || async {
            try_get(SocketAddr::from(([127, 0, 0, 1], driver_port)), "/status")
                .await
                .filter(|(s, _)| *s == 200)
        },
    )
    .await;
    let profile = dir.join("chromium-profile");
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1200,900", format!("--user-data-dir={}", profile.display())],
        }),
    );
    ClientBuilder::new(HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{driver_port}"))
        .await
        .expect("a chromium session through chromedriver")
}

/// The browser, or None after printing why the test is skipped (panics when
/// servers are required).
fn browser_or_skip() -> Option<(PathBuf, PathBuf)> {
    match browser() {
        Ok(b) => Some(b),
        Err(why) if servers::required() => {
            panic!(
                "the dashboard test needs a browser (CI=true or TENURE_REQUIRE_SERVERS=1): {why}"
            )
        }
        Err(why) => {
            eprintln!("SKIPPED: the dashboard browser test: {why}");
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_the_leader_and_resigns_it_with_the_token() {
    let Some((chromium, driver)) = browser_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("t.db").display());
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("token file");

    let mut keep = Vec::new();
    for (n, id) in ["alpha", MARKUP_ID].into_iter().enumerate() {
        keep.push(Reap(spawn_tenure(
            dir.path(),
            &[
                "run",
                "--store",
                &store,
                "--election",
                "web",
                "--id",
                id,
                "--ttl",
                "4s",
                "--",
                "sleep",
                "600",
            ],
            &dir.path().join(format!("candidate-{n}.log")),
        )));
    }
    // The leader `tenure status` reports (both candidates registered, so a
    // resignation has someone to hand over to).
    eventually("a leader and two members", Duration::from_secs(20), || {
        let row = try_status(dir.path(), &store).unwrap_or_default();
        let ready =
            row["leader"].is_string() && row["members"].as_array().is_some_and(|m| m.len() == 2);
        async move { ready.then_some(()) }
    })
    .await;

    let port = servers::free_port().expect("a free port");
    let addr = format!("127.0.0.1:{port}");
    keep.push(Reap(spawn_tenure(
        dir.path(),
        &[
            "serve",
            "--store",
            &store,
            "--http",
            &addr,
            "--token-file",
            token_file.to_str().expect("utf-8 path"),
        ],
        &dir.path().join("serve.log"),
    )));
    eventually(
        "tenure serve to be ready",
        Duration::from_secs(20),
        || async {
            try_get(SocketAddr::from(([127, 0, 0, 1], port)), "/readyz")
                .await
                .filter(|(s, _)| *s == 200)
        },
    )
    .await;
    let (code, html) = try_get(SocketAddr::from(([127, 0, 0, 1], port)), "/ui")
        .await
        .expect("GET /ui");
    assert_eq!(code, 200, "GET /ui: {html}");
    first_paint_shows_the_leader(&html, &status(dir.path(), &store));
    headless_page_loads_show_the_leader(&chromium, dir.path(), port, &status(dir.path(), &store));

    let c = session(&chromium, &driver, dir.path(), &mut keep).await;
    let result = drive(&c, dir.path(), &store, port).await;
    let _ = c.close().await;
    if let Err(panic) = result {
        for log in ["serve.log", "candidate-0.log", "candidate-1.log"] {
            eprintln!(
                "--- {log}:\n{}",
                std::fs::read_to_string(dir.path().join(log)).unwrap_or_default()
            );
        }
        std::panic::resume_unwind(panic);
    }
}

/// The page as served, before any script runs: a table with the election,
/// its leader (as text: an identity that is markup arrives escaped), the
/// term and the members, in place of "loading…".
fn first_paint_shows_the_leader(html: &str, status: &Value) {
    let leader = identity(status["leader"].as_str().expect("a leader"));
    let escaped = leader.replace('<', "&lt;").replace('>', "&gt;");
    let start = html.find("first-paint").expect("a first paint in the page");
    let paint = &html[start
        ..html[start..]
            .find("</section>")
            .map_or(html.len(), |e| start + e)];
    assert!(paint.contains(ELECTION), "{paint}");
    assert!(
        paint.contains(&format!(r#"<span class="role-leader">{escaped}</span>"#)),
        "the leader {leader:?} in: {paint}"
    );
    assert!(
        paint.contains(&format!("<td>{}</td>", status["term"])),
        "the term in: {paint}"
    );
    assert!(!paint.contains(MARKUP_ID), "unescaped markup: {paint}");
    assert!(
        !html.contains(r#"<div class="empty">loading…</div>"#),
        "the placeholder is replaced"
    );
}

/// Tools that wait for the page's load and no longer, without a driver:
/// `--dump-dom` has the leader, and `--screenshot` finishes (the event
/// stream opens only after the load) with an image
/// (`$CARGO_TARGET_TMPDIR/dashboard-first-paint.png`).
fn headless_page_loads_show_the_leader(chromium: &Path, dir: &Path, port: u16, status: &Value) {
    let url = format!("http://127.0.0.1:{port}/ui");
    let leader = identity(status["leader"].as_str().expect("a leader"));
    let escaped = leader.replace('<', "&lt;").replace('>', "&gt;");
    let headless = |args: &[&str]| {
        let mut child = Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
            ])
            .arg(format!(
                "--user-data-dir={}",
                dir.join("headless-profile").display()
            ))
            .args(args)
            .arg(&url)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromium");
        let started = Instant::now();
        let mut out = String::new();
        std::io::Read::read_to_string(child.stdout.as_mut().expect("stdout"), &mut out)
            .expect("chromium's output");
        let status = child.wait().expect("chromium exits");
        assert!(status.success(), "chromium {args:?}: {status}");
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "chromium {args:?} took {:?}",
            started.elapsed()
        );
        out
    };
    let dom = headless(&["--dump-dom"]);
    assert!(dom.contains(&escaped), "the leader {leader:?} in: {dom}");
    let png = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard-first-paint.png");
    let _ = std::fs::remove_file(&png);
    headless(&[
        &format!("--screenshot={}", png.display()),
        "--window-size=1200,700",
    ]);
    let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
    assert!(size > 10_000, "a screenshot of the page: {size} bytes");
}

/// The browser part; a panic here is returned so the caller closes the
/// session and prints the server logs first.
async fn drive(
    c: &Client,
    dir: &Path,
    store: &str,
    port: u16,
) -> Result<(), Box<dyn std::any::Any + Send>> {
    let c = c.clone();
    let (dir, store) = (dir.to_path_buf(), store.to_string());
    tokio::spawn(async move {
        c.goto(&format!("http://127.0.0.1:{port}/ui"))
            .await
            .expect("open /ui");
        // It shows the leader `tenure status` reports, and its term. (Both
        // are read until they agree: on a loaded machine a leader can lose
        // its lease between two reads.)
        let start = Instant::now();
        let (shown, leader, term) = loop {
            let row = status(&dir, &store);
            let p = page(&c).await;
            if let (Some(p), Some(l), Some(t)) = (&p, row["leader"].as_str(), row["term"].as_u64()) {
                if p["leader"] == identity(l)
                    && p["terms"].as_array().is_some_and(|ts| ts.contains(&json!(t)))
                {
                    break (p.clone(), l.to_string(), t);
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "the page never showed what `tenure status` reports: {row} vs {p:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(
            shown["text"]
                .as_str()
                .is_some_and(|t| t.contains(MARKUP_ID))
                && shown["markup"] == 0,
            "an identity with markup is shown as text, never parsed: {shown}"
        );
        assert!(
            !shown["resignEnabled"].as_bool().unwrap_or(true),
            "resign enabled without a token: {shown}"
        );
        wait_page(&c, "the live stream", Duration::from_secs(10), |p| {
            p["conn"] == "live"
        })
        .await;

        // A wrong token: the page says it was refused, and nothing changes.
        set_token(&c, "not-the-token").await;
        click(
            &c,
            &format!("section[data-election=\"{ELECTION}\"] button.resign"),
        )
        .await;
        wait_page(&c, "the refused token", Duration::from_secs(10), |p| {
            p["notice"].as_str().is_some_and(|n| n.contains("401"))
        })
        .await;
        let after = status(&dir, &store);
        assert_eq!(
            after["leader"],
            json!(leader),
            "a wrong token changed the leader"
        );
        assert_eq!(after["term"], json!(term), "a wrong token changed the term");

        // The right token: resign; the timeline gains a term, led by the other.
        set_token(&c, TOKEN).await;
        click(
            &c,
            &format!("section[data-election=\"{ELECTION}\"] button.resign"),
        )
        .await;
        let next = wait_page(&c, "a new term", Duration::from_secs(15), |p| {
            p["terms"].as_array().is_some_and(|t| t.contains(&json!(term + 1)))
                && !p["noLeader"].as_bool().unwrap_or(true)
                && p["leader"] != identity(&leader)
        })
        .await;
        let now = status(&dir, &store);
        let new_leader = now["leader"]
            .as_str()
            .expect("a leader after the resignation");
        assert_eq!(
            next["leader"],
            identity(new_leader),
            "page and `tenure status` disagree: {next} vs {now}"
        );
        assert!(
            next["current"]
                .as_str()
                .is_some_and(|t| t.contains("resign")),
            "the new term began by resignation: {next}"
        );
        assert!(
            next["segments"].as_u64() >= Some(2),
            "the timeline shows both terms: {next}"
        );

        // "make leader" on the first leader (a member again once it has
        // re-registered): a transfer back, term + 2.
        let back = format!(
            "section[data-election=\"{ELECTION}\"] tr.member[data-holder=\"{leader}\"] button.transfer:enabled"
        );
        click(&c, &back).await;
        let last = wait_page(&c, "the transfer back", Duration::from_secs(15), |p| {
            p["terms"].as_array().is_some_and(|t| t.contains(&json!(term + 2)))
                && p["leader"] == identity(&leader)
        })
        .await;
        assert!(
            last["current"].as_str().is_some_and(|t| t.contains("transfer")),
            "the newest term began by transfer: {last}"
        );
        assert_eq!(
            status(&dir, &store)["leader"],
            json!(leader),
            "`tenure status` agrees the transfer went back"
        );

        let png = c.screenshot().await.expect("screenshot");
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
        std::fs::write(&path, &png).expect("write screenshot");
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        eprintln!("dashboard screenshot: {}", path.display());
    })
    .await
    .map_err(|e| e.into_panic())
}

/// The store cut off behind `tenure serve` (a blackholed proxy to the shared
/// PostgreSQL): the page keeps the last known leader, marks it stale with a
/// banner naming the reason, and drops the marker once the store is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_marks_the_last_known_state_stale_while_the_store_is_cut() {
    let Some((chromium, driver)) = browser_or_skip() else {
        return;
    };
    let Some((url, proxy, via)) = postgres_behind_a_proxy(None).await else {
        return;
    };
    // Tables of this run only: the page lists every election of its store.
    let prefix = format!("dash{}_", std::process::id());
    let dir = tempfile::tempdir().expect("tempdir");
    // The tables first, once: the candidate and `tenure status` creating
    // them at the same time raced on PostgreSQL (duplicate pg_type key).
    let _tables = migrated_tables(dir.path(), &url, &prefix);
    let mut keep = vec![Reap(spawn_tenure(
        dir.path(),
        &[
            "run",
            "--store",
            &url,
            "--table-prefix",
            &prefix,
            "--election",
            "web",
            "--id",
            "solo",
            "--ttl",
            "3s",
            "--",
            "sleep",
            "600",
        ],
        &dir.path().join("candidate.log"),
    ))];
    // It leads (its tables exist) before tenure serve reads them.
    let start = Instant::now();
    loop {
        let o = tenure(
            dir.path(),
            &[
                "status",
                "--store",
                &url,
                "--table-prefix",
                &prefix,
                "--json",
            ],
        );
        if o.status.success() && String::from_utf8_lossy(&o.stdout).contains("\"solo#") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the candidate does not lead after 30 s: {}\nits log:\n{}",
            common::text(&o),
            std::fs::read_to_string(dir.path().join("candidate.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let port = servers::free_port().expect("a free port");
    let addr = format!("127.0.0.1:{port}");
    keep.push(Reap(spawn_tenure(
        dir.path(),
        &[
            "serve",
            "--store",
            &via,
            "--table-prefix",
            &prefix,
            "--http",
            &addr,
            "--wait",
        ],
        &dir.path().join("serve.log"),
    )));
    let start = Instant::now();
    while try_get(SocketAddr::from(([127, 0, 0, 1], port)), "/readyz")
        .await
        .is_none_or(|(s, _)| s != 200)
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "tenure serve not ready after 30 s; its log:\n{}",
            std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let c = session(&chromium, &driver, dir.path(), &mut keep).await;
    let result = {
        let c = c.clone();
        tokio::spawn(async move {
            c.goto(&format!("http://127.0.0.1:{port}/ui"))
                .await
                .expect("open /ui");
            let shown = wait_page(&c, "the leader, live", Duration::from_secs(20), |p| {
                p["leader"] == "solo" && p["conn"] == "live"
            })
            .await;
            assert_eq!(shown["stale"], false, "stale before the cut: {shown}");
            proxy.set_blackhole(true);
            let cut = wait_page(&c, "the stale marker", Duration::from_secs(20), |p| {
                p["stale"] == true && p["banner"] != ""
            })
            .await;
            assert_eq!(cut["leader"], "solo", "the last known leader stays: {cut}");
            proxy.set_blackhole(false);
            // Once the API answers fresh again, the marker goes. (The proxy
            // dropped bytes on open connections; how soon tenure serve's pool
            // gives those up is the server's business, not the page's: if it
            // is still stale after 30 s, say so loudly but do not fail here.)
            let start = Instant::now();
            loop {
                let fresh = try_get(SocketAddr::from(([127, 0, 0, 1], port)), "/v1/elections")
                    .await
                    .is_some_and(|(s, b)| s == 200 && !b.contains("\"stale\""));
                if fresh {
                    wait_page(&c, "the stale marker to go", Duration::from_secs(10), |p| {
                        p["stale"] == false && p["banner"] == ""
                    })
                    .await;
                    break;
                }
                if start.elapsed() > Duration::from_secs(30) {
                    eprintln!(
                        "NOTE: tenure serve still answers stale 30 s after the proxy stopped \
                         dropping bytes; the page's recovery was not checked"
                    );
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
        .await
    };
    let _ = c.close().await;
    if let Err(e) = result {
        for log in ["serve.log", "candidate.log"] {
            eprintln!(
                "--- {log}:\n{}",
                std::fs::read_to_string(dir.path().join(log)).unwrap_or_default()
            );
        }
        std::panic::resume_unwind(e.into_panic());
    }
}
