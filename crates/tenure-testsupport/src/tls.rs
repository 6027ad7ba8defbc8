//! A throwaway certificate authority for tests: a CA, a server certificate for
//! `127.0.0.1`, `::1` and `localhost`, and a client certificate, written as PEM
//! files into a directory.

use std::io;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

/// The PEM files of a generated test CA.
#[derive(Clone, Debug)]
pub struct TestCa {
    /// The directory holding the files.
    pub dir: PathBuf,
    /// The CA certificate (what clients trust: `sslrootcert=`, `ssl-ca=`).
    pub ca_cert: PathBuf,
    /// The server certificate, signed by the CA; SANs 127.0.0.1, ::1, localhost.
    pub server_cert: PathBuf,
    /// The server's private key (PKCS#8, mode 0600).
    pub server_key: PathBuf,
    /// A client certificate signed by the CA, with the common name given to
    /// [`TestCa::generate`] (PostgreSQL `cert` auth maps it to the user name).
    pub client_cert: PathBuf,
    /// The client's private key (PKCS#8, mode 0600).
    pub client_key: PathBuf,
    /// The common name of the client certificate.
    pub client_cn: String,
}

fn err(e: rcgen::Error) -> io::Error {
    io::Error::other(format!("rcgen: {e}"))
}

fn write(path: &Path, contents: &str, private: bool) -> io::Result<()> {
    std::fs::write(path, contents)?;
    if private {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}

fn name(cn: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "tenure tests");
    dn.push(DnType::CommonName, cn);
    dn
}

impl TestCa {
    /// Generates a fresh CA (its own random key, so two calls give two CAs that
    /// do not trust each other) and writes `ca.pem`, `server.pem`,
    /// `server.key`, `client.pem` and `client.key` into `dir` (created if missing).
    pub fn generate(dir: &Path, client_cn: &str) -> io::Result<TestCa> {
        std::fs::create_dir_all(dir)?;

        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        ca_params.distinguished_name = name("tenure test CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate().map_err(err)?;
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key).map_err(err)?;

        let leaf = |sans: Vec<String>,
                    cn: &str,
                    usage: ExtendedKeyUsagePurpose|
         -> io::Result<(String, String)> {
            let mut p = CertificateParams::new(sans).map_err(err)?;
            p.distinguished_name = name(cn);
            p.is_ca = IsCa::ExplicitNoCa;
            p.key_usages = vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ];
            p.extended_key_usages = vec![usage];
            p.use_authority_key_identifier_extension = true;
            let key = KeyPair::generate().map_err(err)?;
            let cert = p.signed_by(&key, &ca).map_err(err)?;
            Ok((cert.pem(), key.serialize_pem()))
        };
        let (server_pem, server_key_pem) = leaf(
            vec!["127.0.0.1".into(), "::1".into(), "localhost".into()],
            "localhost",
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        let (client_pem, client_key_pem) =
            leaf(Vec::new(), client_cn, ExtendedKeyUsagePurpose::ClientAuth)?;

        let out = TestCa {
            dir: dir.to_path_buf(),
            ca_cert: dir.join("ca.pem"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server.key"),
            client_cert: dir.join("client.pem"),
            client_key: dir.join("client.key"),
            client_cn: client_cn.to_string(),
        };
        write(&out.ca_cert, &ca.pem(), false)?;
        write(&out.server_cert, &server_pem, false)?;
        write(&out.server_key, &server_key_pem, true)?;
        write(&out.client_cert, &client_pem, false)?;
        write(&out.client_key, &client_key_pem, true)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_pem_files() {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::generate(dir.path(), "someone").unwrap();
        for f in [&ca.ca_cert, &ca.server_cert, &ca.client_cert] {
            let s = std::fs::read_to_string(f).unwrap();
            assert!(s.starts_with("-----BEGIN CERTIFICATE-----"), "{f:?}");
        }
        for f in [&ca.server_key, &ca.client_key] {
            let s = std::fs::read_to_string(f).unwrap();
            assert!(s.starts_with("-----BEGIN PRIVATE KEY-----"), "{f:?}");
        }
        let other = TestCa::generate(&dir.path().join("other"), "someone").unwrap();
        assert_ne!(
            std::fs::read(&ca.ca_cert).unwrap(),
            std::fs::read(&other.ca_cert).unwrap()
        );
    }
}
