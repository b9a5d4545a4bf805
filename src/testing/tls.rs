//! TLS material for the fake: a generated CA, a server certificate for `127.0.0.1` and
//! `localhost`, client certificates on demand, and the rustls server configuration.

use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;

/// The CA, the server configuration and the client certificates issued so far.
pub(crate) struct TlsMaterial {
    /// The CA certificate (PEM).
    pub ca_pem: String,
    /// The rustls server configuration.
    pub config: Arc<rustls::ServerConfig>,
    ca_params: CertificateParams,
    ca_key: KeyPair,
    /// `(certificate DER, common name)` of issued client certificates.
    issued: Mutex<Vec<(Vec<u8>, String)>>,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial").field("ca_key", &"<redacted>").finish_non_exhaustive()
    }
}

fn err(e: impl std::fmt::Display) -> String {
    format!("generate fake api server tls material: {e}")
}

/// ring's provider, the one ureq's own rustls configuration uses. rustls 0.23.48 deprecated it
/// because ring has no post-quantum key exchange; the fake server serves tests on loopback, and it
/// must speak what the client speaks, so it keeps ring (a build without the allowance would warn
/// in every user's build: scripts/fresh-dependency.sh denies warnings).
#[allow(deprecated)]
fn ring_provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

impl TlsMaterial {
    /// Generates a CA and a server certificate and builds the server configuration.
    pub(crate) fn generate(client_ca_required: bool) -> Result<TlsMaterial, String> {
        let provider = Arc::new(ring_provider());
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "kube-watcher fake api server CA");
        ca_params.distinguished_name = dn;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let ca_key = KeyPair::generate().map_err(err)?;
        let ca_cert = ca_params.self_signed(&ca_key).map_err(err)?;

        let mut server_params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).map_err(err)?;
        server_params.distinguished_name.push(DnType::CommonName, "kube-apiserver");
        server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_key = KeyPair::generate().map_err(err)?;
        let issuer = Issuer::from_params(&ca_params, &ca_key);
        let server_cert = server_params.signed_by(&server_key, &issuer).map_err(err)?;

        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca_cert.der().clone()).map_err(err)?;
        let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
        let verifier =
            if client_ca_required { builder.build() } else { builder.allow_unauthenticated().build() }.map_err(err)?;
        let chain = vec![server_cert.der().clone(), ca_cert.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(err)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .map_err(err)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsMaterial {
            ca_pem: ca_cert.pem(),
            config: Arc::new(config),
            ca_params,
            ca_key,
            issued: Mutex::new(Vec::new()),
        })
    }

    /// Mints a client certificate (CN = user, O = groups) and its key, both PEM.
    pub(crate) fn issue_client_cert(&self, common_name: &str, groups: &[&str]) -> Result<(String, String), String> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        params.distinguished_name.push(DnType::CommonName, common_name);
        for g in groups {
            params.distinguished_name.push(DnType::OrganizationName, *g);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().map_err(err)?;
        let issuer = Issuer::from_params(&self.ca_params, &self.ca_key);
        let cert = params.signed_by(&key, &issuer).map_err(err)?;
        self.issued.lock().unwrap_or_else(|e| e.into_inner()).push((cert.der().to_vec(), common_name.to_string()));
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// The common name of a client certificate this CA issued (the handshake verified it).
    pub(crate) fn user_for_cert(&self, der: &[u8]) -> Option<String> {
        let issued = self.issued.lock().unwrap_or_else(|e| e.into_inner());
        issued.iter().find(|(d, _)| d == der).map(|(_, cn)| cn.clone())
    }
}
