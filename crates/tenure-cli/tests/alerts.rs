//! The alerting rules README documents (`docs/alerts/tenure.rules.yml`)
//! are valid, and fire as their unit tests say (`promtool test rules`, on
//! series named as `tenure serve` and `tenure run --http` export them).

use std::path::Path;
use std::process::Command;

use tenure_testsupport::servers;

/// Whether `promtool` is on the PATH (Debian's `prometheus` package; `.ci/run`
/// takes it out of the package); `false` after saying why the test is
/// skipped. In CI its absence fails the test.
fn has_promtool() -> bool {
    let found = Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return true;
    }
    assert!(
        !servers::required(),
        "promtool is required (CI=true or TENURE_REQUIRE_SERVERS=1) but not on the PATH: \
         it is in Debian's prometheus package (.ci/run extracts it)"
    );
    eprintln!("skipped: no promtool on the PATH (Debian's prometheus package)");
    false
}

#[test]
fn alert_rules_pass_their_unit_tests() {
    if !has_promtool() {
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/alerts");
    for args in [
        ["check", "rules", "tenure.rules.yml"],
        ["test", "rules", "tenure.rules.test.yml"],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("promtool");
        assert!(
            out.status.success(),
            "promtool {}:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
