//! `tenure migrate`: create the tables, or print the DDL for a DBA.

use tenure::store::sql::SqlStore;

use crate::args::MigrateArgs;
use crate::failure::Failure;
use crate::output::out;

pub async fn migrate(a: MigrateArgs) -> Result<u8, Failure> {
    let url = a.store.url()?;
    let store = SqlStore::connect_lazy(&url, &a.store.options())?;
    if a.print_sql {
        for stmt in store.schema_sql().await? {
            out!("{stmt};\n");
        }
        return Ok(0);
    }
    store.migrate().await?;
    out!(
        "schema version {} is in place in {}",
        tenure::store::sql::SCHEMA_VERSION,
        tenure::store::redact_url(&url)
    );
    Ok(0)
}
