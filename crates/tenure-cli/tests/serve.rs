//! `tenure serve` as a process: every endpoint against real candidates on
//! SQLite and PostgreSQL, the sidecar-compatible `GET /`, health semantics
//! with a store cut behind a proxy, the token rules, metric names and
//! values, bad addresses, and SSE clients that leave nothing behind.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    migrated_tables, postgres_behind_a_proxy, rss_kb, serve, tenure, text, wait_until, Serve, BIN,
};
use serde_json::Value;
use tenure_testsupport::http::blocking::{get, request};
use tenure_testsupport::servers;

fn json(addr: &str, path: &str) -> (u16, Value) {
    let (status, body) = get(addr, path);
    let v = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body:?}"));
    // Every JSON answer is checked against docs/openapi.json.
    let template = match path {
        "/" | "/healthz" | "/readyz" => path.to_string(),
        p if p == "/v1/elections" || p.starts_with("/v1/elections?") => "/v1/elections".into(),
        p if p.starts_with("/v1/elections/") => "/v1/elections/{namespace}/{election}".into(),
        p => panic!("no template for {p}"),
    };
    conforms("get", &template, status, &v);
    (status, v)
}

fn post(addr: &str, action: &str, election: &str, headers: &[&str], body: &str) -> (u16, Value) {
    let path = format!("/v1/elections/default/{election}/{action}");
    let (status, text) = request(addr, "POST", &path, headers, body);
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text:?}"));
    conforms(
        "post",
        &format!("/v1/elections/{{namespace}}/{{election}}/{action}"),
        status,
        &v,
    );
    (status, v)
}

/// docs/openapi.json, whose schemas every JSON answer must match.
fn openapi() -> &'static Value {
    static DOC: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    DOC.get_or_init(|| {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.json");
        serde_json::from_str(&std::fs::read_to_string(path).expect("docs/openapi.json"))
            .expect("docs/openapi.json is JSON")
    })
}

/// What a local `$ref` (`#/a/b`, a JSON pointer into the file) points to.
fn resolve(r: &str) -> Option<&'static Value> {
    openapi().pointer(r.strip_prefix('#')?)
}

/// Checks `v` against an OpenAPI 3.1 schema: the JSON Schema subset the
/// file uses ($ref, oneOf, type incl. arrays of types, enum, required,
/// properties, additionalProperties: false, items).
fn check(v: &Value, schema: &Value, at: &str) -> Result<(), String> {
    if let Some(r) = schema["$ref"].as_str() {
        let target = resolve(r).unwrap_or_else(|| panic!("{at}: $ref {r} does not resolve"));
        return check(v, target, at);
    }
    if let Some(options) = schema["oneOf"].as_array() {
        let errors: Vec<String> = options
            .iter()
            .filter_map(|o| check(v, o, at).err())
            .collect();
        match options.len() - errors.len() {
            1 => {}
            0 => return Err(format!("{at}: {v} matches none of oneOf: {errors:?}")),
            n => return Err(format!("{at}: {v} matches {n} of oneOf, not exactly one")),
        }
    }
    if let Some(options) = schema["enum"].as_array() {
        if !options.contains(v) {
            return Err(format!("{at}: {v} not one of {options:?}"));
        }
    }
    if let Some(t) = schema.get("type") {
        let types: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(|x| x.as_str()).collect(),
            _ => vec![],
        };
        let ok = types.iter().any(|t| match *t {
            "object" => v.is_object(),
            "array" => v.is_array(),
            "string" => v.is_string(),
            "integer" => v.is_i64() || v.is_u64(),
            "number" => v.is_number(),
            "boolean" => v.is_boolean(),
            "null" => v.is_null(),
            _ => false,
        });
        if !ok {
            return Err(format!("{at}: {v} is not {types:?}"));
        }
    }
    if let Some(o) = v.as_object() {
        for r in schema["required"].as_array().into_iter().flatten() {
            let r = r.as_str().expect("name");
            if !o.contains_key(r) {
                return Err(format!("{at}: missing {r}"));
            }
        }
        let props = schema["properties"].as_object();
        for (k, x) in o {
            match props.and_then(|p| p.get(k)) {
                Some(s) => check(x, s, &format!("{at}.{k}"))?,
                None if schema["additionalProperties"] == false => {
                    return Err(format!("{at}: {k} is not in the OpenAPI file"))
                }
                None => {}
            }
        }
    }
    if let (Some(items), Some(a)) = (schema.get("items"), v.as_array()) {
        for (i, x) in a.iter().enumerate() {
            check(x, items, &format!("{at}[{i}]"))?;
        }
    }
    Ok(())
}

/// Validates an answer of `GET|POST template` with `status` against the file.
fn conforms(method: &str, template: &str, status: u16, v: &Value) {
    let op = &openapi()["paths"][template][method];
    let schema = &op["responses"][status.to_string()]["content"]["application/json"]["schema"];
    assert!(
        schema.is_object(),
        "docs/openapi.json has no {method} {template} {status}"
    );
    if let Err(e) = check(v, schema, "$") {
        panic!("{method} {template} {status} does not match docs/openapi.json: {e}\n{v}");
    }
}

/// One `data:` line of `GET /v1/events`: the event's JSON, checked against
/// the schema docs/openapi.json gives for each event of the stream.
fn sse_data(line: &str) -> Option<Value> {
    let d = line.strip_prefix("data: ")?;
    let v: Value = serde_json::from_str(d).unwrap_or_else(|e| panic!("event {d:?}: {e}"));
    let schema = &openapi()["paths"]["/v1/events"]["get"]["responses"]["200"]["content"]
        ["text/event-stream"]["schema"];
    assert!(
        schema.is_object(),
        "docs/openapi.json has no schema for /v1/events"
    );
    if let Err(e) = check(&v, schema, "$") {
        panic!("GET /v1/events data does not match docs/openapi.json: {e}\n{v}");
    }
    Some(v)
}

/// Every `$ref` in `v` (at JSON pointer `at`), with where it is.
fn refs<'a>(v: &'a Value, at: String, out: &mut Vec<(String, &'a str)>) {
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                match (k.as_str(), x) {
                    ("$ref", Value::String(r)) => out.push((at.clone(), r)),
                    _ => refs(
                        x,
                        format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                        out,
                    ),
                }
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                refs(x, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// docs/openapi.json is a structurally valid OpenAPI 3.1 document, as far
/// as is cheap to check: `openapi` 3.1.x, `info` with title and version,
/// `paths` of operations whose responses are keyed by status and described,
/// every path template parameter declared, every schema an object, and
/// every `$ref` resolves (the answers are checked against it elsewhere).
#[test]
fn openapi_file_is_a_valid_openapi_3_1_document() {
    let doc = openapi();
    let mut bad = Vec::new();
    let version = doc["openapi"].as_str().unwrap_or("");
    if !version.starts_with("3.1.") {
        bad.push(format!("openapi is {:?}, not 3.1.x", doc["openapi"]));
    }
    for f in ["title", "version"] {
        if !doc["info"][f].is_string() {
            bad.push(format!("info.{f} is missing or not a string"));
        }
    }
    let methods = [
        "get", "put", "post", "delete", "options", "head", "patch", "trace",
    ];
    let item_fields = ["summary", "description", "parameters", "servers", "$ref"];
    match doc["paths"].as_object() {
        None => bad.push("paths is missing or not an object".into()),
        Some(paths) => {
            for (path, item) in paths {
                if !path.starts_with('/') {
                    bad.push(format!("path {path:?} does not start with /"));
                }
                let Some(item) = item.as_object() else {
                    bad.push(format!("{path}: not an object"));
                    continue;
                };
                for k in item.keys() {
                    if !methods.contains(&k.as_str()) && !item_fields.contains(&k.as_str()) {
                        bad.push(format!("{path}: unknown field {k}"));
                    }
                }
                let declared = |op: &Value, name: &str| {
                    [&item.get("parameters"), &op.get("parameters")]
                        .into_iter()
                        .flatten()
                        .filter_map(|p| p.as_array())
                        .flatten()
                        .any(|p| p["name"] == name && p["in"] == "path" && p["required"] == true)
                };
                let templates: Vec<&str> = path
                    .split('{')
                    .skip(1)
                    .filter_map(|t| t.split_once('}').map(|(n, _)| n))
                    .collect();
                for (m, op) in item.iter().filter(|(k, _)| methods.contains(&k.as_str())) {
                    for t in &templates {
                        if !declared(op, t) {
                            bad.push(format!("{m} {path}: path parameter {t} not declared"));
                        }
                    }
                    let Some(responses) = op["responses"].as_object().filter(|r| !r.is_empty())
                    else {
                        bad.push(format!("{m} {path}: no responses"));
                        continue;
                    };
                    for (code, r) in responses {
                        let code_ok = code == "default"
                            || (code.len() == 3
                                && code.starts_with(['1', '2', '3', '4', '5'])
                                && code[1..].chars().all(|c| c.is_ascii_digit() || c == 'X'));
                        if !code_ok {
                            bad.push(format!("{m} {path}: response key {code:?}"));
                        }
                        if !r["description"].is_string() && !r["$ref"].is_string() {
                            bad.push(format!("{m} {path} {code}: no description (required)"));
                        }
                        for (media, c) in r["content"].as_object().into_iter().flatten() {
                            if !media.contains('/') || !c.is_object() {
                                bad.push(format!("{m} {path} {code}: content {media:?}"));
                            }
                        }
                    }
                }
            }
        }
    }
    for (name, schema) in doc["components"]["schemas"]
        .as_object()
        .into_iter()
        .flatten()
    {
        if !schema.is_object() {
            bad.push(format!("components.schemas.{name} is not an object"));
        }
    }
    let mut all = Vec::new();
    refs(doc, String::new(), &mut all);
    assert!(!all.is_empty(), "no $ref found: the walk is broken");
    for (at, r) in all {
        if !r.starts_with("#/") || resolve(r).is_none() {
            bad.push(format!("{at}: $ref {r} does not resolve"));
        }
    }
    assert!(bad.is_empty(), "docs/openapi.json:\n{}", bad.join("\n"));
}

/// The value of a metric line `name{labels} value`.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

fn leader_of(addr: &str) -> String {
    json(addr, "/").1["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Three `tenure serve --election web` candidates on one store: every endpoint.
async fn endpoints(url: &str, election: &str) {
    // Tables of its own: `GET /v1/elections?history=N` reads every
    // election's terms, and the shared database holds hundreds from other
    // tests (under load those reads outlasted the read timeout, and the
    // stale answer, cached without history, failed the test).
    let prefix = format!("sve{}_", std::process::id());
    let dir = tempfile::tempdir().expect("tempdir");
    // The tables first, once: processes creating them at the same time race
    // on PostgreSQL.
    let _tables = migrated_tables(dir.path(), url, &prefix);
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret-token\n").expect("token");
    let token = token.to_str().expect("utf-8");
    let common = [
        "--store",
        url,
        "--table-prefix",
        &prefix,
        "--election",
        election,
        "--ttl",
        "2s",
        "--token-file",
        token,
    ];
    let a = serve(
        dir.path(),
        None,
        &[&common[..], &["--id", "alpha"]].concat(),
    );
    let b = serve(dir.path(), None, &[&common[..], &["--id", "beta"]].concat());
    let c = serve(
        dir.path(),
        None,
        &[&common[..], &["--id", "gamma"]].concat(),
    );
    let ids = ["alpha", "beta", "gamma"];

    // GET /: every sidecar names the same leader, as the k8s leader-elector does.
    let leader = wait_until("a leader all agree on", Duration::from_secs(10), || {
        let (x, y, z) = (leader_of(&a.addr), leader_of(&b.addr), leader_of(&c.addr));
        (!x.is_empty() && x == y && y == z).then_some(x)
    })
    .await;
    let Some(i) = ids.iter().position(|id| *id == leader) else {
        panic!("leader {leader}")
    };
    let candidates = [&a, &b, &c];
    let (lead, follow) = (candidates[i], candidates[(i + 1) % 3]);

    // /v1/elections: the same rows as `tenure status --json`, same fields.
    let row = wait_until(
        "all three candidates registered",
        Duration::from_secs(10),
        || {
            let (status, all) = json(&a.addr, "/v1/elections");
            assert_eq!(status, 200);
            all.as_array()?
                .iter()
                .find(|r| {
                    r["election"] == election
                        && r["members"].as_array().is_some_and(|m| m.len() == 3)
                })
                .cloned()
        },
    )
    .await;
    assert_eq!(row["namespace"], "default");
    assert!(row["leader"]
        .as_str()
        .expect("leader")
        .starts_with(&format!("{leader}#")));
    assert_eq!(
        row["members"].as_array().expect("members").len(),
        3,
        "{row}"
    );
    let cli = tenure(
        dir.path(),
        &[
            "status",
            "--store",
            url,
            "--table-prefix",
            &prefix,
            "--election",
            election,
            "--json",
        ],
    );
    assert!(cli.status.success(), "{}", text(&cli));
    let cli: Value = serde_json::from_slice(&cli.stdout).expect("status json");
    let cli_row = &cli[0];
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().expect("object").keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(
        keys(cli_row),
        keys(&row),
        "status --json and /v1/elections differ in fields"
    );
    assert_eq!(cli_row["leader"], row["leader"]);
    assert_eq!(cli_row["term"], row["term"]);

    // ?history=N adds the recent terms to the rows (a shared server may
    // hold elections never acquired: no terms, no field); a bad N is a 400.
    let (status, all) = json(&a.addr, "/v1/elections?history=5");
    assert_eq!(status, 200);
    let ours = all
        .as_array()
        .expect("array")
        .iter()
        .find(|r| r["election"] == election)
        .expect("our election");
    let terms = ours["history"].as_array().expect("history");
    assert!(!terms.is_empty() && terms.len() <= 5, "{ours}");
    assert_eq!(json(&a.addr, "/v1/elections?history=lots").0, 400);
    // One election, with history; unknown → 404 JSON; bad name → 400 JSON.
    let (status, one) = json(&a.addr, &format!("/v1/elections/default/{election}"));
    assert_eq!(status, 200);
    assert!(
        !one["history"].as_array().expect("history").is_empty(),
        "{one}"
    );
    assert!(one.get("stale").is_none(), "{one}");
    let (status, e) = json(&a.addr, "/v1/elections/default/never-acquired-xyz");
    assert_eq!(status, 404);
    assert!(
        e["error"]
            .as_str()
            .expect("error")
            .contains("never acquired"),
        "{e}"
    );
    let (status, e) = json(&a.addr, "/v1/elections/default/bad%01name");
    assert_eq!(status, 400, "{e}");
    assert!(e["error"].is_string());

    // Health and readiness: all healthy, all ready.
    for s in candidates {
        assert_eq!(json(&s.addr, "/healthz").0, 200);
        assert_eq!(json(&s.addr, "/readyz").0, 200);
    }

    // Metrics: client-go's gauge and tenure's, with their values.
    let term = row["term"].as_u64().expect("term");
    let m = get(&lead.addr, "/metrics").1;
    // The recorder is in place before the store is built, which registers
    // its statement counters with it.
    assert!(
        m.contains("tenure_store_statements_total{"),
        "the store's statement counters: {m}"
    );
    let labels = format!("{{namespace=\"default\",election=\"{election}\"}}");
    assert_eq!(
        metric(
            &m,
            &format!("leader_election_master_status{{name=\"{election}\"}}")
        ),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        metric(&m, &format!("tenure_is_leader{labels}")),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        metric(&m, &format!("tenure_term{labels}")),
        Some(term as f64),
        "{m}"
    );
    assert!(
        metric(&m, &format!("tenure_lease_remaining_seconds{labels}"))
            .is_some_and(|s| s > 0.0 && s <= 2.0),
        "{m}"
    );
    // Renewals go every ttl/3: wait for the first.
    wait_until("a renewal in the histogram", Duration::from_secs(5), || {
        let m = get(&lead.addr, "/metrics").1;
        metric(&m, &format!("tenure_renew_duration_seconds_count{labels}")).filter(|n| *n >= 1.0)
    })
    .await;
    assert!(
        metric(&m, &format!("tenure_leader_changes_total{labels}")).is_some_and(|n| n >= 1.0),
        "{m}"
    );
    // Three live members, as of the scrape (the route reads the member
    // lists first), on the leader, which reads none itself, and a follower.
    assert_eq!(
        metric(&m, &format!("tenure_members{labels}")),
        Some(3.0),
        "{m}"
    );
    let m = get(&follow.addr, "/metrics").1;
    assert_eq!(
        metric(
            &m,
            &format!("leader_election_master_status{{name=\"{election}\"}}")
        ),
        Some(0.0),
        "{m}"
    );
    assert_eq!(
        metric(&m, &format!("tenure_is_leader{labels}")),
        Some(0.0),
        "{m}"
    );
    assert_eq!(
        metric(&m, &format!("tenure_members{labels}")),
        Some(3.0),
        "{m}"
    );

    // SSE: the first event is the current leader, as `tenure watch --json`;
    // every event's data matches docs/openapi.json.
    let mut s = TcpStream::connect(&a.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(s, "GET /v1/events HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
    let mut r = BufReader::new(s);
    let data = loop {
        let mut line = String::new();
        r.read_line(&mut line).expect("event line");
        if let Some(v) = sse_data(&line) {
            if v["key"]["election"] == election {
                break v;
            }
        }
    };
    assert_eq!(data["change"], "leader", "{data}");
    assert!(data["at"].is_string() && data["term"].is_u64(), "{data}");

    // Token rules: missing or wrong → 401 and nothing changes.
    let (status, body) = post(&a.addr, "resign", election, &[], "");
    assert_eq!(status, 401, "{body}");
    let (status, body) = post(
        &a.addr,
        "resign",
        election,
        &["Authorization: Bearer wrong-token!"],
        "",
    );
    assert_eq!(status, 401, "{body}");
    let (status, body) = post(
        &a.addr,
        "resign",
        election,
        &["Authorization: Bearer s3cret-tok"],
        "",
    );
    assert_eq!(status, 401, "{body}");
    assert_eq!(
        json(&a.addr, &format!("/v1/elections/default/{election}")).1["term"],
        term,
        "a refused resign changed the term"
    );
    assert_eq!(leader_of(&a.addr), leader);
    // With the token: the leader steps down and the other takes over.
    let (status, body) = post(
        &a.addr,
        "resign",
        election,
        &["Authorization: Bearer s3cret-token"],
        "",
    );
    assert_eq!(status, 202, "{body}");
    wait_until("another candidate leads", Duration::from_secs(10), || {
        let now = leader_of(&a.addr);
        (!now.is_empty() && now != leader).then_some(())
    })
    .await;
    // Transfer back, by identity, once the old leader is a member again.
    wait_until(
        "the old leader registered again",
        Duration::from_secs(10),
        || {
            let v = json(&a.addr, &format!("/v1/elections/default/{election}")).1;
            v["members"]
                .as_array()?
                .iter()
                .any(|m| m["identity"] == leader && m["live"] == true)
                .then_some(())
        },
    )
    .await;
    let (status, body) = post(
        &a.addr,
        "transfer",
        election,
        &["Authorization: Bearer s3cret-token"],
        "not json",
    );
    assert_eq!(status, 400, "{body}");
    let (status, body) = post(
        &a.addr,
        "transfer",
        election,
        &["Authorization: Bearer s3cret-token"],
        &format!("{{\"to\":\"{leader}\"}}"),
    );
    assert_eq!(status, 202, "{body}");
    wait_until("the transfer target leads", Duration::from_secs(10), || {
        (leader_of(&b.addr) == leader).then_some(())
    })
    .await;
    // The stream saw it all: a no_leader and a leader event per hand-over,
    // each checked against docs/openapi.json, up to the transfer target's.
    let mut kinds = Vec::new();
    loop {
        let mut line = String::new();
        assert!(
            r.read_line(&mut line).expect("event line") > 0,
            "stream ended"
        );
        let Some(v) = sse_data(&line) else { continue };
        if v["key"]["election"] != election {
            continue;
        }
        kinds.push(v["change"].as_str().unwrap_or_default().to_string());
        let by = v["leader"].as_str().unwrap_or_default();
        if v["term"].as_u64() > Some(term + 1) && by.starts_with(&format!("{leader}#")) {
            break;
        }
    }
    assert!(kinds.iter().any(|k| k == "no_leader"), "{kinds:?}");
    assert!(
        kinds.iter().filter(|k| *k == "leader").count() >= 2,
        "{kinds:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_sqlite_every_endpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    endpoints(&url, "web").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_postgres_every_endpoint() {
    let url = servers::postgres_url();
    if servers::connect_or_skip(&url, &Default::default())
        .await
        .is_none()
    {
        return;
    }
    let election = format!("serve-pg-{}", std::process::id());
    endpoints(&url, &election).await;
}

/// A leader whose store is cut turns unhealthy before its deadline; a
/// follower never does; readiness fails with the reason; the election routes
/// answer the last known state marked stale; the password never shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_health_when_the_store_is_cut() {
    // trust authentication ignores the password; it must still never show.
    let Some((url, proxy, via)) = postgres_behind_a_proxy(Some("hunter2-never-shown")).await else {
        return;
    };
    let election = format!("serve-health-{}", std::process::id());
    // Tables of this run only: `/v1/elections` reads every election of its
    // store, and the shared database holds hundreds from other tests (their
    // member reads through the proxy outlasted the read timeout: 503).
    let prefix = format!("svh{}_", std::process::id());
    let dir = tempfile::tempdir().expect("tempdir");
    // The tables first, once: two processes creating them at the same time
    // raced on PostgreSQL.
    let _tables = migrated_tables(dir.path(), &url, &prefix);
    let ttl = Duration::from_secs(3);
    let leader = serve(
        dir.path(),
        None,
        &[
            "--store",
            &via,
            "--election",
            &election,
            "--ttl",
            "3s",
            "--table-prefix",
            &prefix,
            "--id",
            "cut",
        ],
    );
    wait_until(
        "the proxied candidate leads",
        Duration::from_secs(10),
        || (leader_of(&leader.addr) == "cut").then_some(()),
    )
    .await;
    let follower = serve(
        dir.path(),
        None,
        &[
            "--store",
            &url,
            "--election",
            &election,
            "--ttl",
            "3s",
            "--table-prefix",
            &prefix,
            "--id",
            "direct",
        ],
    );
    wait_until(
        "the follower sees the leader",
        Duration::from_secs(10),
        || (leader_of(&follower.addr) == "cut").then_some(()),
    )
    .await;
    // Without --token-file, resign is disabled: 403, nothing changes.
    let (status, body) = post(
        &leader.addr,
        "resign",
        &election,
        &["Authorization: Bearer x"],
        "",
    );
    assert_eq!(status, 403, "{body}");
    assert_eq!(leader_of(&follower.addr), "cut");
    // Known state before the cut.
    let path = format!("/v1/elections/default/{election}");
    assert_eq!(json(&leader.addr, &path).0, 200);
    assert_eq!(json(&leader.addr, "/v1/elections").0, 200);

    proxy.set_blackhole(true);
    let cut = Instant::now();
    // The leader's deadline is before cut + ttl (its last renewal was before the cut).
    let unhealthy_at = loop {
        let (status, body) = json(&leader.addr, "/healthz");
        assert_eq!(
            json(&follower.addr, "/healthz").0,
            200,
            "a follower turned unhealthy"
        );
        if status == 503 {
            assert!(
                body["reason"]
                    .as_str()
                    .expect("reason")
                    .contains("without a renewal"),
                "{body}"
            );
            break cut.elapsed();
        }
        assert!(
            cut.elapsed() < ttl,
            "still healthy {:?} after the cut: past its deadline",
            cut.elapsed()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(unhealthy_at < ttl, "unhealthy only after {unhealthy_at:?}");
    eprintln!("leader unhealthy {unhealthy_at:?} after the store was cut (ttl {ttl:?})");

    // Store down: /readyz fails with a reason, the rest answers stale.
    let (status, ready) = json(&leader.addr, "/readyz");
    assert_eq!(status, 503, "{ready}");
    assert!(
        ready["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{ready}"
    );
    let (status, one) = json(&leader.addr, &path);
    assert_eq!(status, 200, "{one}");
    assert_eq!(one["stale"], true, "{one}");
    let (status, all) = json(&leader.addr, "/v1/elections");
    assert_eq!(status, 200, "{all}");
    assert!(
        all.as_array()
            .expect("array")
            .iter()
            .all(|r| r["stale"] == true),
        "{all}"
    );
    let m = get(&leader.addr, "/metrics").1;
    assert!(
        metric(&m, "tenure_store_errors_total{kind=\"renew\"}").is_some_and(|n| n >= 1.0),
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            &format!("leader_election_master_status{{name=\"{election}\"}}")
        ),
        Some(0.0),
        "{m}"
    );
    // After its deadline the cut leader is a follower: healthy again.
    wait_until(
        "the cut leader steps down and is healthy",
        Duration::from_secs(10),
        || (json(&leader.addr, "/healthz").0 == 200).then_some(()),
    )
    .await;
    // The follower takes over.
    wait_until("the follower takes over", Duration::from_secs(15), || {
        (leader_of(&follower.addr) == "direct").then_some(())
    })
    .await;

    // The password appears in no answer, healthy or not.
    for p in [
        "/",
        "/v1/elections",
        &path,
        "/healthz",
        "/readyz",
        "/metrics",
        "/ui",
    ] {
        let (_, body) = get(&leader.addr, p);
        assert!(!body.contains("hunter2"), "{p} shows the password: {body}");
    }
    proxy.set_blackhole(false);
}

#[test]
fn serve_bad_addresses_exit_2_naming_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    for bad in [addr.as_str(), "nonsense:xx", "300.1.2.3:80"] {
        let o = tenure(
            dir.path(),
            &["serve", "--store", "sqlite://x.db", "--http", bad],
        );
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(bad),
            "{bad}: {}",
            text(&o)
        );
    }
    let o = tenure(
        dir.path(),
        &[
            "run",
            "--store",
            "sqlite://x.db",
            "--election",
            "e",
            "--http",
            &addr,
            "--",
            "true",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&addr),
        "{}",
        text(&o)
    );
}

/// An idle event stream carries keep-alive comments at --sse-keep-alive.
#[test]
fn serve_sse_keep_alive_comment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let s = serve(
        dir.path(),
        None,
        &["--store", &url, "--sse-keep-alive", "200ms"],
    );
    let mut c = TcpStream::connect(&s.addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    write!(c, "GET /v1/events HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
    let mut r = BufReader::new(c);
    let start = Instant::now();
    loop {
        let mut line = String::new();
        assert!(r.read_line(&mut line).expect("read") > 0, "stream ended");
        sse_data(&line);
        if line.starts_with(": keep-alive") {
            break;
        }
    }
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}

/// `tenure run --http` serves the supervised election: GET / names it.
/// `tenure run --store url --election job --id id --http 127.0.0.1:0
/// args... -- sleep 30`, once it has announced its address.
fn run_http(dir: &std::path::Path, url: &str, id: &str, args: &[&str]) -> Serve {
    let mut child = Command::new(BIN)
        .args(["run", "--store", url, "--election", "job", "--id", id])
        .args(["--http", "127.0.0.1:0"])
        .args(args)
        .args(["--", "sleep", "30"])
        .current_dir(dir)
        .env("TENURE_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn tenure run");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("announced address");
    Serve {
        addr: line
            .trim()
            .strip_prefix("serving http://")
            .expect("serving line")
            .to_string(),
        child,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_http_serves_the_supervised_election() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let s = run_http(dir.path(), &url, "runner", &[]);
    wait_until(
        "run --http names its leader",
        Duration::from_secs(10),
        || (leader_of(&s.addr) == "runner").then_some(()),
    )
    .await;
    assert_eq!(json(&s.addr, "/healthz").0, 200);
    let m = get(&s.addr, "/metrics").1;
    assert_eq!(
        metric(&m, "leader_election_master_status{name=\"job\"}"),
        Some(1.0),
        "{m}"
    );
}

/// A leader served by `tenure run --http` changes its metadata with
/// `POST .../proclaim`: the token rules hold, the term stays, every
/// reader sees the new text, and a follower or a central server, which
/// lead nothing, answer 409 and change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_http_proclaims_the_leaders_new_metadata() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret-token\n").expect("token");
    let token = token.to_str().expect("utf-8");
    let auth = ["Authorization: Bearer s3cret-token"];
    let leader = run_http(
        dir.path(),
        &url,
        "runner",
        &["--token-file", token, "--metadata", "http://10.0.0.1:8080"],
    );
    wait_until("the runner leads", Duration::from_secs(10), || {
        (leader_of(&leader.addr) == "runner").then_some(())
    })
    .await;
    let before = json(&leader.addr, "/v1/elections/default/job").1;
    assert_eq!(before["metadata"], "http://10.0.0.1:8080", "{before}");
    let new = r#"{"metadata": "http://10.0.0.1:9090"}"#;
    assert_eq!(post(&leader.addr, "proclaim", "job", &[], new).0, 401);
    let (status, v) = post(&leader.addr, "proclaim", "job", &auth, r#"{"to": "x"}"#);
    assert_eq!(status, 400, "{v}");
    let (status, v) = post(
        &leader.addr,
        "proclaim",
        "job",
        &auth,
        r#"{"metadata": "a\u0007b"}"#,
    );
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or("")
            .contains("control character"),
        "{v}"
    );
    let (status, v) = post(&leader.addr, "proclaim", "job", &auth, new);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["term"], before["term"], "proclaim keeps the term: {v}");
    let after = json(&leader.addr, "/v1/elections/default/job").1;
    assert_eq!(
        (&after["metadata"], &after["term"], &after["leader"]),
        (
            &Value::from("http://10.0.0.1:9090"),
            &before["term"],
            &before["leader"]
        ),
        "{after}"
    );
    let follower = run_http(dir.path(), &url, "other", &["--token-file", token]);
    let central = serve(dir.path(), None, &["--store", &url, "--token-file", token]);
    for (who, addr) in [
        ("a follower", &follower.addr),
        ("a central server", &central.addr),
    ] {
        let (status, v) = post(addr, "proclaim", "job", &auth, r#"{"metadata": "forged"}"#);
        assert_eq!(status, 409, "{who}: {v}");
        let seen = json(addr, "/v1/elections/default/job").1;
        assert_eq!(seen["metadata"], "http://10.0.0.1:9090", "{who}: {seen}");
    }
}

/// 1,000 SSE clients connect, read the first event and go away: the serve
/// process's memory stays flat.
#[test]
fn serve_sse_clients_leave_nothing_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let s = serve(
        dir.path(),
        None,
        &[
            "--store",
            &url,
            "--election",
            "sse",
            "--id",
            "one",
            "--ttl",
            "2s",
        ],
    );
    let cycle = || {
        let mut c = TcpStream::connect(&s.addr).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        write!(c, "GET /v1/events HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
        let mut r = BufReader::new(c);
        loop {
            let mut line = String::new();
            assert!(r.read_line(&mut line).expect("read") > 0, "stream ended");
            if sse_data(&line).is_some() {
                break;
            }
        }
    };
    for _ in 0..100 {
        cycle();
    }
    let before = rss_kb(s.child.id());
    for _ in 0..1000 {
        cycle();
    }
    std::thread::sleep(Duration::from_millis(200));
    let after = rss_kb(s.child.id());
    eprintln!("serve RSS after 100 SSE cycles {before} kB, after 1,100: {after} kB");
    assert!(
        after < before + 2048,
        "RSS grew from {before} kB to {after} kB over 1,000 SSE cycles"
    );
}

/// The value of the series `name` whose labels include every one of
/// `labels` (`key="value"`).
fn series(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?.strip_prefix('{')?;
        let (set, value) = rest.split_once('}')?;
        labels
            .iter()
            .all(|want| set.split(',').any(|have| have == *want))
            .then(|| value.trim().parse().ok())
            .flatten()
    })
}

/// A central `tenure serve` (no `--election`) on a store with three
/// elections, one of them without a leader: `/metrics` says which has a
/// leader, who, under which term and with how much lease left, and counts
/// the change when a leader goes; with `--metrics-elections 2` the third
/// election is only counted, as one without a leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_central_metrics_name_the_leaderless_election() {
    use tenure::store::{Acquire, Claim, ElectionKey, LeaseStore, Tenure};
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let store = tenure::store::connect(&url, &Default::default())
        .await
        .expect("store");
    let take = |election: &str, holder: &str| {
        let (store, key, holder) = (
            store.clone(),
            ElectionKey::new("ops", election),
            holder.to_string(),
        );
        async move {
            let claim = Claim {
                key: key.clone(),
                holder: holder.clone(),
                metadata: String::new(),
                ttl: Duration::from_secs(60),
            };
            let Acquire::Acquired(rec) = store.try_acquire(&claim).await.expect("acquire") else {
                panic!("{key} is free");
            };
            Tenure {
                key,
                holder,
                term: rec.term,
            }
        }
    };
    let alpha = take("a-billing", "alpha#1").await;
    take("b-mailer", "beta#1").await;
    let gone = take("c-reports", "gamma#1").await;
    assert!(store.release(&gone).await.expect("release"));

    let s = serve(dir.path(), None, &["--store", &url]);
    let m = get(&s.addr, "/metrics").1;
    let present = |m: &str, e: &str| {
        series(
            m,
            "tenure_election_leader_present",
            &[r#"namespace="ops""#, &format!(r#"election="{e}""#)],
        )
    };
    assert_eq!(present(&m, "a-billing"), Some(1.0), "{m}");
    assert_eq!(present(&m, "b-mailer"), Some(1.0), "{m}");
    assert_eq!(present(&m, "c-reports"), Some(0.0), "{m}");
    let info = |m: &str, e: &str, who: &str| {
        series(
            m,
            "tenure_election_leader_info",
            &[&format!(r#"election="{e}""#), &format!(r#"leader="{who}""#)],
        )
    };
    assert_eq!(info(&m, "a-billing", "alpha"), Some(1.0), "{m}");
    assert_eq!(
        series(&m, "tenure_election_term", &[r#"election="b-mailer""#]),
        Some(1.0),
        "{m}"
    );
    let left = series(
        &m,
        "tenure_election_lease_remaining_seconds",
        &[r#"election="a-billing""#],
    )
    .expect("lease left");
    assert!(left > 50.0 && left <= 60.0, "{left}");
    assert!(m.contains("tenure_elections_observed 3"), "{m}");

    // The leader of a-billing goes: no leader, one change, alpha no more.
    assert!(store.release(&alpha).await.expect("release"));
    let m = get(&s.addr, "/metrics").1;
    assert_eq!(present(&m, "a-billing"), Some(0.0), "{m}");
    assert_eq!(info(&m, "a-billing", "alpha"), Some(0.0), "{m}");
    assert_eq!(
        series(
            &m,
            "tenure_election_leader_changes_total",
            &[r#"election="a-billing""#]
        ),
        Some(1.0),
        "{m}"
    );
    drop(s);

    // Two elections' series at most: the third is counted, leaderless.
    let s = serve(
        dir.path(),
        None,
        &["--store", &url, "--metrics-elections", "2"],
    );
    let m = get(&s.addr, "/metrics").1;
    assert_eq!(present(&m, "c-reports"), None, "{m}");
    assert!(m.contains("tenure_elections_unexported 1"), "{m}");
    assert!(
        m.contains("tenure_elections_unexported_without_leader 1"),
        "{m}"
    );
}
