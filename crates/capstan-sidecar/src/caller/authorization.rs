//! Which of a composition's tools, prompts and resources one caller may use, decided by the
//! project's own RBAC (docs/authorization.md): SelfSubjectAccessReviews asked with the
//! caller's token, verb `use`, on the virtual resources `tools` and `prompts` named by their
//! composed names, and on `capabilitybindings` named by the binding — the grant of all a
//! binding offers. The widest question is asked first, so a caller granted everything costs
//! one review; the rest are asked concurrently, at most [`REVIEWS_IN_FLIGHT`] at a time.
//! Answers are cached per (caller, question) for the caller check's TTL, bounded; what a caller
//! may not use of one composition is a [`Withheld`], which the task keeps beside the
//! composition it was decided for (`task/authorized.rs`).

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use capstan_api::CallerAuthorization;
use capstan_compose::composer::Composed;
use capstan_compose::source::Snapshot;
use capstan_core::control_plane::ControlPlane;
use capstan_platform::{AccessReviewer, ApiFailure};
use futures::{StreamExt as _, TryStreamExt as _};
use tracing::warn;

use self::flight::Flights;
use crate::caller::identity::Identity;
use crate::observe::metrics::Metrics;

/// The verb every grant of this model uses.
pub const USE: &str = "use";
/// The virtual resource a tool is granted on, named by its composed name.
pub const TOOLS: &str = "tools";
/// The virtual resource a prompt is granted on, named by its composed name.
pub const PROMPTS: &str = "prompts";
/// The real resource a binding's whole offering is granted on, named by the binding.
pub const BINDINGS: &str = "capabilitybindings";

/// Reviews one decision asks at once: enough that a first list of a few hundred tools takes a
/// few round trips, few enough that one caller's first list is no burst on the plane.
pub const REVIEWS_IN_FLIGHT: usize = 16;

/// Answers kept at most (one per caller and question): 300 tools for 200 callers.
pub const ANSWERS_CAPACITY: usize = 65_536;

/// Whether a caller's tools are decided per caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ToolAuthorizationMode {
    /// Every caller the project admits uses every tool, prompt and resource it composes (the
    /// behaviour before per-tool authorization; the default, so no upgrade loses a caller its
    /// tools).
    #[default]
    Off,
    /// Each caller uses what the project's RBAC grants it (`use` on `tools`, `prompts`,
    /// `capabilitybindings`); the caller check must be `sar`.
    Rbac,
}

/// One question about a caller: may it `use` this resource, named or — without a name —
/// every object of it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Question {
    /// `tools`, `prompts` or `capabilitybindings`.
    pub resource: &'static str,
    /// The object named; `None` asks for all of them.
    pub name: Option<String>,
}

impl Question {
    fn all(resource: &'static str) -> Self {
        Self {
            resource,
            name: None,
        }
    }

    fn named(resource: &'static str, name: &str) -> Self {
        Self {
            resource,
            name: Some(name.to_owned()),
        }
    }
}

/// The plane could not be asked: nothing is decided, so nothing is served (fail closed).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "project {project}: the project's control plane could not be asked which tools this caller \
     may use ({message}); nothing was served, retry later"
)]
pub struct Undecided {
    /// The project named.
    pub project: String,
    /// Why.
    pub message: String,
}

/// What one caller may not use of one composition; empty for a caller granted everything.
/// Made for one composition (its items are that composition's names) and kept beside it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Withheld {
    /// Composed tool names, `cap__*` tools among them.
    pub tools: BTreeSet<String>,
    /// Composed prompt names.
    pub prompts: BTreeSet<String>,
    /// Bindings whose resources and templates the caller may not use.
    pub bindings: BTreeSet<String>,
}

impl Withheld {
    /// Whether the caller may use the tool named `name` (a name this composition does not
    /// offer is not withheld: it is unknown, and refused as such).
    pub fn tool(&self, name: &str) -> bool {
        !self.tools.contains(name)
    }

    /// Whether the caller may use the prompt named `name`.
    pub fn prompt(&self, name: &str) -> bool {
        !self.prompts.contains(name)
    }

    /// Whether the caller may use the resources of `binding`.
    pub fn binding(&self, binding: &str) -> bool {
        !self.bindings.contains(binding)
    }

    /// Whether nothing is withheld.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty() && self.prompts.is_empty() && self.bindings.is_empty()
    }

    /// Everything `offered` holds of `bindings`, withheld (and each routed capability left
    /// with no usable provider).
    pub fn of_bindings(offered: &Offered, bindings: &BTreeSet<&str>) -> Self {
        let of = |pairs: &[(String, String)]| -> BTreeSet<String> {
            pairs
                .iter()
                .filter(|(_, b)| bindings.contains(b.as_str()))
                .map(|(name, _)| name.clone())
                .collect()
        };
        let mut withheld = Self {
            tools: of(&offered.tools),
            prompts: of(&offered.prompts),
            bindings: offered
                .resources
                .iter()
                .filter(|b| bindings.contains(b.as_str()))
                .cloned()
                .collect(),
        };
        withheld.withhold_unusable_capabilities(offered);
        withheld
    }

    /// A routed capability is the caller's when one of its providers is: withholds each whose
    /// candidates are all withheld. Its candidates are filtered by the same sets before any is
    /// scored (`task/call/routed.rs`).
    fn withhold_unusable_capabilities(&mut self, offered: &Offered) {
        for (tool, candidates) in &offered.capabilities {
            if candidates.iter().all(|c| self.tools.contains(c)) {
                self.tools.insert(tool.clone());
            }
        }
    }
}

/// What a sidecar without per-tool authorization withholds from every caller of `composed`
/// (made from `snapshot`): everything of the bindings whose `spec.callerAuthorization` is
/// `Required` (docs/authorization.md) — for most compositions, nothing.
pub fn without_authorization(composed: &Composed, snapshot: &Snapshot) -> Withheld {
    let requiring: BTreeSet<&str> = snapshot
        .documents
        .iter()
        .filter(|d| d.spec.caller_authorization == Some(CallerAuthorization::Required))
        .map(|d| d.binding.as_str())
        .collect();
    if requiring.is_empty() {
        return Withheld::default();
    }
    Withheld::of_bindings(&Offered::of(composed), &requiring)
}

/// What a composition offers that a caller is authorized for, by name and binding.
#[derive(Debug, Default)]
pub struct Offered {
    /// Provider tools: composed name, binding.
    pub tools: Vec<(String, String)>,
    /// Prompts: composed name, binding.
    pub prompts: Vec<(String, String)>,
    /// Bindings offering resources or templates.
    pub resources: BTreeSet<String>,
    /// Routed capabilities: their `cap__*` tool and their composed candidates' tools.
    pub capabilities: Vec<(String, Vec<String>)>,
}

impl Offered {
    /// What `composed` offers. Built-ins (`load_skill`, the base platform tools) are not
    /// among it: they are every admitted caller's (docs/authorization.md).
    pub fn of(composed: &Composed) -> Self {
        let composition = &composed.composition;
        Self {
            tools: composition
                .tools
                .iter()
                .map(|t| (t.name.clone(), t.binding.clone()))
                .collect(),
            prompts: composition
                .prompts
                .iter()
                .map(|p| (p.name.clone(), p.binding.clone()))
                .collect(),
            resources: composition
                .resources
                .iter()
                .map(|r| r.binding.clone())
                .collect(),
            capabilities: composed
                .capabilities()
                .map(|c| {
                    let candidates = c.candidates.iter().filter(|c| c.composed);
                    (
                        c.tool.name.to_string(),
                        candidates.map(|c| c.tool.clone()).collect(),
                    )
                })
                .collect(),
        }
    }

    fn bindings(&self) -> BTreeSet<&str> {
        let tools = self.tools.iter().map(|(_, b)| b.as_str());
        let prompts = self.prompts.iter().map(|(_, b)| b.as_str());
        tools
            .chain(prompts)
            .chain(self.resources.iter().map(String::as_str))
            .collect()
    }
}

/// An answer and when the plane gave it.
#[derive(Clone, Copy, Debug)]
pub struct Answer {
    /// Whether the caller may.
    pub allowed: bool,
    /// When the plane said so.
    pub at: Instant,
}

/// Decides what `offered` withholds from a caller whose questions `ask` answers: the widest
/// question first (all bindings: everything), then all tools, all prompts and each binding,
/// then each name the answers so far leave open — each round concurrently, at most
/// [`REVIEWS_IN_FLIGHT`] at a time. Also gives the time of the oldest answer used: the
/// decision is as old as it.
pub async fn decide<F, Fut>(offered: &Offered, ask: F) -> Result<(Withheld, Instant), Undecided>
where
    F: Fn(Question) -> Fut,
    Fut: Future<Output = Result<Answer, Undecided>>,
{
    let everything = ask(Question::all(BINDINGS)).await?;
    let mut oldest = everything.at;
    if everything.allowed {
        return Ok((Withheld::default(), oldest));
    }
    let mut round: Vec<Question> = vec![Question::all(TOOLS), Question::all(PROMPTS)];
    round.extend(
        offered
            .bindings()
            .into_iter()
            .map(|b| Question::named(BINDINGS, b)),
    );
    let answered = asked(round, &ask).await?;
    oldest = oldest.min(answered.oldest);
    let all_tools = answered.allowed(&Question::all(TOOLS));
    let all_prompts = answered.allowed(&Question::all(PROMPTS));
    let binding = |b: &str| answered.allowed(&Question::named(BINDINGS, b));
    let open_tools = offered
        .tools
        .iter()
        .filter(|(_, b)| !all_tools && !binding(b))
        .map(|(name, _)| Question::named(TOOLS, name));
    let open_prompts = offered
        .prompts
        .iter()
        .filter(|(_, b)| !all_prompts && !binding(b))
        .map(|(name, _)| Question::named(PROMPTS, name));
    let named = asked(open_tools.chain(open_prompts).collect(), &ask).await?;
    oldest = oldest.min(named.oldest);
    let granted = |question: Question| named.allowed(&question);
    let mut withheld = Withheld::default();
    for (name, b) in &offered.tools {
        if !all_tools && !binding(b) && !granted(Question::named(TOOLS, name)) {
            withheld.tools.insert(name.clone());
        }
    }
    for (name, b) in &offered.prompts {
        if !all_prompts && !binding(b) && !granted(Question::named(PROMPTS, name)) {
            withheld.prompts.insert(name.clone());
        }
    }
    withheld.bindings = offered
        .resources
        .iter()
        .filter(|b| !binding(b))
        .cloned()
        .collect();
    withheld.withhold_unusable_capabilities(offered);
    Ok((withheld, oldest))
}

/// The answers to one round of questions.
struct Round {
    answers: HashMap<Question, bool>,
    oldest: Instant,
}

impl Round {
    fn allowed(&self, question: &Question) -> bool {
        self.answers.get(question).copied().unwrap_or(false)
    }
}

/// Asks `questions`, at most [`REVIEWS_IN_FLIGHT`] at a time; the first failure fails all.
async fn asked<F, Fut>(questions: Vec<Question>, ask: &F) -> Result<Round, Undecided>
where
    F: Fn(Question) -> Fut,
    Fut: Future<Output = Result<Answer, Undecided>>,
{
    let answers: Vec<(Question, Answer)> = futures::stream::iter(questions)
        .map(|question| async move {
            let answer = ask(question.clone()).await?;
            Ok::<_, Undecided>((question, answer))
        })
        .buffer_unordered(REVIEWS_IN_FLIGHT)
        .try_collect()
        .await?;
    let oldest = answers
        .iter()
        .map(|(_, answer)| answer.at)
        .min()
        .unwrap_or_else(Instant::now);
    Ok(Round {
        answers: answers
            .into_iter()
            .map(|(question, answer)| (question, answer.allowed))
            .collect(),
        oldest,
    })
}

/// Asks the project's planes, with each caller's token, what it may use; answers cached per
/// (caller, question) for `ttl`.
pub struct ToolAuthorizer {
    plane: ControlPlane,
    metrics: Metrics,
    ttl: Duration,
    capacity: usize,
    answers: Mutex<HashMap<([u8; 32], Question), Answer>>,
    /// Reviews in flight: one per (caller, question), however many tasks ask at once.
    flights: Flights<([u8; 32], Question), Answer>,
}

impl ToolAuthorizer {
    /// An authorizer asking `plane`'s projects, reusing an answer for `ttl` (the caller
    /// check's), counting reviews in `metrics`.
    pub fn new(plane: ControlPlane, metrics: Metrics, ttl: Duration) -> Self {
        Self {
            plane,
            metrics,
            ttl,
            capacity: ANSWERS_CAPACITY,
            answers: Mutex::new(HashMap::new()),
            flights: Flights::default(),
        }
    }

    /// How long a decision lives: its oldest answer is asked again after it.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// What `offered` withholds from `identity`, and when the oldest answer it rests on was
    /// given. A caller without a token is withheld everything (the caller check refuses one
    /// before this is asked).
    pub async fn withheld(
        &self,
        identity: &Identity,
        offered: &Offered,
    ) -> Result<(Withheld, Instant), Undecided> {
        let Some(token) = identity.token() else {
            return Ok((everything(offered), Instant::now()));
        };
        let key = identity.fingerprint();
        let reviewer = tokio::sync::OnceCell::new();
        let project = identity.project.as_str();
        let ask = |question: Question| {
            let reviewer = &reviewer;
            async move {
                if let Some(answer) = self.cached(&key, &question, Instant::now()) {
                    return Ok(answer);
                }
                let flight = (key, question.clone());
                self.flights
                    .once(&flight, || {
                        self.review(reviewer, project, token, key, question)
                    })
                    .await
            }
        };
        decide(offered, ask).await
    }

    /// Asks the plane `question` as the caller holding `token` (through `reviewer`, made on
    /// first use), counts and remembers the answer.
    async fn review(
        &self,
        reviewer: &tokio::sync::OnceCell<AccessReviewer>,
        project: &str,
        token: &str,
        key: [u8; 32],
        question: Question,
    ) -> Result<Answer, Undecided> {
        let reviewer = reviewer
            .get_or_try_init(|| async { AccessReviewer::new(&self.plane, project, token) })
            .await
            .map_err(|failure| self.failed(project, &failure))?;
        let allowed = match reviewer
            .may(USE, question.resource, question.name.as_deref())
            .await
        {
            Ok(allowed) => allowed,
            // A token the plane does not know is an answer too: it may use nothing.
            Err(ApiFailure::Forbidden { .. }) => false,
            Err(failure) => return Err(self.failed(project, &failure)),
        };
        self.metrics
            .access_review(if allowed { "allowed" } else { "denied" });
        let answer = Answer {
            allowed,
            at: Instant::now(),
        };
        self.remember(key, question, answer);
        Ok(answer)
    }

    fn failed(&self, project: &str, failure: &ApiFailure) -> Undecided {
        self.metrics.access_review("error");
        warn!(%project, error = %failure, "tool authorization: the project's control plane could not be asked");
        Undecided {
            project: project.to_owned(),
            message: failure.to_string(),
        }
    }

    fn cached(&self, key: &[u8; 32], question: &Question, now: Instant) -> Option<Answer> {
        let answers = self.answers.lock().ok()?;
        answers
            .get(&(*key, question.clone()))
            .filter(|answer| now.saturating_duration_since(answer.at) < self.ttl)
            .copied()
    }

    fn remember(&self, key: [u8; 32], question: Question, answer: Answer) {
        let Ok(mut answers) = self.answers.lock() else {
            return;
        };
        let entry = (key, question);
        if answers.len() >= self.capacity && !answers.contains_key(&entry) {
            // Expired answers first; then, if every answer is live, the oldest quarter at once:
            // a full cache costs one pass per quarter of its capacity, not one per answer (a
            // first list of hundreds of names would otherwise scan it hundreds of times).
            let ttl = self.ttl;
            answers.retain(|_, kept| answer.at.saturating_duration_since(kept.at) < ttl);
            if answers.len() >= self.capacity {
                let mut times: Vec<Instant> = answers.values().map(|kept| kept.at).collect();
                let quarter = times.len() / 4;
                let (_, cutoff, _) = times.select_nth_unstable(quarter);
                let cutoff = *cutoff;
                answers.retain(|_, kept| kept.at > cutoff);
            }
        }
        answers.insert(entry, answer);
    }
}

/// All that `offered` holds, withheld.
fn everything(offered: &Offered) -> Withheld {
    Withheld {
        tools: offered
            .tools
            .iter()
            .map(|(name, _)| name.clone())
            .chain(offered.capabilities.iter().map(|(tool, _)| tool.clone()))
            .collect(),
        prompts: offered
            .prompts
            .iter()
            .map(|(name, _)| name.clone())
            .collect(),
        bindings: offered.resources.clone(),
    }
}

mod flight;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
