//! Private database servers started from the installed binaries (temp data
//! directory, free port), so the harness can crash and restart them without
//! touching the machine's shared servers. The launcher is shared with the
//! tests in `tenure-testsupport`.

pub use tenure_testsupport::servers::{Kind, Server, ServerOptions};
