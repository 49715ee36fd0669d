//! Field paths: JSON Pointers read as `spec.tools.mcpServers[0].name`, and the order errors are
//! listed in.

use serde_json::Value;

/// Turns the JSON Pointer of a place in `instance` into a field path (`tools[0].name`, no
/// leading dot), walking the instance so array indices and numeric keys are told apart.
pub fn pointer_to_path(instance: &Value, pointer: &str) -> String {
    field_path("", instance, pointer)
        .trim_start_matches('.')
        .to_owned()
}

/// Turns a JSON Pointer into a field path (`spec.tools.mcpServers[0].name`), walking the
/// instance so array indices and numeric keys are told apart.
pub(super) fn field_path(prefix: &str, instance: &Value, pointer: &str) -> String {
    let mut path = prefix.to_owned();
    let mut at = Some(instance);
    for token in pointer.split('/').skip(1) {
        let token = token.replace("~1", "/").replace("~0", "~");
        match at {
            Some(Value::Array(items)) => {
                path.push_str(&format!("[{token}]"));
                at = token.parse::<usize>().ok().and_then(|i| items.get(i));
            }
            other => {
                path.push('.');
                path.push_str(&token);
                at = other.and_then(|v| v.get(&token));
            }
        }
    }
    path
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
/// One segment of a field path for sorting: a key, or an index compared as a number.
pub(super) enum SortSegment {
    Key(String),
    Index(usize),
}

/// The sort key of a field path: array indices compare as numbers.
pub(super) fn path_sort_key(path: &str) -> Vec<SortSegment> {
    let mut key = Vec::new();
    for part in path.split('.') {
        let mut pieces = part.split('[');
        if let Some(name) = pieces.next() {
            key.push(SortSegment::Key(name.to_owned()));
        }
        for index in pieces {
            let index = index.trim_end_matches(']');
            key.push(match index.parse() {
                Ok(i) => SortSegment::Index(i),
                Err(_) => SortSegment::Key(index.to_owned()),
            });
        }
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_should_read_as_field_paths() {
        let instance = serde_json::json!({"name": 1, "items": [{"id": 1}], "a/b": 1, "0": 1});
        assert_eq!(pointer_to_path(&instance, ""), "");
        assert_eq!(pointer_to_path(&instance, "/name"), "name");
        assert_eq!(pointer_to_path(&instance, "/items/0/id"), "items[0].id");
        assert_eq!(pointer_to_path(&instance, "/a~1b"), "a/b");
        // A numeric key of an object is a key, not an index.
        assert_eq!(pointer_to_path(&instance, "/0"), "0");
    }
}
