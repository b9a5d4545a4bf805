//! Connection failures explained: which host and port could not be reached, where that address
//! came from (a kubeconfig's cluster entry, the in-cluster environment, a proxy variable), and,
//! when the server refuses our client certificate, which fields the certificate came from.

use std::error::Error as _;

use super::Connection;

/// What kind of failure a ureq error is, where that can be told.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The host name did not resolve.
    Resolve,
    /// The host answered with a refusal (nothing listens on the port).
    Refused,
    /// Resolving or connecting took too long.
    Timeout,
    /// The proxy could not open the tunnel to the server.
    Tunnel,
    /// The server ended the TLS handshake with this alert about our (missing) certificate.
    CertificateRefused(String),
    /// The server's certificate is not signed by a CA we trust (or by one that has the name of a
    /// trusted CA but another key: a rotated CA).
    Untrusted,
}

impl Failure {
    /// Classifies `e`; `None` for failures after the connection was made (a reset, a bad body,
    /// a read timeout).
    ///
    /// A timeout counts only when ureq says it was the connect or resolve phase. ureq 3.5 reports
    /// every timeout its transports see, its own deadlines and an OS `ETIMEDOUT` alike, as
    /// `Error::Timeout` naming the deadline that ran out. A bare I/O error of kind `TimedOut`
    /// names no phase (after connecting, a dead peer gives one), so it is not taken for a connect
    /// timeout.
    pub(crate) fn of(e: &ureq::Error) -> Option<Failure> {
        if let Some(r) = rustls_error(e) {
            return certificate_alert(r).or_else(|| untrusted(r));
        }
        match e {
            ureq::Error::HostNotFound => Some(Failure::Resolve),
            ureq::Error::Timeout(ureq::Timeout::Connect | ureq::Timeout::Resolve) => Some(Failure::Timeout),
            ureq::Error::ConnectProxyFailed(_) => Some(Failure::Tunnel),
            ureq::Error::Io(io) => match io.kind() {
                std::io::ErrorKind::ConnectionRefused => Some(Failure::Refused),
                // std's resolver reports through getaddrinfo's text, with no kind of its own.
                _ if io.to_string().contains("failed to lookup address") => Some(Failure::Resolve),
                _ => None,
            },
            _ => None,
        }
    }
}

/// The rustls error inside `e`: ureq's own variant, or an I/O error wrapping one (the handshake
/// runs over an I/O adapter).
fn rustls_error(e: &ureq::Error) -> Option<&rustls::Error> {
    match e {
        ureq::Error::Rustls(r) => Some(r),
        ureq::Error::Io(io) => io
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            .or_else(|| io.source().and_then(|s| s.downcast_ref::<rustls::Error>())),
        _ => None,
    }
}

/// Our verification of the server's certificate failed for want of a trusted issuer: no trusted
/// CA has the issuer's name (`UnknownIssuer`), or one has it but its key did not sign the
/// certificate (`BadSignature`: a CA rotated to a new key under the same name, as kubeadm's
/// `kubernetes` CA does).
fn untrusted(e: &rustls::Error) -> Option<Failure> {
    use rustls::CertificateError as C;
    match e {
        rustls::Error::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => Some(Failure::Untrusted),
        _ => None,
    }
}

/// A TLS alert the server sends about the client's certificate.
fn certificate_alert(e: &rustls::Error) -> Option<Failure> {
    use rustls::AlertDescription as A;
    match e {
        rustls::Error::AlertReceived(
            alert @ (A::BadCertificate
            | A::UnsupportedCertificate
            | A::CertificateRevoked
            | A::CertificateExpired
            | A::CertificateUnknown
            | A::UnknownCA
            | A::AccessDenied
            | A::CertificateRequired
            // rustls servers answer a client certificate whose signature does not verify so.
            | A::DecryptError),
        ) => Some(Failure::CertificateRefused(format!("{alert:?}"))),
        _ => None,
    }
}

impl Connection {
    /// `host:port` of the server, as TCP connects to it.
    fn server_address(&self) -> String {
        let uri = self.server.parse::<ureq::http::Uri>().ok();
        let host = uri.as_ref().and_then(|u| u.host()).unwrap_or_default().to_owned();
        let port = uri.as_ref().and_then(|u| u.port_u16()).unwrap_or(if self.is_https() { 443 } else { 80 });
        format!("{host}:{port}")
    }

    /// What to say before ureq's own message for a failure to reach the server: the address and
    /// where it came from, or where a refused client certificate came from.
    pub(crate) fn explain(&self, failure: &Failure) -> String {
        let server = format!("{} (from {})", self.server_address(), self.server_source);
        let via =
            self.proxy.as_ref().map(|p| format!("proxy {}:{} (from {})", p.proxy.host(), p.proxy.port(), p.source));
        match (failure, via) {
            (Failure::Resolve, Some(proxy)) => format!("cannot resolve the host of {proxy}"),
            (Failure::Resolve, None) => format!("cannot resolve the host of {server}"),
            (Failure::Refused, Some(proxy)) => format!("connection to {proxy} refused"),
            (Failure::Refused, None) => format!("connection to {server} refused"),
            (Failure::Timeout, Some(proxy)) => format!("connecting to {proxy} timed out"),
            (Failure::Timeout, None) => format!("connecting to {server} timed out"),
            (Failure::Tunnel, Some(proxy)) => format!("{proxy} could not connect to {server}"),
            (Failure::Tunnel, None) => format!("the proxy could not connect to {server}"),
            (Failure::Untrusted, _) => {
                format!("the certificate of {server} is not signed by {}", self.tls.describe_ca())
            }
            (Failure::CertificateRefused(alert), _) => match self.client_cert_source() {
                Some(source) => format!(
                    "the server {} refused our client certificate (TLS alert {alert}); it came from {source}",
                    self.server_address()
                ),
                None if alert == "DecryptError" => {
                    format!("the TLS handshake with {server} failed (TLS alert {alert})")
                }
                None => format!(
                    "the server {} asks for a client certificate (TLS alert {alert}), and none is configured",
                    self.server_address()
                ),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Env, proxy};

    #[test]
    fn a_proxy_from_the_environment_is_named_with_its_variable() {
        let env =
            Env::fixed(&[("HTTPS_PROXY", "http://proxy.corp.invalid:3128")], std::path::Path::new("/nonexistent"));
        let mut conn = Connection::from_url("https://kube.example:6443").unwrap();
        conn.proxy = proxy::from_env(&conn.server, &env).unwrap();
        let text = conn.explain(&Failure::Resolve);
        assert_eq!(text, "cannot resolve the host of proxy proxy.corp.invalid:3128 (from HTTPS_PROXY)");
        let text = conn.explain(&Failure::Timeout);
        assert!(text.starts_with("connecting to proxy proxy.corp.invalid:3128 (from HTTPS_PROXY) timed out"), "{text}");
        let text = conn.explain(&Failure::Tunnel);
        assert!(
            text.ends_with("could not connect to kube.example:6443 (from the URL given to Client::from_url)"),
            "{text}"
        );
    }

    #[test]
    fn without_a_proxy_the_server_address_and_its_source_are_named() {
        let mut conn = Connection::from_url("https://kube.example").unwrap();
        conn.server_source = "cluster \"prod\", kubeconfig /k: clusters[2].cluster.server".into();
        assert_eq!(
            conn.explain(&Failure::Refused),
            "connection to kube.example:443 (from cluster \"prod\", kubeconfig /k: clusters[2].cluster.server) refused"
        );
        assert_eq!(
            conn.explain(&Failure::CertificateRefused("UnknownCA".into())),
            "the server kube.example:443 asks for a client certificate (TLS alert UnknownCA), and none is configured"
        );
    }

    #[test]
    fn only_connect_and_resolve_timeouts_are_connection_failures() {
        use ureq::Timeout as T;
        for phase in [T::Connect, T::Resolve] {
            assert_eq!(Failure::of(&ureq::Error::Timeout(phase)), Some(Failure::Timeout), "{phase}");
        }
        for phase in [T::PerRead, T::PerWrite, T::SendRequest, T::RecvResponse, T::RecvBody, T::Global, T::PerCall] {
            assert_eq!(Failure::of(&ureq::Error::Timeout(phase)), None, "{phase}");
        }
    }

    #[test]
    fn io_errors_are_classified_by_kind_and_resolver_text() {
        let refused = ureq::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(Failure::of(&refused), Some(Failure::Refused));
        let dns =
            ureq::Error::Io(std::io::Error::other("failed to lookup address information: Name or service not known"));
        assert_eq!(Failure::of(&dns), Some(Failure::Resolve));
        assert_eq!(Failure::of(&ureq::Error::HostNotFound), Some(Failure::Resolve));
        let reset = ureq::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(Failure::of(&reset), None, "after connecting: not a connection failure");
        let timed_out = ureq::Error::Io(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert_eq!(Failure::of(&timed_out), None, "an I/O timeout does not say it was the connect");
        let alert = ureq::Error::Rustls(rustls::Error::AlertReceived(rustls::AlertDescription::BadCertificate));
        assert_eq!(Failure::of(&alert), Some(Failure::CertificateRefused("BadCertificate".into())));
    }
}
