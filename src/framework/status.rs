//! `Status` and `Code`: what running a plugin returns (upstream's `Status`, in
//! `pkg/scheduler/framework/interface.go`). Re-exported by [`super::interface`].

use std::fmt;
use std::sync::Arc;

/// The outcome class of running a plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Code {
    /// The plugin ran correctly and found the pod schedulable (or did its job).
    #[default]
    Success,
    /// An internal error: the scheduling attempt fails, the pod is retried with backoff.
    Error,
    /// The pod does not fit, but preemption might help.
    Unschedulable,
    /// The pod does not fit and preemption would not help.
    UnschedulableAndUnresolvable,
    /// Permit: the pod waits.
    Wait,
    /// PreFilter/PreScore: the plugin has nothing to do for this pod; its coupled
    /// Filter/Score is skipped. Bind: this plugin does not bind this pod.
    Skip,
    /// The pod waits for something outside the scheduler (like Unschedulable, but only the
    /// plugin's own events requeue it).
    Pending,
}

impl Code {
    /// Upstream's `Code.String()`.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Success => "Success",
            Code::Error => "Error",
            Code::Unschedulable => "Unschedulable",
            Code::UnschedulableAndUnresolvable => "UnschedulableAndUnresolvable",
            Code::Wait => "Wait",
            Code::Skip => "Skip",
            Code::Pending => "Pending",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of running a plugin: a code, human-readable reasons and the plugin that produced it.
/// A success status allocates nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Status {
    code: Code,
    reasons: Vec<String>,
    plugin: Option<Arc<str>>,
}

impl Status {
    pub const fn success() -> Self {
        Status {
            code: Code::Success,
            reasons: Vec::new(),
            plugin: None,
        }
    }

    /// A status with `code` and one reason (no reason when `reason` is empty).
    pub fn new(code: Code, reason: impl Into<String>) -> Self {
        let reason = reason.into();
        let reasons = if reason.is_empty() {
            Vec::new()
        } else {
            vec![reason]
        };
        Status {
            code,
            reasons,
            plugin: None,
        }
    }

    pub fn with_reasons(code: Code, reasons: Vec<String>) -> Self {
        Status {
            code,
            reasons,
            plugin: None,
        }
    }

    pub fn code_only(code: Code) -> Self {
        Status {
            code,
            reasons: Vec::new(),
            plugin: None,
        }
    }

    pub fn error(message: impl Into<String>) -> Self {
        Status::new(Code::Error, message)
    }

    pub fn unschedulable(reason: impl Into<String>) -> Self {
        Status::new(Code::Unschedulable, reason)
    }

    pub fn unresolvable(reason: impl Into<String>) -> Self {
        Status::new(Code::UnschedulableAndUnresolvable, reason)
    }

    pub fn skip() -> Self {
        Status::code_only(Code::Skip)
    }

    pub fn code(&self) -> Code {
        self.code
    }

    pub fn reasons(&self) -> &[String] {
        &self.reasons
    }

    /// The reasons joined with `", "` (upstream's `Message()`).
    pub fn message(&self) -> String {
        self.reasons.join(", ")
    }

    /// The plugin that returned this status, when the runtime recorded it.
    pub fn plugin(&self) -> Option<&str> {
        self.plugin.as_deref()
    }

    pub fn with_plugin(mut self, plugin: impl Into<Arc<str>>) -> Self {
        self.plugin = Some(plugin.into());
        self
    }

    pub fn set_plugin(&mut self, plugin: impl Into<Arc<str>>) {
        self.plugin = Some(plugin.into());
    }

    pub fn append_reason(&mut self, reason: impl Into<String>) {
        self.reasons.push(reason.into());
    }

    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }

    pub fn is_wait(&self) -> bool {
        self.code == Code::Wait
    }

    pub fn is_skip(&self) -> bool {
        self.code == Code::Skip
    }

    /// Unschedulable, UnschedulableAndUnresolvable or Pending (upstream's `IsRejected`).
    pub fn is_rejected(&self) -> bool {
        matches!(
            self.code,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable | Code::Pending
        )
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.reasons.is_empty() {
            f.write_str(self.code.as_str())
        } else {
            f.write_str(&self.message())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_basics() {
        let s = Status::success();
        assert!(s.is_success());
        assert_eq!(s.message(), "");
        let s = Status::with_reasons(Code::Unschedulable, vec!["a".into(), "b".into()])
            .with_plugin("P");
        assert!(s.is_rejected());
        assert_eq!(s.message(), "a, b");
        assert_eq!(s.plugin(), Some("P"));
        assert!(Status::code_only(Code::Pending).is_rejected());
        assert!(!Status::error("x").is_rejected());
        assert!(Status::new(Code::Error, "").reasons().is_empty());
    }
}
