//! Condition types and reasons written on CapabilityBinding and RouteQualifier status.

/// The `Accepted` condition: whether the spec validated and the object takes effect.
pub mod accepted {
    /// The condition type.
    pub const TYPE: &str = "Accepted";
    /// True: the spec parsed and validated.
    pub const VALIDATED: &str = "Validated";
    /// False: validation failed; the message carries the path-qualified errors.
    pub const VALIDATION_FAILED: &str = "ValidationFailed";
    /// False: a RouteQualifier beyond the 32 that take effect.
    pub const LIMIT_EXCEEDED: &str = "LimitExceeded";
    /// False: a RouteQualifier whose merge with others is contradictory; names the others.
    pub const CONFLICT: &str = "Conflict";
}

/// The `Composed` condition: whether the last composition could use everything the binding
/// declares.
pub mod composed {
    /// The condition type.
    pub const TYPE: &str = "Composed";
    /// True: every declared endpoint, tool and knowledge source was usable.
    pub const COMPOSED: &str = "Composed";
    /// False: an endpoint was refused or unreachable, a declared tool is missing, a name was
    /// already taken, or every knowledge source was lost.
    pub const COMPOSITION_DEGRADED: &str = "CompositionDegraded";
    /// False: a credential an endpoint's `auth` block asks for could not be had (a Secret
    /// missing or without consent, a token that cannot be requested), so the endpoint was not
    /// dialed; the message says what to fix (docs/upstream-auth.md).
    pub const CREDENTIAL_UNAVAILABLE: &str = "CredentialUnavailable";
    /// Unknown: the binding has not been probed yet, or probing is off.
    pub const NOT_PROBED: &str = "NotProbed";
    /// False: the spec is not accepted, so nothing of it is composed.
    pub const NOT_ACCEPTED: &str = "NotAccepted";
}

/// `Ready`: the summary an operator or a GitOps tool waits on (`kubectl wait
/// --for=condition=Ready`), derived from `Accepted` and `Composed`. When False its reason and
/// message are those of the condition that keeps the object from being ready.
pub mod ready {
    /// The condition type.
    pub const TYPE: &str = "Ready";
    /// True: accepted, and composed (a binding) or taking effect (a qualifier); a binding with
    /// the Composed probe off is ready once accepted.
    pub const READY: &str = "Ready";
}

/// `Stalled`: present, and True, only while the controller can make no progress without a
/// change — the spec is refused, or the Composed probe found the binding degraded (kstatus
/// reads the object as `Failed`). Its reason and message are the refusing condition's.
pub mod stalled {
    /// The condition type.
    pub const TYPE: &str = "Stalled";
}

/// `Reconciling`: present, and True, only while the current generation has not been fully
/// evaluated — its Composed probe is pending (kstatus reads the object as `InProgress`).
pub mod reconciling {
    /// The condition type.
    pub const TYPE: &str = "Reconciling";
}
