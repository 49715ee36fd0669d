//! Error chains, walked in one place: reqwest and rmcp wrap the cause that decides what a
//! failure means (the guard's refusal, a JSON error), and a log line wants the whole chain.

use std::error::Error;

/// The first error of type `T` in `error`'s source chain, `error` itself included.
pub fn find_in_chain<'a, T: Error + 'static>(error: &'a (dyn Error + 'static)) -> Option<&'a T> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(found) = error.downcast_ref::<T>() {
            return Some(found);
        }
        current = error.source();
    }
    None
}

/// An error and its sources on one line, each source once (wrappers often repeat their
/// cause's text).
pub fn chain_text(error: &(dyn Error + 'static)) -> String {
    let mut message = error.to_string();
    let mut current = error.source();
    while let Some(error) = current {
        let text = error.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        current = error.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn the_chain_should_be_searched_and_written_whole() {
        let error = Outer(std::io::Error::other("inner cause"));
        assert!(find_in_chain::<std::io::Error>(&error).is_some());
        assert!(find_in_chain::<std::fmt::Error>(&error).is_none());
        assert_eq!(chain_text(&error), "outer: inner cause");
    }
}
