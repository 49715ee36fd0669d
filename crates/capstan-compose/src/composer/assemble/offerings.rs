//! A server's prompts, resources and templates offered in a composition: those its binding's
//! selectors name, each pinned if its selector pins it, claimed first-wins under its composed
//! name or URI, routed (`composer/offerings.rs`) and listed in the composition.

use capstan_api::patterns::is_capstan_uri;
use capstan_api::{Naming, ResourceUris};
use capstan_upstream::mcp::Offerings;

use super::super::connect::ServerPlan;
use super::super::offerings::{OfferedTemplate, Route, capstan_prefix};
use super::{Assembly, Claim};
use crate::composition::{ComposedPrompt, ComposedResource, UpstreamStage};
use crate::pins::{Offering, Pinned, covered_offering, offering_digest};

impl Assembly<'_> {
    /// Offers the prompts the server's `promptSelector` names, first wins by composed name; a
    /// selected prompt the server does not list is reported missing. A server whose prompts
    /// could not be listed reports that instead.
    pub(super) fn offer_prompts(&mut self, plan: &ServerPlan, index: usize, offerings: &Offerings) {
        let binding = self.documents[plan.doc].binding.clone();
        for wanted in &plan.prompts {
            let Some(listed) = offerings.prompts.iter().find(|p| &p.name == wanted) else {
                self.missing(plan, offerings, UpstreamStage::ListPrompts, wanted);
                continue;
            };
            let offering = Offering::Prompt(listed);
            let digest = offering_digest(offering);
            let covered = || covered_offering(offering);
            if !self.pin_holds(plan, Pinned::Prompt, wanted, digest, covered) {
                continue;
            }
            let name = match plan.prompt_naming {
                Naming::Prefixed => format!("{}__{wanted}", plan.server),
                Naming::Unprefixed => wanted.clone(),
            };
            if !self.claim(plan.doc, &name, Claim::Prompt) {
                continue;
            }
            let mut prompt = listed.clone();
            prompt.name.clone_from(&name);
            self.composed.offered.prompts.insert(
                name.clone(),
                Route {
                    index,
                    upstream: wanted.clone(),
                    prefix: String::new(),
                },
            );
            self.outcomes[plan.doc].prompts.push(name.clone());
            self.composed.composition.prompts.push(ComposedPrompt {
                name,
                binding: binding.clone(),
                server: plan.server.clone(),
                upstream_name: wanted.clone(),
                prompt,
            });
        }
    }

    /// Offers the resources and templates the server's `resourceSelector` names under their
    /// composed URIs (`composer/offerings.rs`), first wins by URI; a selected URI the server
    /// lists as neither is reported missing.
    pub(super) fn offer_resources(
        &mut self,
        plan: &ServerPlan,
        index: usize,
        offerings: &Offerings,
    ) {
        let binding = self.documents[plan.doc].binding.clone();
        let prefix = match plan.resource_uris {
            ResourceUris::Capstan => capstan_prefix(&binding, &plan.server),
            ResourceUris::AsListed => String::new(),
        };
        for wanted in &plan.resources {
            let resource = offerings.resources.iter().find(|r| &r.uri == wanted);
            let template = offerings
                .templates
                .iter()
                .find(|t| &t.uri_template == wanted);
            let listed = match (resource, template) {
                (Some(resource), _) => Offering::Resource(resource),
                (None, Some(template)) => Offering::Template(template),
                (None, None) => {
                    self.missing(plan, offerings, UpstreamStage::ListResources, wanted);
                    continue;
                }
            };
            let digest = offering_digest(listed);
            let covered = || covered_offering(listed);
            if !self.pin_holds(plan, Pinned::Resource, wanted, digest, covered) {
                continue;
            }
            let uri = format!("{prefix}{wanted}");
            // A URI as listed never takes the sidecar's own scheme (the binding rules refuse
            // it; a document that skipped them still cannot shadow a Capstan URI).
            if (prefix.is_empty() && is_capstan_uri(wanted))
                || !self.claim(plan.doc, &uri, Claim::Resource)
            {
                continue;
            }
            let route = Route {
                index,
                upstream: wanted.clone(),
                prefix: prefix.clone(),
            };
            self.offer(plan, listed, &uri, route);
            self.outcomes[plan.doc].resources.push(uri);
        }
    }

    /// Offers one selected resource or template of `plan`'s server under composed URI `uri`,
    /// leading to `route`: routed by `composer/offerings.rs`, listed in the composition.
    fn offer(&mut self, plan: &ServerPlan, listed: Offering<'_>, uri: &str, route: Route) {
        let upstream_uri = route.upstream.clone();
        let (resource, resource_template) = match listed {
            Offering::Resource(resource) => {
                let mut shown = resource.clone();
                shown.uri = uri.to_owned();
                self.composed
                    .offered
                    .resources
                    .insert(uri.to_owned(), route);
                (Some(shown), None)
            }
            Offering::Template(template) => {
                let mut shown = template.clone();
                shown.uri_template = uri.to_owned();
                let offered = OfferedTemplate::new(uri.to_owned(), route);
                self.composed.offered.templates.push(offered);
                (None, Some(shown))
            }
            // Prompts are offered by name (`offer_prompts`), never under a URI.
            Offering::Prompt(_) => return,
        };
        self.composed.composition.resources.push(ComposedResource {
            uri: uri.to_owned(),
            binding: self.documents[plan.doc].binding.clone(),
            server: plan.server.clone(),
            upstream_uri,
            template: resource_template.is_some(),
            resource,
            resource_template,
        });
    }
}
