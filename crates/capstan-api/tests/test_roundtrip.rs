//! Property tests: any valid document survives serialize → parse → validate unchanged, in JSON
//! and in YAML; and the CR and document forms of the StreamCo example carry one spec.

use capstan_api::{
    Authority, CallLimits, CallerAuthorization, CapabilityBindingSpec, CapabilityDocument,
    CapabilityMapping, CapabilityStatus, Concept, CostHint, DocumentMeta, EndpointAuth,
    ExchangeClient, GroupKind, Knowledge, KnowledgeSource, KnowledgeSourceType, McpServer, Naming,
    Object, ObjectRef, PromptSelector, ProviderProjectArgument, ReadGrant, ResourceSelector,
    ResourceUris, SecretCredential, SecretKeyRef, Skill, SubjectTokenType, TokenExchange,
    ToolSelector, Tools, WorkloadIdentity,
};
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;

/// Identifiers, including ones YAML would read as something else if left unquoted.
fn ident() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9-]{0,20}[a-z0-9]",
        Just("yes".to_owned()),
        Just("null".to_owned()),
        Just("1.10".to_owned()),
        Just("0x1F".to_owned()),
        "[0-9]{1,3}",
    ]
}

fn url() -> impl Strategy<Value = String> {
    (
        "https?",
        "[a-z][a-z0-9]{0,10}(\\.[a-z]{2,5})?",
        option::of(1u16..),
        "(/[a-z0-9._-]{1,8}){0,3}",
    )
        .prop_map(|(scheme, host, port, path)| match port {
            Some(port) => format!("{scheme}://{host}:{port}{path}"),
            None => format!("{scheme}://{host}{path}"),
        })
}

/// An `auth` block of any kind; `per_caller` admits token exchange (MCP servers only).
fn auth(per_caller: bool) -> impl Strategy<Value = EndpointAuth> {
    let audience = "[a-z][a-z0-9.-]{0,20}";
    let identity = audience.prop_map(|audience| WorkloadIdentity { audience });
    let secret = (
        "[a-z]([a-z0-9-]{0,9}[a-z0-9])?",
        "[A-Za-z0-9._-]{1,10}",
        option::of("X-[A-Za-z]{1,10}|Authorization"),
        option::of("[ -~]{0,10}"),
    )
        .prop_map(|(name, key, header, prefix)| SecretCredential {
            name,
            key,
            header,
            prefix,
        });
    let exchange = (
        url().prop_map(|u| format!("https://{}", u.split_once("://").map_or("", |p| p.1))),
        audience,
        vec("[a-z]{1,8}(\\.[a-z]{1,8})?", 0..3),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(token_endpoint, audience, mut scopes, actor, by_secret)| {
            scopes.sort();
            scopes.dedup();
            TokenExchange {
                token_endpoint,
                audience: audience.clone(),
                scopes,
                subject_token_type: actor.then_some(SubjectTokenType::Jwt),
                actor: actor.then(|| WorkloadIdentity {
                    audience: audience.clone(),
                }),
                client: ExchangeClient {
                    id: "capstan".to_owned(),
                    secret: by_secret.then(|| SecretKeyRef {
                        name: "exchange-client".to_owned(),
                        key: "secret".to_owned(),
                    }),
                    workload_identity: (!by_secret).then_some(WorkloadIdentity { audience }),
                },
            }
        });
    let kinds = (
        0..if per_caller { 3u8 } else { 2 },
        identity,
        secret,
        exchange,
    );
    kinds.prop_map(|(kind, identity, secret, exchange)| match kind {
        0 => EndpointAuth {
            workload_identity: Some(identity),
            ..EndpointAuth::default()
        },
        1 => EndpointAuth {
            secret: Some(secret),
            ..EndpointAuth::default()
        },
        _ => EndpointAuth {
            token_exchange: Some(exchange),
            ..EndpointAuth::default()
        },
    })
}

fn prose() -> impl Strategy<Value = String> {
    "[A-Za-z0-9 ,.:#'\"-]{1,80}".prop_filter("not blank", |s| !s.trim().is_empty())
}

fn knowledge() -> impl Strategy<Value = Knowledge> {
    let source = (
        prop_oneof![
            Just(KnowledgeSourceType::LlmDocs),
            Just(KnowledgeSourceType::Runbook),
            Just(KnowledgeSourceType::Markdown)
        ],
        option::of(prose()),
        url(),
        option::of(auth(false)),
    )
        .prop_map(|(kind, title, url, auth)| KnowledgeSource {
            kind,
            title,
            url,
            auth,
        });
    let concept =
        ("[a-z.]{0,20}", "[A-Z][a-zA-Z]{0,15}|\\*", prose()).prop_map(|(group, kind, summary)| {
            Concept {
                gvk: GroupKind { group, kind },
                summary,
            }
        });
    (vec(source, 0..4), vec(concept, 0..3))
        .prop_map(|(sources, concepts)| Knowledge { sources, concepts })
}

fn server(index: usize) -> impl Strategy<Value = McpServer> {
    (
        "[a-z][a-z0-9]{0,8}",
        url(),
        vec("[a-z][a-z0-9_.]{0,15}", 0..6),
        any::<prop::sample::Index>(),
        option::of((
            any::<u16>(),
            option::of(0i64..1_000_000),
            any::<bool>(),
            any::<bool>(),
        )),
        option::of("[0-9a-f]{64}"),
        option::of(auth(true)),
    )
        .prop_map(
            move |(prefix, endpoint, mut include, pick, mapping, pin, auth)| {
                include.sort();
                include.dedup();
                let mutating = if include.is_empty() {
                    vec![]
                } else {
                    vec![pick.get(&include).clone()]
                };
                let capabilities = match (mapping, include.first()) {
                    (Some((quality, base, bundled, quarantined)), Some(tool)) => {
                        vec![CapabilityMapping {
                            capability_id: format!("cap.{prefix}.search"),
                            tool: tool.clone(),
                            features: vec!["search.fresh".to_owned()],
                            cost_hint: Some(CostHint {
                                base_micros_usd: base,
                                bundled_in_broker: bundled,
                            }),
                            quality: Some(quality % 10_001),
                            status: Some(if quarantined {
                                CapabilityStatus::Quarantined
                            } else {
                                CapabilityStatus::Active
                            }),
                        }]
                    }
                    _ => vec![],
                };
                // Unprefixed only where every allowed name may be exposed as it is.
                let plain = include
                    .iter()
                    .all(|t| !t.contains('.') && !capstan_api::patterns::is_built_in_tool(t));
                McpServer {
                    name: format!("{prefix}{index}"),
                    endpoint,
                    auth,
                    provider_project_argument: match index % 3 {
                        0 => None,
                        1 => Some(ProviderProjectArgument::default()),
                        _ => Some(ProviderProjectArgument {
                            tools: include.first().cloned().into_iter().collect(),
                        }),
                    },
                    tool_names: match (index % 3, plain) {
                        (0, _) => None,
                        (1, _) | (_, false) => Some(Naming::Prefixed),
                        _ => Some(Naming::Unprefixed),
                    },
                    tool_selector: (!include.is_empty()).then(|| ToolSelector {
                        pins: pin
                            .clone()
                            .map(|hex| (pick.get(&include).clone(), format!("sha256:{hex}")))
                            .into_iter()
                            .collect(),
                        include,
                    }),
                    prompt_selector: index.is_multiple_of(2).then(|| PromptSelector {
                        pins: pin
                            .clone()
                            .map(|hex| (format!("summarize-{index}"), format!("sha256:{hex}")))
                            .into_iter()
                            .collect(),
                        include: vec![format!("summarize-{index}")],
                    }),
                    prompt_names: (index % 3 == 2).then_some(Naming::Unprefixed),
                    resource_selector: (index % 2 == 1).then(|| ResourceSelector {
                        pins: pin
                            .map(|hex| {
                                (
                                    format!("test://items/{{id}}/{index}"),
                                    format!("sha256:{hex}"),
                                )
                            })
                            .into_iter()
                            .collect(),
                        include: vec![
                            format!("file:///docs/{index}.md"),
                            format!("test://items/{{id}}/{index}"),
                        ],
                    }),
                    resource_uris: (index % 4 == 1).then_some(ResourceUris::AsListed),
                    mutating,
                    capabilities,
                    url_elicitation_hosts: match index % 3 {
                        0 => vec![],
                        1 => vec![format!("login-{index}.example.com")],
                        _ => vec![format!("*.auth-{index}.example.com")],
                    },
                    limits: index.is_multiple_of(2).then(|| CallLimits {
                        calls_per_minute_per_caller: Some(60 + index as u32),
                        concurrent_calls_per_caller: index.is_multiple_of(4).then_some(4),
                        calls_per_minute: index.is_multiple_of(3).then_some(600),
                    }),
                }
            },
        )
}

fn spec() -> impl Strategy<Value = CapabilityBindingSpec> {
    let servers = (0usize..4).prop_flat_map(|n| (0..n).map(server).collect::<Vec<_>>());
    let pin = option::of("[0-9a-f]{64}".prop_map(|hex| format!("sha256:{hex}")));
    let skills = vec((prose(), url(), pin, option::of(auth(false))), 0..3).prop_map(|skills| {
        skills
            .into_iter()
            .enumerate()
            .map(|(i, (description, source, pin, auth))| Skill {
                name: format!("skill-{i}"),
                description,
                source,
                pin,
                auth,
            })
            .collect()
    });
    let authority = (
        vec(("[a-z.]{0,10}", "[A-Z][a-z]{0,8}|\\*"), 0..3),
        option::of(0u32..=86400),
    )
        .prop_map(|(reads, max)| Authority {
            reads: reads
                .into_iter()
                .map(|(group, kind)| ReadGrant {
                    gvk: GroupKind { group, kind },
                })
                .collect(),
            max_task_duration_seconds: max,
        });
    (
        (ident(), ident(), ident(), ident(), option::of(ident())),
        option::of(knowledge()),
        option::of(servers.prop_map(|mcp_servers| Tools { mcp_servers })),
        skills,
        option::of(authority),
        option::of(prop_oneof![
            Just(CallerAuthorization::Optional),
            Just(CallerAuthorization::Required)
        ]),
    )
        .prop_map(
            |(
                (service, service_name, agent, version, reporting),
                knowledge,
                tools,
                skills,
                authority,
                caller_authorization,
            )| {
                CapabilityBindingSpec {
                    service_ref: ObjectRef { name: service },
                    service_name,
                    service_agent_ref: ObjectRef { name: agent },
                    configuration_version: version,
                    reporting_project: reporting,
                    knowledge,
                    tools,
                    skills,
                    authority,
                    caller_authorization,
                }
            },
        )
}

fn document(spec: CapabilityBindingSpec) -> CapabilityDocument {
    CapabilityDocument {
        api_version: Some("services.miloapis.com/v1alpha1".into()),
        kind: Some("AgentBinding".into()),
        metadata: DocumentMeta {
            name: Some("generated".into()),
            namespace: Some("demo-project".into()),
        },
        spec,
    }
}

fn only_document(text: &str) -> CapabilityDocument {
    let parsed = capstan_api::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(parsed.invalid.is_empty(), "{:?}\n{text}", parsed.invalid);
    assert_eq!(parsed.objects.len(), 1);
    match parsed.objects.into_iter().next().map(|p| p.object) {
        Some(Object::Document(document)) => document,
        other => panic!("expected a document, got {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn valid_documents_should_survive_json_round_trip(spec in spec()) {
        prop_assert_eq!(capstan_api::validate(&spec), vec![]);
        let original = document(spec);
        let text = serde_json::to_string(&[&original]).unwrap_or_else(|e| panic!("{e}"));
        let parsed = only_document(&text);
        prop_assert_eq!(&parsed, &original);
        prop_assert_eq!(capstan_api::validate(&parsed.spec), vec![]);
    }

    #[test]
    fn valid_documents_should_survive_yaml_round_trip(spec in spec()) {
        let original = document(spec);
        let text = serde_saphyr::to_string(&original).unwrap_or_else(|e| panic!("{e}"));
        prop_assert_eq!(&only_document(&text), &original);
    }
}

/// The StreamCo example exists as a CapabilityBinding (YAML, `kubectl apply`) and as a
/// capability document (JSON, the fixture and the provider API), written separately. Their raw
/// specs are one value, and each form reads through the parser into a spec that writes that
/// same value back: a field a producer spells differently, or one the type drops, shows here
/// (the authored files are the oracle, not the type serialised twice).
#[test]
fn the_cr_and_document_forms_of_streamco_should_carry_the_same_spec() {
    let read = |path: &str| {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let cr_text = read("examples/streamco/capability-bindings.yaml");
    let document_text = read("examples/streamco/capability-documents.json");
    let cr: serde_json::Value = serde_saphyr::from_str(&cr_text).unwrap_or_else(|e| panic!("{e}"));
    let documents: serde_json::Value =
        serde_json::from_str(&document_text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cr["kind"], "CapabilityBinding");
    assert_eq!(cr["spec"], documents["items"][0]["spec"]);
    for (text, raw) in [
        (&cr_text, &cr["spec"]),
        (&document_text, &documents["items"][0]["spec"]),
    ] {
        let parsed = capstan_api::parse(text).unwrap_or_else(|e| panic!("{e}"));
        assert!(parsed.invalid.is_empty(), "{:?}", parsed.invalid);
        let spec = parsed
            .into_documents()
            .pop()
            .map(|d| d.spec)
            .unwrap_or_else(|| panic!("no spec read"));
        assert_eq!(&serde_json::to_value(&spec).unwrap_or_default(), raw);
    }
}

/// A knowledge source's type is named in the instructions as documents spell it (the names
/// written out, as the CRD's enum gives them), the same name it is read and written by.
#[test]
fn a_knowledge_source_type_should_be_named_as_documents_spell_it() {
    for (kind, name) in [
        (KnowledgeSourceType::LlmDocs, "LLMDocs"),
        (KnowledgeSourceType::Runbook, "Runbook"),
        (KnowledgeSourceType::Markdown, "Markdown"),
    ] {
        assert_eq!(kind.as_str(), name);
        assert_eq!(
            serde_json::to_value(kind).ok(),
            Some(serde_json::json!(name))
        );
    }
}
