//! EndpointGuard: decides whether a URL taken from a capability document may be dialed, and
//! which addresses it may reach.
//!
//! Every URL a provider publishes (MCP endpoints, knowledge sources, skill bodies) is checked at
//! the dial site: http(s) only, no userinfo, the host matched against an operator's allow-list,
//! and every address the connection could reach checked — IP literals as the addresses they
//! are (the URL parser reads `2130706433`, `0x7f.0.0.1` and `127.1` as 127.0.0.1), names
//! through [`GuardedResolver`], whose checked answers are the only addresses the client dials.
//!
//! The address policy for names (README, "Security"):
//! - link-local, cloud metadata, unspecified, multicast and broadcast addresses are refused
//!   whatever the allow-list says;
//! - an address covered by an IP or CIDR entry is admitted;
//! - a public address is admitted;
//! - a name listed **exactly** may also resolve to private ranges (an in-cluster service), but
//!   to loopback only when the entry is `localhost` (or a loopback IP/CIDR is listed, above);
//! - a name admitted only by a **wildcard** entry must resolve to public addresses or into an
//!   IP/CIDR entry: a provider who controls `evil.providers.example` must not reach the
//!   assistant pod's own loopback or the cluster's private network through it.
//!
//! One refused answer refuses the name (a rebinding server mixes good and bad answers). The
//! resolver sees names, not ports, so "listed exactly" means an exact entry for the name with
//! any port; the allow-list check before it has already matched the port.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use thiserror::Error;

/// An allow-list entry that cannot be read.
#[derive(Debug, Error, PartialEq, Eq)]
#[error(
    "host pattern {pattern:?}: {reason} (expected `host`, `*.suffix`, an IP, each with an \
     optional `:port`, or a CIDR such as `10.96.0.0/12`)"
)]
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
    /// A range of addresses (any port): IP-literal URLs inside it, and the answers of
    /// admitted names.
    Net(IpNet),
}

/// One allow-list entry: `host`, `*.suffix` or an IP, each with an optional `:port`, or a
/// CIDR range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPattern {
    host: HostMatch,
    port: Option<u16>,
}

impl HostPattern {
    /// Reads an entry such as `mcp.example.com`, `*.gateway.example:8443`, `127.0.0.1:7810`,
    /// `[::1]:7810` or `10.96.0.0/12`.
    pub fn parse(pattern: &str) -> Result<Self, PatternError> {
        let error = |reason| PatternError {
            pattern: pattern.to_owned(),
            reason,
        };
        let trimmed = pattern.trim();
        if trimmed.is_empty() {
            return Err(error("empty"));
        }
        if let Ok(net) = trimmed.parse::<IpNet>() {
            // Host bits are dropped (`10.96.0.1/12` is 10.96.0.0/12), as Kubernetes reads
            // CIDRs; IPv4-mapped IPv6 ranges are not accepted (list the IPv4 range).
            return Ok(Self {
                host: HostMatch::Net(net.trunc()),
                port: None,
            });
        }
        if trimmed.contains("://") || trimmed.contains('/') || trimmed.contains('@') {
            return Err(error("a host, not a URL"));
        }
        // Let the URL parser split host and port, so the pattern reads exactly as a URL's
        // authority would (IPv6 brackets, IPv4 spellings, case).
        let wildcard = trimmed.strip_prefix("*.");
        if wildcard.is_some_and(|rest| rest.parse::<IpAddr>().is_ok()) {
            return Err(error("a wildcard must be followed by a domain"));
        }
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
        let literal = match host {
            url::Host::Ipv4(ip) => Some(IpAddr::V4(*ip)),
            url::Host::Ipv6(ip) => Some(canonical((*ip).into())),
            url::Host::Domain(_) => None,
        };
        match (&self.host, host, literal) {
            (HostMatch::Name(name), url::Host::Domain(domain), _) => name == domain,
            (HostMatch::Suffix(suffix), url::Host::Domain(domain), _) => {
                suffix_admits(suffix, domain)
            }
            (HostMatch::Ip(allowed), _, Some(ip)) => *allowed == ip,
            (HostMatch::Net(net), _, Some(ip)) => net.contains(&ip),
            _ => false,
        }
    }

    /// Whether this entry covers `ip` as a resolved answer (IP and CIDR entries do).
    fn covers(&self, ip: IpAddr) -> bool {
        match &self.host {
            HostMatch::Ip(allowed) => *allowed == ip,
            HostMatch::Net(net) => net.contains(&ip),
            HostMatch::Name(_) | HostMatch::Suffix(_) => false,
        }
    }
}

fn suffix_admits(suffix: &str, domain: &str) -> bool {
    domain.len() > suffix.len() && domain.ends_with(suffix)
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostMatch::Name(name) => write!(f, "{name}")?,
            HostMatch::Suffix(suffix) => write!(f, "*{suffix}")?,
            HostMatch::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]")?,
            HostMatch::Ip(ip) => write!(f, "{ip}")?,
            HostMatch::Net(net) => write!(f, "{net}")?,
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

    /// The resolver that applies this allow-list's address policy to names.
    pub fn resolver(&self) -> GuardedResolver {
        GuardedResolver {
            guard: self.clone(),
        }
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
            && let AddressScope::Refused(why) = AddressScope::of(ip)
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

    /// Checks the answers of a lookup of `host` (a name this guard admitted): every answer
    /// must pass the address policy of the module documentation, or the name is refused.
    pub fn check_answers(&self, host: &str, answers: &[IpAddr]) -> Result<(), AddressRefused> {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let exact = self.patterns.iter().find_map(|p| match &p.host {
            HostMatch::Name(name) if *name == host => Some(name.as_str()),
            _ => None,
        });
        let wildcard = self
            .patterns
            .iter()
            .find(|p| matches!(&p.host, HostMatch::Suffix(suffix) if suffix_admits(suffix, &host)));
        for &answer in answers {
            let ip = canonical(answer);
            let refused = |reason: String| AddressRefused {
                host: host.clone(),
                ip,
                reason,
            };
            let scope = AddressScope::of(ip);
            if let AddressScope::Refused(why) = scope {
                return Err(refused(why.to_owned()));
            }
            if self.patterns.iter().any(|p| p.covers(ip)) || scope == AddressScope::Public {
                continue;
            }
            match (exact, wildcard) {
                (Some("localhost"), _) => {}
                (Some(_), _) if scope == AddressScope::Private => {}
                (Some(name), _) => {
                    return Err(refused(format!(
                        "loopback; the entry {name} admits loopback only when the entry is \
                         `localhost` or a loopback address or CIDR is listed"
                    )));
                }
                (None, Some(entry)) => {
                    let kind = match scope {
                        AddressScope::Loopback => "loopback",
                        _ => "a private address",
                    };
                    return Err(refused(format!(
                        "{kind}; a name admitted by the wildcard entry {entry} must resolve to \
                         public addresses or into an IP or CIDR entry of the allow-list"
                    )));
                }
                (None, None) => {
                    return Err(refused(format!(
                        "not public, and host {host} is not in the allow-list ({})",
                        self.describe()
                    )));
                }
            }
        }
        Ok(())
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

/// Where an address leads, for the address policy.
///
/// Hand-written because the standard library's `is_global` is not stable; the ranges are
/// IANA's special-purpose registries (IPv4 and IPv6), read conservatively: a range that is
/// not plainly global unicast counts as private.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressScope {
    /// Never dialed, whatever the allow-list says (the reason).
    Refused(&'static str),
    /// The host's own loopback (127.0.0.0/8, ::1).
    Loopback,
    /// Private, shared, reserved or documentation ranges: not reachable from the internet.
    Private,
    /// Global unicast.
    Public,
}

impl AddressScope {
    /// The scope of `ip` (IPv4-mapped IPv6 as the IPv4 address it carries).
    pub fn of(ip: IpAddr) -> Self {
        match canonical(ip) {
            IpAddr::V4(v4) => Self::of_v4(v4),
            IpAddr::V6(v6) => Self::of_v6(v6),
        }
    }

    fn of_v4(v4: Ipv4Addr) -> Self {
        // Cloud instance metadata services outside the link-local ranges.
        const METADATA: [Ipv4Addr; 2] = [
            Ipv4Addr::new(100, 100, 100, 200), // Alibaba Cloud
            Ipv4Addr::new(192, 0, 0, 192),     // Oracle Cloud
        ];
        // Not reachable from the internet: RFC 1918, shared address space (RFC 6598), IETF
        // protocol assignments, documentation, 6to4 relay anycast, benchmarking, reserved.
        const PRIVATE: [(Ipv4Addr, u8); 11] = [
            (Ipv4Addr::new(10, 0, 0, 0), 8),
            (Ipv4Addr::new(100, 64, 0, 0), 10),
            (Ipv4Addr::new(172, 16, 0, 0), 12),
            (Ipv4Addr::new(192, 0, 0, 0), 24),
            (Ipv4Addr::new(192, 0, 2, 0), 24),
            (Ipv4Addr::new(192, 88, 99, 0), 24),
            (Ipv4Addr::new(192, 168, 0, 0), 16),
            (Ipv4Addr::new(198, 18, 0, 0), 15),
            (Ipv4Addr::new(198, 51, 100, 0), 24),
            (Ipv4Addr::new(203, 0, 113, 0), 24),
            (Ipv4Addr::new(240, 0, 0, 0), 4),
        ];
        if v4.is_link_local() {
            return Self::Refused("link-local (cloud metadata lives there)");
        }
        if METADATA.contains(&v4) {
            return Self::Refused("a cloud metadata address");
        }
        // 0.0.0.0/8 ("this network"): Linux connects 0.0.0.0 to the host itself.
        if v4.octets()[0] == 0 || v4.is_broadcast() || v4.is_multicast() {
            return Self::Refused("not a unicast address");
        }
        if v4.is_loopback() {
            return Self::Loopback;
        }
        let bits = u32::from(v4);
        let inside = |(net, len): &(Ipv4Addr, u8)| {
            let mask = u32::MAX << (32 - u32::from(*len));
            bits & mask == u32::from(*net)
        };
        if PRIVATE.iter().any(inside) {
            Self::Private
        } else {
            Self::Public
        }
    }

    fn of_v6(v6: Ipv6Addr) -> Self {
        const METADATA: [Ipv6Addr; 1] = [Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)]; // AWS
        let segments = v6.segments();
        if (segments[0] & 0xffc0) == 0xfe80 {
            return Self::Refused("link-local");
        }
        if METADATA.contains(&v6) {
            return Self::Refused("a cloud metadata address");
        }
        if v6.is_unspecified() || v6.is_multicast() {
            return Self::Refused("not a unicast address");
        }
        if v6.is_loopback() {
            return Self::Loopback;
        }
        // NAT64 (64:ff9b::/96) reaches the IPv4 address it carries.
        if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
            let [a, b, c, d] = v6.octets()[12..] else {
                return Self::Private;
            };
            return Self::of_v4(Ipv4Addr::new(a, b, c, d));
        }
        // Global unicast is 2000::/3, less IETF protocol assignments (2001::/23),
        // documentation (2001:db8::/32, 3fff::/20) and 6to4 (2002::/16, which carries an
        // IPv4 address of any kind).
        let global = match segments {
            [0x2001, second, ..] if second < 0x0200 => false,
            [0x2001, 0x0db8, ..] | [0x2002, ..] => false,
            [first, ..] if first & 0xfff0 == 0x3ff0 => false,
            [first, ..] => first & 0xe000 == 0x2000,
        };
        if global { Self::Public } else { Self::Private }
    }
}

/// A resolved name whose answers included a refused address.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("host {host} resolves to {ip}, which is {reason}")]
pub struct AddressRefused {
    /// The name looked up.
    pub host: String,
    /// The refused answer.
    pub ip: IpAddr,
    /// Why it is refused.
    pub reason: String,
}

/// The DNS resolver of every guarded client: resolves once, checks **every** answer against
/// its guard's address policy, and hands the client only those answers, so the address
/// checked is the address dialed (no second lookup a rebinding server could answer
/// differently).
#[derive(Clone, Debug)]
pub struct GuardedResolver {
    guard: EndpointGuard,
}

impl GuardedResolver {
    /// Looks `host` up and checks the answers.
    pub async fn lookup(
        &self,
        host: &str,
    ) -> Result<Vec<SocketAddr>, Box<dyn std::error::Error + Send + Sync>> {
        let answers: Vec<SocketAddr> = tokio::net::lookup_host((host, 0)).await?.collect();
        if answers.is_empty() {
            return Err(format!("host {host} has no addresses").into());
        }
        let ips: Vec<IpAddr> = answers.iter().map(SocketAddr::ip).collect();
        self.guard.check_answers(host, &ips)?;
        Ok(answers)
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let resolver = self.clone();
        Box::pin(async move {
            let answers = resolver.lookup(name.as_str()).await?;
            let addrs: Addrs = Box::new(answers.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests;
