//! TLS settings: CA bundles, client certificates (validated when loaded), insecure mode and the
//! `tls-server-name` connector.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::RwLock;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig};
use ureq::unversioned::transport::{
    ConnectProxyConnector, ConnectionDetails, Connector, RustlsConnector, SocksConnector, TcpConnector, Transport,
};

/// A set of trusted CAs as one TLS configuration uses it; `None` means the bundled Mozilla roots
/// (ureq's `RootCerts::WebPki`). Compared by pointer: a re-read CA file is a new `Arc`.
pub(crate) type RootSet = Option<Arc<Vec<Certificate<'static>>>>;

/// Where the trusted CAs come from.
#[derive(Clone, Debug)]
pub(crate) enum CaRoots {
    /// Fixed for the life of the client: kubeconfig `certificate-authority-data`.
    Inline(Arc<Vec<Certificate<'static>>>),
    /// A file that may be rewritten when the cluster's CA rotates: kubeconfig
    /// `certificate-authority`, in-cluster `ca.crt`.
    File(Arc<CaFile>),
}

/// A CA bundle read from a file, and read again when a TLS handshake fails because the server's
/// certificate is not signed by it (docs/auth.md §7): a cluster whose CA rotated is trusted again
/// once the file holds the new CA, without a restart.
pub(crate) struct CaFile {
    path: PathBuf,
    /// Where the path came from (`kubeconfig /k: clusters[0].cluster.certificate-authority`).
    source: String,
    /// The CAs in use: read when the configuration was loaded, replaced when a re-read finds
    /// different ones. Each handshake takes the `Arc` current when its request starts.
    roots: RwLock<Arc<Vec<Certificate<'static>>>>,
}

impl fmt::Debug for CaFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaFile")
            .field("path", &self.path)
            .field("source", &self.source)
            .field("certificates", &self.roots.read().len())
            .finish()
    }
}

impl CaFile {
    /// `roots` were just read from `path`.
    pub(crate) fn new(path: PathBuf, source: String, roots: Vec<Certificate<'static>>) -> CaFile {
        CaFile { path, source, roots: RwLock::new(Arc::new(roots)) }
    }

    /// A handshake that trusted `used` failed on the server's certificate: reads the file again.
    /// True if the CAs now in use differ from `used` (the file changed, or another request
    /// already re-read it), so a retry may succeed. A file that cannot be read or holds no
    /// certificate (a rotation half done) keeps the CAs in use.
    ///
    /// One read per call; callers call it at most once per failed request, so the reads follow
    /// the watcher's backoff.
    fn reload(&self, used: &Arc<Vec<Certificate<'static>>>) -> bool {
        if !Arc::ptr_eq(&self.roots.read(), used) {
            return true;
        }
        let certs = match super::read_file(&self.path) {
            Ok(pem) => parse_ca_bundle(&pem).map_err(|e| format!("{}: {e}", self.path.display())),
            Err(e) => Err(format!("cannot read {}: {e}", self.path.display())),
        };
        let certs = match certs {
            Ok(certs) => certs,
            Err(e) => {
                log::debug!("{}: not re-read, keeping the CA in use: {e}", self.source);
                return false;
            }
        };
        let mut roots = self.roots.write();
        if !Arc::ptr_eq(&roots, used) {
            return true;
        }
        if certs.iter().map(Certificate::der).eq(roots.iter().map(Certificate::der)) {
            log::debug!("{}: re-read after a certificate failure: unchanged", self.source);
            return false;
        }
        log::debug!("{}: re-read after a certificate failure: the CA changed; using the new one", self.source);
        *roots = Arc::new(certs);
        true
    }
}

/// How to trust the server and which certificate to present. Only used for `https://` servers.
#[derive(Clone, Default)]
pub(crate) struct TlsSettings {
    /// Trusted CAs; `None` means the bundled Mozilla roots (ureq's `RootCerts::WebPki`).
    pub(crate) roots: Option<CaRoots>,
    /// Skip server certificate verification (`insecure-skip-tls-verify`).
    pub(crate) insecure: bool,
    /// The client certificate chain and key, already checked to match.
    pub(crate) client_cert: Option<ClientCert>,
    /// Where it came from (`users[0].user.client-certificate-data and ...`), for errors.
    pub(crate) client_cert_source: Option<String>,
    /// Name for SNI and verification instead of the URL's host (`tls-server-name`).
    pub(crate) server_name: Option<String>,
}

impl fmt::Debug for TlsSettings {
    // The key is secret; say only whether there is one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSettings")
            .field("roots", &self.roots)
            .field("insecure", &self.insecure)
            .field("client_cert", &self.client_cert.as_ref().map(|_| "<redacted>"))
            .field("client_cert_source", &self.client_cert_source)
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl TlsSettings {
    /// The trusted CAs as of now (a CA file may have been re-read since the last call).
    pub(crate) fn roots(&self) -> RootSet {
        match &self.roots {
            None => None,
            Some(CaRoots::Inline(certs)) => Some(Arc::clone(certs)),
            Some(CaRoots::File(file)) => Some(Arc::clone(&file.roots.read())),
        }
    }

    /// The ureq TLS configuration trusting `roots` and presenting `client_cert` (rustls,
    /// verification of IP SANs included).
    pub(crate) fn to_ureq(&self, roots: RootSet, client_cert: Option<ClientCert>) -> TlsConfig {
        let roots = match roots {
            Some(certs) => RootCerts::Specific(certs),
            None => RootCerts::WebPki,
        };
        TlsConfig::builder().root_certs(roots).client_cert(client_cert).disable_verification(self.insecure).build()
    }

    /// A handshake that trusted `used` failed because the server's certificate is not signed by
    /// it: re-reads the CA file, if the CAs come from one. True if a retry may now succeed.
    /// Never for inline `certificate-authority-data` or the bundled roots: they cannot change.
    pub(crate) fn reload_ca(&self, used: &RootSet) -> bool {
        match (&self.roots, used) {
            (Some(CaRoots::File(file)), Some(used)) => file.reload(used),
            _ => false,
        }
    }

    /// Which CAs the server's certificate was checked against, for an error.
    pub(crate) fn describe_ca(&self) -> String {
        match &self.roots {
            None => "the bundled public CAs (no certificate-authority is configured)".to_owned(),
            Some(CaRoots::Inline(_)) => "the CA in certificate-authority-data".to_owned(),
            Some(CaRoots::File(file)) => {
                format!("the CA in {} (from {}, read again after this failure)", file.path.display(), file.source)
            }
        }
    }
}

/// Parses a CA bundle (one or more `CERTIFICATE` blocks). An empty set is an error: it would only
/// fail later, at the handshake, with "unknown issuer".
pub(crate) fn parse_ca_bundle(pem: &[u8]) -> Result<Vec<Certificate<'static>>, String> {
    let certs = certificates(pem)?;
    if certs.is_empty() {
        return Err("no PEM CERTIFICATE block found".to_owned());
    }
    Ok(certs)
}

fn certificates(pem: &[u8]) -> Result<Vec<Certificate<'static>>, String> {
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(pem) {
        match item {
            Ok(PemItem::Certificate(c)) => certs.push(c),
            Ok(_) => {}
            Err(e) => return Err(format!("invalid PEM: {e}")),
        }
    }
    Ok(certs)
}

/// Parses a client certificate chain and its key, and checks with rustls that they belong
/// together: ureq would otherwise panic on the first connection (docs/http.md §4).
pub(crate) fn parse_client_identity(cert_pem: &[u8], key_pem: &[u8]) -> Result<ClientCert, (bool, String)> {
    let chain = certificates(cert_pem).map_err(|e| (true, e))?;
    if chain.is_empty() {
        return Err((true, "no PEM CERTIFICATE block found".to_owned()));
    }
    // The error names no key material: ureq's messages are fixed strings.
    let key = PrivateKey::from_pem(key_pem).map_err(|e| (false, format!("invalid private key: {e}")))?;
    validate_pair(&chain, &key).map_err(|e| (false, e))?;
    Ok(ClientCert::new_with_certs(&chain, key))
}

fn validate_pair(chain: &[Certificate<'static>], key: &PrivateKey<'static>) -> Result<(), String> {
    let der_chain: Vec<CertificateDer<'static>> =
        chain.iter().map(|c| CertificateDer::from(c.der().to_vec())).collect();
    // ureq does not export its `KeyKind`; pki-types tells PKCS#1, PKCS#8 and SEC1 apart by their DER.
    let key_der = PrivateKeyDer::try_from(key.der().to_vec()).map_err(|e| format!("unsupported private key: {e}"))?;
    // The key is loaded by ring, as ureq's own rustls configuration loads it, and compared with
    // the certificate's public key. Not through a `CryptoProvider`: ring's `default_provider()` is
    // deprecated from rustls 0.23.48 on, and a pair check needs no cipher suites. A key type that
    // cannot tell its public key is let through, as rustls's own `CertifiedKey::from_der` does.
    let signing_key = rustls::crypto::ring::sign::any_supported_type(&key_der)
        .map_err(|e| format!("unusable certificate/key pair: {e}"))?;
    match rustls::sign::CertifiedKey::new(der_chain, signing_key).keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(()),
        Err(rustls::Error::InconsistentKeys(_)) => Err("the private key does not match the certificate".to_owned()),
        Err(other) => Err(format!("unusable certificate/key pair: {other}")),
    }
}

/// An agent whose TLS connections to the server use `server_name` for SNI and verification,
/// while TCP (and a proxy's CONNECT) still go to the URL's host (docs/http.md §4).
pub(crate) fn agent_with_server_name(config: ureq::config::Config, server: &str, server_name: &str) -> ureq::Agent {
    let host = server.parse::<ureq::http::Uri>().ok().and_then(|u| u.host().map(str::to_owned)).unwrap_or_default();
    // Same order as ureq's DefaultConnector: SOCKS, CONNECT proxy, TCP, then TLS.
    let chain =
        ().chain(SocksConnector::default())
            .chain(ConnectProxyConnector::default())
            .chain(TcpConnector::default())
            .chain(ServerNameOverride { inner: RustlsConnector::default(), host, server_name: server_name.to_owned() });
    ureq::Agent::with_parts(config, chain, ureq::unversioned::resolver::DefaultResolver::default())
}

/// Runs rustls with a changed URI authority when connecting to `host`, so SNI and certificate
/// verification use `server_name`.
#[derive(Debug)]
struct ServerNameOverride {
    inner: RustlsConnector,
    host: String,
    server_name: String,
}

impl<In: Transport> Connector<In> for ServerNameOverride {
    type Out = <RustlsConnector as Connector<In>>::Out;

    fn connect(&self, d: &ConnectionDetails, chained: Option<In>) -> Result<Option<Self::Out>, ureq::Error> {
        // TLS to an https proxy keeps the proxy's own name.
        if d.uri.host() != Some(self.host.as_str()) {
            return self.inner.connect(d, chained);
        }
        let port = d.uri.port_u16().unwrap_or(443);
        let mut parts = d.uri.clone().into_parts();
        parts.authority = Some(
            format!("{}:{port}", self.server_name)
                .parse()
                .map_err(|_| ureq::Error::BadUri(format!("tls-server-name {:?}", self.server_name)))?,
        );
        let uri = ureq::http::Uri::from_parts(parts)
            .map_err(|_| ureq::Error::BadUri(format!("tls-server-name {:?}", self.server_name)))?;
        let details = ConnectionDetails {
            uri: &uri,
            addrs: d.addrs.clone(),
            config: d.config,
            request_level: d.request_level,
            resolver: d.resolver,
            now: d.now,
            timeout: d.timeout,
            current_time: d.current_time.clone(),
            run_connector: d.run_connector.clone(),
            register_shutdown: d.register_shutdown.clone(),
        };
        // TCP is already connected to the real address; only the TLS name changes.
        self.inner.connect(&details, chained)
    }
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::*;

    fn ca_pem(name: &str) -> String {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&rcgen::KeyPair::generate().unwrap()).unwrap().pem()
    }

    #[test]
    fn a_ca_file_is_replaced_only_by_different_readable_certificates() {
        let dir = std::env::temp_dir().join(format!("kw-cafile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ca.pem");
        let first = ca_pem("kubernetes");
        std::fs::write(&path, &first).unwrap();
        let file = CaFile::new(path.clone(), "test".into(), parse_ca_bundle(first.as_bytes()).unwrap());
        let used = Arc::clone(&file.roots.read());
        assert!(!file.reload(&used), "unchanged: no retry");
        assert!(Arc::ptr_eq(&file.roots.read(), &used));
        // Half a rotation: an empty or missing file keeps the CA in use.
        std::fs::write(&path, "").unwrap();
        assert!(!file.reload(&used));
        std::fs::remove_file(&path).unwrap();
        assert!(!file.reload(&used));
        assert!(Arc::ptr_eq(&file.roots.read(), &used));
        // A new CA of the same name.
        std::fs::write(&path, ca_pem("kubernetes")).unwrap();
        assert!(file.reload(&used));
        let now = Arc::clone(&file.roots.read());
        assert!(!Arc::ptr_eq(&now, &used));
        // Another request that used the old CA retries with the new one without reading.
        std::fs::remove_file(&path).unwrap();
        assert!(file.reload(&used));
        assert!(Arc::ptr_eq(&file.roots.read(), &now));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn only_a_ca_file_is_read_again() {
        let certs = Arc::new(parse_ca_bundle(ca_pem("x").as_bytes()).unwrap());
        let inline = TlsSettings { roots: Some(CaRoots::Inline(Arc::clone(&certs))), ..TlsSettings::default() };
        assert!(!inline.reload_ca(&Some(certs)));
        assert!(!TlsSettings::default().reload_ca(&None));
    }
}
