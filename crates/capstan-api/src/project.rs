//! Project names: the one check every entry point applies before a project reaches a URL, a
//! cache key or a log line.
//!
//! A project is a Kubernetes object on the control plane, so its name is a DNS-1123
//! subdomain: lower-case letters, digits, `-` and `.`; labels of 1–63 characters that start
//! and end with a letter or digit; at most 253 characters. Anything else is refused, never
//! escaped into shape: a name such as `..` or `a/b` would otherwise become a path the caller
//! did not name (a dot-segment the URL parser resolves away, or another path segment).

use thiserror::Error;

/// Longest project name: the Kubernetes object-name bound.
pub const MAX_PROJECT_NAME_LEN: usize = 253;

/// Longest label of a project name (the text between dots).
pub const MAX_LABEL_LEN: usize = 63;

/// The rule, as every refusal states it.
pub const PROJECT_NAME_RULE: &str = "a project name is a Kubernetes object name (DNS-1123 \
     subdomain): lower-case letters, digits, '-' and '.', dot-separated labels of 1-63 \
     characters that start and end with a letter or digit, at most 253 characters";

/// Why a project name is refused.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProjectNameError {
    /// The name is empty.
    #[error("the project name is empty; {PROJECT_NAME_RULE}")]
    Empty,
    /// The name is longer than [`MAX_PROJECT_NAME_LEN`] bytes.
    #[error("the project name is {len} characters long; {PROJECT_NAME_RULE}")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// A character outside `[a-z0-9.-]`.
    #[error(
        "the project name {name:?} contains {found:?} at position {position}; {PROJECT_NAME_RULE}"
    )]
    Character {
        /// The name as given (escaped by `Debug`, so control characters stay visible).
        name: String,
        /// The first character refused.
        found: char,
        /// Its position, counted in characters from 0.
        position: usize,
    },
    /// Two dots in a row, or a dot at either end.
    #[error("the project name {name:?} has an empty label; {PROJECT_NAME_RULE}")]
    EmptyLabel {
        /// The name as given.
        name: String,
    },
    /// A label longer than [`MAX_LABEL_LEN`].
    #[error("the project name {name:?} has a label of {len} characters; {PROJECT_NAME_RULE}")]
    LabelTooLong {
        /// The name as given.
        name: String,
        /// The label's length.
        len: usize,
    },
    /// A label that starts or ends with `-`.
    #[error(
        "the project name {name:?} has a label {label:?} that does not start and end with a letter or digit; {PROJECT_NAME_RULE}"
    )]
    LabelEdge {
        /// The name as given.
        name: String,
        /// The offending label.
        label: String,
    },
}

/// Checks that `name` is a project name (see the module documentation).
pub fn check_project_name(name: &str) -> Result<(), ProjectNameError> {
    if name.is_empty() {
        return Err(ProjectNameError::Empty);
    }
    if let Some((position, found)) = name
        .chars()
        .enumerate()
        .find(|(_, c)| !matches!(c, 'a'..='z' | '0'..='9' | '-' | '.'))
    {
        return Err(ProjectNameError::Character {
            name: name.to_owned(),
            found,
            position,
        });
    }
    // Only ASCII from here on: bytes are characters.
    if name.len() > MAX_PROJECT_NAME_LEN {
        return Err(ProjectNameError::TooLong { len: name.len() });
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(ProjectNameError::EmptyLabel {
                name: name.to_owned(),
            });
        }
        if label.len() > MAX_LABEL_LEN {
            return Err(ProjectNameError::LabelTooLong {
                name: name.to_owned(),
                len: label.len(),
            });
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(ProjectNameError::LabelEdge {
                name: name.to_owned(),
                label: label.to_owned(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn project_names_should_be_dns_1123_subdomains() {
        for good in [
            "p",
            "demo-project",
            "a.b",
            "team-7.prod",
            "0",
            &"a".repeat(63),
            &["a"; 127].join("."),
        ] {
            assert_eq!(check_project_name(good), Ok(()), "{good}");
        }
    }

    #[test]
    fn names_that_would_move_a_url_should_be_refused_by_rule() {
        let refused = |name: &str| check_project_name(name).err();
        assert_eq!(refused(""), Some(ProjectNameError::Empty));
        for name in ["..", ".", "a..b", ".a", "a."] {
            assert_eq!(
                refused(name),
                Some(ProjectNameError::EmptyLabel {
                    name: name.to_owned()
                }),
                "{name}"
            );
        }
        assert_eq!(
            refused("a/b"),
            Some(ProjectNameError::Character {
                name: "a/b".into(),
                found: '/',
                position: 1
            })
        );
        assert_eq!(
            refused("%2e%2e"),
            Some(ProjectNameError::Character {
                name: "%2e%2e".into(),
                found: '%',
                position: 0
            })
        );
        assert_eq!(
            refused("A"),
            Some(ProjectNameError::Character {
                name: "A".into(),
                found: 'A',
                position: 0
            })
        );
        assert_eq!(
            refused("projé"),
            Some(ProjectNameError::Character {
                name: "projé".into(),
                found: 'é',
                position: 4
            })
        );
        assert_eq!(
            refused(&"a".repeat(254)),
            Some(ProjectNameError::TooLong { len: 254 })
        );
        assert_eq!(
            refused(&"a".repeat(64)),
            Some(ProjectNameError::LabelTooLong {
                name: "a".repeat(64),
                len: 64
            })
        );
        assert_eq!(
            refused("a.-b"),
            Some(ProjectNameError::LabelEdge {
                name: "a.-b".into(),
                label: "-b".into()
            })
        );
    }

    #[test]
    fn every_refusal_should_state_the_rule() {
        for name in ["", "..", "A", "a-", &"a".repeat(254), &"a".repeat(64)] {
            let message = check_project_name(name).unwrap_err().to_string();
            assert!(message.ends_with(PROJECT_NAME_RULE), "{message}");
        }
    }
}
