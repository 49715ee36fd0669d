//! The dispatcher's own check of whose task a request reaches. The gate lets no request
//! through to another caller's task (`edge/gate/tests/sessions.rs`); `asked` checks again, so
//! that a gate that one day hands it another's task still reaches no handler with it.

use axum::http::Request;

use super::*;
use crate::caller::identity::Identity;
use crate::edge::request::Checked;

fn owner() -> Identity {
    Identity::new("p".into(), Some("t"))
}

/// A task of `owner`, serving nothing.
async fn task_of(owner: &Identity) -> Arc<Task> {
    let starter = crate::tasks::tests::starter();
    let project = starter
        .compose(owner, capstan_upstream::mcp::CallerRevision::Stateless)
        .await;
    starter.start(owner.clone(), project, None, None)
}

/// A POST of `body` by `identity`, with `task` as the gate would hand it on: the session's task
/// or the caller's task without a session.
fn request(identity: Identity, task: &Arc<Task>, in_session: bool, body: &str) -> EdgeRequest {
    let (parts, ()) = Request::builder()
        .method(Method::POST)
        .uri("/mcp")
        .body(())
        .unwrap()
        .into_parts();
    EdgeRequest {
        checked: Checked {
            identity,
            session: in_session.then(|| task.clone()),
            caller_task: (!in_session).then(|| task.clone()),
            admitted: None,
        },
        parts,
        message: Some(Message::parse(body.as_bytes()).unwrap()),
    }
}

const MESSAGES: [&str; 5] = [
    r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__t","arguments":{}}}"#,
    r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    r#"{"jsonrpc":"2.0","id":3,"method":"subscriptions/listen","params":{"notifications":{}}}"#,
    r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
    r#"{"jsonrpc":"2.0","id":4,"result":{}}"#,
];

/// Every message that reaches a task — a call, a one-step method, a listen stream, a
/// cancellation, an answer — sent with another project's or another token's identity to a
/// task the owner holds, in a session or without one, is refused as another caller's; the
/// same message from the owner is not.
#[tokio::test]
async fn a_task_of_another_caller_should_reach_no_handler() {
    let owner = owner();
    let task = task_of(&owner).await;
    let others = [
        ("another token", Identity::new("p".into(), Some("u"))),
        ("another project", Identity::new("q".into(), Some("t"))),
    ];
    for in_session in [true, false] {
        for body in MESSAGES {
            for (who, other) in &others {
                let asked = asked(&request(other.clone(), &task, in_session, body));
                assert!(
                    matches!(asked, Asked::Refused(Refusal::AnotherCaller)),
                    "{who} reached the owner's task (in session: {in_session}): {body}"
                );
            }
            let asked = asked(&request(owner.clone(), &task, in_session, body));
            assert!(
                !matches!(asked, Asked::Refused(Refusal::AnotherCaller)),
                "the owner was refused its own task (in session: {in_session}): {body}"
            );
        }
    }
}
