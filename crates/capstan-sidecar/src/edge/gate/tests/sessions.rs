//! Sessions bound to their callers, a caller's task without a session, the places and
//! streams they hold, and what an answered `initialize` or DELETE leaves behind.

use super::*;

/// The caller of [`in_session`] and [`sessionless`] requests: project `p`, token `t`.
fn caller() -> Identity {
    Identity::new("p".into(), Some("t"))
}

/// `request` as sent by another caller: project `project`, token `token`.
fn sent_by(mut request: Request, project: &str, token: &str) -> Request {
    let headers = request.headers_mut();
    headers.insert("x-capstan-project", HeaderValue::from_str(project).unwrap());
    let bearer = format!("Bearer {token}");
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&bearer).unwrap(),
    );
    request
}

/// A task of `owner` (serving nothing) bound to session `id`, as an answered `initialize`
/// leaves it.
async fn bound(tasks: &Tasks, id: &str, owner: &Identity) -> Arc<Task> {
    let starter = crate::tasks::tests::starter();
    let project = starter
        .compose(owner, capstan_upstream::mcp::CallerRevision::Stateless)
        .await;
    let task = starter.start(owner.clone(), project, None, None);
    tasks.bind_session(id, &task).unwrap();
    task
}

async fn error_message(response: Response) -> String {
    let body = axum::body::to_bytes(response.into_body(), 1 << 16)
        .await
        .unwrap();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A session id is no key: a request naming a live session passes only for the project and
/// token the session was bound to; another token of the project, or the token in another
/// project, is refused with 403 before anything serves it. The owner's request counts as the
/// session's use (its idle clock starts again).
#[tokio::test]
async fn a_session_should_serve_only_the_caller_it_is_bound_to() {
    use tower::ServiceExt as _;
    let tasks = sessions();
    let task = bound(&tasks, "s-1", &caller()).await;
    let (router, reached) = guarded(&tasks);
    for (project, token) in [("p", "another"), ("q", "t")] {
        let request = sent_by(in_session("s-1", LIST), project, token);
        let response = router.clone().oneshot(request).await.unwrap();
        assert_eq!(
            response.status(),
            StatusCode::FORBIDDEN,
            "{project}/{token}"
        );
        assert_eq!(
            error_message(response).await,
            "this session belongs to another project or caller: the project and token must be \
             the ones sent with `initialize`"
        );
    }
    assert_eq!(
        reached.load(Ordering::SeqCst),
        0,
        "another caller was served"
    );
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let idle = task.idle();
    let response = router.oneshot(in_session("s-1", LIST)).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(reached.load(Ordering::SeqCst), 1);
    assert!(
        task.idle() < idle,
        "the owner's request did not count as use"
    );
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

/// What one caller's cap (here 1) lets through: its first request without a session starts
/// its task in one place, its next ones reuse that task and take none; with its place held, its
/// `initialize` is refused (429, naming the cap); another caller holding its one place
/// elsewhere is refused the same way and starts no task.
#[tokio::test]
async fn a_callers_task_should_take_one_place_under_its_cap() {
    use tower::ServiceExt as _;
    let tasks = capped(crate::caller::admission::Caps {
        per_caller: 1,
        ..crate::caller::admission::Caps::default()
    });
    let (router, reached) = gated(&tasks, Some(crate::tasks::tests::starter()));
    for served in 1..=2 {
        let request = sessionless(MODERN_LIST, Some("p"), "2026-07-28");
        let response = router.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "request {served}");
        assert_eq!(reached.load(Ordering::SeqCst), served);
        assert!(tasks.has_caller_task(&caller()), "request {served}");
        assert_eq!(tasks.admission().held(), 1, "request {served}");
    }
    let full = "this caller (bearer token) holds 1 sessions, tasks and streams, the most one \
                caller may (CAPSTAN_MAX_SESSIONS_PER_CALLER); end one or retry later";
    let initialize = sessionless(INITIALIZE, Some("p"), "2025-11-25");
    let response = router.clone().oneshot(initialize).await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(error_message(response).await, full);
    let other = Identity::new("p".into(), Some("u"));
    let _elsewhere = tasks.admission().admit(&other).unwrap();
    let request = sent_by(sessionless(MODERN_LIST, Some("p"), "2026-07-28"), "p", "u");
    let response = router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(error_message(response).await, full);
    assert!(!tasks.has_caller_task(&other));
    assert_eq!(
        reached.load(Ordering::SeqCst),
        2,
        "a refused request was served"
    );
    // A caller under its cap opens a session: its place is taken for the request.
    let initialize = sent_by(sessionless(INITIALIZE, Some("p"), "2025-11-25"), "p", "v");
    let response = router.oneshot(initialize).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(reached.load(Ordering::SeqCst), 3);
}

/// A session's GET stream counts against its task's stream cap (here 1) and holds a place
/// for as long as its body is open: a second stream is refused (429) while the first is
/// open, and passes once the first is read to its end and dropped.
#[tokio::test]
async fn a_sessions_stream_should_be_counted_until_its_body_ends() {
    use tower::ServiceExt as _;
    let tasks = capped(crate::caller::admission::Caps {
        streams_per_task: 1,
        ..crate::caller::admission::Caps::default()
    });
    let task = bound(&tasks, "s-1", &caller()).await;
    let (router, reached) = guarded(&tasks);
    let stream = || {
        Request::builder()
            .method(Method::GET)
            .uri("/mcp")
            .header("x-capstan-project", "p")
            .header(header::AUTHORIZATION, "Bearer t")
            .header(MCP_SESSION_ID, "s-1")
            .body(Body::empty())
            .unwrap()
    };
    let open = router.clone().oneshot(stream()).await.unwrap();
    assert_eq!(open.status(), StatusCode::OK);
    assert_eq!((task.open_streams(), tasks.admission().held()), (1, 1));
    let refused = router.clone().oneshot(stream()).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        error_message(refused).await,
        "this task has 1 streams open, the most one task may (CAPSTAN_MAX_STREAMS_PER_TASK); \
         close one before opening another"
    );
    assert_eq!(reached.load(Ordering::SeqCst), 1);
    let body = axum::body::to_bytes(open.into_body(), 1 << 16)
        .await
        .unwrap();
    assert_eq!(
        &body[..],
        b"served",
        "the stream's body was not the handler's"
    );
    assert_eq!((task.open_streams(), tasks.admission().held()), (0, 0));
    let again = router.oneshot(stream()).await.unwrap();
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(reached.load(Ordering::SeqCst), 2);
}

/// `subscriptions/listen` without a session is a stream of the caller's task: counted
/// against the task's stream cap (here 1) while it is open.
#[tokio::test]
async fn a_listen_stream_without_a_session_should_count_against_the_tasks_cap() {
    use tower::ServiceExt as _;
    let tasks = capped(crate::caller::admission::Caps {
        streams_per_task: 1,
        ..crate::caller::admission::Caps::default()
    });
    let (router, reached) = gated(&tasks, Some(crate::tasks::tests::starter()));
    let listen = || {
        let body = MODERN_LIST.replace("tools/list", "subscriptions/listen");
        sessionless(&body, Some("p"), "2026-07-28")
    };
    let open = router.clone().oneshot(listen()).await.unwrap();
    assert_eq!(open.status(), StatusCode::OK);
    let task = tasks.live_task(&caller().fingerprint()).unwrap();
    assert_eq!(task.open_streams(), 1);
    let refused = router.clone().oneshot(listen()).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reached.load(Ordering::SeqCst), 1);
    drop(open);
    assert_eq!(task.open_streams(), 0);
}

/// A stand-in for the edge, serving what the gate hands it: an `initialize` starts the
/// caller's task in the place admitted and leaves it for the gate to bind (or, with `fail`,
/// answers 500 and starts nothing); a request in a session is accepted (202).
fn serving(tasks: &Arc<Tasks>, fail: bool) -> axum::Router {
    let starter = crate::tasks::tests::starter();
    let serve: Serve = Arc::new(move |request: EdgeRequest| {
        let starter = starter.clone();
        Box::pin(async move {
            let checked = request.checked;
            // In a session (a DELETE, a notification): accepted, as the edge answers.
            if checked.session.is_some() {
                return StatusCode::ACCEPTED.into_response();
            }
            if fail {
                return StatusCode::INTERNAL_SERVER_ERROR.into_response();
            }
            let admitted = checked.admitted.unwrap();
            let project = starter
                .compose(
                    &checked.identity,
                    capstan_upstream::mcp::CallerRevision::Stateless,
                )
                .await;
            let task = starter.start(checked.identity, project, admitted.take_place(), None);
            admitted.started(&task);
            "initialized".into_response()
        })
    });
    let gate = Gate {
        tasks: tasks.clone(),
        starter: None,
        serve,
        tracing: Default::default(),
    };
    axum::Router::new().fallback(check).with_state(gate)
}

/// An answered `initialize` is bound under the id the sidecar mints and answers with: that
/// id then names the caller's task, which holds the place admitted; an `initialize` that
/// fails gets no id and leaves no place held. A DELETE accepted is answered 204, a
/// notification 202.
#[tokio::test]
async fn an_answered_initialize_should_be_bound_under_the_id_it_is_answered_with() {
    use tower::ServiceExt as _;
    let tasks = sessions();
    let initialize = || sessionless(INITIALIZE, Some("p"), "2025-11-25");
    let failed = serving(&tasks, true).oneshot(initialize()).await.unwrap();
    assert_eq!(failed.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(failed.headers().get(MCP_SESSION_ID).is_none());
    assert_eq!(tasks.admission().held(), 0);
    let router = serving(&tasks, false);
    let answered = router.clone().oneshot(initialize()).await.unwrap();
    assert_eq!(answered.status(), StatusCode::OK);
    let id = answered.headers()[MCP_SESSION_ID]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(id.len(), 32, "{id}");
    let Ok(Lookup::Bound(task)) = tasks.session(&id) else {
        panic!("session {id} is not bound");
    };
    assert!(task.owned_by(Some(&caller())));
    assert_eq!(tasks.admission().held(), 1);
    let delete = Request::builder()
        .method(Method::DELETE)
        .uri("/mcp")
        .header("x-capstan-project", "p")
        .header(header::AUTHORIZATION, "Bearer t")
        .header(MCP_SESSION_ID, &id)
        .body(Body::empty())
        .unwrap();
    // Only a DELETE's 202 becomes 204: a notification is answered 202, as MCP says.
    let notified = in_session(
        &id,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    let notified = router.clone().oneshot(notified).await.unwrap();
    assert_eq!(notified.status(), StatusCode::ACCEPTED);
    let deleted = router.oneshot(delete).await.unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
}
