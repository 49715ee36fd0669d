//! Why a request to the project's plane produced no answer (`ApiFailure`), told apart from
//! the kube error the way the tools must report it.

use thiserror::Error;

use capstan_core::error_chain::chain_text;

/// A field the apiserver named in a refusal.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Cause {
    /// The field path, as the apiserver wrote it (empty when it named none).
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

/// Why a request to the project's plane produced no answer, in the classes the tools report.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ApiFailure {
    /// The project does not serve this kind (its group, version or kind is unknown there).
    #[error("this project does not serve {kind} ({api_version})")]
    NotServed {
        /// `group/version` (or `v1`).
        api_version: String,
        /// The kind.
        kind: String,
    },
    /// The caller may not do this (401 or 403).
    #[error("{message}")]
    Forbidden {
        /// The apiserver's words.
        message: String,
    },
    /// The object does not exist.
    #[error("{message}")]
    NotFound {
        /// The apiserver's words.
        message: String,
    },
    /// The apiserver refused the object (400, 422), naming fields where it could.
    #[error("{message}")]
    Invalid {
        /// The apiserver's words.
        message: String,
        /// The fields it named.
        causes: Vec<Cause>,
    },
    /// Someone else changed the object, or owns the fields (409).
    #[error("{message}")]
    Conflict {
        /// The apiserver's words.
        message: String,
    },
    /// The plane could not be reached or failed (transport, 5xx, 429).
    #[error("{message}")]
    Unavailable {
        /// What failed.
        message: String,
    },
    /// No answer in time: for a write, its outcome is unknown.
    #[error("{message}")]
    TimedOut {
        /// What was asked.
        message: String,
    },
    /// The answer could not be read.
    #[error("{message}")]
    Malformed {
        /// What was wrong.
        message: String,
    },
}

impl ApiFailure {
    /// An `Unavailable` failure.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::Unavailable {
            message: message.into(),
        }
    }

    /// The failure a kube error stands for.
    pub fn from_kube(error: kube::Error) -> Self {
        match error {
            kube::Error::Api(status) => {
                let message = if status.message.is_empty() {
                    format!("HTTP {}: {}", status.code, status.reason)
                } else {
                    status.message.clone()
                };
                if let Some(cause) = typed_patch_cause(&message) {
                    return Self::Invalid {
                        message,
                        causes: vec![cause],
                    };
                }
                match status.code {
                    401 | 403 => Self::Forbidden { message },
                    404 => Self::NotFound { message },
                    409 => Self::Conflict { message },
                    400 | 422 => Self::Invalid {
                        causes: status
                            .details
                            .as_ref()
                            .map(|d| {
                                d.causes
                                    .iter()
                                    .map(|c| Cause {
                                        field: c.field.clone(),
                                        message: c.message.clone(),
                                    })
                                    .collect()
                            })
                            .unwrap_or_default(),
                        message,
                    },
                    _ => Self::Unavailable { message },
                }
            }
            kube::Error::SerdeError(e) => Self::Malformed {
                message: format!("the apiserver's answer could not be read: {e}"),
            },
            other => Self::Unavailable {
                message: chain_text(&other),
            },
        }
    }
}

/// Server-side apply refuses a manifest whose fields do not fit the kind's schema before
/// validation runs, with a 500 whose message names the field
/// (`failed to create typed patch object (ns/name; /v1, Kind=ConfigMap): .data: expected map,
/// got …`): that is the manifest's fault, not the plane's, so it reads as a refusal naming the
/// field.
fn typed_patch_cause(message: &str) -> Option<Cause> {
    let rest = message.strip_prefix("failed to create typed patch object")?;
    let (_, detail) = rest.split_once("): ")?;
    let (field, what) = detail.split_once(": ").unwrap_or(("", detail));
    Some(Cause {
        field: field.trim_start_matches('.').to_owned(),
        message: what.to_owned(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_typed_patch_refusal_should_name_its_field() {
        let status = kube::core::Status {
            code: 500,
            message: "failed to create typed patch object (default/bad; /v1, Kind=ConfigMap): \
                      .data: expected map, got &{[a b]}"
                .into(),
            ..kube::core::Status::default()
        };
        assert_eq!(
            ApiFailure::from_kube(kube::Error::Api(Box::new(status))),
            ApiFailure::Invalid {
                message: "failed to create typed patch object (default/bad; /v1, Kind=ConfigMap): \
                          .data: expected map, got &{[a b]}"
                    .into(),
                causes: vec![Cause {
                    field: "data".into(),
                    message: "expected map, got &{[a b]}".into()
                }],
            }
        );
        let other = kube::core::Status {
            code: 500,
            message: "etcd is down".into(),
            ..kube::core::Status::default()
        };
        assert!(matches!(
            ApiFailure::from_kube(kube::Error::Api(Box::new(other))),
            ApiFailure::Unavailable { .. }
        ));
    }
}
