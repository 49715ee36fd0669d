//! Assembling a composition from what its upstreams listed, its documents' skills and its
//! knowledge: each binding's outcome, first-wins names, pins, quarantine and the instructions
//! text, in document order whatever answered first.

use std::collections::HashMap;
use std::sync::Arc;

use capstan_api::ResourceUris;
use capstan_api::patterns::is_built_in_tool;
use capstan_route::Catalog;
use rmcp::model::Tool;
use tracing::{debug, warn};

mod offerings;

use super::connect::{ServerPlan, ServerResult};
use super::live::{Composed, Connected};
use super::offerings::{UriScope, capstan_prefix};
use super::skill_bodies::{SkillBodies, SkillFetch, skill_pin};
use crate::capabilities::{CapabilitySummary, RoutedCapability, routed_capabilities};
use crate::composition::{
    BUILT_IN, BindingOutcome, Collision, ComposedTool, SkillSummary, UpstreamFailure, UpstreamStage,
};
use crate::knowledge::{self, KnowledgeItem};
use crate::names::{full_name_as, shortened};
use crate::pins::{ListedDefinition, PinMismatch, Pinned, covered_definition, definition_digest};
use crate::source::snapshot::Document;
use capstan_upstream::credential::Dialed;
use capstan_upstream::mcp::{CallError, ConnectError, Offerings, Origin};

/// A composition being assembled: the live composition, one outcome per document, and which
/// binding owns each composed tool name (first wins).
pub(super) struct Assembly<'a> {
    documents: &'a [Document],
    composed: Composed,
    outcomes: Vec<BindingOutcome>,
    owners: HashMap<String, String>,
    /// Which binding owns each composed prompt name, and each composed resource URI.
    prompt_owners: HashMap<String, String>,
    uri_owners: HashMap<String, String>,
}

/// What a composed name names.
#[derive(Clone, Copy)]
enum Claim {
    Prompt,
    Resource,
}

impl<'a> Assembly<'a> {
    /// An empty composition of `documents`, each with an outcome that found nothing yet.
    pub(super) fn new(documents: &'a [Document], composed: Composed) -> Self {
        let outcomes = documents
            .iter()
            .map(|d| BindingOutcome {
                binding: d.binding.clone(),
                service_name: d.spec.service_name.clone(),
                ..BindingOutcome::default()
            })
            .collect();
        Self {
            documents,
            composed,
            outcomes,
            owners: HashMap::new(),
            prompt_owners: HashMap::new(),
            uri_owners: HashMap::new(),
        }
    }

    /// Adds a server's session and offers its allow-listed tools; a server that could not be
    /// reached (or was refused) goes into its binding's outcome instead.
    pub(super) fn add_server(&mut self, server: ServerResult) {
        let ServerResult { plan, result } = server;
        let binding = self.documents[plan.doc].binding.clone();
        let (upstream, listed, offerings) = match result {
            Ok(ok) => ok,
            Err(error) => return self.record_failure(&plan, &binding, error),
        };
        let mut offered: HashMap<&str, &Tool> =
            listed.iter().map(|t| (t.name.as_ref(), t)).collect();
        let index = self.composed.upstreams.len();
        for tool in &plan.allowed {
            match offered.remove(tool.as_str()) {
                Some(definition) => self.offer_tool(&plan, index, tool, definition),
                None => self.outcomes[plan.doc]
                    .missing
                    .push(format!("{}/{tool}", plan.server)),
            }
        }
        self.offer_prompts(&plan, index, &offerings);
        self.offer_resources(&plan, index, &offerings);
        let outcome = &mut self.outcomes[plan.doc];
        for (stage, message) in &offerings.failures {
            warn!(%binding, server = %plan.server, %message, "MCP upstream listed its tools only");
            outcome.upstream_failures.push(UpstreamFailure {
                server: plan.server.clone(),
                endpoint: plan.endpoint.clone(),
                stage: *stage,
                detail: None,
            });
            outcome.upstream_errors.push(format!(
                "MCP server {} at {}: {message}",
                plan.server, plan.endpoint
            ));
        }
        debug!(%binding, server = %plan.server, "upstream composed");
        let scope = match plan.resource_uris {
            ResourceUris::Capstan => UriScope::Prefixed(capstan_prefix(&binding, &plan.server)),
            ResourceUris::AsListed => UriScope::AsListed,
        };
        let origin = Arc::new(Origin {
            service: self.documents[plan.doc].spec.service_name.clone(),
            binding: binding.clone(),
            server: plan.server.clone(),
            url_hosts: plan.url_elicitation_hosts.clone(),
        });
        self.composed.upstreams.push(Connected {
            key: plan.key,
            binding,
            origin,
            scope,
            upstream,
            tools: listed,
            offerings,
        });
    }

    /// Records the digest of an allowed tool, prompt or resource as listed; false (reported,
    /// to be withheld: never claimed, never routed) when its selector pins another digest.
    /// `covered` (what a reviewer reads) is made only for a mismatch.
    fn pin_holds(
        &mut self,
        plan: &ServerPlan,
        kind: Pinned,
        name: &str,
        digest: String,
        covered: impl FnOnce() -> serde_json::Value,
    ) -> bool {
        let pins = match kind {
            Pinned::Tool => &plan.pins,
            Pinned::Prompt => &plan.prompt_pins,
            Pinned::Resource => &plan.resource_pins,
            // A skill's pin is of its body, checked when it is fetched (`skill_bodies.rs`).
            Pinned::Skill => return true,
        };
        let pinned = pins.get(name).cloned();
        let outcome = &mut self.outcomes[plan.doc];
        outcome.definitions.push(ListedDefinition {
            kind,
            server: plan.server.clone(),
            name: name.to_owned(),
            digest: digest.clone(),
            pinned: pinned.clone(),
        });
        match pinned {
            Some(pinned) if pinned != digest => {
                outcome.pin_mismatches.push(PinMismatch {
                    kind,
                    server: plan.server.clone(),
                    name: name.to_owned(),
                    pinned,
                    live: digest,
                    listed: covered(),
                });
                false
            }
            _ => true,
        }
    }

    /// Reports a selected prompt or resource the server did not list — unless listing that
    /// kind failed (`stage`), which the binding reports instead.
    fn missing(
        &mut self,
        plan: &ServerPlan,
        offerings: &Offerings,
        stage: UpstreamStage,
        wanted: &str,
    ) {
        if offerings
            .failures
            .iter()
            .all(|(failed, _)| *failed != stage)
        {
            self.outcomes[plan.doc]
                .missing_offerings
                .push(format!("{}/{wanted}", plan.server));
        }
    }

    /// Takes `name` for document `doc` unless an earlier binding holds it (then the
    /// collision is reported).
    fn claim(&mut self, doc: usize, name: &str, kind: Claim) -> bool {
        let owners = match kind {
            Claim::Prompt => &mut self.prompt_owners,
            Claim::Resource => &mut self.uri_owners,
        };
        if let Some(winner) = owners.get(name) {
            self.outcomes[doc].offering_collisions.push(Collision {
                name: name.to_owned(),
                won_by: winner.clone(),
            });
            return false;
        }
        owners.insert(name.to_owned(), self.documents[doc].binding.clone());
        true
    }

    /// A server without a session, in its binding's outcome: refused by the guard, or failed
    /// to connect or list.
    fn record_failure(&mut self, plan: &ServerPlan, binding: &str, error: ConnectError) {
        let outcome = &mut self.outcomes[plan.doc];
        if let ConnectError::Refused(refusal) = error {
            warn!(%binding, %refusal, "MCP endpoint refused");
            outcome.refused.push(refusal.to_string());
            return;
        }
        if let ConnectError::Credential { failed, .. } = &error
            && failed.needs_caller
        {
            debug!(%binding, server = %plan.server, "MCP server not dialed without a caller");
            outcome.needs_caller.push(failed.message.clone());
            return;
        }
        warn!(%binding, %error, "MCP upstream failed");
        if let ConnectError::Credential { failed, .. } = &error {
            let refusal = CallError::Credential {
                server: plan.server.clone(),
                failed: failed.clone(),
            };
            for tool in &plan.allowed {
                let name = shortened(&full_name_as(plan.naming, &plan.server, tool));
                self.composed
                    .unavailable
                    .entry(name)
                    .or_insert_with(|| (binding.to_owned(), refusal.clone()));
            }
        }
        let (stage, detail) = match &error {
            ConnectError::List { .. } => (UpstreamStage::List, None),
            ConnectError::Credential { failed, .. } => {
                (UpstreamStage::Credential, Some(failed.message.clone()))
            }
            _ => (UpstreamStage::Connect, None),
        };
        outcome.upstream_failures.push(UpstreamFailure {
            server: plan.server.clone(),
            endpoint: plan.endpoint.clone(),
            stage,
            detail,
        });
        outcome.upstream_errors.push(error.to_string());
    }

    /// Offers one allow-listed tool the server listed: recorded with its definition digest,
    /// then composed unless its pin moved, it takes a `project` argument or its name is taken;
    /// routed but not listed when quarantined.
    fn offer_tool(&mut self, plan: &ServerPlan, index: usize, tool: &str, listed: &Tool) {
        // A pinned tool whose definition moved is neither listed nor routed: to the
        // assistant it does not exist until someone reviews it and re-pins.
        let digest = definition_digest(listed);
        if !self.pin_holds(plan, Pinned::Tool, tool, digest, || {
            covered_definition(listed)
        }) {
            return;
        }
        let document = &self.documents[plan.doc];
        let outcome = &mut self.outcomes[plan.doc];
        let providers_own = plan
            .provider_project
            .as_ref()
            .is_some_and(|own| own.covers(tool));
        if !providers_own && super::takes_project(&listed.input_schema) {
            outcome
                .project_arguments
                .push(format!("{}/{tool}", plan.server));
            return;
        }
        let full = full_name_as(plan.naming, &plan.server, tool);
        let name = shortened(&full);
        // The binding rules refuse these names; a document that skipped them (a fixture, an
        // older CRD) still never shadows a tool of the sidecar's own.
        if is_built_in_tool(&name) {
            outcome.collisions.push(Collision {
                name,
                won_by: BUILT_IN.to_owned(),
            });
            return;
        }
        if let Some(winner) = self.owners.get(&name) {
            outcome.collisions.push(Collision {
                name,
                won_by: winner.clone(),
            });
            return;
        }
        self.owners.insert(name.clone(), document.binding.clone());
        let composed = &mut self.composed;
        composed
            .routes
            .insert(name.clone(), (index, tool.to_owned()));
        if plan.quarantined.contains(tool) {
            outcome.quarantined.push(name);
            return;
        }
        outcome.exposed.push(name.clone());
        let mutating = plan.mutating.contains(tool);
        let mut annotations = listed.annotations.clone();
        if mutating {
            let mut a = annotations.unwrap_or_default();
            a.read_only_hint = Some(false);
            annotations = Some(a);
            composed.composition.mutating.push(name.clone());
        }
        composed.composition.tools.push(ComposedTool {
            shortened_from: (full != name).then_some(full),
            name,
            binding: document.binding.clone(),
            service_name: document.spec.service_name.clone(),
            server: plan.server.clone(),
            upstream_tool: tool.to_owned(),
            description: listed.description.as_ref().map(ToString::to_string),
            input_schema: listed.input_schema.clone(),
            annotations,
            mutating,
            limits: plan.limits,
        });
    }

    /// The documents' skills, first wins by name like tools.
    pub(super) fn add_skills(&mut self) {
        let mut skill_owners: HashMap<String, String> = HashMap::new();
        let mut credentials = Vec::new();
        for (doc, document) in self.documents.iter().enumerate() {
            for skill in &document.spec.skills {
                if let Some(winner) = skill_owners.get(&skill.name) {
                    self.outcomes[doc].skill_collisions.push(Collision {
                        name: skill.name.clone(),
                        won_by: winner.clone(),
                    });
                    continue;
                }
                skill_owners.insert(skill.name.clone(), document.binding.clone());
                credentials.push(skill.auth.as_ref().map(|auth| {
                    self.composed.credentials.credential(&Dialed {
                        binding: &document.binding,
                        what: &format!("skill {}", skill.name),
                        url: &skill.source,
                        auth,
                    })
                }));
                self.composed.composition.skills.push(SkillSummary {
                    name: skill.name.clone(),
                    description: skill.description.clone(),
                    binding: document.binding.clone(),
                    service_name: document.spec.service_name.clone(),
                    source: skill.source.clone(),
                    configuration_version: document.spec.configuration_version.clone(),
                    pin: skill.pin.clone(),
                });
            }
        }
        self.composed.skill_bodies = SkillBodies::new(credentials);
    }

    /// The composition, for fetching its pinned skills' bodies while servers are connected.
    pub(super) fn composed(&self) -> &Composed {
        &self.composed
    }

    /// The pinned skills' bodies fetched at composition: each one's digest recorded, and one
    /// that differs from its pin reported (to be withheld where it is served). A body that
    /// could not be fetched is fetched again on use and compared then.
    pub(super) fn add_skill_pins(&mut self, fetched: &[(usize, SkillFetch)]) {
        for (index, result) in fetched {
            let (Some(skill), Ok(body)) = (self.composed.composition.skills.get(*index), result)
            else {
                continue;
            };
            let Some(outcome) = self
                .outcomes
                .iter_mut()
                .find(|o| o.binding == skill.binding)
            else {
                continue;
            };
            let (definition, mismatch) = skill_pin(skill, body);
            outcome.definitions.push(definition);
            outcome.pin_mismatches.extend(mismatch);
        }
    }

    /// The fetched knowledge: counted into each binding's outcome, then the instructions text
    /// (knowledge under provenance headers and the skills list) within `total_cap`.
    pub(super) fn add_knowledge(&mut self, knowledge: &[KnowledgeItem], total_cap: usize) {
        for item in knowledge {
            let outcome = &mut self.outcomes[item.doc];
            outcome.knowledge_total += 1;
            match &item.result {
                Ok(fetched) if fetched.truncated => outcome.knowledge_truncated += 1,
                Ok(_) => {}
                Err(error) => outcome.knowledge_errors.push(error.to_string()),
            }
        }
        self.composed.composition.instructions = knowledge::instructions(
            self.documents,
            knowledge,
            &self.composed.composition.skills,
            total_cap,
        );
    }

    /// The composition with its outcomes (degraded ones logged) and its routed capabilities:
    /// destructive ones marked mutating, summaries for `GET /v1/composition`.
    pub(super) fn finish(self) -> Composed {
        let Self {
            documents,
            mut composed,
            outcomes,
            owners,
            ..
        } = self;
        for outcome in &outcomes {
            if outcome.degraded() {
                warn!(binding = %outcome.binding, reasons = ?outcome.reasons(), "binding degraded");
            }
        }
        composed.composition.bindings = outcomes;
        let routes = &composed.routes;
        composed
            .unavailable
            .retain(|name, _| !routes.contains_key(name));
        composed.capabilities = routed_capabilities(documents, Catalog::embedded(), &owners);
        let offered: Vec<&RoutedCapability> = composed.capabilities().collect();
        let destructive: Vec<String> = offered
            .iter()
            .filter(|c| c.spec.effect.kind.is_destructive())
            .map(|c| c.tool.name.to_string())
            .collect();
        let summaries: Vec<CapabilitySummary> =
            offered.into_iter().map(CapabilitySummary::from).collect();
        composed.composition.mutating.extend(destructive);
        composed.composition.capabilities = summaries;
        composed
    }
}
