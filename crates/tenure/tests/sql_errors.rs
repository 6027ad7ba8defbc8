//! Bad input against the SQL servers: a wrong password and a database that
//! does not exist give errors that name the problem and never the password.

use tenure::store::{connect, StoreOptions};
use tenure::Error;
use tenure_testsupport::servers;

/// `url` with its path (the database) replaced.
fn with_database(url: &str, db: &str) -> String {
    let mut u = url::Url::parse(url).expect("test URL");
    u.set_path(&format!("/{db}"));
    u.to_string()
}

#[tokio::test]
async fn unknown_database_is_named() {
    for url in [servers::mysql_url(), servers::postgres_url()] {
        if servers::connect_or_skip(&url, &StoreOptions::default())
            .await
            .is_none()
        {
            continue;
        }
        let bad = with_database(&url, "tenure_no_such_db");
        let err = connect(&bad, &StoreOptions::default()).await.unwrap_err();
        let s = err.to_string();
        assert!(matches!(err, Error::Schema { .. }), "{bad}: {err:?}");
        // The driver's error is kept as the source, not only flattened into text.
        let source = std::error::Error::source(&err).expect("a source");
        assert!(source.downcast_ref::<sqlx::Error>().is_some(), "{source:?}");
        assert!(
            s.contains("tenure_no_such_db") && s.contains("create the database"),
            "{s}"
        );
    }
}

/// The shared MariaDB lets root in without a password over TCP; any other
/// password is refused.
#[tokio::test]
async fn wrong_password_is_permission_denied_and_not_printed() {
    let url = servers::mysql_url();
    if servers::connect_or_skip(&url, &StoreOptions::default())
        .await
        .is_none()
    {
        return;
    }
    let mut u = url::Url::parse(&url).expect("test URL");
    u.set_password(Some("wrong-pw-123")).expect("password");
    let err = connect(u.as_str(), &StoreOptions::default())
        .await
        .unwrap_err();
    let s = err.to_string();
    assert!(matches!(err, Error::PermissionDenied { .. }), "{err:?}");
    assert!(!s.contains("wrong-pw-123") && s.contains("***"), "{s}");
}

/// A SQLite file in a directory that does not exist: unavailable, naming the
/// fix, with sqlx's error kept as the source.
#[tokio::test]
async fn store_errors_keep_their_cause() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}/missing/dir/t.db", dir.path().display());
    let err = connect(&url, &StoreOptions::default()).await.unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    assert!(err.to_string().contains("directory exists"), "{err}");
    let source = std::error::Error::source(&err).expect("a source");
    assert!(source.downcast_ref::<sqlx::Error>().is_some(), "{source:?}");
}
