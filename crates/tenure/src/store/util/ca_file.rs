//! Checks a CA file named by a store URL before the first connection: a
//! directory, an unreadable file or one without a PEM certificate is a
//! mistake in the URL, reported with the parameter that names it, not a
//! handshake failure ("not signed by the CA") or an unreachable server later.

use rustls::pki_types::{pem::PemObject, CertificateDer};

/// Files larger than this are not CA bundles (the system bundle is ~200 KiB).
const MAX_CA_FILE: u64 = 16 * 1024 * 1024;

/// Reads the CA file `param=path` and checks that it holds at least one PEM
/// certificate; the reason (naming `param=path` and the fix) when not.
pub(crate) fn read_ca_file(param: &str, path: &str) -> Result<Vec<u8>, String> {
    let fix = "give the path of a PEM file with the CA certificate(s) that signed the server's certificate";
    if path.is_empty() {
        return Err(format!("{param}= is empty; {fix}"));
    }
    let meta =
        std::fs::metadata(path).map_err(|e| format!("cannot read {param}={path}: {e}; {fix}"))?;
    if meta.is_dir() {
        return Err(format!("{param}={path} is a directory; {fix}"));
    }
    if meta.len() > MAX_CA_FILE {
        return Err(format!(
            "{param}={path} is {} bytes, too large for a CA file; {fix}",
            meta.len()
        ));
    }
    let bytes =
        std::fs::read(path).map_err(|e| format!("cannot read {param}={path}: {e}; {fix}"))?;
    let mut found = 0usize;
    for cert in CertificateDer::pem_slice_iter(&bytes) {
        match cert {
            Ok(_) => found += 1,
            Err(e) => {
                return Err(format!(
                    "{param}={path} is not a valid PEM file ({e}); {fix}"
                ))
            }
        }
    }
    if found == 0 {
        return Err(format!(
            "no certificate in file {path} ({param}=): expected PEM blocks starting with -----BEGIN CERTIFICATE-----; {fix}"
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_garbage_and_missing_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        let e = read_ca_file("sslrootcert", d).unwrap_err();
        assert!(
            e.contains(&format!("sslrootcert={d} is a directory")),
            "{e}"
        );
        let garbage = dir.path().join("ca.pem");
        std::fs::write(&garbage, "not a certificate\n").unwrap();
        let g = garbage.to_str().unwrap();
        let e = read_ca_file("cacert", g).unwrap_err();
        assert!(
            e.contains(&format!("no certificate in file {g} (cacert=)")),
            "{e}"
        );
        let e = read_ca_file("ssl-ca", "/nonexistent/ca.pem").unwrap_err();
        assert!(e.contains("cannot read ssl-ca=/nonexistent/ca.pem"), "{e}");
    }
}
