//! Which proxy to use for a server: a cluster's `proxy-url`, else `HTTPS_PROXY`/`HTTP_PROXY`
//! with `NO_PROXY`, following Go's `net/http/httpproxy` (the rules kubectl applies).

use std::fmt;
use std::net::IpAddr;

use super::Env;

/// The proxy chosen for one server, and where it came from (for messages and Debug).
#[derive(Clone)]
pub(crate) struct ProxyChoice {
    pub(crate) proxy: ureq::Proxy,
    /// `proxy-url` or the environment variable it came from.
    pub(crate) source: String,
}

impl fmt::Debug for ProxyChoice {
    // ureq's Debug prints the URI without credentials; we add only where it came from.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyChoice")
            .field("host", &self.proxy.host())
            .field("port", &self.proxy.port())
            .field("protocol", &self.proxy.protocol())
            .field("source", &self.source)
            .finish()
    }
}

/// A kubeconfig `proxy-url`: `http`, `https` or `socks5` only. It applies to every host,
/// loopback included, and ignores `NO_PROXY`.
pub(crate) fn from_proxy_url(url: &str) -> Result<ProxyChoice, String> {
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    let for_ureq = match scheme.as_deref() {
        Some("http" | "https") => url.to_owned(),
        // Go's SOCKS5 dialer sends host names to the proxy: ureq calls that socks5h.
        Some("socks5") => format!("socks5h://{}", &url["socks5://".len()..]),
        Some(other) => return Err(format!("scheme {other:?} is not supported; use http, https or socks5")),
        None => return Err("must start with http://, https:// or socks5://".to_owned()),
    };
    let proxy = ureq::Proxy::new(&for_ureq).map_err(|e| format!("invalid proxy URL: {e}"))?;
    Ok(ProxyChoice { proxy, source: "proxy-url".to_owned() })
}

/// The environment's proxy for `server` (an `http(s)://host[:port]/…` URL), or `None`.
///
/// `HTTPS_PROXY` for https servers, `HTTP_PROXY` for http ones (upper case first); `ALL_PROXY`
/// is ignored; loopback servers are never proxied; `NO_PROXY` may exclude the host.
pub(crate) fn from_env(server: &str, env: &Env) -> Result<Option<ProxyChoice>, String> {
    let uri: ureq::http::Uri = server.parse().map_err(|e| format!("invalid server URL: {e}"))?;
    let https = uri.scheme_str() == Some("https");
    let names = if https { ["HTTPS_PROXY", "https_proxy"] } else { ["HTTP_PROXY", "http_proxy"] };
    let Some((name, value)) = names.iter().find_map(|n| env.var(n).map(|v| (*n, v))) else {
        return Ok(None);
    };
    let host = uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    if is_loopback(&host) {
        return Ok(None);
    }
    let no_proxy = env.var("NO_PROXY").or_else(|| env.var("no_proxy")).unwrap_or_default();
    if no_proxy_matches(&no_proxy, &host, port) {
        return Ok(None);
    }
    // Go accepts a bare `host:port` and means http.
    let url = if value.contains("://") { value } else { format!("http://{value}") };
    let mut choice = from_proxy_url(&url).map_err(|e| format!("{name}: {e}"))?;
    choice.source = name.to_owned();
    Ok(Some(choice))
}

fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Whether a `NO_PROXY` list excludes `host:port` (Go `httpproxy.useProxy`).
fn no_proxy_matches(list: &str, host: &str, port: u16) -> bool {
    let ip = host.parse::<IpAddr>().ok();
    for entry in list.split(',') {
        let entry = entry.trim().to_ascii_lowercase();
        if entry.is_empty() {
            continue;
        }
        if entry == "*" {
            return true;
        }
        if let Some((net, bits)) = entry.split_once('/') {
            if let (Some(ip), Ok(net), Ok(bits)) = (ip, net.parse::<IpAddr>(), bits.parse::<u8>())
                && in_cidr(ip, net, bits)
            {
                return true;
            }
            continue;
        }
        let (entry_host, entry_port) = split_host_port(&entry);
        if entry_port.is_some_and(|p| p != port) {
            continue;
        }
        if let Ok(entry_ip) = entry_host.parse::<IpAddr>() {
            if ip == Some(entry_ip) {
                return true;
            }
            continue;
        }
        let entry_host = entry_host.strip_prefix('*').unwrap_or(entry_host);
        match entry_host.strip_prefix('.') {
            // `.example.com` matches subdomains only.
            Some(_) => {
                if host.ends_with(entry_host) {
                    return true;
                }
            }
            // `example.com` matches the host itself and its subdomains.
            None => {
                if host == entry_host || host.ends_with(&format!(".{entry_host}")) {
                    return true;
                }
            }
        }
    }
    false
}

fn split_host_port(entry: &str) -> (&str, Option<u16>) {
    if let Some(rest) = entry.strip_prefix('[') {
        if let Some((h, p)) = rest.split_once("]:") {
            return (h, p.parse().ok());
        }
        return (rest.trim_end_matches(']'), None);
    }
    match entry.rsplit_once(':') {
        // More than one colon: a bare IPv6 address.
        Some((h, p)) if !h.contains(':') => (h, p.parse().ok()),
        _ => (entry, None),
    }
}

fn in_cidr(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(ip), IpAddr::V4(net)) if bits <= 32 => {
            let mask = if bits == 0 { 0 } else { u32::MAX << (32 - u32::from(bits)) };
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) if bits <= 128 => {
            let mask = if bits == 0 { 0 } else { u128::MAX << (128 - u32::from(bits)) };
            u128::from(ip) & mask == u128::from(net) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn env(vars: &[(&str, &str)]) -> Env {
        Env::fixed(vars, Path::new("/nonexistent"))
    }

    fn chosen(server: &str, vars: &[(&str, &str)]) -> Option<String> {
        from_env(server, &env(vars)).unwrap().map(|c| format!("{}:{}", c.proxy.host(), c.proxy.port()))
    }

    #[test]
    fn https_servers_use_https_proxy_and_ignore_http_proxy() {
        assert_eq!(chosen("https://k.example", &[("HTTP_PROXY", "http://p:3128")]), None);
        assert_eq!(chosen("https://k.example", &[("HTTPS_PROXY", "http://p:3128")]).as_deref(), Some("p:3128"));
        assert_eq!(chosen("http://k.example", &[("HTTP_PROXY", "p2:8080")]).as_deref(), Some("p2:8080"));
        assert_eq!(chosen("https://k.example", &[("https_proxy", "http://low:1")]).as_deref(), Some("low:1"));
        assert_eq!(chosen("https://k.example", &[("ALL_PROXY", "http://p:1")]), None);
    }

    #[test]
    fn loopback_servers_are_never_proxied_from_the_environment() {
        let vars = [("HTTPS_PROXY", "http://p:3128")];
        assert_eq!(chosen("https://127.0.0.1:6443", &vars), None);
        assert_eq!(chosen("https://localhost:6443", &vars), None);
        assert_eq!(chosen("https://[::1]:6443", &vars), None);
    }

    #[test]
    fn no_proxy_entries_follow_go_semantics() {
        assert!(no_proxy_matches("*", "a.b", 443));
        assert!(no_proxy_matches("example.com", "example.com", 443));
        assert!(no_proxy_matches("example.com", "k.example.com", 443));
        assert!(!no_proxy_matches("example.com", "notexample.com", 443));
        assert!(no_proxy_matches(".example.com", "k.example.com", 443));
        assert!(!no_proxy_matches(".example.com", "example.com", 443));
        assert!(no_proxy_matches("*.example.com", "k.example.com", 443));
        assert!(no_proxy_matches("k.example.com:6443", "k.example.com", 6443));
        assert!(!no_proxy_matches("k.example.com:6443", "k.example.com", 443));
        assert!(no_proxy_matches("10.0.0.0/8", "10.1.2.3", 443));
        assert!(!no_proxy_matches("10.0.0.0/8", "11.1.2.3", 443));
        assert!(no_proxy_matches("fd00::/8", "fd00::1", 443));
        assert!(no_proxy_matches(" 198.51.100.7 ", "198.51.100.7", 443));
        assert!(!no_proxy_matches("", "a", 443));
    }

    #[test]
    fn no_proxy_excludes_a_server_from_the_environment_proxy() {
        let vars = [("HTTPS_PROXY", "http://p:3128"), ("NO_PROXY", ".corp.example,10.0.0.0/8")];
        assert_eq!(chosen("https://api.corp.example", &vars), None);
        assert_eq!(chosen("https://10.9.8.7:6443", &vars), None);
        assert!(chosen("https://api.other.example", &vars).is_some());
    }

    #[test]
    fn proxy_url_accepts_http_https_and_socks5_only() {
        assert!(from_proxy_url("http://p:3128").is_ok());
        assert!(from_proxy_url("https://p:3128").is_ok());
        assert!(from_proxy_url("socks5://p:1080").is_ok());
        let e = from_proxy_url("ftp://p:21").unwrap_err();
        assert!(e.contains("\"ftp\""), "{e}");
        assert!(from_proxy_url("p:3128").is_err());
    }

    #[test]
    fn proxy_passwords_stay_out_of_debug() {
        let c = from_proxy_url("http://user:pa55word@p:3128").unwrap();
        assert!(!format!("{c:?}").contains("pa55word"));
    }
}
