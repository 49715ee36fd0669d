//! Which binding keeps a name two bindings contest: the older one.

/// Where a binding stands when bindings contest a name: its creation time (seconds since the
/// epoch; none sorts first), then its name, since timestamps have one-second resolution.
pub type FirstWinsKey = (Option<i64>, String);

/// The [`FirstWinsKey`] of a binding's metadata. The crd source orders documents by it and the
/// controller's probe decides collisions by it, so both agree on who keeps a contested name.
pub fn first_wins_key(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> FirstWinsKey {
    (
        meta.creation_timestamp.as_ref().map(|t| t.0.as_second()),
        meta.name.clone().unwrap_or_default(),
    )
}

/// The order in which bindings win a contested name: by [`first_wins_key`], the older first.
pub fn first_wins_order(
    a: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    b: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> std::cmp::Ordering {
    first_wins_key(a).cmp(&first_wins_key(b))
}

#[cfg(test)]
mod first_wins_tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn meta(name: &str, created: Option<i64>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            creation_timestamp: created
                .map(|s| Time(Timestamp::from_second(s).unwrap_or(Timestamp::UNIX_EPOCH))),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn the_older_binding_should_win_and_the_name_break_a_tie() {
        use std::cmp::Ordering::{Greater, Less};
        assert_eq!(
            first_wins_order(&meta("zeta", Some(10)), &meta("alpha", Some(20))),
            Less
        );
        assert_eq!(
            first_wins_order(&meta("beta", Some(10)), &meta("alpha", Some(10))),
            Greater
        );
        assert_eq!(
            first_wins_key(&meta("a", Some(7))),
            (Some(7), "a".to_owned())
        );
    }
}
