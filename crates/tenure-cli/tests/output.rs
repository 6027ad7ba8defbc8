//! What the commands print, and what they do when stdout cannot take it:
//! a reader that went away (`tenure status | head -1`) ends a command
//! quietly, any other write error is one line on stderr and exit 1, and
//! election names print unambiguously.

mod common;

use std::fs::File;
use std::path::Path;
use std::process::{Output, Stdio};

use common::{tenure, tenure_command, text};

/// Runs `tenure args...` with `stdout` as its standard output.
fn tenure_into(dir: &Path, args: &[&str], stdout: Stdio) -> Output {
    tenure_command(dir, args)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .expect("run tenure")
}

/// A pipe whose reading end is already closed: every write fails with EPIPE.
fn closed_pipe() -> Stdio {
    let (reader, writer) = nix::unistd::pipe().expect("pipe");
    drop(reader);
    writer.into()
}

fn dev_full() -> Stdio {
    File::options()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full")
        .into()
}

/// A SQLite store with its tables and one election led once, so that every
/// command below has something to print.
fn store_with_an_election(dir: &Path) -> String {
    let url = format!("sqlite://{}", dir.join("out.db").display());
    let done = tenure(
        dir,
        &[
            "run",
            "--store",
            &url,
            "--election",
            "e",
            "--ttl",
            "2s",
            "--",
            "true",
        ],
    );
    assert_eq!(done.status.code(), Some(0), "{}", text(&done));
    url
}

/// Runs every printing command on a store with one election, each with the
/// standard output `stdout()` gives, and hands the command and its outcome
/// (exit code, stderr) to `check`. Returns the store's URL.
fn each_printing_command(
    dir: &Path,
    stdout: impl Fn() -> Stdio,
    check: impl Fn(&[&str], Option<i32>, &str),
) -> String {
    let url = store_with_an_election(dir);
    for args in [
        &["status", "--store", &url][..],
        &["status", "--store", &url, "--json"],
        &["status", "--store", &url, "--history", "5"],
        &["migrate", "--store", &url, "--print-sql"],
        &["migrate", "--store", &url],
    ] {
        let out = tenure_into(dir, args, stdout());
        check(
            args,
            out.status.code(),
            &String::from_utf8_lossy(&out.stderr),
        );
    }
    url
}

#[test]
fn a_closed_pipe_ends_a_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    each_printing_command(dir.path(), closed_pipe, |args, code, stderr| {
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?} printed on stderr: {stderr}");
    });
}

#[test]
fn a_full_disk_is_one_line_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let url = each_printing_command(dir.path(), dev_full, |args, code, stderr| {
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert_eq!(
            stderr.trim(),
            "tenure: error: cannot write to standard output: No space left on device (os error 28)",
            "{args:?}"
        );
    });
    // Nothing was lost: the store still answers.
    let out = tenure(dir.path(), &["status", "--store", &url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

#[test]
fn watch_stops_quietly_on_a_closed_pipe_and_loudly_on_a_full_disk() {
    let dir = tempfile::tempdir().unwrap();
    let url = store_with_an_election(dir.path());
    // `watch` prints the current state first, so it writes at once.
    let quiet = tenure_into(dir.path(), &["watch", "--store", &url], closed_pipe());
    assert_eq!(quiet.status.code(), Some(0), "{quiet:?}");
    assert!(quiet.stderr.is_empty(), "{quiet:?}");
    let full = tenure_into(dir.path(), &["watch", "--store", &url], dev_full());
    assert_eq!(full.status.code(), Some(1), "{full:?}");
    assert!(
        String::from_utf8_lossy(&full.stderr)
            .contains("cannot write to standard output: No space left on device"),
        "{full:?}"
    );
}

/// `a/b` + `c` and `a` + `b/c` are two elections; they must not print alike.
#[test]
fn names_with_a_slash_print_unambiguously() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("names.db").display());
    for (ns, election) in [("a/b", "c"), ("a", "b/c")] {
        let done = tenure(
            dir.path(),
            &[
                "run",
                "--store",
                &url,
                "--namespace",
                ns,
                "--election",
                election,
                "--ttl",
                "2s",
                "--",
                "true",
            ],
        );
        assert_eq!(done.status.code(), Some(0), "{}", text(&done));
    }
    let out = tenure(dir.path(), &["status", "--store", &url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("\"a/b\"/c "), "{stdout}");
    assert!(stdout.contains("a/\"b/c\" "), "{stdout}");
    assert!(!stdout.contains("a/b/c"), "{stdout}");
}
