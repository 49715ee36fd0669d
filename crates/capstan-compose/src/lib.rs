//! capstan-compose: turns a project's capability documents into one composed tool set —
//! sources and their cache, the endpoint guard, knowledge, skills and MCP upstreams — with a
//! per-binding outcome the sidecar serves and the controller's probe reports. The platform
//! tools a task adds beside it live in `capstan-platform`.
//!
//! How the modules depend on each other: `docs/architecture.md#capstan-compose`.

mod capabilities;
mod composer;
mod composition;
mod interned;
mod knowledge;
mod limits;
mod names;
mod pins;
mod source;

pub use capabilities::{
    CapabilitySummary, MAX_INTENT_LEN, RoutedCapability, capability_tool, routed_capabilities,
};
pub use capstan_upstream::fetch::{ClientError, FetchError, Fetched, Fetcher, MAX_REDIRECTS};
pub use capstan_upstream::guard::{
    AddressRefused, AddressScope, EndpointGuard, HostPattern, PatternError, Refusal,
};
pub use capstan_upstream::mcp::{
    CallError, CallTraffic, CallerRevision, CallerSide, ClientAsks, ConnectError, Forwarded,
    ORIGIN_META, Offerings, Origin, ParamHeader, RELAY_CAPACITY, ResourceUpdated, ToCaller,
    Updated, UpstreamChanges, Wanted, argument_header_mismatch, decoded_header_value,
    param_headers,
};
pub use capstan_upstream::trace_context;
pub use composer::fuzzing;
pub use composer::{
    Composed, Composer, OfferingError, REFETCH_AFTER, SKILLS_URI_PREFIX, SetupError, SkillError,
    SkillFile, ToolCallError, skill_uri,
};
pub use composition::{
    BUILT_IN, BindingOutcome, Collision, ComposedPrompt, ComposedResource, ComposedTool,
    Composition, SkillSummary, UpstreamFailure, UpstreamStage,
};
pub use interned::{Interned, content_key};
pub use limits::{
    DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_FETCH_TIMEOUT,
    DEFAULT_KNOWLEDGE_SOURCE_CAP, DEFAULT_KNOWLEDGE_TOTAL_CAP, DEFAULT_QUESTION_TIMEOUT,
    DEFAULT_SKILL_CAP, Limits, UpstreamTimeouts,
};
pub use names::{
    MAX_TOOL_NAME, composed_name, composed_name_as, full_name, full_name_as, sanitize, shortened,
};
pub use pins::{
    ListedDefinition, Offering, PINNED_MEMBERS, PinMismatch, Pinned, body_digest,
    covered_definition, covered_offering, definition_digest, offering_digest,
};
pub use source::cache::{CachedSource, DEFAULT_CAPACITY, DEFAULT_TTL};
pub use source::crd_list::CrdSource;
pub use source::crd_watch::{WatchCounts, WatchedCluster};
pub use source::snapshot::{Document, NamedQualifier, Snapshot};
pub use source::watch_backoff::watch_backoff;
pub use source::{
    DEFAULT_PROVIDER_MAX_BODY, DocumentSource, FixtureSource, HTTP_SOURCE_TIMEOUT, HttpSource,
    ProjectDocuments, ReadOutcome, SourceError, Uncached,
};
