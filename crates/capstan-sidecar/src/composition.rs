//! A task's composition and how it stays current: composing a caller's project
//! (`composer.rs`), the per-project document feeds live sessions share (`feeds.rs`), and a
//! live session following its composition as documents and upstream tool lists change
//! (`refresh.rs`). What a task serves of a composition is `task/served.rs`.

pub mod composer;
pub mod feeds;
pub mod refresh;
