//! The corpus README's baseline, written apart from the crate under measurement so that its
//! figures are an outside reference: Okapi BM25 (k1 1.2, b 0.75) over one field — the server
//! name, tool name, title, annotation title, description and top-level argument names —
//! lower-cased, split at camelCase, `_` and `-`, a short stop list removed, a plural `s` or
//! `ies` stripped. The README does not publish its stop list; this one is the harness's own,
//! so its figures sit beside the README's, not in place of them.

use std::collections::HashMap;

use serde_json::Value;

const STOP: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "into", "is", "it",
    "its", "of", "on", "or", "that", "the", "this", "to", "with", "i", "me", "my", "you", "your",
    "we", "our", "what", "which", "how", "do", "does", "can", "all", "any", "please",
];

fn tokens(text: &str) -> Vec<String> {
    let mut spaced = String::new();
    let mut previous: Option<char> = None;
    for c in text.chars() {
        if previous.is_some_and(|p| p.is_lowercase() && c.is_uppercase()) {
            spaced.push(' ');
        }
        spaced.push(if c.is_alphanumeric() { c } else { ' ' });
        previous = Some(c);
    }
    spaced
        .split_whitespace()
        .map(str::to_lowercase)
        .filter(|w| !STOP.contains(&w.as_str()))
        .map(|w| {
            if let Some(stem) = w.strip_suffix("ies").filter(|s| s.len() >= 2) {
                format!("{stem}y")
            } else if w.len() > 3 && w.ends_with('s') && !w.ends_with("ss") {
                w[..w.len() - 1].to_owned()
            } else {
                w
            }
        })
        .collect()
}

/// One tool of the corpus as the baseline reads it.
pub fn document(server: &str, tool: &Value) -> Vec<String> {
    let text = |key: &str| tool.get(key).and_then(Value::as_str).unwrap_or("");
    let mut parts = vec![server.to_owned(), text("name").into(), text("title").into()];
    let annotations = tool.get("annotations");
    if let Some(title) = annotations
        .and_then(|a| a.get("title"))
        .and_then(Value::as_str)
    {
        parts.push(title.into());
    }
    parts.push(text("description").into());
    if let Some(properties) = tool
        .pointer("/inputSchema/properties")
        .and_then(Value::as_object)
    {
        parts.extend(properties.keys().cloned());
    }
    tokens(&parts.join(" "))
}

/// Okapi BM25 over token lists.
pub struct Bm25 {
    docs: Vec<HashMap<String, f32>>,
    lengths: Vec<f32>,
    average: f32,
    df: HashMap<String, f32>,
}

impl Bm25 {
    pub fn new(documents: Vec<Vec<String>>) -> Self {
        let mut df: HashMap<String, f32> = HashMap::new();
        let mut docs = Vec::new();
        let mut lengths = Vec::new();
        for document in documents {
            let mut tf: HashMap<String, f32> = HashMap::new();
            for token in &document {
                *tf.entry(token.clone()).or_default() += 1.0;
            }
            for token in tf.keys() {
                *df.entry(token.clone()).or_default() += 1.0;
            }
            lengths.push(document.len() as f32);
            docs.push(tf);
        }
        let average = lengths.iter().sum::<f32>() / lengths.len().max(1) as f32;
        Bm25 {
            docs,
            lengths,
            average,
            df,
        }
    }

    /// Every document's score for `query`.
    pub fn scores(&self, query: &str) -> Vec<f32> {
        let (k1, b) = (1.2, 0.75);
        let n = self.docs.len() as f32;
        let mut terms = tokens(query);
        terms.sort();
        terms.dedup();
        self.docs
            .iter()
            .zip(&self.lengths)
            .map(|(tf, &length)| {
                terms
                    .iter()
                    .map(|t| {
                        let (Some(&f), Some(&df)) = (tf.get(t), self.df.get(t)) else {
                            return 0.0;
                        };
                        let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                        idf * f * (k1 + 1.0) / (f + k1 * (1.0 - b + b * length / self.average))
                    })
                    .sum()
            })
            .collect()
    }
}
