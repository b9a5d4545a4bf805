//! TLS settings: CA bundles, client certificates (validated when loaded), insecure mode and the
//! `tls-server-name` connector.

use std::fmt;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig};
use ureq::unversioned::transport::{
    ConnectProxyConnector, ConnectionDetails, Connector, RustlsConnector, SocksConnector, TcpConnector, Transport,
};

/// How to trust the server and which certificate to present. Only used for `https://` servers.
#[derive(Clone, Default)]
pub(crate) struct TlsSettings {
    /// Trusted CAs; `None` means the bundled Mozilla roots (ureq's `RootCerts::WebPki`).
    pub(crate) roots: Option<Arc<Vec<Certificate<'static>>>>,
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
            .field("roots", &self.roots.as_ref().map(|r| r.len()))
            .field("insecure", &self.insecure)
            .field("client_cert", &self.client_cert.as_ref().map(|_| "<redacted>"))
            .field("client_cert_source", &self.client_cert_source)
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl TlsSettings {
    /// The ureq TLS configuration (rustls, verification of IP SANs included).
    pub(crate) fn to_ureq(&self) -> TlsConfig {
        let roots = match &self.roots {
            Some(certs) => RootCerts::Specific(Arc::clone(certs)),
            None => RootCerts::WebPki,
        };
        TlsConfig::builder()
            .root_certs(roots)
            .client_cert(self.client_cert.clone())
            .disable_verification(self.insecure)
            .build()
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
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_client_auth_cert(der_chain, key_der)
        .map(|_| ())
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => "the private key does not match the certificate".to_owned(),
            other => format!("unusable certificate/key pair: {other}"),
        })
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
