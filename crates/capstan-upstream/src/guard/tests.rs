//! The guard's unit tests: patterns, address scopes and what a check admits.

#![allow(clippy::unwrap_used)]

use super::*;

fn guard(patterns: &[&str]) -> EndpointGuard {
    EndpointGuard::new(patterns).unwrap_or_else(|e| panic!("{e}"))
}

/// Asserts that `url` is refused for not being on the allow-list (not for some other
/// reason, such as a parse error).
fn assert_not_listed(g: &EndpointGuard, url: &str) {
    let refused = g.check(url).unwrap_err();
    assert!(
        refused.reason.contains("is not in the allow-list"),
        "{url}: {refused}"
    );
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
    assert_not_listed(&g, "http://evil.mcp.example.com/");
}

#[test]
fn a_wildcard_should_match_only_strictly_below_its_suffix() {
    let g = guard(&["*.gw.example:8443"]);
    assert!(g.check("https://a.gw.example:8443/mcp").is_ok());
    assert!(g.check("https://a.b.gw.example:8443/mcp").is_ok());
    assert_not_listed(&g, "https://gw.example:8443/mcp");
    assert_not_listed(&g, "https://evilgw.example:8443/mcp");
    // A host that is the suffix itself, dot and all, is not below it.
    assert_not_listed(&g, "https://.gw.example:8443/mcp");
    assert_not_listed(&g, "https://a.gw.example/mcp");
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
    for (pattern, reason) in [
        ("", "empty"),
        ("http://x/", "a host, not a URL"),
        ("*.", "a wildcard must be followed by a domain"),
        ("*.127.0.0.1", "a wildcard must be followed by a domain"),
        ("host:", "empty port"),
        ("a@b", "a host, not a URL"),
        ("10.0.0.0/33", "a host, not a URL"),
        // A wildcard's domain must be a name: not one ending in a dot, nor an address in
        // another spelling than the one the address check above reads.
        ("*.example.", "a wildcard must be followed by a domain"),
        ("*.0x7f.0.0.1", "not a host"),
        ("*.[::1]", "not a host"),
    ] {
        assert_eq!(
            HostPattern::parse(pattern).map_err(|e| e.reason),
            Err(reason),
            "{pattern:?}"
        );
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

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

/// The scopes, from IANA's special-purpose registries read by hand (not by the code).
#[test]
fn addresses_should_be_scoped_by_where_they_lead() {
    use AddressScope::*;
    for (address, scope) in [
        ("8.8.8.8", Public),
        ("1.1.1.1", Public),
        ("127.0.0.1", Loopback),
        ("127.9.9.9", Loopback),
        ("::1", Loopback),
        ("::ffff:127.0.0.1", Loopback),
        ("10.0.0.1", Private),
        ("10.96.0.10", Private),
        ("172.16.0.1", Private),
        ("172.31.255.255", Private),
        ("172.32.0.1", Public),
        ("192.168.1.1", Private),
        ("100.64.0.1", Private),
        ("198.18.0.1", Private),
        ("203.0.113.7", Private),
        ("240.0.0.1", Private),
        ("fd12:3456::1", Private),
        ("fec0::1", Private),
        ("2001:db8::1", Private),
        ("2002:7f00:1::1", Private),
        ("2001:4860:4860::8888", Public),
        ("2606:4700::1111", Public),
        ("64:ff9b::808:808", Public),
        ("64:ff9b::a00:1", Private),
        ("::ffff:10.0.0.1", Private),
        // Each range exactly at its edges.
        ("9.255.255.255", Public),
        ("11.0.0.0", Public),
        ("100.63.255.255", Public),
        ("100.127.255.255", Private),
        ("100.128.0.0", Public),
        ("198.17.255.255", Public),
        ("198.19.255.255", Private),
        ("198.20.0.0", Public),
        ("239.255.255.255", Refused("not a unicast address")),
        ("240.0.0.0", Private),
        ("2001:1ff:ffff::1", Private),
        ("2001:200::1", Public),
        ("1fff:ffff::1", Private),
        ("3fef:ffff::1", Public),
        ("3ff0::1", Private),
        ("4000::1", Private),
        ("2002::1", Private),
        ("2003::1", Public),
    ] {
        assert_eq!(AddressScope::of(ip(address)), scope, "{address}");
    }
    for address in [
        "169.254.169.254",
        "100.100.100.200",
        "192.0.0.192",
        "fd00:ec2::254",
        "fe80::1",
        "febf:ffff::1",
        "0.0.0.0",
        "0.1.2.3",
        "224.0.0.1",
        "255.255.255.255",
        "::",
        "ff02::1",
        "64:ff9b::a9fe:a9fe",
    ] {
        assert!(
            matches!(AddressScope::of(ip(address)), Refused(_)),
            "{address}"
        );
    }
}

#[test]
fn a_wildcard_name_should_resolve_only_to_public_addresses_or_into_a_cidr_entry() {
    let g = guard(&["*.providers.example"]);
    assert_eq!(
        g.check_answers("api.providers.example", &[ip("8.8.8.8")]),
        Ok(())
    );
    let refused = g
        .check_answers("api.providers.example", &[ip("127.0.0.1")])
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "host api.providers.example resolves to 127.0.0.1, which is loopback; a name \
         admitted by the wildcard entry *.providers.example must resolve to public \
         addresses or into an IP or CIDR entry of the allow-list"
    );
    let refused = g
        .check_answers("api.providers.example", &[ip("10.0.0.1")])
        .unwrap_err();
    assert!(
        refused.reason.starts_with("a private address; "),
        "{refused}"
    );
    // One bad answer among good ones refuses the name.
    let refused = g
        .check_answers("api.providers.example", &[ip("8.8.8.8"), ip("10.0.0.1")])
        .unwrap_err();
    assert_eq!(refused.ip, ip("10.0.0.1"));
    // A covering CIDR entry admits the private answer, and only inside it.
    let g = guard(&["*.providers.example", "10.0.0.0/8"]);
    assert_eq!(
        g.check_answers("api.providers.example", &[ip("10.0.0.1")]),
        Ok(())
    );
    for outside in ["192.168.0.1", "127.0.0.1"] {
        let refused = g
            .check_answers("api.providers.example", &[ip(outside)])
            .unwrap_err();
        assert!(
            refused.reason.contains("must resolve to public addresses"),
            "{refused}"
        );
    }
}

#[test]
fn an_exact_name_may_resolve_to_private_ranges_but_to_loopback_only_through_a_loopback_entry() {
    let g = guard(&["mcp.cluster.local:8080"]);
    assert_eq!(
        g.check_answers("mcp.cluster.local", &[ip("10.96.3.4")]),
        Ok(())
    );
    assert_eq!(
        g.check_answers("MCP.cluster.local.", &[ip("fd00::5")]),
        Ok(())
    );
    let refused = g
        .check_answers("mcp.cluster.local", &[ip("127.0.0.1")])
        .unwrap_err();
    assert!(
        refused
            .reason
            .starts_with("loopback; the entry mcp.cluster.local"),
        "{refused}"
    );
    let refused = g
        .check_answers("mcp.cluster.local", &[ip("::1")])
        .unwrap_err();
    assert!(refused.reason.starts_with("loopback; "), "{refused}");
    // A loopback address or CIDR listed: loopback answers it covers are admitted.
    let g = guard(&["mcp.cluster.local", "127.0.0.1:7810"]);
    assert_eq!(
        g.check_answers("mcp.cluster.local", &[ip("127.0.0.1")]),
        Ok(())
    );
    let refused = g
        .check_answers("mcp.cluster.local", &[ip("127.0.0.2")])
        .unwrap_err();
    assert!(refused.reason.starts_with("loopback; "), "{refused}");
    let g = guard(&["mcp.cluster.local", "127.0.0.0/8"]);
    assert_eq!(
        g.check_answers("mcp.cluster.local", &[ip("127.0.0.2")]),
        Ok(())
    );
    // The `localhost` entry admits loopback.
    let g = guard(&["localhost:7810"]);
    assert_eq!(
        g.check_answers("localhost", &[ip("127.0.0.1"), ip("::1")]),
        Ok(())
    );
}

#[test]
fn metadata_answers_should_be_refused_whatever_is_listed() {
    let g = guard(&["metadata.internal", "169.254.0.0/16", "0.0.0.0/0"]);
    for answer in ["169.254.169.254", "100.100.100.200", "fe80::1"] {
        let refused = g
            .check_answers("metadata.internal", &[ip("10.0.0.1"), ip(answer)])
            .unwrap_err();
        assert_eq!(refused.ip, ip(answer));
    }
}

#[test]
fn a_cidr_entry_should_admit_ip_literals_inside_it_on_any_port() {
    let g = guard(&["10.96.0.1/12"]);
    assert!(g.check("http://10.100.1.2:8080/mcp").is_ok());
    assert_not_listed(&g, "http://10.112.0.1/mcp");
    assert_eq!(
        g.patterns().map(ToString::to_string).collect::<Vec<_>>(),
        ["10.96.0.0/12"]
    );
    assert!(guard(&["fd00::/8"]).check("http://[fd12::1]:81/").is_ok());
}

#[tokio::test]
async fn the_resolver_should_answer_only_checked_addresses() {
    // `localhost` resolves to loopback (/etc/hosts): admitted by a `localhost` entry,
    // refused when only an unrelated exact entry would vouch for it.
    let answers = guard(&["localhost"])
        .resolver()
        .lookup("localhost")
        .await
        .unwrap();
    assert!(!answers.is_empty());
    assert!(answers.iter().all(|a| a.ip().is_loopback()), "{answers:?}");
    let error = guard(&["other.example"])
        .resolver()
        .lookup("localhost")
        .await
        .unwrap_err();
    assert!(error.to_string().contains("which is not public"), "{error}");
}
