//! Status codes: the outcome of every extension point.

/// What an extension point decided. Normal outcomes are codes, not errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    /// The plugin ran and the pod may go on.
    Success,
    /// An internal fault (a bug or an API failure); the pod is retried with backoff.
    Error,
    /// The pod does not fit now; preemption may help.
    Unschedulable,
    /// The pod does not fit and preemption cannot help on this node.
    UnschedulableAndUnresolvable,
    /// Permit only: the pod waits for an allow or reject.
    Wait,
    /// The plugin has nothing to do for this pod (PreFilter/PreScore: skip its
    /// Filter/Score; Bind: let the next binder bind).
    Skip,
}

/// A code with reasons, and the plugin that returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The decision.
    pub code: Code,
    /// Human-readable reasons, in Kubernetes' words.
    pub reasons: Vec<String>,
    /// The plugin that produced the status (set by the framework).
    pub plugin: &'static str,
}

impl Default for Status {
    fn default() -> Self {
        Status::success()
    }
}

impl Status {
    /// A status with `code` and one reason.
    pub fn new(code: Code, reason: impl Into<String>) -> Status {
        Status { code, reasons: vec![reason.into()], plugin: "" }
    }
    /// Success.
    pub fn success() -> Status {
        Status { code: Code::Success, reasons: Vec::new(), plugin: "" }
    }
    /// Unschedulable with `reason`.
    pub fn unschedulable(reason: impl Into<String>) -> Status {
        Status::new(Code::Unschedulable, reason)
    }
    /// UnschedulableAndUnresolvable with `reason`.
    pub fn unresolvable(reason: impl Into<String>) -> Status {
        Status::new(Code::UnschedulableAndUnresolvable, reason)
    }
    /// Error with `reason`.
    pub fn error(reason: impl Into<String>) -> Status {
        Status::new(Code::Error, reason)
    }
    /// Skip.
    pub fn skip() -> Status {
        Status { code: Code::Skip, reasons: Vec::new(), plugin: "" }
    }
    /// Wait (Permit).
    pub fn wait() -> Status {
        Status { code: Code::Wait, reasons: Vec::new(), plugin: "" }
    }
    /// Adds a reason.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Status {
        self.reasons.push(reason.into());
        self
    }
    /// Sets the plugin name.
    pub fn with_plugin(mut self, plugin: &'static str) -> Status {
        self.plugin = plugin;
        self
    }
    /// Whether the code is Success.
    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }
    /// Whether the code is Skip.
    pub fn is_skip(&self) -> bool {
        self.code == Code::Skip
    }
    /// Whether the code is Unschedulable or UnschedulableAndUnresolvable.
    pub fn is_rejected(&self) -> bool {
        matches!(self.code, Code::Unschedulable | Code::UnschedulableAndUnresolvable)
    }
    /// The reasons joined with ", ".
    pub fn message(&self) -> String {
        self.reasons.join(", ")
    }
}
