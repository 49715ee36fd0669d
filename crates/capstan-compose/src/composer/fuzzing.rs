//! Entry points for the fuzz targets (`fuzz/`, docs/reliability.md) into what is otherwise
//! private to composing. Not part of the crate's API: nothing but `capstan-fuzz` calls them.

use super::offerings::{Offered, OfferedTemplate, Route};

/// Where `resources/read` of `uri` goes among resource templates, resolved as a live
/// composition resolves it. `templates` are, in composition order, each a provider's URI
/// template and the prefix its URIs are shown under (`capstan://<binding>/<server>/`, or empty
/// for a server whose URIs are shown as listed). `Some((index, uri))` names the template that
/// reads it and the URI its server is handed; `None` when no template reads it.
pub fn resolve_template_read(templates: &[(String, String)], uri: &str) -> Option<(usize, String)> {
    let offered = Offered {
        templates: templates
            .iter()
            .enumerate()
            .map(|(index, (template, prefix))| {
                let route = Route {
                    index,
                    upstream: template.clone(),
                    prefix: prefix.clone(),
                };
                OfferedTemplate::new(format!("{prefix}{template}"), route)
            })
            .collect(),
        ..Offered::default()
    };
    offered
        .resolve(uri)
        .map(|route| (route.index, route.upstream))
}
