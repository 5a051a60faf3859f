//! Field-addressed validation errors, in the shape upstream's field.ErrorList prints them.

use std::fmt;

/// One problem with one field: `path` is the full dotted/indexed path
/// (`profiles[0].pluginConfig[1].args.bindTimeoutSeconds`), `reason` says what is wrong and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub reason: String,
}

impl FieldError {
    pub fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            reason: reason.into(),
        }
    }

    /// The same error under a parent path (`args` + `bindTimeoutSeconds` -> `args.bindTimeoutSeconds`).
    pub fn under(mut self, parent: &str) -> Self {
        self.path = join_path(parent, &self.path);
        self
    }
}

/// Joins a parent path and a child path; a child starting with `[` is an index and takes no dot.
pub(crate) fn join_path(parent: &str, child: &str) -> String {
    match (parent.is_empty(), child.is_empty()) {
        (true, _) => child.to_string(),
        (_, true) => parent.to_string(),
        _ if child.starts_with('[') => format!("{parent}{child}"),
        _ => format!("{parent}.{child}"),
    }
}

impl fmt::Display for FieldError {
    /// `path: reason`; just `reason` for errors about the whole file (empty path).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.reason)
        } else {
            write!(f, "{}: {}", self.path, self.reason)
        }
    }
}

impl std::error::Error for FieldError {}
