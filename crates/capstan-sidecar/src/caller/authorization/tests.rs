use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

/// A plane that grants exactly `granted` (`resource` or `resource/name`) and records every
/// question it is asked.
struct Scripted {
    granted: BTreeSet<String>,
    asked: Mutex<Vec<String>>,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
}

impl Scripted {
    fn granting(granted: &[&str]) -> Self {
        Self {
            granted: granted.iter().map(|g| (*g).to_owned()).collect(),
            asked: Mutex::default(),
            in_flight: AtomicUsize::new(0),
            most_in_flight: AtomicUsize::new(0),
        }
    }

    async fn ask(&self, question: Question) -> Result<Answer, Undecided> {
        let asked = match &question.name {
            Some(name) => format!("{}/{name}", question.resource),
            None => question.resource.to_owned(),
        };
        self.asked.lock().unwrap().push(asked.clone());
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        tokio::task::yield_now().await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        // RBAC: a rule without names grants every name.
        let allowed = self.granted.contains(&asked) || self.granted.contains(question.resource);
        Ok(Answer {
            allowed,
            at: Instant::now(),
        })
    }

    fn asked(&self) -> Vec<String> {
        let mut asked = self.asked.lock().unwrap().clone();
        asked.sort();
        asked
    }
}

/// streamco offers two tools and a prompt, searchco one tool and resources; `cap__web_search`
/// is served by searchco's tool or streamco's list.
fn offered() -> Offered {
    Offered {
        tools: vec![
            ("streamco__streams_list".into(), "streamco".into()),
            ("streamco__streams_restart".into(), "streamco".into()),
            ("searchco__search".into(), "searchco".into()),
        ],
        prompts: vec![("streamco__triage".into(), "streamco".into())],
        resources: ["searchco".to_owned()].into(),
        capabilities: vec![(
            "cap__web_search".into(),
            vec!["searchco__search".into(), "streamco__streams_list".into()],
        )],
    }
}

/// An authorizer holding at most `capacity` answers, for a plane nobody can reach (its cache
/// is all these tests read).
fn authorizer(capacity: usize) -> ToolAuthorizer {
    let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
    let mut registry = prometheus_client::registry::Registry::default();
    let mut authorizer = ToolAuthorizer::new(
        ControlPlane::new(config, None),
        Metrics::register(&mut registry),
        Duration::from_secs(60),
    );
    authorizer.capacity = capacity;
    authorizer
}

fn names(set: &BTreeSet<String>) -> Vec<&str> {
    set.iter().map(String::as_str).collect()
}

#[tokio::test]
async fn a_caller_granted_every_binding_should_cost_one_review() {
    let plane = Scripted::granting(&["capabilitybindings"]);
    let (withheld, _) = decide(&offered(), |q| plane.ask(q)).await.unwrap();
    assert!(withheld.is_empty(), "{withheld:?}");
    assert_eq!(plane.asked(), ["capabilitybindings"]);
}

#[tokio::test]
async fn a_caller_granted_one_tool_should_be_withheld_every_other_item() {
    let plane = Scripted::granting(&["tools/streamco__streams_list"]);
    let (withheld, _) = decide(&offered(), |q| plane.ask(q)).await.unwrap();
    assert_eq!(
        names(&withheld.tools),
        ["searchco__search", "streamco__streams_restart"],
        "the routed capability stays: one of its providers is granted"
    );
    assert_eq!(names(&withheld.prompts), ["streamco__triage"]);
    assert_eq!(names(&withheld.bindings), ["searchco"]);
    assert!(withheld.tool("streamco__streams_list"));
    assert!(withheld.tool("cap__web_search"));
    assert!(!withheld.tool("streamco__streams_restart"));
    assert!(
        withheld.tool("load_skill"),
        "a built-in is not the model's to withhold"
    );
    // Widest first, then every binding, then each name left open; never a name already
    // granted by a wider answer.
    assert_eq!(
        plane.asked(),
        [
            "capabilitybindings",
            "capabilitybindings/searchco",
            "capabilitybindings/streamco",
            "prompts",
            "prompts/streamco__triage",
            "tools",
            "tools/searchco__search",
            "tools/streamco__streams_list",
            "tools/streamco__streams_restart",
        ]
    );
}

#[tokio::test]
async fn a_binding_grant_should_give_all_that_binding_offers_and_nothing_else() {
    let plane = Scripted::granting(&["capabilitybindings/searchco"]);
    let (withheld, _) = decide(&offered(), |q| plane.ask(q)).await.unwrap();
    assert_eq!(
        names(&withheld.tools),
        ["streamco__streams_list", "streamco__streams_restart"]
    );
    assert_eq!(names(&withheld.prompts), ["streamco__triage"]);
    assert!(withheld.bindings.is_empty());
    assert!(
        !plane.asked().contains(&"tools/searchco__search".to_owned()),
        "a tool its binding grants is not asked by name"
    );
}

#[tokio::test]
async fn a_routed_capability_should_be_withheld_when_every_provider_is() {
    let plane = Scripted::granting(&["prompts", "tools/streamco__streams_restart"]);
    let (withheld, _) = decide(&offered(), |q| plane.ask(q)).await.unwrap();
    assert_eq!(
        names(&withheld.tools),
        [
            "cap__web_search",
            "searchco__search",
            "streamco__streams_list"
        ]
    );
    assert!(withheld.prompts.is_empty(), "all prompts are granted");
}

#[tokio::test]
async fn a_plane_that_cannot_be_asked_should_decide_nothing() {
    let unavailable = |_question: Question| async {
        Err(Undecided {
            project: "acme".into(),
            message: "connection refused".into(),
        })
    };
    let undecided = decide(&offered(), unavailable).await.unwrap_err();
    assert_eq!(undecided.project, "acme");
}

#[tokio::test]
async fn a_decision_should_be_as_old_as_its_oldest_answer() {
    let old = Instant::now();
    let young = old + Duration::from_secs(30);
    let ask = |question: Question| async move {
        Ok(Answer {
            allowed: question.name.as_deref() == Some("streamco"),
            at: if question.name.is_some() { old } else { young },
        })
    };
    let (_, at) = decide(&offered(), ask).await.unwrap();
    assert_eq!(at, old);
}

/// A first list of 300 tools nobody granted wholesale asks each name, never more than
/// `REVIEWS_IN_FLIGHT` at once.
#[tokio::test]
async fn the_reviews_of_a_large_composition_should_be_bounded_in_flight() {
    let offered = Offered {
        tools: (0..300)
            .map(|i| (format!("t{i}"), format!("b{}", i % 30)))
            .collect(),
        ..Offered::default()
    };
    let plane = Scripted::granting(&["tools/t7"]);
    let (withheld, _) = decide(&offered, |q| plane.ask(q)).await.unwrap();
    assert_eq!(withheld.tools.len(), 299);
    assert_eq!(plane.asked().len(), 1 + 2 + 30 + 300);
    let most = plane.most_in_flight.load(Ordering::SeqCst);
    assert!(
        most > 1 && most <= REVIEWS_IN_FLIGHT,
        "at most {REVIEWS_IN_FLIGHT} in flight, concurrently: {most}"
    );
}

#[test]
fn the_answers_cache_should_stay_bounded_and_expire_at_the_ttl() {
    let authorizer = authorizer(2);
    let now = Instant::now();
    let key = [1u8; 32];
    let answer = |allowed, at| Answer { allowed, at };
    authorizer.remember(key, Question::all(TOOLS), answer(true, now));
    authorizer.remember(
        key,
        Question::all(PROMPTS),
        answer(false, now + Duration::from_secs(1)),
    );
    authorizer.remember(
        key,
        Question::all(BINDINGS),
        answer(true, now + Duration::from_secs(2)),
    );
    assert_eq!(authorizer.answers.lock().unwrap().len(), 2);
    assert!(
        authorizer
            .cached(&key, &Question::all(TOOLS), now)
            .is_none()
    );
    let prompts = authorizer
        .cached(&key, &Question::all(PROMPTS), now)
        .unwrap();
    assert!(!prompts.allowed);
    let later = now + Duration::from_secs(61);
    assert!(
        authorizer
            .cached(&key, &Question::all(PROMPTS), later)
            .is_none(),
        "an answer lives less than the TTL"
    );
    assert!(
        authorizer
            .cached(&[2u8; 32], &Question::all(BINDINGS), now)
            .is_none(),
        "another caller's answer is not this one's"
    );
}

/// A full cache of live answers sheds its oldest quarter at once, then takes answers without
/// another pass until it is full again.
#[test]
fn a_full_cache_of_live_answers_should_shed_its_oldest_quarter() {
    let authorizer = authorizer(8);
    let start = Instant::now();
    let key = [1u8; 32];
    let at = |i: u64| start + Duration::from_millis(i);
    for i in 0..8 {
        authorizer.remember(
            key,
            Question::named(TOOLS, &format!("t{i}")),
            Answer {
                allowed: true,
                at: at(i),
            },
        );
    }
    authorizer.remember(
        key,
        Question::named(TOOLS, "t8"),
        Answer {
            allowed: true,
            at: at(8),
        },
    );
    let kept: BTreeSet<String> = authorizer
        .answers
        .lock()
        .unwrap()
        .keys()
        .filter_map(|(_, q)| q.name.clone())
        .collect();
    assert_eq!(
        kept.into_iter().collect::<Vec<_>>(),
        ["t3", "t4", "t5", "t6", "t7", "t8"],
        "the oldest quarter and its cut-off went; the newcomer is in"
    );
}

/// A binding requiring per-caller authorization, on a sidecar without it: everything it offers
/// is withheld, the rest is not, and a routed capability keeps the provider that is left.
#[test]
fn a_binding_requiring_authorization_should_have_all_it_offers_withheld() {
    let offered = offered();
    let streamco = Withheld::of_bindings(&offered, &BTreeSet::from(["streamco"]));
    assert_eq!(
        streamco.tools,
        BTreeSet::from([
            "streamco__streams_list".to_owned(),
            "streamco__streams_restart".to_owned()
        ]),
        "searchco's tool and the capability it still serves stay"
    );
    assert_eq!(
        streamco.prompts,
        BTreeSet::from(["streamco__triage".to_owned()])
    );
    assert!(streamco.bindings.is_empty(), "streamco offers no resources");
    let both = Withheld::of_bindings(&offered, &BTreeSet::from(["streamco", "searchco"]));
    assert!(
        !both.tool("cap__web_search"),
        "no provider of the capability is left"
    );
    assert!(!both.binding("searchco"));
    assert!(Withheld::of_bindings(&offered, &BTreeSet::new()).is_empty());
}
