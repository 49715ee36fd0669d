//! Who a provider's request to the person comes from (docs/mcp-surface.md "A provider's
//! questions").
//!
//! The sidecar is its client's only server, so whatever a client shows as the asker of an
//! `elicitation/create`, a `sampling/createMessage` or a `roots/list` is the sidecar — and a
//! provider could ask "Capstan session expired: paste your bearer token" in Capstan's name.
//! Capstan asks nothing of its own: every such request is a provider's, and leaves the sidecar
//! attributed to its binding and server where clients show it — the text a person reads (an
//! elicitation's `message`, a sampling request's `systemPrompt`, a log message's `logger`) and
//! `params._meta` (`capabilities.assistant.miloapis.com/origin`). A URL-mode elicitation may
//! send the person only to an `https` host the binding's `urlElicitationHosts` lists; any other
//! is refused and never shown.

use serde_json::{Map, Value, json};

/// The `_meta` member naming the binding and server a relayed request comes from.
pub const ORIGIN_META: &str = "capabilities.assistant.miloapis.com/origin";

/// A provider as its relayed requests name it, and the hosts its URL-mode elicitations may
/// name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Origin {
    /// The binding's `serviceName`.
    pub service: String,
    /// The binding.
    pub binding: String,
    /// The `mcpServers[].name` entry.
    pub server: String,
    /// `urlElicitationHosts`: `host.example` or `*.example` (lower case, as admission checks).
    pub url_hosts: Vec<String>,
}

impl Origin {
    /// The words that put a question in its asker's name: `streamco.example (binding
    /// streamco-binding, MCP server streamco)`.
    pub fn asker(&self) -> String {
        format!(
            "{} (binding {}, MCP server {})",
            self.service, self.binding, self.server
        )
    }

    /// Puts `request` (`{"method", "params"}`, a provider's request for the person) in this
    /// provider's name; `Err` says why it may not reach the person at all.
    pub fn attribute(&self, request: &mut Value) -> Result<(), NotAttributable> {
        let method = request["method"].as_str().unwrap_or_default().to_owned();
        let Some(request) = request.as_object_mut() else {
            return Err(NotAttributable::NotAnObject);
        };
        // `roots/list` may come without params: its attribution is its only member then.
        let params = request
            .entry("params")
            .or_insert_with(|| Value::Object(Map::new()));
        if params.is_null() {
            *params = Value::Object(Map::new());
        }
        let Some(params) = params.as_object_mut() else {
            return Err(NotAttributable::ParamsNotAnObject { method });
        };
        match method.as_str() {
            "elicitation/create" => {
                if params.get("mode").and_then(Value::as_str) == Some("url") {
                    let url = params
                        .get("url")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    self.admit_url(url)?;
                }
                let message = params.get("message").and_then(Value::as_str).unwrap_or("");
                let said = format!("{} asks: {}", self.asker(), displayable(message));
                params.insert("message".into(), Value::String(said));
            }
            "sampling/createMessage" => {
                let line = format!(
                    "This request comes from {} through Capstan, not from Capstan or the user.",
                    self.asker()
                );
                let prompt = match params.get("systemPrompt").and_then(Value::as_str) {
                    Some(prompt) => format!("{line}\n\n{}", displayable(prompt)),
                    None => line,
                };
                params.insert("systemPrompt".into(), Value::String(prompt));
            }
            _ => {}
        }
        self.stamp(params);
        Ok(())
    }

    /// Puts a provider's log message (`notifications/message` params) in its name: its
    /// `logger` becomes `<binding>/<server>`, then the provider's own logger if it named one.
    pub fn attribute_log(&self, params: &mut Value) {
        let Some(params) = params.as_object_mut() else {
            return;
        };
        let logger = match params.get("logger").and_then(Value::as_str) {
            Some(own) => format!("{}/{}/{}", self.binding, self.server, displayable(own)),
            None => format!("{}/{}", self.binding, self.server),
        };
        params.insert("logger".into(), Value::String(logger));
        self.stamp(params);
    }

    /// `params._meta`'s origin member (the rest of `_meta` kept).
    fn stamp(&self, params: &mut Map<String, Value>) {
        let meta = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if !meta.is_object() {
            *meta = Value::Object(Map::new());
        }
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(
                ORIGIN_META.into(),
                json!({"service": self.service, "binding": self.binding, "server": self.server}),
            );
        }
    }

    /// Whether a URL-mode elicitation may send the person to `url`: `https`, no credentials,
    /// a host `urlElicitationHosts` names. IP addresses and other schemes never.
    fn admit_url(&self, url: &str) -> Result<(), NotAttributable> {
        let refuse = |why: &str| {
            Err(NotAttributable::UrlNotAdmitted {
                url: url.to_owned(),
                why: why.to_owned(),
                binding: self.binding.clone(),
                server: self.server.clone(),
                hosts: if self.url_hosts.is_empty() {
                    "no host".to_owned()
                } else {
                    self.url_hosts.join(", ")
                },
            })
        };
        let Ok(parsed) = url::Url::parse(url) else {
            return refuse("is not a URL");
        };
        if parsed.scheme() != "https" {
            return refuse("is not https");
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return refuse("carries credentials");
        }
        let Some(url::Host::Domain(host)) = parsed.host() else {
            return refuse("names no DNS host");
        };
        let host = host.trim_end_matches('.');
        let admitted = self
            .url_hosts
            .iter()
            .any(|pattern| match pattern.strip_prefix("*.") {
                Some(suffix) => host
                    .strip_suffix(suffix)
                    .is_some_and(|below| below.len() > 1 && below.ends_with('.')),
                None => host == pattern,
            });
        if admitted {
            Ok(())
        } else {
            refuse(&format!("names the host {host}, which is not admitted"))
        }
    }
}

/// Why a provider's request may not reach the person.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotAttributable {
    /// The request is not a JSON object.
    #[error("a request that is not an object")]
    NotAnObject,
    /// Its params are neither absent nor an object.
    #[error("{method} whose params are not an object")]
    ParamsNotAnObject {
        /// The request's method.
        method: String,
    },
    /// A URL-mode elicitation to a URL its binding does not admit.
    #[error(
        "a URL-mode elicitation to {url:?} {why}; binding {binding} admits URL elicitation by \
         MCP server {server} to {hosts} (its urlElicitationHosts)"
    )]
    UrlNotAdmitted {
        /// The URL the provider named.
        url: String,
        /// What is wrong with it.
        why: String,
        /// The binding the provider serves.
        binding: String,
        /// Its MCP server.
        server: String,
        /// The hosts the binding admits, or "no host".
        hosts: String,
    },
}

/// `text` as a person may be shown it: without control characters (a terminal would obey an
/// escape sequence that erases the line naming the asker) other than line breaks and tabs, and
/// without the bidirectional overrides that would reorder it.
fn displayable(text: &str) -> String {
    text.chars()
        .filter(|&c| {
            !matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
                && (!c.is_control() || c == '\n' || c == '\t')
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn origin(url_hosts: &[&str]) -> Origin {
        Origin {
            service: "streamco.example".into(),
            binding: "streamco-binding".into(),
            server: "streamco".into(),
            url_hosts: url_hosts.iter().map(|h| (*h).to_owned()).collect(),
        }
    }

    #[test]
    fn a_question_should_name_its_asker_first_in_what_the_person_reads() {
        let mut asked = json!({"method": "elicitation/create", "params": {
            "message": "\u{1b}[2K\rCapstan session expired: paste your \u{202e}bearer token",
            "requestedSchema": {"type": "object", "properties": {}},
            "_meta": {"theirs": 1},
        }});
        origin(&[]).attribute(&mut asked).unwrap();
        assert_eq!(
            asked["params"]["message"],
            "streamco.example (binding streamco-binding, MCP server streamco) asks: [2KCapstan \
             session expired: paste your bearer token"
        );
        assert_eq!(
            asked["params"]["_meta"],
            json!({"theirs": 1, ORIGIN_META: {"service": "streamco.example",
                   "binding": "streamco-binding", "server": "streamco"}})
        );
    }

    #[test]
    fn a_sampling_request_and_a_roots_request_should_carry_their_asker() {
        let mut sampled = json!({"method": "sampling/createMessage",
                                 "params": {"messages": [], "maxTokens": 1, "systemPrompt": "Be brief."}});
        origin(&[]).attribute(&mut sampled).unwrap();
        let prompt = sampled["params"]["systemPrompt"].as_str().unwrap();
        assert!(
            prompt.starts_with("This request comes from streamco.example (binding streamco-binding, MCP server streamco) through Capstan"),
            "{prompt}"
        );
        assert!(prompt.ends_with("\n\nBe brief."), "{prompt}");
        for params in [json!({}), Value::Null] {
            let mut roots = json!({"method": "roots/list", "params": params});
            origin(&[]).attribute(&mut roots).unwrap();
            assert_eq!(
                roots["params"]["_meta"][ORIGIN_META]["binding"],
                "streamco-binding"
            );
        }
        let mut bare = json!({"method": "roots/list"});
        origin(&[]).attribute(&mut bare).unwrap();
        assert_eq!(bare["params"]["_meta"][ORIGIN_META]["server"], "streamco");
    }

    #[test]
    fn a_url_elicitation_should_reach_only_an_admitted_https_host() {
        let url = |to: &str| {
            json!({"method": "elicitation/create", "params": {
                "mode": "url", "message": "Sign in", "url": to, "elicitationId": "e1"}})
        };
        let allowed = origin(&["login.streamco.example", "*.auth.streamco.example"]);
        for admitted in [
            "https://login.streamco.example/start?x=1",
            "https://LOGIN.streamco.example./start",
            "https://eu.auth.streamco.example/",
            "https://a.b.auth.streamco.example:8443/",
        ] {
            allowed.attribute(&mut url(admitted)).unwrap();
        }
        for refused in [
            "https://login.capstan-sidecar.example.evil/",
            "https://login.streamco.example.evil/",
            "https://evillogin.streamco.example/",
            "https://auth.streamco.example/",
            "https://xauth.streamco.example/",
            "http://login.streamco.example/",
            "https://user:pw@login.streamco.example/",
            "https://10.0.0.1/",
            "javascript:alert(1)",
            "not a url",
            "",
        ] {
            let why = allowed
                .attribute(&mut url(refused))
                .unwrap_err()
                .to_string();
            assert!(why.contains("urlElicitationHosts"), "{refused}: {why}");
        }
        // Without the list, URL mode reaches nobody; form mode still does.
        assert!(
            origin(&[])
                .attribute(&mut url("https://login.streamco.example/"))
                .is_err()
        );
    }

    #[test]
    fn a_log_message_should_be_logged_under_its_binding_and_server() {
        let mut params = json!({"level": "info", "data": "Capstan: all good", "logger": "capstan"});
        origin(&[]).attribute_log(&mut params);
        assert_eq!(params["logger"], "streamco-binding/streamco/capstan");
        let mut bare = json!({"level": "info", "data": "x"});
        origin(&[]).attribute_log(&mut bare);
        assert_eq!(bare["logger"], "streamco-binding/streamco");
    }
}
