//! Digging the rustls error out of the error chains of sqlx and redis, so a
//! certificate problem can be explained instead of reported as "I/O error".

/// Finds a rustls error in an error or its sources (also inside `io::Error`s,
/// which is how tokio-rustls reports handshake failures).
pub(crate) fn find<'a>(mut e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    loop {
        if let Some(r) = e.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if let Some(inner) = io.get_ref() {
                if let Some(r) = inner.downcast_ref::<rustls::Error>() {
                    return Some(r);
                }
            }
        }
        e = e.source()?;
    }
}
