//! EndpointGuard: decides whether a URL taken from a capability document may be dialed.
//!
//! Every URL a provider publishes (MCP endpoints, knowledge sources, skill bodies) is checked at
//! the dial site: http(s) only, no userinfo, the host matched against an operator's allow-list,
//! and every address the connection could reach checked — IP literals as the addresses they
//! are (the URL parser reads `2130706433`, `0x7f.0.0.1` and `127.1` as 127.0.0.1), names
//! through [`GuardedResolver`], whose checked answers are the only addresses the client dials.
//! Link-local and cloud metadata addresses are refused whatever the allow-list says.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use thiserror::Error;

/// An allow-list entry that cannot be read.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("host pattern {pattern:?}: {reason} (expected `host`, `*.suffix` or either with `:port`)")]
pub struct PatternError {
    /// The entry as given.
    pub pattern: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Which hosts an entry admits.
#[derive(Clone, Debug, PartialEq, Eq)]
enum HostMatch {
    /// One host name, lower-case.
    Name(String),
    /// Any host strictly below this suffix (stored with its leading dot).
    Suffix(String),
    /// One address, however the URL spells it.
    Ip(IpAddr),
}

/// One allow-list entry: `host`, `*.suffix` or an IP, each with an optional `:port`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPattern {
    host: HostMatch,
    port: Option<u16>,
}

impl HostPattern {
    /// Reads an entry such as `mcp.example.com`, `*.gateway.example:8443`, `127.0.0.1:7810`
    /// or `[::1]:7810`.
    pub fn parse(pattern: &str) -> Result<Self, PatternError> {
        let error = |reason| PatternError {
            pattern: pattern.to_owned(),
            reason,
        };
        let trimmed = pattern.trim();
        if trimmed.is_empty() {
            return Err(error("empty"));
        }
        if trimmed.contains("://") || trimmed.contains('/') || trimmed.contains('@') {
            return Err(error("a host, not a URL"));
        }
        // Let the URL parser split host and port, so the pattern reads exactly as a URL's
        // authority would (IPv6 brackets, IPv4 spellings, case).
        let wildcard = trimmed.strip_prefix("*.");
        let authority = match wildcard {
            Some(rest) => format!("wildcard.{rest}"),
            None => trimmed.to_owned(),
        };
        let url = Url::parse(&format!("http://{authority}/")).map_err(|_| error("not a host"))?;
        let port = url.port();
        if authority.ends_with(':') {
            return Err(error("empty port"));
        }
        let host = match url.host() {
            Some(url::Host::Domain(domain)) => match wildcard {
                Some(_) => {
                    let suffix = domain
                        .strip_prefix("wildcard")
                        .filter(|s| s.len() > 1 && !s.ends_with('.'))
                        .ok_or_else(|| error("a wildcard must be followed by a domain"))?;
                    HostMatch::Suffix(suffix.to_owned())
                }
                None => HostMatch::Name(domain.to_owned()),
            },
            Some(url::Host::Ipv4(ip)) if wildcard.is_none() => HostMatch::Ip(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) if wildcard.is_none() => HostMatch::Ip(canonical(ip.into())),
            Some(_) => return Err(error("a wildcard must be followed by a domain")),
            None => return Err(error("not a host")),
        };
        Ok(Self { host, port })
    }

    fn admits(&self, host: &url::Host<&str>, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        match (&self.host, host) {
            (HostMatch::Name(name), url::Host::Domain(domain)) => name == domain,
            (HostMatch::Suffix(suffix), url::Host::Domain(domain)) => {
                domain.len() > suffix.len() && domain.ends_with(suffix.as_str())
            }
            (HostMatch::Ip(allowed), url::Host::Ipv4(ip)) => *allowed == IpAddr::V4(*ip),
            (HostMatch::Ip(allowed), url::Host::Ipv6(ip)) => *allowed == canonical((*ip).into()),
            _ => false,
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostMatch::Name(name) => write!(f, "{name}")?,
            HostMatch::Suffix(suffix) => write!(f, "*{suffix}")?,
            HostMatch::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]")?,
            HostMatch::Ip(ip) => write!(f, "{ip}")?,
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

/// Why an endpoint was refused.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("endpoint {url} was not dialed: {reason}")]
pub struct Refusal {
    /// The URL as the document gave it.
    pub url: String,
    /// What the guard found.
    pub reason: String,
}

/// A URL the guard accepted, with what the dial needs.
#[derive(Clone, Debug)]
pub struct Checked {
    /// The parsed URL.
    pub url: Url,
}

/// The allow-list for one kind of dial (MCP endpoints, or knowledge and skill fetches).
#[derive(Clone, Debug, Default)]
pub struct EndpointGuard {
    patterns: Arc<[HostPattern]>,
}

impl EndpointGuard {
    /// A guard admitting the given entries; an empty list admits nothing.
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Result<Self, PatternError> {
        let patterns = patterns
            .iter()
            .map(|p| HostPattern::parse(p.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            patterns: patterns.into(),
        })
    }

    /// Reads a comma-separated list, as the environment variables carry it.
    pub fn from_list(list: &str) -> Result<Self, PatternError> {
        let entries: Vec<&str> = list.split(',').filter(|e| !e.trim().is_empty()).collect();
        Self::new(&entries)
    }

    /// The entries, for logs and the inspection endpoint.
    pub fn patterns(&self) -> impl Iterator<Item = &HostPattern> {
        self.patterns.iter()
    }

    /// Checks everything about `url` that can be known without resolving it.
    pub fn check(&self, url: &str) -> Result<Checked, Refusal> {
        let refuse = |reason: String| Refusal {
            url: url.to_owned(),
            reason,
        };
        let parsed = Url::parse(url).map_err(|e| refuse(format!("not a URL ({e})")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(refuse(format!(
                "scheme {:?} is not allowed (only http and https)",
                parsed.scheme()
            )));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(refuse("credentials in the URL are not allowed".into()));
        }
        let host = parsed
            .host()
            .ok_or_else(|| refuse("the URL has no host".into()))?;
        let port = parsed
            .port_or_known_default()
            .ok_or_else(|| refuse("the URL has no port".into()))?;
        // An IP literal is the address it names, whatever its spelling.
        let literal = match host {
            url::Host::Ipv4(ip) => Some(IpAddr::V4(ip)),
            url::Host::Ipv6(ip) => Some(canonical(ip.into())),
            url::Host::Domain(_) => None,
        };
        if let Some(ip) = literal
            && let Some(why) = always_refused(ip)
        {
            return Err(refuse(format!("address {ip} is {why}")));
        }
        if !self.patterns.iter().any(|p| p.admits(&host, port)) {
            let shown = match literal {
                Some(ip) => format!("address {ip} (from host {host}) port {port}"),
                None => format!("host {host} port {port}"),
            };
            return Err(refuse(format!(
                "{shown} is not in the allow-list ({})",
                self.describe()
            )));
        }
        Ok(Checked { url: parsed })
    }

    fn describe(&self) -> String {
        if self.patterns.is_empty() {
            return "empty".into();
        }
        self.patterns
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// IPv4-mapped IPv6 addresses are the IPv4 addresses they carry.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// Addresses no allow-list can open, with the reason.
pub fn always_refused(ip: IpAddr) -> Option<&'static str> {
    // Cloud instance metadata services outside the link-local ranges.
    const METADATA_V4: [Ipv4Addr; 2] = [
        Ipv4Addr::new(100, 100, 100, 200), // Alibaba Cloud
        Ipv4Addr::new(192, 0, 0, 192),     // Oracle Cloud
    ];
    const METADATA_V6: [Ipv6Addr; 1] = [Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)]; // AWS
    match canonical(ip) {
        IpAddr::V4(v4) if v4.is_link_local() => Some("link-local (cloud metadata lives there)"),
        IpAddr::V4(v4) if METADATA_V4.contains(&v4) => Some("a cloud metadata address"),
        IpAddr::V4(v4) if v4.is_unspecified() || v4.is_broadcast() || v4.is_multicast() => {
            Some("not a unicast address")
        }
        IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80 => Some("link-local"),
        IpAddr::V6(v6) if METADATA_V6.contains(&v6) => Some("a cloud metadata address"),
        IpAddr::V6(v6) if v6.is_unspecified() || v6.is_multicast() => Some("not a unicast address"),
        _ => None,
    }
}

/// A resolved name whose answers included a refused address.
#[derive(Debug, Error)]
#[error("host {host} resolves to {ip}, which is {reason}")]
pub struct AddressRefused {
    /// The name looked up.
    pub host: String,
    /// The refused answer.
    pub ip: IpAddr,
    /// Why it is refused.
    pub reason: &'static str,
}

/// The DNS resolver of every guarded client: resolves once, checks **every** answer, and hands
/// the client only those answers, so the address checked is the address dialed (no second
/// lookup a rebinding server could answer differently).
#[derive(Clone, Debug, Default)]
pub struct GuardedResolver;

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let answers: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if answers.is_empty() {
                return Err(format!("host {host} has no addresses").into());
            }
            // One bad answer refuses the name: a rebinding server mixes good and bad answers.
            for answer in &answers {
                if let Some(reason) = always_refused(answer.ip()) {
                    return Err(Box::new(AddressRefused {
                        host,
                        ip: answer.ip(),
                        reason,
                    })
                        as Box<dyn std::error::Error + Send + Sync>);
                }
            }
            let addrs: Addrs = Box::new(answers.into_iter());
            Ok(addrs)
        })
    }
}

/// Finds an [`AddressRefused`] in an error's source chain (reqwest wraps resolver errors).
pub fn address_refused<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a AddressRefused> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(refused) = e.downcast_ref::<AddressRefused>() {
            return Some(refused);
        }
        current = e.source();
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn guard(patterns: &[&str]) -> EndpointGuard {
        EndpointGuard::new(patterns).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn exact_hosts_and_ports_should_match_exactly() {
        let g = guard(&["mcp.example.com", "127.0.0.1:7810"]);
        assert!(g.check("https://mcp.example.com/mcp").is_ok());
        assert!(g.check("http://MCP.Example.com:8080/mcp").is_ok());
        assert!(g.check("http://127.0.0.1:7810/mcp").is_ok());
        let refused = g.check("http://127.0.0.1:7811/mcp").unwrap_err();
        assert_eq!(
            refused.to_string(),
            "endpoint http://127.0.0.1:7811/mcp was not dialed: address 127.0.0.1 (from host \
             127.0.0.1) port 7811 is not in the allow-list (mcp.example.com, 127.0.0.1:7810)"
        );
        assert!(g.check("http://evil.mcp.example.com/").is_err());
    }

    #[test]
    fn a_wildcard_should_match_only_strictly_below_its_suffix() {
        let g = guard(&["*.gw.example:8443"]);
        assert!(g.check("https://a.gw.example:8443/mcp").is_ok());
        assert!(g.check("https://a.b.gw.example:8443/mcp").is_ok());
        assert!(g.check("https://gw.example:8443/mcp").is_err());
        assert!(g.check("https://evilgw.example:8443/mcp").is_err());
        assert!(g.check("https://a.gw.example/mcp").is_err());
    }

    #[test]
    fn ip_literals_should_be_the_addresses_they_spell() {
        let g = guard(&["localhost"]);
        for url in [
            "http://2130706433/",
            "http://0x7f.0.0.1/",
            "http://0177.0.0.1/",
            "http://127.1/",
            "http://[::ffff:127.0.0.1]/",
        ] {
            let refused = g.check(url).unwrap_err();
            assert!(
                refused.reason.starts_with("address 127.0.0.1 "),
                "{url}: {refused}"
            );
        }
        // Allowing the address allows it in any spelling.
        let g = guard(&["127.0.0.1:7810"]);
        assert!(g.check("http://2130706433:7810/mcp").is_ok());
        assert!(g.check("http://[::ffff:7f00:1]:7810/mcp").is_ok());
    }

    #[test]
    fn metadata_and_link_local_should_be_refused_even_when_listed() {
        let g = guard(&[
            "169.254.169.254",
            "[fe80::1]",
            "100.100.100.200",
            "[fd00:ec2::254]",
        ]);
        for (url, why) in [
            ("http://169.254.169.254/latest/meta-data", "link-local"),
            ("http://[::ffff:169.254.169.254]/", "link-local"),
            ("http://0xa9fea9fe/", "link-local"),
            ("http://[fe80::1]/", "link-local"),
            ("http://100.100.100.200/", "metadata"),
            ("http://[fd00:ec2::254]/", "metadata"),
            ("http://0.0.0.0/", "unicast"),
        ] {
            let refused = g.check(url).unwrap_err();
            assert!(refused.reason.contains(why), "{url}: {refused}");
        }
    }

    #[test]
    fn schemes_and_userinfo_should_be_refused() {
        let g = guard(&["mcp.example.com"]);
        for (url, why) in [
            ("file:///etc/passwd", "scheme"),
            ("ftp://mcp.example.com/", "scheme"),
            ("http://user:pw@mcp.example.com/", "credentials"),
            ("http://user@mcp.example.com/", "credentials"),
            ("not a url", "not a URL"),
        ] {
            let refused = g.check(url).unwrap_err();
            assert!(refused.reason.contains(why), "{url}: {refused}");
        }
    }

    #[test]
    fn an_empty_allow_list_should_admit_nothing() {
        let refused = EndpointGuard::default()
            .check("http://mcp.example.com/")
            .unwrap_err();
        assert!(refused.reason.ends_with("not in the allow-list (empty)"));
    }

    #[test]
    fn bad_patterns_should_be_reported() {
        for pattern in ["", "http://x/", "*.", "*.127.0.0.1", "host:", "a@b"] {
            assert!(HostPattern::parse(pattern).is_err(), "{pattern:?}");
        }
        assert_eq!(
            EndpointGuard::from_list("a.example, *.b.example:8443,[::1]:9")
                .unwrap_or_else(|e| panic!("{e}"))
                .patterns()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["a.example", "*.b.example:8443", "[::1]:9"]
        );
    }

    #[tokio::test]
    async fn the_resolver_should_refuse_a_name_with_any_bad_answer() {
        let name: Name = "localhost".parse().unwrap_or_else(|_| panic!("name"));
        let addrs: Vec<SocketAddr> = GuardedResolver
            .resolve(name)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .collect();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");
    }
}
